"""``RunReport.computed`` counts the values asked for (issue 29: "200 computed" counted the
intermediates stored on the way), so computed + reused + not applicable + skipped + failed
is the number of requested values."""

from __future__ import annotations

from _ui_helpers import mlp
from diffract import Session


def test_computed_counts_the_requested_values_not_the_intermediates():
    s = Session("ram")
    weights = mlp(0, layers=4)
    s.models.add(weights, "m")
    report = s.compute.apply("pl_alpha", progress=False)
    matrices = sum(1 for w in weights.values() if w.ndim == 2)
    stored = s.results.fields()
    assert "pl_alpha" in stored and len(stored) > 1  # intermediates were stored too
    assert report.computed == matrices == 4
    assert report.computed + report.not_applicable == len(weights)
    assert f"computed {matrices} values" in str(report)
    # two fields asked: twice the slices, whatever their shared kernels stored
    again = s.compute.apply("pl_alpha", "stable_rank", progress=False)
    assert again.reused == matrices and again.computed == matrices
    s.close()
