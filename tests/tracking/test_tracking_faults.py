"""The tracker under faults from the notebook (issue 28, points 7 to 10): an interrupt while a
step waits, a re-run ``session = Session(...)`` cell, a second tracker on one run, and run
names that filters would read as regular expressions.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings

import numpy as np
import pytest

from diffract import InvalidModelIdError, Session, StoreError, StoreLockedError
from diffract.tracking import SnapshotQueue, checkpoint_id, complete_scope, run_steps


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"fc1.weight": rng.normal(size=(16, 8)), "fc2.weight": rng.normal(size=(4, 16))}


def test_an_interrupt_while_a_blocked_step_waits_loses_no_step():
    """Ctrl-C (SIGINT) inside ``step()`` waiting under ``policy="block"``: the step is not
    queued, so it is not known either; offering it again stores it."""
    s = Session(profile="ram")
    entered, gate = threading.Event(), threading.Event()

    def hold(step, model_id):  # the worker waits here after committing step 0
        entered.set()
        gate.wait(30)

    tr = s.track("run", policy="block", max_pending=1, block_timeout=60, on_step=hold)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert tr.step(_weights(0), step=0) == checkpoint_id("run", 0)
        assert entered.wait(30)
        assert tr.step(_weights(1), step=1) == checkpoint_id("run", 1)  # the queue is full

        def interrupt():
            time.sleep(0.5)  # the training thread waits for room by now (up to 60 s)
            os.kill(os.getpid(), signal.SIGINT)

        killer = threading.Thread(target=interrupt)
        with pytest.raises(KeyboardInterrupt) as info:
            killer.start()
            tr.step(_weights(2), step=2)
        killer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
        gate.set()
    # delivered while the step waited for room in the queue, not elsewhere
    assert any(entry.path.name == "policy.py" for entry in info.traceback)
    # re-running the loop from the interrupted step stores it (it was "already stored")
    assert tr.step(_weights(2), step=2) == checkpoint_id("run", 2)
    assert tr.next_step == 3
    status = tr.close()
    assert status.failures == () and status.skipped == 0 and status.existing == 0
    assert tr.steps() == [0, 1, 2]
    stored = s.models.weights("fc1.weight", model_id=checkpoint_id("run", 2))
    np.testing.assert_allclose(stored, _weights(2)["fc1.weight"], rtol=1e-6)


class _Item:
    def __init__(self, step: int) -> None:
        self.step = step


def test_the_queue_says_whether_an_offer_was_accepted():
    """What ``step()`` asks after an interrupted offer: waiting or taken is accepted."""
    q = SnapshotQueue(1, "block", 0.0)
    a, b, c = _Item(0), _Item(1), _Item(2)
    assert not q.holds(a)
    assert q.offer(a) == [] and q.holds(a)
    assert q.offer(b) == [b] and not q.holds(b)  # full: "block" gave up at once
    assert q.take(threading.Event()) is a and q.holds(a)  # taken by the worker
    q.done()
    assert q.offer(c) == [] and q.holds(c) and q.holds(a) and not q.holds(b)
    assert q.take(threading.Event()) is c and not q.holds(a)


def test_a_newer_session_on_the_store_stops_the_tracker_at_its_next_step(tmp_path):
    """A re-run ``session = Session(same path)`` cell takes the writer lock over: the old
    session's tracker raises at its next step, saying what happened and how to resume,
    instead of returning ids for steps that all fail in the worker."""
    old = Session(profile="local", path=tmp_path)
    tr = old.track("run", ["frob_norm"])
    tr.step(_weights(0), step=0)
    assert tr.flush(30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a takeover in this process is silent (issue 29)
        new = Session(profile="local", path=tmp_path)
    assert new.store.took_over
    with pytest.raises(StoreError, match=r"newer Session.*session\.track\('run'"):
        tr.step(_weights(1), step=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing failed in the worker: no step was lost
        status = tr.close()
    assert status.closed and status.committed == 1 and status.failures == ()
    with pytest.raises(StoreError, match="closed"):
        tr.step(_weights(1), step=1)
    # the resume the message names works
    with new.track("run", ["frob_norm"]) as tr2:
        assert tr2.next_step == 1
        assert tr2.step(_weights(1)) == checkpoint_id("run", 1)
    assert tr2.status.failures == () and tr2.steps() == [0, 1]
    new.close()
    old.close()


def test_a_second_tracker_on_one_run_is_refused():
    """Two open trackers of one run would store two models' steps on one step axis."""
    s = Session(profile="ram")
    tr = s.track("run")
    tr.step(_weights(0), step=0)
    with pytest.raises(StoreLockedError, match=r"run 'run' is tracked already.*tracker\.close"):
        s.track("run")
    with s.track("other") as other:  # another run is fine
        other.step(_weights(5), step=0)
    tr.step(_weights(0), step=1)
    tr.close()
    with s.track("run") as again:  # once the first is closed, the run continues
        assert again.next_step == 2
        again.step(_weights(0))
    assert again.steps() == [0, 1, 2]
    meta = {m: s.models.info(m)["meta"]["track"]["run"] for m in s.models.ids()}
    assert sorted(m for m, run in meta.items() if run == "run") == [
        checkpoint_id("run", i) for i in range(3)
    ]


