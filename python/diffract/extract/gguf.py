"""GGUF files (llama.cpp, Ollama): the header parsed and checked here, each tensor read from a
memory map and dequantized on its own with the ``gguf`` package's ``gguf.quants.dequantize``.

The header is untrusted input: every count, length, shape and offset is checked against the
file's size before anything is allocated (a crafted file claiming a 2**60-element tensor or
a string longer than the file is refused with a named error). Tensor names are mapped to the
Hugging Face (``transformers``) names of the same model where the architecture is known
(Llama family: ``blk.0.attn_q.weight`` -> ``model.layers.0.self_attn.q_proj.weight``), and
llama.cpp's rotary row permutation of Llama's Q and K weights is undone, so a GGUF and the
safetensors it was converted from line up slice for slice, value for value (up to the
quantization error). Each slice keeps its GGUF name and quant type in its meta.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diffract._errors import ExtractionError
from diffract._vocab.arrays import LazyArray

GGUF_MAGIC = b"GGUF"
#: the GGUF versions read here (1 used 32-bit counts and is obsolete)
GGUF_VERSIONS = (2, 3)
#: the default alignment of the tensor data section
DEFAULT_ALIGNMENT = 32

#: scalar value types of metadata: type id -> struct format
_SCALAR = {
    0: "<B",  # UINT8
    1: "<b",  # INT8
    2: "<H",  # UINT16
    3: "<h",  # INT16
    4: "<I",  # UINT32
    5: "<i",  # INT32
    6: "<f",  # FLOAT32
    7: "<?",  # BOOL
    10: "<Q",  # UINT64
    11: "<q",  # INT64
    12: "<d",  # FLOAT64
}
_STRING, _ARRAY = 8, 9
#: arrays longer than this keep only their length in the parsed metadata (token lists)
_KEEP_ARRAY = 64

#: float32 bytes dequantized at a time: gguf.quants' temporaries stay a few times this
_CHUNK = 16 * 2**20
#: GGML types read natively (no dequantization): type name -> NumPy dtype
_NATIVE = {"F32": "float32", "F16": "float16", "F64": "float64"}


class GGUFError(ExtractionError):
    """A GGUF file that cannot be read: corrupt, truncated, crafted, or of an unread type."""


@dataclass
class GGUFTensor:
    """One tensor as the header describes it.

    Attributes:
        name: its GGUF name (``blk.0.attn_q.weight``).
        shape: its shape in NumPy (row-major) order: GGUF lists dimensions innermost first.
        type_name: the GGML type (``Q4_K``, ``F16``...).
        type_id: the GGML type id.
        offset: where its data begins, from the start of the file.
        nbytes: its data size on disk.
    """

    name: str
    shape: tuple[int, ...]
    type_name: str
    type_id: int
    offset: int
    nbytes: int


@dataclass
class GGUFHeader:
    """A GGUF file's header: metadata (key -> value) and tensors, all checked.

    Attributes:
        path: the file.
        version: the GGUF version.
        metadata: key -> value (long arrays, such as token lists, as ``<array of N>``).
        tensors: the tensors in file order.
        data_offset: where the tensor data section begins.
        header_bytes: bytes of the file parsed (the header; no tensor data).
    """

    path: str
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: list[GGUFTensor] = field(default_factory=list)
    data_offset: int = 0
    header_bytes: int = 0

    @property
    def architecture(self) -> str:
        """``general.architecture`` (``llama``, ``qwen2``...), or ``""``."""
        arch = self.metadata.get("general.architecture", "")
        return arch if isinstance(arch, str) else ""


def _ggml_types() -> tuple[dict[int, str], dict[int, tuple[int, int]]]:
    """GGML type id -> name, and id -> (block size, bytes per block), from ``gguf``."""
    try:
        import gguf
    except ImportError:
        raise ExtractionError(
            "reading .gguf files needs the gguf package: pip install 'diffract-lab[gguf]' "
            "(or pip install gguf)"
        ) from None
    names = {int(t): t.name for t in gguf.GGMLQuantizationType}
    sizes = {int(t): tuple(v) for t, v in gguf.GGML_QUANT_SIZES.items()}
    return names, sizes  # type: ignore[return-value]


class _Cursor:
    """Bounds-checked little-endian reads over the file's bytes."""

    def __init__(self, buf: Any, path: str) -> None:
        self.buf = buf
        self.size = len(buf)
        self.pos = 0
        self.path = path

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GGUFError(
                f"{self.path}: truncated or corrupt GGUF: {what} needs {n} bytes at offset "
                f"{self.pos} but the file holds {self.size}"
            )

    def unpack(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def string(self, what: str) -> str:
        n = self.unpack("<Q", f"the length of {what}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{self.path}: {what} is not valid UTF-8 text") from None

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype], what)
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            if depth > 2:
                raise GGUFError(f"{self.path}: {what} nests arrays too deeply (crafted file?)")
            itype = self.unpack("<I", f"the item type of {what}")
            count = self.unpack("<Q", f"the length of {what}")
            if itype in _SCALAR:  # fixed-size items: checked and skipped (or read) at once
                isize = struct.calcsize(_SCALAR[itype])
                self.need(count * isize, f"{what} ({count} items)")
                if count > _KEEP_ARRAY:
                    self.pos += count * isize
                    return f"<array of {count}>"
                return [self.value(itype, what, depth + 1) for _ in range(count)]
            if itype not in (_STRING, _ARRAY):
                raise GGUFError(f"{self.path}: {what} has the unknown item type {itype}")
            # each item takes at least 8 bytes (its length): a claimed count is bounded by
            # the bytes left before any item is read
            self.need(count * 8, f"{what} ({count} items)")
            if itype == _STRING and count > _KEEP_ARRAY:  # token lists: skipped, not decoded
                for _ in range(count):
                    self.skip(self.unpack("<Q", f"the length of an item of {what}"), what)
                return f"<array of {count}>"
            items = [self.value(itype, what, depth + 1) for _ in range(count)]
            return items if count <= _KEEP_ARRAY else f"<array of {count}>"
        raise GGUFError(f"{self.path}: {what} has the unknown value type {vtype} (crafted file?)")


