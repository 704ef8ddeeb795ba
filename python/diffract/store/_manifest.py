"""Segment manifests: what an HDF5 segment holds, readable without h5py, and its checksum.

Every segment ``segments/<name>.h5`` written by this version has a manifest beside it,
``segments/<name>.h5.json`` (see docs/concepts/segments.md). Its first line is
``diffract-manifest 1 sha256:<hex>`` (the hash of the rest of the file) and the rest is one
JSON object: the segment's models, slices, scalar values, where each array lives, and the
SHA-256 of the segment file itself (and, in a compaction, of every older segment file it
refers to). A store opens by reading manifests only; an HDF5 file is hashed and compared
before h5py first opens it in a process, so a flipped byte anywhere in a segment is a
:class:`StoreCorruptError` naming the file, never a hang or a raw error inside h5py.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

from diffract._errors import StoreCorruptError
from diffract.store._lock import atomic_write_text

__all__ = [
    "MANIFEST_SUFFIX",
    "file_digest",
    "manifest_path",
    "read_manifest",
    "verify_file",
    "write_manifest",
]

MANIFEST_SUFFIX = ".json"
_MAGIC = "diffract-manifest"
_VERSION = 1
#: a manifest larger than this is refused unread (a crafted or damaged file)
_MAX_BYTES = 2 * 1024**3
_CHUNK = 4 * 1024**2

#: files whose bytes matched their digest in this process: (path, inode, size, mtime, ctime)
#: -> digest (segment files are immutable: one that changes in place is damage)
_verified: dict[tuple[str, int, int, int, int], str] = {}
_verified_lock = threading.Lock()


def manifest_path(segment: Path) -> Path:
    """The manifest of the segment file ``segment`` (``<name>.h5`` -> ``<name>.h5.json``)."""
    return segment.with_name(segment.name + MANIFEST_SUFFIX)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    """``"sha256:<hex>"`` of the regular file ``path`` (opened non-blocking: never a FIFO).

    Raises:
        FileNotFoundError: ``path`` is missing.
        StoreCorruptError: ``path`` is not a regular file.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreCorruptError(f"{path}: not a regular file; refusing to read it")
        h = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            h.update(chunk)
    finally:
        os.close(fd)
    return "sha256:" + h.hexdigest()


def verify_file(path: Path, digest: str) -> None:
    """Check that ``path`` holds the bytes its manifest recorded, once per process and file.

    Args:
        path: a segment file.
        digest: ``"sha256:<hex>"`` recorded when the file was committed.

    Raises:
        FileNotFoundError: ``path`` is missing (a compaction may have removed it).
        StoreCorruptError: the bytes differ (the file is damaged; nothing was read from it).
    """
    st = os.stat(path)
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _verified_lock:
        if _verified.get(key) == digest:
            return
    found = file_digest(path)
    if found != digest:
        raise StoreCorruptError(
            f"{path}: checksum mismatch (its manifest recorded {digest[:19]}..., the file "
            f"holds {found[:19]}...); the file is damaged, nothing was read from it"
        )
    with _verified_lock:
        _verified[key] = digest


def write_manifest(path: Path, body: dict[str, Any]) -> None:
    """Write ``body`` as the manifest ``path`` (temporary file, fsync, rename)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    atomic_write_text(path, f"{_MAGIC} {_VERSION} {_sha256(text.encode())}\n{text}", newline="")


def _read_bytes(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreCorruptError(f"{path}: the manifest is not a regular file; refused")
        if st.st_size > _MAX_BYTES:
            raise StoreCorruptError(f"{path}: manifest of {st.st_size} bytes; refused")
        parts = []
        while chunk := os.read(fd, _CHUNK):
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts)


def read_manifest(path: Path) -> dict[str, Any]:
    """The body of the manifest ``path``, checked against the hash on its first line.

    Raises:
        FileNotFoundError: ``path`` is missing.
        StoreCorruptError: the file is damaged (bad header, hash mismatch, not JSON).
    """
    data = _read_bytes(path)
    head, sep, text = data.partition(b"\n")
    words = head.split(b" ")
    if not sep or len(words) != 3 or words[0] != _MAGIC.encode():
        raise StoreCorruptError(f"{path}: not a diffract segment manifest (bad first line)")
    if words[1] != str(_VERSION).encode():
        raise StoreCorruptError(
            f"{path}: manifest version {words[1][:20]!r} (this diffract reads {_VERSION})"
        )
    if words[2] != _sha256(text).encode():
        raise StoreCorruptError(
            f"{path}: checksum mismatch (the manifest's bytes changed since it was written); "
            "the store is damaged"
        )
    try:
        body = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise StoreCorruptError(f"{path}: unreadable manifest ({exc})") from None
    if not isinstance(body, dict):
        raise StoreCorruptError(f"{path}: unreadable manifest (not a JSON object)")
    return body
