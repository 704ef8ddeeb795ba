"""Cross-model fields requested together, and a failed input that fails only the cross kernels
using it."""

from __future__ import annotations

import numpy as np
import pytest

from _engine_kit import apply_quietly
from diffract import Session


@pytest.mark.parametrize("other", ["pl_alpha_drift", "spectral_norm_drift"])
def test_cross_fields_requested_together(reg, rng, other):
    a, b = rng.normal(size=(8, 6)), rng.normal(size=(8, 6))
    together = Session(profile="ram", registry=reg)
    alone = Session(profile="ram", registry=reg)
    for s in (together, alone):
        s.models.add({"w": a}, model_id="a")
        s.models.add({"w": b}, model_id="b")
    report = apply_quietly(together, other, "l_agreement", reference="a")
    assert report.ok, report.failures
    assert apply_quietly(alone, other, reference="a").ok
    assert apply_quietly(alone, "l_agreement", reference="a").ok
    for f in (other, "l_agreement"):
        got = together.results.get(f, "w", "b", reference="a")
        want = alone.results.get(f, "w", "b", reference="a")
        np.testing.assert_allclose(got, want)


def test_failed_input_fails_only_the_cross_kernels_using_it(reg):
    s = Session(profile="ram", registry=reg)
    s.models.add({"z": np.zeros((3, 3))}, model_id="a")
    s.models.add({"z": np.ones((3, 3))}, model_id="b")
    report = apply_quietly(s, "delta_frob_norm", "pl_alpha_drift", reference="a")
    assert [f.field for f in report.failures] == ["pl_alpha_drift"]
    assert "'pl_alpha'" in report.failures[0].error
    assert s.results.get("delta_frob_norm", "z", "b", reference="a") == pytest.approx(3.0)
