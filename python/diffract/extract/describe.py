"""Describe a checkpoint before computing anything: its tensors' names, shapes, dtypes, bytes,
parameter counts per type and per layer, and what an analysis would do with each (spectral
fields, statistics only, or skipped and why), from the headers alone.

Safetensors files and folders (with their ``config.json``), Hugging Face repo ids in the
local cache and ``.gguf`` files are described by reading their headers: no tensor's
data is read (nor memory-mapped), so a 2 GB folder describes in milliseconds.
"""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from diffract._core.dtypes import itemsize
from diffract._core.slices import infer_type
from diffract._errors import ExtractionError
from diffract.extract import natural_key

#: what an analysis does with a tensor
ANALYZED = "analyzed"  # a matrix (ndim >= 2): every field, spectra included
STATS_ONLY = "stats only"  # 1-D (bias, norm scale): a slice, but no matrix field applies
SKIPPED = "skipped"  # not a slice; ``reason`` says why

_STATS_REASON = "1-D (a bias or norm scale): stored as a slice, but matrix fields do not apply"
_LAYER = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


@dataclass
class TensorDescription:
    """One tensor as its header describes it.

    Attributes:
        name: its dotted name (Hugging Face names for a mapped GGUF).
        shape: its shape.
        dtype: its dtype as a slice would have it.
        params: its number of values.
        nbytes: its bytes on disk.
        type: its parameter type (``dense``, ``embedding``, ``norm``...).
        layer: the layer index in its name (``model.layers.3.`` -> 3), or None.
        status: ``"analyzed"``, ``"stats only"`` or ``"skipped"``.
        reason: why it is skipped or stats only (empty when analyzed).
        meta: format facts (a GGUF's name and quant type).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    params: int
    nbytes: int
    type: str
    layer: int | None
    status: str
    reason: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelDescription:
    """What a checkpoint holds, from its headers (:func:`describe`).

    Attributes:
        source: the file or folder described (a repo id's snapshot folder).
        format: ``"safetensors"`` or ``"gguf"``.
        files: the files whose headers were read.
        file_bytes: their total size.
        header_bytes: the bytes read from them (headers, index and config: no tensor data).
        config: architecture facts (``config.json`` or the GGUF's metadata).
        tensors: every tensor, in natural name order.
    """

    source: str
    format: str
    files: list[str]
    file_bytes: int
    header_bytes: int
    config: dict[str, Any]
    tensors: list[TensorDescription]

    @property
    def n_params(self) -> int:
        """Values in every tensor."""
        return sum(t.params for t in self.tensors)

    @property
    def nbytes(self) -> int:
        """Bytes of every tensor's data on disk."""
        return sum(t.nbytes for t in self.tensors)

    def by_status(self) -> dict[str, int]:
        """Tensors per status (analyzed, stats only, skipped)."""
        out = dict.fromkeys((ANALYZED, STATS_ONLY, SKIPPED), 0)
        for t in self.tensors:
            out[t.status] += 1
        return out

    def skipped(self) -> dict[str, str]:
        """Skipped tensor -> why."""
        return {t.name: t.reason for t in self.tensors if t.status == SKIPPED}

    def _group(self, key: str) -> dict[Any, dict[str, int]]:
        out: dict[Any, dict[str, int]] = {}
        for t in self.tensors:
            g = out.setdefault(getattr(t, key), {"tensors": 0, "params": 0, "bytes": 0})
            g["tensors"] += 1
            g["params"] += t.params
            g["bytes"] += t.nbytes
        return out

    def by_type(self) -> dict[str, dict[str, int]]:
        """Parameter type -> tensors, parameters and bytes."""
        return dict(sorted(self._group("type").items()))

    def by_layer(self) -> dict[int | None, dict[str, int]]:
        """Layer index (None: outside the layers) -> tensors, parameters and bytes."""
        g = self._group("layer")
        return dict(sorted(g.items(), key=lambda kv: -1 if kv[0] is None else kv[0]))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the summary (counts per type, layer and status) and every tensor.

        Returns:
            The description as plain data.
        """
        return {
            "source": self.source,
            "format": self.format,
            "files": self.files,
            "file_bytes": self.file_bytes,
            "header_bytes": self.header_bytes,
            "config": self.config,
            "n_tensors": len(self.tensors),
            "n_params": self.n_params,
            "nbytes": self.nbytes,
            "by_status": self.by_status(),
            "by_type": self.by_type(),
            "by_layer": {("-" if k is None else str(k)): v for k, v in self.by_layer().items()},
            "skipped": self.skipped(),
            "tensors": [{**asdict(t), "shape": list(t.shape)} for t in self.tensors],
        }

    def summary(self, tensors: bool = False) -> str:
        """The description as text: totals, config, per type, per layer, skipped.

        Args:
            tensors: also list every tensor.

        Returns:
            Plain text.
        """
        lines = [
            f"{self.source}",
            f"  format {self.format}, {len(self.files)} file(s), {_size(self.file_bytes)}; "
            f"read {_size(self.header_bytes)} of headers (no tensor data)",
        ]
        if self.config:
            lines.append("  config: " + ", ".join(f"{k}={v}" for k, v in self.config.items()))
        st = self.by_status()
        lines.append(
            f"  {len(self.tensors)} tensors, {self.n_params:,} parameters, {_size(self.nbytes)}: "
            f"{st[ANALYZED]} analyzed (matrices), {st[STATS_ONLY]} stats only (1-D), "
            f"{st[SKIPPED]} skipped"
        )
        lines.append(_table("type", self.by_type()))
        lines.append(
            _table("layer", {("-" if k is None else k): v for k, v in self.by_layer().items()})
        )
        if self.skipped():
            lines.append("skipped:")
            lines += [f"  {n}: {r}" for n, r in self.skipped().items()]
        if tensors:
            lines.append("tensors:")
            for t in self.tensors:
                q = f" {t.meta['gguf_type']}" if "gguf_type" in t.meta else ""
                lines.append(f"  {t.name}  {list(t.shape)}  {t.dtype}{q}  {t.type}  {t.status}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def _table(key: str, groups: dict[Any, dict[str, int]]) -> str:
    rows = [[str(key), "tensors", "parameters", "bytes"]] + [
        [str(k), str(v["tensors"]), f"{v['params']:,}", _size(v["bytes"])]
        for k, v in groups.items()
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  "
        + "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    )


def _layer(name: str) -> int | None:
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def _entry(
    name: str,
    shape: tuple[int, ...],
    dtype: str,
    nbytes: int,
    reason: str | None,
    meta: dict[str, Any] | None = None,
    present: bool = True,
) -> TensorDescription:
    if reason is None and len(shape) < 2:
        status, why = STATS_ONLY, _STATS_REASON
    elif reason is None:
        status, why = ANALYZED, ""
    else:
        status, why = SKIPPED, reason
    return TensorDescription(
        name=name,
        shape=tuple(shape),
        dtype=dtype,
        params=math.prod(shape) if present else 0,
        nbytes=nbytes,
        type=infer_type(name, tuple(shape)).value,
        layer=_layer(name),
        status=status,
        reason=why,
        meta=dict(meta or {}),
    )


def _header_size(path: str) -> int:
    with open(path, "rb") as fh:
        head = fh.read(8)
    return 8 + (struct.unpack("<Q", head)[0] if len(head) == 8 else 0)


def _describe_safetensors(path: Path) -> ModelDescription:
    """Safetensors file or folder: the leaves as :func:`extract` would keep them, unread."""
    from diffract.extract import kept_leaves, model_tree
    from diffract.extract.references import folder_shard_files

    mt = model_tree(str(path))
    leaves, skipped = kept_leaves(mt, None)
    if path.is_dir():
        files = [str(path / f) for f in folder_shard_files(str(path))]
        extra = [path / f for f in ("model.safetensors.index.json", "config.json")]
        json_bytes = sum(os.path.getsize(f) for f in extra if f.is_file())
    else:
        files, json_bytes = [str(path)], 0
    header_bytes = json_bytes + sum(_header_size(f) for f in files)
    out = []
    for leaf in leaves:
        nb = math.prod(leaf.shape) * itemsize(leaf.dtype)
        out.append(_entry(leaf.name, leaf.shape, leaf.dtype, nb, None, leaf.meta))
    arrays = {leaf.name: leaf for leaf in leaves}
    from diffract._core.tree import dotted_name, tree_leaves_with_path

    flat = {dotted_name(p): a for p, a in tree_leaves_with_path(mt.tree)}
    for name, why in skipped.items():
        a = flat.get(name)
        shape = tuple(getattr(a, "shape", ()) or ())
        dtype = str(getattr(a, "dtype", "")) if a is not None else ""
        nb = math.prod(shape) * itemsize(dtype) if a is not None and dtype else 0
        if name not in arrays:
            out.append(_entry(name, shape, dtype, nb, why, present=a is not None))
    return ModelDescription(
        source=str(path),
        format="safetensors",
        files=files,
        file_bytes=sum(os.path.getsize(f) for f in files),
        header_bytes=header_bytes,
        config=dict(mt.config),
        tensors=out,
    )


def _describe_gguf(path: Path) -> ModelDescription:
    """A GGUF file: its header's tensors, mapped names, quant types and on-disk bytes."""
    from diffract.extract import gguf

    header = gguf.read_gguf_header(path)
    out = []
    for t in header.tensors:
        name = gguf.hf_name(t.name, header.architecture)
        why = gguf.unreadable_reason(t)
        meta = {"gguf_name": t.name, "gguf_type": t.type_name}
        out.append(_entry(name, t.shape, gguf.slice_dtype(t), t.nbytes, why, meta))
    return ModelDescription(
        source=str(path),
        format="gguf",
        files=[str(path)],
        file_bytes=os.path.getsize(path),
        header_bytes=header.header_bytes,
        config=gguf.gguf_config(header),
        tensors=out,
    )


def describe(source: str | os.PathLike[str], revision: str | None = None) -> ModelDescription:
    """Describe a checkpoint from its headers, reading no tensor data.

    Args:
        source: a ``.safetensors`` file, a folder of them (with ``config.json``), a ``.gguf``
            file, or a Hugging Face repo id in the local cache
            (``"org/name"`` or ``"org/name@revision"``).
        revision: the repo id's branch, tag or commit (default ``main``).

    Returns:
        The description: tensors (name, shape, dtype, bytes, type, layer, what an analysis
        does with it), config, and summaries per type, layer and status.

    Raises:
        ExtractionError: the source is missing (a repo id not in the cache: where it looked),
            not a format described from headers, or a corrupt header.
    """
    from diffract.extract import hf
    from diffract.extract._files import FORMATS, format_of, resolve_source

    if revision is not None:
        repo = hf.parse_repo_id(os.fspath(source))
        if repo is None:
            raise ExtractionError(f"revision= needs a repo id ('org/name'), got {source!r}")
        path = hf.resolve_repo_id(repo[0], revision)
    else:
        path = resolve_source(source)
    fmt = format_of(path)
    reader = _describe_safetensors if path.is_dir() else _HEADERS.get(fmt.name if fmt else "")
    if reader is None:
        kinds = " and ".join(s for f in FORMATS if f.name in _HEADERS for s in f.suffixes)
        raise ExtractionError(
            f"{path}: describe reads the headers of {kinds} files, folders of .safetensors "
            f"shards and cached Hugging Face repo ids, not {path.suffix.lower() or 'this'} "
            "files; add it with models.add to see its slices"
        )
    desc = reader(path)
    desc.tensors.sort(key=lambda t: natural_key(t.name))
    return desc


#: the formats (names in diffract.extract._files.FORMATS) whose headers describe reads
_HEADERS: dict[str, Callable[[Path], ModelDescription]] = {
    "safetensors": _describe_safetensors,
    "gguf": _describe_gguf,
}

#: :func:`describe` under a name that does not shadow a ``describe`` method
describe_source = describe
