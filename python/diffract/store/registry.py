"""Backends by name: each entry opens its store and says whether it can open a path.

In the manner of xarray's ``BackendEntrypoint``: an entry is a small object, separate from
the store class it opens (imported only when a store is opened), with ``guess_can_open``
telling whether an existing path holds a store of its kind. :func:`open_backend`,
:func:`detect_backend` and :func:`open_path` look entries up here instead of branching
on backend names. The entries are the one list of backends: :data:`BACKENDS`, the
configuration's checks (:func:`diffract._vocab.config.resolve` is given :data:`BACKENDS`) and
the tests read them from here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from diffract._errors import ConfigError, StoreCorruptError, StoreError
from diffract._vocab.config import PROFILES
from diffract.store._base import RamStore, Store
from diffract.store._folder import STORE_MARKER, is_sqlite_file, is_url, read_marker

__all__ = [
    "BACKENDS",
    "BackendEntry",
    "backend_entry",
    "backend_names",
    "detect_backend",
    "open_backend",
    "open_path",
    "open_store",
]

Marker = dict[str, Any] | None


class BackendEntry:
    """One backend: its name, how to open it, and whether it can open an existing path.

    Subclasses set ``name`` and implement :meth:`store_class` (importing the store module
    when called) and :meth:`guess_can_open`.
    """

    name: ClassVar[str] = ""

    def store_class(self) -> type[Store]:
        """The store class this entry opens."""
        raise NotImplementedError

    def guess_can_open(self, location: str | Path, marker: Marker) -> bool:
        """Whether ``location`` holds a store of this backend.

        Args:
            location: a URL (str) or an existing local path.
            marker: the folder's ``diffract-store.json`` content (None for a file, a URL or
                a folder without one), read once by the caller.

        Returns:
            True when this backend should open it.
        """
        raise NotImplementedError

    def open(self, path: str | os.PathLike[str] | None, **kwargs: Any) -> Store:
        """Open (or create) a store of this backend at ``path``.

        Args:
            path: where the store lives.
            **kwargs: the store class's keyword arguments (``readonly``, ``lock_timeout``,
                ``cache``, and those of :meth:`options`).

        Returns:
            The open store.
        """
        cls: Any = self.store_class()
        return cls(path, **kwargs)

    def options(self, *, arrays: str) -> dict[str, Any]:
        """The keyword arguments of :func:`open_backend` only this backend's store takes."""
        return {}


def _marker_backend(marker: Marker) -> str | None:
    return None if marker is None else str(marker.get("backend", "hdf5"))


class _Ram(BackendEntry):
    name = "ram"

    def store_class(self) -> type[Store]:
        return RamStore

    def guess_can_open(self, location: str | Path, marker: Marker) -> bool:
        return False  # keeps nothing on disk

    def open(self, path: Any, *, cache: Any = None, **_: Any) -> Store:
        """The RAM store (``path`` must be None; nothing else applies)."""
        if path is not None:
            raise ConfigError(
                "the ram backend keeps nothing on disk; drop path= or choose another backend"
            )
        return RamStore(cache=cache)


class _HDF5(BackendEntry):
    name = "hdf5"

    def store_class(self) -> type[Store]:
        from diffract.store._hdf5 import HDF5Store

        return HDF5Store

    def guess_can_open(self, location: str | Path, marker: Marker) -> bool:
        return _marker_backend(marker) == "hdf5"  # markers without a backend are HDF5's


class _SQLite(BackendEntry):
    name = "sqlite"

    def store_class(self) -> type[Store]:
        from diffract.store._sqlite import SQLiteStore

        return SQLiteStore

    def guess_can_open(self, location: str | Path, marker: Marker) -> bool:
        return isinstance(location, Path) and location.is_file() and is_sqlite_file(location)


class _Zarr(BackendEntry):
    name = "zarr"

    def store_class(self) -> type[Store]:
        from diffract.store._zarr import ZarrStore

        return ZarrStore

    def guess_can_open(self, location: str | Path, marker: Marker) -> bool:
        return (isinstance(location, str) and is_url(location)) or _marker_backend(marker) == "zarr"


class _Hybrid(BackendEntry):
    name = "hybrid"

    def store_class(self) -> type[Store]:
        from diffract.store._hybrid import HybridStore

        return HybridStore

    def guess_can_open(self, location: str | Path, marker: Marker) -> bool:
        return _marker_backend(marker) == "hybrid"

    def options(self, *, arrays: str) -> dict[str, Any]:
        return {"arrays": arrays}


