"""Base-model deltas: the slices of a fine-tuned model minus its base model's, W - W_base.

``extract(model, base_model=base)`` (and ``session.models.add(model, id, base_model=base)``)
pairs the slices by name: each slice of ``model`` with a same-named slice in ``base`` becomes
the array W - W_base (taken in float64; stored float64 when either side is float64, else
float32, as the weights), with the slice meta
``{"delta": {"base": <base source>}}``; a slice with no partner in the base is left out,
listed in the skipped leaves with the reason. A base stored ``in_out`` (Flax, Keras kernels)
against a model stored ``out_in`` is transposed first (2-D slices). As WeightWatcher's ``base_model``
(its ``WWDeltaLayerIterator``), except that a shape that does not fit is an error naming the
slice (WeightWatcher logs a warning and analyzes zeros), and unmatched slices are not analyzed
as they are.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from diffract._errors import ExtractionError
from diffract.extract.lora import as_numpy

NOT_IN_BASE = "not in the base model: no W - W_base (base_model=)"


def _aligned(leaf: Any, base: Any) -> np.ndarray:
    """The base leaf's array in ``leaf``'s layout and shape, or an error naming the slice."""
    w = as_numpy(base.array, np.float64)
    if base.layout != leaf.layout and w.ndim == 2:
        w = w.T
    if w.shape != tuple(leaf.shape):
        raise ExtractionError(
            f"base_model: slice {leaf.name!r} has shape {tuple(leaf.shape)} but the base "
            f"model's {base.name!r} has shape {tuple(base.shape)}; a base model must have "
            "the same architecture"
        )
    return w


def _dtype(a: str, b: str) -> np.dtype:
    """float64 when either side is float64, else float32 (bf16/fp16 weights included)."""
    return np.dtype(np.float64 if "float64" in (a, b) or "double" in (a, b) else np.float32)


def subtract_base(leaves: list[Any], base: Any) -> tuple[list[Any], dict[str, str]]:
    """Each leaf with a same-named leaf in ``base`` replaced by its difference from it.

    Args:
        leaves: the model's extracted leaves (:class:`~diffract.extract.ExtractedLeaf`).
        base: the base model's :class:`~diffract.extract.Extracted`.

    Returns:
        ``(deltas, skipped)``: the delta leaves (meta ``"delta"``), and the leaves
        with no partner in the base, with the reason.

    Raises:
        ExtractionError: no slice of the model is in the base, or a pair whose shapes
            differ (naming the slice).
    """
    by_name = {b.name: b for b in base.leaves}
    matched = [leaf for leaf in leaves if leaf.name in by_name]
    if not matched:
        mine = sorted(leaf.name for leaf in leaves)[:3]
        theirs = sorted(by_name)[:3]
        raise ExtractionError(
            f"base_model: no slice of the model has a same-named slice in the base model "
            f"({base.source or base.framework}); the model has e.g. {mine}, the base {theirs}"
        )
    out = []
    for leaf in matched:
        other = by_name[leaf.name]
        d = (as_numpy(leaf.array, np.float64) - _aligned(leaf, other)).astype(
            _dtype(leaf.dtype, other.dtype)
        )
        meta = {**leaf.meta, "delta": {"base": str(base.source or base.framework)}}
        out.append(replace(leaf, array=d, dtype=str(d.dtype), meta=meta))
    skipped = {leaf.name: NOT_IN_BASE for leaf in leaves if leaf.name not in by_name}
    return out, skipped
