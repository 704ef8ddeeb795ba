"""SQLite and hybrid stores.

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
from pathlib import Path
from typing import Any

import numpy as np

from diffract._core.arrays import to_numpy
from diffract._core.owners import owner_model_ids
from diffract._errors import StoreCorruptError, StoreError
from diffract.store._base import (
    LAYOUT_VERSION,
    Batch,
    Store,
    StoreState,
    locked,
    slice_from_json,
    slice_to_json,
)
from diffract.store._codec import CodecError, decode, encode
from diffract.store._folder import (
    STORE_MARKER,
    is_sqlite_file,
    open_store_folder,
    write_marker_if_missing,
)
from diffract.store._lock import WriterLock, fsync_dir

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


class SQLiteStore(Store):
    """One SQLite file; see the module docstring."""

    backend = "sqlite"
    persistent = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        lock_timeout: float = 0.0,
        cache: Any = None,
    ) -> None:
        super().__init__(readonly=readonly, cache=cache)
        self._setup_paths(Path(path).expanduser().resolve())
        self._lock_timeout = lock_timeout
        self._data_version: int | None = None
        self._open(readonly)
        self.refresh()

    # --- opening -----------------------------------------------------------------------------
    def _setup_paths(self, path: Path) -> None:
        self.db_path = path
        self.path = str(path)
        self._lock = WriterLock(path.with_name(path.name + ".lock"), str(path))

    def _check_file(self, path: Path) -> bool:
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
        if path.stat().st_size == 0:
            raise StoreCorruptError(
                f"{path}: empty file (0 bytes), not a diffract SQLite store; nothing was changed "
                "(a store is never left empty: restore it, or remove the file to start a new one)"
            )
        if not is_sqlite_file(path):
            raise StoreCorruptError(
                f"{path}: not an SQLite database (wrong magic bytes); not a diffract sqlite store"
            )
        return True

    def _open(self, readonly: bool) -> None:
        path = self.db_path
        exists = self._check_file(path)
        if not exists and readonly:
            raise StoreError(f"no diffract store at {path}")
        created_lock = False
        if not readonly:
            path.parent.mkdir(parents=True, exist_ok=True)
            created_lock = not self._lock.path.exists()
            self._lock.acquire(self._lock_timeout)
        self._db = None
        try:
            if not readonly and not self._check_file(path):  # still none, under the lock
                self._create_file(path)
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
                raise StoreCorruptError(f"{path}: unreadable SQLite store ({exc})") from None
            raise

    def _create_file(self, path: Path) -> None:
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
                    ("backend", self.backend),
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
            raise StoreCorruptError(f"{self.db_path}: unreadable SQLite store ({exc})") from None
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
                elif kind == "str":
                    values[(owner, fld)] = txt
                elif kind == "int":
                    values[(owner, fld)] = int(num)
                elif kind == "bool":
                    values[(owner, fld)] = bool(num)
                else:
                    values[(owner, fld)] = float("nan") if num is None else float(num)
            docs = {(k, n): t for k, n, t in db.execute("SELECT kind, name, text FROM documents")}
            if own_txn:
                db.execute("COMMIT")
        except (sqlite3.DatabaseError, json.JSONDecodeError, KeyError) as exc:
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
        scalar_rows = []
        for (owner, fld), v in batch.fields.items():
            if (owner, fld) in field_arrays:
                continue
            if isinstance(v, np.ndarray):
                v = v.item()
            if isinstance(v, (bool, np.bool_)):
                scalar_rows.append((owner, fld, "bool", float(v), None))
            elif isinstance(v, (int, np.integer)):
                scalar_rows.append((owner, fld, "int", float(v), None))
            elif isinstance(v, (float, np.floating)):
                scalar_rows.append((owner, fld, "float", None if np.isnan(v) else float(v), None))
            elif isinstance(v, str):
                scalar_rows.append((owner, fld, "str", None, v))
            else:
                raise StoreError(
                    f"field {fld!r} value of type {type(v).__name__} cannot be stored (use a number, str or ndarray)"
                )
        external = self._write_arrays(
            seq,
            {f"w/{u}": a for u, a in weight_arrays.items()}
            | {f"a/{f}/{o}": a for (o, f), a in field_arrays.items()},
        )
        slice_models = {s.uid: s.model_id for s in self._state.slices.values()} | {
            s.uid: s.model_id for s in batch.slices
        }

        def models_of(owner: str) -> str:
            return "," + ",".join(sorted(owner_model_ids(owner, slice_models))) + ","

        try:
            db.execute("BEGIN IMMEDIATE")
            for m in [*batch.remove_models, *batch.add_models]:
                db.execute("DELETE FROM fields WHERE instr(models, ?) > 0", (f",{m},",))
                db.execute("DELETE FROM slices WHERE model_id=?", (m,))
                db.execute("DELETE FROM models WHERE model_id=?", (m,))
            for m, info in batch.add_models.items():
                db.execute(
                    "INSERT INTO models VALUES (?, ?)",
                    (m, json.dumps(info, sort_keys=True, default=str)),
                )
            for s in batch.slices:
                arr = weight_arrays.get(s.uid)
                ext = external.get(f"w/{s.uid}")
                blob = encode(arr) if arr is not None and ext is None else None
                db.execute(
                    "INSERT OR REPLACE INTO slices VALUES (?, ?, ?, ?, ?, ?)",
                    (s.uid, s.model_id, slice_to_json(s), blob, ext, vid),
                )
                vid += 1
            for owner, fld in batch.erase:
                db.execute("DELETE FROM fields WHERE owner=? AND field=?", (owner, fld))
            for owner, fld, kind, num, txt in scalar_rows:
                db.execute(
                    "INSERT OR REPLACE INTO fields VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, ?)",
                    (owner, fld, models_of(owner), kind, num, txt, vid),
                )
                vid += 1
            for (owner, fld), arr in field_arrays.items():
                ext = external.get(f"a/{fld}/{owner}")
                db.execute(
                    "INSERT OR REPLACE INTO fields VALUES (?, ?, ?, 'array', NULL, NULL, ?, ?, ?)",
                    (owner, fld, models_of(owner), None if ext else encode(arr), ext, vid),
                )
                vid += 1
            for (kind, name), text in batch.documents.items():
                db.execute("INSERT OR REPLACE INTO documents VALUES (?, ?, ?)", (kind, name, text))
            db.execute("UPDATE meta SET value=? WHERE key='seq'", (str(seq),))
            db.execute("UPDATE meta SET value=? WHERE key='next_vid'", (str(vid),))
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self.refresh()


class HybridStore(SQLiteStore):
    """Metadata in SQLite, arrays in HDF5 files or a Zarr group; see the module docstring."""

    backend = "hybrid"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        lock_timeout: float = 0.0,
        cache: Any = None,
        arrays: str = "hdf5",
    ) -> None:
        if arrays not in ("hdf5", "zarr"):
            from diffract._errors import ConfigError

            raise ConfigError(f"hybrid arrays must be 'hdf5' or 'zarr', got {arrays!r}")
        root = Path(path).expanduser().resolve()
        meta_db = root / "meta.sqlite"
        # a crash while creating leaves meta.sqlite without the marker (written last)
        info = (
            {}
            if _interrupted_creation(root)
            else open_store_folder(root, "hybrid", create=not readonly)
        )
        arrays_dirs = [root / "arrays", root / "arrays.zarr"]
        if info and not (meta_db.exists() and meta_db.stat().st_size > 0):
            # a store whose metadata is gone is damaged, not new: its array files would
            # look unreferenced and be deleted
            found = [d.name + "/" for d in arrays_dirs if d.exists()]
            raise StoreCorruptError(
                f"{meta_db}: {'missing' if not meta_db.exists() else 'empty (0 bytes)'} "
                f"metadata database of the hybrid store {root} (it has {STORE_MARKER}"
                f"{', ' + ', '.join(found) if found else ''}); the store is damaged, nothing "
                "was changed"
            )
        self.root = root
        self.arrays = info.get("arrays", arrays)
        self.arrays_dir = root / ("arrays" if self.arrays == "hdf5" else "arrays.zarr")
        super().__init__(meta_db, readonly=readonly, lock_timeout=lock_timeout, cache=cache)
        self.path = str(root)
        if readonly:
            return
        try:
            if not info:
                if self._meta_backend != "hybrid":
                    raise StoreCorruptError(
                        f"{meta_db}: a {self._meta_backend!r} database, not the metadata of a "
                        f"hybrid store; {root} is not a diffract store (no {STORE_MARKER})"
                    )
                # the marker is written once meta.sqlite is complete (under the lock)
                info = write_marker_if_missing(root, "hybrid", arrays=arrays)
            self.arrays_dir.mkdir(exist_ok=True)
            self._remove_orphans()
        except BaseException:
            self.close()
            raise

    def _setup_paths(self, path: Path) -> None:
        super()._setup_paths(path)
        self._lock = WriterLock(path.parent / "writer.lock", str(path.parent))

    def _remove_orphans(self) -> None:
        """Array files of a batch whose transaction never committed (a crash), and array
        files no row refers to any more (their values were erased or replaced).

        A crash leaves at most the array file of the one batch being written
        (``committed + 1``); array files of later batches mean ``meta.sqlite`` lost
        commits: that is damage, and nothing is deleted.
        """
        db = self._conn()
        committed = int(dict(db.execute("SELECT key, value FROM meta")).get("seq", "0"))
        referenced = set()
        for table in ("slices", "fields"):
            for (ref,) in db.execute(f"SELECT array_ref FROM {table} WHERE array_ref IS NOT NULL"):
                referenced.add(ref.split(":")[0].split("/")[0])
        import shutil

        doomed = []
        for p in self.arrays_dir.iterdir():
            stem = p.name.split(".")[0]
            if stem.isdigit() and int(stem) > committed + 1:
                raise StoreCorruptError(
                    f"{self.db_path}: records {committed} commits, but {p} holds arrays of "
                    f"commit {int(stem)}; the metadata database lost commits (replaced by an "
                    "older copy?): the store is damaged, nothing was deleted"
                )
            if p.name.startswith(".tmp-") or (
                stem.isdigit()
                and (int(stem) > committed or (p.name not in referenced and stem not in referenced))
            ):
                doomed.append(p)
        for p in doomed:
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)

    def _write_arrays(self, seq: int, arrays: dict[str, np.ndarray]) -> dict[str, str]:
        if not arrays:
            return {}
        if self.arrays == "hdf5":
            import h5py

            final = self.arrays_dir / f"{seq:012d}.h5"
            tmp = self.arrays_dir / f".tmp-{seq:012d}-{os.getpid()}.h5"
            try:
                with h5py.File(tmp, "w") as f:
                    for i, arr in enumerate(arrays.values()):
                        f.create_dataset(str(i), data=arr)
                with open(tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
                os.replace(tmp, final)
                fsync_dir(self.arrays_dir)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            return {name: f"{final.name}:{i}" for i, name in enumerate(arrays)}
        import zarr

        from diffract.store._zarr import create_checked_array

        group = zarr.open_group(str(self.arrays_dir), mode="a")
        out = {}
        for i, (name, arr) in enumerate(arrays.items()):
            path = f"{seq:012d}/{i}"
            create_checked_array(group, path, arr)
            out[name] = path
        return out

    def _read_external_array(self, ref: str) -> np.ndarray:
        if self.arrays == "hdf5":
            import h5py

            fname, _, ds = ref.partition(":")
            file = self.arrays_dir / fname
            try:
                with h5py.File(file, "r") as f:
                    return f[ds][()]
            except (OSError, KeyError, ValueError) as exc:
                what = "missing array file" if not file.exists() else f"cannot read {ds!r} ({exc})"
                raise StoreCorruptError(
                    f"{file}: {what} (referenced by {self.db_path.name}); the store is damaged"
                ) from None
        import fsspec
        import zarr

        from diffract.store._zarr import check_array

        where = self.arrays_dir / ref
        try:
            z = zarr.open_array(str(self.arrays_dir), path=ref, mode="r")
            arr = z[...]
        except Exception as exc:
            what = (
                "missing array"
                if not where.exists()
                else f"cannot read array ({type(exc).__name__}: {exc})"
            )
            raise StoreCorruptError(
                f"{where}: {what} (referenced by {self.db_path.name}); the store is damaged"
            ) from None
        check_array(z, arr, fsspec.filesystem("file"), str(where))
        return arr


def _interrupted_creation(root: Path) -> bool:
    """A hybrid folder a crash left mid-creation: no marker yet, only ``meta.sqlite``
    (complete: it is renamed into place), the lock file and creation leftovers."""
    if not root.is_dir() or not (root / "meta.sqlite").is_file():
        return False
    allowed = {"meta.sqlite", "meta.sqlite-wal", "meta.sqlite-shm", "writer.lock"}
    return all(
        p.name in allowed or p.name.startswith(".meta.sqlite.creating") for p in root.iterdir()
    )
