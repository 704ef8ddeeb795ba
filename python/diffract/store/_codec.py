"""Values as bytes without pickle: for caches (LRU, Redis) and SQLite blobs.

Format: ``b"DFV1"``, a 4-byte little-endian header length, a JSON header
(``{"kind": ..., "dtype": ..., "shape": [...]}``) and, for arrays, the raw C-order bytes.
Only numbers, strings, booleans and NumPy arrays of numeric dtypes are accepted.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

MAGIC = b"DFV1"


class CodecError(ValueError):
    """Bytes that are not a diffract-encoded value, or a value that cannot be encoded."""


def encode(value: Any) -> bytes:
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":
            raise CodecError(f"cannot encode an array of dtype {value.dtype} (numeric dtypes only)")
        arr = np.ascontiguousarray(value)
        header = {"kind": "array", "dtype": arr.dtype.str, "shape": list(arr.shape)}
        payload = arr.tobytes()
    elif isinstance(value, (bool, np.bool_)):
        header, payload = {"kind": "bool", "value": bool(value)}, b""
    elif isinstance(value, (int, np.integer)):
        header, payload = {"kind": "int", "value": int(value)}, b""
    elif isinstance(value, (float, np.floating)):
        header, payload = {"kind": "float", "value": repr(float(value))}, b""
    elif isinstance(value, str):
        header, payload = {"kind": "str", "value": value}, b""
    else:
        raise CodecError(f"cannot encode a value of type {type(value).__name__}")
    head = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + payload


def decode(data: bytes) -> Any:
    if len(data) < 8 or data[:4] != MAGIC:
        raise CodecError("not a diffract-encoded value (bad magic)")
    (n,) = struct.unpack("<I", data[4:8])
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CodecError(f"corrupt value header ({exc})") from None
    kind = header.get("kind")
    if kind == "array":
        dtype = np.dtype(header["dtype"])
        if dtype.kind not in "biufc":
            raise CodecError(f"refusing dtype {dtype}")
        payload = data[8 + n :]
        shape = tuple(header["shape"])
        if len(payload) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
            raise CodecError("truncated array payload")
        return np.frombuffer(payload, dtype=dtype).reshape(shape).copy()
    if kind == "float":
        return float(header["value"])
    if kind in ("int", "bool", "str"):
        return {"int": int, "bool": bool, "str": str}[kind](header["value"])
    raise CodecError(f"unknown value kind {kind!r}")
