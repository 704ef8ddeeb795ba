"""Floating dtypes NumPy has no native type for (they come from PyTorch, JAX and safetensors)."""

from __future__ import annotations

__all__ = ["NON_NUMPY_FLOATS", "itemsize"]

#: the one list: bfloat16 and the float8 variants, with their sizes in bytes
_SIZES = {
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
}
NON_NUMPY_FLOATS: tuple[str, ...] = tuple(_SIZES)


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name (4 for a name NumPy does not know)."""
    if dtype in _SIZES:
        return _SIZES[dtype]
    if dtype == "float16":
        return 2
    import numpy as np

    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return 4
