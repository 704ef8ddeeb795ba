"""Finding stores under a folder and reading them read-only: summaries and field series.

Shared by the Jupyter server extension (the sidebar's ``/diffract/api/*`` replies), the
``%diffract runs`` magic and panels. Nothing here imports Jupyter; stores are opened
read-only (no lock), so a kernel may be writing to the same store meanwhile.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from diffract._errors import StoreCorruptError, StoreError
from diffract._vocab.jsonable import to_jsonable
from diffract._vocab.owners import model_owner, parse_owner
from diffract._vocab.steps import order_by_step, track_of
from diffract.store._folder import STORE_MARKER, is_sqlite_file
from diffract.store._safe import is_regular_file
from diffract.store.registry import open_path

if TYPE_CHECKING:
    from diffract._vocab.wire import ModelEntry, StoreEntry
    from diffract.store._base import Store

__all__ = [
    "MAX_DEPTH",
    "MAX_DIRS",
    "MAX_ESD_VALUES",
    "SKIP_DIRS",
    "SQLITE_SUFFIX",
    "NotAStore",
    "StoreReader",
    "esd_size_limit",
    "find_stores",
    "is_sqlite_store",
    "store_stamp",
]

#: SQLite stores are single files named like the profile's default (``.diffract.sqlite``)
SQLITE_SUFFIX = ".diffract.sqlite"
#: folder names never searched for stores
SKIP_DIRS = frozenset(
    {
        "node_modules",
        ".git",
        ".hg",
        ".venv",
        "venv",
        "env",
        "__pycache__",
        ".ipynb_checkpoints",
        "site-packages",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".tox",
        ".yarn",
    }
)
MAX_DEPTH = 6
MAX_DIRS = 5000
#: the most eigenvalues one ESD reply sends (a slice's ESD has at most
#: :func:`esd_size_limit` of them; this caps even a slice that claims a huge shape)
MAX_ESD_VALUES = 1 << 20


def esd_size_limit(shape: tuple[int, ...], layout: str = "out_in") -> int:
    """How many eigenvalues the ESD of a slice of ``shape`` can hold: one per singular
    value of each kernel position's matrix, so ``min(out, in) * prod(kernel)`` (for a 2-D
    slice, ``min(rows, cols)``); the size itself for fewer than two axes.

    Args:
        shape: the slice's shape, as stored.
        layout: ``"out_in"`` (PyTorch: (out, in, *kernel)) or ``"in_out"`` (Flax/Keras:
            (*kernel, in, out)).
    """
    dims = [int(d) for d in shape]
    total = 1
    for d in dims:
        total *= d
    if len(dims) < 2:
        return total
    a, b = (dims[-2], dims[-1]) if layout == "in_out" else (dims[0], dims[1])
    return 0 if total == 0 else total // max(a, b)


class NotAStore(Exception):
    """A path that is not a store, or a model that is not in it (HTTP 404)."""


def is_sqlite_store(path: Path) -> bool:
    """Whether ``path`` is an SQLite store file (named ``*.diffract.sqlite``, SQLite magic).

    Args:
        path: a file path.

    Returns:
        True for an SQLite store the store finder lists.
    """
    return path.name.endswith(SQLITE_SUFFIX) and is_regular_file(path) and is_sqlite_file(path)


def _file_stamp(store: Path) -> dict[str, Any]:
    """SQLite: the database and its write-ahead log."""
    files, last = 0, 0.0
    for p in (store, store.with_name(store.name + "-wal")):
        try:
            st = p.stat()
        except OSError:
            continue
        files += 1
        last = max(last, st.st_mtime)
    return {"segments": files, "updated": last, "stamp": f"{files}:{last:.6f}"}


def store_stamp(store: Path) -> dict[str, Any]:
    """How many files a store has and when it last changed, from the file system only.

    Cheap enough to poll: the sidebar re-reads a store when its stamp changes.

    Args:
        store: a store folder or SQLite store file.

    Returns:
        ``{"segments": file count, "updated": newest mtime, "stamp": a string that changes
        whenever a file is added or changed}``.
    """
    if store.is_file():
        return _file_stamp(store)
    files, last, newest = 0, 0.0, ""
    stack = [(store, 0)]
    seen = 0
    while stack and seen < 20000:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                for e in it:
                    seen += 1
                    if e.name.startswith((".tmp", "writer.lock")):
                        continue
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if e.is_dir(follow_symlinks=False):
                        if depth < 2:
                            stack.append((Path(e.path), depth + 1))
                        continue
                    files += 1
                    if st.st_mtime >= last:
                        last, newest = st.st_mtime, e.name
        except OSError:
            continue
    return {"segments": files, "updated": last, "stamp": f"{files}:{newest}:{last:.6f}"}


def _store_entry(root: Path, path: Path, name: str) -> dict[str, Any]:
    rel = path.relative_to(root).as_posix()
    return {"path": "" if rel == "." else rel, "name": name, **store_stamp(path)}


def find_stores(root: str | os.PathLike[str], *, max_depth: int = MAX_DEPTH) -> list[StoreEntry]:
    """The stores under ``root``, never following symlinks.

    Args:
        root: the folder to search (folders in :data:`SKIP_DIRS` and hidden folders that are
            not stores are skipped; at most :data:`MAX_DIRS` folders are visited).
        max_depth: how deep to search below ``root``.

    Returns:
        ``{"path" (relative to root, "" for root itself), "name", "segments", "updated",
        "stamp"}`` per store, sorted by path.
    """
    root = Path(root).resolve()
    found: list[Any] = []
    visited = 0
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack and visited < MAX_DIRS:
        folder, depth = stack.pop()
        visited += 1
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        if any(e.name == STORE_MARKER and e.is_file(follow_symlinks=False) for e in entries):
            found.append(_store_entry(root, folder, folder.name if folder != root else root.name))
            continue  # a store holds no other stores
        if depth >= max_depth:
            continue
        for e in entries:
            if e.is_file(follow_symlinks=False) and is_sqlite_store(Path(e.path)):
                found.append(_store_entry(root, Path(e.path), e.name))
        for e in sorted(entries, key=lambda e: e.name, reverse=True):
            if not e.is_dir(follow_symlinks=False) or e.name in SKIP_DIRS:
                continue
            if e.name.startswith(".") and not (Path(e.path) / STORE_MARKER).is_file():
                continue
            stack.append((Path(e.path), depth + 1))
    found.sort(key=lambda s: s["path"])
    return found


def _jsonable(v: Any) -> Any:
    """A value as the sidebar gets it: arrays (spectra) are not sent, odd types as text."""
    return to_jsonable(v, arrays="drop", other="str")


class _ModelKeys:
    """What a summary counts for one model: its slices, its field names, how many values."""

    __slots__ = ("fields", "slices", "values")

    def __init__(self) -> None:
        self.slices = 0
        self.values = 0
        self.fields: set[str] = set()

    def signature(self) -> tuple[int, int, tuple[str, ...]]:
        return (self.slices, self.values, tuple(sorted(self.fields)))


def _keys_by_model(
    store: Store, models: dict[str, Any]
) -> tuple[dict[str, _ModelKeys], dict[str, str]]:
    """Per model: slice count, field names and value count; and each field's level."""
    by_model = {m: _ModelKeys() for m in models}
    uid_model: dict[str, str] = {}
    for s in store.slices():
        if s.model_id in by_model:
            by_model[s.model_id].slices += 1
        uid_model[s.uid] = s.model_id
    levels: dict[str, str] = {}
    for owner, fname in store.keys():
        o = parse_owner(owner)
        if o.level == "model":
            m = o.model_id
            levels.setdefault(fname, "model")
        else:
            m = uid_model.get(o.uid or "")
            levels[fname] = o.level
        if m in by_model:
            keys = by_model[m]
            keys.fields.add(fname)
            keys.values += 1
    return by_model, levels


