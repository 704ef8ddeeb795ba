"""The SQLite store (and the base of the hybrid store, :mod:`diffract.store._hybrid`).

``sqlite``: one database file (WAL mode). Every batch is one transaction, so a process
killed at any moment leaves the last committed state; readers in other processes see
committed data only. Arrays are stored as :mod:`._codec` blobs (no pickle).

``hybrid``: a folder with metadata and scalar fields in ``meta.sqlite`` and arrays (weights
and array-valued fields) in per-batch HDF5 files (``arrays/<seq>.h5``, written and renamed
into place before the transaction that references them) or in a Zarr group
(``arrays.zarr/<seq>/...``). Array files no transaction references (left by a crash) are
removed when a writer opens the store.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import sqlite3
import struct
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from diffract._errors import StoreCorruptError, StoreError
from diffract._vocab.arrays import to_numpy
from diffract._vocab.owners import owner_model_ids
from diffract.store._base import (
    LAYOUT_VERSION,
    Batch,
    Key,
    PersistentStore,
    StoreState,
    locked,
    slice_from_json,
    slice_to_json,
)
from diffract.store._codec import CodecError, decode, encode
from diffract.store._folder import (
    is_sqlite_file,
)
from diffract.store._lock import WriterLock, disk_full_error, fsync_dir, read_only_error
from diffract.store._safe import read_head, require_regular

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS models (model_id TEXT PRIMARY KEY, meta TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS slices (
    uid TEXT PRIMARY KEY, model_id TEXT NOT NULL, info TEXT NOT NULL,
    weights BLOB, array_ref TEXT, vid INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS slices_model ON slices(model_id);
CREATE TABLE IF NOT EXISTS fields (
    owner TEXT NOT NULL, field TEXT NOT NULL, models TEXT NOT NULL, kind TEXT NOT NULL,
    num REAL, txt TEXT, blob BLOB, array_ref TEXT, vid INTEGER NOT NULL,
    PRIMARY KEY (owner, field));
CREATE TABLE IF NOT EXISTS documents (kind TEXT NOT NULL, name TEXT NOT NULL, text TEXT NOT NULL, PRIMARY KEY (kind, name));
"""


class RowRef:
    """An array value in a row (or in a hybrid array file); ``vid`` is never reused."""

    __slots__ = ("array_ref", "table", "vid")

    def __init__(self, table: str, vid: int, array_ref: str | None) -> None:
        self.table = table
        self.vid = vid
        self.array_ref = array_ref

    def cache_key(self) -> str:
        return f"{self.table}/{self.vid}"


