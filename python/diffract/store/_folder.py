"""The marker file that makes a folder a diffract store, and the checks on opening one."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from diffract._errors import StoreCorruptError, StoreError
from diffract.store._base import LAYOUT_VERSION
from diffract.store._lock import atomic_write_text
from diffract.store._safe import read_head, require_regular

STORE_MARKER = "diffract-store.json"


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL of a remote file system (``file://`` is a local path)."""
    return "://" in path and not path.startswith("file://")


def is_sqlite_file(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` starts with SQLite's magic bytes.

    Args:
        path: a file path.

    Returns:
        True for an SQLite database file; False for anything else or an unreadable file.
    """
    return read_head(path, 16) == b"SQLite format 3\x00"  # never blocks on a FIFO


def read_marker(path: Path) -> dict[str, Any] | None:
    """The marker of the store folder ``path``, None when there is none; errors name the file."""
    marker = path / STORE_MARKER
    if not marker.exists():
        return None
    require_regular(marker, "store marker")  # a FIFO would block the read
    try:
        info = json.loads(marker.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreCorruptError(f"{marker}: unreadable store marker ({exc})") from None
    if not isinstance(info, dict) or info.get("format") != "diffract-store":
        got = info.get("format") if isinstance(info, dict) else info
        raise StoreCorruptError(f"{marker}: not a diffract store marker (format={got!r})")
    return info


def check_version(where: str, version: Any) -> None:
    if version != LAYOUT_VERSION:
        newer = isinstance(version, int) and version > LAYOUT_VERSION
        raise StoreCorruptError(
            f"{where}: store layout version {version} is {'newer' if newer else 'older'} than this "
            f"diffract's layout version {LAYOUT_VERSION}; "
            + (
                "upgrade diffract-lab to read it"
                if newer
                else "copy it with an older diffract-lab release"
            )
        )


def open_store_folder(path: Path, backend: str, *, create: bool) -> dict[str, Any]:
    """Check ``path`` is a ``backend`` store (or may become one); return its marker."""
    if path.exists() and not path.is_dir():
        raise StoreCorruptError(
            f"{path} is a file, not a diffract store folder; point path= at a folder "
            "(the local profile uses ./.diffract)"
        )
    info = read_marker(path)
    if info is not None:
        check_version(str(path), info.get("layout_version"))
        found = info.get("backend", "hdf5")
        if found != backend:
            raise StoreCorruptError(
                f"{path}: a {found!r} store, opened as {backend!r}; open it with profile/backend {found!r}"
            )
        return info
    if path.exists() and any(
        not (_creation_leftover(p) or is_diffract_entry(p)) for p in path.iterdir()
    ):
        raise StoreCorruptError(
            f"{path} exists but is not a diffract store (no {STORE_MARKER}); refusing to write into "
            "a foreign folder: choose another path="
        )
    if not create:
        raise StoreError(f"no diffract store at {path}")
    return {}


#: what the published Diffract (``diffract-core``) keeps in ``.diffract/``: its local and
#: hybrid profiles' folders, its Zarr store and its logs; our store may live beside them
DIFFRACT_ENTRIES = ("sqlite", "hybrid", "zarr_store")
_DIFFRACT_LOG = re.compile(r"(?:sqlite|hybrid)\.log(?:\.\d+)?")


def is_diffract_entry(p: Path) -> bool:
    """Whether ``p`` (an entry of a store folder) belongs to a Diffract store: never ours to
    refuse, read or write."""
    if p.is_dir():
        return p.name in DIFFRACT_ENTRIES
    return _DIFFRACT_LOG.fullmatch(p.name) is not None


def is_marker_temp(name: str) -> bool:
    """Whether ``name`` is the temporary file of a marker being written (renamed into place
    by :func:`atomic_write_text`): a store in creation, or one whose creation a crash cut."""
    return name.startswith(f".{STORE_MARKER}.") and name.endswith(".tmp")


def _creation_leftover(p: Path) -> bool:
    """What a crash while creating a store leaves before its marker (written last), and what
    a reader sees while a writer creates one: the writer's lock file, the marker's temporary
    file and empty folders. Nothing to lose: the folder may become a store."""
    if (p.name == "writer.lock" or is_marker_temp(p.name)) and p.is_file():
        return True
    return p.name in ("segments", "arrays", "commits") and p.is_dir() and not any(p.iterdir())


def write_marker_if_missing(path: Path, backend: str, **extra: Any) -> dict[str, Any]:
    path.mkdir(parents=True, exist_ok=True)
    info = read_marker(path)
    if info is None:
        info = {
            "format": "diffract-store",
            "layout_version": LAYOUT_VERSION,
            "backend": backend,
            "store_id": uuid.uuid4().hex,
            **extra,
        }
        atomic_write_text(path / STORE_MARKER, json.dumps(info, sort_keys=True))
    return info
