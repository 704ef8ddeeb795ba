"""Safetensors files read without torch: the header parsed here, tensors memory-mapped one at a
time as :class:`~diffract._core.arrays.LazyArray` leaves."""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from typing import Any

import numpy as np

from diffract._core.arrays import LazyArray
from diffract._core.dtypes import NON_NUMPY_FLOATS, itemsize
from diffract._errors import ExtractionError

# --- safetensors: header parsed here, tensors memory-mapped one at a time ---------------
# (The safetensors package's NumPy reader cannot return bf16/fp8 without torch; the format
# is a documented 8-byte little-endian header length, a JSON header and raw little-endian data.)

_ST_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
    "C64": "complex64",
    "BOOL": "bool",
}

#: dtypes the reference reader knows that are not decoded here, with their sizes in bits:
#: a tensor of one is checked like any other and then skipped with a reason, not refused
_ST_UNREAD_BITS = {
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
}


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _fp8_table(exp_bits: int, man_bits: int, bias: int, finite_only: bool) -> np.ndarray:
    table = np.empty(256, dtype=np.float32)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e = (b >> man_bits) & ((1 << exp_bits) - 1)
        m = b & ((1 << man_bits) - 1)
        if finite_only:  # e4m3fn: only S.1111.111 is NaN, no infinities
            if e == (1 << exp_bits) - 1 and m == (1 << man_bits) - 1:
                table[b] = np.nan
                continue
        elif e == (1 << exp_bits) - 1:  # e5m2: IEEE-like inf/nan
            table[b] = sign * np.inf if m == 0 else np.nan
            continue
        if e == 0:
            table[b] = sign * (m / (1 << man_bits)) * 2.0 ** (1 - bias)
        else:
            table[b] = sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return table


_FP8 = {
    "float8_e4m3fn": lambda: _fp8_table(4, 3, 7, True),
    "float8_e5m2": lambda: _fp8_table(5, 2, 15, False),
}