@pytest.mark.parametrize("run", ["re:.*", "re:a", "re:"])
def test_a_run_named_like_a_filter_regex_is_refused(run):
    """Its checkpoint ids would start with ``re:``: filters would match other runs' ids."""
    s = Session(profile="ram")
    s.models.add(_weights(), model_id=checkpoint_id("abc", 0))
    with pytest.raises(InvalidModelIdError, match=r"run name 're:.*starts with 're:'"):
        s.track(run)
    assert s.models.ids() == [checkpoint_id("abc", 0)]
    assert "re:" not in "".join(s.store.documents("diffract.tracking.run"))


def test_an_old_store_id_starting_with_re_is_matched_literally(tmp_path, monkeypatch):
    """A store written before ``re:`` ids were refused stays readable, and the readers of
    tracked runs take its ids literally (``complete_scope`` once selected every model
    through such an id, incomplete checkpoints included)."""
    import diffract.session.models as models_module

    with Session(profile="local", path=tmp_path) as s:
        with monkeypatch.context() as m:  # how an older version stored such an id
            m.setattr(models_module, "validate_model_id", lambda model_id: model_id)
            s.models.add(_weights(7), model_id="re:.*")
        with s.track("run") as tr:
            tr.step(_weights(0), step=0)
        # a crash between a step's weights and its mark: the checkpoint is incomplete
        mid = checkpoint_id("run", 1)
        s.models.add(_weights(1), model_id=mid, meta={"track": {"run": "run", "step": 1}})
    with Session(profile="local", path=tmp_path, readonly=True) as s:
        assert s.models.ids() == ["re:.*", checkpoint_id("run", 0), mid]
        assert run_steps(s, "run").incomplete == {1: mid}
        shown = complete_scope(s).models.ids()
        assert shown == ["re:.*", checkpoint_id("run", 0)]
        stored = s.models.weights("fc1.weight", model_id="re:.*")
        np.testing.assert_allclose(stored, _weights(7)["fc1.weight"], rtol=1e-6)


def test_a_session_that_raises_on_failures_still_commits_tracked_steps():
    """``Session(on_failure="raise")`` is for the user's own ``apply``: the tracker's worker
    counts an analysis failure in a committed step (reported at close), it never raises it
    and leaves the step incomplete."""
    s = Session(profile="ram", on_failure="raise")
    zero = {"fc1.weight": np.zeros((16, 8)), "fc2.weight": np.ones((4, 16))}
    tr = s.track("run", ["stable_rank"])
    tr.step(zero, step=0)
    with pytest.warns(RuntimeWarning, match="1 failure"):  # the close reports it
        status = tr.close()
    assert status.committed == 1 and tr.steps() == [0]
    assert status.failures == ((0, "1 slice failure(s) in the run"),)
    rows = s.results.export_metrics("stable_rank", export_format="list")
    assert [r.get("stable_rank") for r in rows if r["parameter_name"] == "fc2.weight"] == [1.0]
