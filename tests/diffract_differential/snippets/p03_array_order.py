"""Point 3: order of array fields (singular values, agreements)."""

from dd_setup import TWIN, TWO_MODELS, value_of

KNOWN = """
from diffract import Session
session = Session(profile="ram")
u, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(6, 4)))
v, _ = np.linalg.qr(np.random.default_rng(2).normal(size=(4, 4)))
w = (u * np.array([1.0, 5.0, 2.0, 3.0])) @ v.T
session.models.add({"w": w}, model_id="k")
"""

SNIPPETS = [
    {
        "id": "p03.weights_svals",
        "what": "weights_svals of a 6x4 matrix with singular values 5, 3, 2, 1: their order, "
        "the values to 4 decimals (the precision is p03.weights_svals_precision)",
        "code": KNOWN
        + """
session.compute.apply("weights_svals")
r = session.results.export_metrics("weights_svals", export_format="list")[0]
out["weights_svals"] = [round(float(x), 4) for x in r["weights_svals"]]
""",
    },
    {
        "id": "p03.weights_svals_precision",
        "what": "weights_svals of the same matrix against the exact 1, 2, 3, 5 to 1e-9 and 1e-5",
        "code": KNOWN
        + """
session.compute.apply("weights_svals")
r = session.results.export_metrics("weights_svals", export_format="list")[0]
got = sorted(float(x) for x in r["weights_svals"])  # the order is p03.weights_svals
err = max(abs(x - e) / e for x, e in zip(got, [1.0, 2.0, 3.0, 5.0]))
out["within 1e-9 of the exact values"] = bool(err <= 1e-9)
out["within 1e-5 of the exact values"] = bool(err <= 1e-5)
""",
    },
    {
        "id": "p03.weights_svals_first_last",
        "what": "first and last entries of weights_svals against max/min_weights_sval",
        "code": KNOWN
        + """
session.compute.apply("weights_svals", "max_weights_sval", "min_weights_sval")
r = session.results.export_metrics("weights_svals", "max_weights_sval", "min_weights_sval", export_format="list")[0]
out["first is max"] = bool(np.isclose(r["weights_svals"][0], r["max_weights_sval"]))
out["last is min"] = bool(np.isclose(r["weights_svals"][-1], r["min_weights_sval"]))
""",
    },
    {
        "id": "p03.esd_order",
        "what": "esd (eigenvalues of W^T W) of the same matrix",
        "code": KNOWN + 'session.compute.apply("esd")\n' + value_of("esd"),
    },
    {
        "id": "p03.lsvs_alignment",
        "what": "|first left singular vector| against the largest singular value's vector",
        "code": KNOWN
        + """
session.compute.apply("weights_lsvs", "weights_svals")
r = session.results.export_metrics("weights_lsvs", "weights_svals", export_format="list")[0]
lsvs = np.asarray(r["weights_lsvs"])
out["shape"] = list(lsvs.shape)
top = np.linalg.svd(w)[0][:, 0]
out["first column is top"] = bool(np.isclose(abs(float(lsvs[:, 0] @ top)), 1.0))
""",
    },
    {
        "id": "p03.l_r_agreement",
        "what": "l_agreement and r_agreement of models a and b, per parameter",
        "code": TWIN
        + """
session.compute.apply("l_agreement", "r_agreement")
for f in ("l_agreement", "r_agreement"):
    out[f] = rows(session.results.export_aggregates(f, export_format="list"))
""",
    },
    {
        "id": "p03.max_agreement",
        "what": "max_l_agreement / max_r_agreement of models a and b",
        "code": TWIN
        + """
session.compute.apply("max_l_agreement", "max_r_agreement")
for f in ("max_l_agreement", "max_r_agreement"):
    out[f] = rows(session.results.export_aggregates(f, export_format="list"))
""",
    },
    {
        "id": "p03.avg_agreement",
        "what": "avg_l_agreement, avg_max_l_agreement, avg_max_r_agreement of a and b",
        "code": TWIN
        + """
session.compute.apply("avg_l_agreement", "avg_max_l_agreement", "avg_max_r_agreement")
for f in ("avg_l_agreement", "avg_max_l_agreement", "avg_max_r_agreement"):
    out[f] = rows(session.results.export_aggregates(f, export_format="list"))
""",
    },
    {
        "id": "p03.agreement_unpaired_name",
        "what": "l_agreement of a and b where layer.2.weight is in a only",
        "code": TWO_MODELS
        + """
out["apply"] = catch(lambda: (session.compute.apply("l_agreement"), "ok")[1])
out["params"] = sorted(list(r["context_params"]) for r in session.results.export_aggregates("l_agreement", export_format="list"))
""",
    },
    {
        "id": "p03.weights_rand_svals_order",
        "what": "weights_rand_svals: sorted ascending or descending",
        "code": KNOWN
        + """
session.compute.apply("weights_rand_svals")
s = np.asarray(session.results.export_metrics("weights_rand_svals", export_format="list")[0]["weights_rand_svals"])
out["ascending"] = bool(np.all(np.diff(s) >= 0))
out["descending"] = bool(np.all(np.diff(s) <= 0))
""",
    },
]
