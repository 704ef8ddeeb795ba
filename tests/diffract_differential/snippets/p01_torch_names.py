"""Point 1: how a PyTorch model's slices are named and which are extracted.

Diffract cannot run PyTorch here (see scripts/diffract_differential.py, ``DERIVED``): each
snippet's ``diffract_code`` gives Diffract the arrays its torch extractors would read.
"""

from dd_setup import value_of

W = """
g = np.random.default_rng(5)
w0, b0 = g.normal(size=(6, 8)).astype(np.float32), g.normal(size=6).astype(np.float32)
w2, b2 = g.normal(size=(4, 6)).astype(np.float32), g.normal(size=4).astype(np.float32)
from diffract import Session
session = Session(profile="ram")
"""

#: ours: a real nn.Sequential(Linear(8, 6), ReLU(), Linear(6, 4)) holding w0/b0, w2/b2
TORCH = (
    W
    + """
import torch
from torch import nn
model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 4))
with torch.no_grad():
    model[0].weight.copy_(torch.from_numpy(w0)); model[0].bias.copy_(torch.from_numpy(b0))
    model[2].weight.copy_(torch.from_numpy(w2)); model[2].bias.copy_(torch.from_numpy(b2))
state_dict = model.state_dict()
session.models.add(model, model_id="mlp")
"""
)

#: Diffract: what its torch extractors read from that model and from its state dict
DERIVED = (
    W
    + """
model = {"0": w0, "2": w2}
state_dict = {"0.weight": w0, "2.weight": w2}
session.models.add(model, model_id="mlp")
"""
)


def torch_snippet(sid: str, what: str, body: str) -> dict:
    """A snippet on the Sequential: ``body`` after the model is added."""
    return {
        "id": sid,
        "what": what,
        "needs": ("torch",),
        "code": TORCH + body,
        "diffract_code": DERIVED + body,
    }


SNIPPETS = [
    torch_snippet(
        "p01.sequential_names",
        "names of the slices of an nn.Sequential of two Linear layers",
        'out["names"] = sorted(p["name"] for p in session.models.parameters.list())\n',
    ),
    torch_snippet(
        "p01.filter_module_path",
        'filter(param_names=["0"]) then apply: what the scope holds and what is written',
        """
scope = session.filter(param_names=["0"])
out["scope names"] = sorted(p["name"] for p in scope.models.parameters.list())
r = catch(scope.compute.apply, "frob_norm")
out["apply raised"] = r if isinstance(r, dict) and "raises" in r else None
recs = session.results.export_metrics("frob_norm", export_format="list")
out["written"] = sorted(r["parameter_name"] for r in recs if r.get("frob_norm") is not None and r.get("frob_norm") == r.get("frob_norm"))
""",
    ),
    torch_snippet(
        "p01.filter_regex_module",
        'filter(param_names=["re:0.*"]) on the Sequential',
        'out["scope names"] = sorted(p["name"] for p in session.filter(param_names=["re:0.*"]).models.parameters.list())\n',
    ),
    torch_snippet(
        "p01.filter_two_modules",
        'filter(param_names=["0", "2"]).compute.apply("frob_norm") then export from the scope',
        """
scope = session.filter(param_names=["0", "2"])
scope.compute.apply("frob_norm")
recs = scope.results.export_metrics("frob_norm", export_format="list")
out["frob"] = {r["parameter_name"]: r.get("frob_norm") for r in recs}
""",
    ),
    torch_snippet(
        "p01.state_dict_names",
        "names extracted from the model's state_dict (with biases)",
        """
session.models.add(state_dict, model_id="sd")
out["names"] = sorted(p["name"] for p in session.filter(model_ids=["sd"]).models.parameters.list())
""",
    ),
    torch_snippet(
        "p01.frob_by_name",
        "frob_norm of every extracted slice, keyed by name",
        'session.compute.apply("frob_norm")\n' + value_of("frob_norm"),
    ),
    torch_snippet(
        "p01.weight_name_filter",
        'filter(param_names=["0.weight"]) on the Sequential',
        'out["scope names"] = sorted(p["name"] for p in session.filter(param_names=["0.weight"]).models.parameters.list())\n',
    ),
    {
        "id": "p01.conv_embedding_norm",
        "what": "a model with Embedding, Conv2d, LayerNorm and Linear: names and types extracted",
        "needs": ("torch",),
        "code": W
        + """
import torch
from torch import nn
torch.manual_seed(0)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.conv = nn.Conv2d(3, 4, 3)
        self.norm = nn.LayerNorm(6)
        self.fc = nn.Linear(6, 5)
session.models.add(Net(), model_id="net")
out["names"] = sorted(p["name"] for p in session.models.parameters.list())
out["types"] = sorted({p["parameter_type"] for p in session.models.parameters.list()})
""",
        "diffract_code": W
        + """
session.models.add({"fc": np.zeros((5, 6), np.float32) + 1}, model_id="net")
out["names"] = sorted(p["name"] for p in session.models.parameters.list())
out["types"] = sorted({p["parameter_type"] for p in session.models.parameters.list()})
""",
    },
]
