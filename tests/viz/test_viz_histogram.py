"""The ESD histogram holds every eigenvalue: its log-spaced edges end exactly at the smallest
and the largest (np.logspace alone can round the last edge below the largest value)."""

from __future__ import annotations

import numpy as np

from diffract import Session
from diffract.viz import esd_spec


def test_every_eigenvalue_is_in_a_bin():
    rng = np.random.default_rng(0)
    s = Session(profile="ram")
    # many random shapes: before the fix about half of random spectra lost their largest value
    weights = {f"l{i}.weight": rng.normal(size=(20 + i, 12 + i % 7)) for i in range(40)}
    s.models.add(weights, model_id="m")
    s.compute.apply("esd", progress=False)
    for sl in s.models.slices():
        evals = np.asarray(s.store.get((sl.uid, "esd")))
        evals = evals[evals > 0]
        spec = esd_spec(s, sl.uid)
        hist = spec["data"][0]
        centers, density = np.asarray(hist["x"]), np.asarray(hist["y"])
        lo, hi = evals.min(), evals.max()
        r = (hi / lo) ** (1 / 60)
        counts = density * centers * (np.sqrt(r) - 1 / np.sqrt(r)) * evals.size
        np.testing.assert_allclose(counts, np.round(counts), atol=1e-6)
        assert int(np.round(counts).sum()) == evals.size, sl.name