class ChangeClock:
    """When each model's fields last changed, as far as a reader can date it.

    The store records no time per value, only its files' modification times. So a model is
    dated by the store's newest file time at the read where the reader first saw its fields
    as they are now (slice count, value count, field names): an upper bound of the real
    change, and the change itself when the reader reads between commits (the sidebar re-reads
    an open store within a few seconds of each commit). A model without values is dated by
    when it was added. Values recomputed in place (same fields, same count) do not move it.
    """

    def __init__(self) -> None:
        self._seen: dict[str, tuple[Any, float | None]] = {}

    def update(
        self, models: dict[str, tuple[float | None, _ModelKeys]], newest_write: float | None
    ) -> dict[str, float | None]:
        """Date every model of one read.

        Args:
            models: per model id, when it was added and what it holds now.
            newest_write: the store's newest file time at this read.

        Returns:
            Per model id, when its fields last changed (None: unknown).
        """
        out: dict[str, float | None] = {}
        for m, (added, keys) in models.items():
            sig = (added, keys.signature())
            prev = self._seen.get(m)
            if prev is not None and prev[0] == sig:
                out[m] = prev[1]
                continue
            when = newest_write if keys.values else added
            if added is not None and when is not None:
                when = max(when, added)
            self._seen[m] = (sig, when)
            out[m] = when
        for m in set(self._seen) - set(models):
            del self._seen[m]
        return out


