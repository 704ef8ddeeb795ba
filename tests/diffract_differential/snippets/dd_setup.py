"""Code that several snippets start with (plain Diffract-user code, pasted before a snippet)."""

#: two NumPy models in a RAM session: ``a`` with 4 slices, ``b`` with 3 (7 in all); the names
#: are those of the seeds (``layer.0.weight``...) plus ``head``
TWO_MODELS = """
from diffract import Session
session = Session(profile="ram")
g = np.random.default_rng(7)
wa = {
    "layer.0.weight": g.normal(size=(16, 12)),
    "layer.1.weight": g.normal(size=(12, 10)),
    "layer.2.weight": g.normal(size=(10, 8)),
    "head": g.normal(size=(8, 6)),
}
wb = {
    "layer.0.weight": g.normal(size=(16, 12)),
    "layer.1.weight": g.normal(size=(12, 10)),
    "head": g.normal(size=(8, 6)),
}
session.models.add(wa, model_id="a")
session.models.add(wb, model_id="b")
"""

#: two NumPy models with the same three names and shapes (``a``, ``b``): a pair for the
#: cross-model fields
TWIN = """
from diffract import Session
session = Session(profile="ram")
g = np.random.default_rng(6)
for mid in ("a", "b"):
    session.models.add({
        "layer.0.weight": g.normal(size=(16, 12)),
        "layer.1.weight": g.normal(size=(12, 10)),
        "head": g.normal(size=(8, 6)),
    }, model_id=mid)
"""

#: one Gaussian 48 x 48 slice in a RAM session (``session``, ``w``)
GAUSS48 = """
from diffract import Session
session = Session(profile="ram")
w = np.random.default_rng(0).normal(size=(48, 48))
session.models.add({"w": w}, model_id="g")
"""

#: an 80 x 40 slice with a known heavy-tailed spectrum (singular values from a power law with
#: an exponential cutoff) and 3 spikes, in a RAM session (``session``)
SPECTRUM = """
from diffract import Session
session = Session(profile="ram")
g = np.random.default_rng(3)
u, _ = np.linalg.qr(g.normal(size=(80, 40)))
v, _ = np.linalg.qr(g.normal(size=(40, 40)))
x = (1.0 - g.random(40)) ** (-1.0 / 1.5)
x = np.sort(x * np.exp(-0.02 * x))[::-1]
x[:3] *= 4.0
w = (u * np.sqrt(x)) @ v.T
session.models.add({"heavy": w, "gauss": g.normal(size=(80, 40)) / 10}, model_id="m")
"""


#: a small 30 x 15 Gaussian slice (``session``), for the slow fits
SMALL = """
from diffract import Session
session = Session(profile="ram")
session.models.add({"w": np.random.default_rng(12).normal(size=(30, 15))}, model_id="s")
"""


def value_of(field: str, fmt: str = "list") -> str:
    """Code that records ``field`` per (model, name) from ``export_metrics`` into ``out``."""
    return f"""
recs = session.results.export_metrics({field!r}, export_format={fmt!r})
out[{field!r}] = {{r["model_id"] + "/" + r["parameter_name"]: r.get({field!r}) for r in recs}}
"""
