"""Decompositions: singular values (from the smaller Gram matrix), singular vectors, the ESD,
and the same for the randomly permuted weights.

One eigendecomposition per slice feeds every spectral field: ``weights_spectrum`` produces
``weights_svals`` (pooled over kernel positions) and the per-position ``kernel_svals``; every
other spectral field consumes them.
"""

from __future__ import annotations

import numpy as np

from diffract.kernels._linalg import (
    PRECISIONS,
    check_precision,
    default_threads,
    kernel_matrices,
    pooled_asc,
    pooled_desc,
    slice_svals,
    stream_parallel,
    ww_eval_factor,
)
from diffract.kernels.spec import OptionRule, above, at_least, define, one_of

ESD_SCALES = ("N", "none", "ww")
#: accepted values of ``svd_device``
SVD_DEVICES = ("cpu", "cuda", "auto")
_SPECTRUM_RULES = {"precision": one_of(*PRECISIONS), "recheck_rtol": above(0)}


def _kept(ks: np.ndarray, spectrum_gate) -> np.ndarray:
    """Per-position singular values, truncated to the gate's r for a LoRA update."""
    return ks if spectrum_gate is True else np.asarray(ks)[:, : int(spectrum_gate)]


@define(
    outputs=("weights_svals", "kernel_svals", "spectrum_path"),
    min_ndim=2,
    family="decompositions",
    transient=("kernel_svals",),
    vectorized=True,
    streamed=True,
    option_rules={**_SPECTRUM_RULES, "spectrum_threads": at_least(0)},
)
def weights_spectrum(
    weights, spectrum_gate, precision="float32", recheck_rtol=1e-5, spectrum_threads=0, device="cpu"
):
    """Singular values of every (kernel-position) matrix of the slice, from the eigenvalues of
    the smaller Gram matrix: s_i = sqrt(eig_i(W W^T)) (or W^T W, whichever is M x M).

    * ``weights_svals``: all singular values pooled over kernel positions, ascending (float64;
      Diffract's order).
    * ``kernel_svals``: ``(P, M)`` array, one descending row per kernel position (transient).
    * ``spectrum_path``: how they were obtained: ``"float32"`` (float64 Gram product, float32
      eigensolver on its rounding, accepted when a calibrated per-eigenvalue error bound,
      sqrt(M) eps32 (4 lambda_i + lambda_max), gives every singular value relative error <=
      ``recheck_rtol``; cheap tests skip it when it cannot pass, so in practice only small,
      well-conditioned matrices take it), ``"float64"``
      (float64 Gram + eigensolver, accepted when ``eps64 * lambda_max <= 0.01 * recheck_rtol *
      lambda_min``), ``"ritz"`` (ill-conditioned: the float64 Gram's eigenvalues it cannot
      resolve are recomputed from W by inverse subspace iteration and Rayleigh-Ritz on W,
      accepted under a certified error bound; about 1/7 of a full SVD's cost), ``"svd"``
      (rank-deficient or where ``"ritz"`` cannot certify: full LAPACK gesdd SVD, as
      WeightWatcher), ``"zero"`` (all-zero matrix).

    Options: ``precision`` ("float32" default, or "float64" to skip the float32 path),
    ``recheck_rtol`` (relative singular-value error accepted before rechecking),
    ``spectrum_threads`` (slices decomposed concurrently; 0 = number of cores, BLAS limited
    to one thread per worker meanwhile), ``device`` ("cpu" default; "auto", "cuda",
    "torch:cuda", "jax:gpu", ...: float64 Gram eigenvalues on an accelerator through PyTorch
    or JAX, see :mod:`diffract.kernels.device`; ``spectrum_path`` then names the device).
    Vectorized and streamed: one call receives every slice of a chunk and returns at once;
    each slice's result is recorded as it comes (progress, cancel and commits go on while
    the pool works; no pause at batch ends). Input ``spectrum_gate``
    (:mod:`diffract.kernels.ww`) leaves out, as not applicable with a reason, the slices
    that WeightWatcher's size guards or layer selection skip when those options are set,
    and for a LoRA update with ``lora_evals="rank"`` gives its rank r: only the top r
    singular values are kept (WeightWatcher's truncated SVD).
    """
    check_precision(precision)
    threads = default_threads() if not spectrum_threads else int(spectrum_threads)
    from diffract.kernels.device import CPU, gram_svals, resolve_device

    dev = resolve_device(device)

    def one(item):
        w, gate = item
        if dev != CPU:
            ks, path = gram_svals(kernel_matrices(w), dev), f"device:{dev}"
        else:
            ks, path = slice_svals(w, precision, recheck_rtol)
        ks = _kept(ks, gate)  # a LoRA update with lora_evals="rank": its top r only
        return pooled_asc(ks), ks, path

    # started largest first so the pool stays busy; results in input order as they come
    order = sorted(range(len(weights)), key=lambda i: -int(np.asarray(weights[i]).size))
    return stream_parallel(one, list(zip(weights, spectrum_gate, strict=True)), threads, order)


