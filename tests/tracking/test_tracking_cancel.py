"""A tracker's background analysis and the user's own ``compute.apply`` on the same session
each keep their own cancel event: ``session.compute.cancel()`` stops the user's run, never
the tracker's analysis, and closing the tracker without draining stops only its own."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from diffract import Session
from diffract.kernels import default_registry, make_kernel
from diffract.tracking import run_steps


class Gate:
    """A kernel that blocks until the test opens it, and says when a call entered it."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def __call__(self, weights: np.ndarray) -> float:
        self.entered.set()
        assert self.open.wait(30), "the test never opened the gate"
        self.calls += 1
        return float(np.linalg.norm(weights))


@pytest.fixture
def two_gates():
    """A session with ``user_norm`` (the user's run) and ``track_norm`` (the tracker's), each
    gated, and a plain model ``plain`` of two slices for the user's run."""
    user, track = Gate(), Gate()

    def user_norm(weights):
        """||W||_F, gated (the user's run)."""
        return user(weights)

    def track_norm(weights):
        """||W||_F, gated (the tracker's analysis)."""
        return track(weights)

    reg = default_registry().copy()
    reg.register(make_kernel(user_norm, outputs="user_norm"))
    reg.register(make_kernel(track_norm, outputs="track_norm"))
    s = Session(profile="ram", registry=reg)
    rng = np.random.default_rng(0)
    s.models.add(
        {"a.weight": rng.normal(size=(8, 4)), "b.weight": rng.normal(size=(6, 4))},
        model_id="plain",
    )
    return s, user, track


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"fc1.weight": rng.normal(size=(16, 8)), "fc2.weight": rng.normal(size=(4, 16))}


def _user_run(s: Session) -> tuple[threading.Thread, dict]:
    """Start the user's apply (one slice at a time) in a thread; its report lands in the dict."""
    out: dict = {}

    def go() -> None:
        out["report"] = s.filter(model_ids=["plain"]).compute.apply(
            "user_norm", progress=False, workers=1
        )

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, out


def test_user_cancel_stops_the_users_run_not_the_trackers(two_gates):
    s, user, track = two_gates
    thread, out = _user_run(s)
    assert user.entered.wait(30)  # the user's run is inside its first slice
    tr = s.track("run", ["track_norm"])
    tr.step(_weights(), step=0)
    assert track.entered.wait(30)  # the tracker's analysis started after the user's run
    s.compute.cancel()
    user.open.set()
    track.open.set()
    thread.join(30)
    status = tr.close()
    report = out["report"]
    assert report.cancelled and report.skipped == 1 and user.calls == 1
    assert status.failures == () and status.committed == 1 and tr.steps() == [0]
    assert track.calls == 2  # both slices of the checkpoint analyzed


def test_user_cancel_still_works_after_the_trackers_analysis_ended(two_gates):
    s, user, track = two_gates
    track.open.set()
    thread, out = _user_run(s)
    assert user.entered.wait(30)
    with s.track("run", ["track_norm"]) as tr:
        tr.step(_weights(), step=0)
    assert tr.steps() == [0]  # the tracker's apply ran and ended while the user's goes on
    s.compute.cancel()
    user.open.set()
    thread.join(30)
    assert out["report"].cancelled and out["report"].skipped == 1


def test_closing_the_tracker_without_draining_does_not_stop_the_users_run(two_gates):
    s, user, track = two_gates
    tr = s.track("run", ["track_norm"])
    tr.step(_weights(), step=0)
    assert track.entered.wait(30)
    thread, out = _user_run(s)
    assert user.entered.wait(30)
    track.open.set()
    with pytest.warns(RuntimeWarning, match="cancelled"):
        tr.close(drain=False)  # the analysis in progress is cancelled: step 0 incomplete
    user.open.set()
    thread.join(30)
    report = out["report"]
    assert not report.cancelled and report.skipped == 0 and user.calls == 2
    assert list(run_steps(s, "run").incomplete) == [0]
    assert s.compute.cancel() is None  # nothing left running: a no-op
