"""``compute.cancel()`` stops a running ``apply`` from another thread."""

from __future__ import annotations

import threading

import numpy as np

from diffract import Session
from diffract.kernels import default_registry, make_kernel


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "layers.0.weight": rng.normal(size=(8, 6)).astype(np.float32),
        "layers.0.bias": rng.normal(size=8).astype(np.float32),
        "layers.1.weight": rng.normal(size=(5, 8)).astype(np.float32),
        "embed.weight": rng.normal(size=(10, 6)).astype(np.float32),
    }


def test_compute_cancel_stops_a_running_apply_from_another_thread():
    reached = threading.Event()
    go_on = threading.Event()
    calls = []

    def held(weights):
        """Waits on the first call until the test has asked to cancel."""
        calls.append(1)
        if len(calls) == 1:
            reached.set()
            assert go_on.wait(30)
        return float(np.asarray(weights).sum())

    reg = default_registry().copy()
    reg.register(make_kernel(held, outputs="held"))
    s = Session(profile="ram", registry=reg)
    s.models.add(_weights(), model_id="m")
    s.compute.cancel()  # nothing running: a no-op
    out = []
    t = threading.Thread(target=lambda: out.append(s.compute.apply("held", progress=False)))
    t.start()
    assert reached.wait(30)
    s.compute.cancel()
    go_on.set()
    t.join(30)
    (report,) = out
    assert report.cancelled and report.computed == 1 and report.skipped == len(_weights()) - 1
    assert calls == [1]  # no slice started after the cancel
    again = s.compute.apply("held", progress=False)
    assert again.ok and again.reused == 1 and again.computed == len(_weights()) - 1
