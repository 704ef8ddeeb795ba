"""LAPACK's symmetric eigensolver (``?syevd``, eigenvalues only) called with the GIL released.

numpy's ``eigvalsh`` and scipy's f2py ``syevd`` hold the GIL for most of the call: measured
here, a spinning Python thread ran at 38% of its speed while the main thread looped over
``eigvalsh`` at M = 384, and two pool threads of ``eigvalsh`` took as long as one (335 vs
362 ms for 40 matrices), where matrix products release it (85 vs 159 ms). The spectrum's
worker pool then takes turns instead of running side by side. This module calls the same
routine through ``ctypes`` (which releases the GIL for the duration of a foreign call) in
the LAPACK that numpy itself links (found with ``threadpoolctl``), so the eigenvalues are
bit-identical to ``numpy.linalg.eigvalsh`` (checked at load on a small matrix, and in the
tests) and the one-BLAS-thread limit of the pool applies to it. Where no LAPACKE entry point
is found, or the check disagrees, :func:`eigvalsh` is numpy's.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

#: LAPACKE's column-major layout constant
_COL_MAJOR = 102

Solver = Callable[[np.ndarray, bool], np.ndarray]

_LOCK = threading.Lock()
_SOLVERS: dict[str, Solver | None] = {}


def _candidate_libraries() -> list[str]:
    """The BLAS/LAPACK libraries loaded in this process, numpy's own first."""
    from threadpoolctl import threadpool_info

    paths = [i["filepath"] for i in threadpool_info() if i.get("user_api") == "blas"]
    return sorted(
        dict.fromkeys(paths), key=lambda p: "numpy" not in os.path.basename(os.path.dirname(p))
    )


_LIBS: list[Any] = []
_LIBS_LOCK = threading.Lock()  # apart from _LOCK, which is held while an entry point is sought


def _libraries() -> list[Any]:
    """The candidate libraries, opened, once per process (each look-up scanned the loaded
    libraries again: ~2 ms, 30 ms the first time, per routine)."""
    with _LIBS_LOCK:
        if not _LIBS:
            for path in _candidate_libraries():
                try:
                    _LIBS.append(ctypes.CDLL(path))
                except OSError:
                    continue
        return list(_LIBS)


def _lapacke(name: str, argtypes: list[Any]) -> Any:
    """``LAPACKE_<name>`` of the first library that has it (scipy-openblas wheels prefix
    ``scipy_``, ILP64 builds suffix ``64_``), its argument types set, or None.

    lapack_int arguments are declared 64-bit: an LP64 build reads their low half, an ILP64
    one all of it (values are small); the returned info is read as a C int."""
    names = [f"{p}LAPACKE_{name}{s}" for p in ("scipy_", "") for s in ("64_", "")]
    for lib in _libraries():
        for full in names:
            func = getattr(lib, full, None)
            if func is not None:
                func.argtypes = argtypes
                func.restype = ctypes.c_int
                return func
    return None


_I64, _CHR, _PTR = ctypes.c_int64, ctypes.c_char, ctypes.c_void_p


def _entry_point(letter: str) -> Any:
    """``LAPACKE_?syevd`` of the first library that has it, or None."""
    return _lapacke(f"{letter}syevd", [ctypes.c_int, _CHR, _CHR, _I64, _PTR, _I64, _PTR])


def _make_solver(dtype: np.dtype) -> Solver | None:
    letter = {np.dtype(np.float64): "d", np.dtype(np.float32): "s"}[dtype]
    try:
        func = _entry_point(letter)
    except Exception:  # threadpoolctl missing or a library it cannot inspect
        return None
    if func is None:
        return None

    def solve(g: np.ndarray, overwrite: bool = False) -> np.ndarray:
        n = g.shape[0]
        if g.dtype == dtype and (g.flags.c_contiguous or g.flags.f_contiguous):
            # symmetric: the C-ordered buffer read column-major is g.T = g (a memcpy, not a
            # transposing copy: 0.4 vs 1.4 ms at M = 768), its own storage when allowed
            own = overwrite and g.flags.c_contiguous and g.flags.writeable
            a = g if own else g.copy(order="K")
        else:
            a = np.array(g, dtype=dtype, order="F")
        w = np.empty(n, dtype=dtype)
        info = func(_COL_MAJOR, b"N", b"L", n, a.ctypes.data, max(n, 1), w.ctypes.data)
        if info != 0:
            raise np.linalg.LinAlgError(f"LAPACK {letter}syevd failed (info = {info})")
        return w

    probe = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]], dtype=dtype)
    try:
        if dtype == np.float64:
            ok = np.array_equal(solve(probe), reference_eigvalsh(probe))
        else:  # the call works (scipy's ssyevd, the bit-identical reference, is not imported
            # for this: its import is ~0.3 s of a first call; the tests compare the bits)
            want = np.linalg.eigvalsh(probe.astype(np.float64))
            ok = np.allclose(solve(probe), want, rtol=1e-5, atol=0.0)
    except Exception:
        ok = False
    return solve if ok else None


