"""Widget state and messages: trait round trips, the scope a filter builder yields, progress
events and cancel, live panels updating when a field lands in the store."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from _ui_helpers import mlp
from diffract import Filter, FilterChain, FilterError, Session
from diffract.widgets import (
    FilterBuilder,
    ProgressWidget,
    format_names,
    parse_names,
    run_with_progress,
)


@pytest.fixture
def session():
    s = Session("ram")
    s.models.add(mlp(0), "m1")
    s.models.add(mlp(1), "m2")
    return s


@pytest.fixture
def disk_session(tmp_path):
    with Session(path=tmp_path / "store") as s:
        s.models.add(mlp(0, layers=6, width=48), "m1")
        s.models.add(mlp(1, layers=6, width=48), "m2")
        yield s


def _state(widget):
    return widget.get_state()


# --- filter builder ---------------------------------------------------------------------------


def test_names_box_parsing_round_trips():
    assert parse_names("") is None
    assert parse_names("a, b ,c") == ("a", "b", "c")
    assert parse_names("re:layers\\.[0-9]{1,2}\\.weight") == ("re:layers\\.[0-9]{1,2}\\.weight",)
    assert parse_names("re:a,b\nexact") == ("re:a,b", "exact")
    for names in [("a",), ("a", "b"), ("re:x{1,2}", "y"), ("re:.*",)]:
        assert parse_names(format_names(names)) == names


def test_filter_builder_lists_choices_and_counts(session):
    fb = FilterBuilder(session)
    assert fb.available_models == ["m1", "m2"]
    assert {"dense", "bias"} <= set(fb.available_types)
    assert fb.count == fb.total == len(session) == 16
    assert fb.filter_json == "[]" and fb.error == ""
    fb.model_ids = ["m2"]
    assert fb.count == 8
    assert {r["model_id"] for r in fb.preview} == {"m2"}
    assert set(fb.preview[0]) == {"model_id", "name", "type", "shape", "uid"}


def test_filter_builder_scope_is_session_filter(session):
    fb = FilterBuilder(session)
    fb.model_ids = ["m1"]
    fb.names = "re:layers\\.[0-1]\\..*"
    fb.param_types = ["dense"]
    expected = session.filter(
        model_ids=["m1"], param_names=["re:layers\\.[0-1]\\..*"], param_types=["dense"]
    )
    assert fb.scope.filter_chain == expected.filter_chain
    assert [s.uid for s in fb.scope.models.slices()] == [s.uid for s in expected.models.slices()]
    assert fb.count == len(expected) == 2
    # JSON form = the engine's filter data, and it round-trips
    assert fb.filter_json == expected.utils.filter_json()
    assert FilterChain.from_json(fb.filter_json) == expected.filter_chain
    fb2 = FilterBuilder(session, filter=fb.filter_json)
    assert fb2.scope.filter_chain == expected.filter_chain
    assert (fb2.model_ids, fb2.names, fb2.param_types) == (
        ["m1"],
        "re:layers\\.[0-1]\\..*",
        ["dense"],
    )


def test_filter_builder_on_a_scope_and_uids(session):
    base = session.filter(model_ids="m1")
    fb = FilterBuilder(base)
    assert fb.total == 8
    uids = [s.uid for s in base.models.slices()[:3]]
    fb.uids = "\n".join(uids[:2]) + ", " + uids[2]
    assert fb.count == 3
    assert fb.scope.filter_chain == base.filter(param_ids=uids).filter_chain
    # the utils entry point gives the same widget over the scope
    w = base.utils.filter_builder()
    assert isinstance(w, FilterBuilder) and w.total == 8


def test_filter_builder_bad_regex_is_an_inline_error(session):
    fb = FilterBuilder(session)
    fb.names = "re:layers.(("
    assert "invalid regular expression" in fb.error and "layers.((" in fb.error
    assert fb.count == 0
    with pytest.raises(FilterError):
        _ = fb.scope
    fb.names = "layers.0.weight"
    assert fb.error == "" and fb.count == 2


def test_filter_builder_custom_type_and_nothing_matched(session):
    fb = FilterBuilder(session)
    fb.param_types = ["attention"]  # a custom type: valid, matches nothing here
    assert fb.error == "" and fb.count == 0 and fb.preview == []
    fb.param_types = ["Not A Type!"]
    assert "param_types" in fb.error


def test_filter_builder_trait_round_trip_via_state(session):
    fb = FilterBuilder(session)
    # what the front end sends: a partial state update
    fb.set_state({"model_ids": ["m2"], "names": "layers.3.weight, layers.3.bias"})
    st = _state(fb)
    assert st["count"] == 2 and json.loads(st["filter_json"]) == [
        {"model_ids": ["m2"], "param_names": ["layers.3.weight", "layers.3.bias"]}
    ]
    fb._on_msg(fb, {"type": "refresh"}, [])
    session.models.add(mlp(2), "m3")
    fb._on_msg(fb, {"type": "refresh"}, [])
    assert fb.available_models == ["m1", "m2", "m3"]


def test_filter_builder_static_fallback(session):
    fb = FilterBuilder(session, filter=Filter.make(model_ids=["m1"]))
    bundle = fb._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "8 of 16 slices" in data["text/html"] and "layers.0.weight" in data["text/html"]


# --- progress -----------------------------------------------------------------------------------


def test_progress_widget_follows_events(session):
    w = ProgressWidget(["frob_norm"])
    w.throttle = 0
    now = []

    def feed(ev):
        w.callback(ev)
        now.append((w.field, w.param))

    report = session.compute.apply("frob_norm", progress=feed, memory_budget=4000)
    assert ("frob_norm", "m1:layers.0.weight") in now  # the field and slice in progress
    w.finish(report)
    st = _state(w)
    assert st["status"] == "done"
    assert st["chunks_done"] == st["chunks_total"] > 1
    assert st["slices_done"] == st["slices_total"] == 8  # weight matrices only
    assert st["values_done"] == st["values_total"] == 8 and st["fraction"] == 1.0
    assert st["field"] == st["param"] == ""  # nothing is in progress once it ended
    assert st["failures"] == 0 and "computed" in st["message"]
    data = w._repr_mimebundle_()
    data = data[0] if isinstance(data, tuple) else data
    assert "done" in data["text/html"]


def _click_cancel_after(monkeypatch, chunks: int) -> None:
    """Make the widget's Cancel click arrive when ``chunks`` chunks are done (from the run's
    own progress event, so the moment does not depend on how fast this machine is)."""
    real = ProgressWidget.callback

    def callback(self, ev):
        real(self, ev)
        if ev.stage == "chunk" and ev.chunks_done == chunks:
            self.set_state({"cancel_requested": True})  # what the Cancel button sends

    monkeypatch.setattr(ProgressWidget, "callback", callback)


def test_cancel_click_stops_after_the_current_chunk_and_keeps_fields(disk_session, monkeypatch):
    s = disk_session
    fields = ("pl_alpha", "stable_rank")
    _click_cancel_after(monkeypatch, 2)
    run = run_with_progress(s, *fields, memory_budget=20_000)  # one slice per chunk
    w = run.widget
    report = run.wait(60)
    assert report.cancelled and w.status == "cancelled"
    done_chunks = report.chunks
    assert done_chunks == 2 < w.chunks_total  # stopped right after the chunk in progress
    # every finished field stays stored, nothing else was written
    stored = s.results.export_table(*fields, export_format="list")
    have = [r for r in stored if r["pl_alpha"] is not None]
    assert 0 < len(have) < 12
    # a second apply computes only what is missing
    report2 = s.compute.apply(*fields, progress=False)
    assert report2.reused >= len(have)


def test_run_with_progress_reports_errors_and_refuses_a_second_run(disk_session, monkeypatch):
    started, release = threading.Event(), threading.Event()
    real = ProgressWidget.callback

    def callback(self, ev):  # the first run waits in its first progress event until released
        started.set()
        assert release.wait(30)
        real(self, ev)

    monkeypatch.setattr(ProgressWidget, "callback", callback)
    run = run_with_progress(disk_session, "frob_norm")
    assert started.wait(30) and not run.done()
    with pytest.raises(RuntimeError, match=r"a run of \['frob_norm'\] is still going"):
        run_with_progress(disk_session, "frob_norm")
    release.set()
    assert run.wait(30).ok
    run_with_progress(disk_session, "stable_rank").wait(30)  # once done, the next may start
    with pytest.raises(Exception, match="frob_nrom"):
        run_with_progress(disk_session, "frob_nrom")


def test_run_with_progress_is_awaitable(disk_session):
    import asyncio

    async def main():
        return await run_with_progress(disk_session, "frob_norm")

    report = asyncio.run(main())
    assert report.ok and report.requested == ("frob_norm",)
    assert len(disk_session.results.export_table("frob_norm", export_format="list")) == 24


# --- live panels --------------------------------------------------------------------------------


def test_panel_updates_in_place_when_a_field_lands(disk_session):
    from diffract.widgets import FieldPanel

    s = disk_session
    p = FieldPanel(s, "frob_norm", kind="line", poll=None)  # refresh() by hand: no follower
    assert p.state()["n_values"] == 0 and "nothing stored yet" in p.status.value
    s.filter(model_ids="m1").compute.apply("frob_norm", progress=False)
    assert p.refresh() is True
    st = p.state()
    assert [t["name"] for t in st["traces"]] == ["m1"] and st["n_values"] == 6
    fig_trace = p.figure.data[0]
    s.filter(model_ids="m2").compute.apply("frob_norm", progress=False)
    p.refresh()
    assert [t["name"] for t in p.state()["traces"]] == ["m1", "m2"]
    assert p.rebuilds == 2  # a new trace: rebuilt
    # the m1 trace object lives on (updated, not rebuilt from scratch) once the set is stable
    fig_trace, rebuilds, updates = p.figure.data[0], p.rebuilds, p.updates
    n_m1 = len(fig_trace.y)
    s.filter(model_ids="m1", param_names="layers.0.weight").compute.erase("frob_norm")
    assert p.refresh() is True
    assert len(p.figure.data[0].y) == n_m1 - 1  # the new values are shown...
    s.compute.apply("frob_norm", progress=False)
    assert p.refresh() is True
    assert len(p.figure.data[0].y) == n_m1
    assert p.rebuilds == rebuilds and p.updates == updates + 2  # ...in place (same traces)
    assert p.figure.data[0].name == fig_trace.name
    assert p.refresh() is False  # nothing new: no message sent
    hover = p.figure.data[0].customdata[0]
    assert list(hover[:3]) == ["m1", "layers.0.weight", "dense"]


def test_panel_refreshes_from_progress_events(disk_session):
    from diffract.widgets import FieldPanel

    p = FieldPanel(disk_session, "frob_norm", kind="bar")
    run = run_with_progress(disk_session, "frob_norm", memory_budget=20_000)
    run.wait(30)
    assert p.state()["n_values"] == 12  # pushed by the run's chunk events, no refresh() call
    p.stop()


def test_panel_kinds_and_errors(disk_session):
    from diffract.widgets import FieldPanel

    s = disk_session
    s.compute.apply("frob_norm", "pl_alpha", "esd", "pl_esd_xmin", progress=False)
    h = FieldPanel(s, "frob_norm", kind="heatmap")
    assert h.figure.data[0].type == "heatmap" and list(h.figure.data[0].y) == ["m1", "m2"]
    sc = FieldPanel(s, ["frob_norm", "pl_alpha"], kind="scatter")
    assert len(sc.figure.data) == 2
    e = FieldPanel(s, kind="esd", slice="layers.0.weight", model_id="m1")
    assert e.figure.layout.xaxis.type == "log"
    # the ESD, its power-law fit and the xmin line (diffract.viz.esd_full)
    assert [d.mode for d in e.figure.data] == ["markers", "lines", "lines"]
    assert e.figure.data[2].name.startswith("xmin=")
    with pytest.raises(ValueError, match="two fields"):
        FieldPanel(s, "frob_norm", kind="scatter")
    with pytest.raises(ValueError, match="kind"):
        FieldPanel(s, "frob_norm", kind="pie")
    with pytest.raises(Exception, match="frob_nrom"):
        FieldPanel(s, "frob_nrom")
    data = h._repr_mimebundle_()
    data = data[0] if isinstance(data, tuple) else data
    assert "heatmap 2 rows × 6 columns" in data["text/html"]
    # the static copy is the figure itself (Plotly JSON), in the HTML and as Plotly's mimetype
    fig = data["application/vnd.plotly.v1+json"]
    assert fig["data"][0]["z"] == [list(r) for r in h.figure.data[0].z]
    drawn = re.search(r"var fig=(\{.*?\});var n=0", data["text/html"])
    assert drawn and json.loads(drawn.group(1))["data"][0]["z"] == fig["data"][0]["z"]


def test_panel_polls_a_store_written_by_another_session(tmp_path):
    from diffract.widgets import FieldPanel

    path = tmp_path / "store"
    with Session(path=path) as w:
        w.models.add(mlp(0), "m1")
    ro = Session(path=path, readonly=True)
    p = FieldPanel(ro, "frob_norm", poll=0.05)
    with Session(path=path) as w:
        w.compute.apply("frob_norm", progress=False)
    deadline = time.monotonic() + 10
    while p.state()["n_values"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    p.stop()
    assert p.state()["n_values"] == 4


def test_notebook_progress_pair_without_a_blocking_cancel():
    from diffract.widgets import notebook_progress

    cb, finish = notebook_progress(["frob_norm"])
    w = cb.__self__
    assert isinstance(w, ProgressWidget) and w.fields == ["frob_norm"]
    # a blocking apply in the kernel's main thread cannot receive a click: no Cancel button
    assert w.cancellable is False and "Interrupt the kernel" in w.message
    finish()
    assert w.status == "done"
    # from a worker thread with a cancel event the button works
    pair = []
    worker = threading.Thread(
        target=lambda: pair.append(notebook_progress(["x"], threading.Event()))
    )
    worker.start()
    worker.join(30)
    assert pair[0][0].__self__.cancellable is True


def test_widget_bundles_are_built():
    from diffract import widgets

    for name in ("filter", "progress"):
        assert (widgets.STATIC / f"{name}.js").exists(), (
            "run npm run build (pip install -e . does it)"
        )
        text = (widgets.STATIC / f"{name}.js").read_text()
        assert "render" in text and "http" not in text.split("//#")[0].replace(
            "http://www.w3.org", ""
        )
    # the widgets load these bundles, not the "bundle was not built" stand-in
    # (anywidget wraps a bundle's Path in FileContents, whose str() is the file's text)
    assert str(FilterBuilder._esm) == (widgets.STATIC / "filter.js").read_text()
    assert str(ProgressWidget._esm) == (widgets.STATIC / "progress.js").read_text()


# --- panels render what Python holds; progress tells the truth ----------------------------------


def _synced(widget, name):
    """The value of a synced trait as the front end receives it (the serialized state)."""
    return widget.get_state(name)[name]


@pytest.mark.parametrize("kind", ["heatmap", "line", "bar", "scatter", "esd"])
def test_panel_state_traits_hold_the_data_a_late_view_renders(disk_session, kind):
    """The blank-heatmap race: a browser model still loading its module drops messages sent
    right after the comm opens; a view then renders the synced state. That state (the figure's
    JSON) must hold every trace Python holds, after the first read and after each update."""
    from diffract.widgets import FieldPanel

    s = disk_session
    s.filter(model_ids="m1").compute.apply("frob_norm", "stable_rank", "esd", progress=False)
    opts = {
        "heatmap": ("frob_norm",),
        "line": ("frob_norm",),
        "bar": ("frob_norm",),
        "scatter": (("frob_norm", "stable_rank"),),
        "esd": (),
    }[kind]
    extra = {"slice": "layers.1.weight", "model_id": "m1"} if kind == "esd" else {}
    p = FieldPanel(s, *opts, kind=kind, poll=None, **extra)
    fig = json.loads(_synced(p, "figure_json"))
    data = fig["data"]
    assert len(data) == len(p.figure.data) >= 1
    key = "z" if kind == "heatmap" else "y"
    assert data[0][key] is not None and len(p.figure.data[0][key]) > 0
    assert fig["layout"]["height"] == 380 and _synced(p, "height") == 380
    if kind in ("heatmap", "line"):
        s.compute.apply("frob_norm", progress=False)  # m2 lands: a new row / trace
        assert p.refresh()
        data = json.loads(_synced(p, "figure_json"))["data"]
        names = [d.get("name") for d in data]
        if kind == "line":
            assert names == ["m1", "m2"]
        else:
            assert list(p.figure.data[0].y) == ["m1", "m2"] and len(data[0]["y"]) == 2
    p.stop()


def _event(stage, cd, ct, sd, st, param=None, elapsed=1.0, cancelled=False):
    from diffract.run.report import ProgressEvent

    return ProgressEvent(stage, cd, ct, sd, st, "f", param, elapsed, None, 0, cancelled)


def test_progress_moves_inside_one_chunk_and_the_eta_is_smoothed():
    w = ProgressWidget(["f"])
    w.callback(_event("start", 0, 1, 0, 10, elapsed=0.0))
    assert w.status == "running" and w.slices_done == 0
    etas = []
    for i in range(10):
        for _kernel in range(2):
            w.callback(_event("kernel", 0, 1, 0, 10, param=f"s{i}", elapsed=1.0 + i))
        etas.append(w.eta)
    # one chunk: the slices reached move with the kernel events, nothing is stored yet
    assert w.slices_done == 9 and w.slices_stored == 0 and w.kernel_calls == 20
    assert etas[0] is None and all(e is not None for e in etas[1:])
    # a slice 5x slower moves the smoothed ETA by less than half of the raw jump
    before = w.eta
    w.callback(_event("kernel", 0, 1, 0, 10, param="s9", elapsed=60.0))
    raw = 60.0 / 9 * 1
    assert abs(w.eta - before) < abs(raw - before)
    w.callback(_event("chunk", 1, 1, 10, 10, elapsed=61.0))
    w.callback(_event("done", 1, 1, 10, 10, elapsed=61.0))
    w.finish()
    assert w.status == "done" and w.slices_done == w.slices_stored == 10 and w.eta is None
    assert w.cancellable is False


def test_progress_final_states_add_up(disk_session):
    s = disk_session
    # done: the report's counts
    w = ProgressWidget(["frob_norm"], registry=s.registry)
    report = s.compute.apply("frob_norm", progress=w.callback)
    w.finish(report)
    assert w.status == "done" and w.outcome.startswith(f"done: {report.computed} computed")
    assert w.slices_done == w.slices_total == 12
    # nothing to compute: everything is stored
    w2 = ProgressWidget(["frob_norm"])
    report2 = s.compute.apply("frob_norm", progress=w2.callback)
    w2.finish(report2)
    assert w2.status == "done" and w2.outcome.startswith("nothing to compute")
    # the blocking pair has no report: the last event says it was cancelled
    w3 = ProgressWidget(["x"])
    w3.callback(_event("start", 0, 4, 0, 4))
    w3.callback(_event("chunk", 1, 4, 1, 4))
    w3.callback(_event("kernel", 1, 4, 1, 4, param="b"))
    w3.callback(_event("kernel", 1, 4, 1, 4, param="c"))
    w3.callback(_event("done", 1, 4, 1, 4, cancelled=True))
    w3.finish()
    assert w3.status == "cancelled" and w3.slices_done == w3.slices_stored == 1


def test_progress_lists_failures_with_slice_kernel_and_message(disk_session):
    import numpy as np

    import diffract

    @diffract.kernel(outputs="w_fails_on_layer2", min_ndim=2, replace=True)
    def w_fails_on_layer2(weights):
        if weights.shape[0] == weights.shape[1] and float(np.abs(weights).sum()) > 0:
            raise ValueError("boom on a square matrix")
        return 1.0

    run = run_with_progress(disk_session, "w_fails_on_layer2")
    with pytest.warns(diffract.KernelFailureWarning, match="boom on a square matrix"):
        report = run.wait(60)
    w = run.widget
    assert report.failures and w.failures == len(report.failures)
    assert len(w.failure_list) == min(len(report.failures), 50)
    row = w.failure_list[0]
    f = report.failures[0]
    assert row == {
        "model_id": f.model_id,
        "slice": f.name,
        "uid": f.uid,
        "field": "w_fails_on_layer2",
        "kernel": "w_fails_on_layer2",
        "error": f.error,
    }
    assert "boom on a square matrix" in row["error"]
    assert f"{len(report.failures)} failed" in w.outcome
