"""Point 10: the stored ``weights`` field."""

W = """
from diffract import Session
session = Session(profile="ram")
w = np.arange(12, dtype=np.float64).reshape(4, 3) / 10
session.models.add({"w": w}, model_id="m")
"""

SNIPPETS = [
    {
        "id": "p10.available_fields",
        "what": "parameters.list(verbose=True): available_fields before any apply",
        "code": W
        + 'out["available"] = [p["available_fields"] for p in session.models.parameters.list(verbose=True)]\n',
    },
    {
        "id": "p10.export_weights_dict",
        "what": 'export_metrics("weights", export_format="dict")',
        "code": W
        + """
d = catch(session.results.export_metrics, "weights", export_format="dict")
out["export"] = [e["fields"] for e in d.values()] if "raises" not in d else d
""",
    },
    {
        "id": "p10.export_weights_list",
        "what": 'export_metrics("weights", export_format="list")',
        "code": W
        + 'out["export"] = rows(catch(session.results.export_metrics, "weights", export_format="list"))\n',
    },
    {
        "id": "p10.export_weights_and_frob",
        "what": 'export("weights", "frob_norm", sources="metrics") after apply',
        "code": W
        + """
session.compute.apply("frob_norm")
out["export"] = rows(catch(session.results.export, "weights", "frob_norm", sources="metrics", export_format="list"))
""",
    },
]
