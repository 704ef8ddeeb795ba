"""Stores behind one protocol (:class:`Store`):

* ``ram``: nothing persists;
* ``hdf5`` (the default of ``profile="local"``): a folder of immutable HDF5 segment files;
* ``sqlite``: one SQLite file, one transaction per batch;
* ``zarr``: a folder or any fsspec URL, commit records written last;
* ``hybrid``: metadata in SQLite, arrays in HDF5 files or a Zarr group.

Every backend commits a :class:`Batch` atomically and passes the same conformance suite
(``tests/test_store_conformance.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from diffract._core.config import BACKENDS, PROFILES
from diffract._errors import ConfigError, StoreCorruptError, StoreError
from diffract.store._base import LAYOUT_VERSION, Batch, RamStore, Store, StoreState
from diffract.store._cache import LRUCache, NoCache, RedisCache, make_cache

__all__ = [
    "BACKENDS",
    "LAYOUT_VERSION",
    "PROFILES",
    "Batch",
    "LRUCache",
    "NoCache",
    "RamStore",
    "RedisCache",
    "Store",
    "StoreState",
    "detect_backend",
    "make_cache",
    "open_path",
    "open_store",
]


def open_backend(
    backend: str,
    path: str | os.PathLike[str] | None,
    *,
    readonly: bool = False,
    lock_timeout: float = 0.0,
    cache: Any = None,
    arrays: str = "hdf5",
) -> Store:
    """Open (or create) a store of ``backend`` at ``path``."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; valid backends are {list(BACKENDS)}")
    if backend == "ram":
        if path is not None:
            raise ConfigError(
                "the ram backend keeps nothing on disk; drop path= or choose another backend"
            )
        return RamStore(cache=cache)
    if path is None:
        raise ConfigError(f"the {backend} backend needs a path")
    if backend == "hdf5":
        from diffract.store._hdf5 import HDF5Store

        return HDF5Store(path, readonly=readonly, lock_timeout=lock_timeout, cache=cache)
    if backend == "sqlite":
        from diffract.store._sqlite import SQLiteStore

        return SQLiteStore(path, readonly=readonly, lock_timeout=lock_timeout, cache=cache)
    if backend == "hybrid":
        from diffract.store._sqlite import HybridStore

        return HybridStore(
            path, readonly=readonly, lock_timeout=lock_timeout, cache=cache, arrays=arrays
        )
    from diffract.store._zarr import ZarrStore

    return ZarrStore(path, readonly=readonly, lock_timeout=lock_timeout, cache=cache)


def open_store(
    profile: str = "local",
    path: str | os.PathLike[str] | None = None,
    *,
    readonly: bool = False,
    lock_timeout: float = 0.0,
    cache: Any = None,
) -> Store:
    """Open (or create) the store of a built-in ``profile``; ``path`` overrides its location."""
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; valid profiles are {sorted(PROFILES)}")
    backend, default = PROFILES[profile]
    if backend != "ram" and path is None:
        path = Path.cwd() / default
    return open_backend(backend, path, readonly=readonly, lock_timeout=lock_timeout, cache=cache)


def detect_backend(path: str | os.PathLike[str]) -> str:
    """The backend of an existing store at ``path`` (file magic, or the folder's marker)."""
    raw = os.fspath(path)
    if "://" in raw and not raw.startswith("file://"):
        return "zarr"
    p = Path(raw).expanduser()
    if not p.exists():
        raise StoreError(f"no diffract store at {p}")
    if p.is_file():
        from diffract.store._sqlite import is_sqlite_file

        if is_sqlite_file(p):
            return "sqlite"
        raise StoreCorruptError(
            f"{p}: not a diffract store (a file that is not an SQLite database)"
        )
    from diffract.store._folder import read_marker

    info = read_marker(p)
    if info is None:
        raise StoreCorruptError(f"{p}: not a diffract store (no diffract-store.json)")
    return str(info.get("backend", "hdf5"))


def open_path(path: str | os.PathLike[str], *, readonly: bool = True, cache: Any = None) -> Store:
    """Open an existing store whatever its backend (read-only by default)."""
    return open_backend(detect_backend(path), path, readonly=readonly, cache=cache)
