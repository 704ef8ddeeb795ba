"""The Jupyter server extension: a read-only JSON view of the stores under the server root.

Routes (all ``GET``, authenticated, under ``<base_url>/diffract/api/``):

``version``
    ``{"version": ..., "api": 1}``, the front end's handshake.
``stores``
    Every store found under the server root (folders holding ``diffract-store.json``).
``store?path=REL``
    One store: its models (slice counts, fields present, when added) and field names.
``field?path=REL&field=NAME[&model=ID]``
    The values of one field, per model, in depth order (for plots).

``path`` is relative to the server root. Absolute paths, ``..`` and symlinks that leave the
root (the store folder itself or anything inside it) are refused (403); a folder that is not
a store is 404. Stores are opened read-only
(no lock is taken), so a kernel may be writing to the same store meanwhile.

This module stays light: Jupyter Server and the store reader are imported when used.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from diffract._core.wire import ModelEntry, StoreEntry

from diffract.store._folder import STORE_MARKER
from diffract.store._sqlite import is_sqlite_file

API_VERSION = 1
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


class PathRefused(Exception):
    """A request path that leaves the server root (HTTP 403)."""


class NotAStore(Exception):
    """A request path that is not a store (HTTP 404)."""


def _version() -> str:
    from diffract import __version__

    return __version__


# ------------------------------------------------------------------------------------------
# finding and reading stores (no Jupyter imports: shared with %diffract runs)
# ------------------------------------------------------------------------------------------


def _is_sqlite_store(path: Path) -> bool:
    return path.name.endswith(SQLITE_SUFFIX) and is_sqlite_file(path)


def store_stamp(store: Path) -> dict[str, Any]:
    """How many files a store has and when it last changed, from the file system only
    (cheap enough to poll; the sidebar re-reads a store when its stamp changes)."""
    files = 0
    last = 0.0
    newest = ""
    if store.is_file():  # SQLite: the database and its write-ahead log
        for p in (store, store.with_name(store.name + "-wal")):
            try:
                st = p.stat()
            except OSError:
                continue
            files += 1
            last = max(last, st.st_mtime)
        return {"segments": files, "updated": last, "stamp": f"{files}:{last:.6f}"}
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


def find_stores(root: str | os.PathLike[str], *, max_depth: int = MAX_DEPTH) -> list[StoreEntry]:
    """Stores under ``root`` (never following symlinks), as ``{"path", "name", ...}``."""
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
            rel = folder.relative_to(root).as_posix()
            info = {
                "path": "" if rel == "." else rel,
                "name": folder.name if rel != "." else root.name,
            }
            info.update(store_stamp(folder))
            found.append(info)
            continue  # a store holds no other stores
        if depth >= max_depth:
            continue
        for e in entries:
            if e.is_file(follow_symlinks=False) and _is_sqlite_store(Path(e.path)):
                rel = Path(e.path).relative_to(root).as_posix()
                found.append({"path": rel, "name": e.name, **store_stamp(Path(e.path))})
        for e in sorted(entries, key=lambda e: e.name, reverse=True):
            if not e.is_dir(follow_symlinks=False) or e.name in SKIP_DIRS:
                continue
            if e.name.startswith(".") and not (Path(e.path) / STORE_MARKER).is_file():
                continue
            stack.append((Path(e.path), depth + 1))
    found.sort(key=lambda s: s["path"])
    return found


def resolve_store(root: str | os.PathLike[str], rel: str | None) -> Path:
    """The store folder ``rel`` (relative to ``root``), refusing anything outside ``root``."""
    if rel is None:
        raise NotAStore("missing ?path=<store folder relative to the server root>")
    if "\x00" in rel:
        raise PathRefused("invalid path")
    if rel.startswith(("/", "\\")) or os.path.isabs(rel) or (len(rel) > 1 and rel[1] == ":"):
        raise PathRefused(
            f"absolute paths are refused: {rel!r}; give a path relative to the server root"
        )
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathRefused(f"'..' is refused in store paths: {rel!r}")
    root_real = Path(root).resolve()
    target = root_real.joinpath(*parts).resolve()
    if not target.is_relative_to(root_real):
        raise PathRefused(f"{rel!r} leaves the server root")
    if not ((target / STORE_MARKER).is_file() or _is_sqlite_store(target)):
        raise NotAStore(f"no diffract store at {rel!r} (a store folder holds {STORE_MARKER})")
    escape = _link_leaving_root(target, root_real)
    if escape is not None:
        raise PathRefused(f"{rel!r} holds a symlink that leaves the server root: {escape!r}")
    return target


def _link_leaving_root(store: Path, root_real: Path) -> str | None:
    """The first symlink inside ``store`` (its files and folders at any depth, or the
    SQLite database's companion files) whose target lies outside ``root_real``, relative to
    the store; None when there is none. Stores are read through these paths, so a link out
    of the root would serve files from outside it."""

    def leaves(link: str) -> bool:
        return not Path(link).resolve().is_relative_to(root_real)

    if store.is_file():  # SQLite: the database's write-ahead log and shared memory
        for extra in (store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")):
            if extra.is_symlink() and leaves(str(extra)):
                return extra.name
        return None
    stack = [str(store)]
    while stack:  # scandir: the entries' link flags come with the listing, no stat each
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_symlink():
                    if leaves(e.path):
                        return Path(e.path).relative_to(store).as_posix()
                elif e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return None


class StoreReader:
    """A read-only store kept open between requests; ``refresh`` replays new segments only."""

    _cache: ClassVar[dict[Path, StoreReader]] = {}
    _cache_lock = threading.Lock()

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self._store: Any = None

    @classmethod
    def get(cls, path: Path) -> StoreReader:
        with cls._cache_lock:
            reader = cls._cache.get(path)
            if reader is None:
                if len(cls._cache) > 32:
                    cls._cache.clear()
                reader = cls._cache[path] = cls(path)
            return reader

    def _open(self) -> Any:
        from diffract.store import open_path

        last: Exception | None = None
        for attempt in range(3):  # a writer may be renaming a segment into place right now
            try:
                if self._store is None:
                    self._store = open_path(self.path, readonly=True)
                else:
                    self._store.refresh()
                return self._store
            except Exception as exc:
                last = exc
                self._store = None
                time.sleep(0.05 * (attempt + 1))
        raise RuntimeError(f"cannot read the store: {last}")

    def summary(self) -> dict[str, Any]:
        with self.lock:
            store = self._open()
            models = store.models()
            slices_by_model: dict[str, int] = {}
            uid_model: dict[str, str] = {}
            for s in store.slices():
                slices_by_model[s.model_id] = slices_by_model.get(s.model_id, 0) + 1
                uid_model[s.uid] = s.model_id
            fields_by_model: dict[str, set[str]] = {m: set() for m in models}
            levels: dict[str, str] = {}
            for owner, fname in store.keys():
                if owner.startswith("@"):
                    m = owner[1:].split("[", 1)[0]
                    levels.setdefault(fname, "model")
                else:
                    uid, _, ref = owner.partition("@")
                    m = uid_model.get(uid)
                    levels[fname] = "cross" if ref else "param"
                if m in fields_by_model:
                    fields_by_model[m].add(fname)
            out_models: list[ModelEntry] = []
            for m, meta in models.items():
                out_models.append(
                    {
                        "model_id": m,
                        "slices": slices_by_model.get(m, 0),
                        "fields": sorted(fields_by_model.get(m, ())),
                        "framework": meta.get("framework"),
                        "added": meta.get("added"),
                    }
                )
            from diffract.sampling.kit import list_manifests

            manifests = [
                {
                    k: row[k]
                    for k in (
                        "identity",
                        "label",
                        "teacher_id",
                        "mode",
                        "n_eligible",
                        "n_selected",
                        "n_excluded",
                        "models",
                    )
                }
                for row in list_manifests(store)
            ]
            return {
                "models": out_models,
                "fields": sorted(levels),
                "levels": levels,
                "manifests": manifests,
            }

    def field(self, field: str, model: str | None = None) -> dict[str, Any]:
        with self.lock:
            store = self._open()
            models = list(store.models())
            if model is not None:
                if model not in models:
                    raise NotAStore(f"no model {model!r} in this store")
                models = [model]
            out = []
            for m in models:
                points = []
                for s in store.slices(m):
                    if not store.has((s.uid, field)):
                        continue
                    points.append(
                        {
                            "name": s.name,
                            "uid": s.uid,
                            "type": s.type.value,
                            "index": s.index,
                            "value": _jsonable(store.get((s.uid, field))),
                        }
                    )
                agg = store.get((f"@{m}", field)) if store.has((f"@{m}", field)) else None
                if points or agg is not None:
                    out.append({"model_id": m, "points": points, "value": _jsonable(agg)})
            return {"field": field, "models": out}


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if hasattr(v, "ndim"):
        if getattr(v, "ndim", 0) == 0:
            return _jsonable(v.item())
        return None  # arrays (spectra) are not sent; ask the kernel for them
    return str(v)


# ------------------------------------------------------------------------------------------
# Jupyter Server glue
# ------------------------------------------------------------------------------------------


def _handlers(root: str) -> list[tuple[str, Any, dict[str, Any]]]:
    import tornado.web
    from jupyter_server.base.handlers import APIHandler
    from tornado.ioloop import IOLoop

    class Base(APIHandler):
        def initialize(self, root: str) -> None:
            self.root = root

        def reply(self, data: Any) -> None:
            self.set_header("Content-Type", "application/json")
            self.set_header("Cache-Control", "no-store")
            self.finish(json.dumps(data))

        def fail(self, status: int, message: str) -> None:
            self.set_status(status)
            self.reply({"error": message, "status": status})

        async def in_thread(self, fn: Any, *args: Any) -> Any:
            return await IOLoop.current().run_in_executor(None, fn, *args)

        async def store_call(self, method: str, *args: Any) -> None:
            try:  # off the event loop: it walks the store's folder for links
                path = await self.in_thread(
                    resolve_store, self.root, self.get_query_argument("path", None)
                )
            except PathRefused as exc:
                return self.fail(403, str(exc))
            except NotAStore as exc:
                return self.fail(404, str(exc))
            reader = StoreReader.get(path)
            try:
                data = await self.in_thread(getattr(reader, method), *args)
            except NotAStore as exc:
                return self.fail(404, str(exc))
            except Exception as exc:
                return self.fail(500, f"{type(exc).__name__}: {exc}")
            rel = path.relative_to(Path(self.root).resolve()).as_posix()
            data = {
                "path": "" if rel == "." else rel,
                "name": path.name,
                **store_stamp(path),
                **data,
            }
            self.reply(data)

    class Version(Base):
        @tornado.web.authenticated
        def get(self) -> None:
            self.reply({"version": _version(), "api": API_VERSION, "package": "diffract-lab"})

    class Stores(Base):
        @tornado.web.authenticated
        async def get(self) -> None:
            stores = await self.in_thread(find_stores, self.root)
            self.reply({"root": "", "stores": stores})

    class OneStore(Base):
        @tornado.web.authenticated
        async def get(self) -> None:
            await self.store_call("summary")

    class Field(Base):
        @tornado.web.authenticated
        async def get(self) -> None:
            field = self.get_query_argument("field", None)
            if not field:
                return self.fail(400, "missing ?field=<field name>")
            await self.store_call("field", field, self.get_query_argument("model", None))

    kw = {"root": root}
    return [
        ("version", Version, kw),
        ("stores", Stores, kw),
        ("store", OneStore, kw),
        ("field", Field, kw),
    ]


def setup_handlers(web_app: Any, root: str) -> None:
    from jupyter_server.utils import url_path_join

    base = web_app.settings.get("base_url", "/")
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "diffract", "api", name), cls, kw)
            for name, cls, kw in _handlers(root)
        ],
    )


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "diffract.server"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    root = getattr(server_app, "root_dir", None) or os.getcwd()
    setup_handlers(server_app.web_app, str(Path(root).expanduser()))
    server_app.log.info("diffract %s: store API at /diffract/api/ (root %s)", _version(), root)
