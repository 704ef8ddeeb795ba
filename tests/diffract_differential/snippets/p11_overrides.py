"""Point 11: parameter_overrides naming a parameter the model lacks."""

W = """
from diffract import Session, ParameterOverrides
session = Session(profile="ram")
g = np.random.default_rng(11)
w = {"a": g.normal(size=(8, 6)), "b": g.normal(size=(6, 4))}
"""

SNIPPETS = [
    {
        "id": "p11.override_missing_name",
        "what": "parameter_overrides for a name the model lacks",
        "code": W
        + """
out["add"] = catch(lambda: (session.models.add(w, model_id="m", parameter_overrides={"zzz": ParameterOverrides(name="renamed")}), "ok")[1])
out["names"] = sorted(p["name"] for p in session.models.parameters.list())
""",
    },
    {
        "id": "p11.override_present_and_missing",
        "what": "overrides for one present and one missing name",
        "code": W
        + """
ov = {"a": ParameterOverrides(name="first"), "missing": ParameterOverrides(name="x")}
out["add"] = catch(lambda: (session.models.add(w, model_id="m", parameter_overrides=ov), "ok")[1])
out["names"] = sorted(p["name"] for p in session.models.parameters.list())
""",
    },
    {
        "id": "p11.override_type_and_meta",
        "what": "override of a present name: type from a string and other_meta",
        "code": W
        + """
ov = {"a": ParameterOverrides(ptype="attention", other_meta={"layer_id": 3})}
session.models.add(w, model_id="m", parameter_overrides=ov)
ps = {p["name"]: p for p in session.models.parameters.list(verbose=True)}
out["type"] = ps["a"]["parameter_type"]
out["layer_id"] = ps["a"]["other_meta"].get("layer_id")
""",
    },
]
