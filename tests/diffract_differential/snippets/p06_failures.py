"""Point 6: a kernel failing on one slice; a NaN slice."""

from dd_setup import TWO_MODELS

FAILING = (
    TWO_MODELS
    + """
@session.compute.kernel(name="picky", require_fields=["weights"], produce_fields=["picky"])
def picky(weights):
    if weights.shape[1] == 6:
        raise ValueError("picky does not like 6 columns")
    return float(weights.shape[0])
"""
)

NAN = """
from diffract import Session
session = Session(profile="ram")
g = np.random.default_rng(8)
bad = g.normal(size=(8, 6)); bad[2, 3] = np.nan
session.models.add({"good": g.normal(size=(8, 6)), "bad": bad}, model_id="n")
"""

SNIPPETS = [
    {
        "id": "p06.failing_kernel_apply",
        "what": "apply of a kernel that raises on one slice (head): raises or returns",
        "isolate": True,
        "code": FAILING
        + """
out["apply"] = catch(lambda: (session.compute.apply("picky"), "returned")[1])
""",
    },
    {
        "id": "p06.failing_kernel_stored",
        "what": "after a kernel failed on one slice: which slices hold the field",
        "isolate": True,
        "code": FAILING
        + """
catch(session.compute.apply, "picky")
d = session.results.export_metrics("picky", export_format="dict")
out["held"] = sorted(e["metadata"]["model_id"] + "/" + e["metadata"]["name"] for e in d.values() if "picky" in e["fields"])
""",
    },
    {
        "id": "p06.failing_builtin_nan_svd",
        "what": "apply stable_rank on a model with a NaN slice: raises or returns",
        "code": NAN
        + """
out["apply"] = catch(lambda: (session.compute.apply("stable_rank"), "returned")[1])
""",
    },
    {
        "id": "p06.nan_slice_frob",
        "what": "frob_norm on a NaN slice: what is stored (dict export)",
        "code": NAN
        + """
catch(session.compute.apply, "frob_norm")
d = session.results.export_metrics("frob_norm", export_format="dict")
out["frob"] = {e["metadata"]["name"]: e["fields"].get("frob_norm", "<absent>") for e in d.values()}
""",
    },
    {
        "id": "p06.nan_slice_rows",
        "what": "list export of frob_norm with a NaN slice: rows",
        "code": NAN
        + """
catch(session.compute.apply, "frob_norm")
recs = session.results.export_metrics("frob_norm", export_format="list")
out["rows"] = sorted(r["parameter_name"] for r in recs)
""",
    },
    {
        "id": "p06.nan_slice_weights_std",
        "what": "weights_std on a NaN slice",
        "code": NAN
        + """
catch(session.compute.apply, "weights_std")
d = session.results.export_metrics("weights_std", export_format="dict")
out["std"] = {e["metadata"]["name"]: e["fields"].get("weights_std", "<absent>") for e in d.values()}
""",
    },
]