def reference_eigvalsh(g: np.ndarray) -> np.ndarray:
    """What :func:`eigvalsh` replaces, holding the GIL: numpy's ``dsyevd`` for float64,
    scipy's ``ssyevd`` for float32 (numpy's float32 ``eigvalsh`` works in float64 here: twice
    the time, other bits)."""
    if g.dtype == np.float32:
        import scipy.linalg as sla

        # g is symmetric: its transpose is the Fortran-ordered view LAPACK wants
        return sla.eigh(g.T, eigvals_only=True, driver="evd", check_finite=False)
    return np.linalg.eigvalsh(g)


def _solver(dtype: np.dtype) -> Solver | None:
    key = dtype.str
    if key not in _SOLVERS:
        with _LOCK:
            if key not in _SOLVERS:
                _SOLVERS[key] = _make_solver(dtype)
    return _SOLVERS[key]


def eigvalsh(g: np.ndarray, overwrite: bool = False) -> np.ndarray:
    """Eigenvalues (ascending) of the exactly symmetric matrix ``g`` (a Gram matrix made by
    ``syrk`` is) in its own precision (float32 or float64), by LAPACK ``?syevd`` with the GIL
    released, bit-identical to :func:`reference_eigvalsh`, which it falls back to where no
    usable LAPACKE entry point is found; any other dtype or shape goes to
    ``numpy.linalg.eigvalsh``.

    ``overwrite``: a C-ordered ``g`` is the work array (no copy). LAPACK then destroys its
    upper triangle and diagonal and leaves its strict lower triangle as it was (see
    :func:`restore_symmetric`)."""
    dtype = np.dtype(g.dtype)
    if dtype not in (np.float32, np.float64) or g.ndim != 2 or g.shape[0] != g.shape[1]:
        return np.linalg.eigvalsh(g)
    solve = _solver(dtype)
    return reference_eigvalsh(g) if solve is None else solve(g, overwrite)


def restore_symmetric(g: np.ndarray, diagonal: np.ndarray) -> np.ndarray:
    """The symmetric matrix a C-ordered ``g`` held before ``eigvalsh(g, overwrite=True)``,
    from its strict lower triangle (left intact by LAPACK) and the saved ``diagonal``."""
    low = np.tril(g, -1)
    out = low + low.T
    out.flat[:: g.shape[0] + 1] = diagonal
    return out


def gil_free() -> bool:
    """Whether float64 eigenvalues go through the GIL-free entry point in this process."""
    return _solver(np.dtype(np.float64)) is not None


# --- BLAS syrk, accumulating: a Gram matrix summed over row blocks ----------------------
#: CBLAS constants (row-major layout, upper triangle, transpose flags)
_ROW_MAJOR, _UPPER, _NO_TRANS, _TRANS = 101, 121, 111, 112

_SYRK: list[Any] = []


def _syrk_entry_point() -> Any:
    """``cblas_dsyrk`` of numpy's BLAS (the library ``_entry_point`` searches), or None."""
    names = [f"{p}cblas_dsyrk{s}" for p in ("scipy_", "") for s in ("64_", "")]
    for lib in _libraries():  # the candidate libraries, opened once per process
        for name in names:
            func = getattr(lib, name, None)
            if func is None:
                continue
            # blasint arguments passed as 64-bit (as for LAPACKE above); enums as C ints
            i64, dbl = ctypes.c_int64, ctypes.c_double
            func.argtypes = [
                ctypes.c_int, ctypes.c_int, ctypes.c_int, i64, i64, dbl, ctypes.c_void_p, i64,
                dbl, ctypes.c_void_p, i64,
            ]  # fmt: skip
            func.restype = None
            return func
    return None


def _syrk() -> Any:
    if not _SYRK:
        with _LOCK:
            if not _SYRK:
                try:
                    func = _syrk_entry_point()
                except Exception:  # threadpoolctl missing or a library it cannot inspect
                    func = None
                _SYRK.append(func)
    return _SYRK[0]


def syrk_accumulate(g: np.ndarray, b: np.ndarray) -> None:
    """``g += b.T @ b`` for a float64 block ``b`` (K x M, C- or F-contiguous) into the
    C-ordered float64 ``g`` (M x M), in place.

    Through ``cblas_dsyrk`` (GIL released, ``beta = 1``: no product temporary, no add pass)
    only ``g``'s upper triangle is updated (call :func:`mirror_upper` once the sum is done);
    where no entry point is found, numpy's ``g += b.T @ b`` updates all of ``g`` (mirroring
    it then changes nothing)."""
    m = g.shape[0]
    func = _syrk()
    if func is None or not g.flags.c_contiguous or not g.flags.writeable:
        g += b.T @ b
        return
    k = b.shape[0]
    if b.flags.c_contiguous:  # row-major K x M: C (M x M) += A^T A with A = b
        func(_ROW_MAJOR, _UPPER, _TRANS, m, k, 1.0, b.ctypes.data, max(m, 1), 1.0,
             g.ctypes.data, max(m, 1))  # fmt: skip
    elif b.flags.f_contiguous:  # b.T is row-major M x K: C += A A^T with A = b.T
        func(_ROW_MAJOR, _UPPER, _NO_TRANS, m, k, 1.0, b.ctypes.data, max(k, 1), 1.0,
             g.ctypes.data, max(m, 1))  # fmt: skip
    else:
        g += b.T @ b


