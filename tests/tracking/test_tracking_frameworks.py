"""``tracker.step`` for each framework: the checkpoint equals ``models.add`` of the model at
that step (names, types, layouts, weights), taken as a copy at the call; plus the Keras
callback and the Lightning-style hook (a fake trainer: Lightning is not installed)."""

from __future__ import annotations

import numpy as np

from diffract import Session
from diffract.tracking import LightningTracking, keras_callback, lightning_callback


def _same_as_models_add(session, model, tracked_id: str) -> None:
    """The tracked checkpoint has the slices ``models.add(model)`` gives, with equal weights."""
    session.models.add(model, model_id="direct")
    direct = {s.name: s for s in session.filter(model_ids=["direct"]).models.slices()}
    tracked = {s.name: s for s in session.filter(model_ids=[tracked_id]).models.slices()}
    assert sorted(tracked) == sorted(direct) and tracked
    for name, d in direct.items():
        t = tracked[name]
        assert (t.type, t.shape, t.dtype, t.meta.get("layout")) == (
            d.type,
            d.shape,
            d.dtype,
            d.meta.get("layout"),
        )
        np.testing.assert_array_equal(
            session.models.weights(name, model_id=tracked_id),
            session.models.weights(name, model_id="direct"),
        )
    session.models.remove("direct")


def test_torch_module_step_is_a_copy_of_the_weights_at_the_call():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 10)
    )
    s = Session(profile="ram")
    with s.track("torch", ["frob_norm"], max_pending=10) as tr:
        tr.step(model, step=0)
        kept = {n: p.detach().clone() for n, p in model.named_parameters()}
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)  # an optimizer step in place, right after the call
        tr.step(model, step=1)
    assert tr.steps() == [0, 1] and not tr.status.failures
    for name, value in kept.items():
        np.testing.assert_array_equal(
            s.models.weights(name, model_id="torch-s000000000"), value.numpy()
        )
    assert s.models.info("torch-s000000001")["framework"] == "torch"
    _same_as_models_add(s, model, "torch-s000000001")
    types = {x.name: x.type.value for x in s.models.slices()}
    assert types["0.weight"] == "conv" and types["2.weight"] == "dense"


def test_torch_bfloat16_parameters_are_tracked():
    import torch

    model = torch.nn.Linear(8, 4).to(torch.bfloat16)
    s = Session(profile="ram")
    with s.track("bf16", ["frob_norm"]) as tr:
        tr.step(model, step=0)
    assert not tr.status.failures
    _same_as_models_add(s, model, "bf16-s000000000")


def test_equinox_module_step():
    import equinox as eqx
    import jax

    model = eqx.nn.MLP(6, 3, width_size=8, depth=2, key=jax.random.PRNGKey(0))
    s = Session(profile="ram")
    with s.track("eqx", ["frob_norm"]) as tr:
        tr.step(model, step=3)
    assert tr.steps() == [3] and s.models.info("eqx-s000000003")["framework"] == "equinox"
    _same_as_models_add(s, model, "eqx-s000000003")


def test_flax_linen_params_step_keeps_the_in_out_layout():
    import jax
    from flax import linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(nn.relu(nn.Dense(8)(x)))

    params = MLP().init(jax.random.PRNGKey(0), jax.numpy.ones((1, 5)))
    s = Session(profile="ram")
    with s.track("linen", ["frob_norm"]) as tr:
        tr.step(params, step=0)
    _same_as_models_add(s, params, "linen-s000000000")
    kernels = [x for x in s.models.slices() if x.name.endswith("kernel")]
    assert kernels and all(x.meta.get("layout") == "in_out" for x in kernels)


def test_flax_nnx_module_step():
    from flax import nnx

    model = nnx.Sequential(nnx.Linear(5, 8, rngs=nnx.Rngs(0)), nnx.Linear(8, 3, rngs=nnx.Rngs(1)))
    s = Session(profile="ram")
    with s.track("nnx", ["frob_norm"]) as tr:
        tr.step(model, step=0)
    assert s.models.info("nnx-s000000000")["framework"] == "flax.nnx"
    _same_as_models_add(s, model, "nnx-s000000000")


def test_numpy_dict_step():
    rng = np.random.default_rng(0)
    weights = {"a.weight": rng.normal(size=(4, 3)), "b.bias": rng.normal(size=4)}
    s = Session(profile="ram")
    with s.track("np", ["frob_norm"]) as tr:
        tr.step(weights, step=0)
    _same_as_models_add(s, weights, "np-s000000000")


def test_keras_callback_tracks_fit_by_optimizer_iterations():
    import keras

    assert keras.backend.backend() == "jax"
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]
    )
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(32, 6)).astype("float32")
    y = np.zeros((32, 3), "float32")
    s = Session(profile="ram")
    with s.track("keras", ["frob_norm"], every=2, max_pending=10) as tr:
        model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[keras_callback(tr)])
        # 2 epochs x 4 batches = 8 updates: steps 0 (before training), 2, 4, 6, 8
        assert tr.status.pending == 0 and not tr.status.in_flight  # flushed at train end
    assert tr.steps() == [0, 2, 4, 6, 8] and not tr.status.failures
    assert s.models.info("keras-s000000008")["framework"] == "keras"
    _same_as_models_add(s, model, "keras-s000000008")  # the last step holds the final weights
    first = s.models.weights(s.filter(model_ids=["keras-s000000000"]).models.slices()[0].uid)
    last = s.models.weights(s.filter(model_ids=["keras-s000000008"]).models.slices()[0].uid)
    assert not np.array_equal(first, last)  # training changed them between the two


def test_tracker_keras_callback_method_is_the_same_adapter():
    import keras

    s = Session(profile="ram")
    with s.track("k", []) as tr:
        assert isinstance(tr.keras_callback(), keras.callbacks.Callback)


class _FakeTrainer:
    """What a Lightning Trainer hands its callbacks: a global step counter."""

    def __init__(self) -> None:
        self.global_step = 0

    def fit(self, module, callbacks, batches: int) -> None:
        import torch

        opt = torch.optim.SGD(module.parameters(), lr=0.1)
        for cb in callbacks:
            cb.on_train_start(self, module)
        for i in range(batches):
            loss = module(torch.ones(2, 4)).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            self.global_step += 1
            for cb in callbacks:
                cb.on_train_batch_end(self, module, loss, None, i)
        for cb in callbacks:
            cb.on_train_end(self, module)


def test_lightning_style_hook_with_a_fake_trainer():
    import torch

    torch.manual_seed(0)
    module = torch.nn.Linear(4, 2)
    s = Session(profile="ram")
    with s.track("pl", ["frob_norm"], every=3, max_pending=10) as tr:
        cb = lightning_callback(tr)
        assert isinstance(cb, LightningTracking)  # Lightning is not installed here
        _FakeTrainer().fit(module, [cb], batches=7)
    assert tr.steps() == [0, 3, 6] and tr.status.calls == 8
