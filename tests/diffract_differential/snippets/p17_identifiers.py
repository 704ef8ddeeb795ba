"""Point 17: the identifier alphabet for parameter names and model ids."""

W = """
from diffract import Session
session = Session(profile="ram")
g = np.random.default_rng(17)
"""


def name_snippet(char: str, slug: str) -> dict:
    """Add a slice whose name holds ``char``: accepted (and found by name), or refused."""
    name = f"a{char}b"
    return {
        "id": f"p17.name_with_{slug}",
        "what": f"a parameter name holding {char!r}",
        "code": W
        + f"""
out["add"] = catch(lambda: (session.models.add({{{name!r}: g.normal(size=(8, 6))}}, model_id="m"), "ok")[1])
out["names"] = sorted(p["name"] for p in session.models.parameters.list())
""",
    }


SNIPPETS = [
    name_snippet("/", "slash"),
    name_snippet("@", "at"),
    name_snippet(",", "comma"),
    name_snippet("[", "bracket"),
    name_snippet("]", "closing_bracket"),
    name_snippet(" ", "space"),
    {
        "id": "p17.filter_comma_name",
        "what": 'filter(param_names=["a,b"]) when "a" and "b" exist',
        "code": W
        + """
catch(session.models.add, {"a": g.normal(size=(8, 6)), "b": g.normal(size=(8, 6)), "a,b": g.normal(size=(8, 6))}, model_id="m")
out["scope"] = sorted(p["name"] for p in session.filter(param_names=["a,b"]).models.parameters.list())
""",
    },
    {
        "id": "p17.model_id_slash",
        "what": 'models.add(w, model_id="org/model")',
        "code": W
        + """
out["add"] = catch(lambda: (session.models.add({"w": g.normal(size=(8, 6))}, model_id="org/model"), "ok")[1])
out["models"] = session.models.list()
""",
    },
    {
        "id": "p17.rename_bad_id",
        "what": 'models.rename("m", "m@2")',
        "code": W
        + """
session.models.add({"w": g.normal(size=(8, 6))}, model_id="m")
out["rename"] = catch(session.models.rename, "m", "m@2")
out["models"] = session.models.list()
""",
    },
    {
        "id": "p17.ingest_aggregate_bad_context",
        "what": "ingest_aggregates with a context param holding ','",
        "code": W
        + """
session.models.add({"w": g.normal(size=(8, 6))}, model_id="m")
out["ingest"] = catch(session.results.ingest_aggregates, [{"field_name": "score", "context_models": ["m"], "context_params": ["a,b"], "value": 1.0}])
""",
    },
]
