"""Point 12: models.erase from a scope."""

from dd_setup import TWO_MODELS

THREE = (
    TWO_MODELS
    + """
session.models.add({"head": g.normal(size=(8, 6))}, model_id="c")
"""
)

SNIPPETS = [
    {
        "id": "p12.erase_in_name_scope",
        "what": 'filter(param_names=["head"]).models.erase("b"): summary and what is left of b',
        "code": TWO_MODELS
        + """
r = catch(session.filter(param_names=["head"]).models.erase, "b")
out["summary"] = {"models": list(r.models), "affected": r.affected_uids} if hasattr(r, "models") else r
out["b left"] = sorted(p["name"] for p in session.filter(model_ids=["b"]).models.parameters.list())
""",
    },
    {
        "id": "p12.erase_outside_model_scope",
        "what": 'filter(model_ids=["b"]).models.erase("c")',
        "code": THREE
        + """
r = catch(session.filter(model_ids=["b"]).models.erase, "c")
out["erase"] = {"models": list(r.models), "affected": r.affected_uids} if hasattr(r, "models") else r
out["models"] = session.models.list()
""",
    },
    {
        "id": "p12.erase_all_in_scope",
        "what": 'filter(model_ids=["a"]).models.erase(erase_all=True)',
        "code": THREE
        + """
r = catch(session.filter(model_ids=["a"]).models.erase, erase_all=True)
out["erase"] = {"models": sorted(r.models), "affected": r.affected_uids} if hasattr(r, "models") else r
out["models"] = session.models.list()
""",
    },
    {
        "id": "p12.erase_session",
        "what": 'session.models.erase("a") (control)',
        "code": TWO_MODELS
        + """
session.compute.apply("log_norm")
r = session.models.erase("a")
out["erase"] = {"models": list(r.models), "affected": r.affected_uids}
out["models"] = session.models.list()
out["aggregates"] = rows(session.results.export_aggregates("log_norm", export_format="list"))
""",
    },
]
