"""The Gram matrix summed over float64 row blocks (no float64 copy of a large float32 matrix)
equals the one-copy float64 Gram, and the spectrum built on it equals the float64 path's.

References: numpy's ``t64.T @ t64`` on the full float64 copy, and ``matrix_svals`` on the
float64 copy (which never takes the blocked route)."""

from __future__ import annotations

import numpy as np
import pytest

from diffract.extract.safetensors import decode_raw
from diffract.kernels import _lapack, _linalg


def _ref_gram(t: np.ndarray) -> np.ndarray:
    t64 = np.asarray(t, dtype=np.float64)
    return t64.T @ t64


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("shape", [(3000, 64), (64, 3000), (1037, 200), (200, 1037)])
@pytest.mark.parametrize("block_bytes", [1, 64 * 1024, 1 << 30])
def test_blocked_gram_equals_float64_gram(shape, block_bytes):
    rng = np.random.default_rng(sum(shape))
    a = (rng.standard_normal(shape) * 0.02).astype(np.float32)
    t = _linalg._tall(a)  # a view: C-ordered rows, or a transposed (F-ordered) view
    g = _linalg.gram_blocked(t, block_bytes=block_bytes)
    ref = _ref_gram(t)
    assert g.dtype == np.float64 and g.shape == ref.shape
    assert np.array_equal(g, g.T)  # exactly symmetric, as the eigensolver assumes
    assert _rel(g, ref) <= 1e-12
    assert np.max(np.abs(np.diagonal(g) - np.diagonal(ref)) / np.diagonal(ref)) <= 1e-12


def test_blocked_gram_numpy_fallback(monkeypatch):
    """Without a BLAS ``syrk`` entry point the blocks are summed by numpy: same Gram."""
    monkeypatch.setattr(_lapack, "_SYRK", [None])
    rng = np.random.default_rng(5)
    a = rng.standard_normal((700, 90)).astype(np.float32)
    g = _linalg.gram_blocked(a, block_bytes=1)
    assert np.array_equal(g, g.T)
    assert _rel(g, _ref_gram(a)) <= 1e-12


def test_mirror_upper_rebuilds_the_lower_triangle():
    rng = np.random.default_rng(2)
    s = rng.standard_normal((600, 600))
    s = s + s.T
    g = np.triu(s) + np.tril(np.full_like(s, np.nan), -1)
    assert np.array_equal(_lapack.mirror_upper(g), s)


@pytest.mark.parametrize("shape", [(2500, 160), (160, 2500)])
def test_matrix_svals_blocked_route_equals_float64_path(monkeypatch, shape):
    """A float32 matrix above the threshold takes the blocked Gram; its singular values
    equal those of its float64 copy (which takes the one-copy route) to 1e-12."""
    monkeypatch.setattr(_linalg, "GRAM_BLOCKED_ABOVE", 1024)
    monkeypatch.setattr(_linalg, "GRAM_BLOCK_BYTES", 40_000)
    calls = []
    real = _linalg.gram_blocked
    monkeypatch.setattr(_linalg, "gram_blocked", lambda t: calls.append(t.shape) or real(t))
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(shape) * 0.02).astype(np.float32)
    s, path = _linalg.matrix_svals(a, "float64")
    ref, ref_path = _linalg.matrix_svals(a.astype(np.float64), "float64")
    assert calls == [(2500, 160)]
    assert path == ref_path == "float64"
    assert np.max(np.abs(s - ref) / ref) <= 1e-12
    # and against an independent SVD of the float64 copy
    sv = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    assert np.max(np.abs(s - sv) / sv) <= 1e-9


def test_blocked_route_keeps_the_exact_routes(monkeypatch):
    """An ill-conditioned or rank-deficient float32 matrix on the blocked route still gets
    its small singular values from W itself (Ritz or SVD), as the float64 copy does."""
    monkeypatch.setattr(_linalg, "GRAM_BLOCKED_ABOVE", 1024)
    rng = np.random.default_rng(4)
    u, _ = np.linalg.qr(rng.standard_normal((1200, 100)))
    v, _ = np.linalg.qr(rng.standard_normal((100, 100)))
    sv = np.logspace(0, -6, 100)
    sv[-3:] = 0.0  # rank-deficient: the SVD route
    a = ((u * sv) @ v.T).astype(np.float32)
    s, path = _linalg.matrix_svals(a)
    ref, ref_path = _linalg.matrix_svals(a.astype(np.float64))
    assert path == ref_path and path in ("ritz", "svd")
    assert np.allclose(s, ref, rtol=1e-10, atol=1e-12 * ref[0])


def test_blocked_route_refuses_nan_and_inf(monkeypatch):
    monkeypatch.setattr(_linalg, "GRAM_BLOCKED_ABOVE", 1024)
    rng = np.random.default_rng(6)
    for bad in (np.nan, np.inf, -np.inf):
        a = rng.standard_normal((900, 40)).astype(np.float32)
        a[417, 13] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            _linalg.matrix_svals(a)


def test_bf16_decode_in_place_equals_the_bit_widening():
    """bf16 decodes to the float32 whose high 16 bits are the bf16 bits (checked against
    torch's own bf16 -> float32 conversion)."""
    torch = pytest.importorskip("torch")
    x = torch.randn(333, 77, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    x[0, 0], x[0, 1], x[0, 2] = float("inf"), float("nan"), -0.0
    raw = x.view(torch.int16).numpy().view(np.uint8).reshape(-1)
    out = decode_raw(raw, "bfloat16", (333, 77))
    ref = x.float().numpy()
    assert out.dtype == np.float32 and out.shape == (333, 77)
    assert np.array_equal(out.view(np.uint32), ref.view(np.uint32))