class SQLiteStore(PersistentStore):
    """One SQLite file (see the module docstring).

    Takes the arguments of :class:`~diffract.store._base.PersistentStore`; ``path`` is the
    database file.
    """

    backend = "sqlite"

    # --- opening -----------------------------------------------------------------------------
    def _open_at(self, path: str | os.PathLike[str]) -> None:
        self._setup_paths(Path(path).expanduser().resolve())
        self._data_version: int | None = None
        self._open(self.readonly)
        self.refresh()

    def _setup_paths(self, path: Path) -> None:
        self.db_path = path
        self.path = str(path)
        self._lock = WriterLock(path.with_name(path.name + ".lock"), str(path))

    def _open(self, readonly: bool) -> None:
        path = self.db_path
        exists = _check_db_file(path)
        if not exists and readonly:
            raise StoreError(f"no diffract store at {path}")
        created_lock = False
        if not readonly:
            path.parent.mkdir(parents=True, exist_ok=True)
            created_lock = not self._lock.path.exists()
            self._lock.acquire(self._lock_timeout)
        self._db = None
        try:
            if not readonly and not _check_db_file(path):  # still none, under the lock
                _create_db(path, self.backend)
            if readonly:
                self._db = sqlite3.connect(
                    _readonly_uri(path),
                    uri=True,
                    timeout=30,
                    check_same_thread=False,
                    isolation_level=None,
                )
            else:
                self._db = sqlite3.connect(
                    path, timeout=30, check_same_thread=False, isolation_level=None
                )
            # check before changing anything: a foreign database is refused untouched
            self._check_meta()
            if not readonly:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                if _short_file(path):  # a checkpoint a full disk cut short: finish it now
                    with contextlib.suppress(sqlite3.OperationalError):  # still no room
                        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except BaseException as exc:
            if self._db is not None:
                with contextlib.suppress(Exception):
                    self._db.close()
            self._lock.release()
            if created_lock:  # leave nothing behind next to a file we refused
                with contextlib.suppress(OSError):
                    self._lock.path.unlink()
            if isinstance(exc, sqlite3.DatabaseError):
                raise _db_error(path, exc) from None
            raise

    def _check_meta(self) -> None:
        """Refuse a database that is not a diffract store (read-only queries only)."""
        db = self._db
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            raise StoreCorruptError(
                f"{self.db_path}: an SQLite database but not a diffract store (no meta table)"
            )
        meta = dict(db.execute("SELECT key, value FROM meta"))
        if meta.get("format") != "diffract-store":
            raise StoreCorruptError(
                f"{self.db_path}: not a diffract store (meta.format={meta.get('format')!r})"
            )
        from diffract.store._folder import check_version

        try:
            version = int(meta.get("layout_version", -1))
        except ValueError:
            version = meta.get("layout_version")
        check_version(str(self.db_path), version)
        self.store_id = meta.get("store_id", "")
        self._meta_backend = meta.get("backend")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._db.close()
        self._lock.release()
        self._closed = True

    def _conn(self) -> sqlite3.Connection:
        if getattr(self, "_closed", False):
            self._closed = False
            self._open(self.readonly)
        return self._db

    # --- reading -------------------------------------------------------------------------------
    @locked
    def refresh(self) -> None:
        """Readers: end the previous read snapshot and start a new one. Every read until the
        next refresh sees that one snapshot (WAL), so a value listed is a value readable."""
        db = self._conn()
        try:
            if self.readonly and db.in_transaction:
                db.execute("COMMIT")
            version = db.execute("PRAGMA data_version").fetchone()[0]
            if self.readonly:
                db.execute("BEGIN")
            seq = db.execute("SELECT value FROM meta WHERE key='seq'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise _db_error(self.db_path, exc) from None
        key = (version, seq[0] if seq else None)
        if key == self._data_version:
            return
        self._data_version = key
        self._reload(db)

    def _reload(self, db: sqlite3.Connection) -> None:
        state = StoreState()
        own_txn = not db.in_transaction
        try:
            if own_txn:
                db.execute("BEGIN")
            models = {
                m: json.loads(meta) for m, meta in db.execute("SELECT model_id, meta FROM models")
            }
            slices, refs = [], {}
            for uid, info, has_w, aref, vid in db.execute(
                "SELECT uid, info, weights IS NOT NULL, array_ref, vid FROM slices ORDER BY rowid"
            ):
                slices.append(slice_from_json(info))
                if has_w or aref:
                    refs[uid] = RowRef("slices", vid, aref)
            values: dict = {}
            for owner, fld, kind, num, txt, aref, vid in db.execute(
                "SELECT owner, field, kind, num, txt, array_ref, vid FROM fields"
            ):
                if kind == "array":
                    values[(owner, fld)] = RowRef("fields", vid, aref)
                else:
                    values[(owner, fld)] = _row_value(kind, num, txt)
            docs = {(k, n): t for k, n, t in db.execute("SELECT kind, name, text FROM documents")}
            if own_txn:
                db.execute("COMMIT")
        except (
            sqlite3.DatabaseError,
            json.JSONDecodeError,
            KeyError,
            ValueError,
            TypeError,
            AttributeError,
        ) as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise StoreCorruptError(
                f"{self.db_path}: unreadable SQLite store ({type(exc).__name__}: {exc})"
            ) from None
        state.apply(
            add_models=models, slices=slices, weight_refs=refs, values=values, documents=docs
        )
        self._state = state

    def _read_array(self, ref: RowRef) -> np.ndarray:
        if ref.array_ref:
            return self._read_external_array(ref.array_ref)
        col = "weights" if ref.table == "slices" else "blob"
        row = (
            self._conn()
            .execute(f"SELECT {col} FROM {ref.table} WHERE vid=?", (ref.vid,))
            .fetchone()
        )
        if row is None or row[0] is None:
            raise StoreError(
                f"{self.db_path}: value {ref.table}/{ref.vid} was removed meanwhile; refresh and retry"
            )
        try:
            return decode(row[0])
        except CodecError as exc:
            raise StoreCorruptError(
                f"{self.db_path}: corrupt array value {ref.table}/{ref.vid} ({exc})"
            ) from None

    def _read_external_array(self, ref: str) -> np.ndarray:
        raise StoreCorruptError(
            f"{self.db_path}: value refers to an array file {ref!r}, but this is not a hybrid store"
        )

    # --- writing ---------------------------------------------------------------------------------
    def _write_arrays(self, seq: int, arrays: dict[str, np.ndarray]) -> dict[str, str]:
        """Hybrid hook: write arrays elsewhere, return name -> reference. Here: inline blobs."""
        return {}

    def _commit(self, batch: Batch) -> None:
        db = self._conn()
        self._lock.acquire(self._lock_timeout)
        self.refresh()
        meta = dict(db.execute("SELECT key, value FROM meta"))
        seq = int(meta.get("seq", "0")) + 1
        vid = int(meta.get("next_vid", "1"))
        # encode everything before the transaction (a bad value aborts with nothing written)
        weight_arrays = {
            uid: np.ascontiguousarray(to_numpy(batch.weights[s.uid]))
            for s in batch.slices
            if (uid := s.uid) in batch.weights
        }
        field_arrays = {
            k: v for k, v in batch.fields.items() if isinstance(v, np.ndarray) and v.ndim > 0
        }
        rows = _Rows(
            weight_arrays=weight_arrays,
            field_arrays=field_arrays,
            scalars=[_scalar_row(k, v) for k, v in batch.fields.items() if k not in field_arrays],
            external=self._write_arrays(
                seq,
                {f"w/{u}": a for u, a in weight_arrays.items()}
                | {f"a/{f}/{o}": a for (o, f), a in field_arrays.items()},
            ),
            slice_models={s.uid: s.model_id for s in self._state.slices.values()}
            | {s.uid: s.model_id for s in batch.slices},
        )
        try:
            db.execute("BEGIN IMMEDIATE")
            vid = _insert_batch(db, batch, rows, vid)
            db.execute("UPDATE meta SET value=? WHERE key='seq'", (str(seq),))
            db.execute("UPDATE meta SET value=? WHERE key='next_vid'", (str(vid),))
            db.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                named = _write_error(str(self.path), exc)
                if named is not None:
                    raise named from None
            raise
        self.refresh()


#: SQLite's primary result codes that mean the file's bytes are damaged or foreign
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
#: SQLite's primary result codes of a full disk and of a file it may not write
_SQLITE_FULL, _SQLITE_READONLY, _SQLITE_IOERR = 13, 8, 10


def _write_error(where: str, exc: sqlite3.Error) -> StoreError | None:
    """The named error of a write of the store ``where`` that SQLite refused with ``exc``
    (None: not a full disk, read-only media or an I/O error). SQLite reports a full disk
    as ``SQLITE_FULL``, but a write past the process's file size limit (``ulimit -f``) as a
    plain I/O error: with a finite limit, that is what it is taken for."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code == _SQLITE_FULL:
        return disk_full_error(where, OSError(errno.ENOSPC, ""))
    if code == _SQLITE_READONLY:
        return read_only_error(where)
    if code != _SQLITE_IOERR:
        return None
    import resource

    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        return disk_full_error(where, OSError(errno.EFBIG, ""))
    err = StoreError(
        f"I/O error while writing {where} ({exc}): this write was not stored; check the "
        "device (a full disk or a failing one?)"
    )
    err.errno = errno.EIO
    return err


def _db_error(path: Path, exc: sqlite3.DatabaseError) -> StoreError:
    """The error to raise for ``exc``: damage is :class:`StoreCorruptError`; a full disk,
    an I/O error or a refused write is a plain :class:`StoreError` that says the store's
    data was not found damaged (a user must not be told to delete good data)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None or (code & 0xFF) in _CORRUPT_CODES:
        return StoreCorruptError(f"{path}: unreadable SQLite store ({exc})")
    return StoreError(
        f"{path}: cannot open the SQLite store ({exc}; a full disk, a file size limit or "
        "missing permissions?); its data was not found damaged, nothing was changed"
    )


def _size_claim(path: Path) -> tuple[int, int, int, bool] | None:
    """(page size, pages the header claims, file size, whether the claim is valid) of the
    database file ``path``; None for a file too short for a header (SQLite refuses it)."""
    head = read_head(path, 100)
    if head is None or len(head) < 100:
        return None
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    # the page count is valid when its "version-valid-for" number equals the change counter
    valid = head[24:28] == head[92:96] and pages > 0 and page >= 512
    return page, pages, path.stat().st_size, valid


def _short_file(path: Path) -> bool:
    """Whether the database file ``path`` is shorter than its header says."""
    claim = _size_claim(path)
    if claim is None:
        return False
    page, pages, size, valid = claim
    return valid and (size < page * pages or size % page != 0)


def _check_size(path: Path) -> None:
    """Refuse a database file shorter than its header says (a truncated copy or download):
    SQLite would read it without complaint and silently lack the values of the lost pages.

    A file is also short when a checkpoint was cut short (a full disk): it wrote page 1
    but could not extend the file. Then the write-ahead log still holds every page the
    file lacks, SQLite reads the store whole, and a writer's next checkpoint completes the
    file: the store is opened (:func:`wal_covers`). A writer's checkpoint may also write
    page 1 before it extends the file, so a short file is looked at again before it is
    called damaged.

    Raises:
        StoreCorruptError: the file is shorter than its pages, or not whole pages, and the
            write-ahead log does not hold the missing ones.
    """
    for attempt in range(3):
        claim = _size_claim(path)
        if claim is None:
            return  # a file too short for a header is refused by SQLite itself
        page, pages, size, valid = claim
        if not valid or (size >= page * pages and size % page == 0):
            return
        if wal_covers(path, size // page):
            return
        time.sleep(0.05 * (attempt + 1))
    raise StoreCorruptError(
        f"{path}: truncated SQLite store ({size} bytes, its header says {pages} pages of "
        f"{page} bytes = {page * pages}); the store is damaged, nothing was changed "
        "(restore it from a whole copy)"
    )


#: the magic numbers a write-ahead log starts with (checksums of big-endian words: odd)
_WAL_MAGIC = (0x377F0682, 0x377F0683)
#: frames of a write-ahead log checked at once (bounds the memory of :func:`wal_pages`)
_WAL_CHUNK = 256


def wal_covers(path: Path, whole_pages: int) -> bool:
    """Whether the write-ahead log of the database ``path`` holds every page of the
    database beyond the file's first ``whole_pages`` (its committed size, from the last
    committed frame): SQLite then reads the database whole from the file and the log."""
    found = wal_pages(path.with_name(path.name + "-wal"))
    if found is None:
        return False
    db_pages, in_log = found
    return all(p in in_log for p in range(whole_pages + 1, db_pages + 1))


def wal_pages(wal: Path) -> tuple[int, set[int]] | None:
    """(database size in pages, pages held) after the last committed transaction of the
    write-ahead log ``wal``, read as SQLite recovers one: frames count while their salts
    match the log's header and their checksums chain; None when the log is missing, empty,
    not a log, or holds no committed transaction.

    Checksums are summed a chunk of frames at a time with numpy (the sum of one frame is
    linear in its words: see :func:`_wal_sums`), so a log of a gigabyte takes seconds.
    """
    try:
        with open(wal, "rb") as fh:
            head = fh.read(32)
            if len(head) < 32:
                return None
            magic, _, page, _, salt1, salt2, c1, c2 = struct.unpack(">8I", head)
            if magic not in _WAL_MAGIC or page < 512 or page > 65536 or page & (page - 1):
                return None
            dtype = np.dtype(">u4" if magic & 1 else "<u4")
            if _wal_sum(np.frombuffer(head[:24], dtype), (0, 0)) != (c1, c2):
                return None
            state, size = (c1, c2), 0
            held: set[int] = set()
            pending: set[int] = set()
            frame = 24 + page
            while True:
                chunk = fh.read(frame * _WAL_CHUNK)
                n = len(chunk) // frame
                if n == 0:
                    break
                raw = np.frombuffer(chunk, np.uint8, n * frame).reshape(n, frame)
                heads = raw[:, :24].copy().view(">u4")  # pgno, commit, salts, checksums
                words = np.concatenate([raw[:, :8], raw[:, 24:]], axis=1).copy().view(dtype)
                sums = _wal_sums(words)
                for i in range(n):
                    pgno, commit, s1, s2, f1, f2 = (int(x) for x in heads[i])
                    state = _wal_step(state, sums[i], words.shape[1] // 2)
                    if (s1, s2) != (salt1, salt2) or state != (f1, f2):
                        return (size, held) if size else None
                    pending.add(pgno)
                    if commit:
                        size, held = commit, held | pending
                        pending = set()
                if n < _WAL_CHUNK:
                    break
    except OSError:
        return None
    return (size, held) if size else None


_MASK = 0xFFFFFFFF


def _wal_sum(words: np.ndarray, state: tuple[int, int]) -> tuple[int, int]:
    """SQLite's WAL checksum of ``words`` (32-bit, pairs) from ``state``, word by word."""
    s0, s1 = state
    it = iter(words.tolist())
    for x0 in it:
        s0 = (s0 + x0 + s1) & _MASK
        s1 = (s1 + next(it) + s0) & _MASK
    return s0, s1


@functools.cache
def _powers(n: int) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """One checksum step on a pair of words is ``s -> M s + (x0, x0 + x1)`` (mod 2**32),
    M = [[1, 1], [1, 2]]. Returns ``M**(n-1-j)`` for j < n as rows (a, b, c, d), and
    ``M**n``."""
    out = np.empty((n, 4), np.uint64)
    a, b, c, d = 1, 0, 0, 1
    for j in range(n - 1, -1, -1):
        out[j] = (a, b, c, d)
        a, b, c, d = (a + c) & _MASK, (b + d) & _MASK, (a + 2 * c) & _MASK, (b + 2 * d) & _MASK
    return out, (a, b, c, d)


def _wal_sums(words: np.ndarray) -> np.ndarray:
    """Per row of ``words`` (one frame's words), its checksum from the state (0, 0): the
    sum over its pairs j of ``M**(n-1-j) (x0, x0 + x1)`` (uint64 products and sums wrap
    mod 2**64, which keeps them right mod 2**32)."""
    p, _ = _powers(words.shape[1] // 2)
    mask = np.uint64(_MASK)
    x0 = words[:, 0::2].astype(np.uint64)
    x01 = (x0 + words[:, 1::2].astype(np.uint64)) & mask
    s0 = (x0 * p[:, 0] + x01 * p[:, 1]).sum(axis=1, dtype=np.uint64) & mask
    s1 = (x0 * p[:, 2] + x01 * p[:, 3]).sum(axis=1, dtype=np.uint64) & mask
    return np.stack([s0, s1], axis=1)


def _wal_step(state: tuple[int, int], frame_sum: np.ndarray, n: int) -> tuple[int, int]:
    """The checksum after a frame of ``n`` pairs whose sum from (0, 0) is ``frame_sum``,
    continued from ``state``: ``M**n state + frame_sum``."""
    a, b, c, d = _powers(n)[1]
    s0, s1 = state
    return (
        (a * s0 + b * s1 + int(frame_sum[0])) & _MASK,
        (c * s0 + d * s1 + int(frame_sum[1])) & _MASK,
    )


def _readonly_uri(path: Path) -> str:
    """The URI a reader opens the database ``path`` with: ``mode=ro``; on read-only media
    (a folder this process cannot write) with no write-ahead log pending, also
    ``immutable=1``, since SQLite cannot create the log's index there and nothing can
    change the file.

    Raises:
        StoreError: the folder is read-only and a write-ahead log with committed data is
            there without its index (``-shm``), which SQLite cannot read there.
    """
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
    if os.access(path.parent, os.W_OK):
        return uri
    wal = path.with_name(path.name + "-wal")
    if not wal.exists() or wal.stat().st_size == 0:
        return uri + "&immutable=1"
    if not path.with_name(path.name + "-shm").exists():
        raise StoreError(
            f"{path}: on read-only media with a write-ahead log ({wal.name}) but not its index "
            f"({path.name}-shm), which SQLite cannot read there; copy the store (with its "
            f"{wal.name}) to writable storage and open the copy"
        )
    return uri


def _check_db_file(path: Path) -> bool:
    """Whether ``path`` holds a database (False: nothing there); refuse what is not one."""
    if path.is_dir():
        raise StoreCorruptError(f"{path} is a folder, not an SQLite store file")
    if not path.exists():
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            # a new database would take this log's pages for its own
            raise StoreCorruptError(
                f"{path}: missing, but its write-ahead log {wal.name} is there; the store "
                "is damaged, nothing was changed (restore the file, or remove the log to "
                "start a new store)"
            )
        return False
    require_regular(path, "SQLite store file")  # a FIFO would block the open
    if path.stat().st_size == 0:
        raise StoreCorruptError(
            f"{path}: empty file (0 bytes), not a diffract SQLite store; nothing was changed "
            "(a store is never left empty: restore it, or remove the file to start a new one)"
        )
    if not is_sqlite_file(path):
        raise StoreCorruptError(
            f"{path}: not an SQLite database (wrong magic bytes); not a diffract sqlite store"
        )
    _check_size(path)
    return True


def _create_db(path: Path, backend: str) -> None:
    """Create a new store database: built under a temporary name, renamed into place
    when complete, so a crash never leaves a half-made (or empty) store file."""
    import uuid

    tmp = path.with_name(f".{path.name}.creating")
    for p in (tmp, *(tmp.with_name(tmp.name + x) for x in ("-journal", "-wal", "-shm"))):
        p.unlink(missing_ok=True)
    db = sqlite3.connect(tmp, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("BEGIN IMMEDIATE")
        for stmt in _SCHEMA.split(";"):
            if stmt.strip():
                db.execute(stmt)
        db.executemany(
            "INSERT OR IGNORE INTO meta VALUES (?, ?)",
            [
                ("format", "diffract-store"),
                ("layout_version", str(LAYOUT_VERSION)),
                ("backend", backend),
                ("store_id", uuid.uuid4().hex),
                ("next_vid", "1"),
                ("seq", "0"),
            ],
        )
        db.execute("COMMIT")
    finally:
        db.close()
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


@dataclass
class _Rows:
    """A batch encoded for its transaction (before it starts)."""

    weight_arrays: dict[str, np.ndarray]
    field_arrays: dict[Key, np.ndarray]
    #: (owner, field, kind, num, txt) per scalar value
    scalars: list[tuple[str, str, str, float | None, str | None]]
    #: hybrid: "w/<uid>" and "a/<field>/<owner>" -> where the array was written
    external: dict[str, str]
    slice_models: dict[str, str]

    def models_of(self, owner: str) -> str:
        """The ``models`` column: ``,m1,m2,`` (dropping any of them drops the row)."""
        return "," + ",".join(sorted(owner_model_ids(owner, self.slice_models))) + ","


def _scalar_row(key: Key, v: Any) -> tuple[str, str, str, float | None, str | None]:
    """A scalar as its row's ``(owner, field, kind, num, txt)``. Ints are kept exact as
    decimal text (``num`` holds them as REAL for SQL only), complex numbers as their repr,
    and text SQLite cannot hold as UTF-8 (a lone surrogate) as tagged hexadecimal."""
    owner, fld = key
    if isinstance(v, np.ndarray):
        v = v.item()
    if isinstance(v, (bool, np.bool_)):
        return (owner, fld, "bool", float(v), None)
    if isinstance(v, (int, np.integer)):
        return (owner, fld, "int", _approx(int(v)), str(int(v)))
    if isinstance(v, (float, np.floating)):
        # the text keeps -0.0 (SQLite stores an integral REAL as an integer)
        return (owner, fld, "float", None if np.isnan(v) else float(v), repr(float(v)))
    if isinstance(v, (complex, np.complexfloating)):
        c = complex(v)
        return (owner, fld, "complex", None, f"{c.real!r},{c.imag!r}")
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return (owner, fld, "strx", None, v.encode("utf-8", "surrogatepass").hex())
        return (owner, fld, "str", None, v)
    raise StoreError(
        f"field {fld!r} value of type {type(v).__name__} cannot be stored (use a number, str or ndarray)"
    )


def _approx(i: int) -> float | None:
    try:
        return float(i)
    except OverflowError:
        return None


def _row_value(kind: str, num: Any, txt: Any) -> Any:
    """The value of a scalar row (see :func:`_scalar_row`)."""
    if kind == "str":
        return txt
    if kind == "int":
        return int(txt) if txt is not None else int(num)  # stores before exact ints: REAL
    if kind == "bool":
        return bool(num)
    if kind == "complex":
        re_, _, im = txt.partition(",")
        return complex(float(re_), float(im))
    if kind == "strx":
        return bytes.fromhex(txt).decode("utf-8", "surrogatepass")
    if txt is not None:
        return float(txt)
    return float("nan") if num is None else float(num)


def _insert_batch(db: sqlite3.Connection, batch: Batch, rows: _Rows, vid: int) -> int:
    """Write ``batch`` inside the open transaction; returns the next free value id."""
    for m in [*batch.remove_models, *batch.add_models]:
        db.execute("DELETE FROM fields WHERE instr(models, ?) > 0", (f",{m},",))
        db.execute("DELETE FROM slices WHERE model_id=?", (m,))
        db.execute("DELETE FROM models WHERE model_id=?", (m,))
    for m, info in batch.add_models.items():
        db.execute(
            "INSERT INTO models VALUES (?, ?)", (m, json.dumps(info, sort_keys=True, default=str))
        )
    for s in batch.slices:
        arr = rows.weight_arrays.get(s.uid)
        ext = rows.external.get(f"w/{s.uid}")
        blob = encode(arr) if arr is not None and ext is None else None
        db.execute(
            "INSERT OR REPLACE INTO slices VALUES (?, ?, ?, ?, ?, ?)",
            (s.uid, s.model_id, slice_to_json(s), blob, ext, vid),
        )
        vid += 1
    for owner, fld in batch.erase:
        db.execute("DELETE FROM fields WHERE owner=? AND field=?", (owner, fld))
    for owner, fld, kind, num, txt in rows.scalars:
        db.execute(
            "INSERT OR REPLACE INTO fields VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, ?)",
            (owner, fld, rows.models_of(owner), kind, num, txt, vid),
        )
        vid += 1
    for (owner, fld), arr in rows.field_arrays.items():
        ext = rows.external.get(f"a/{fld}/{owner}")
        db.execute(
            "INSERT OR REPLACE INTO fields VALUES (?, ?, ?, 'array', NULL, NULL, ?, ?, ?)",
            (owner, fld, rows.models_of(owner), None if ext else encode(arr), ext, vid),
        )
        vid += 1
    for (kind, name), text in batch.documents.items():
        db.execute("INSERT OR REPLACE INTO documents VALUES (?, ?, ?)", (kind, name, text))
    return vid