def _svd_vectors(weights, svd_device):
    if svd_device not in SVD_DEVICES:
        raise ValueError(f"svd_device must be 'cpu', 'cuda' or 'auto', got {svd_device!r}")
    mats = kernel_matrices(weights)
    use_torch = False
    if svd_device in ("cuda", "auto"):
        try:
            import torch

            use_torch = torch.cuda.is_available()
        except ImportError:
            use_torch = False
        if svd_device == "cuda" and not use_torch:
            raise RuntimeError("svd_device='cuda' but no CUDA device is available to torch")
    if use_torch:
        import torch

        t = torch.from_numpy(np.ascontiguousarray(mats, dtype=np.float64)).to("cuda")
        u, _, vh = torch.linalg.svd(t, full_matrices=False)
        u = u.cpu().numpy()
        v = vh.transpose(-1, -2).cpu().numpy()
    else:
        u, _, vh = np.linalg.svd(np.asarray(mats, dtype=np.float64), full_matrices=False)
        v = np.swapaxes(vh, -1, -2)
    # columns in ascending singular-value order (Diffract's), as weights_svals
    u, v = u[..., ::-1], v[..., ::-1]
    if np.asarray(weights).ndim == 2:
        return u[0], v[0]
    return u, v


@define(
    outputs=("weights_lsvs", "weights_rsvs"),
    min_ndim=2,
    family="decompositions",
    transient=("weights_lsvs", "weights_rsvs"),
    option_rules={"svd_device": one_of(*SVD_DEVICES)},
)
def weights_svd(weights, svd_device="cpu"):
    """Thin SVD W = U diag(s) V^T (float64): ``weights_lsvs`` = U (rows x k, columns are the
    left singular vectors, in ascending singular-value order as ``weights_svals``, Diffract's), ``weights_rsvs`` = V
    (cols x k), k = min(rows, cols). For ``ndim >= 3`` slices, stacked per kernel position:
    ``(P, out, k)`` and ``(P, in, k)``. Both transient (never stored unless asked for by name).
    Option ``svd_device``: "cpu" (LAPACK), "cuda" (torch on the GPU) or "auto"."""
    return _svd_vectors(weights, svd_device)


@define(outputs="max_weights_sval", family="decompositions")
def max_weights_sval(weights_svals):
    """Largest singular value s_max (over all kernel positions).

    WeightWatcher ``sv_max`` = s_max * sqrt(1/2) for Conv2d (its conv2d_norm), s_max else."""
    return float(np.max(weights_svals))


@define(outputs="min_weights_sval", family="decompositions")
def min_weights_sval(weights_svals):
    """Smallest singular value s_min (over all kernel positions).

    WeightWatcher ``sv_min`` = s_min for a 2-D slice; for Conv2d it reports the *largest*
    per-position minimum (times sqrt(1/2)): see ``max_kernel_min_sval``."""
    return float(np.min(weights_svals))


@define(outputs="max_kernel_min_sval", family="decompositions")
def max_kernel_min_sval(kernel_svals):
    """max over kernel positions p of min_i s_{p,i}: equals s_min for a 2-D slice. Provided to
    map WeightWatcher's Conv2d ``sv_min`` (= this * sqrt(1/2)), which takes that maximum."""
    return float(np.max(np.asarray(kernel_svals)[:, -1]))


def _eigenvalues(svals, c: float) -> np.ndarray:
    """The ESD of singular values ``svals`` at scale ``c``: c * s_i^2, ascending (float64)."""
    s = np.asarray(svals, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):  # named by _check_range
        return np.sort(c * s * s)


