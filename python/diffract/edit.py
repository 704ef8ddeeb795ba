"""Model editing: WeightWatcher's SVD smoothing and SVD sharpness, returning a new model.

``svd_smoothing(model)`` keeps the top singular components of every weight matrix and
``svd_sharpness(model)`` removes the top ones (WeightWatcher 0.7.7's ``SVDSmoothing`` and
``SVDSharpness``). Both return a NEW model of the same framework: a PyTorch module (a deep
copy with the edited parameters loaded), an Equinox module, Flax parameters, a PyTorch state
dict or a NumPy dict (the array leaves are split off with :func:`diffract.partition`, edited,
and put back with :func:`diffract.combine`). The model passed in is never changed.

Which leaves are edited: the weight slices :func:`diffract.extract.extract` names (``filter_spec``
as there) with ``ndim >= 2``. A matrix (N x M) is edited as a whole; a convolution kernel is
edited per kernel position (the trailing positions for PyTorch's (out, in, *k) layout, the
leading ones for Flax/Keras (*k, in, out)), as WeightWatcher does with ``pool=True``: the
number of components is counted for the whole layer and divided by the number of positions
(rounded up). In a PEFT model the base weights are edited; the LoRA updates (``<layer>.lora``,
B @ A, see :mod:`diffract.extract.lora`) are derived slices and the factors stay as they are.
"""

from __future__ import annotations

import copy
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from diffract._core.tree import (
    combine,
    dotted_name,
    is_array,
    partition,
    tree_leaves_with_path,
    tree_map,
)
from diffract._errors import InvalidArgumentError
from diffract.extract import extract

#: the ways :func:`svd_smoothing` chooses how many components to keep (WeightWatcher's names)
SMOOTHING_METHODS = ("svd", "detx", "rmt", "alpha_min")

# --------------------------------------------------------------------------------------
# matrices
# --------------------------------------------------------------------------------------


def _positions(array: np.ndarray, layout: str) -> list[np.ndarray]:
    """The 2-D matrices of a leaf: itself, or one per kernel position (views)."""
    if array.ndim == 2:
        return [array]
    if layout == "in_out":  # (*k, in, out)
        flat = array.reshape(-1, *array.shape[-2:])
        return [flat[i] for i in range(flat.shape[0])]
    flat = array.reshape(*array.shape[:2], -1)  # (out, in, *k)
    return [flat[:, :, i] for i in range(flat.shape[2])]


def _set_positions(shape: tuple[int, ...], mats: list[np.ndarray], layout: str) -> np.ndarray:
    if len(shape) == 2:
        return mats[0]
    if layout == "in_out":
        return np.stack(mats, axis=0).reshape(shape)
    return np.stack(mats, axis=-1).reshape(shape)


def _truncate(w: np.ndarray, count: int) -> np.ndarray:
    """W with only its top ``count`` singular components (count > 0), or with its top
    ``-count`` components removed (count < 0); count = 0 leaves W as it is."""
    if count == 0:
        return w
    u, s, vh = np.linalg.svd(w, full_matrices=False)
    s = s.copy()
    if count > 0:
        s[count:] = 0.0
    else:
        s[: min(-count, s.size)] = 0.0
    return (u * s) @ vh


def _esd(mats: list[np.ndarray]) -> np.ndarray:
    """The eigenvalues of W^T W of every position, pooled (any scale: the counts below are
    scale-free)."""
    svals = np.concatenate([np.linalg.svd(m, compute_uv=False) for m in mats])
    return np.sort(svals.astype(np.float64) ** 2)


def _mp_spikes(lam: np.ndarray, mat: np.ndarray) -> int:
    from diffract.kernels.mpfit import ww_mp_fit

    n, m = max(mat.shape), min(mat.shape)
    return int(ww_mp_fit(lam, n / m, m)[1])


def _detx_count(lam: np.ndarray) -> int:
    from diffract.kernels.diagnostics import detx

    return int(detx(lam, 0)[0])


