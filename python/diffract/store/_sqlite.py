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
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from diffract._core.arrays import to_numpy
from diffract._core.owners import owner_model_ids
from diffract._errors import StoreCorruptError, StoreError
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
from diffract.store._lock import WriterLock, fsync_dir
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
                    f"file:{path}?mode=ro",
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
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self.refresh()


#: SQLite's primary result codes that mean the file's bytes are damaged or foreign
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB


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


def _check_size(path: Path) -> None:
    """Refuse a database file shorter than its header says (a truncated copy or download):
    SQLite would read it without complaint and silently lack the values of the lost pages.

    The header's page count is valid when its "version-valid-for" number equals the change
    counter. A writer's checkpoint may write page 1 before it extends the file, so a short
    file is looked at again before it is called damaged.

    Raises:
        StoreCorruptError: the file is shorter than its pages, or not whole pages.
    """
    for attempt in range(3):
        head = read_head(path, 100)
        if head is None or len(head) < 100:
            return  # a file too short for a header is refused by SQLite itself
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        pages = int.from_bytes(head[28:32], "big")
        valid = head[24:28] == head[92:96] and pages > 0
        size = path.stat().st_size
        if not valid or (size >= page * pages and size % page == 0):
            return
        time.sleep(0.05 * (attempt + 1))
    raise StoreCorruptError(
        f"{path}: truncated SQLite store ({size} bytes, its header says {pages} pages of "
        f"{page} bytes = {page * pages}); the store is damaged, nothing was changed "
        "(restore it from a whole copy)"
    )


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
