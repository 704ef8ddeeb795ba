"""The hybrid store: metadata and scalar fields in SQLite, arrays in HDF5 files or a Zarr group.

A folder with ``meta.sqlite`` (an SQLite store database, see :mod:`diffract.store._sqlite`)
and arrays (weights and array-valued fields) in per-batch HDF5 files (``arrays/<seq>.h5``,
written and renamed into place before the transaction that references them) or in a Zarr
group (``arrays.zarr/<seq>/...``). Array files no transaction references (left by a crash)
are removed when a writer opens the store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from diffract._errors import StoreCorruptError
from diffract.store._folder import (
    STORE_MARKER,
    is_marker_temp,
    open_store_folder,
    write_marker_if_missing,
)
from diffract.store._lock import WriterLock, fsync_dir
from diffract.store._safe import h5_dataset, plain_name, require_regular
from diffract.store._sqlite import SQLiteStore


class HybridStore(SQLiteStore):
    """Metadata in SQLite, arrays in HDF5 files or a Zarr group (see the module docstring).

    Args:
        path: the store folder (created by a writer when missing).
        readonly, lock_timeout, cache: as for :class:`~diffract.store.SQLiteStore`.
        arrays: where a new store keeps its arrays, ``"hdf5"`` or ``"zarr"`` (an existing
            store keeps what its marker says).

    Raises:
        ConfigError: ``arrays`` is neither.
        StoreCorruptError: the folder is damaged or not a hybrid diffract store.
        StoreLockedError: another process holds the writer lock.
    """

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
        self._new_arrays = arrays
        super().__init__(path, readonly=readonly, lock_timeout=lock_timeout, cache=cache)

    def _open_at(self, path: str | os.PathLike[str]) -> None:
        readonly, arrays = self.readonly, self._new_arrays
        root = Path(path).expanduser().resolve()
        meta_db = root / "meta.sqlite"
        # a crash while creating (or a writer creating it now) leaves meta.sqlite, or the
        # database being built, without the marker (written last)
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
        super()._open_at(meta_db)
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
            from diffract.store._hdf5 import create_h5

            final = self.arrays_dir / f"{seq:012d}.h5"
            tmp = self.arrays_dir / f".tmp-{seq:012d}-{os.getpid()}.h5"
            try:
                # through create_h5: a full disk is an OSError, never a crash in HDF5
                with create_h5(tmp) as (f, check):
                    for i, arr in enumerate(arrays.values()):
                        check()
                        f.create_dataset(str(i), data=arr)
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
            file = self.arrays_dir / plain_name(fname, str(self.db_path))
            require_regular(file, "array file")
            try:
                with h5py.File(file, "r") as f:
                    return h5_dataset(f, ds, file)[()]
            except StoreCorruptError:
                raise
            except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
                what = "missing array file" if not file.exists() else f"cannot read {ds!r} ({exc})"
                raise StoreCorruptError(
                    f"{file}: {what} (referenced by {self.db_path.name}); the store is damaged"
                ) from None
        import fsspec
        import zarr

        from diffract.store._zarr import check_array

        parts = ref.split("/")
        for part in parts:
            plain_name(part, str(self.db_path))
        where = self.arrays_dir / ref
        try:
            z = zarr.open_array(str(self.arrays_dir), path=ref, mode="r")
            arr = np.asarray(z[...])
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
    """A hybrid folder mid-creation (a crash cut it, or a writer is creating it now): no
    marker yet, only ``meta.sqlite`` (complete: it is renamed into place) or the temporary
    database it is built in, the lock file and the marker's temporary file."""
    if not root.is_dir():
        return False
    names = [p.name for p in root.iterdir()]
    allowed = {"meta.sqlite", "meta.sqlite-wal", "meta.sqlite-shm", "writer.lock"}
    building = [n for n in names if n == "meta.sqlite" or n.startswith(".meta.sqlite.creating")]
    return bool(building) and all(
        n in allowed or n.startswith(".meta.sqlite.creating") or is_marker_temp(n) for n in names
    )
