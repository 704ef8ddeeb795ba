"""Checkpoint references: weights a store points at instead of copying.

A model added with its weights left in a checkpoint file (``copy_weights`` unset or False)
records, per slice, where the tensor lives: :func:`external_ref` writes that record (the
file's size and time; for a folder of safetensors shards, the shard, its header hash and the
index's stamp, from :func:`shard_stamps`). :class:`ReferenceReader` reads a tensor back after
checking that the file did not change since, and keeps the last few files it opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from diffract._core.arrays import to_numpy
from diffract._core.slices import SliceInfo
from diffract._core.tree import dotted_name, tree_leaves_with_path
from diffract._errors import StoreError

__all__ = [
    "INDEX_FILE",
    "ReferenceReader",
    "external_ref",
    "readable_here",
    "reference_file",
    "shard_stamps",
]

#: the index of a sharded safetensors folder
INDEX_FILE = "model.safetensors.index.json"

_CHANGED = (
    "the checkpoint behind {where} changed since it was added ({what}); "
    "re-add the model with replace=True"
)
_GONE = "the checkpoint behind {where} is gone: {what}; restore it or re-add the model"


def _stamp(path: str) -> dict[str, Any]:
    st = os.stat(path)
    return {"size": st.st_size, "mtime": st.st_mtime}


def _header_digest(path: str) -> str:
    """A short hash of a safetensors file's length prefix and JSON header (where every
    tensor's offsets are): a rewrite that keeps the size and time still shows."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        body = fh.read(min(n, 100_000_000))
    return hashlib.sha256(head + body).hexdigest()[:16]