def _esd_factor(esd_scale, greater_dim, ndim):
    if esd_scale == "N":
        return 1.0 / float(greater_dim)
    if esd_scale == "none":
        return 1.0
    if esd_scale == "ww":
        return ww_eval_factor(ndim)
    raise ValueError(f"esd_scale must be one of {ESD_SCALES}, got {esd_scale!r}")


@define(
    outputs=("esd", "esd_scale_factor", "esd_ww_ratio"),
    min_ndim=2,
    family="decompositions",
    option_rules={"esd_scale": one_of(*ESD_SCALES)},
)
def esd(weights_svals, greater_dim, weights, esd_scale="N"):
    """Empirical spectral density: eigenvalues lambda_i = c * s_i^2, ascending (float64).

    ``esd_scale`` picks c (output ``esd_scale_factor``):
    "N" (default) c = 1/N, the eigenvalues of W^T W / N (X = W^T W / N of the literature);
    "none" c = 1 (s^2); "ww" c = WeightWatcher's analyze() default (1, or 1/2 for 4-D conv
    weights because of its conv2d_norm; WeightWatcher does not divide by N).
    ``esd_ww_ratio`` = WeightWatcher's eigenvalue / ours (1/(c) or 1/(2c) for Conv2d), so WW's
    ``xmin`` = pl_esd_xmin * esd_ww_ratio, ``lambda_max`` = esd_max * esd_ww_ratio.
    WeightWatcher's eigenvalues of a Conv2d layer are the pooled kernel-position spectra, as
    here."""
    c = _esd_factor(esd_scale, greater_dim, np.ndim(weights))
    lam = _eigenvalues(weights_svals, c)
    _check_range(lam, weights_svals)
    return lam, c, ww_eval_factor(np.ndim(weights)) / c


def _check_range(lam: np.ndarray, svals) -> None:
    """Raise when the eigenvalues c s^2 leave float64's range though the singular values do
    not (weights near 1e-160 or 1e160 and beyond): naming the cause, not a zero matrix."""
    smax = float(np.max(svals)) if np.size(svals) else 0.0
    if lam.size and not np.isfinite(lam[-1]):
        raise ValueError(
            f"the ESD eigenvalues c * s^2 overflow float64 (largest singular value {smax:.3g}):"
            " rescale the weights"
        )
    if lam.size and smax > 0 and lam[-1] == 0.0:
        raise ValueError(
            f"the ESD eigenvalues c * s^2 underflow to 0 in float64 (largest singular value "
            f"{smax:.3g}): rescale the weights"
        )


@define(outputs="esd_max", family="decompositions")
def esd_max(esd):
    """Largest ESD eigenvalue lambda_max. WeightWatcher: ``lambda_max`` (and its
    ``spectral_norm`` column) = esd_max * esd_ww_ratio."""
    return float(esd[-1])


@define(outputs="esd_min", family="decompositions")
def esd_min(esd):
    """Smallest ESD eigenvalue lambda_min."""
    return float(esd[0])


# --- randomized weights ---------------------------------------------------------------------

#: accepted values of ``rand_shuffle``: one permutation of all entries, or one per kernel position
RAND_SHUFFLES = ("all", "kernel")
#: WeightWatcher pools this many replicas of the randomized spectrum ...
WW_REPLICAS = 5
#: ... when a layer keeps fewer than this many singular values (its ``num_components``)
WW_REPLICA_BELOW = 100
_RAND_RULES = {"seed": at_least(-1), "rand_shuffle": one_of(*RAND_SHUFFLES)}
#: the default ``seed``, Diffract's (its ``weights_rand``); -1 draws unseeded
DEFAULT_SEED = 42


def _rng(seed, replica: int = 0) -> np.random.Generator:
    """The generator of replica ``replica`` (0: ``weights_rand``'s, seeded by ``seed`` alone,
    as Diffract's; k >= 1 by ``(seed, k)``); fresh entropy for seed -1."""
    if int(seed) == -1:
        return np.random.default_rng()
    return np.random.default_rng(int(seed) if replica == 0 else (int(seed), replica))


