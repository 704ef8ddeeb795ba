"""A slice's weights as kernels see them: read from the store here, or, in a remote
worker, from the checkpoint the slice references (by path, so they are not sent)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from diffract._core.slices import ParameterType, SliceInfo
from diffract.extract.references import ReferenceReader
from diffract.run.state import Failed, NonFiniteWeights, short_error
from diffract.store import Store

Values = dict[str, dict[str, Any]]


def canonical_layout(w: np.ndarray, s: SliceInfo) -> np.ndarray:
    """The weights in PyTorch layout, whatever the framework: dense (out, in), conv
    (out, in, *kernel). Flax/Keras kernels (in, out) / (*kernel, in, out) are transposed;
    bias and norm slices lose singleton axes."""
    if s.type in (ParameterType.BIAS, ParameterType.NORM) and w.ndim > 1:
        w = w.reshape([d for d in w.shape if d != 1] or [1])
    if s.layout == "in_out" and w.ndim >= 2:
        if w.ndim == 2:
            return w.T
        return np.moveaxis(np.moveaxis(w, -1, 0), -1, 1)
    return w


def as_float_array(arr: np.ndarray) -> np.ndarray:
    """Floats of at least 32 bits (complex kept): what kernels receive as ``weights``."""
    if arr.dtype.kind == "f" and arr.dtype.itemsize >= 4:
        return arr
    if arr.dtype.kind == "c":
        return arr
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)
    return arr.astype(np.float64)


def load_weights(store: Store, s: SliceInfo) -> np.ndarray | Failed:
    """The slice's weights as kernels see them, or a failure (unreadable, NaN or Inf)."""
    return checked_weights(lambda: store.weights(s.uid), s)


def checked_weights(read: Callable[[], np.ndarray], s: SliceInfo) -> np.ndarray | Failed:
    """``read()`` in the layout and dtype kernels see, or a failure (unreadable), or the
    :class:`NonFiniteWeights` marker (NaN, Inf: the slice's values are stored as NaN)."""
    try:
        w = canonical_layout(as_float_array(read()), s)
    except Exception as exc:
        return Failed(short_error(exc))
    if not _all_finite(w):
        n_nan = int(np.isnan(w).sum())
        n_inf = int(np.isinf(w).sum())
        return NonFiniteWeights(f"weights contain {n_nan} NaN and {n_inf} Inf value(s) of {w.size}")
    return w


def _all_finite(w: np.ndarray) -> bool:
    """No NaN or Inf in ``w``: for real floats by its min and max (NaN propagates through
    both; no boolean copy of a 32000 x 2048 embedding), else elementwise."""
    if w.size and w.dtype.kind == "f":
        return bool(np.isfinite(np.min(w)) and np.isfinite(np.max(w)))
    return bool(np.all(np.isfinite(w)))


class ByPath:
    """Stands for a slice's weights in a remote task: the worker reads them from the
    checkpoint the slice references (its ``meta["external"]``), by path."""

    def __repr__(self) -> str:
        return "ByPath()"


BY_PATH = ByPath()

#: in a worker process: the checkpoint files read by path (kept between tasks)
_WORKER_REFERENCES: ReferenceReader | None = None


def worker_references() -> ReferenceReader:
    """This process's reader of checkpoint references (a worker keeps its files open)."""
    global _WORKER_REFERENCES
    if _WORKER_REFERENCES is None:
        _WORKER_REFERENCES = ReferenceReader()
    return _WORKER_REFERENCES


def _read_here(s: SliceInfo) -> np.ndarray:
    return np.asarray(worker_references().read(s))


def read_by_path(values: Values) -> None:
    """Replace each :class:`ByPath` marker by the weights read from the checkpoint here."""
    for vals in values.values():
        if isinstance(vals.get("weights"), ByPath):
            s: SliceInfo = vals["slice_info"]
            vals["weights"] = checked_weights(functools.partial(_read_here, s), s)