def folder_shard_files(folder: str) -> list[str]:
    """The shard files of a safetensors folder, relative to it (as extraction finds them:
    the index's weight map, else every ``*.safetensors``)."""
    root = Path(folder)
    index = root / INDEX_FILE
    if index.exists():
        try:
            if not stat.S_ISREG(os.stat(index).st_mode):  # a FIFO would block the read
                return []
            weight_map = json.loads(index.read_text())["weight_map"]
            return sorted({str(v) for v in weight_map.values()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return []
    return sorted(p.name for p in root.glob("*.safetensors"))


def _folder_signature(folder: str) -> tuple[Any, ...]:
    """Sizes and times of a folder's shards and index (refs written before shards were
    stamped: the cache must not keep loaders of a shard rewritten in place)."""
    sig = []
    for rel in [*folder_shard_files(folder), INDEX_FILE]:
        try:
            st = os.stat(os.path.join(folder, rel))
        except OSError:
            continue
        sig.append((rel, st.st_size, st.st_mtime_ns))
    return tuple(sig)


def shard_stamps(source: str) -> dict[str, Any] | None:
    """The stamps of a folder of safetensors shards, to record with its slices.

    Args:
        source: the checkpoint path a model was extracted from.

    Returns:
        For a folder: each shard's size, time and header hash (``"files"``), the path
        strings its leaves carry (``"prefixes"``) and the index's size and time
        (``"index"``). None for a single file.
    """
    if not source or not os.path.isdir(source):
        return None
    root = Path(source)
    out: dict[str, Any] = {"files": {}, "prefixes": {}}
    for rel in folder_shard_files(source):
        path = root / rel
        try:
            stamp = {"file": rel, **_stamp(str(path)), "header": _header_digest(str(path))}
        except OSError:
            continue
        out["files"][rel] = stamp
        for form in {str(path), str(path.resolve())}:
            out["prefixes"][form + "::"] = rel
    index = root / INDEX_FILE
    if index.exists():
        out["index"] = _stamp(str(index))
    return out


def external_ref(
    source: str, name: str, array: Any = None, shards: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What a slice referencing a checkpoint records (its ``meta["external"]``).

    Args:
        source: the checkpoint file or folder.
        name: the tensor's dotted name.
        array: the extracted leaf (its ``source`` says which shard holds it).
        shards: :func:`shard_stamps` of a folder, else None.

    Returns:
        The file (or folder), its size and time, and for a folder of shards the shard holding
        the tensor (its size, time, header hash and the tensor's key in it) and the index's
        size and time.
    """
    st = os.stat(source)
    # absolute: a run from another folder (a Dask worker, a later cwd) finds the same file
    ref: dict[str, Any] = {
        "path": os.path.abspath(source),
        "tensor": name,
        "size": st.st_size,
        "mtime": st.st_mtime,
    }
    if shards is not None:
        where = getattr(array, "source", "") or ""
        for prefix, rel in shards["prefixes"].items():
            if where.startswith(prefix):
                ref["shard"] = {**shards["files"][rel], "key": where[len(prefix) :]}
                if "index" in shards:
                    ref["index"] = dict(shards["index"])
                break
    return ref


def reference_file(ext: dict[str, Any]) -> tuple[str, int, float]:
    """The file a reference reads and the stamp it expects (for a folder of shards: the shard).

    Args:
        ext: a slice's ``meta["external"]``.

    Returns:
        The file's path, size and modification time as recorded when the model was added.
    """
    shard = ext.get("shard")
    if shard:
        return os.path.join(ext["path"], shard["file"]), shard["size"], shard["mtime"]
    return ext["path"], ext["size"], ext["mtime"]


def readable_here(files: list[tuple[str, int, float]]) -> list[str]:
    """Which of ``files`` this process sees as recorded (same size and time): where a remote
    worker may read a checkpoint by path instead of receiving its weights.

    Args:
        files: :func:`reference_file` tuples.

    Returns:
        The paths found with the recorded size and time.
    """
    out = []
    for path, size, mtime in files:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if _same(st, {"size": size, "mtime": mtime}):
            out.append(path)
    return out


def _same(st: os.stat_result, stamp: dict[str, Any]) -> bool:
    return st.st_size == stamp["size"] and abs(st.st_mtime - stamp["mtime"]) <= 1e-6


def _where(s: SliceInfo) -> str:
    return f"{s.model_id}:{s.name}"


def _stat(s: SliceInfo, path: str, what: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise StoreError(_GONE.format(where=_where(s), what=what)) from None


class ReferenceReader:
    """Reads the tensors slices reference in checkpoint files, checking their stamps.

    The leaves of the last few files read are kept (keyed by the file's stamp, so a changed
    file is read again); the session owns one, and :meth:`clear` forgets them.

    Args:
        max_files: how many files' leaves to keep before starting over.
    """

    def __init__(self, max_files: int = 8) -> None:
        self._max_files = max_files
        self._leaves: dict[tuple[Any, ...], dict[str, Any]] = {}

    def clear(self) -> None:
        """Forget every file read so far (as in a fresh process)."""
        self._leaves.clear()

    def read(self, s: SliceInfo) -> np.ndarray:
        """The tensor slice ``s`` references (its ``meta["external"]``).

        Args:
            s: a slice whose meta holds an ``"external"`` reference.

        Returns:
            The tensor as a NumPy array.

        Raises:
            StoreError: the file (shard, index) is gone or changed since the model was added.
        """
        ext = s.meta["external"]
        if ext.get("shard"):
            return self._read_shard(s, ext)
        from diffract.extract import model_tree

        path = ext["path"]
        st = _stat(s, path, path)
        if not _same(st, ext):
            raise StoreError(_CHANGED.format(where=_where(s), what=path))
        key: tuple[Any, ...] = (path, st.st_size, st.st_mtime)
        if os.path.isdir(path):  # an older ref to a folder of shards: key on the shards too
            key += _folder_signature(path)

        def load() -> dict[str, Any]:
            return {
                dotted_name(p): leaf for p, leaf in tree_leaves_with_path(model_tree(path).tree)
            }

        return to_numpy(self._cached(key, load)[ext["tensor"]])

    def _read_shard(self, s: SliceInfo, ext: dict[str, Any]) -> np.ndarray:
        """One tensor of a sharded folder, after checking its shard and the index."""
        from diffract.extract.safetensors import safetensors_leaves

        shard = ext["shard"]
        path = os.path.join(ext["path"], shard["file"])
        st = _stat(s, path, f"shard {path} is missing")
        if not _same(st, shard):
            raise StoreError(_CHANGED.format(where=_where(s), what=f"shard {path}"))
        if "index" in ext:
            index = os.path.join(ext["path"], INDEX_FILE)
            ist = _stat(s, index, f"{index} is missing")
            if not _same(ist, ext["index"]):
                raise StoreError(_CHANGED.format(where=_where(s), what=f"index {index}"))

        def load() -> dict[str, Any]:
            want = shard.get("header")
            if want is not None and _header_digest(path) != want:
                what = f"shard {path}: its header differs"
                raise StoreError(_CHANGED.format(where=_where(s), what=what))
            return safetensors_leaves(path)

        key = ("shard", path, st.st_size, st.st_mtime, shard.get("header"))
        return to_numpy(self._cached(key, load)[shard["key"]])

    def _cached(self, key: tuple[Any, ...], load: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        leaves = self._leaves.get(key)
        if leaves is None:
            leaves = load()
            if len(self._leaves) > self._max_files:
                self._leaves.clear()
            self._leaves[key] = leaves
        return leaves
