"""Checkpoint files, read tensor by tensor: ``.safetensors`` (memory-mapped; also a folder of
shards with ``model.safetensors.index.json``), ``.npz`` (one array at a time), PyTorch
``.pt``/``.pth``/``.bin`` (``torch.load(weights_only=True, mmap=True)``: never unpickles
arbitrary objects; a compressed data record, as re-zipping gives, is read decompressed) and
``.onnx``, ``.gguf`` (:mod:`diffract.extract.gguf`: dequantized tensor by tensor), and a
Hugging Face repo id found in the local cache (:mod:`diffract.extract.hf`; a folder's
``config.json`` gives the model's ``config``). A name that means two tensors (in two shards,
or two ``.npz`` members) is an error."""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from diffract._core.arrays import LazyArray, dtype_name, to_numpy
from diffract._errors import ExtractionError
from diffract.extract import Extractor, ModelTree, nest_dotted
from diffract.extract.safetensors import safetensors_leaves


def _is_path(obj: Any) -> bool:
    return isinstance(obj, (str, os.PathLike))


def regular_file(path: Path, what: str = "checkpoint") -> Path:
    """``path`` if it is a regular file (a link to one counts), checked without opening it:
    a FIFO, socket or device would block or never end.

    Args:
        path: the file.
        what: what it is, for messages.

    Returns:
        ``path``.

    Raises:
        ExtractionError: it is missing, a folder or not a regular file.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ExtractionError(f"{what} not found: {path}") from None
    except (OSError, ValueError, UnicodeError) as exc:
        raise ExtractionError(f"{what} {path}: cannot be read ({exc})") from None
    if stat.S_ISDIR(mode):
        raise ExtractionError(f"{what} {path} is a folder, not a file")
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket or device"
        raise ExtractionError(f"{what} {path} is {kind}, not a regular file: refused")
    return path


def _shard_names(index: Path) -> tuple[dict[str, str], list[str]]:
    """(tensor name -> shard, the shards) of a shard index, every name a checked string."""
    regular_file(index, "shard index")
    try:
        weight_map = json.loads(index.read_bytes().decode("utf-8"))["weight_map"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, RecursionError) as exc:
        raise ExtractionError(f"{index}: not a safetensors shard index ({exc!r})") from None
    if not isinstance(weight_map, dict):
        raise ExtractionError(
            f"{index}: not a safetensors shard index (weight_map must map tensor names to "
            f"shard files, got a {type(weight_map).__name__})"
        )
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise ExtractionError(
                f"{index}: tensor {name!r} maps to {shard!r}, not the name of a shard file"
            )
        if any("\ud800" <= c <= "\udfff" for c in name + shard):
            raise ExtractionError(
                f"{index}: tensor {name!r} -> shard {shard!r} is not valid UTF-8 text"
            )
    return weight_map, sorted(set(weight_map.values()))


def _shard_file(folder: Path, index: Path, shard: str) -> Path:
    """The shard file ``shard`` of ``folder``: named inside the folder (no absolute path, no
    ``..`` out of it) and a regular file. The file in the folder may be a link elsewhere, as
    the Hugging Face cache's snapshot files are (links to its ``blobs/``)."""
    named = Path(os.path.normpath(folder / shard))
    if Path(shard).is_absolute() or Path(os.path.normpath(folder)) not in named.parents:
        raise ExtractionError(f"{index}: shard {shard!r} lies outside {folder}")
    try:
        shard_path = named.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symbolic link loop (Python < 3.13)
        raise ExtractionError(
            f"{index}: shard {shard!r} cannot be resolved (a symbolic link loop?): {exc}"
        ) from None
    return regular_file(shard_path, "shard")


