"""The training tracker (issue 19) on NumPy dicts: ids, the step axis, the queue policies,
memory bounds, resume, failures and bad input.

The framework adapters are in test_tracking_frameworks.py, the SIGKILL case in
test_tracking_crash.py.
"""

from __future__ import annotations

import itertools
import threading
import tracemalloc
import warnings

import numpy as np
import pytest

from diffract import (
    DuplicateModelError,
    InvalidArgumentError,
    InvalidModelIdError,
    Session,
    StoreError,
    UnknownFieldError,
)
from diffract._vocab.steps import order_by_step, step_of
from diffract.kernels import default_registry, make_kernel
from diffract.tracking import (
    DOC_KIND,
    SnapshotQueue,
    Tracker,
    checkpoint_id,
    committed_steps,
    parse_checkpoint_id,
    run_steps,
)


def _weights(seed: int = 0, rows: int = 32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"fc1.weight": rng.normal(size=(rows, 16)), "fc2.weight": rng.normal(size=(8, rows))}


@pytest.fixture
def gated():
    """A registry with ``gated_norm``: the Frobenius norm, computed only once ``gate`` is set
    (the worker blocks inside it), and counting the slices it was called on."""
    reg = default_registry().copy()
    gate = threading.Event()
    entered = threading.Event()
    calls: list[tuple[int, ...]] = []

    def gated_norm(weights):
        """||W||_F, after the test opens the gate."""
        entered.set()
        gate.wait(30)
        calls.append(weights.shape)
        return float(np.linalg.norm(weights))

    reg.register(make_kernel(gated_norm, outputs="gated_norm"))
    reg.gate, reg.entered, reg.calls = gate, entered, calls
    return reg


def _meta(session):
    return lambda m: session.models.info(m)["meta"]


# --- ids and the step axis ------------------------------------------------------------------


def test_checkpoint_ids_are_zero_padded_and_parse_back():
    assert checkpoint_id("mnist", 100) == "mnist-s000000100"
    assert parse_checkpoint_id("mnist-s000000100") == ("mnist", 100)
    assert parse_checkpoint_id("my-run-s000000007") == ("my-run", 7)
    assert parse_checkpoint_id("mnist-100") is None
    assert sorted(checkpoint_id("r", s) for s in (100, 9, 10)) == [
        checkpoint_id("r", s) for s in (9, 10, 100)
    ]
    for bad in ("", "a@b", "a/b", "a,b", "a[0]"):
        with pytest.raises((InvalidArgumentError, InvalidModelIdError)):
            checkpoint_id(bad, 1)
    for step in (-1, 1.5, True, "3"):
        with pytest.raises(InvalidArgumentError, match="step must be an int"):
            checkpoint_id("r", step)


def test_steps_9_10_100_are_listed_and_exported_in_step_order():
    s = Session(profile="ram")
    with s.track("run", ["frob_norm"], max_pending=10) as tr:
        for step in (100, 9, 10):  # offered out of order
            tr.step(_weights(step), step=step)
    assert tr.status.committed == 3 and not tr.status.failures
    assert tr.steps() == [9, 10, 100]
    assert tr.model_ids() == [checkpoint_id("run", x) for x in (9, 10, 100)]
    ordered = order_by_step(s.models.ids(), _meta(s))
    assert [step_of(s.models.info(m)["meta"]) for m in ordered] == [9, 10, 100]
    assert s.models.info(ordered[0])["meta"] == {"track": {"run": "run", "step": 9}}
    table = s.results.export_table("frob_norm", export_format="pandas")
    assert list(dict.fromkeys(table["model_id"])) == ordered
    # each checkpoint holds the weights of its own step
    for step in (9, 10, 100):
        got = s.models.weights("fc1.weight", model_id=checkpoint_id("run", step))
        np.testing.assert_array_equal(got, _weights(step)["fc1.weight"])
        norm = table[(table.model_id == checkpoint_id("run", step)) & (table.name == "fc1.weight")]
        assert norm["frob_norm"].item() == pytest.approx(
            np.linalg.norm(_weights(step)["fc1.weight"])
        )


def test_steps_past_nine_digits_still_order_by_step_not_by_string():
    s = Session(profile="ram")
    with s.track("big", []) as tr:
        tr.step(_weights(), step=10**9)
        tr.step(_weights(), step=999_999_999)
    ids = s.models.ids()
    assert ids == sorted(ids) and ids[0] == "big-s1000000000"  # as strings: the wrong order
    assert tr.steps() == [999_999_999, 10**9]
    assert order_by_step(ids, _meta(s)) == ["big-s999999999", "big-s1000000000"]