def mirror_upper(g: np.ndarray) -> np.ndarray:
    """``g`` made symmetric from its upper triangle (in place; returns ``g``)."""
    m, step = g.shape[0], 256
    for i in range(0, m, step):  # block by block: no index arrays, no M x M temporary
        j = min(i + step, m)
        g[i:j, :i] = g[:i, i:j].T
        d = g[i:j, i:j]
        d[...] = np.triu(d) + np.triu(d, 1).T
    return g


# --- Cholesky and the tridiagonal eigensolver, without importing scipy ----------------------
# The spectrum's default path needs three more LAPACK routines: ``?potrf`` (the float32
# path's shifted-Cholesky test, the Ritz route's factor), ``?potrs`` (the Ritz route's inverse
# iteration) and ``?stevd`` (the Lanczos bounds of the float32 path's test). Through scipy
# they cost its import (~0.3 s) on the first call of a process, and their BLAS, loaded after
# the pool limited BLAS to one thread, ran unlimited during that call (a 256 x 256 Cholesky
# took 170 ms). Here they come from the LAPACK numpy links, like ``?syevd``; scipy's are the
# fallback where no entry point is found.

_EXTRA: dict[str, Any] = {}


def _extra(name: str, argtypes: list[Any]) -> Any:
    if name not in _EXTRA:
        with _LOCK:
            if name not in _EXTRA:
                try:
                    _EXTRA[name] = _lapacke(name, argtypes)
                except Exception:  # threadpoolctl missing or a library it cannot inspect
                    _EXTRA[name] = None
    return _EXTRA[name]


def _letter(dtype: np.dtype) -> str:
    return {np.dtype(np.float64): "d", np.dtype(np.float32): "s"}[np.dtype(dtype)]


def cholesky_lower(g: np.ndarray) -> np.ndarray | None:
    """The Cholesky factor of the exactly symmetric float32/float64 matrix ``g`` as LAPACK's
    ``?potrf`` (lower) leaves it: a Fortran-ordered copy whose lower triangle is L (the
    strict upper triangle is ``g``'s, as scipy's ``cho_factor(..., lower=True)`` leaves it);
    None when ``g`` is not numerically positive definite. For :func:`cholesky_solve`."""
    a = np.array(g, order="F", copy=True)
    func = _extra(f"{_letter(a.dtype)}potrf", [ctypes.c_int, _CHR, _I64, _PTR, _I64])
    if func is None:
        import scipy.linalg as sla

        potrf = sla.get_lapack_funcs("potrf", (a,))
        c, info = potrf(a, lower=True, overwrite_a=True, clean=False)
        return c if info == 0 else None
    n = a.shape[0]
    info = func(_COL_MAJOR, b"L", n, a.ctypes.data, max(n, 1))
    return a if info == 0 else None


def cholesky_solve(c: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``G^-1 b`` from :func:`cholesky_lower`'s factor ``c`` (LAPACK ``?potrs``, lower), as
    a Fortran-ordered array (``b`` is not modified)."""
    x = np.array(b, dtype=c.dtype, order="F", copy=True)
    argtypes = [ctypes.c_int, _CHR, _I64, _I64, _PTR, _I64, _PTR, _I64]
    func = _extra(f"{_letter(c.dtype)}potrs", argtypes)
    if func is None:
        import scipy.linalg as sla

        return sla.cho_solve((c, True), x, check_finite=False)
    n, nrhs = x.shape[0], (x.shape[1] if x.ndim == 2 else 1)
    info = func(_COL_MAJOR, b"L", n, nrhs, c.ctypes.data, max(n, 1), x.ctypes.data, max(n, 1))
    if info != 0:
        raise np.linalg.LinAlgError(f"LAPACK potrs failed (info = {info})")
    return x


def eigvalsh_tridiagonal(d: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Eigenvalues (ascending) of the symmetric tridiagonal matrix with diagonal ``d`` and
    off-diagonal ``e`` (float64): LAPACK ``dstevd`` without vectors, the routine scipy's
    ``eigvalsh_tridiagonal`` calls."""
    w = np.array(d, dtype=np.float64, copy=True)
    n = w.shape[0]
    if n == 1:
        return w
    ee = np.zeros(n, dtype=np.float64)  # LAPACKE's work copy of e is n long
    ee[: n - 1] = e
    z = np.zeros(1, dtype=np.float64)
    argtypes = [ctypes.c_int, _CHR, _I64, _PTR, _PTR, _PTR, _I64]
    func = _extra("dstevd", argtypes)
    if func is None:
        import scipy.linalg as sla

        return sla.eigvalsh_tridiagonal(d, e)
    info = func(_COL_MAJOR, b"N", n, w.ctypes.data, ee.ctypes.data, z.ctypes.data, 1)
    if info != 0:
        raise np.linalg.LinAlgError(f"LAPACK dstevd failed (info = {info})")
    return w