def _pl_spikes(lam: np.ndarray) -> int:
    """The power-law tail's size (eigenvalues >= the fitted xmin; WeightWatcher's
    ``num_pl_spikes``), with the kernel's default fit; scale-free like the other counts."""
    from diffract.kernels.fits import pl_fit

    return int(pl_fit(lam, 1.0, "ww", 1e-5)[5])


def _smooth_count(method: str, percent: float) -> Callable[[list[np.ndarray]], int]:
    def count(mats: list[np.ndarray]) -> int:
        m = min(mats[0].shape)
        if method == "svd":
            return int(percent * m * len(mats))
        lam = _esd(mats)
        if method == "alpha_min":
            return _pl_spikes(lam)
        return _detx_count(lam) if method == "detx" else _mp_spikes(lam, mats[0])

    return count


def _sharpness_count(seed: int) -> Callable[[list[np.ndarray]], int]:
    def count(mats: list[np.ndarray]) -> int:
        rng = np.random.default_rng(seed)
        shuffled = [rng.permutation(m.ravel()).reshape(m.shape) for m in mats]
        return -_mp_spikes(_esd(shuffled), mats[0])

    return count


def _edit_array(array: np.ndarray, layout: str, count_of: Callable[[list[np.ndarray]], int]):
    """The edited array (float64) and the number of components kept (> 0) or removed (< 0)."""
    work = np.asarray(array, dtype=np.float64)
    mats = _positions(work, layout)
    total = count_of(mats)
    per = int(math.copysign(math.ceil(abs(total) / len(mats)), total)) if total else 0
    return _set_positions(work.shape, [_truncate(m, per) for m in mats], layout), total


# --------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------