def test_every_n_steps_and_the_default_step_counter():
    s = Session(profile="ram")
    w = _weights()
    with s.track("run", [], every=5, max_pending=10) as tr:
        returned = [tr.step(w) for _ in range(12)]  # steps 0..11
    assert tr.steps() == [0, 5, 10]
    assert [r for r in returned if r] == [checkpoint_id("run", x) for x in (0, 5, 10)]
    assert tr.status.calls == 12 and tr.status.snapshots == 3 and tr.next_step == 12


def test_the_snapshot_is_a_copy_taken_at_the_call():
    s = Session(profile="ram")
    w = _weights()
    before = w["fc1.weight"].copy()
    with s.track("run", []) as tr:
        tr.step(w, step=0)
        w["fc1.weight"] += 1.0  # training goes on in place before the worker stores it
    np.testing.assert_array_equal(s.models.weights("fc1.weight", model_id="run-s000000000"), before)


def test_scope_holds_the_run_and_only_it():
    s = Session(profile="ram")
    s.models.add(_weights(), model_id="other")
    with s.track("run", [], every=2, max_pending=10) as tr:
        for i in range(5):
            tr.step(_weights(i), step=i)
    assert tr.scope.models.ids() == ["run-s000000000", "run-s000000002", "run-s000000004"]


def test_fields_are_narrowed_by_param_names():
    s = Session(profile="ram")
    with s.track("run", ["frob_norm"], param_names=["fc1.weight"]) as tr:
        tr.step(_weights(), step=0)
    table = s.results.export_table("frob_norm", export_format="pandas")
    assert list(table.dropna()["name"]) == ["fc1.weight"]


# --- the queue policies ---------------------------------------------------------------------


class _Item:
    def __init__(self, step: int) -> None:
        self.step = step


def _offer_all(policy: str, n: int, capacity: int = 3) -> tuple[list[int], list[int]]:
    """(waiting steps, skipped steps) after step 0 was taken and 1..n-1 were offered."""
    q = SnapshotQueue(capacity, policy, block_timeout=0)
    q.offer(_Item(0))
    assert q.take(threading.Event()).step == 0
    skipped: list[int] = []
    for i in range(1, n):
        skipped += [it.step for it in q.offer(_Item(i))]
    return q.steps(), skipped


def _largest_gap(kept: list[int], n: int) -> int:
    axis = [0, *kept, n - 1]
    return max(b - a for a, b in itertools.pairwise(axis))


def test_drop_new_keeps_the_first_waiting_snapshots():
    waiting, skipped = _offer_all("drop_new", 50)
    assert waiting == [1, 2, 3] and skipped == list(range(4, 50))


def test_drop_oldest_keeps_the_latest_snapshots():
    waiting, skipped = _offer_all("drop_oldest", 50)
    assert waiting == [47, 48, 49] and skipped == list(range(1, 47))


def test_thin_keeps_the_newest_and_spreads_the_rest():
    n = 50
    waiting, skipped = _offer_all("thin", n)
    assert len(waiting) == 3 and waiting[-1] == n - 1
    assert sorted(waiting + skipped) == list(range(1, n))
    others = [_largest_gap(_offer_all(p, n)[0], n) for p in ("drop_new", "drop_oldest")]
    assert _largest_gap(waiting, n) < min(others)


def test_block_waits_for_room_then_skips():
    q = SnapshotQueue(1, "block", block_timeout=0.01)
    assert q.offer(_Item(1)) == []
    new = _Item(2)
    assert q.offer(new) == [new]  # nobody takes: skipped after the timeout
    q2 = SnapshotQueue(1, "block", block_timeout=30)
    q2.offer(_Item(1))
    taker = threading.Thread(target=lambda: q2.take(threading.Event()))
    taker.start()
    assert q2.offer(_Item(2)) == []  # room was made while it waited
    taker.join()
    assert q2.steps() == [2]


