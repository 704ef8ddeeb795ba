"""A chunk's weights read by several threads (run/chunks.read_weights_of) give the same
values, in the same slices, as the serial read; NaN/Inf slices still get their marker.

Reference: the frob_norm and spectral_norm numpy computes from the weights written to the
safetensors file, and the same run with the serial read."""

from __future__ import annotations

import numpy as np
import pytest

from diffract.run import chunks
from diffract.session import Session


@pytest.fixture
def checkpoint(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    shapes = [(96, 40), (40, 96), (64, 64), (128, 32), (17, 90), (90, 17)]
    w = {
        f"layers.{i}.weight": rng.standard_normal(s).astype(np.float32)
        for i, s in enumerate(shapes)
    }
    w["layers.2.weight"][5, 7] = np.nan
    w["layers.4.weight"][0, 3] = -np.inf
    path = tmp_path / "model.safetensors"
    save_file(w, str(path))
    return path, w


def _run(path, monkeypatch, parallel: bool):
    monkeypatch.setattr(chunks, "PARALLEL_READ_ABOVE", 0 if parallel else 1 << 62)
    calls = []
    real = chunks.read_weights_of

    def spy(state, slices):
        calls.append(len(slices))
        return real(state, slices)

    monkeypatch.setattr(chunks, "read_weights_of", spy)
    s = Session(profile="ram")
    s.models.add(str(path), model_id="m")
    with pytest.warns(Warning):  # the NaN/Inf slices are noted
        report = s.compute.apply("frob_norm", "spectral_norm", progress=False)
    rows = s.results.export_metrics("frob_norm", "spectral_norm", export_format="list")
    return report, {r["parameter_name"]: r for r in rows}, calls


def test_parallel_read_equals_serial_read(checkpoint, monkeypatch):
    path, w = checkpoint
    rep_p, par, calls = _run(path, monkeypatch, parallel=True)
    assert calls and max(calls) >= 2  # the threads had several slices to read
    rep_s, ser, _ = _run(path, monkeypatch, parallel=False)
    assert sorted(e.name for e in rep_p.non_finite) == ["layers.2.weight", "layers.4.weight"]
    assert [(e.name, e.reason) for e in rep_p.non_finite] == [
        (e.name, e.reason) for e in rep_s.non_finite
    ]
    assert set(par) == set(ser) == set(w)
    for name, arr in w.items():
        for f in ("frob_norm", "spectral_norm"):
            a, b = par[name][f], ser[name][f]
            assert (np.isnan(a) and np.isnan(b)) or a == b, (name, f, a, b)
        if np.isfinite(arr).all():
            a64 = arr.astype(np.float64)
            assert par[name]["frob_norm"] == pytest.approx(np.linalg.norm(a64), rel=1e-6)
            assert par[name]["spectral_norm"] == pytest.approx(np.linalg.norm(a64, 2), rel=1e-5)
        else:
            assert np.isnan(par[name]["frob_norm"])
