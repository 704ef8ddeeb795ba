"""The Jupyter server extension: a read-only JSON view of the stores under the server root.

Routes (all ``GET``, authenticated, under ``<base_url>/diffract/api/``):

``version``
    ``{"version": ..., "api": 1}``, the front end's handshake.
``stores``
    Every store found under the server root (folders holding ``diffract-store.json``).
``store?path=REL``
    One store: its models (slice counts, fields present, when added, when their fields last
    changed, a tracked checkpoint's run and step) and field names.
``field?path=REL&field=NAME[&model=ID]``
    The values of one field, per model, in depth order (for plots).
``esd?path=REL&uid=UID``
    One slice's stored spectrum (``esd``) with its power-law ``xmin`` and ``alpha``.
``figure?kind=KIND&store=REL[&field=F]...[&model=ID]...[&uid=UID][&mode=M][&run=R][&reference=ID]``
    ``{"kind", "path", "figure": {"data": [...], "layout": {...}}}``: the Plotly figure of a
    kind of :mod:`diffract.viz.registry` (``layers``, ``esd``, ...), built in Python as the
    panels and the report build it (``store`` may also be spelled ``path``). An unknown kind
    or a parameter the kind cannot use is 400, with the problem named; a slice or model
    not in the store is 404.

``path`` is relative to the server root. Absolute paths, ``..`` and symlinks that leave the
root (the store folder itself or anything inside it) are refused (403); a folder that is not
a store is 404; control characters in ``path`` are refused (403, read from the raw query). A
store that cannot be read (damaged, foreign, a special file) is 422, at once and without
retries; error bodies name paths relative to the root and carry no exception class names or
parser details. Stores are opened read-only
(no lock is taken), so a kernel may be writing to the same store meanwhile.

This module stays light: Jupyter Server is imported when used; finding and reading stores
is :mod:`diffract.store.reader`'s job.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from diffract._errors import StoreError
from diffract.store import STORE_MARKER, reader as _reader
from diffract.store.reader import NotAStore, find_stores, is_sqlite_store, store_stamp

API_VERSION = 1
#: the keys of a manifest row in a store summary (``ManifestEntry`` of the wire)
MANIFEST_KEYS = (
    "identity",
    "label",
    "teacher_id",
    "mode",
    "n_eligible",
    "n_selected",
    "n_excluded",
    "models",
)


class PathRefused(Exception):
    """A request path that leaves the server root (HTTP 403)."""


class BadRequest(Exception):
    """A malformed request argument (HTTP 400)."""


#: control characters (C0, DEL, C1): never in a store path; Tornado would turn them into spaces
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_EXC_NAME = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception|Warning)\b:?\s*")
_ABS_PATH = re.compile(r"(?<![\w.])/[^\s'\"()]+")


def _version() -> str:
    from diffract import __version__

    return __version__


# ------------------------------------------------------------------------------------------
# request paths (finding and reading stores: diffract.store.reader, shared with %diffract runs)
# ------------------------------------------------------------------------------------------


def resolve_store(root: str | os.PathLike[str], rel: str | None) -> Path:
    """The store folder ``rel`` (relative to ``root``), refusing anything outside ``root``.

    Args:
        root: the server root.
        rel: the request's ``path``, as sent (control characters are refused).

    Returns:
        The store folder or SQLite file, resolved.

    Raises:
        PathRefused: an absolute path, ``..``, a control character, or a symlink out of root.
        NotAStore: no store there (also a symlink loop or a name the file system refuses).
    """
    if rel is None:
        raise NotAStore("missing ?path=<store folder relative to the server root>")
    if _CONTROL.search(rel):
        raise PathRefused("invalid path: control characters are refused")
    windows_drive = os.name == "nt" and len(rel) > 1 and rel[1] == ":"
    if rel.startswith(("/", "\\")) or os.path.isabs(rel) or windows_drive:
        raise PathRefused(
            f"absolute paths are refused: {rel!r}; give a path relative to the server root"
        )
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathRefused(f"'..' is refused in store paths: {rel!r}")
    try:
        return _resolve_parts(Path(root).resolve(), parts, rel)
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a name too long
        raise NotAStore(f"no diffract store at {rel!r} (the path cannot be opened)") from None


def _resolve_parts(root_real: Path, parts: list[str], rel: str) -> Path:
    target = root_real.joinpath(*parts).resolve()
    if not target.is_relative_to(root_real):
        raise PathRefused(f"{rel!r} leaves the server root")
    if not ((target / STORE_MARKER).is_file() or is_sqlite_store(target)):
        raise NotAStore(f"no diffract store at {rel!r} (a store folder holds {STORE_MARKER})")
    escape = _link_leaving_root(target, root_real)
    if escape is not None:
        raise PathRefused(f"{rel!r} holds a symlink that leaves the server root: {escape!r}")
    return target


def safe_message(message: str, root: str | os.PathLike[str]) -> str:
    """An error message fit for a reply: paths relative to ``root``, no exception class
    names, no parser details (the parenthesised part after the first clause), one line.

    Args:
        message: the error's text.
        root: the server root.

    Returns:
        The message to send.
    """
    text = message.splitlines()[0] if message else ""
    for r in {str(Path(root).resolve()), str(Path(root).absolute())}:
        text = text.replace(r + os.sep, "").replace(r, ".")
    text = text.split(" (", 1)[0]
    text = _EXC_NAME.sub("", text)
    return _ABS_PATH.sub("<a path outside the server root>", text).strip() or "error"


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


class StoreReader(_reader.StoreReader):
    """The sidebar's store reader: :class:`diffract.store.reader.StoreReader`, whose summaries
    also list the sampling manifests saved in the store and leave out the incomplete
    checkpoints of tracked runs."""

    def manifests(self, store: Any) -> list[dict[str, Any]]:
        from diffract.sampling import list_manifests

        return [{k: row[k] for k in MANIFEST_KEYS} for row in list_manifests(store)]

    def summary(self) -> dict[str, Any]:
        """The store's summary (:meth:`diffract.store.reader.StoreReader.summary`) without the
        tracked checkpoints whose step has not committed (:mod:`diffract.tracking.ledger`:
        the analysis is in progress, or its process died): a run's row counts and spans only
        its committed steps."""
        from diffract.tracking.ledger import incomplete_checkpoints

        out = super().summary()
        with self.lock:  # the store as the summary read it (or refreshed since: newer)
            hide = incomplete_checkpoints(self._store) if self._store is not None else {}
        if hide:
            out["models"] = [m for m in out["models"] if m["model_id"] not in hide]
        return out


class FigureRequestError(Exception):
    """A figure request the store cannot answer: ``status`` (400 or 404) and a message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: the query arguments of the figure route -> the registry's request parameter
