"""Point 8: models.add without a model_id, twice; empty and non-string model ids."""

W = """
from diffract import Session
session = Session(profile="ram")
w = {"w": np.random.default_rng(10).normal(size=(8, 6))}
"""

SNIPPETS = [
    {
        "id": "p08.add_twice_no_id",
        "what": "models.add of the same weights twice without model_id",
        "code": W
        + """
out["first"] = catch(lambda: (session.models.add(w), "ok")[1])
out["second"] = catch(lambda: (session.models.add(w), "ok")[1])
out["models"] = len(session.models.list())
""",
    },
    {
        "id": "p08.add_two_different_no_id",
        "what": "models.add of two different weight dicts without model_id",
        "code": W
        + """
session.models.add(w)
session.models.add({"w": w["w"] * 2})
out["models"] = len(session.models.list())
out["slices"] = len(session.models.parameters.list())
""",
    },
    {
        "id": "p08.model_id_empty",
        "what": 'models.add(w, model_id="")',
        "code": W
        + """
out["add"] = catch(lambda: (session.models.add(w, model_id=""), "ok")[1])
out["models"] = len(session.models.list())
""",
    },
    {
        "id": "p08.model_id_zero",
        "what": "models.add(w, model_id=0)",
        "code": W
        + """
out["add"] = catch(lambda: (session.models.add(w, model_id=0), "ok")[1])
out["models"] = len(session.models.list())
""",
    },
    {
        "id": "p08.model_id_taken",
        "what": 'models.add(w, model_id="m") twice (control)',
        "code": W
        + """
session.models.add(w, model_id="m")
out["second"] = catch(session.models.add, w, model_id="m")
""",
    },
    {
        "id": "p08.auto_id_shape",
        "what": "an auto model id is a non-empty identifier string",
        "code": W
        + """
session.models.add(w)
mid = session.models.list()[0]
out["is str"] = isinstance(mid, str)
out["valid"] = bool(mid) and all(c.isalnum() or c in "_-." for c in mid)
""",
    },
]
