"""Progress inside one chunk (the default memory budget makes a small model one chunk): the
engine's events arrive while the chunk runs, per slice and per kernel, vectorized kernels
included; the values finished are committed as the chunk goes on, visible to a read-only
reader before the run ends, and a cancel loses nothing that was committed."""

from __future__ import annotations

import itertools
import threading
import time
import warnings

import numpy as np

import diffract
from _ui_helpers import mlp
from diffract import FieldNotComputedError, Session
from diffract.widgets import ProgressWidget

SLOW = 0.25  # seconds per slice of the slow kernels below


@diffract.kernel(outputs="slow_live_norm", min_ndim=2, replace=True)
def slow_live_norm(weights):
    time.sleep(SLOW)
    return float(np.linalg.norm(weights))


@diffract.kernel(outputs="slow_live_vec", min_ndim=2, replace=True, vectorized=True)
def slow_live_vec(weights):
    time.sleep(SLOW * len(weights))
    return [float(np.abs(w).max()) for w in weights]


def _collect(into: list, when: list):
    def on_event(ev):
        into.append(ev)
        when.append(time.perf_counter())

    return on_event


def test_events_arrive_per_slice_and_kernel_before_the_one_chunk_ends():
    s = Session("ram")
    s.models.add(mlp(0, layers=6), "m")  # 6 matrices, 6 biases (not applicable)
    events, times = [], []
    report = s.compute.apply("slow_live_norm", progress=_collect(events, times))
    assert report.chunks == 1 and report.computed == 6 and report.not_applicable == 6
    (chunk_at,) = [i for i, ev in enumerate(events) if ev.stage == "chunk"]
    inside = [ev for ev in events[:chunk_at] if ev.stage == "kernel"]
    # a start and an end event per call, each naming its slice and the kernel
    assert len(inside) == 12 and {ev.param for ev in inside} == {
        f"m:layers.{i}.weight" for i in range(6)
    }
    assert {ev.kernel for ev in inside} == {"slow_live_norm"}
    assert [ev.kernel_done for ev in inside[1::2]] == [1, 2, 3, 4, 5, 6]
    assert all(ev.kernel_total == 6 and ev.kernels_total == 1 for ev in inside)
    # kernel steps and slices done count up to the plan before the chunk ends
    assert [ev.steps_done for ev in inside[1::2]] == [1, 2, 3, 4, 5, 6]
    assert [ev.slices_done for ev in inside[1::2]] == [1, 2, 3, 4, 5, 6]
    assert all(ev.steps_total == 6 and ev.slices_total == 6 for ev in inside)
    # the events came while the chunk ran, spread over its kernel calls, not at its end
    ends = [times[events.index(ev)] for ev in inside[1::2]]
    assert ends[-1] - ends[0] >= 4 * SLOW
    assert times[chunk_at] - ends[0] >= 4 * SLOW


def test_a_vectorized_kernel_reports_between_batches(monkeypatch):
    import diffract.run.chunks as chunks

    monkeypatch.setattr(chunks.os, "cpu_count", lambda: 2)  # batches of at least 2 slices
    monkeypatch.setattr(chunks, "VECTOR_BATCH_SECONDS", 2 * SLOW)
    s = Session("ram")
    s.models.add(mlp(0, layers=8), "m")
    events = []
    s.compute.apply("slow_live_vec", progress=events.append)
    ends = [
        ev.kernel_done for ev in events if ev.stage == "kernel" and ev.kernel == "slow_live_vec"
    ]
    # one call of 8 slices before the fix; now batches of 2 (0.5 s each), counted as they end
    assert ends[0] == 0 and ends[-1] == 8 and len(set(ends)) >= 4
    assert max(b - a for a, b in itertools.pairwise(ends)) <= 4


