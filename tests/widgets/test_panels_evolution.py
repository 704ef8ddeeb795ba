"""``FieldPanel(kind="evolution")`` and ``session.viz.evolution``: a tracked run (models whose meta
holds ``{"track": {"run", "step"}}``) as a layer x step heatmap and per-layer lines, columns in
training-step order (9 < 10 < 100, not the ids' string order), values equal to the exported
field, and new columns as snapshots land (refresh, a run of this kernel, polling)."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import InvalidArgumentError, Session
from diffract.widgets import FieldPanel, run_with_progress

LAYERS = ["l0.weight", "l1.weight", "l2.weight"]


def _weights(step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    return {n: rng.normal(size=(20, 12)).astype(np.float32) * (1 + step / 100) for n in LAYERS}


def _add(s: Session, run: str, step: int) -> str:
    # ids that sort wrongly as strings ("r-10" < "r-100" < "r-9"): the step orders them
    mid = f"{run}-{step}"
    s.models.add(_weights(step), mid, meta={"track": {"run": run, "step": step}})
    return mid


@pytest.fixture
def session():
    s = Session("ram")
    for step in (100, 9, 10):
        _add(s, "r", step)
    s.models.add(_weights(7), "plain")  # not tracked: never a column
    s.compute.apply("frob_norm", progress=False)
    yield s
    s.close()


def _table(s: Session) -> dict[tuple[str, str], float]:
    rows = s.results.export_table("frob_norm", export_format="list")
    return {(r["model_id"], r["name"]): r["frob_norm"] for r in rows}


def test_columns_in_step_order_with_the_exported_values(session):
    assert sorted(session.models.ids())[1:] == ["r-10", "r-100", "r-9"]  # string order is wrong
    p = FieldPanel(session, "frob_norm", kind="evolution", live=False)
    hm, *lines = p.figure.data
    assert hm.type == "heatmap" and list(hm.x) == [0, 1, 2]
    assert list(p.figure.layout.xaxis.ticktext) == ["9", "10", "100"]  # columns in step order
    assert list(hm.y) == LAYERS
    # the rows are labelled with short names (the whole name is in the hover)
    assert list(p.figure.layout.yaxis.tickvals) == LAYERS
    assert list(p.figure.layout.yaxis.ticktext) == ["l0", "l1", "l2"]
    v = _table(session)
    want = [[v[(f"r-{step}", n)] for step in (9, 10, 100)] for n in LAYERS]
    assert [list(row) for row in hm.z] == want
    # the weights grow with the step (x (1 + step/100)): each layer's line rises
    assert [t.name for t in lines] == LAYERS
    for t, row in zip(lines, want, strict=True):
        assert list(t.x) == [9, 10, 100] and list(t.y) == row and t.xaxis == "x2"
        assert row[0] < row[2]
    assert p.n_values() == 9 and "run r" in p.status.value
    # hover names the step, not the column index the heatmap's x is (it read "step 2" for
    # step 100): the step is in each point's customdata
    for trace in (hm, *lines):
        assert "step %{customdata[3]}" in trace.hovertemplate and "%{x}" not in trace.hovertemplate
    assert [c[3] for c in hm.customdata[0]] == [9, 10, 100]
    assert [c[1] for c in hm.customdata[0]] == ["r-9", "r-10", "r-100"]
    assert [c[3] for c in lines[0].customdata] == [9, 10, 100]
    # the title in two lines, so that a narrow panel does not cut the step span
    title = p.figure.layout.title.text
    assert title == "frob_norm across training<br><sub>run r: 3 checkpoints, steps 9..100</sub>"
    # room for the toolbar row (MODEBAR_ROW) and the second title line above the heatmap
    assert (
        p.figure.layout.margin.t == 104 and p.figure.layout.title.pad.t == 44
    )  # toolbar row + a second line
    np.testing.assert_allclose(
        hm.z[0][2], np.linalg.norm(_weights(100)["l0.weight"].astype(np.float64)), rtol=1e-5
    )


def test_a_new_snapshot_adds_a_column(session):
    p = FieldPanel(session, "frob_norm", kind="evolution", live=False)
    _add(session, "r", 50)
    session.compute.apply("frob_norm", progress=False)
    assert p.refresh() is True
    assert list(p.figure.layout.xaxis.ticktext) == ["9", "10", "50", "100"]
    assert len(p.figure.data[0].z[0]) == 4
    assert list(p.figure.data[1].x) == [9, 10, 50, 100]


def test_live_panel_redraws_from_a_run_of_this_kernel(tmp_path):
    with Session(path=tmp_path / "st") as s:
        _add(s, "r", 9)
        s.compute.apply("frob_norm", progress=False)
        p = FieldPanel(s, "frob_norm", kind="evolution")
        assert list(p.figure.data[1].x) == [9]
        _add(s, "r", 100)
        _add(s, "r", 10)
        run_with_progress(s, "frob_norm").wait(60)
        # no refresh() call: the run's commit events redraw the panel
        assert list(p.figure.data[1].x) == [9, 10, 100]
        p.stop()


def test_polls_a_run_written_by_another_session(tmp_path):
    import time

    path = tmp_path / "st"
    with Session(path=path) as w:
        _add(w, "r", 1)
        w.compute.apply("frob_norm", progress=False)
    ro = Session(path=path, readonly=True)
    p = FieldPanel(ro, "frob_norm", kind="evolution", poll=0.05)
    assert list(p.figure.data[1].x) == [1]
    with Session(path=path) as w:
        _add(w, "r", 2)
        w.compute.apply("frob_norm", progress=False)
    deadline = time.monotonic() + 20
    while list(p.figure.data[1].x) != [1, 2] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(p.figure.data[1].x) == [1, 2]
    p.stop()
    ro.close()


def test_run_choice_and_errors(session):
    _add(session, "other", 5)
    with pytest.raises(InvalidArgumentError, match=r"several tracked runs.*\['other', 'r'\]"):
        FieldPanel(session, "frob_norm", kind="evolution")
    p = FieldPanel(session, "frob_norm", kind="evolution", run="other", live=False)
    assert p.figure.data == ()  # its step is not computed yet
    session.compute.apply("frob_norm", progress=False)
    p.refresh()
    assert list(p.figure.data[1].x) == [5] and p.n_values() == 3
    # a run that has not stored a step yet: an empty panel that fills when it does
    q = FieldPanel(session, "frob_norm", kind="evolution", run="later", live=False)
    assert q.figure.data == () and "session.compute.apply" not in q.status.value
    assert "waiting for the tracker's first committed step of run later" in q.status.value
    with Session("ram") as empty:
        empty.models.add(_weights(0), "m")
        with pytest.raises(InvalidArgumentError, match=r'no tracked checkpoints.*run="NAME"'):
            FieldPanel(empty, "frob_norm", kind="evolution")
        with pytest.raises(InvalidArgumentError, match="no tracked checkpoints"):
            empty.viz.evolution("frob_norm")


def test_header_says_layers_and_checkpoints_not_values_and_traces(session):
    """The header names what is drawn in the user's terms (issue 29, point 5): 3 layers ×
    3 checkpoints, not "9 values · 4 traces" (a heatmap plus 3 lines)."""
    p = FieldPanel(session, "frob_norm", kind="evolution", live=False)
    head = p.status.value
    assert "3 layers × 3 checkpoints (9 values)" in head and "trace" not in head
    h = FieldPanel(session, "frob_norm", kind="heatmap", live=False)
    assert "4 models × 3 layers" in h.status.value and "trace" not in h.status.value
    line = FieldPanel(session, "frob_norm", kind="line", live=False)
    assert "3 layers · 4 models" in line.status.value, line.status.value
    # a count alone is said once, in its own word ("24 values (24 values)" before)
    session.compute.apply("esd", progress=False)
    uid = session.models.slices()[0].uid
    esd = FieldPanel(session, "esd", kind="esd", slice=uid, live=False).status.value
    n = len(session.results.get("esd", uid))
    assert f" · {n} eigenvalues · updated" in esd and "values (" not in esd, esd
