"""Cross-model fields in figures and panels (drift from a reference checkpoint), the
background apply handle, and a session read by another thread while a run writes."""

from __future__ import annotations

import threading

import numpy as np
import plotly  # noqa: F401  (a test dependency: missing is a failure)
import pytest

from diffract import Session


@pytest.fixture
def checkpoints(mlp_weights):
    s = Session(profile="ram")
    for step in range(3):
        s.models.add(
            {k: v * (1 + 0.1 * step) for k, v in mlp_weights.items()},
            model_id=f"mlp-step-{step:04d}",
        )
    s.compute.apply("relative_change", reference="mlp-step-0000", progress=False)
    return s


def test_heatmap_of_drift_against_the_first_checkpoint(checkpoints):
    fig = checkpoints.viz.heatmap("relative_change", reference="mlp-step-0000")
    (trace,) = fig.data
    assert list(trace.y) == ["mlp-step-0001", "mlp-step-0002"]  # the reference has no row
    z = np.array(trace.z, dtype=float)
    # W * (1 + 0.1 k) drifts by exactly 0.1 k relative to W, on every slice
    np.testing.assert_allclose(z[0][~np.isnan(z[0])], 0.1, rtol=1e-6)
    np.testing.assert_allclose(z[1][~np.isnan(z[1])], 0.2, rtol=1e-6)
    with pytest.raises(ValueError, match="need export_table"):
        checkpoints.viz.heatmap("relative_change")


def test_field_panel_with_a_reference(checkpoints):
    from diffract.widgets import FieldPanel

    panel = FieldPanel(
        checkpoints, "relative_change", kind="line", reference="mlp-step-0000", live=False
    )
    assert [t.name for t in panel.figure.data] == ["mlp-step-0001", "mlp-step-0002"]


def test_viz_forwards_only_its_figures(checkpoints):
    with pytest.raises(AttributeError, match="viz has no figure 'field_rows'"):
        checkpoints.viz.field_rows  # noqa: B018


def test_apply_async_returns_a_run_handle(mlp_weights):
    s = Session(profile="ram")
    s.models.add(mlp_weights, model_id="m")
    run = s.compute.apply_async("stable_rank", "frob_norm")
    report = run.wait()
    assert not report.failures and report.computed > 0
    assert len(s.results.export_table("stable_rank", export_format="list")) == 6


def test_reads_from_another_thread_while_a_run_writes(tmp_path, mlp_weights):
    big = {f"l{i}.{k}": v for i in range(20) for k, v in mlp_weights.items()}
    with Session(path=tmp_path / "st", memory_budget=1) as s:
        s.models.add(big, model_id="m")
        errors: list[BaseException] = []
        stop = threading.Event()

        def reader():
            while not stop.is_set():
                try:
                    s.store.refresh()
                    for k in list(s.store.keys()):
                        s.store.get(k)
                except BaseException as exc:
                    errors.append(exc)
                    return

        t = threading.Thread(target=reader)
        t.start()
        report = s.compute.apply("esd", "stable_rank", progress=False)
        stop.set()
        t.join()
        assert not errors, errors[0]
        assert report.chunks > 30 and not report.failures
