"""Point 19: a bound flax.linen module; Session(config_path=...) with the file absent."""

FLAX = """
import jax
import flax.linen as nn
from diffract import Session
class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.relu(nn.Dense(5)(x)))
module = MLP()
variables = module.init(jax.random.PRNGKey(0), np.ones((1, 4), np.float32))
session = Session(profile="ram")
"""

SNIPPETS = [
    {
        "id": "p19.flax_bound_module",
        "what": "models.add(module.bind(variables)): names",
        "needs": ("flax",),
        "code": FLAX
        + """
out["add"] = catch(lambda: (session.models.add(module.bind(variables), model_id="flax"), "ok")[1])
out["names"] = sorted(p["name"] for p in session.models.parameters.list())
""",
    },
    {
        "id": "p19.flax_variables",
        "what": "models.add(variables) (the params mapping): names",
        "needs": ("flax",),
        "code": FLAX
        + """
out["add"] = catch(lambda: (session.models.add(variables, model_id="flax"), "ok")[1])
out["names"] = sorted(p["name"] for p in session.models.parameters.list())
""",
    },
    {
        "id": "p19.flax_bound_frob",
        "what": "frob_norm of a bound module's kernels against numpy",
        "needs": ("flax",),
        "code": FLAX
        + """
catch(session.models.add, module.bind(variables), model_id="flax")
session.compute.apply("frob_norm")
got = sorted(r["frob_norm"] for r in session.results.export_metrics("frob_norm", export_format="list"))
want = sorted(float(np.linalg.norm(np.asarray(v["kernel"]))) for v in variables["params"].values())
out["match"] = len(got) == len(want) and bool(np.allclose(got, want, rtol=1e-5))
""",
    },
    {
        "id": "p19.config_path_absent",
        "what": 'Session(config_path="absent.ini") with the file absent',
        "code": """
from diffract import Session
s = catch(Session, config_path="absent.ini")
out["session"] = s if isinstance(s, dict) else "opened"
if not isinstance(s, dict):
    s.models.add({"w": np.ones((4, 3))}, model_id="m")
    out["models"] = s.models.list()
""",
    },
    {
        "id": "p19.config_path_absent_profile",
        "what": 'Session(config_path="prod.ini", profile="ram") with the file absent',
        "code": """
from diffract import Session
s = catch(Session, config_path="prod.ini", profile="ram")
out["session"] = s if isinstance(s, dict) else "opened"
""",
    },
    {
        "id": "p19.config_path_present",
        "what": "Session(config_path=<an existing ram .ini>) (control)",
        "code": """
from diffract import Session
open("c.ini", "w").write(
    '[storage]\\nbackend = "ram"\\n\\n[metadata]\\nbackend = "sqlite"\\n\\n[metadata.sqlite]\\npath = ":memory:"\\n\\n'
    '[cache]\\nbackend = "none"\\n\\n[export]\\ndefault_export_format = "dict"\\n'
)
s = catch(Session, config_path="c.ini")
out["session"] = s if isinstance(s, dict) else "opened"
""",
    },
]
