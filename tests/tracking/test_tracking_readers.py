"""After a crash mid-step, the readers of the store (every panel kind, the static evolution,
layers and heatmap figures, the sidebar's summary) leave out the tracked run's incomplete step (its weights stored,
some of its fields, no committed mark) until a tracker resumes the run; checkpoints added by
hand with the ``track`` meta (no tracker, no marks) are all shown. The SIGKILL case itself is
in test_tracking_crash.py."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

from diffract import Session
from diffract.kernels import default_registry, make_kernel
from diffract.server import StoreReader
from diffract.tracking import (
    checkpoint_id,
    committed_ids,
    incomplete_checkpoints,
    run_steps,
)
from diffract.widgets import FieldPanel

LAYERS = ["fc1.weight", "fc2.weight"]


def _weights(step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    return {n: rng.normal(size=(12, 8)) * (1 + step / 10) for n in LAYERS}


def _crashed_store(path) -> str:
    """A store as a tracker killed inside step 2's analysis leaves it: steps 0 and 1
    committed, step 2's weights and the value of its first slice stored, no mark."""
    with Session(path=path) as s:
        with s.track("run", ["frob_norm"]) as tr:
            tr.step(_weights(0), step=0)
            tr.step(_weights(1), step=1)
        mid = checkpoint_id("run", 2)
        s.models.add(_weights(2), model_id=mid, meta={"track": {"run": "run", "step": 2}})
        s.filter(model_ids=[mid], param_names=["fc1.weight"]).compute.apply(
            "frob_norm", progress=False
        )
        s.models.add(_weights(7), "plain")
        s.filter(model_ids=["plain"]).compute.apply("frob_norm", progress=False)
    return mid


def _ticks(panel: FieldPanel) -> list[str]:
    return list(panel.figure.layout.xaxis.ticktext)


def test_panels_leave_out_the_incomplete_step_until_a_tracker_resumes(tmp_path):
    path = tmp_path / "store"
    mid = _crashed_store(path)
    committed = ["run-s000000000", "run-s000000001"]
    with Session(path=path) as s:
        assert run_steps(s, "run").incomplete == {2: mid}
        assert incomplete_checkpoints(s.store) == {mid: ("run", 2)}
        evo = FieldPanel(s, "frob_norm", kind="evolution", run="run", live=False)
        assert _ticks(evo) == ["0", "1"] and evo.n_values() == 4
        static = s.viz.evolution("frob_norm", run="run")
        assert list(static.layout.xaxis.ticktext) == ["0", "1"]
        line = FieldPanel(s, "frob_norm", kind="line", live=False)
        assert {t.name for t in line.figure.data} == {*committed, "plain"}
        heat = FieldPanel(s, "frob_norm", kind="heatmap", live=False)
        assert mid not in str(heat.spec) and "plain" in str(heat.spec)
        assert heat.n_values() == 3 * len(LAYERS)
        # a checkpoint named in models= is shown, incomplete or not
        named = FieldPanel(s, "frob_norm", kind="line", models=[mid], live=False)
        (trace,) = named.figure.data
        assert trace.name == mid and len(trace.y) == 1  # only the slice that was stored
        # a tracker resumes the run: the step is finished, and every reader shows it
        s.track("run", ["frob_norm"]).close()
        assert committed_ids(s, "run") == [*committed, mid]
        assert evo.refresh() is True and _ticks(evo) == ["0", "1", "2"]
        assert evo.n_values() == 6
        want = np.linalg.norm(_weights(2)["fc2.weight"])
        assert evo.figure.data[0].z[1][2] == pytest.approx(want)


def _norms(step: int) -> list[float]:
    """||W||_F of each layer of step ``step``'s weights, by numpy (stored as float32: the
    figures agree to rtol 1e-6)."""
    return [float(np.linalg.norm(w)) for w in _weights(step).values()]


