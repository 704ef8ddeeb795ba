"""Values as bytes without pickle: for caches (LRU, Redis) and SQLite blobs.

Format: ``b"DFV1"``, a 4-byte little-endian header length, a JSON header
(``{"kind": ..., "dtype": ..., "shape": [...]}``) and, for arrays, the raw C-order bytes.
Only numbers (complex ones too), strings, booleans and NumPy arrays of numeric dtypes are accepted.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from typing import Any

import numpy as np

MAGIC = b"DFV1"


class CodecError(ValueError):
    """Bytes that are not a diffract-encoded value, or a value that cannot be encoded."""


def encode(value: Any) -> bytes:
    """``value`` as bytes (see the module docstring for the format).

    Args:
        value: a number, str, bool, or a NumPy array of a numeric dtype.

    Returns:
        The encoded bytes.

    Raises:
        CodecError: any other value.
    """
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
    elif isinstance(value, (complex, np.complexfloating)):
        c = complex(value)
        header, payload = {"kind": "complex", "value": [repr(c.real), repr(c.imag)]}, b""
    elif isinstance(value, str):
        header, payload = {"kind": "str", "value": value}, b""
    else:
        raise CodecError(f"cannot encode a value of type {type(value).__name__}")
    head = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + payload


#: the prefix of a content digest (:func:`digest`), and so of a content-addressed cache key
DIGEST_PREFIX = "sha256:"


def digest(value: Any) -> str:
    """``"sha256:<hex>"`` of ``value``'s encoding (:func:`encode`): its content address.

    A store records it for each array value it writes, so a cache entry read under it is
    checked against the store (:func:`matches`), whoever wrote the entry.

    Raises:
        CodecError: ``value`` cannot be encoded.
    """
    return DIGEST_PREFIX + hashlib.sha256(encode(value)).hexdigest()


def matches(key: str, data: bytes) -> bool:
    """Whether the encoded ``data`` hashes to the content digest ``key``."""
    return key == DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def decode(data: bytes) -> Any:
    """The value encoded in ``data``.

    Args:
        data: bytes written by :func:`encode`.

    Returns:
        The value (arrays as new, writable NumPy arrays).

    Raises:
        CodecError: anything malformed or foreign.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"not a diffract-encoded value (got {type(data).__name__})")
    data = bytes(data)
    if len(data) < 8 or data[:4] != MAGIC:
        raise CodecError("not a diffract-encoded value (bad magic)")
    (n,) = struct.unpack("<I", data[4:8])
    if 8 + n > len(data):
        raise CodecError("truncated value header")
    try:
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CodecError(f"corrupt value header ({exc})") from None
    if not isinstance(header, dict):
        raise CodecError(f"corrupt value header (a JSON {type(header).__name__}, not an object)")
    try:
        return _decode_value(header, data[8 + n :])
    except CodecError:
        raise
    except (TypeError, KeyError, ValueError, AttributeError, OverflowError, MemoryError) as exc:
        raise CodecError(f"corrupt value header ({type(exc).__name__}: {exc})") from None


def _decode_value(header: dict[str, Any], payload: bytes) -> Any:
    kind = header.get("kind")
    if kind == "array":
        dtype = np.dtype(header["dtype"])
        if dtype.kind not in "biufc":
            raise CodecError(f"refusing dtype {dtype}")
        shape = header["shape"]
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise CodecError(f"corrupt array shape {shape!r}")
        shape = tuple(shape)
        claimed = dtype.itemsize * math.prod(shape)  # exact: no int64 wrap-around
        if len(payload) != claimed:
            raise CodecError(
                f"array payload of {len(payload)} bytes, its header claims {claimed} "
                f"({dtype} of shape {list(shape)[:8]}); truncated or crafted"
            )
        return np.frombuffer(payload, dtype=dtype).reshape(shape).copy()
    if kind == "float":
        return float(header["value"])
    if kind == "complex":
        re_, im = header["value"]
        return complex(float(re_), float(im))
    if kind in ("int", "bool", "str"):
        value = header["value"]
        if kind == "str" and not isinstance(value, str):
            raise CodecError(f"corrupt str value {value!r}")
        if kind == "bool" and not isinstance(value, bool):
            raise CodecError(f"corrupt bool value {value!r}")
        return {"int": int, "bool": bool, "str": str}[kind](value)
    raise CodecError(f"unknown value kind {kind!r}")
