"""Diffract's store migration, ``upgrade_metadata_index``: a documented no-op here."""

from __future__ import annotations

import os
from pathlib import Path


def upgrade_metadata_index(path: str | os.PathLike[str]) -> list[int]:
    """Diffract's metadata-index migration; a documented no-op here.

    Our stores carry their layout version and are opened (or refused with a
    ``StoreCorruptError``, an ``IncompatibleStoreError``) without a separate index, so there is
    nothing to migrate; a Diffract store's own files are never written by diffract-lab.

    Args:
        path: the index file (Diffract: ``.diffract/sqlite/metadata_index.db``) or a store.

    Returns:
        The versions applied: always ``[]``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no metadata index at {p}")
    return []