class StoreReader:
    """A read-only store kept open between requests; ``refresh`` replays new records only.

    Args:
        path: the store folder or SQLite file.

    Readers are shared per class and path through :meth:`get`; each has a lock, so one
    request at a time reads it.
    """

    _cache: ClassVar[dict[tuple[type, Path], StoreReader]] = {}
    _cache_lock = threading.Lock()

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self._store: Any = None
        #: (stamp, error) of the last failed open: the same files fail the same way
        self._failed: tuple[str, StoreError] | None = None
        #: the stamp of the files the open store was last refreshed from
        self._stamp: dict[str, Any] = {}
        self.changes = ChangeClock()

    @classmethod
    def get(cls, path: Path) -> StoreReader:
        """The shared reader of ``path`` (at most 33 are kept; then the cache starts over)."""
        with cls._cache_lock:
            reader = cls._cache.get((cls, path))
            if reader is None:
                if len(cls._cache) > 32:
                    cls._cache.clear()
                reader = cls._cache[(cls, path)] = cls(path)
            return reader

    def _open(self) -> Any:
        """The open store, refreshed. A damaged store fails at once, without retries, and
        keeps failing from memory until its files change, so requests to a broken store
        never hold its lock (or a server thread) for long."""
        self._stamp = store_stamp(self.path)
        stamp = self._stamp["stamp"]
        if self._failed is not None and self._failed[0] == stamp:
            raise self._failed[1]
        last: Exception | None = None
        for attempt in range(3):  # a writer may be renaming a segment into place right now
            try:
                if self._store is None:
                    self._store = open_path(self.path, readonly=True)
                else:
                    self._store.refresh()
                self._failed = None
                return self._store
            except StoreCorruptError as exc:
                self._store = None
                self._failed = (stamp, exc)
                raise
            except Exception as exc:
                last = exc
                self._store = None
                time.sleep(0.02 * (attempt + 1))
        err = (
            last
            if isinstance(last, StoreError)
            else StoreCorruptError(
                f"{self.path}: cannot read the store: {type(last).__name__}: {last}"
            )
        )
        self._failed = (stamp, err)
        raise err

    def manifests(self, store: Store) -> list[dict[str, Any]]:
        """Summary rows of the sampling manifests saved in ``store``.

        The store layer does not know that document format, so this lists none; the server's
        reader (:class:`diffract.server.StoreReader`) lists them.
        """
        return []

    def summary(self) -> dict[str, Any]:
        """The store's models (slice counts, fields present, framework, when added, when
        their fields last changed, the tracked run and step), field names with their level
        (``param``, ``model``, ``cross``) and manifests.

        Returns:
            ``{"models": [...], "fields": [...], "levels": {field: level}, "manifests": [...]}``;
            models in step order (:func:`diffract._vocab.steps.order_by_step`).
        """
        with self.lock:
            store = self._open()
            models = store.models()
            keys_by_model, levels = _keys_by_model(store, models)
            changed = self.changes.update(
                {m: (meta.get("added"), keys_by_model[m]) for m, meta in models.items()},
                self._stamp.get("updated") or None,
            )
            out_models: list[ModelEntry] = []
            for m in order_by_step(models, lambda m: models[m].get("meta")):
                meta, keys = models[m], keys_by_model[m]
                track = track_of(meta.get("meta"))  # the user's meta: models.info(id)["meta"]
                out_models.append(
                    {
                        "model_id": m,
                        "slices": keys.slices,
                        "fields": sorted(keys.fields),
                        "framework": meta.get("framework"),
                        "added": meta.get("added"),
                        "changed": changed.get(m),
                        "track": None if track is None else {"run": track[0], "step": track[1]},
                    }
                )
            return {
                "models": out_models,
                "fields": sorted(levels),
                "levels": levels,
                "manifests": self.manifests(store),
            }

    def esd(self, uid: str, field: str = "esd") -> dict[str, Any]:
        """One slice's stored spectrum (the eigenvalues of ``field``) and its power-law fit's
        ``pl_esd_xmin`` and ``pl_alpha`` where stored, for the sidebar's ESD view.

        Args:
            uid: the slice's uid.
            field: the array field holding the eigenvalues.

        Returns:
            ``{"uid", "name", "model_id", "field", "values": [...] or None (not stored),
            "xmin", "alpha"}``.

        Raises:
            NotAStore: no slice ``uid`` in the store.
        """
        import numpy as np

        with self.lock:
            store = self._open()
            try:
                s = store.slice(uid)
            except StoreError:  # the one error slice() raises: no such uid
                raise NotAStore(f"no slice {uid!r} in this store") from None
            values = None
            if store.has((uid, field)):
                raw = np.asarray(store.get((uid, field)))
                limit = min(esd_size_limit(s.shape, s.layout), MAX_ESD_VALUES)
                if raw.size > limit:  # refused before the reply is built (10 s, 1 GB)
                    raise StoreCorruptError(
                        f"{s.model_id}:{s.name}: its {field} holds {raw.size} values, more "
                        f"than the {limit} a slice of shape {list(s.shape)} can have (at most "
                        f"min(rows, cols) per kernel position, and {MAX_ESD_VALUES} per "
                        "reply); the store is damaged or crafted"
                    )
                arr = raw.astype(np.float64).ravel()
                values = [float(v) for v in arr[np.isfinite(arr)]]
            extra = {
                k: _jsonable(store.get((uid, f))) if store.has((uid, f)) else None
                for k, f in (("xmin", "pl_esd_xmin"), ("alpha", "pl_alpha"))
            }
            return {
                "uid": uid,
                "name": s.name,
                "model_id": s.model_id,
                "field": field,
                "values": values,
                **extra,
            }

    def field(self, field: str, model: str | None = None) -> dict[str, Any]:
        """The values of one field per model, in depth order (for plots).

        Args:
            field: the field name.
            model: one model id; None for every model.

        Returns:
            ``{"field", "models": [{"model_id", "points": [{"name", "uid", "type", "index",
            "value"}], "value": the model-level value or None}]}``; arrays are sent as None.

        Raises:
            NotAStore: ``model`` is not in the store.
        """
        with self.lock:
            store = self._open()
            models = list(store.models())
            if model is not None:
                if model not in models:
                    raise NotAStore(f"no model {model!r} in this store")
                models = [model]
            out = []
            for m in models:
                points = [
                    {
                        "name": s.name,
                        "uid": s.uid,
                        "type": s.type.value,
                        "index": s.index,
                        "value": _jsonable(store.get((s.uid, field))),
                    }
                    for s in store.slices(m)
                    if store.has((s.uid, field))
                ]
                key = (model_owner(m), field)
                agg = store.get(key) if store.has(key) else None
                if points or agg is not None:
                    out.append({"model_id": m, "points": points, "value": _jsonable(agg)})
            return {"field": field, "models": out}