def test_the_builtin_spectrum_kernel_reports_inside_the_chunk():
    s = Session("ram")
    s.models.add(mlp(0, layers=10, width=40), "m")
    events = []
    s.compute.apply("stable_rank", progress=events.append)
    chunk_at = next(i for i, ev in enumerate(events) if ev.stage == "chunk")
    spectrum = [ev for ev in events[:chunk_at] if ev.kernel == "weights_spectrum"]
    assert spectrum and spectrum[-1].kernel_done == spectrum[-1].kernel_total == 10
    assert all(ev.steps_total > 0 for ev in events[:chunk_at] if ev.stage == "kernel")


def _run_in_thread(s, *fields, **kw):
    out: dict = {}

    def go():
        try:
            out["report"] = s.compute.apply(*fields, progress=False, **kw)
        except BaseException as exc:  # pragma: no cover - reported by the assert below
            out["error"] = exc

    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th, out


def _stored(reader, field):
    with warnings.catch_warnings():  # the slices not computed yet are reported missing
        warnings.simplefilter("ignore")
        try:
            rows = reader.results.export_table(field, export_format="list")
        except FieldNotComputedError:  # no value committed yet
            return {}
    return {r["name"]: r[field] for r in rows if r.get(field) is not None}


def test_values_are_committed_inside_the_chunk_and_seen_by_a_reader(tmp_path):
    path = tmp_path / "store"
    with Session(path=path) as s:
        s.models.add(mlp(0, layers=12), "m")
        reader = Session(path=path, readonly=True)
        th, out = _run_in_thread(s, "slow_live_norm")  # 12 x 0.25 s, commits every 2 s
        seen = []
        while th.is_alive():
            seen.append(len(_stored(reader, "slow_live_norm")))
            time.sleep(0.1)
        th.join()
        assert "error" not in out and out["report"].chunks == 1
        mid = [n for n in seen if 0 < n < 12]
        assert mid, f"the reader saw {sorted(set(seen))} values while the one chunk ran"
        assert len(_stored(reader, "slow_live_norm")) == 12 and out["report"].computed == 12


def test_a_cancel_keeps_every_value_committed_inside_the_chunk(tmp_path):
    path = tmp_path / "store"
    with Session(path=path) as s:
        s.models.add(mlp(0, layers=16), "m")
        reader = Session(path=path, readonly=True)
        cancel = threading.Event()
        th, out = _run_in_thread(s, "slow_live_norm", cancel=cancel)
        deadline = time.monotonic() + 30
        before: dict = {}
        while not before and time.monotonic() < deadline:
            before = _stored(reader, "slow_live_norm")
            time.sleep(0.05)
        cancel.set()
        th.join(30)
        report = out["report"]
        after = _stored(reader, "slow_live_norm")
        assert report.cancelled and 0 < len(before) <= len(after) < 16
        assert all(after[name] == v for name, v in before.items())  # nothing committed is lost
        assert report.computed == len(after) and report.computed + report.skipped == 16


def test_the_widget_follows_the_steps_and_calls_panels_on_commits(monkeypatch):
    import diffract.widgets.progress as progress

    calls = []
    monkeypatch.setattr(progress, "notify_panels", lambda **kw: calls.append(kw))
    w = ProgressWidget(["slow_live_norm"])
    s = Session("ram")
    s.models.add(mlp(0, layers=4), "m")
    states = []

    def feed(ev):
        w.callback(ev)
        if ev.stage == "kernel":
            states.append((w.slices_done, w.kernel_calls, w.field, w.param, w.detail))

    report = s.compute.apply("slow_live_norm", progress=feed)
    w.finish(report)
    assert states[0][2] == "slow_live_norm"
    # the slice in progress in the main line, the kernel and its slices in the detail
    assert states[1][3] == "m:layers.0.weight"
    assert states[1][4] == "kernel slow_live_norm (1 of 1): 1/4 slices · step 1/4"
    assert [st[1] for st in states] == [0, 1, 1, 2, 2, 3, 3, 4]  # kernel steps made
    assert [st[0] for st in states] == [0, 1, 1, 2, 2, 3, 3, 4]  # slices done
    assert calls  # the chunk event asked panels to re-read the store
    assert w.status == "done" and w.slices_done == w.slices_total == 4
