"""Slices derived from the extracted ones: per kernel position (``pool=False``) and products
of consecutive layers (``intra=True``), WeightWatcher's two other ways to look at a model.

* :func:`kernel_position_slices`: a convolution weight (out, in, k1, k2, ...) (PyTorch's
  layout; Flax/Keras ``(k1, k2, ..., in, out)`` is read in its own layout) gives one 2-D
  slice ``<name>:<p>`` of out x in per kernel position, p the row-major position index
  (WeightWatcher's ``slice_id`` of ``analyze(pool=False)``, which walks i then j), meta
  ``{"kernel_position": {"of": name, "index": p, "position": [i, j, ...], "count": P}}``.
  WeightWatcher scales each position's matrix by sqrt(P / 2) before its SVD (its
  ``conv2d_norm`` with ``conv2d_count = P``), so its eigenvalues of these slices are P / 2
  times ours at ``esd_scale="ww"`` (its pooled Conv2d eigenvalues are 1/2 times s^2, as
  ``esd_scale="ww"`` gives).
* :func:`intra_slices`: for consecutive layers l, l+1 in model order (dense slices, and
  convolutions through their first kernel position, made tall, as WeightWatcher's ``Wmats[0]``)
  whose matrices share a size (WeightWatcher's ``align_mats`` transposes each so the shared size
  chains) and neither is all zero, the slice ``intra:<W_l>:<W_{l+1}>`` (float64) holding
  X = W_{l+1} W_l / (||W_l||_F ||W_{l+1}||_F) for dense layers, WeightWatcher's
  ``intra=True, sparsify=False`` product (it forms W_l^T W_{l+1}^T / norms, the transpose: the
  same singular values; its default ``sparsify=True`` puts a random 0/1 matrix between the
  two). Its size guards apply to the layers, not to the product, so an intra slice is not
  skipped for having few eigenvalues. WeightWatcher's ESD of
  these slices is the singular values s of X, not s^2; the fields of an intra slice are those
  of any matrix (eigenvalues s^2), so its ``lambda_max`` is our ``max_weights_sval`` and,
  the power law in s being one in s^2 with the same KS distance, its ``alpha`` is
  2 ``pl_alpha`` - 1. Two WeightWatcher quirks stay: a pair ending on a convolution gets that
  layer's conv2d_norm (its singular values times 1/sqrt(2)), and it keeps only the top
  ``num_components`` of the second layer (e.g. 24 of a rank-24 32 x 48 product: the other 8
  are zero, so its ``num_evals`` is our ``hard_rank`` there).

These slices are computed arrays (float32), added next to the slices they come from.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np

from diffract._vocab.slices import ParameterType
from diffract.extract.lora import as_numpy


def _position_matrices(w: np.ndarray, layout: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """(P, out, in) matrices of a conv weight, one per kernel position, and the kernel shape."""
    if layout == "in_out":  # (*kernel, in, out)
        kernel = w.shape[:-2]
        mats = np.swapaxes(w.reshape(-1, *w.shape[-2:]), 1, 2)
    else:  # (out, in, *kernel)
        kernel = w.shape[2:]
        mats = np.moveaxis(w.reshape(*w.shape[:2], -1), -1, 0)
    return mats, tuple(int(k) for k in kernel)


def kernel_position_slices(leaves: list[Any]) -> list[Any]:
    """One out x in slice per kernel position of every convolution slice (ndim >= 3).

    Args:
        leaves: the extracted leaves.

    Returns:
        The new leaves ``<name>:<p>``, type conv, layout out_in, float32.
    """
    out = []
    for leaf in leaves:
        if leaf.type != ParameterType.CONV or len(leaf.shape) < 3:
            continue
        mats, kernel = _position_matrices(as_numpy(leaf.array, np.float64), leaf.layout)
        positions = itertools.product(*(range(k) for k in kernel))
        for p, (pos, m) in enumerate(zip(positions, mats, strict=True)):
            where = {"of": leaf.name, "index": p, "position": list(pos), "count": len(mats)}
            meta = {"kernel_position": where}
            out.append(derived_leaf(leaf, f"{leaf.name}:{p}", m, ParameterType.CONV, meta))
    return out


def _out_in(leaf: Any) -> np.ndarray:
    w = as_numpy(leaf.array, np.float64)
    return w.T if leaf.layout == "in_out" else w


def _first_matrix(leaf: Any) -> np.ndarray:
    """WeightWatcher's first matrix of a layer (its ``Wmats[0]``): a dense weight as it is
    stored by PyTorch, transposed (in x out); a convolution's first kernel position
    (out x in), made tall (rows >= columns) as its ``conv2D_Wmats`` does."""
    if leaf.type == ParameterType.DENSE:
        return _out_in(leaf).T
    m = _position_matrices(as_numpy(leaf.array, np.float64), leaf.layout)[0][0]
    return m.T if m.shape[0] < m.shape[1] else m


def _aligned(w0: np.ndarray, w1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """WeightWatcher's ``align_mats``: when the four sides share a size, transpose each
    matrix so that the shared size is w0's columns and w1's rows."""
    sides = [*w0.shape, *w1.shape]
    repeated = [x for x in set(sides) if sides.count(x) > 1]
    if not repeated:
        return w0, w1
    shared = max(repeated)
    if w0.shape[1] != shared:
        w0 = w0.T
    if w1.shape[0] != shared:
        w1 = w1.T
    return w0, w1


def intra_slices(leaves: list[Any]) -> list[Any]:
    """The normalized products of consecutive layers (in model order), as WeightWatcher's
    ``intra=True, sparsify=False``: dense layers and convolutions (through their first
    kernel position), each pair aligned on a shared size (its ``align_mats``) and skipped
    when the sizes do not chain or a matrix is all zero.

    Args:
        leaves: the extracted leaves, in model order.

    Returns:
        The new leaves ``intra:<first>:<second>`` (type dense, float32), meta
        ``{"intra": [first, second]}`` (and ``"intra_ww_eval_factor": 0.5`` when the second
        is a Conv2d: WeightWatcher's eigenvalues of that product are s^2 / 2).
    """
    layers = [
        leaf
        for leaf in leaves
        if (leaf.type == ParameterType.DENSE and len(leaf.shape) == 2)
        or (leaf.type == ParameterType.CONV and len(leaf.shape) >= 3)
    ]
    out = []
    for first, second in itertools.pairwise(layers):
        w0, w1 = _aligned(_first_matrix(first), _first_matrix(second))
        if w0.shape[1] != w1.shape[0]:
            continue  # not chained
        norms = np.linalg.norm(w0) * np.linalg.norm(w1)
        if norms == 0:
            continue  # an all-zero layer: no normalized product
        x = (w0 @ w1).T / norms  # out x in of the pair, as a dense slice is stored
        name = f"intra:{first.name}:{second.name}"
        meta: dict[str, Any] = {"intra": [first.name, second.name]}
        if len(second.shape) == 4:  # WW scales the product as the conv it copies (conv2d_norm)
            meta["intra_ww_eval_factor"] = 0.5
        # float64: the product's rank is min of the factors' to float64 rounding
        out.append(derived_leaf(second, name, x, ParameterType.DENSE, meta, np.float64))
    return out


def derived_leaf(
    like: Any, name: str, m: np.ndarray, ptype: ParameterType, meta: dict, dtype: Any = np.float32
) -> Any:
    """A new leaf like ``like`` (its source and framework), holding the derived matrix ``m``
    as ``dtype`` under ``name``, of type ``ptype``, in the out x in layout."""
    arr = np.ascontiguousarray(m, dtype=dtype)
    return replace(
        like,
        name=name,
        array=arr,
        shape=tuple(arr.shape),
        dtype=str(arr.dtype),
        type=ptype,
        layout="out_in",
        meta=meta,
    )