FIGURE_ARGS = {"uid": "slice", "mode": "mode", "run": "run", "reference": "reference"}


def figure_reply(path: Path, kind: str, fields: list[str], **params: Any) -> dict[str, Any]:
    """The figure route's reply: the kind's spec drawn from the store at ``path``.

    Args:
        path: the store (resolved inside the server root).
        kind: a kind of :data:`diffract.viz.registry.KINDS`.
        fields: the ``field`` arguments, in order (none: the kind's default).
        **params: the kind's other parameters (``models``, ``slice``, ``mode``, ...).

    Returns:
        ``{"kind", "figure": {"data", "layout"}}`` with JSON values only.

    Raises:
        FigureRequestError: an unknown kind or a bad parameter (400); a slice or model not in
            the store (404).
        StoreError: the store cannot be read.
    """
    from diffract._errors import (
        DiffractError,
        UnknownFieldError,
    )
    from diffract._vocab.jsonable import to_jsonable
    from diffract.session import Session
    from diffract.store.registry import detect_backend
    from diffract.viz import registry

    try:
        registry.check(kind, fields or None, **params)
    except DiffractError as exc:
        raise FigureRequestError(400, str(exc)) from None
    session = Session(path=str(path), backend=detect_backend(path), readonly=True)
    try:
        spec = registry.build(session, kind, fields or None, **params)
    except StoreError:
        raise
    except UnknownFieldError as exc:
        raise FigureRequestError(400, _key_message(exc)) from None
    except KeyError as exc:  # a slice or model not in the store
        raise FigureRequestError(404, _key_message(exc)) from None
    except (DiffractError, ValueError, TypeError) as exc:
        raise FigureRequestError(400, str(exc)) from None
    finally:
        session.close()
    return {"kind": kind, "figure": to_jsonable(spec, where="figure", other="str")}