def decode_raw(raw: np.ndarray, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Decode little-endian raw bytes (a uint8 view) of ``dtype`` into a NumPy array.

    Args:
        raw: the tensor's bytes as a uint8 array.
        dtype: its dtype name; bfloat16 becomes float32, float8 is decoded through a table.
        shape: its shape.

    Returns:
        The tensor (a view of ``raw`` where the dtype is NumPy's own).
    """
    if dtype == "bfloat16":  # the 16 high bits of a float32; shifted in place (one copy)
        bits = raw.view("<u2").astype(np.uint32)
        np.left_shift(bits, 16, out=bits)
        return bits.view(np.float32).reshape(shape)
    if dtype in _FP8:
        decoded: np.ndarray = _FP8[dtype]()[raw]
        return decoded.reshape(shape)
    return raw.view(np.dtype(dtype).newbyteorder("<")).reshape(shape)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise ExtractionError(f"the header names {k!r} twice")
        seen[k] = v
    return seen


def _parse_header(path: str, raw: bytes) -> dict[str, Any]:
    """The JSON header, refused as the reference reader refuses it: not JSON, not an object,
    a key given twice, a ``__metadata__`` that is not an object of strings, nested too deep."""
    try:
        header = json.loads(raw, object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExtractionError(
            f"{path}: not a safetensors file (header is not JSON: {exc})"
        ) from None
    except RecursionError:
        raise ExtractionError(
            f"{path}: not a safetensors file (header is nested too deeply to be a header)"
        ) from None
    except ExtractionError as exc:
        raise ExtractionError(f"{path}: not a safetensors file ({exc})") from None
    if not isinstance(header, dict):
        raise ExtractionError(f"{path}: not a safetensors file (header is not a JSON object)")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ExtractionError(
            f"{path}: not a safetensors file (__metadata__ must be an object of strings, got "
            f"{json.dumps(meta)[:80]})"
        )
    return header


def read_safetensors_header(path: str | os.PathLike[str]) -> tuple[dict[str, Any], int]:
    """The header of a safetensors file, checked.

    Args:
        path: the file.

    Returns:
        ``(header, data_offset)``: the parsed JSON header and where the tensor data begins.

    Raises:
        ExtractionError: the file is missing or is not a safetensors file.
    """
    path = os.fspath(path)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device: opening it could block
            raise ExtractionError(f"{path}: not a regular file (a FIFO, device or folder)")
        size = st.st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ExtractionError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", head)
            if n <= 0 or n > min(size - 8, 100_000_000):
                raise ExtractionError(
                    f"{path}: not a safetensors file (header length {n} does not fit the file size {size})"
                )
            raw = fh.read(n)
    except FileNotFoundError:
        raise ExtractionError(f"checkpoint file not found: {path}") from None
    return _parse_header(path, raw), 8 + n


def safetensors_leaves(
    path: str | os.PathLike[str], skipped: dict[str, str] | None = None
) -> dict[str, LazyArray]:
    """Every tensor of a safetensors file as a LazyArray reading a memory map of its bytes.

    A tensor of a dtype the reference reader knows but that is not decoded here (``F4``,
    ``F6_*``, ``F8_E8M0``, the ``FNUZ`` float8 variants) is checked like the others, then
    left out and recorded in ``skipped``: one such tensor does not refuse the file.

    Args:
        path: the file.
        skipped: where a left-out tensor's name and reason are recorded (optional).

    Returns:
        Tensor name -> its lazy array (nothing is read until ``load()``).

    Raises:
        ExtractionError: the file is not a valid safetensors file (bad header, a dtype the
            format does not define, offsets outside the data).
    """
    path = os.fspath(path)
    header, offset = read_safetensors_header(path)
    size = os.path.getsize(path)
    out: dict[str, LazyArray] = {}
    data_size = size - offset
    spans: list[tuple[int, int, str]] = []
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {name!r}"
        if not isinstance(spec, dict):
            raise ExtractionError(
                f"{where} has a malformed header entry (expected an object with dtype, shape "
                f"and data_offsets, got {type(spec).__name__})"
            )
        missing = [k for k in ("dtype", "shape", "data_offsets") if k not in spec]
        if missing:
            raise ExtractionError(f"{where} has a malformed header entry (missing {missing})")
        st_dtype = spec["dtype"]
        if not isinstance(st_dtype, str) or (
            st_dtype not in _ST_DTYPES and st_dtype not in _ST_UNREAD_BITS
        ):
            raise ExtractionError(
                f"{where} has the unknown dtype {st_dtype!r}; safetensors defines: "
                f"{sorted([*_ST_DTYPES, *_ST_UNREAD_BITS])}"
            )
        raw_shape, raw_offsets = spec["shape"], spec["data_offsets"]
        if not isinstance(raw_shape, list) or not all(_is_count(d) for d in raw_shape):
            raise ExtractionError(
                f"{where} has a malformed shape {raw_shape!r} (a list of non-negative ints)"
            )
        if (
            not isinstance(raw_offsets, list)
            or len(raw_offsets) != 2
            or not all(_is_count(v) for v in raw_offsets)
        ):
            raise ExtractionError(
                f"{where} has malformed data_offsets {raw_offsets!r} (two non-negative ints)"
            )
        shape = tuple(int(d) for d in raw_shape)
        start, end = (int(v) for v in raw_offsets)
        if start > end:
            raise ExtractionError(
                f"{where} has data_offsets [{start}, {end}] that begin after they end"
            )
        if end > data_size:
            raise ExtractionError(
                f"{where} points past the end of the file: data_offsets [{start}, {end}] but the "
                f"data section holds {data_size} bytes (truncated file?)"
            )
        dtype = _ST_DTYPES.get(st_dtype)
        bits = 8 * itemsize(dtype) if dtype is not None else _ST_UNREAD_BITS[st_dtype]
        n_bits = math.prod(shape) * bits
        if n_bits % 8:
            raise ExtractionError(
                f"{where}: shape {list(shape)} of the {bits}-bit {st_dtype} does not end on a "
                "byte boundary (corrupt or hand-edited file?)"
            )
        if end - start != n_bits // 8:
            raise ExtractionError(
                f"{where}: shape {list(shape)} of {st_dtype} needs {n_bits // 8} bytes but its "
                f"data_offsets [{start}, {end}] hold {end - start}; the header does not match "
                "the data (corrupt or hand-edited file?)"
            )
        if start % max(1, bits // 8):
            raise ExtractionError(
                f"{where}: data_offsets [{start}, {end}] are not aligned to its "
                f"{bits // 8}-byte {st_dtype} elements (corrupt or hand-edited file?)"
            )
        spans.append((start, end, name))
        if dtype is None:
            if skipped is not None:
                skipped[name] = (
                    f"safetensors dtype {st_dtype} ({bits}-bit) is not analyzed: no reader "
                    "for it here; convert the tensor to F16/BF16/F32 to analyze it"
                )
            continue

        def load(
            start: int = start, end: int = end, dtype: str = dtype, shape: tuple[int, ...] = shape
        ) -> np.ndarray:
            if end == start:  # a zero-element tensor (checked above)
                return np.zeros(shape, dtype=np.float32 if dtype in NON_NUMPY_FLOATS else dtype)
            raw = np.memmap(
                path, dtype=np.uint8, mode="r", offset=offset + start, shape=(end - start,)
            )
            return decode_raw(raw, dtype, shape)

        out[name] = LazyArray(shape=shape, dtype=dtype, loader=load, source=f"{path}::{name}")
    _check_tiling(path, spans, data_size)
    return out


def _check_tiling(path: str, spans: list[tuple[int, int, str]], data_size: int) -> None:
    """The tensors' byte ranges must cover the data section exactly, in order: no overlap,
    no gap, nothing after the last (as the reference reader requires)."""
    at = 0
    for start, end, name in sorted(spans):
        if start != at:
            what = "overlaps the tensor before it" if start < at else f"leaves a gap at byte {at}"
            raise ExtractionError(
                f"{path}: tensor {name!r} (data_offsets [{start}, {end}]) {what}; the tensors "
                "must cover the data section exactly (corrupt or hand-edited file?)"
            )
        at = end
    if at != data_size:
        raise ExtractionError(
            f"{path}: the tensors cover {at} of the data section's {data_size} bytes (a "
            "truncated header or trailing data: corrupt or hand-edited file?)"
        )
