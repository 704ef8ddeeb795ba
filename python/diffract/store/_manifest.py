"""Segment manifests: what an HDF5 segment holds, readable without h5py, and its checksum.

Every segment ``segments/<name>.h5`` written by this version has a manifest beside it,
``segments/<name>.h5.json`` (see docs/concepts/segments.md). Its first line is
``diffract-manifest 2 sha256:<head> sha256:<body>``; then come two JSON lines, each with
the hash the first line gives. The *head* holds what a store needs when it opens (the
segment's models, documents, size and SHA-256, and, in a compaction, the SHA-256 of every
older segment file it refers to); the *body* holds the slices, scalar values and where each
array lives, and is hashed and parsed when the store first reads a slice or a value. A store
opens by reading manifests only; an HDF5 file is hashed and compared before h5py first
opens it in a process, so a flipped byte anywhere in a segment is a
:class:`StoreCorruptError` naming the file, never a hang or a raw error inside h5py.
Manifests of version 1 (one JSON object under one hash) are read too."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import weakref
from pathlib import Path
from typing import Any

from diffract._errors import StoreCorruptError
from diffract.store._lock import atomic_write_text

__all__ = [
    "MANIFEST_SUFFIX",
    "Manifest",
    "file_digest",
    "manifest_path",
    "read_manifest",
    "verify_file",
    "write_manifest",
]

MANIFEST_SUFFIX = ".json"
_MAGIC = "diffract-manifest"
_VERSION = 2
#: versions this diffract reads: 1 (one JSON object), 2 (a head line and a body line, each
#: with its own hash: a store's open hashes and parses only the heads)
_READS = (b"1", b"2")
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


def _sha256(data: bytes | memoryview) -> str:
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


def _dumps(obj: dict[str, Any]) -> str:
    # ASCII JSON holds no raw newline: each part is one line
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def write_manifest(path: Path, head: dict[str, Any], body: dict[str, Any]) -> None:
    """Write the manifest ``path`` (temporary file, fsync, rename): after the first line,
    ``head`` (what a store reads when it opens) and ``body`` (parsed when first needed), one
    JSON line each; the first line holds the hash of each."""
    h, b = _dumps(head), _dumps(body)
    first = f"{_MAGIC} {_VERSION} {_sha256(h.encode())} {_sha256(b.encode())}"
    atomic_write_text(path, f"{first}\n{h}\n{b}", newline="")


#: what a reopen reads of a manifest first: its first line and head fit in it (bigger
#: heads are read on to their end; the rest of the body waits)
_HEAD_CHUNK = 64 * 1024


class _Rest:
    """The unread rest of a manifest's body: its open descriptor (the bytes stay readable
    after a writer's garbage collection deletes the file), closed once read or dropped."""

    def __init__(self, fd: int, offset: int, size: int) -> None:
        self.fd, self.offset, self.size = fd, offset, size
        self.close = weakref.finalize(self, os.close, fd)

    def read(self) -> bytes:
        """The bytes from ``offset`` to the size the file had when it was opened."""
        parts, at = [], self.offset
        try:
            while at < self.size:
                chunk = os.pread(self.fd, min(_CHUNK, self.size - at), at)
                if not chunk:  # truncated meanwhile: the hash check says so
                    break
                parts.append(chunk)
                at += len(chunk)
        finally:
            self.close()
        return b"".join(parts)


class Manifest:
    """A manifest read by :func:`read_manifest`: its head, parsed and checked, and its body,
    read, checked and parsed by :meth:`body`."""

    __slots__ = ("_body", "_digest", "_rest", "head", "path")

    def __init__(
        self,
        path: Path,
        head: dict[str, Any],
        body: bytes = b"",
        digest: bytes | None = None,
        rest: _Rest | None = None,
    ) -> None:
        self.path = path
        self.head = head
        self._body = body
        self._digest = digest
        self._rest = rest

    def body(self) -> dict[str, Any]:
        """The body's entries (for a manifest of version 1, its one object: the head).

        Raises:
            StoreCorruptError: the body's bytes changed since they were written, or are not
                a JSON object.
        """
        if self._digest is None:
            return self.head
        if self._rest is not None:
            self._body, self._rest = self._body + self._rest.read(), None
        if self._digest != _sha256(self._body).encode():
            raise StoreCorruptError(
                f"{self.path}: checksum mismatch (the manifest's body changed since it was "
                "written); the store is damaged"
            )
        return _object(self.path, self._body)


def _open_regular(path: Path) -> tuple[int, int]:
    """An open descriptor of the manifest ``path`` and its size (never a FIFO or a huge file)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreCorruptError(f"{path}: the manifest is not a regular file; refused")
        if st.st_size > _MAX_BYTES:
            raise StoreCorruptError(f"{path}: manifest of {st.st_size} bytes; refused")
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _read_to(fd: int, data: bytearray, size: int, start: int) -> int:
    """Read on into ``data`` until a newline at or after ``start`` (or the end); its index,
    or -1."""
    at = data.find(b"\n", start)
    while at < 0 and len(data) < size:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            break
        data += chunk
        at = data.find(b"\n", start)
    return at


def read_manifest(path: Path) -> Manifest:
    """The manifest ``path``: its head read, checked against its hash and parsed; its body
    read, checked and parsed when :meth:`Manifest.body` is first called (the file stays
    open until then when its body is larger than what the head's read brought).

    A manifest of version 1 is one JSON object under one hash: it is read, checked and
    parsed whole, as the head.

    Raises:
        FileNotFoundError: ``path`` is missing.
        StoreCorruptError: the file is damaged (bad first line, hash mismatch, not JSON).
    """
    fd, size = _open_regular(path)
    rest = None
    try:
        data = bytearray(os.read(fd, _HEAD_CHUNK))
        first = _read_to(fd, data, min(size, _HEAD_CHUNK), 0)
        words = bytes(data[: max(first, 0)]).split(b" ")
        if first < 0 or len(words) < 3 or words[0] != _MAGIC.encode():
            raise StoreCorruptError(f"{path}: not a diffract segment manifest (bad first line)")
        v1 = words[1] == b"1"
        if words[1] not in _READS or len(words) != (3 if v1 else 4):
            raise StoreCorruptError(
                f"{path}: manifest version {words[1][:20]!r} (this diffract reads 1 and {_VERSION})"
            )
        second = _read_to(fd, data, size, first + 1)
        if v1:
            _read_to(fd, data, size, len(data) + 1)  # all of it
            second = len(data)
        elif second < 0:
            raise StoreCorruptError(f"{path}: unreadable manifest (no body line)")
        view = memoryview(data)  # hashed without a copy
        if words[2] != _sha256(view[first + 1 : second]).encode():
            raise StoreCorruptError(
                f"{path}: checksum mismatch (the manifest's bytes changed since it was "
                "written); the store is damaged"
            )
        head = _object(path, bytes(view[first + 1 : second]))
        if v1:
            return Manifest(path, head)
        if len(data) < size:
            rest = _Rest(fd, len(data), size)
        return Manifest(path, head, bytes(view[second + 1 :]), words[3], rest)
    finally:
        if rest is None:
            os.close(fd)


#: why a JSON text nested too deeply is refused (the reason a reply carries)
TOO_DEEP = "a JSON value nested too deeply to parse (damaged or crafted)"


def _object(path: Path, text: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except RecursionError:
        raise StoreCorruptError(f"{path}: unreadable manifest: {TOO_DEEP}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreCorruptError(f"{path}: unreadable manifest: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise StoreCorruptError(f"{path}: unreadable manifest: not a JSON object")
    return obj
