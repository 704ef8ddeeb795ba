"""Alerts while training: a layer that crosses a diagnosis rule raises one event, with the
step; the experimental stop signal reaches the framework callbacks."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session
from diffract.tracking import DiagnosisWarning, LightningTracking, RuleEvent

N, M = 300, 80


def _layer(rng, alpha):
    """A matrix whose ESD is a power-law sample with exponent ``alpha``."""
    lam = (1.0 - rng.uniform(size=M)) ** (-1.0 / (alpha - 1.0))
    u, _ = np.linalg.qr(rng.normal(size=(N, M)))
    v, _ = np.linalg.qr(rng.normal(size=(M, M)))
    return (u * np.sqrt(lam)) @ v.T


def _run(alphas):
    """A 'training' run whose layer ``fc`` moves through the given ESD exponents (one per
    step) while ``ok`` stays healthy."""
    rng = np.random.default_rng(11)
    ok = _layer(rng, 3.5)
    for a in alphas:
        yield {"fc.weight": _layer(rng, a), "ok.weight": ok}


def test_crossing_fires_once_with_the_step():
    events: list[RuleEvent] = []
    session = Session(profile="ram")
    alphas = [3.5, 3.5, 1.5, 1.5, 1.5]
    match = r"step 2: fc.weight is over-trained \(alpha"
    with (
        pytest.warns(DiagnosisWarning, match=match),
        session.track(
            "run", alerts=["over_trained"], on_alert=events.append, policy="block"
        ) as tracker,
    ):
        for step, weights in enumerate(_run(alphas)):
            tracker.step(weights, step=step)
            tracker.flush()  # training waits, so no step is thinned out
    assert [(e.step, e.name, e.rule) for e in events] == [(2, "fc.weight", "over_trained")]
    ev = events[0]
    alpha = session.filter(model_ids=[ev.model_id]).results.export_table(
        "pl_alpha", export_format="list"
    )
    fc = next(r for r in alpha if r["name"] == "fc.weight")
    assert fc["pl_alpha"] < 2
    assert ev.reason == f"alpha {fc['pl_alpha']:.3g} < 2"
    assert tracker.alerts == events
    assert not tracker.should_stop  # no stop_on given
    assert tracker.status.failures == ()


def test_uncrossing_and_crossing_again_fires_again():
    events: list[RuleEvent] = []
    session = Session(profile="ram")
    with session.track(
        "again", alerts="over_trained", on_alert=events.append, warn_alerts=False, policy="block"
    ) as tracker:
        for step, weights in enumerate(_run([1.5, 3.5, 1.5])):
            tracker.step(weights, step=step)
            tracker.flush()
    assert [e.step for e in events] == [0, 2]


def test_stop_signal_reaches_a_lightning_style_trainer():
    class Trainer:
        global_step = 0
        should_stop = False

    session = Session(profile="ram")
    trainer = Trainer()
    with session.track("stop", stop_on=["over_trained"], warn_alerts=False) as tracker:
        cb = LightningTracking(tracker)
        for step, weights in enumerate(_run([3.5, 1.5, 1.5])):
            trainer.global_step = step
            cb.on_train_batch_end(trainer, weights, None, None, step)
            tracker.flush()
        cb.on_train_batch_end(trainer, weights, None, None, step)
    assert tracker.should_stop and trainer.should_stop
    assert tracker.stop_reason is not None and tracker.stop_reason.step == 1


def test_unknown_rule_is_refused():
    from diffract._errors import InvalidArgumentError

    session = Session(profile="ram")
    with pytest.raises(InvalidArgumentError, match="unknown rule"):
        session.track("bad", alerts=["overtrained"])


class _StoppingTracker:
    """A tracker whose experimental stop signal is already set (what the adapters read)."""

    should_stop = True

    def __init__(self) -> None:
        self.steps: list[int | None] = []

    def step(self, model, step=None, lora="update"):
        self.steps.append(step)

    def flush(self, timeout=None):
        return True


def test_keras_callback_stops_fit_on_the_signal():
    import keras

    from diffract.tracking import keras_callback

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((32, 4), "float32")
    tracker = _StoppingTracker()
    hist = model.fit(
        x, x[:, :2], batch_size=8, epochs=5, verbose=0, callbacks=[keras_callback(tracker)]
    )
    assert model.stop_training is True
    assert len(hist.history["loss"]) == 1  # stopped in the first epoch, not after 5
    assert tracker.steps[:2] == [0, 1]


def test_hf_callback_sets_should_training_stop():
    from transformers import TrainerControl, TrainerState

    from diffract.tracking import hf_callback

    tracker = _StoppingTracker()
    cb = hf_callback(tracker)
    state, control = TrainerState(), TrainerControl()
    state.global_step = 3
    out = cb.on_step_end(None, state, control, model={"w": np.zeros((2, 2))})
    assert out is control and control.should_training_stop is True
    assert tracker.steps == [3]