def _like(new: np.ndarray, old: Any) -> Any:
    """``new`` as an array of ``old``'s kind, dtype and device."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(old, torch.Tensor):
        return torch.as_tensor(new, dtype=old.dtype, device=old.device)
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(old, jax.Array):
        return jax.numpy.asarray(new, dtype=old.dtype)
    return np.asarray(new, dtype=np.asarray(old).dtype)


def _to_numpy(leaf: Any) -> np.ndarray:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(leaf, torch.Tensor):
        return leaf.detach().to("cpu", dtype=torch.float64).numpy()
    return np.asarray(leaf, dtype=np.float64)


def _edits(model: Any, filter_spec: Any, count_of: Callable) -> tuple[dict[str, Any], dict]:
    """Edited float64 arrays by slice name, and the component counts by name."""
    extracted = extract(model, filter_spec)
    if extracted.file_backed:
        raise InvalidArgumentError(
            "model editing needs a model object (a module, pytree or dict of arrays), not a "
            f"checkpoint file ({extracted.source}); load it first"
        )
    arrays: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for leaf in extracted.leaves:
        if len(leaf.shape) < 2:
            continue
        arrays[leaf.name], counts[leaf.name] = _edit_array(
            _to_numpy(leaf.array), leaf.layout, count_of
        )
    return arrays, counts


def _is_torch_module(model: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _rebuild(model: Any, arrays: dict[str, Any]) -> Any:
    """A new model like ``model`` with the named leaves replaced."""
    if _is_torch_module(model):
        import torch

        from diffract.extract.lora import base_name

        new = copy.deepcopy(model)
        state = new.state_dict()
        params = {base_name(k): k for k in state} | {k: k for k in state}
        with torch.no_grad():
            for name, value in arrays.items():
                if name in params:  # a LoRA update (B @ A) is derived, not a parameter
                    target = state[params[name]]
                    target.copy_(torch.as_tensor(value, dtype=target.dtype))
        return new
    leaves, rest = partition(model, is_array)
    named = [(dotted_name(path), leaf) for path, leaf in tree_leaves_with_path(leaves)]
    replaced = iter(_like(arrays[name], leaf) if name in arrays else leaf for name, leaf in named)
    return combine(tree_map(lambda _leaf: next(replaced), leaves), rest)


def _check_filter_names(arrays: dict[str, Any], model: Any) -> None:
    if _is_torch_module(model):
        return
    leaves, _ = partition(model, is_array)
    names = {dotted_name(path) for path, _leaf in tree_leaves_with_path(leaves)}
    missing = sorted(set(arrays) - names)
    if missing:
        raise InvalidArgumentError(
            f"cannot put edited weights back into this {type(model).__name__}: its array leaves "
            f"do not include {missing[:3]}; edit its parameter pytree instead"
        )


def _edited(model: Any, filter_spec: Any, count_of: Callable) -> Any:
    arrays, _counts = _edits(model, filter_spec, count_of)
    _check_filter_names(arrays, model)
    return _rebuild(model, arrays)


def svd_smoothing(
    model: Any, percent: float = 0.8, method: str = "detx", filter_spec: Any = None
) -> Any:
    """WeightWatcher's ``SVDSmoothing``: every weight matrix keeps only its top singular
    components; a new model is returned and ``model`` is not changed.

    Args:
        model: a PyTorch module or state dict, an Equinox module, Flax parameters or a dict of
            NumPy arrays.
        percent: with ``method="svd"``, the share in (0, 1] of the min(N, M) components to keep
            (int(percent * M), as WeightWatcher).
        method: how many components to keep: ``"svd"`` (``percent`` of them), ``"detx"`` (the
            det X = 1 tail, WeightWatcher's default and our ``detx_num_spikes``) or ``"rmt"``
            (the spikes above WeightWatcher's fitted Marchenko-Pastur bulk,
            ``mp_fit_num_spikes``) or ``"alpha_min"`` (the power-law tail, the eigenvalues
            from the fitted xmin up: ``pl_num_spikes``, WeightWatcher's ``method="alpha_min"``).
        filter_spec: which leaves are weight slices, as for :func:`diffract.extract.extract`.

    Returns:
        A new model of the same framework with the smoothed weights.

    Raises:
        InvalidArgumentError: an unknown ``method``, a ``percent`` outside (0, 1], or a model
            its edited weights cannot be put back into (a checkpoint file).
        ExtractionError: the model cannot be turned into weight slices.
    """
    if method not in SMOOTHING_METHODS:
        raise InvalidArgumentError(
            f"svd_smoothing: unknown method {method!r}; use one of {list(SMOOTHING_METHODS)}"
        )
    if isinstance(percent, bool) or not isinstance(percent, (int, float)):
        raise InvalidArgumentError(f"svd_smoothing: percent must be a number, got {percent!r}")
    if not 0.0 < float(percent) <= 1.0:
        raise InvalidArgumentError(f"svd_smoothing: percent must be in (0, 1], got {percent!r}")
    return _edited(model, filter_spec, _smooth_count(method, float(percent)))


def svd_sharpness(model: Any, seed: int = 0, filter_spec: Any = None) -> Any:
    """WeightWatcher's ``SVDSharpness``: every weight matrix loses its top k singular
    components, k the spikes of WeightWatcher's Marchenko-Pastur fit to the ESD of the matrix
    with its entries shuffled (the correlation traps, our ``rand_mp_fit_num_spikes``); a new
    model is returned and ``model`` is not changed.

    Args:
        model: a PyTorch module or state dict, an Equinox module, Flax parameters or a dict of
            NumPy arrays.
        seed: the seed of the shuffle (WeightWatcher uses a fixed permutation).
        filter_spec: which leaves are weight slices, as for :func:`diffract.extract.extract`.

    Returns:
        A new model of the same framework with the sharpened weights.

    Raises:
        InvalidArgumentError: ``seed`` is not an int, or a model its edited weights cannot be
            put back into.
        ExtractionError: the model cannot be turned into weight slices.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgumentError(f"svd_sharpness: seed must be an int, got {seed!r}")
    return _edited(model, filter_spec, _sharpness_count(seed))