def read_gguf_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Parse and check a GGUF file's header (metadata and tensor table), reading no tensor data.

    Every tensor's type must be a GGML type, its shape must fit in the file, its data must
    lie inside the data section, aligned, and no two tensors may overlap.

    Args:
        path: the ``.gguf`` file.

    Returns:
        The header.

    Raises:
        GGUFError: not a GGUF file, an unsupported version, a truncated or crafted header
            (counts, lengths, shapes or offsets that do not fit the file).
    """
    path = os.fspath(path)
    type_names, type_sizes = _ggml_types()
    size = os.path.getsize(path)
    if size < 24:
        raise GGUFError(f"{path}: not a GGUF file (only {size} bytes)")
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _parse(mm, path, size, type_names, type_sizes)
    finally:
        mm.close()


def _parse(
    buf: Any,
    path: str,
    size: int,
    type_names: dict[int, str],
    type_sizes: dict[int, tuple[int, int]],
) -> GGUFHeader:
    cur = _Cursor(buf, path)
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {bytes(buf[:4])!r}, expected b'GGUF')")
    cur.pos = 4
    version = cur.unpack("<I", "the version")
    if version not in GGUF_VERSIONS:
        raise GGUFError(
            f"{path}: GGUF version {version} is not read (versions {GGUF_VERSIONS} are; "
            "a big-endian file reads as a huge version: convert it to little-endian)"
        )
    n_tensors = cur.unpack("<Q", "the tensor count")
    n_kv = cur.unpack("<Q", "the metadata count")
    # every tensor entry takes >= 24 bytes, every metadata entry >= 13: counts are bounded
    cur.need(n_tensors * 24 + n_kv * 13, f"{n_tensors} tensors and {n_kv} metadata entries")
    header = GGUFHeader(path=path, version=version)
    for i in range(n_kv):
        key = cur.string(f"metadata key #{i}")
        vtype = cur.unpack("<I", f"the type of metadata {key!r}")
        header.metadata[key] = cur.value(vtype, f"metadata {key!r}")
    alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (
        not isinstance(alignment, int)
        or isinstance(alignment, bool)
        or alignment <= 0
        or alignment & (alignment - 1)
    ):
        raise GGUFError(f"{path}: general.alignment {alignment!r} is not a power of two")
    raw: list[tuple[str, tuple[int, ...], int, int]] = []
    seen: set[str] = set()
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor #{i}")
        if name in seen:
            raise GGUFError(f"{path}: the tensor {name!r} is listed twice (crafted file?)")
        seen.add(name)
        n_dims = cur.unpack("<I", f"the rank of tensor {name!r}")
        if n_dims > 8:
            raise GGUFError(f"{path}: tensor {name!r} claims {n_dims} dimensions (at most 8)")
        dims = [cur.unpack("<Q", f"the shape of tensor {name!r}") for _ in range(n_dims)]
        type_id = cur.unpack("<I", f"the type of tensor {name!r}")
        offset = cur.unpack("<Q", f"the offset of tensor {name!r}")
        raw.append((name, tuple(reversed(dims)), type_id, offset))
    header.header_bytes = cur.pos
    data_offset = -(-cur.pos // alignment) * alignment
    header.data_offset = data_offset
    data_size = size - data_offset
    if data_size < 0:
        raise GGUFError(f"{path}: truncated GGUF: the file ends inside its header")
    spans = []
    for name, shape, type_id, offset in raw:
        where = f"{path}: tensor {name!r}"
        if type_id not in type_names or type_id not in type_sizes:
            raise GGUFError(f"{where} has the unknown GGML type id {type_id} (crafted file?)")
        type_name = type_names[type_id]
        block, per_block = type_sizes[type_id]
        n = math.prod(shape)  # Python ints: no overflow for crafted dims
        if shape and shape[-1] % block:
            raise GGUFError(
                f"{where}: its rows of {shape[-1]} values are not whole {type_name} blocks "
                f"of {block} (corrupt or crafted file)"
            )
        nbytes = n // block * per_block
        if offset % alignment:
            raise GGUFError(f"{where}: data offset {offset} is not aligned to {alignment}")
        if offset + nbytes > data_size:
            raise GGUFError(
                f"{where} ({type_name}, shape {list(shape)}: {nbytes} bytes at data offset "
                f"{offset}) runs past the end of the file's {data_size}-byte data section "
                "(truncated or crafted file)"
            )
        spans.append((offset, offset + nbytes, name))
        header.tensors.append(
            GGUFTensor(name, shape, type_name, type_id, data_offset + offset, nbytes)
        )
    at = 0
    for start, end, name in sorted(spans):
        if start < at:
            raise GGUFError(
                f"{path}: tensor {name!r} overlaps the tensor before it (crafted file?)"
            )
        at = end
    return header


# --- names: GGUF -> Hugging Face (transformers) --------------------------------------------

#: per-block GGUF names -> the Hugging Face name after ``model.layers.N.`` (Llama family:
#: llama, mistral, qwen2/3, gemma, phi3 share these for the tensors they have)
_LLAMA_BLOCK = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LLAMA_TOP = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
#: architectures whose names map as Llama's
LLAMA_FAMILY = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "internlm2", "granite")
_BLOCK = re.compile(r"^blk\.(\d+)\.([A-Za-z0-9_]+)\.(weight|bias)$")
_TOP = re.compile(r"^([A-Za-z0-9_]+)\.(weight|bias)$")


def hf_name(gguf_name: str, architecture: str) -> str:
    """The Hugging Face name of a GGUF tensor, where the architecture's names are known.

    Args:
        gguf_name: the GGUF name (``blk.3.ffn_down.weight``).
        architecture: ``general.architecture`` of the file.

    Returns:
        The transformers name (``model.layers.3.mlp.down_proj.weight``), or ``gguf_name``
        unchanged for an architecture or tensor with no known mapping.
    """
    if architecture not in LLAMA_FAMILY:
        return gguf_name
    m = _BLOCK.match(gguf_name)
    if m and m.group(2) in _LLAMA_BLOCK:
        return f"model.layers.{m.group(1)}.{_LLAMA_BLOCK[m.group(2)]}.{m.group(3)}"
    m = _TOP.match(gguf_name)
    if m and m.group(1) in _LLAMA_TOP:
        return f"{_LLAMA_TOP[m.group(1)]}.{m.group(2)}"
    return gguf_name


def _heads(header: GGUFHeader) -> tuple[int | None, int | None]:
    arch = header.architecture
    n_head = header.metadata.get(f"{arch}.attention.head_count")
    n_kv = header.metadata.get(f"{arch}.attention.head_count_kv", n_head)
    ok = isinstance(n_head, int) and isinstance(n_kv, int) and n_head > 0 and n_kv > 0
    return (n_head, n_kv) if ok else (None, None)


def _unpermute_heads(header: GGUFHeader, t: GGUFTensor) -> int | None:
    """The head count whose rotary row permutation llama.cpp applied to ``t`` (Llama's
    ``attn_q`` / ``attn_k``), or None when none was applied."""
    if header.architecture not in ("llama", "mistral"):
        return None
    n_head, n_kv = _heads(header)
    if n_head is None:
        return None
    m = _BLOCK.match(t.name)
    if not m or m.group(2) not in ("attn_q", "attn_k"):
        return None
    heads = n_head if m.group(2) == "attn_q" else n_kv
    rows = t.shape[0] if t.shape else 0
    if heads is None or rows % (2 * heads):
        return None
    return heads


def unpermute_rotary(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's ``LlamaModel.permute`` of a Q or K weight (rows regrouped per head
    from the half-split rotary layout to interleaved pairs): the Hugging Face row order.

    Args:
        w: the GGUF ``attn_q`` / ``attn_k`` weight, shape ``(heads * head_dim, ...)``.
        heads: its head count (KV heads for K).

    Returns:
        The weight with Hugging Face's row order.
    """
    return (
        w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _loader(path: str, t: GGUFTensor, heads: int | None) -> Any:
    def load() -> np.ndarray:
        import gguf
        from gguf import quants

        if t.nbytes == 0:
            return np.zeros(t.shape, dtype=np.float32)
        raw = np.memmap(path, dtype=np.uint8, mode="r", offset=t.offset, shape=(t.nbytes,))
        if t.type_name in _NATIVE:
            out = raw.view(np.dtype(_NATIVE[t.type_name]).newbyteorder("<")).reshape(t.shape)
        else:
            rows = raw.reshape(-1, t.nbytes // max(1, math.prod(t.shape[:-1])))
            qtype = gguf.GGMLQuantizationType(t.type_id)
            out = np.empty((rows.shape[0], t.shape[-1]), dtype=np.float32)
            step = max(1, _CHUNK // max(1, 4 * t.shape[-1]))  # dequantizer's temporaries bounded
            for i in range(0, rows.shape[0], step):
                out[i : i + step] = quants.dequantize(rows[i : i + step], qtype)
            out = out.reshape(t.shape)
        return unpermute_rotary(out, heads) if heads else out

    return load


#: GGML types whose tensors are read: native floats and everything gguf.quants dequantizes
def readable_types() -> list[str]:
    """The GGML types read here: F32/F16/F64 natively, the rest through ``gguf.quants``.

    Returns:
        Their names, sorted.
    """
    import gguf
    from gguf import quants

    out = set(_NATIVE)
    for t in gguf.GGMLQuantizationType:
        if t.name in _NATIVE:
            continue
        _, per_block = gguf.GGML_QUANT_SIZES[t]
        try:
            quants.dequantize(np.zeros((1, per_block), dtype=np.uint8), t)
        except (NotImplementedError, ValueError, TypeError, AssertionError):
            continue
        out.add(t.name)
    return sorted(out)


_READABLE: list[str] = []


def _readable() -> list[str]:
    if not _READABLE:
        _READABLE.extend(readable_types())
    return _READABLE


def unreadable_reason(t: GGUFTensor) -> str | None:
    """Why a tensor's type cannot be read, or None when it can.

    Args:
        t: a tensor of the header.

    Returns:
        The reason (naming the type and the types that are read), or None.
    """
    if t.type_name.startswith("I") and t.type_name[1:].isdigit():
        return f"GGML type {t.type_name} is an integer tensor, not a weight"
    if t.type_name not in _readable():
        return (
            f"GGML type {t.type_name} cannot be dequantized here (gguf.quants has no "
            f"dequantizer for it); types read: {', '.join(_readable())}"
        )
    return None


def slice_dtype(t: GGUFTensor) -> str:
    """The dtype a tensor's slice has: its own for F32/F16/F64, ``float32`` once dequantized.

    Args:
        t: a tensor of the header.

    Returns:
        The dtype name.
    """
    return _NATIVE.get(t.type_name, "float32")


def gguf_leaves(
    path: str | os.PathLike[str],
) -> tuple[dict[str, LazyArray], dict[str, dict[str, Any]], dict[str, str], GGUFHeader]:
    """Every tensor of a GGUF file as a LazyArray that dequantizes it alone, from a memory map.

    Args:
        path: the ``.gguf`` file.

    Returns:
        ``(leaves, meta, skipped, header)``: mapped name -> lazy array; mapped name -> slice
        meta (``gguf_name``, ``gguf_type``, ``rotary_unpermuted``); integer tensors left out
        with the reason; the parsed header.

    Raises:
        GGUFError: a bad header (see :func:`read_gguf_header`), a tensor of a GGML type that
            cannot be dequantized (naming it), or two tensors mapped to one name.
    """
    path = os.fspath(path)
    header = read_gguf_header(path)
    leaves: dict[str, LazyArray] = {}
    meta: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for t in header.tensors:
        name = hf_name(t.name, header.architecture)
        why = unreadable_reason(t)
        if why is not None:
            if "integer" in why:
                skipped[name] = why
                continue
            raise GGUFError(f"{path}: tensor {t.name!r}: {why}")
        if name in leaves:
            raise GGUFError(f"{path}: two tensors map to the name {name!r}")
        heads = _unpermute_heads(header, t)
        leaves[name] = LazyArray(
            t.shape, slice_dtype(t), _loader(path, t, heads), f"{path}::{t.name}"
        )
        m: dict[str, Any] = {"gguf_name": t.name, "gguf_type": t.type_name}
        if heads:
            m["rotary_unpermuted"] = True
        meta[name] = m
    return leaves, meta, skipped, header


def gguf_config(header: GGUFHeader) -> dict[str, Any]:
    """The architecture facts a GGUF's metadata gives, named as in a ``config.json``.

    Args:
        header: a parsed header.

    Returns:
        ``model_type``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
        ``hidden_size``, ``num_hidden_layers``, ``intermediate_size`` where present.
    """
    arch = header.architecture
    md = header.metadata
    out: dict[str, Any] = {"model_type": arch} if arch else {}
    keys = {
        "num_attention_heads": f"{arch}.attention.head_count",
        "num_key_value_heads": f"{arch}.attention.head_count_kv",
        "hidden_size": f"{arch}.embedding_length",
        "num_hidden_layers": f"{arch}.block_count",
        "intermediate_size": f"{arch}.feed_forward_length",
        "head_dim": f"{arch}.attention.key_length",
    }
    for k, v in keys.items():
        if isinstance(md.get(v), int):
            out[k] = md[v]
    if "num_attention_heads" in out:  # no head_count_kv: every head has its own K/V
        out.setdefault("num_key_value_heads", out["num_attention_heads"])
    if "head_dim" not in out and out.get("hidden_size") and out.get("num_attention_heads"):
        out["head_dim"] = out["hidden_size"] // out["num_attention_heads"]
    return out
