"""Array leaves that load on demand, and conversion of any framework's array to NumPy.

``LazyArray`` is how checkpoint files stay unread until a kernel needs one tensor: it knows
its shape and dtype and holds a loader. ``to_numpy`` turns a NumPy/JAX/PyTorch array or a
LazyArray into a NumPy array, converting bf16 and fp8 to float32 (exactly representable).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from diffract._vocab.dtypes import NON_NUMPY_FLOATS

#: dtypes NumPy lacks; converted to float32 for storage and math


@dataclass(frozen=True, eq=False)
class LazyArray:
    """A tensor of a checkpoint file, loaded only when :meth:`load` is called.

    Attributes:
        shape: the tensor's shape (known without reading it).
        dtype: its dtype name as stored (``float32``, ``bfloat16``, ``float8_e4m3fn``...).
        loader: reads the tensor and returns it as a NumPy array.
        source: where it comes from (``path::name``), for messages.
    """

    shape: tuple[int, ...]
    dtype: str
    loader: Callable[[], np.ndarray]
    source: str = ""

    @property
    def ndim(self) -> int:
        """Number of dimensions (known without reading the tensor)."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of entries (known without reading the tensor)."""
        return int(np.prod(self.shape, dtype=np.int64))

    def load(self) -> np.ndarray:
        """Read the tensor now (memory-mapped where the format allows).

        Returns:
            The tensor as a NumPy array.
        """
        return self.loader()

    def __repr__(self) -> str:
        return f"LazyArray(shape={self.shape}, dtype={self.dtype}, source={self.source!r})"


def dtype_name(x: Any) -> str:
    """The dtype of an array-like as a plain string (``"float32"``, ``"bfloat16"``)."""
    dt = getattr(x, "dtype", None)
    if dt is None:
        return type(x).__name__
    return str(dt).replace("torch.", "")


def shape_of(x: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in getattr(x, "shape", ()))


def to_numpy(x: Any) -> np.ndarray:
    """A NumPy array with the values of ``x``; bf16/fp8 become float32. No copy when the
    input is already a NumPy array of a NumPy dtype."""
    if isinstance(x, LazyArray):
        x = x.load()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype in (torch.bfloat16,) or "float8" in str(t.dtype):
            t = t.float()
        out: np.ndarray = t.numpy()
        return out
    arr = np.asarray(x)
    name = str(arr.dtype)
    if name in NON_NUMPY_FLOATS or name.startswith("float8"):
        arr = arr.astype(np.float32)
    return arr


#: scalar kinds by name, Python and NumPy types together (bool first: a bool is an int)
_SCALAR_KINDS: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("bool", (bool, np.bool_)),
    ("int", (int, np.integer)),
    ("float", (float, np.floating)),
    ("complex", (complex, np.complexfloating)),
    ("str", (str,)),
)


def scalar_kind(value: Any) -> str | None:
    """``"bool"``, ``"int"``, ``"float"``, ``"complex"`` or ``"str"`` for a Python or NumPy
    scalar of that kind, None for anything else (the kinds the stores tag values with and
    kernel options are checked against)."""
    for kind, types in _SCALAR_KINDS:
        if isinstance(value, types):
            return kind
    return None


def storable_error(value: Any) -> str | None:
    """None when the store can hold ``value`` as a field value (a bool, int, float, complex
    or str, a NumPy scalar of a numeric kind or str, or an ndarray of a numeric dtype, complex
    included); otherwise what the value is, for an error message. The one rule for kernels
    and ``Store.commit``."""
    if isinstance(value, (bool, int, float, complex, str)):
        return None
    if isinstance(value, np.generic):
        if value.dtype.kind in "biufc" or isinstance(value, np.str_):
            return None
        return f"a NumPy {value.dtype} scalar"
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biufc":
            return None
        return f"an ndarray of dtype {value.dtype}"
    if value is None:
        return "None"
    return f"a value of type {type(value).__name__}"
