"""How much of the base's top singular subspaces the tuned matrix keeps.

The cosines of the principal angles between two k-dimensional subspaces with orthonormal bases
U and V are the singular values of ``U^T V`` (Bjorck & Golub 1973, "Numerical methods for
computing angles between linear subspaces", Math. Comp. 27), so ``||U^T V||_F^2 / k`` is the
mean squared cosine: 1 when the subspaces coincide, 0 when orthogonal, about ``k / m`` for two
random k-dimensional subspaces of R^m.
"""

from __future__ import annotations

import numpy as np

#: the number of top singular vectors compared
TOP_K = 10


def subspace_overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Mean squared cosine of the principal angles between the spans of the orthonormal
    columns of ``a`` and ``b`` (same shape): ``||a^T b||_F^2 / k``."""
    k = a.shape[1]
    if k == 0:
        return float("nan")
    return float(np.linalg.norm(a.T @ b) ** 2 / k)


def top_singular_vectors(w: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-``k`` left and right singular vectors of ``w``, ``(U_k, V_k^T)``: a full SVD
    for small matrices, Lanczos (SciPy's ``svds``, deterministic start) when k is small
    against min(m, n), which is what keeps an LLM layer at seconds instead of a minute."""
    k = max(1, min(k, min(w.shape)))
    if min(w.shape) <= 256 or 4 * k >= min(w.shape):
        u, _, vt = np.linalg.svd(w, full_matrices=False)
        return u[:, :k], vt[:k]
    from scipy.sparse.linalg import svds

    u, s, vt = svds(w, k=k, v0=np.ones(min(w.shape)), which="LM")
    order = np.argsort(s)[::-1]
    return u[:, order], vt[order]


def top_subspace_overlap(
    u_b: np.ndarray, vt_b: np.ndarray, u_t: np.ndarray, vt_t: np.ndarray, k: int = TOP_K
) -> tuple[float, float]:
    """The overlaps of the top-``k`` left and right singular subspaces of base and tuned.

    Args:
        u_b, vt_b: the base's SVD factors (``numpy.linalg.svd(..., full_matrices=False)``).
        u_t, vt_t: the tuned matrix's.
        k: how many top singular vectors (at most min(m, n)).

    Returns:
        ``(left, right)`` mean squared cosines.
    """
    k = min(k, u_b.shape[1])
    return (
        subspace_overlap(u_b[:, :k], u_t[:, :k]),
        subspace_overlap(vt_b[:k].T, vt_t[:k].T),
    )
