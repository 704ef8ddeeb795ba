"""Stores behind one protocol (:class:`Store`):

* ``ram``: nothing persists;
* ``hdf5`` (the default of ``profile="local"``): a folder of immutable HDF5 segment files;
* ``sqlite``: one SQLite file, one transaction per batch;
* ``zarr``: a folder or any fsspec URL, commit records written last;
* ``hybrid``: metadata in SQLite, arrays in HDF5 files or a Zarr group.

Every backend commits a :class:`Batch` atomically and passes the same conformance suite
(``tests/store/test_store_conformance.py``). HDF5 and Zarr share one crash-safe segment log
(:mod:`diffract.store.log`); backends are looked up by name in :mod:`diffract.store.registry`;
:mod:`diffract.store.reader` summarises stores for the server, the CLI and panels. The
backend classes (``HDF5Store``, ``ZarrStore``, ``SQLiteStore``, ``HybridStore``) are imported
when first used.
"""

from __future__ import annotations

from typing import Any

from diffract._vocab.config import PROFILES as PROFILES
from diffract.store._base import (
    LAYOUT_VERSION as LAYOUT_VERSION,
    Batch as Batch,
    RamStore as RamStore,
    Store as Store,
    StoreState as StoreState,
)
from diffract.store._cache import (
    CacheWarning as CacheWarning,
    LRUCache as LRUCache,
    NoCache as NoCache,
    RedisCache as RedisCache,
    make_cache as make_cache,
)
from diffract.store._codec import (
    CodecError as CodecError,
    decode as decode_value,
    encode as encode_value,
)
from diffract.store._copy import copy_store as copy_store
from diffract.store._folder import STORE_MARKER as STORE_MARKER, is_sqlite_file as is_sqlite_file
from diffract.store._lock import atomic_write_text as atomic_write_text
from diffract.store.registry import (
    BACKENDS as BACKENDS,
    detect_backend as detect_backend,
    open_backend as open_backend,
    open_path as open_path,
    open_store as open_store,
)

__all__ = [
    "BACKENDS",
    "LAYOUT_VERSION",
    "PROFILES",
    "STORE_MARKER",
    "Batch",
    "CacheWarning",
    "CodecError",
    "HDF5Store",
    "HybridStore",
    "LRUCache",
    "NoCache",
    "RamStore",
    "RedisCache",
    "SQLiteStore",
    "Store",
    "StoreState",
    "ZarrStore",
    "atomic_write_text",
    "copy_store",
    "decode_value",
    "detect_backend",
    "encode_value",
    "is_sqlite_file",
    "make_cache",
    "open_backend",
    "open_path",
    "open_store",
]

_LAZY = {"HDF5Store": "hdf5", "ZarrStore": "zarr", "SQLiteStore": "sqlite", "HybridStore": "hybrid"}


def __getattr__(name: str) -> Any:
    """The backend classes, imported on first use (their modules load numpy-only code, but
    ``import diffract.store`` stays as small as the RAM store needs)."""
    if name in _LAZY:
        from diffract.store.registry import backend_entry

        return backend_entry(_LAZY[name]).store_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