@pytest.mark.parametrize("policy", ["thin", "drop_oldest", "drop_new", "block"])
def test_a_slow_kernel_and_a_fast_loop_keep_memory_bounded(gated, policy):
    """Training offers 40 snapshots while the worker is stuck in the analysis of the first:
    K wait, the others are skipped and counted, and the traced memory stays under K + 3
    snapshots (K waiting, one offered, the stored copy of step 0 in the ram store; unbounded
    it would be 40)."""
    s = Session(profile="ram", registry=gated)
    k, n = 3, 40
    w = _weights(rows=16384)  # 3 MiB of float64 per snapshot
    snapshot_bytes = sum(a.nbytes for a in w.values())
    tr = s.track("run", ["gated_norm"], max_pending=k, policy=policy, block_timeout=0.001)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tr.step(w, step=0)
        assert gated.entered.wait(30)  # the worker is inside the kernel for step 0
        for i in range(1, n):
            w["fc1.weight"] += 1.0
            tr.step(w, step=i)
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    status = tr.status
    assert status.pending == k and status.peak_pending == k and status.in_flight
    assert status.skipped == n - 1 - k and len(status.skipped_steps) == n - 1 - k
    assert held < (k + 3) * snapshot_bytes + 2**20
    gated.gate.set()
    final = tr.close()
    assert final.committed == k + 1 and not final.failures
    stored = tr.steps()
    assert stored[0] == 0 and len(stored) == k + 1
    assert sorted(stored + list(final.skipped_steps)) == list(range(n))
    # the values are those of each stored step's weights
    for step in stored:
        mid = checkpoint_id("run", step)
        want = np.linalg.norm(_weights(rows=16384)["fc1.weight"] + step)
        got = s.results.export_table("gated_norm", export_format="pandas")
        row = got[(got.model_id == mid) & (got.name == "fc1.weight")]
        assert row["gated_norm"].item() == pytest.approx(want)


def test_close_without_draining_skips_the_waiting_snapshots(gated):
    s = Session(profile="ram", registry=gated)
    tr = s.track("run", ["gated_norm"], max_pending=2)
    tr.step(_weights(), step=0)
    assert gated.entered.wait(30)
    for i in range(1, 5):
        tr.step(_weights(i), step=i)
    gated.gate.set()
    with warnings.catch_warnings():  # the analysis in progress may be cancelled: a failure
        warnings.simplefilter("ignore", RuntimeWarning)
        status = tr.close(drain=False)
    assert status.skipped == 4 and status.pending == 0 and status.closed
    assert set(tr.steps()) <= {0}
    with pytest.raises(StoreError, match="closed"):
        tr.step(_weights(), step=9)


# --- resume ---------------------------------------------------------------------------------


def test_a_new_tracker_continues_the_step_axis(tmp_path):
    with (
        Session(profile="local", path=tmp_path) as s,
        s.track("run", ["frob_norm"], every=10, max_pending=10) as tr,
    ):
        for i in range(31):
            tr.step(_weights(i), step=i)
    with Session(profile="local", path=tmp_path) as s:
        tr = s.track("run", ["frob_norm"], every=10)
        assert tr.status.resumed == 4 and tr.next_step == 31 and tr.steps() == [0, 10, 20, 30]
        assert tr.step(_weights()) is None and tr.next_step == 32  # 31: not a multiple
        assert tr.step(_weights(), step=20) is None  # stored already: skipped
        for i in range(32, 41):
            tr.step(_weights(i), step=i)
        status = tr.close()
        assert status.existing == 1 and status.committed == 1
        assert tr.steps() == [0, 10, 20, 30, 40]
        strict = s.track("run", ["frob_norm"], on_existing="error")
        with pytest.raises(DuplicateModelError, match="step 40 of run 'run' is already stored"):
            strict.step(_weights(), step=40)
        strict.close()


def _stage_incomplete(s, run: str, step: int) -> str:
    """A tracked model stored without its committed mark: a crash between add and analysis."""
    mid = checkpoint_id(run, step)
    s.models.add(_weights(step), model_id=mid, meta={"track": {"run": run, "step": step}})
    return mid


def test_an_incomplete_step_is_finished_on_resume():
    s = Session(profile="ram")
    with s.track("run", ["frob_norm"]) as tr:
        tr.step(_weights(), step=0)
    mid = _stage_incomplete(s, "run", 1)
    assert run_steps(s, "run").incomplete == {1: mid} and committed_steps(s, "run") == [0]
    with s.track("run", ["frob_norm"]) as tr:
        pass
    assert tr.status.finished == 1 and tr.steps() == [0, 1]
    table = s.results.export_table("frob_norm", export_format="pandas")
    assert table[table.model_id == mid]["frob_norm"].notna().all()
    assert mid in s.store.documents(DOC_KIND)


def test_an_incomplete_step_is_dropped_on_resume_when_asked():
    s = Session(profile="ram")
    with s.track("run", ["frob_norm"]) as tr:
        tr.step(_weights(), step=0)
    _stage_incomplete(s, "run", 1)
    with s.track("run", ["frob_norm"], incomplete="drop") as tr:
        assert tr.next_step == 1  # the dropped step is free again
        tr.step(_weights(1))
    assert tr.status.dropped == 1 and tr.steps() == [0, 1]
    assert s.models.ids() == ["run-s000000000", "run-s000000001"]


