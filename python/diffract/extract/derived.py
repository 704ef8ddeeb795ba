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
* :func:`intra_slices`: for consecutive 2-D dense slices W_l (out_l x in_l), W_{l+1} in model
  order whose dimensions chain (in_{l+1} = out_l) and neither is all zero, the slice ``intra:<W_l>:<W_{l+1}>`` holding
  X = W_{l+1} W_l / (||W_l||_F ||W_{l+1}||_F), WeightWatcher's ``intra=True, sparsify=False``
  product (it forms W_l^T W_{l+1}^T / norms, the transpose: the same singular values; its
  default ``sparsify=True`` puts a random 0/1 matrix between the two). WeightWatcher's ESD of
  these slices is the singular values s of X, not s^2; the fields of an intra slice are those
  of any matrix (eigenvalues s^2), so its ``lambda_max`` is our ``max_weights_sval`` and,
  the power law in s being one in s^2 with the same KS distance, its ``alpha`` is
  2 ``pl_alpha`` - 1. WeightWatcher also pairs convolutions (through their first kernel
  position); here only dense layers chain.

These slices are computed arrays (float32), added next to the slices they come from.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np

from diffract._core.slices import ParameterType
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
            out.append(_new_leaf(leaf, f"{leaf.name}:{p}", m, ParameterType.CONV, meta))
    return out


def _out_in(leaf: Any) -> np.ndarray:
    w = as_numpy(leaf.array, np.float64)
    return w.T if leaf.layout == "in_out" else w


def intra_slices(leaves: list[Any]) -> list[Any]:
    """The normalized products of consecutive chained 2-D dense slices (in model order).

    Args:
        leaves: the extracted leaves, in model order.

    Returns:
        The new leaves ``intra:<first>:<second>`` (type dense, float32), meta
        ``{"intra": [first, second]}``.
    """
    dense = [leaf for leaf in leaves if leaf.type == ParameterType.DENSE and len(leaf.shape) == 2]
    out = []
    for first, second in itertools.pairwise(dense):
        w0, w1 = _out_in(first), _out_in(second)
        if w1.shape[1] != w0.shape[0]:
            continue  # not chained: the output of the first is not the second's input
        norms = np.linalg.norm(w0) * np.linalg.norm(w1)
        if norms == 0:
            continue  # an all-zero layer: no normalized product
        x = (w1 @ w0) / norms
        name = f"intra:{first.name}:{second.name}"
        out.append(
            _new_leaf(second, name, x, ParameterType.DENSE, {"intra": [first.name, second.name]})
        )
    return out


def _new_leaf(like: Any, name: str, m: np.ndarray, ptype: ParameterType, meta: dict) -> Any:
    arr = np.ascontiguousarray(m, dtype=np.float32)
    return replace(
        like,
        name=name,
        array=arr,
        shape=tuple(arr.shape),
        dtype="float32",
        type=ptype,
        layout="out_in",
        meta=meta,
    )
