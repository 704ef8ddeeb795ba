"""The accelerator path (PyTorch or JAX) gives the CPU path's singular values. Exercised here
on the CPU devices of both libraries; on a machine with a GPU the same code runs there."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import ConfigError
from diffract.kernels.device import available_accelerators, gram_svals, resolve_device


@pytest.mark.parametrize("device", ["torch:cpu", "jax:cpu"])
@pytest.mark.parametrize("shape", [(40, 25), (25, 40), (4, 30, 30)])
def test_device_svals_match_lapack(device, shape):
    w = np.random.default_rng(0).normal(size=shape)
    ref = np.linalg.svd(w if w.ndim == 3 else w[None], compute_uv=False)
    got = gram_svals(w, device)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-10)


def test_prescribed_singular_values_on_a_device():
    rng = np.random.default_rng(1)
    u, _ = np.linalg.qr(rng.normal(size=(60, 60)))
    v, _ = np.linalg.qr(rng.normal(size=(30, 30)))
    s = np.geomspace(10.0, 0.1, 30)
    w = u[:, :30] @ np.diag(s) @ v.T
    for device in ("torch:cpu", "jax:cpu"):
        np.testing.assert_allclose(gram_svals(w, device)[0], s, rtol=1e-8)


def test_resolve_device():
    assert resolve_device(None) == "cpu" and resolve_device("cpu") == "cpu"
    assert resolve_device("torch:cpu") == "torch:cpu"
    if not available_accelerators():
        assert resolve_device("auto") == "cpu"
        with pytest.raises(ConfigError, match="no GPU is visible"):
            resolve_device("cuda")
    with pytest.raises(ConfigError, match="unknown device 'tpu9'"):
        resolve_device("tpu9")


def test_session_fields_on_a_device_match_the_cpu_path(mlp_weights):
    from diffract import Session

    fields = ("pl_alpha", "stable_rank", "spectral_norm", "matrix_rank", "effective_rank")
    out = {}
    for device in ("cpu", "torch:cpu", "jax:cpu"):
        s = Session(profile="ram")
        s.models.add(mlp_weights, model_id="m")
        # the CPU reference in float64 (its default may take the float32 path on small slices)
        report = s.compute.apply(*fields, device=device, precision="float64", progress=False)
        assert not report.failures
        out[device] = s.results.export_table(*fields, "spectrum_path", export_format="list")
    for device in ("torch:cpu", "jax:cpu"):
        for a, b in zip(out["cpu"], out[device], strict=True):
            if b["spectrum_path"] is not None:
                assert b["spectrum_path"] == f"device:{device}"
            for f in fields:
                if a[f] is None:
                    assert b[f] is None
                elif f == "matrix_rank":
                    assert a[f] == b[f]
                else:
                    assert b[f] == pytest.approx(a[f], rel=1e-9)
