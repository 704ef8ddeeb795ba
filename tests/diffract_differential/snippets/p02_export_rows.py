"""Point 2: rows of list / pandas / polars exports for parameters that hold none of the fields."""

from dd_setup import TWO_MODELS

SNIPPETS = [
    {
        "id": "p02.list_after_subscope",
        "what": "list export of frob_norm after applying it in the scope of model a only",
        "code": TWO_MODELS
        + """
session.filter(model_ids=["a"]).compute.apply("frob_norm")
recs = session.results.export_metrics("frob_norm", export_format="list")
out["rows"] = len(recs)
out["names"] = sorted(r["model_id"] + "/" + r["parameter_name"] for r in recs)
""",
    },
    {
        "id": "p02.pandas_after_subscope",
        "what": "pandas export of frob_norm after a sub-scope apply: rows and missing values",
        "code": TWO_MODELS
        + """
session.filter(model_ids=["a"]).compute.apply("frob_norm")
df = session.results.export_metrics("frob_norm", export_format="pandas")
out["rows"] = len(df)
out["missing"] = int(df["frob_norm"].isna().sum())
""",
    },
    {
        "id": "p02.polars_after_subscope",
        "what": "polars export of frob_norm after a sub-scope apply: rows and nulls",
        "code": TWO_MODELS
        + """
session.filter(model_ids=["a"]).compute.apply("frob_norm")
df = session.results.export_metrics("frob_norm", export_format="polars")
out["rows"] = df.height
out["nulls"] = int(df["frob_norm"].null_count())
""",
    },
    {
        "id": "p02.list_not_computed",
        "what": "list export of a field not computed yet (stable_rank): rows",
        "code": TWO_MODELS
        + """
r = warned(session.results.export_metrics, "stable_rank", export_format="list")
out["rows"] = len(r["value"]) if isinstance(r["value"], list) else r["value"]
out["warned"] = r["warned"]
""",
    },
    {
        "id": "p02.pandas_not_computed",
        "what": "pandas export of a field not computed yet: shape",
        "code": TWO_MODELS
        + """
df = session.results.export_metrics("stable_rank", export_format="pandas")
out["rows"] = len(df)
out["has column"] = "stable_rank" in df.columns
""",
    },
    {
        "id": "p02.dict_after_subscope",
        "what": "dict export after a sub-scope apply: entries and which hold the field",
        "code": TWO_MODELS
        + """
session.filter(model_ids=["a"]).compute.apply("frob_norm")
d = session.results.export_metrics("frob_norm", export_format="dict")
out["entries"] = len(d)
out["with field"] = sum(1 for e in d.values() if "frob_norm" in e["fields"])
""",
    },
    {
        "id": "p02.export_metrics_source",
        "what": 'export("frob_norm", sources="metrics") list rows after a sub-scope apply',
        "code": TWO_MODELS
        + """
session.filter(param_names=["head"]).compute.apply("frob_norm")
recs = session.results.export("frob_norm", sources="metrics", export_format="list")
out["rows"] = len(recs)
""",
    },
    {
        "id": "p02.two_fields_one_computed",
        "what": "list export of two fields, one computed on model a only",
        "code": TWO_MODELS
        + """
session.compute.apply("frob_norm")
session.filter(model_ids=["a"]).compute.apply("stable_rank")
recs = session.results.export_metrics("frob_norm", "stable_rank", export_format="list")
out["rows"] = len(recs)
out["with stable_rank"] = sum(1 for r in recs if r.get("stable_rank") is not None and r.get("stable_rank") == r.get("stable_rank"))
""",
    },
]