def _shuffled(w: np.ndarray, rng: np.random.Generator, rand_shuffle: str) -> np.ndarray:
    """``w`` with its entries permuted by ``rng``: all of them at once (``"all"``), or those of
    each kernel-position matrix separately (``"kernel"``, WeightWatcher's; the same for 2-D)."""
    if rand_shuffle not in RAND_SHUFFLES:
        raise ValueError(f"rand_shuffle must be one of {RAND_SHUFFLES}, got {rand_shuffle!r}")
    if rand_shuffle == "all" or w.ndim == 2:
        # a shuffled index, as Diffract's weights_rand: the same draw for the same seed
        index = np.arange(w.size)
        rng.shuffle(index)
        return w.reshape(-1)[index].reshape(w.shape)
    flat = w.reshape(w.shape[0], w.shape[1], -1).copy()
    for p in range(flat.shape[-1]):
        flat[:, :, p] = rng.permutation(flat[:, :, p].ravel()).reshape(flat.shape[:2])
    return flat.reshape(w.shape)


@define(
    outputs="weights_rand",
    min_ndim=2,
    family="decompositions",
    transient=("weights_rand",),
    option_rules=_RAND_RULES,
)
def weights_rand(weights, spectrum_gate, seed=DEFAULT_SEED, rand_shuffle="all"):
    """The entries of W randomly permuted (same shape): keeps the element distribution,
    destroys correlations. ``rand_shuffle="all"`` (default): one uniformly random
    permutation of all entries, drawn as Diffract's (a shuffled index of numpy's PCG64
    seeded by ``seed``: the same permutation for the same seed); ``"kernel"`` (set by ``conventions="weightwatcher"``): the
    entries of each kernel-position matrix permuted separately, as WeightWatcher's
    ``randomize`` (the same thing for a 2-D slice). Seeded by option ``seed`` (numpy PCG64,
    default 42 as Diffract's; -1 unseeded), so runs are reproducible (WeightWatcher uses the unseeded global numpy
    generator: its randomized columns agree with ours in distribution); transient (never
    stored unless asked). This is replica 0 of ``weights_rand_pool_svals``. Slices the
    ``spectrum_gate`` leaves out are not applicable."""
    return _shuffled(np.asarray(weights), _rng(seed), rand_shuffle)


@define(
    outputs=("weights_rand_svals", "kernel_rand_svals"),
    family="decompositions",
    transient=("kernel_rand_svals",),
    option_rules=_SPECTRUM_RULES,
)
def weights_rand_spectrum(weights_rand, spectrum_gate, precision="float32", recheck_rtol=1e-5):
    """Singular values of the permuted weights, computed exactly as ``weights_svals`` (pooled,
    ascending) and per kernel position (``kernel_rand_svals``, transient); options
    ``precision`` and ``recheck_rtol`` as for ``weights_spectrum``. For a LoRA update with
    ``lora_evals="rank"`` (the gate gives its rank r) only the top r of each position are
    kept, as WeightWatcher's ``random_eigenvalues`` keeps its ``num_components``."""
    ks, _ = slice_svals(weights_rand, precision, recheck_rtol)
    ks = _kept(ks, spectrum_gate)
    return pooled_asc(ks), ks


def replica_count(rand_replicas, n_comp: int) -> int:
    """How many randomized replicas are pooled: ``rand_replicas`` itself, or for ``"ww"``
    WeightWatcher's rule (``apply_random_esd``): 5 when the layer's ``num_components`` is
    below 100, else 1. Its num_components is the singular values kept per matrix times the
    kernel positions: M for a dense layer, M * rf for Conv2d, r for a LoRA update.

    Args:
        rand_replicas: a positive int or ``"ww"``.
        n_comp: singular values kept per kernel-position matrix times their number.

    Returns:
        The replica count (>= 1).
    """
    if rand_replicas == "ww":
        return WW_REPLICAS if n_comp < WW_REPLICA_BELOW else 1
    if isinstance(rand_replicas, str) or int(rand_replicas) < 1:
        raise ValueError(f"rand_replicas must be a positive int or 'ww', got {rand_replicas!r}")
    return int(rand_replicas)