def test_static_layers_heatmap_and_scatter_leave_out_the_incomplete_step_until_a_tracker_resumes(
    tmp_path,
):
    path = tmp_path / "store"
    mid = _crashed_store(path)
    committed = ["run-s000000000", "run-s000000001"]
    want = {committed[0]: _norms(0), committed[1]: _norms(1), "plain": _norms(7)}
    with Session(path=path) as s:
        assert incomplete_checkpoints(s.store) == {mid: ("run", 2)}
        for kind in ("line", "bar"):
            fig = s.viz.layers("frob_norm", kind=kind)
            assert [t.name for t in fig.data] == [*committed, "plain"]
            for t in fig.data:
                np.testing.assert_allclose(t.y, want[t.name], rtol=1e-6)
        (heat,) = s.viz.heatmap("frob_norm").data
        assert list(heat.y) == [*committed, "plain"]
        np.testing.assert_allclose(np.array(heat.z, dtype=float), list(want.values()), rtol=1e-6)
        scatter = s.viz.scatter("frob_norm", "frob_norm").data
        assert [t.name for t in scatter] == [*committed, "plain"]
        for t in scatter:
            np.testing.assert_allclose(t.x, want[t.name], rtol=1e-6)
        # a checkpoint named in models= is shown, incomplete or not (only its stored slice)
        (named,) = s.viz.layers("frob_norm", models=[mid]).data
        assert named.name == mid
        np.testing.assert_allclose(named.y, _norms(2)[:1], rtol=1e-6)
        (named_heat,) = s.viz.heatmap("frob_norm", models=[mid, "plain"]).data
        assert list(named_heat.y) == [mid, "plain"] and named_heat.z[0][1] is None
        # a tracker resumes the run: step 2 is finished, and both figures show it
        s.track("run", ["frob_norm"]).close()
        want = {**dict(list(want.items())[:2]), mid: _norms(2), "plain": _norms(7)}
        fig = s.viz.layers("frob_norm")
        assert [t.name for t in fig.data] == [*committed, mid, "plain"]
        for t in fig.data:
            np.testing.assert_allclose(t.y, want[t.name], rtol=1e-6)
        (heat,) = s.viz.heatmap("frob_norm").data
        assert list(heat.y) == [*committed, mid, "plain"]
        np.testing.assert_allclose(np.array(heat.z, dtype=float), list(want.values()), rtol=1e-6)


def test_the_sidebar_summary_leaves_out_the_incomplete_step(tmp_path):
    path = tmp_path / "store"
    mid = _crashed_store(path)
    reader = StoreReader.get(path.resolve())
    models = reader.summary()["models"]
    assert [m["model_id"] for m in models] == ["run-s000000000", "run-s000000001", "plain"]
    assert [m["track"] for m in models[:2]] == [
        {"run": "run", "step": 0},
        {"run": "run", "step": 1},
    ]
    with Session(path=path) as s:
        s.track("run", ["frob_norm"]).close()  # finishes step 2
    models = reader.summary()["models"]
    assert [m["model_id"] for m in models] == ["run-s000000000", "run-s000000001", mid, "plain"]
    assert models[2]["track"] == {"run": "run", "step": 2} and "frob_norm" in models[2]["fields"]


def test_checkpoints_added_by_hand_are_all_shown(tmp_path):
    """No tracker wrote the run: its models have no marks, and none is taken for incomplete."""
    path = tmp_path / "store"
    with Session(path=path) as s:
        for step in (100, 9, 10):
            s.models.add(_weights(step), f"r-{step}", meta={"track": {"run": "r", "step": step}})
        s.filter(model_ids=["r-9", "r-10"]).compute.apply("frob_norm", progress=False)
        assert incomplete_checkpoints(s.store) == {}
        assert sorted(run_steps(s, "r").committed) == [9, 10, 100]
        evo = FieldPanel(s, "frob_norm", kind="evolution", live=False)
        assert _ticks(evo) == ["9", "10"]  # 100 has no value yet: no column, as before
    models = StoreReader.get(path.resolve()).summary()["models"]
    assert [m["model_id"] for m in models] == ["r-9", "r-10", "r-100"]


def test_a_run_whose_only_step_is_incomplete_is_an_empty_panel(tmp_path):
    """Closed without draining inside step 0's analysis: the run is known (the tracker marked
    it at start), its one step is incomplete, and the evolution panel waits for a step."""
    gate, entered = threading.Event(), threading.Event()

    def gated_norm(weights):
        """||W||_F, once the test opens the gate."""
        entered.set()
        gate.wait(30)
        return float(np.linalg.norm(weights))

    reg = default_registry().copy()
    reg.register(make_kernel(gated_norm, outputs="gated_norm"))
    with Session(path=tmp_path / "store", registry=reg) as s:
        tr = s.track("run", ["gated_norm"])
        tr.step(_weights(0), step=0)
        assert entered.wait(30)
        gate.set()
        with warnings.catch_warnings():  # the cancelled analysis is a failure
            warnings.simplefilter("ignore", RuntimeWarning)
            tr.close(drain=False)
        assert list(run_steps(s, "run").incomplete) == [0]
        evo = FieldPanel(s, "gated_norm", kind="evolution", live=False)  # the run is found
        assert evo.run == "run" and evo.n_values() == 0 and evo.figure.data == ()
    summary = StoreReader.get((tmp_path / "store").resolve()).summary()
    assert summary["models"] == []
