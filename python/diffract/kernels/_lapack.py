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


def _entry_point(letter: str) -> Any:
    """``LAPACKE_?syevd`` of the first library that has it (scipy-openblas wheels prefix
    ``scipy_``, ILP64 builds suffix ``64_``), or None."""
    names = [f"{p}LAPACKE_{letter}syevd{s}" for p in ("scipy_", "") for s in ("64_", "")]
    for path in _candidate_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in names:
            func = getattr(lib, name, None)
            if func is None:
                continue
            # lapack_int arguments passed as 64-bit: an LP64 build reads their low half, an
            # ILP64 one all of it (values are small); the returned info read as a C int
            i64 = ctypes.c_int64
            func.argtypes = [
                ctypes.c_int, ctypes.c_char, ctypes.c_char, i64, ctypes.c_void_p, i64,
                ctypes.c_void_p,
            ]  # fmt: skip
            func.restype = ctypes.c_int
            return func
    return None


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
        ok = np.array_equal(solve(probe), reference_eigvalsh(probe))
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
    for path in _candidate_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
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
