"""Point 18: rename then aggregates; EraseSummary.fields; greater_dim / lower_dim; key order."""

from dd_setup import TWO_MODELS, value_of

SNIPPETS = [
    {
        "id": "p18.rename_then_aggregates",
        "what": "log_norm applied, model a renamed to z, log_norm applied again: aggregates",
        "code": TWO_MODELS
        + """
session.compute.apply("log_norm")
session.models.rename("a", "z")
session.compute.apply("log_norm")
out["aggregates"] = rows(session.results.export_aggregates("log_norm", export_format="list"))
""",
    },
    {
        "id": "p18.rename_then_apply_summary",
        "what": "the summary of apply('log_norm') after a rename",
        "code": TWO_MODELS
        + """
session.compute.apply("log_norm")
session.models.rename("a", "z")
v = session.compute.apply("log_norm")
s = getattr(v, "summary", v)
out["in_model_fields"] = list(s.in_model_fields)
""",
    },
    {
        "id": "p18.erase_summary_fields",
        "what": 'results.erase("frob_norm") summary fields and affected_uids',
        "code": TWO_MODELS
        + """
session.compute.apply("frob_norm", "stable_rank")
r = session.results.erase("frob_norm")
out["fields"] = list(r.fields)
out["affected"] = r.affected_uids
""",
    },
    {
        "id": "p18.erase_dependent_fields",
        "what": 'results.erase("weights_svals", erase_dependent_also=True) summary fields',
        "code": TWO_MODELS
        + """
session.compute.apply("stable_rank", "frob_norm")
r = session.results.erase("weights_svals", erase_dependent_also=True)
out["fields"] = list(r.fields)
left = session.results.export_metrics("frob_norm", "stable_rank", export_format="list")
out["frob left"] = sum(1 for x in left if x.get("frob_norm") is not None)
""",
    },
    {
        "id": "p18.erase_all_fields",
        "what": "results.erase(erase_all=True) summary fields after frob_norm",
        "code": TWO_MODELS
        + """
session.compute.apply("frob_norm")
r = session.results.erase(erase_all=True)
out["has frob"] = "frob_norm" in r.fields
out["has weights"] = "weights" in r.fields
""",
    },
    {
        "id": "p18.greater_lower_dim",
        "what": "greater_dim and lower_dim of an 8x6 slice",
        "code": TWO_MODELS
        + """
out["apply"] = catch(lambda: (session.compute.apply("greater_dim", "lower_dim"), "ok")[1])
"""
        + value_of("greater_dim")
        + value_of("lower_dim"),
    },
    {
        "id": "p18.list_key_order",
        "what": "list record key order with two fields",
        "code": TWO_MODELS
        + """
session.compute.apply("frob_norm", "stable_rank")
r = session.results.export_metrics("stable_rank", "frob_norm", export_format="list")[0]
out["keys"] = key_order(r)
""",
    },
    {
        "id": "p18.meta_keys",
        "what": "the meta_* keys of a list record (numpy input)",
        "code": TWO_MODELS
        + """
session.compute.apply("frob_norm")
out["meta keys"] = sorted(k for k in session.results.export_metrics("frob_norm", export_format="list")[0] if k.startswith("meta_"))
""",
    },
    {
        "id": "p18.pandas_column_order",
        "what": "pandas column order with two fields",
        "code": TWO_MODELS
        + """
session.compute.apply("frob_norm", "stable_rank")
out["columns"] = key_order(session.results.export_metrics("stable_rank", "frob_norm", export_format="pandas").columns)
""",
    },
    {
        "id": "p18.aggregate_record_keys",
        "what": "aggregate record key order",
        "code": TWO_MODELS
        + """
session.compute.apply("log_norm")
out["keys"] = list(session.results.export_aggregates("log_norm", export_format="list")[0])
""",
    },
    {
        "id": "p18.parameters_list_keys",
        "what": "parameters.list() and list(verbose=True) key order",
        "code": TWO_MODELS
        + """
out["keys"] = list(session.models.parameters.list()[0])
out["verbose keys"] = list(session.models.parameters.list(verbose=True)[0])
""",
    },
]