def _merge_shard(
    leaves: dict[str, LazyArray], owner: dict[str, str], shard: Path, skipped: dict[str, str]
) -> None:
    """Add one shard's tensors to ``leaves``; a name another shard holds too is an error
    (which copy is the model's would be a guess)."""
    own_skips: dict[str, str] = {}
    found = safetensors_leaves(shard, own_skips)
    for name in [*found, *own_skips]:
        if name in owner:
            raise ExtractionError(
                f"tensor {name!r} is in two shards, {owner[name]} and {shard}: the checkpoint "
                "is ambiguous; remove one copy (or the shard that should not be there)"
            )
        owner[name] = str(shard)
    leaves.update(found)
    skipped.update(own_skips)


def _safetensors_folder(folder: Path) -> tuple[dict[str, LazyArray], dict[str, str]]:
    """(tensor name -> lazy array, skipped name -> reason) of a folder of shards."""
    index = folder / "model.safetensors.index.json"
    leaves: dict[str, LazyArray] = {}
    owner: dict[str, str] = {}
    skipped: dict[str, str] = {}
    if os.path.lexists(index):
        weight_map, shards = _shard_names(index)
        for shard in shards:
            _merge_shard(leaves, owner, _shard_file(folder, index, shard), skipped)
        missing = sorted(set(weight_map) - set(leaves) - set(skipped))
        if missing:
            raise ExtractionError(f"{index}: tensors {missing[:3]} are not in any shard")
        return leaves, skipped
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ExtractionError(
            f"{folder}: a folder checkpoint needs model.safetensors.index.json or *.safetensors files"
        )
    for f in files:
        _merge_shard(leaves, owner, regular_file(f, "shard"), skipped)
    return leaves, skipped


def _npy_header(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple, Any]:
    """(shape, dtype) of one ``.npy`` member, checked against the member's size before
    anything is allocated."""
    where = f"{path}: member {info.filename!r}"
    if not info.filename.endswith(".npy"):
        raise ExtractionError(f"{where} is not a .npy array (an .npz holds only .npy members)")
    stored = info.compress_type == zipfile.ZIP_STORED
    if (stored and info.compress_size != info.file_size) or (
        info.file_size > 1100 * info.compress_size + 4096
    ):
        raise ExtractionError(  # deflate expands at most ~1032x: the sizes are made up
            f"{where} claims {info.file_size} bytes from {info.compress_size} stored bytes "
            "(corrupt or crafted file)"
        )
    try:
        with zf.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
            else:  # format 3.0 (UTF-8 field names): numpy's private reader
                shape, _, dtype = np.lib.format._read_array_header(fh, version)  # type: ignore[attr-defined]
            header_size = fh.tell()
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ExtractionError(f"{where} is not a readable .npy array ({exc})") from None
    if dtype.hasobject:
        raise ExtractionError(f"{where} holds Python objects (pickles are refused)")
    need = math.prod(shape) * dtype.itemsize
    if info.file_size - header_size != need:
        raise ExtractionError(
            f"{where}: its header claims shape {list(shape)} of {dtype} ({need} bytes) but the "
            f"member holds {info.file_size - header_size} bytes of data (corrupt or crafted file)"
        )
    return tuple(shape), dtype


