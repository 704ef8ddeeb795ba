"""Point 5: which aggregates a scope sees."""

from dd_setup import TWIN, TWO_MODELS

SNIPPETS = [
    {
        "id": "p05.head_scope_log_norm",
        "what": 'filter(param_names=["head"]).results.export_aggregates("log_norm") after a session-wide apply',
        "code": TWO_MODELS
        + """
session.compute.apply("log_norm")
recs = session.filter(param_names=["head"]).results.export_aggregates("log_norm", export_format="list")
out["records"] = len(recs)
out["contexts"] = sorted(list(r["context_models"]) for r in recs)
""",
    },
    {
        "id": "p05.model_scope_log_norm",
        "what": 'filter(model_ids=["a"]).results.export_aggregates("log_norm")',
        "code": TWO_MODELS
        + """
session.compute.apply("log_norm")
recs = session.filter(model_ids=["a"]).results.export_aggregates("log_norm", export_format="list")
out["records"] = rows(recs)
""",
    },
    {
        "id": "p05.scope_apply_then_session",
        "what": "log_norm applied in a head scope, then seen from the session and from the scope",
        "code": TWO_MODELS
        + """
session.filter(param_names=["head"]).compute.apply("log_norm")
out["session"] = rows(session.results.export_aggregates("log_norm", export_format="list"))
out["scope"] = len(session.filter(param_names=["head"]).results.export_aggregates("log_norm", export_format="list"))
""",
    },
    {
        "id": "p05.pair_agreement_from_scope",
        "what": 'l_agreement seen from filter(param_names=["head"])',
        "code": TWIN
        + """
session.compute.apply("l_agreement")
recs = session.filter(param_names=["head"]).results.export_aggregates("l_agreement", export_format="list")
out["params"] = sorted(list(r["context_params"]) for r in recs)
""",
    },
    {
        "id": "p05.export_all_contextual_scope",
        "what": 'export("log_norm", sources="all") from a model scope: contextual columns',
        "code": TWO_MODELS
        + """
session.compute.apply("log_norm")
recs = session.filter(model_ids=["b"]).results.export("log_norm", export_format="list")
out["rows"] = len(recs)
out["keys"] = sorted({k.split("@params")[0] for r in recs for k in r if k.startswith("log_norm")})
""",
    },
]
