"""More WeightWatcher diagnostics: the det X = 1 (ERG) condition, level spacing of the ESD,
and localization of the eigenvectors (``analyze(detX=True, deltas=True, vectors=True)``,
WeightWatcher 0.7.7)."""

from __future__ import annotations

import numpy as np

from diffract.kernels._linalg import kernel_matrices, ww_eval_factor
from diffract.kernels.basic import lora_kept_evals
from diffract.kernels.spec import define, one_of

#: WeightWatcher's EPSILON in discrete_entropy
_EPSILON = 1e-10


#: accepted values of ``detx_product``
DETX_PRODUCTS = ("log_sum", "ww")


def _ww_detx_tail(lam: np.ndarray) -> tuple[int, int, np.ndarray]:
    """WeightWatcher 0.7.7's ``detX_constraint`` after its ``rescale_eigenvalues``: the
    products ``np.prod(x[i:])`` in float64, scanned from the top, so a tail whose running
    product underflows to 0.0 counts as below 1 (n^2 / 2 products at most)."""
    n = lam.size
    w = np.sqrt(n) / np.sqrt(np.sum(lam))
    x = (w * w) * lam
    with np.errstate(over="ignore", under="ignore"):  # as WW's: inf and 0.0 are compared too
        for idx in range(n - 1, 0, -1):
            if np.prod(x[idx:]) < 1.0:
                return n - idx, idx, x
    return n, 1, x


@define(
    outputs=("detx_num_spikes", "detx_esd_val", "detx_rescaled_val", "erg_gap"),
    family="rmt",
    option_rules={"detx_product": one_of(*DETX_PRODUCTS)},
)
def detx(esd, pl_num_spikes, detx_product="log_sum"):
    """The det X = 1 condition of the ERG (exact renormalization group) picture: rescale the
    ESD to mean 1, x_i = lambda_i n / sum(lambda); scanning i = n-1, n-2, ..., 1, the first
    tail x_i..x_n whose product is below 1 gives detx_num_spikes = n - i (n if none is) and
    detx_esd_val = lambda_i (in ESD units), detx_rescaled_val = x_i, erg_gap =
    detx_num_spikes - pl_num_spikes. WeightWatcher ``detX_num`` (= ``num_ERG_spikes``),
    ``detX_val`` (with esd_scale="ww"), ``detX_val_unrescaled`` (its name, for the rescaled
    value) and ``ERG_gap``.

    ``detx_product="log_sum"`` (default) compares the sum of the logs with 0: the exact
    comparison, with no underflow. ``"ww"`` (set by ``conventions="weightwatcher"``) takes
    the products as WeightWatcher does, ``np.prod`` of the tail in float64: on large layers
    numpy's running products overflow to inf (a tail then never counts as below 1) or
    underflow to 0.0 (it always does), so detx_num_spikes differs there (detX_num 2925 where
    the exact count is 2983 on a 4608-eigenvalue layer); detx_esd_val and erg_gap follow."""
    if detx_product not in DETX_PRODUCTS:
        raise ValueError(f"detx_product must be one of {DETX_PRODUCTS}, got {detx_product!r}")
    lam = np.sort(np.asarray(esd, dtype=np.float64))
    n = lam.size
    if n < 2 or not lam[0] < lam[-1]:
        raise ValueError("det X needs at least 2 eigenvalues, not all equal")
    if detx_product == "ww":
        num, idx, x = _ww_detx_tail(lam)
        return num, float(lam[idx]), float(x[idx]), int(num - pl_num_spikes)
    x = lam * (n / np.sum(lam))
    with np.errstate(divide="ignore"):
        tail_logs = np.cumsum(np.log(x)[::-1])[::-1]  # sum_{j>=i} log x_j
    below = np.flatnonzero(tail_logs[1:] < 0.0) + 1
    idx = int(below[-1]) if below.size else 1
    num = n - idx if below.size else n
    return num, float(lam[idx]), float(x[idx]), int(num - pl_num_spikes)


@define(outputs=("esd_deltas", "level_spacing_ratio"), family="rmt")
def level_spacing(esd):
    """Level spacing of the ESD: esd_deltas = the gaps lambda_(i+1) - lambda_(i) of the sorted
    eigenvalues (WeightWatcher's ``deltas=True`` plots them, log10, and their histogram; it
    stores no column), and level_spacing_ratio = the mean over consecutive gaps of
    r_i = min(d_i, d_(i+1)) / max(d_i, d_(i+1)) (Oganesyan & Huse 2007; pairs of zero gaps left
    out): about 0.5307 for a random (GOE-like) bulk, 0.3863 for uncorrelated (Poisson) levels;
    scale-free, no unfolding needed."""
    lam = np.sort(np.asarray(esd, dtype=np.float64))
    d = np.diff(lam)
    if d.size < 2:
        raise ValueError("level spacing needs at least 3 eigenvalues")
    lo, hi = np.minimum(d[:-1], d[1:]), np.maximum(d[:-1], d[1:])
    ok = hi > 0
    if not ok.any():
        raise ValueError("level spacing is undefined: every gap is zero")
    return d, float(np.mean(lo[ok] / hi[ok]))


