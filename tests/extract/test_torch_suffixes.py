"""PyTorch checkpoints with ``.pth`` / ``.bin`` suffixes read like ``.pt``."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "layers.0.weight": rng.normal(size=(8, 6)).astype(np.float32),
        "layers.0.bias": rng.normal(size=8).astype(np.float32),
        "layers.1.weight": rng.normal(size=(5, 8)).astype(np.float32),
        "embed.weight": rng.normal(size=(10, 6)).astype(np.float32),
    }


@pytest.mark.parametrize("suffix", [".pth", ".bin"])
def test_torch_checkpoints_with_pth_and_bin_suffixes(tmp_path, suffix):
    import torch

    w = _weights()
    path = tmp_path / f"model{suffix}"
    torch.save({k: torch.from_numpy(v) for k, v in w.items()}, path)
    s = Session(profile="ram")
    slices = s.models.add(str(path), model_id="m")
    assert sorted(sl.name for sl in slices) == sorted(w)
    s.compute.apply("frob_norm", progress=False)
    for name, v in w.items():
        if v.ndim == 2:
            want = float(np.linalg.norm(v.astype(np.float64)))
            assert s.results.get("frob_norm", name) == pytest.approx(want, rel=1e-6), name
    np.testing.assert_array_equal(s.models.weights("layers.1.weight"), w["layers.1.weight"])