def _npz_leaves(path: Path) -> dict[str, LazyArray]:
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ExtractionError(f"{path}: not a readable .npz archive ({exc})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ExtractionError(f"{path}: holds a single array, not an .npz archive of named arrays")
    leaves: dict[str, LazyArray] = {}
    with archive, zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            shape, dtype = _npy_header(path, zf, info)
            key = info.filename[:-4]
            if key in leaves:  # numpy would read the last member of that name for both
                raise ExtractionError(
                    f"{path}: the archive holds two members named {info.filename!r}; which "
                    "one is the array is ambiguous (a crafted or badly merged file): rewrite "
                    "it with numpy.savez"
                )

            def load(key=key) -> np.ndarray:
                with np.load(path, allow_pickle=False) as arc:
                    return arc[key]

            leaves[key] = LazyArray(shape, str(dtype), load, f"{path}::{key}")
    return leaves


#: top-level keys of a training checkpoint that hold the model's weights, in the order tried
CHECKPOINT_MODEL_KEYS = (
    "model",
    "model_state_dict",
    "state_dict",
    "module",
    "net",
    "network",
    "model_state",
)
#: keys of exponential-moving-average weights: used only when no key above holds weights
CHECKPOINT_EMA_KEYS = ("ema", "model_ema", "ema_state_dict", "state_dict_ema", "ema_model")
#: keys of training state that never hold the model's weights
CHECKPOINT_TRAINING_KEYS = (
    "optimizer",
    "optimizer_state_dict",
    "optimizer_states",
    "optim",
    "opt",
    "scheduler",
    "lr_scheduler",
    "lr_schedulers",
    "scaler",
    "grad_scaler",
)


def _holds_tensors(obj: Any, torch: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, dict):
        return any(_holds_tensors(v, torch) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_holds_tensors(v, torch) for v in obj)
    return False


def _lazy_tensors(
    obj: Any,
    path: Path,
    where: str,
    torch: Any,
    skipped: dict[str, str],
    compressed: dict[int, zipfile.ZipInfo],
) -> Any:
    """``obj`` with every tensor, at any depth, wrapped as a LazyArray over the
    memory-mapped file, or over its decompressed record where ``compressed`` (storage data
    pointer -> zip member) names one (containers rebuilt as dicts/lists with string keys).
    Tensors named like BatchNorm buffers are left out and recorded in ``skipped``."""
    from diffract.extract._torch import RUNNING_STAT_REASON, check_not_meta, is_batchnorm_buffer

    if isinstance(obj, torch.Tensor):
        check_not_meta(where, obj, f"{path}: ")
        if obj.layout != torch.strided:
            raise ExtractionError(
                f"{path}: tensor {where!r} is a {str(obj.layout).removeprefix('torch.')} "
                "tensor; only dense tensors are read (save it with .to_dense())"
            )
        if is_batchnorm_buffer(where):
            skipped[where] = RUNNING_STAT_REASON
            return None
        record = compressed.get(obj.untyped_storage().data_ptr()) if obj.numel() else None
        loader = (
            (lambda v=obj: to_numpy(v))
            if record is None
            else _record_loader(path, record, obj, torch)
        )
        return LazyArray(tuple(obj.shape), dtype_name(obj), loader, f"{path}::{where}")
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            at = f"{where}.{k}" if where else str(k)
            leaf = _lazy_tensors(v, path, at, torch, skipped, compressed)
            if leaf is not None or v is None:
                out[str(k)] = leaf
        return out
    if isinstance(obj, (list, tuple)):
        return [
            _lazy_tensors(v, path, f"{where}.{i}" if where else str(i), torch, skipped, compressed)
            for i, v in enumerate(obj)
        ]
    return obj


def _record_loader(path: Path, record: zipfile.ZipInfo, tensor: Any, torch: Any) -> Any:
    """A loader of ``tensor`` read from its compressed data record: the memory map would
    hold the compressed bytes, so the record is decompressed (its size checked beforehand,
    its CRC by :mod:`zipfile`) and the tensor rebuilt over it with its offset and strides."""

    def load() -> np.ndarray:
        try:
            with zipfile.ZipFile(path) as zf:
                raw = bytearray(zf.read(record))
        except (OSError, zipfile.BadZipFile, NotImplementedError, RuntimeError) as exc:
            raise ExtractionError(
                f"{path}: its compressed data record {record.filename!r} cannot be read ({exc})"
            ) from None
        storage = torch.frombuffer(raw, dtype=torch.uint8).untyped_storage() if raw else None
        out = torch.empty((0,), dtype=tensor.dtype)
        if storage is not None:
            out.set_(storage, tensor.storage_offset(), tensor.shape, tensor.stride())
        return to_numpy(out)

    return load


def _checkpoint_weights(obj: dict, path: Path, torch: Any) -> tuple[Any, dict[str, str]]:
    """(the weights part of a loaded checkpoint dict, skipped top-level key -> reason).

    A flat state_dict (tensors at the top level) is the weights. A training checkpoint holds
    them under one well-known key (``model``, ``model_state_dict``, ``state_dict``, ...;
    EMA keys only when none of those is present): that key is taken and every other entry
    (optimizer, scheduler, epoch, ...) is skipped. Nested tensors under no known key with no
    training state beside them are a nested model. Anything else is ambiguous: an error
    that lists the keys."""
    if any(isinstance(v, torch.Tensor) for v in obj.values()):  # a flat state_dict
        training = [
            k
            for k in obj
            if str(k).lower() in CHECKPOINT_TRAINING_KEYS and isinstance(obj[k], (dict, list))
        ]
        return {k: v for k, v in obj.items() if k not in training}, {
            str(k): "training-checkpoint entry (training state), not the model's weights"
            for k in training
        }
    keys = [str(k) for k in obj]
    with_tensors = [k for k in obj if _holds_tensors(obj[k], torch)]
    primary = [k for k in CHECKPOINT_MODEL_KEYS if k in with_tensors and isinstance(obj[k], dict)]
    ema = [k for k in CHECKPOINT_EMA_KEYS if k in with_tensors and isinstance(obj[k], dict)]
    training = [k for k in with_tensors if str(k).lower() in CHECKPOINT_TRAINING_KEYS]
    chosen = primary if primary else ema
    if len(chosen) == 1:
        key = chosen[0]
        skipped = {}
        for k in obj:
            if k == key:
                continue
            if k in with_tensors:
                what = "EMA weights" if k in CHECKPOINT_EMA_KEYS else "training state"
                skipped[str(k)] = (
                    f"training-checkpoint entry ({what}), not the model's weights: they were "
                    f"taken from {key!r}"
                )
            else:
                skipped[str(k)] = f"training-checkpoint metadata (weights taken from {key!r})"
        return obj[key], skipped
    if not chosen and not training:
        return obj, {}  # a nested model: {"encoder": {...}, "decoder": {...}}
    why = (
        f"several keys could hold the model's weights ({', '.join(map(repr, chosen))})"
        if chosen
        else "no key holds the model's weights (looked for "
        + ", ".join(repr(k) for k in CHECKPOINT_MODEL_KEYS + CHECKPOINT_EMA_KEYS)
        + ")"
    )
    raise ExtractionError(
        f"{path}: a training checkpoint with top-level keys {keys}; {why}. Choose the "
        "weights yourself: models.add(torch.load(path, weights_only=True)[KEY], model_id) "
        "(in memory, so the weights are copied), or save that state_dict to its own file "
        "(torch.save / safetensors) to have it referenced"
    )


def _tensors(obj: Any, torch: Any) -> list[Any]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    values = (
        obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    )
    return [t for v in values for t in _tensors(v, torch)]


#: zip compression methods :mod:`zipfile` decompresses
_ZIP_METHODS = {
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "lzma",
}


def _check_records(path: Path, obj: Any, torch: Any) -> dict[int, zipfile.ZipInfo]:
    """Refuse a checkpoint whose tensors need more bytes than their data records hold, and
    find the records that are compressed.

    With ``mmap=True`` torch maps the whole file and takes each storage at its record's
    offset without checking the record's size: a short record would be read past its end
    (into the next records), and a compressed one (a checkpoint re-zipped with a zip tool)
    would be read as its compressed bytes. The storages' addresses differ as their records'
    offsets do, which pairs each storage with its record.

    Returns:
        Storage data pointer -> the zip member of its record, for the compressed records
        (they are read decompressed, never through the memory map).
    """
    storages: dict[int, int] = {}  # data pointer -> bytes its tensors need
    for t in _tensors(obj, torch):
        if t.layout != torch.strided:
            continue
        st = t.untyped_storage()
        if st.nbytes():
            storages[st.data_ptr()] = max(st.nbytes(), storages.get(st.data_ptr(), 0))
    if not storages:
        return {}
    reader = torch._C.PyTorchFileReader(str(path))
    with zipfile.ZipFile(path) as zf:
        infos = {i.filename.split("/", 1)[-1]: i for i in zf.infolist()}
    records = {
        reader.get_record_offset(name): infos.get(name)
        for name in reader.get_all_records()
        if name.startswith("data/")
    }
    first = min(storages)
    for offset in sorted(records):
        base = first - offset
        if all(p - base in records for p in storages):
            break
    else:
        raise ExtractionError(
            f"{path}: its tensors do not lie at its data records (corrupt or crafted file)"
        )
    compressed: dict[int, zipfile.ZipInfo] = {}
    for ptr, need in storages.items():
        info = records[ptr - base]
        have = info.file_size if info is not None else 0
        if need > have:
            raise ExtractionError(
                f"{path}: a tensor needs {need} bytes but its data record holds {have} (a "
                "truncated or crafted file; torch.load without mmap refuses it too)"
            )
        if info is None or info.compress_type == zipfile.ZIP_STORED:
            continue
        where = f"{path}: data record {info.filename!r}"
        if info.compress_type not in _ZIP_METHODS:
            raise ExtractionError(
                f"{where} is compressed with zip method {info.compress_type}, which cannot "
                "be read; save the checkpoint again with torch.save"
            )
        if info.file_size > 1100 * info.compress_size + 4096:  # deflate expands at most ~1032x
            raise ExtractionError(
                f"{where} claims {info.file_size} bytes from {info.compress_size} compressed "
                "bytes (corrupt or crafted file)"
            )
        compressed[ptr] = info
    if compressed:
        order = infos.get("byteorder")
        with zipfile.ZipFile(path) as zf:
            stored = zf.read(order).decode("ascii", "replace") if order is not None else "little"
        if stored != sys.byteorder:
            raise ExtractionError(
                f"{path}: its data records are compressed and hold {stored}-endian values; "
                "save the checkpoint again with torch.save"
            )
    return compressed


def _torch_leaves(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    import torch

    from diffract.extract._torch import strip_wrapper_prefix

    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            compressed = _check_records(path, obj, torch)
        except RuntimeError as exc:  # legacy (non-zip) format cannot be memory-mapped
            if "mmap" not in str(exc):
                raise
            obj = torch.load(path, map_location="cpu", weights_only=True)
            compressed = {}
    except ExtractionError:
        raise
    except Exception as exc:
        raise ExtractionError(
            f"{path}: cannot load as a PyTorch checkpoint with weights_only=True ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). Only tensors and plain containers are "
            "accepted; arbitrary pickled objects are refused for safety"
        ) from None
    if not isinstance(obj, dict):
        raise ExtractionError(
            f"{path}: expected a state_dict (a dict of tensors), got {type(obj).__name__}"
        )
    weights, skipped = _checkpoint_weights(obj, path, torch)  # always a dict
    weights = strip_wrapper_prefix({str(k): v for k, v in weights.items()})
    leaves = _lazy_tensors(weights, path, "", torch, skipped, compressed)
    return leaves, skipped


def resolve_source(obj: Any) -> Path:
    """The file or folder a path or Hugging Face repo id names: an existing path as given,
    else a repo id (``org/name``, ``org/name@revision``) resolved in the local hub cache.

    Args:
        obj: a path, or a repo id.

    Returns:
        The existing file or folder.

    Raises:
        ExtractionError: an invalid path, a broken link, or neither a file nor a cached model
            (saying where the cache was looked in).
    """
    from diffract.extract import hf

    path = Path(os.fspath(obj)).expanduser()
    try:
        found = path.exists()
    except (ValueError, UnicodeError) as exc:  # a NUL or a lone surrogate in the path
        raise ExtractionError(
            f"checkpoint path {str(path)!r} is not a valid path ({exc})"
        ) from None
    if found:
        return path
    if os.path.islink(path):
        raise ExtractionError(
            f"checkpoint {path} is a symbolic link to nothing (a broken link or a link loop)"
        )
    repo = hf.parse_repo_id(os.fspath(obj)) if isinstance(obj, str) else None
    if repo is None:
        raise ExtractionError(f"checkpoint not found: {path}")
    try:
        return hf.resolve_repo_id(*repo)
    except ExtractionError as exc:
        raise ExtractionError(
            f"checkpoint not found: no file or folder {path}, and {exc}"
        ) from None


def _file_tree(
    path: Path,
    flat: dict[str, Any],
    skipped: dict[str, str] | None = None,
    meta: dict[str, dict[str, Any]] | None = None,
    config: dict[str, Any] | None = None,
) -> ModelTree:
    return ModelTree(
        tree=nest_dotted(flat),
        framework="file",
        source=str(path),
        file_backed=True,
        skipped=skipped or {},
        meta=meta or {},
        config=config or {},
    )


def _read_safetensors(path: Path) -> ModelTree:
    skipped: dict[str, str] = {}
    return _file_tree(path, safetensors_leaves(path, skipped), skipped)


def _read_npz(path: Path) -> ModelTree:
    return _file_tree(path, _npz_leaves(path))


def _read_torch(path: Path) -> ModelTree:
    return _file_tree(path, *_torch_leaves(path))


def _read_onnx(path: Path) -> ModelTree:
    from diffract.extract._onnx import load_onnx_file

    return load_onnx_file(path)


def _read_gguf(path: Path) -> ModelTree:
    from diffract.extract import gguf, hf

    flat, meta, skipped, header = gguf.gguf_leaves(path)
    config = gguf.gguf_config(header)
    for name, m in hf.attention_meta(list(flat), config).items():
        meta.setdefault(name, {}).update(m)
    return _file_tree(path, flat, skipped, meta, config)


@dataclass(frozen=True)
class CheckpointFormat:
    """One checkpoint file format: the suffixes that name it, how messages name it, and its
    reader (a regular file's path -> its model tree)."""

    name: str
    suffixes: tuple[str, ...]
    label: str
    read: Callable[[Path], ModelTree]


#: the checkpoint files ``models.add`` reads, by suffix (any case): the one list the
#: extractor, its error messages, ``describe``, the CLI's model ids and the magics' paths use
FORMATS: tuple[CheckpointFormat, ...] = (
    CheckpointFormat(
        "safetensors",
        (".safetensors",),
        ".safetensors (or a folder of shards with model.safetensors.index.json)",
        _read_safetensors,
    ),
    CheckpointFormat("npz", (".npz",), ".npz", _read_npz),
    CheckpointFormat(
        "pytorch",
        (".pt", ".pth", ".bin"),
        ".pt/.pth/.bin (PyTorch, loaded with weights_only=True)",
        _read_torch,
    ),
    CheckpointFormat("onnx", (".onnx",), ".onnx", _read_onnx),
    CheckpointFormat("gguf", (".gguf",), ".gguf", _read_gguf),
)

#: every suffix of :data:`FORMATS`, in its order
SUFFIXES: tuple[str, ...] = tuple(s for f in FORMATS for s in f.suffixes)


def format_of(path: str | os.PathLike[str]) -> CheckpointFormat | None:
    """The format a file's suffix names (any case), or None."""
    suffix = Path(path).suffix.lower()
    return next((f for f in FORMATS if suffix in f.suffixes), None)


def formats_text() -> str:
    """The supported checkpoint files in words, for messages: ``".safetensors (...), .npz,
    ... and .gguf"``."""
    labels = [f.label for f in FORMATS]
    return ", ".join(labels[:-1]) + " and " + labels[-1]


def extract_path(obj: Any) -> ModelTree:
    from diffract.extract import hf

    path = resolve_source(obj)
    if path.is_dir():
        flat, skipped = _safetensors_folder(path)
        config = hf.read_config(path)
        names = list(flat)
        skipped.update(hf.tied_skips(names, config))
        return _file_tree(path, flat, skipped, hf.attention_meta(names, config), config)
    regular_file(path)  # before any open: a FIFO named model.pt would block
    fmt = format_of(path)
    if fmt is None:
        raise ExtractionError(
            f"{path}: unsupported checkpoint suffix {path.suffix.lower()!r}; use one of "
            f"{', '.join(SUFFIXES)}"
        )
    return fmt.read(path)


EXTRACTORS = [Extractor("file", _is_path, extract_path)]
