"""Issue 26, point 19: a bound Flax Linen module (``module.bind(variables)``) of the user's own
class is read as Diffract's Flax extractor reads it: the ``params`` collection, named as in
``variables["params"]``; other collections (``batch_stats``) are skipped with a reason.
Checked against the unbound variables; an unbound module is a named error."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import ExtractionError, Session

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")
jnp = jax.numpy


class MLP(nn.Module):
    """A user's module: not a class of flax.linen itself."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Dense(7)(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        return nn.Dense(3)(nn.relu(x))


@pytest.fixture
def mlp():
    model = MLP()
    variables = model.init(jax.random.PRNGKey(0), jnp.ones((2, 5)))
    return model, variables


def _flat(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        name = f"{prefix}.{k}" if prefix else k
        out.update(_flat(v, name) if isinstance(v, dict) else {name: np.asarray(v)})
    return out


def test_bound_user_module_reads_its_params(mlp):
    model, variables = mlp
    s = Session(profile="ram")
    s.models.add(model.bind(variables), "bound")  # base commit: "cannot extract ... MLP"
    s.models.add(variables["params"], "params")
    want = _flat(variables["params"])
    names = {
        m: sorted(p["name"] for p in s.models.parameters.list() if p["model_id"] == m)
        for m in ("bound", "params")
    }
    assert names["bound"] == names["params"] == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(s.models.weights(name, "bound"), value)
    skipped = s.models.info("bound")["skipped"]
    assert sorted(skipped) == ["batch_stats.BatchNorm_0.mean", "batch_stats.BatchNorm_0.var"]
    assert all("batch_stats" in r for r in skipped.values())
    s.compute.apply("frob_norm", progress=False)
    t = s.results.export_table("frob_norm", export_format="dict")
    frob = {(m, n): v for m, n, v in zip(t["model_id"], t["name"], t["frob_norm"], strict=True)}
    for name, value in want.items():
        if not name.endswith("kernel"):
            continue  # biases start at zero (no norm stored for an all-zero slice)
        assert frob[("bound", name)] == pytest.approx(np.linalg.norm(value), rel=1e-6)
        assert frob[("bound", name)] == frob[("params", name)]


def test_bound_module_kernels_keep_the_flax_layout(mlp):
    from diffract.extract import extract

    model, variables = mlp
    ex = extract(model.bind(variables))
    layouts = {leaf.name: leaf.layout for leaf in ex.leaves}
    assert layouts["Dense_0.kernel"] == "in_out" and layouts["Dense_1.kernel"] == "in_out"
    assert ex.framework == "flax.linen"


def test_unbound_module_is_a_named_error(mlp):
    model, _ = mlp
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"MLP.*not bound.*bind\(variables\)"):
        s.models.add(model, "m")
    assert s.models.ids() == []