_ENTRIES: dict[str, BackendEntry] = {
    e.name: e for e in (_Ram(), _HDF5(), _SQLite(), _Zarr(), _Hybrid())
}

#: the backend names, in registration order (the keys of the registry, nowhere else listed)
BACKENDS: tuple[str, ...] = tuple(_ENTRIES)


def backend_names() -> tuple[str, ...]:
    """The registered backend names (:data:`BACKENDS`)."""
    return BACKENDS


def backend_entry(name: str) -> BackendEntry:
    """The entry of backend ``name``.

    Raises:
        ConfigError: no backend of that name (the message lists the valid ones).
    """
    try:
        return _ENTRIES[name]
    except KeyError:
        raise ConfigError(
            f"unknown backend {name!r}; valid backends are {list(BACKENDS)}"
        ) from None


def open_backend(
    backend: str,
    path: str | os.PathLike[str] | None,
    *,
    readonly: bool = False,
    lock_timeout: float = 0.0,
    cache: Any = None,
    arrays: str = "hdf5",
) -> Store:
    """Open (or create) a store of ``backend`` at ``path``.

    Args:
        backend: one of :data:`diffract.store.BACKENDS`.
        path: where the store lives (None for ``ram``, required for the others).
        readonly: open for reading only.
        lock_timeout: seconds a writer waits for the writer lock.
        cache: the value cache (see :func:`diffract.store.make_cache`).
        arrays: where a hybrid store keeps its arrays, ``"hdf5"`` or ``"zarr"``.

    Returns:
        The open store.

    Raises:
        ConfigError: an unknown backend, or a path given to / missing for a backend.
    """
    entry = backend_entry(backend)
    if path is None and entry.name != "ram":
        raise ConfigError(f"the {backend} backend needs a path")
    options = entry.options(arrays=arrays)
    return entry.open(path, readonly=readonly, lock_timeout=lock_timeout, cache=cache, **options)


def open_store(
    profile: str = "local",
    path: str | os.PathLike[str] | None = None,
    *,
    readonly: bool = False,
    lock_timeout: float = 0.0,
    cache: Any = None,
) -> Store:
    """Open (or create) the store of a built-in ``profile``; ``path`` overrides its location.

    Args:
        profile: one of :data:`diffract.store.PROFILES`.
        path: the store's location (default: the profile's, under the working folder).
        readonly: open for reading only.
        lock_timeout: seconds a writer waits for the writer lock.
        cache: the value cache.

    Returns:
        The open store.

    Raises:
        ConfigError: an unknown profile.
    """
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; valid profiles are {sorted(PROFILES)}")
    backend, default = PROFILES[profile]
    if path is None and default is not None:  # ram has no default location
        path = Path.cwd() / default
    return open_backend(backend, path, readonly=readonly, lock_timeout=lock_timeout, cache=cache)


def detect_backend(path: str | os.PathLike[str]) -> str:
    """The backend of an existing store at ``path`` (file magic, or the folder's marker).

    Args:
        path: a store file, folder or URL.

    Returns:
        The name of the backend whose entry can open it (for a marker naming an unknown
        backend, that name: opening it then says which backends exist).

    Raises:
        StoreError: nothing at ``path``.
        StoreCorruptError: a file or folder that is not a diffract store.
    """
    raw = os.fspath(path)
    location: str | Path = raw
    marker: Marker = None
    if not is_url(raw):
        location = Path(raw).expanduser()
        if not location.exists():
            raise StoreError(f"no diffract store at {location}")
        if not location.is_file():
            marker = read_marker(location)
    for entry in _ENTRIES.values():
        if entry.guess_can_open(location, marker):
            return entry.name
    if isinstance(location, Path) and location.is_file():
        raise StoreCorruptError(
            f"{location}: not a diffract store (a file that is not an SQLite database)"
        )
    if marker is None:
        raise StoreCorruptError(f"{location}: not a diffract store (no {STORE_MARKER})")
    return str(_marker_backend(marker))


def open_path(path: str | os.PathLike[str], *, readonly: bool = True, cache: Any = None) -> Store:
    """Open an existing store whatever its backend (read-only by default).

    Args:
        path: a store file, folder or URL.
        readonly: open for reading only (the default).
        cache: the value cache.

    Returns:
        The open store.

    Raises:
        StoreError, StoreCorruptError: see :func:`detect_backend`.
    """
    return open_backend(detect_backend(path), path, readonly=readonly, cache=cache)
