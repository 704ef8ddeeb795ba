"""Point 7: two sessions on the same store (two notebooks, or Session() re-run in a helper)."""

W = """
g = np.random.default_rng(9)
w1 = {"w": g.normal(size=(8, 6))}
w2 = {"w": g.normal(size=(8, 6))}
"""

SNIPPETS = [
    {
        "id": "p07.two_default_sessions",
        "what": "two Session() in the same folder, each adding a model",
        "code": W
        + """
from diffract import Session
s1 = Session()
s1.models.add(w1, model_id="one")
s2 = Session()
out["second add"] = catch(lambda: (s2.models.add(w2, model_id="two"), "ok")[1])
out["s1 models"] = catch(s1.models.list)
out["s2 models"] = catch(s2.models.list)
""",
    },
    {
        "id": "p07.two_local_sessions",
        "what": 'two Session(profile="local") in the same folder, each adding a model',
        "code": W
        + """
from diffract import Session
s1 = Session(profile="local")
s1.models.add(w1, model_id="one")
s2 = catch(Session, profile="local")
out["second session"] = s2 if isinstance(s2, dict) else "opened"
if not isinstance(s2, dict):
    out["second add"] = catch(lambda: (s2.models.add(w2, model_id="two"), "ok")[1])
    out["s2 models"] = catch(s2.models.list)
out["s1 models"] = catch(s1.models.list)
""",
    },
    {
        "id": "p07.helper_rerun",
        "what": "a helper that builds Session() and adds a model, called twice",
        "code": W
        + """
from diffract import Session
def analyse(weights, mid):
    s = Session()
    s.models.add(weights, model_id=mid)
    return s.models.list()
out["first"] = catch(analyse, w1, "one")
out["second"] = catch(analyse, w2, "two")
""",
    },
    {
        "id": "p07.with_blocks_sequential",
        "what": 'two sequential `with Session(profile="local")` blocks in one folder',
        "code": W
        + """
from diffract import Session
with Session(profile="local") as s:
    s.models.add(w1, model_id="one")
def second():
    with Session(profile="local") as s:
        return s.models.list()
out["second"] = catch(second)
""",
    },
]
