"""Stores behind one protocol (:class:`Store`): ``ram`` (nothing persists) and ``hdf5``
(the default of ``profile="local"``, a folder of immutable segment files)."""

from __future__ import annotations

import os
from pathlib import Path

from .._errors import ConfigError
from ._base import LAYOUT_VERSION, Batch, RamStore, Store, StoreState

__all__ = ["LAYOUT_VERSION", "PROFILES", "Batch", "RamStore", "Store", "StoreState", "open_store"]

#: profile -> (backend, default path relative to the working folder)
PROFILES: dict[str, tuple[str, str | None]] = {
    "ram": ("ram", None),
    "local": ("hdf5", ".diffract"),
    "hdf5": ("hdf5", ".diffract"),
}


def open_store(
    profile: str = "local",
    path: str | os.PathLike[str] | None = None,
    *,
    readonly: bool = False,
    lock_timeout: float = 0.0,
) -> Store:
    """Open (or create) the store of ``profile``; ``path`` overrides its default folder."""
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; valid profiles are {sorted(PROFILES)}")
    backend, default = PROFILES[profile]
    if backend == "ram":
        if path is not None:
            raise ConfigError("profile 'ram' keeps nothing on disk; drop path= or use profile='local'")
        return RamStore()
    from ._hdf5 import HDF5Store

    return HDF5Store(Path(path) if path is not None else Path.cwd() / default, readonly=readonly, lock_timeout=lock_timeout)