@define(
    outputs="weights_rand_pool_svals",
    family="decompositions",
    transient=("weights_rand_pool_svals",),
    option_rules={
        **_SPECTRUM_RULES,
        **_RAND_RULES,
        "rand_replicas": OptionRule(choices=("ww",), low=1),
    },
)
def weights_rand_pool(
    kernel_rand_svals,
    weights,
    spectrum_gate,
    seed=DEFAULT_SEED,
    rand_shuffle="all",
    rand_replicas: int | str = 1,
    precision="float32",
    recheck_rtol=1e-5,
):
    """The randomized singular values pooled over R replicas, descending: replica 0 is
    ``kernel_rand_svals`` (the permutation of ``weights_rand``), replica k >= 1 a fresh
    permutation seeded by ``(seed, k)``, each keeping what the ESD keeps (the top r of a LoRA
    update with ``lora_evals="rank"``). R = option ``rand_replicas``: 1 (default: the pool
    is ``weights_rand_svals``), a positive int, or ``"ww"`` (set by
    ``conventions="weightwatcher"``): WeightWatcher's ``apply_random_esd``, which pools 5
    replicas when fewer than 100 singular values are kept in all (its num_components: M,
    M * rf for Conv2d, a LoRA update's r), 1 otherwise, for its randomized MP fit and
    ``max_rand_eval``. Options ``seed`` and ``rand_shuffle`` as for ``weights_rand`` (the
    replicas are drawn the same way), ``precision`` and ``recheck_rtol`` as for
    ``weights_spectrum``."""
    ks = np.asarray(kernel_rand_svals)
    reps = replica_count(rand_replicas, ks.size)  # kept per position * positions
    w = np.asarray(weights)
    rows = [ks]
    for k in range(1, reps):
        wk = _shuffled(w, _rng(seed, k), rand_shuffle)
        rows.append(_kept(slice_svals(wk, precision, recheck_rtol)[0], spectrum_gate))
    return pooled_desc(np.concatenate(rows))


@define(
    outputs=("weights_rand_lsvs", "weights_rand_rsvs"),
    family="decompositions",
    transient=("weights_rand_lsvs", "weights_rand_rsvs"),
    option_rules={"svd_device": one_of(*SVD_DEVICES)},
)
def weights_rand_svd(weights_rand, svd_device="cpu"):
    """Thin SVD of the permuted weights: U and V as in ``weights_svd`` (transient); option
    ``svd_device`` as there."""
    return _svd_vectors(weights_rand, svd_device)


@define(outputs="max_weights_rand_sval", family="decompositions")
def max_weights_rand_sval(weights_rand_svals):
    """Largest singular value of the permuted weights."""
    return float(np.max(weights_rand_svals))


@define(outputs="min_weights_rand_sval", family="decompositions")
def min_weights_rand_sval(weights_rand_svals):
    """Smallest singular value of the permuted weights."""
    return float(np.min(weights_rand_svals))


@define(outputs="esd_rand", family="decompositions")
def esd_rand(weights_rand_svals, esd_scale_factor):
    """ESD of the permuted weights (one replica, ``weights_rand``): c * s_i^2 ascending, same
    scale c as ``esd``; the input of the distances to the ESD (``js_rand_distance``,
    ``rand_soft_rank``, ...), which WeightWatcher also takes from one replica. The MP fit
    and ``esd_rand_max`` take ``esd_rand_pool``."""
    lam = _eigenvalues(weights_rand_svals, esd_scale_factor)
    _check_range(lam, weights_rand_svals)
    return lam


@define(outputs="esd_rand_pool", family="decompositions")
def esd_rand_pool(weights_rand_pool_svals, esd_scale_factor):
    """The randomized ESD pooled over the replicas of ``weights_rand_pool_svals``: c * s_i^2
    ascending, same scale c as ``esd`` (equal to ``esd_rand`` with one replica, the default).
    WeightWatcher's ``rand_evals`` (its randomized MP fit's input) with
    ``rand_replicas="ww"``."""
    return _eigenvalues(weights_rand_pool_svals, esd_scale_factor)


@define(outputs="esd_rand_max", family="decompositions")
def esd_rand_max(esd_rand_pool):
    """Largest eigenvalue of the pooled randomized ESD (``esd_rand``'s with one replica).
    WeightWatcher: ``max_rand_eval`` (times esd_ww_ratio)."""
    return float(esd_rand_pool[-1])


@define(outputs="esd_rand_min", family="decompositions")
def esd_rand_min(esd_rand_pool):
    """Smallest eigenvalue of the pooled randomized ESD."""
    return float(esd_rand_pool[0])