def _discrete_entropy(vec: np.ndarray, num_bins: int = 100) -> float:
    """WeightWatcher's ``discrete_entropy`` of one vector."""
    v = np.absolute(vec)
    v = v - np.mean(v)
    p = np.histogram(v, density=True, bins=num_bins)[0] + _EPSILON
    p = p / np.sqrt(2 * np.pi)
    p = p / np.sum(p)
    return float(-np.sum(p * np.log(p)))


def _bulk_tail(sorted_evals, svals, pl_num_spikes, slice_info):
    """Masks of the bulk and tail of the ascending eigenvalues of X: the tail is those at or
    above xmin (WeightWatcher's comparison, xmin from the squared singular values), or for a
    LoRA update the top pl_num_spikes by count."""
    k = int(pl_num_spikes)
    if lora_kept_evals(slice_info, "rank") is not None:
        tail = np.arange(sorted_evals.size) >= sorted_evals.size - k
        return ~tail, tail
    ww_evals = np.sort(np.asarray(svals) ** 2)
    xmin = float(ww_evals[ww_evals.size - k])
    return sorted_evals < xmin, sorted_evals >= xmin


_METRICS = ("vec_entropy", "loc_ratio", "part_ratio")
_STATS = ("bulk_mean", "bulk_var", "tail_mean", "tail_var")


@define(outputs=tuple(f"{m}_{s}" for m in _METRICS for s in _STATS), min_ndim=2, family="rmt")
def vector_localization(weights, pl_num_spikes, slice_info):
    """Localization of the eigenvectors of X = W W^T (or W^T W, the smaller), per kernel
    position, as WeightWatcher's ``vectors=True``: for each eigenvector v,
    vec_entropy = the entropy -sum p log p of the 100-bin histogram of |v| - mean|v| (its
    ``discrete_entropy``), loc_ratio = ||v||_1 / ||v||_inf, part_ratio = ||v||_2 / ||v||_4;
    then their mean and variance over the *bulk* (eigenvalues of X below xmin) and the *tail*
    (the rest), xmin = the power-law fit's xmin in WeightWatcher's scale, X formed from its
    matrices (Conv2d kernels times sqrt(1/2), its conv2d_norm). WeightWatcher compares the
    eigenvalues of X with an xmin taken from its SVD, so the eigenvalue at xmin lands on
    either side by rounding: xmin is taken here as WeightWatcher gets it (the
    (n - pl_num_spikes + 1)-th smallest of its squared singular values, scipy.linalg.svd of
    the same float64 matrices), so both sides are the same. Fields
    ``<metric>_<bulk|tail>_<mean|var>`` = WeightWatcher ``<bulk|tail>_<mean|var>_<metric>``;
    NaN for an empty side. X is formed and decomposed in float64 with scipy.linalg.eig, as
    WeightWatcher does, so the vectors (and histograms) are the same.

    A LoRA update slice (rank r, meta ``"lora"``): the tail is the top pl_num_spikes
    eigenvalues of X by count, well defined; WeightWatcher's comparison with xmin keeps
    the top pl_num_spikes or one fewer by a rounding coin flip (its xmin comes from ARPACK,
    which scipy starts from fresh OS entropy on each call), and where it keeps them all the
    tail columns equal its. The bulk is mostly the M - r dimensional null space of X, whose
    eigenvectors are any orthonormal basis of it, set by the rounding noise: the
    ``*_bulk_*`` columns of a LoRA update are not a property of the matrix
    (tests/kernels/test_peft_golden.py checks both). WeightWatcher 0.7.7 does not reproduce these
    columns itself: two runs after the same ``np.random.seed`` differ by up to 0.22
    relative (benchmarks/ww_lora_vector_spread.py).

    Like every kernel after the streamed spectrum, it runs once the stream has ended, at the
    process's BLAS thread count (scipy's eig gives other eigenvectors under the stream's
    one-thread limit), as WeightWatcher does."""
    from scipy import linalg

    evals, svals, metrics = [], [], {m: [] for m in _METRICS}
    # WeightWatcher's matrices carry its conv2d_norm (sqrt(1/2) for Conv2d), applied first
    norm = np.sqrt(ww_eval_factor(np.ndim(weights)))
    for w in kernel_matrices(np.asarray(weights)):
        w = (w * norm if norm != 1 else np.asarray(w)).astype(float)
        x = np.matmul(w, w.T) if w.shape[0] <= w.shape[1] else np.matmul(w.T, w)
        lam, vecs = linalg.eig(x)
        evals.extend(lam)
        svals.extend(linalg.svd(w, compute_uv=False))
        for col in range(min(w.shape)):
            v = vecs[:, col]
            metrics["vec_entropy"].append(_discrete_entropy(v))
            metrics["loc_ratio"].append(np.linalg.norm(v, ord=1) / np.linalg.norm(v, ord=np.inf))
            metrics["part_ratio"].append(np.linalg.norm(v, ord=2) / np.linalg.norm(v, ord=4))
    order = np.argsort(evals)
    bulk, tail = _bulk_tail(np.real(np.asarray(evals)[order]), svals, pl_num_spikes, slice_info)
    out = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for m in _METRICS:
            data = np.asarray(metrics[m], dtype=np.float64)[order]
            for side in (bulk, tail):
                part = data[side]
                mean = float(np.mean(part)) if part.size else float("nan")
                var = float(np.var(part)) if part.size else float("nan")
                out += [mean, var]
    return tuple(out)
