"""The spectrum's eigensolver called through ctypes: the same LAPACK ``?syevd`` numpy links, so
eigenvalues bit-identical to numpy's float64 and scipy's float32 ``syevd``, but with the GIL
released (the spectrum pool's workers run side by side; numpy's and scipy's wrappers hold
it); those wrappers where no usable entry point is found."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from diffract.kernels import _lapack


@pytest.fixture
def fresh_solvers(monkeypatch):
    monkeypatch.setattr(_lapack, "_SOLVERS", {})


def _gram(rng, n, m, cond=None):
    a = rng.standard_normal((n, m))
    if cond is not None:  # known singular values from 1 down to 1/cond
        u, _, vt = np.linalg.svd(a, full_matrices=False)
        a = (u * np.geomspace(1.0, 1.0 / cond, m)) @ vt
    return a.T @ a


@pytest.mark.parametrize("cond", [None, 1e6, 1e12])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bit_identical_to_numpy(cond, dtype):
    rng = np.random.default_rng(7)
    for n, m in ((40, 40), (300, 128), (129, 65)):
        g = _gram(rng, n, m, cond).astype(dtype)
        got = _lapack.eigvalsh(g)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, _lapack.reference_eigvalsh(g))


def test_the_entry_point_is_found_on_this_build():
    # numpy's wheels link scipy-openblas, which exports LAPACKE: the GIL-free route is on
    assert _lapack.gil_free()


def test_the_gil_is_released_during_the_call():
    g = _gram(np.random.default_rng(1), 1200, 1200)
    state = {"in_call": False, "done": False}

    def worker():
        state["in_call"] = True
        _lapack.eigvalsh(g)
        state["done"] = True

    _lapack.eigvalsh(g[:8, :8])  # resolve the entry point first
    t = threading.Thread(target=worker)
    t.start()
    seen = 0
    while not state["done"]:  # Python runs here only while the worker is outside the GIL
        if state["in_call"]:
            seen += 1
    t.join()
    # held for the whole call, this loop would get a handful of turns; released, millions
    assert seen > 10_000


def test_falls_back_to_numpy_without_an_entry_point(monkeypatch, fresh_solvers):
    monkeypatch.setattr(_lapack, "_entry_point", lambda letter: None)
    g = _gram(np.random.default_rng(2), 50, 20)
    assert not _lapack.gil_free()
    np.testing.assert_array_equal(_lapack.eigvalsh(g), np.linalg.eigvalsh(g))
    g32 = g.astype(np.float32)
    np.testing.assert_array_equal(_lapack.eigvalsh(g32), _lapack.reference_eigvalsh(g32))


def test_an_entry_point_that_disagrees_is_not_used(monkeypatch, fresh_solvers):
    def wrong(layout, jobz, uplo, n, a, lda, w):  # claims success, leaves w as it was
        np.ctypeslib.as_array(ctypes_double_p(w), shape=(n,))[:] = 0.0
        return 0

    monkeypatch.setattr(_lapack, "_entry_point", lambda letter: wrong)
    assert not _lapack.gil_free()
    g = _gram(np.random.default_rng(3), 30, 10)
    np.testing.assert_array_equal(_lapack.eigvalsh(g), np.linalg.eigvalsh(g))


def ctypes_double_p(address):
    import ctypes

    return ctypes.cast(address, ctypes.POINTER(ctypes.c_double))


def test_other_inputs_go_to_numpy():
    g = _gram(np.random.default_rng(4), 20, 6)
    c = g.astype(np.complex128)
    np.testing.assert_array_equal(_lapack.eigvalsh(c), np.linalg.eigvalsh(c))
    stack = np.stack([g, 2 * g])
    np.testing.assert_array_equal(_lapack.eigvalsh(stack), np.linalg.eigvalsh(stack))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_in_place_keeps_the_strict_lower_triangle(dtype):
    g = _gram(np.random.default_rng(5), 90, 60, 1e8).astype(dtype)
    expected = _lapack.reference_eigvalsh(g)
    work, diagonal = g.copy(), np.diagonal(g).copy()
    np.testing.assert_array_equal(_lapack.eigvalsh(work, overwrite=True), expected)
    assert not np.array_equal(work, g)  # LAPACK's work array: the storage was used
    np.testing.assert_array_equal(_lapack.restore_symmetric(work, diagonal), g)
    fortran = np.asfortranarray(g)  # not C-ordered: copied, left as it was
    np.testing.assert_array_equal(_lapack.eigvalsh(fortran, overwrite=True), expected)
    np.testing.assert_array_equal(fortran, g)


# --- Cholesky and the tridiagonal eigensolver (the spectrum's default path without scipy) ---


@pytest.mark.parametrize(
    ("dtype", "cond"),
    [
        (np.float64, None),
        (np.float64, 1e3),
        (np.float64, 1e6),
        (np.float32, None),
        (np.float32, 1e2),
    ],
)
def test_cholesky_bit_identical_to_the_lapack_it_replaces(cond, dtype):
    # as the eigensolver: the same ?potrf as numpy's float64 Cholesky, as scipy's float32
    # one (numpy and scipy each bundle an OpenBLAS; on some CPUs their float64 kernels
    # round differently, so scipy's float64 factor is checked to rounding, not to the bit)
    import scipy.linalg as sla

    rng = np.random.default_rng(11)
    kappa = (cond or 1.0) ** 2  # the condition number of G = A^T A
    for n, m in ((40, 40), (300, 128), (129, 65)):
        g = _gram(rng, n, m, cond).astype(dtype)
        scipy_factor = sla.cho_factor(g, lower=True, check_finite=False)[0]
        got = _lapack.cholesky_lower(g)
        assert got is not None and got.dtype == dtype
        same_lapack = np.linalg.cholesky(g) if dtype == np.float64 else np.tril(scipy_factor)
        np.testing.assert_array_equal(np.tril(got), same_lapack)
        scale = np.max(np.abs(scipy_factor))
        assert np.max(np.abs(np.tril(got) - np.tril(scipy_factor))) <= 1e-8 * scale
        if dtype == np.float64:  # the Ritz route's solve (scipy's upcasts a float32 factor)
            b = rng.standard_normal((m, 7))
            x = _lapack.cholesky_solve(got, b)
            # backward stable: G x = b to rounding, whatever the conditioning
            assert np.linalg.norm(g @ x - b) <= 1e-14 * np.linalg.norm(g) * np.linalg.norm(x)
            want = sla.cho_solve((scipy_factor, True), b, check_finite=False)
            np.testing.assert_allclose(x, want, rtol=max(1e-12, 1e-13 * kappa), atol=0)


def test_cholesky_says_not_positive_definite():
    g = _gram(np.random.default_rng(12), 50, 20)
    h = g.copy()
    h.flat[::21] -= 2 * np.linalg.eigvalsh(g)[-1]  # negative definite
    assert _lapack.cholesky_lower(h) is None
    assert _lapack.cholesky_lower(h.astype(np.float32)) is None
    assert _lapack.cholesky_lower(g) is not None


def test_tridiagonal_eigenvalues_bit_identical_to_scipy():
    import scipy.linalg as sla

    rng = np.random.default_rng(13)
    for n in range(1, 12):
        d, e = rng.standard_normal(n), rng.standard_normal(max(n - 1, 0))
        got = _lapack.eigvalsh_tridiagonal(d, e)
        np.testing.assert_array_equal(got, sla.eigvalsh_tridiagonal(d, e))


def test_the_default_spectrum_path_imports_no_scipy():
    """Issue 31: scipy's import (~0.3 s) was paid by the first apply of a process, and its
    BLAS, loaded after the pool's one-thread limit, ran unlimited during that call; the
    float32 attempt (Lanczos, shifted Cholesky) and the Ritz route now call numpy's LAPACK."""
    import subprocess
    import sys

    code = """
import sys
import numpy as np
from diffract.kernels import _linalg
rng = np.random.default_rng(0)
u, _ = np.linalg.qr(rng.standard_normal((300, 64)))
v, _ = np.linalg.qr(rng.standard_normal((64, 64)))
s = np.r_[np.linspace(2.0, 0.5, 62), [1e-4, 1e-6]]
paths = {_linalg.matrix_svals((u * s) @ v.T)[1], _linalg.matrix_svals(rng.standard_normal((64, 8)))[1]}
paths.add(_linalg.matrix_svals(rng.standard_normal((300, 200)))[1])
print(sorted(paths), "scipy" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['float32',", "'float64',", "'ritz']", "False"], out.stdout


def test_cholesky_and_tridiagonal_fall_back_to_scipy(monkeypatch):
    import scipy.linalg as sla

    monkeypatch.setattr(_lapack, "_EXTRA", {})
    monkeypatch.setattr(_lapack, "_lapacke", lambda name, argtypes: None)
    rng = np.random.default_rng(14)
    g = _gram(rng, 60, 30)
    c = _lapack.cholesky_lower(g)
    ref = sla.cho_factor(g, lower=True, check_finite=False)[0]
    np.testing.assert_array_equal(np.tril(c), np.tril(ref))
    b = rng.standard_normal((30, 3))
    want = sla.cho_solve((ref, True), b, check_finite=False)
    np.testing.assert_array_equal(_lapack.cholesky_solve(c, b), want)
    h = g.copy()
    h.flat[::31] -= 2 * np.linalg.eigvalsh(g)[-1]
    assert _lapack.cholesky_lower(h) is None
    d, e = rng.standard_normal(6), rng.standard_normal(5)
    got = _lapack.eigvalsh_tridiagonal(d, e)
    np.testing.assert_array_equal(got, sla.eigvalsh_tridiagonal(d, e))