def _key_message(exc: KeyError) -> str:
    return str(exc.args[0]) if exc.args else "not found"


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

        def arg(self, name: str) -> str | None:
            """A query argument exactly as sent (Tornado's own accessor turns control
            characters into spaces and trims the ends)."""
            values = self.request.query_arguments.get(name)
            if not values:
                return None
            try:
                return values[-1].decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest(f"?{name}= is not UTF-8") from None

        async def resolved(self, rel: str | None) -> tuple[Path, Path, str] | None:
            """The store folder ``rel``, the real server root and the folder relative to it;
            None once a 403 (refused path) or 404 (no store) is sent."""
            try:  # off the event loop: it walks the store's folder for links
                path = await self.in_thread(resolve_store, self.root, rel)
            except PathRefused as exc:
                self.fail(403, str(exc))
                return None
            except NotAStore as exc:
                self.fail(404, str(exc))
                return None
            root_real = Path(self.root).resolve()
            return path, root_real, path.relative_to(root_real).as_posix()

        async def store_call(self, method: str, *args: Any) -> None:
            try:
                asked = self.arg("path")
            except BadRequest as exc:
                return self.fail(400, str(exc))
            found = await self.resolved(asked)
            if found is None:
                return None
            path, root_real, rel = found
            reader = StoreReader.get(path)
            try:
                data = await self.in_thread(getattr(reader, method), *args)
            except NotAStore as exc:
                return self.fail(404, safe_message(str(exc), root_real))
            except StoreError as exc:  # damaged, foreign or unreadable: the store's fault
                msg = safe_message(str(exc), root_real)
                if rel not in msg:
                    msg = f"{rel}: {msg}"
                return self.fail(422, f"cannot read the store: {msg}")
            except Exception:
                self.log.exception("diffract: reading %s", rel)
                return self.fail(500, f"cannot read the store {rel!r}: internal error")
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
            try:
                field, model = self.arg("field"), self.arg("model")
            except BadRequest as exc:
                return self.fail(400, str(exc))
            if not field:
                return self.fail(400, "missing ?field=<field name>")
            await self.store_call("field", field, model)

    class Esd(Base):
        @tornado.web.authenticated
        async def get(self) -> None:
            try:
                uid = self.arg("uid")
            except BadRequest as exc:
                return self.fail(400, str(exc))
            if not uid:
                return self.fail(400, "missing ?uid=<slice uid>")
            await self.store_call("esd", uid)

    class Figure(Base):
        @tornado.web.authenticated
        async def get(self) -> None:
            try:
                kind = self.arg("kind")
                rel = self.arg("store") or self.arg("path")
                fields = [v.decode("utf-8") for v in self.request.query_arguments.get("field", [])]
                models = [v.decode("utf-8") for v in self.request.query_arguments.get("model", [])]
                params: dict[str, Any] = {
                    k: v for a, k in FIGURE_ARGS.items() if (v := self.arg(a))
                }
            except (BadRequest, UnicodeDecodeError) as exc:
                return self.fail(400, str(exc) if isinstance(exc, BadRequest) else "not UTF-8")
            if not kind:
                return self.fail(400, "missing ?kind=<figure kind>")
            if not rel:
                return self.fail(400, "missing ?store=<store folder relative to the server root>")
            found = await self.resolved(rel)
            if found is None:
                return None
            path, root_real, rel = found
            if models:
                params["models"] = models
            try:
                data = await self.in_thread(lambda: figure_reply(path, kind, fields, **params))
            except FigureRequestError as exc:
                return self.fail(exc.status, safe_message(str(exc), root_real))
            except StoreError as exc:
                msg = safe_message(str(exc), root_real)
                return self.fail(422, f"cannot read the store: {rel}: {msg}")
            except Exception:
                self.log.exception("diffract: figure %s of %s", kind, rel)
                return self.fail(500, f"cannot draw {kind!r} from {rel!r}: internal error")
            self.reply({"kind": kind, "path": "" if rel == "." else rel, **data})

    kw = {"root": root}
    return [
        ("version", Version, kw),
        ("stores", Stores, kw),
        ("store", OneStore, kw),
        ("field", Field, kw),
        ("esd", Esd, kw),
        ("figure", Figure, kw),
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