def test_a_removed_and_readded_model_is_not_taken_for_committed():
    s = Session(profile="ram")
    with s.track("run", ["frob_norm"]) as tr:
        tr.step(_weights(), step=0)
    s.models.remove("run-s000000000")
    _stage_incomplete(s, "run", 0)  # the old committed mark is still in the store
    assert run_steps(s, "run").incomplete == {0: "run-s000000000"}


# --- failures and bad input -----------------------------------------------------------------


def test_kernel_failures_are_counted_and_warned_at_close():
    reg = default_registry().copy()

    def broken(weights):
        """Always fails."""
        raise ValueError("no luck")

    reg.register(make_kernel(broken, outputs="broken"))
    s = Session(profile="ram", registry=reg)
    tr = s.track("run", ["broken"])
    tr.step(_weights(), step=0)
    with pytest.warns(RuntimeWarning, match="tracking run 'run': 1 failure"):
        status = tr.close()
    assert status.failures[0][0] == 0 and "2 slice failure" in status.failures[0][1]


def test_a_failing_callback_does_not_stop_the_worker():
    s = Session(profile="ram")
    seen: list[tuple[int, str]] = []

    def boom(step, mid):
        raise RuntimeError("callback")

    tr = s.track(
        "run", [], max_pending=10, on_step=[boom, lambda step, mid: seen.append((step, mid))]
    )
    tr.step(_weights(), step=0)
    tr.step(_weights(), step=1)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        status = tr.close()
    assert seen == [(0, "run-s000000000"), (1, "run-s000000001")]
    assert status.committed == 2 and len(status.failures) == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"every": 0}, InvalidArgumentError, "every must be an int >= 1"),
        ({"max_pending": 0}, InvalidArgumentError, "max_pending must be an int >= 1"),
        ({"policy": "random"}, InvalidArgumentError, "policy must be one of"),
        ({"block_timeout": -1}, InvalidArgumentError, "block_timeout"),
        ({"on_existing": "replace"}, InvalidArgumentError, "on_existing must be one of"),
        ({"incomplete": "keep"}, InvalidArgumentError, "incomplete must be one of"),
        ({"on_step": 3}, InvalidArgumentError, "on_step must be a callable"),
        ({"progress": True}, InvalidArgumentError, "cannot be passed through"),
        ({"fields": ["no_such_field"]}, UnknownFieldError, "no_such_field"),
        ({"fields": 3}, InvalidArgumentError, "fields must be a list"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    s = Session(profile="ram")
    kwargs = {"fields": [], **kwargs}
    with pytest.raises(error, match=match):
        s.track("run", **kwargs)


def test_bad_runs_steps_and_models_are_named(tmp_path):
    s = Session(profile="ram")
    with pytest.raises(InvalidModelIdError, match="reserved character '@'"):
        s.track("run@1", [])
    with pytest.raises(InvalidArgumentError, match="non-empty string"):
        s.track("", [])
    with s.track("run", []) as tr:
        with pytest.raises(InvalidArgumentError, match="step must be an int >= 0"):
            tr.step(_weights(), step=-3)
        with pytest.raises(Exception, match=r"not a checkpoint path"):
            tr.step(str(tmp_path / "model.safetensors"), step=0)
    Session(profile="local", path=tmp_path).close()
    with (
        Session(profile="local", path=tmp_path, readonly=True) as ro,
        pytest.raises(StoreError, match="readonly=False"),
    ):
        ro.track("run", [])


def test_tracker_is_a_diffract_tracker_via_the_session():
    s = Session(profile="ram")
    tr = s.track("run", "frob_norm")
    assert isinstance(tr, Tracker) and tr.fields == ["frob_norm"]
    assert "run 'run'" in repr(tr)
    tr.close()


def test_the_worker_runs_at_a_lower_priority():
    import os

    s = Session(profile="ram")
    seen: list[int] = []
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    on_step = [
        lambda step, mid: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    ]
    with s.track("run", [], nice=5, on_step=on_step) as tr:
        tr.step(_weights(), step=0)
    assert seen == [min(19, mine + 5)]
    with pytest.raises(InvalidArgumentError, match="nice must be an int from 0 to 19"):
        s.track("run", [], nice=40)


def test_add_callback_reaches_later_steps_and_refuses_non_callables():
    s = Session(profile="ram")
    seen: list[int] = []
    with s.track("run", [], max_pending=10) as tr:
        tr.add_callback(lambda step, mid: seen.append(step))
        for i in range(3):
            tr.step(_weights(i), step=i)
        with pytest.raises(InvalidArgumentError, match="on_step must be a callable"):
            tr.add_callback("refresh")
    assert seen == [0, 1, 2]
