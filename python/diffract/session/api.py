"""``Session`` and scopes: the one object the views talk to.

``Session(profile=...)`` opens a store. ``session.filter(...)`` returns a :class:`Scope`
exposing the same namespaces (``models``, ``compute``, ``results``, ``viz``, ``utils``)
limited to the selection; the session itself is the unfiltered scope.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from diffract._core.config import check_workers, parse_bytes
from diffract._core.filters import Filter, FilterChain
from diffract._core.slices import ParameterType, SliceInfo, make_uid, validate_model_id
from diffract._errors import (
    DuplicateModelError,
    ExtractionError,
    FieldNotComputedError,
    InvalidArgumentError,
    StoreError,
    UnknownModelError,
)
from diffract.kernels.spec import KernelRegistry, default_registry
from diffract.run.report import ProgressCallback, ProgressEvent, RunReport
from diffract.run.runner import Runner, check_kernel_options_shape, validate_options
from diffract.session.export import KEY_COLUMNS, to_format
from diffract.store import Batch, Store


class _Namespace:
    def __init__(self, scope: Scope) -> None:
        self._scope = scope

    @property
    def _session(self) -> Session:
        return self._scope._session

    @property
    def _store(self) -> Store:
        return self._scope._session.store


def _check_flag(value: Any, name: str, *, allow_none: bool = False) -> bool | None:
    """``value`` as a bool flag; anything but a bool (or numpy.bool_, or None where allowed)
    is an :class:`InvalidArgumentError` naming the flag: ``replace="no"`` is not False."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    expected = "True, False or None" if allow_none else "True or False"
    raise InvalidArgumentError(f"{name} must be {expected}, got {type(value).__name__}: {value!r}")


def _check_field_names(fields: Sequence[Any], where: str) -> None:
    """Field names must be strings given as separate arguments: ``f('a', 'b')``."""
    for f in fields:
        if isinstance(f, str):
            continue
        if isinstance(f, (list, tuple)):
            raise InvalidArgumentError(
                f"{where} takes field names as separate arguments, got a {type(f).__name__}: "
                f"{f!r}; write {where.split('(')[0]}(*{f!r})"
            )
        raise InvalidArgumentError(
            f"{where}: field names must be strings, got {type(f).__name__}: {f!r}"
        )


def _json_ready(value: Any, where: str) -> Any:
    """``value`` as plain JSON data (numpy scalars and arrays converted); an
    :class:`InvalidArgumentError` naming ``where`` for anything JSON cannot hold."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value.tolist()
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidArgumentError(
                    f"{where}: keys must be strings, got {type(k).__name__}: {k!r}"
                )
            out[k] = _json_ready(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_json_ready(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise InvalidArgumentError(
        f"{where} is not JSON-serializable ({type(value).__name__}: {value!r}); meta holds "
        "JSON data only: str, int, float, bool, None, lists and dicts of them"
    )


def _check_meta(meta: Any) -> dict[str, Any]:
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise InvalidArgumentError(
            f"meta must be a dict of JSON-ready values, got {type(meta).__name__}: {meta!r}"
        )
    return _json_ready(meta, "meta")


# ------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------


class Models(_Namespace):
    """Add, list and remove models; list the slices of the scope."""

    def add(
        self,
        model: Any,
        model_id: str,
        filter_spec: Any = None,
        *,
        replace: bool = False,
        copy_weights: bool | None = None,
        meta: dict[str, Any] | None = None,
    ) -> list[SliceInfo]:
        """Extract ``model``'s weight slices and store them under ``model_id``.

        ``filter_spec`` is an Equinox-style filter (predicate, bool, or prefix tree of them)
        choosing the leaves to keep; default: floating arrays with ndim >= 1. Adding an id that
        exists is an error unless ``replace=True`` (which also drops that model's fields).
        Checkpoint files are referenced, not copied, unless ``copy_weights=True``; with
        ``copy_weights`` unset, leaves of a file that cannot be referenced lazily (tensors
        nested in a ``.pt`` checkpoint, say) are copied, and ``models.info(id)`` says which
        (``"weights": "mixed"``, ``"copied_leaves"``). A referenced checkpoint (each shard of
        a sharded folder) is stamped with its size and time: reading it after it changed is
        an error that says so. ``meta`` is JSON-ready provenance kept with the model
        (``models.info(id)["meta"]``).
        """
        from diffract.extract import extract

        session = self._session
        session._check_writable()
        validate_model_id(model_id)
        replace = _check_flag(replace, "replace")
        copy_weights = _check_flag(copy_weights, "copy_weights", allow_none=True)
        meta = _check_meta(meta)
        store = self._store
        store.refresh()
        if store.has_model(model_id) and not replace:
            raise DuplicateModelError(
                f"model_id {model_id!r} is already stored; pass replace=True to replace it "
                "(its fields are dropped), or choose another id"
            )
        ex = extract(model, filter_spec)
        if not ex.leaves:
            reasons = "; ".join(f"{n}: {r}" for n, r in list(ex.skipped.items())[:5])
            raise ExtractionError(
                f"no weight slices in the model given for {model_id!r}"
                + (f" (skipped leaves: {reasons})" if reasons else " (it has no array leaves)")
            )
        from diffract._core.arrays import LazyArray

        copy = (not ex.file_backed) if copy_weights is None else bool(copy_weights)
        if not copy and not ex.file_backed:
            raise ExtractionError(
                "copy_weights=False needs a checkpoint file read lazily (.safetensors, a "
                "safetensors folder, .npz, .pt/.pth/.bin); in-memory models and .onnx files "
                "(protobuf is read whole) are always copied"
            )
        #: leaves of a file that cannot be referenced lazily (not memory-mappable tensors)
        eager = (
            []
            if copy
            else [leaf.name for leaf in ex.leaves if not isinstance(leaf.array, LazyArray)]
        )
        if eager and copy_weights is False:
            raise ExtractionError(
                f"copy_weights=False: {len(eager)} of the {len(ex.leaves)} weight leaves of "
                f"{ex.source} cannot be referenced in the file (they are not stored as "
                f"tensors that can be read one at a time): {_names(eager)}; leave "
                "copy_weights unset to copy just those into the store, or pass "
                "copy_weights=True to copy every leaf"
            )
        shards = _shard_stamps(ex.source) if not copy and len(eager) < len(ex.leaves) else None
        slices: list[SliceInfo] = []
        weights: dict[str, Any] = {}
        eager_set = set(eager)
        for i, leaf in enumerate(ex.leaves):
            uid = make_uid(model_id, leaf.name)
            slice_meta: dict[str, Any] = {"layout": leaf.layout} if leaf.layout != "out_in" else {}
            keep = copy or leaf.name in eager_set
            if not keep:
                slice_meta["external"] = _external_ref(ex.source, leaf.name, leaf.array, shards)
            slices.append(
                SliceInfo(
                    model_id, leaf.name, uid, leaf.type, leaf.shape, leaf.dtype, i, slice_meta
                )
            )
            if keep:
                weights[uid] = leaf.array
        info = {
            "framework": ex.framework,
            "source": ex.source,
            "added": time.time(),
            "n_slices": len(slices),
            "skipped": ex.skipped,
            "weights": "copied" if copy or len(eager) == len(ex.leaves) else "referenced",
            "meta": meta,
        }
        if eager:
            if len(eager) < len(ex.leaves):
                info["weights"] = "mixed"
            info["copied_leaves"] = eager
            info["weights_note"] = (
                f"{len(eager)} of {len(ex.leaves)} leaves of {ex.source} cannot be referenced "
                "lazily in the file and were copied into the store"
                + ("; the others are referenced" if len(eager) < len(ex.leaves) else "")
            )
        store.commit(Batch(add_models={model_id: info}, slices=slices, weights=weights))
        return slices

    def remove(self, model_id: str) -> None:
        """Remove a model, its slices and every field computed on it."""
        self._session._check_writable()
        self._require(model_id)
        self._store.commit(Batch(remove_models=[model_id]))

    def _require(self, model_id: str) -> None:
        self._store.refresh()
        if not self._store.has_model(model_id):
            raise UnknownModelError(
                f"no model {model_id!r} in the store; stored models: {sorted(self._store.models())}"
            )

    def ids(self) -> list[str]:
        """Model ids in this scope (sorted as strings: zero-pad numeric suffixes)."""
        self._store.refresh()
        chain = self._scope._chain
        return [
            m
            for m in self._store.models()
            if chain.matches_model(m) and (chain.is_empty or self._scope._has_slices(m))
        ]

    def info(self, model_id: str) -> dict[str, Any]:
        """What was recorded when the model was added (framework, source, skipped leaves...)."""
        self._require(model_id)
        return self._store.models()[model_id]

    def slices(self) -> list[SliceInfo]:
        """The slices of this scope, ordered by model id then depth."""
        return self._scope._slices()

    def slice(self, uid_or_name: str, model_id: str | None = None) -> SliceInfo:
        """The slice of this scope with that uid, or that name (in ``model_id`` when the
        name occurs in several models); a KeyError that says which otherwise."""
        return self._scope._find(uid_or_name, model_id)

    def weights(self, uid_or_name: str, model_id: str | None = None) -> np.ndarray:
        """The stored weights of one slice, by uid or (name, model_id)."""
        s = self._scope._find(uid_or_name, model_id)
        return _read_weights(self._store, s)

    def __len__(self) -> int:
        return len(self.ids())

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids())

    def __contains__(self, model_id: object) -> bool:
        return model_id in self.ids()

    def __repr__(self) -> str:
        return f"<models: {self.ids()}>"


def _names(names: Sequence[str], n: int = 5) -> str:
    shown = ", ".join(repr(x) for x in names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


_INDEX = "model.safetensors.index.json"


def _stamp(path: str) -> dict[str, Any]:
    st = os.stat(path)
    return {"size": st.st_size, "mtime": st.st_mtime}


def _header_digest(path: str) -> str:
    """A short hash of a safetensors file's length prefix and JSON header (where every
    tensor's offsets are): a rewrite that keeps the size and time still shows."""
    import hashlib
    import struct

    with open(path, "rb") as fh:
        head = fh.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        body = fh.read(min(n, 100_000_000))
    return hashlib.sha256(head + body).hexdigest()[:16]


def _folder_shard_files(folder: str) -> list[str]:
    """The shard files of a safetensors folder, relative to it (as extraction finds them:
    the index's weight map, else every ``*.safetensors``)."""
    from pathlib import Path

    root = Path(folder)
    index = root / _INDEX
    if index.exists():
        import json

        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            return sorted({str(v) for v in weight_map.values()})
        except (OSError, ValueError, KeyError, TypeError):
            return []
    return sorted(p.name for p in root.glob("*.safetensors"))


def _shard_stamps(source: str) -> dict[str, Any] | None:
    """For a folder of safetensors shards: each shard's size, time and header hash, the
    index's size and time, and the path strings its leaves carry. None for a single file."""
    if not source or not os.path.isdir(source):
        return None
    from pathlib import Path

    root = Path(source)
    out: dict[str, Any] = {"files": {}, "prefixes": {}}
    for rel in _folder_shard_files(source):
        path = root / rel
        try:
            stamp = {"file": rel, **_stamp(str(path)), "header": _header_digest(str(path))}
        except OSError:
            continue
        out["files"][rel] = stamp
        for form in {str(path), str(path.resolve())}:
            out["prefixes"][form + "::"] = rel
    index = root / _INDEX
    if index.exists():
        out["index"] = _stamp(str(index))
    return out


def _external_ref(
    source: str, name: str, array: Any = None, shards: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What a slice referencing a checkpoint records: the file (or folder), its size and
    time, and for a folder of shards the shard holding the tensor (its size, time, header
    hash and the tensor's key in it) and the index's size and time."""
    st = os.stat(source)
    ref: dict[str, Any] = {"path": source, "tensor": name, "size": st.st_size, "mtime": st.st_mtime}
    if shards is not None:
        where = getattr(array, "source", "") or ""
        for prefix, rel in shards["prefixes"].items():
            if where.startswith(prefix):
                ref["shard"] = {**shards["files"][rel], "key": where[len(prefix) :]}
                if "index" in shards:
                    ref["index"] = dict(shards["index"])
                break
    return ref


_EXTERNAL_CACHE: dict[tuple[Any, ...], dict[str, Any]] = {}


def _cached_leaves(key: tuple[Any, ...], load: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    leaves = _EXTERNAL_CACHE.get(key)
    if leaves is None:
        leaves = load()
        if len(_EXTERNAL_CACHE) > 8:
            _EXTERNAL_CACHE.clear()
        _EXTERNAL_CACHE[key] = leaves
    return leaves


def _changed(s: SliceInfo, what: str) -> StoreError:
    return StoreError(
        f"the checkpoint behind {s.model_id}:{s.name} changed since it was added ({what}); "
        "re-add the model with replace=True"
    )


def _same(st: os.stat_result, stamp: dict[str, Any]) -> bool:
    return st.st_size == stamp["size"] and abs(st.st_mtime - stamp["mtime"]) <= 1e-6


def _read_shard(s: SliceInfo, ext: dict[str, Any]) -> np.ndarray:
    """One tensor of a sharded folder, after checking its shard and the index."""
    from diffract._core.arrays import to_numpy
    from diffract.extract.safetensors import safetensors_leaves

    shard = ext["shard"]
    path = os.path.join(ext["path"], shard["file"])
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise StoreError(
            f"the checkpoint behind {s.model_id}:{s.name} is gone: shard {path} is missing; "
            "restore it or re-add the model"
        ) from None
    if not _same(st, shard):
        raise _changed(s, f"shard {path}")
    if "index" in ext:
        index = os.path.join(ext["path"], _INDEX)
        try:
            ist = os.stat(index)
        except FileNotFoundError:
            raise StoreError(
                f"the checkpoint behind {s.model_id}:{s.name} is gone: {index} is missing; "
                "restore it or re-add the model"
            ) from None
        if not _same(ist, ext["index"]):
            raise _changed(s, f"index {index}")

    def load() -> dict[str, Any]:
        want = shard.get("header")
        if want is not None and _header_digest(path) != want:
            raise _changed(s, f"shard {path}: its header differs")
        return safetensors_leaves(path)

    leaves = _cached_leaves(("shard", path, st.st_size, st.st_mtime, shard.get("header")), load)
    return to_numpy(leaves[shard["key"]])


def _folder_signature(folder: str) -> tuple[Any, ...]:
    """Sizes and times of a folder's shards and index (refs written before shards were
    stamped: the cache must not keep loaders of a shard rewritten in place)."""
    sig = []
    for rel in [*_folder_shard_files(folder), _INDEX]:
        try:
            st = os.stat(os.path.join(folder, rel))
        except OSError:
            continue
        sig.append((rel, st.st_size, st.st_mtime_ns))
    return tuple(sig)


def _read_weights(store: Store, s: SliceInfo) -> np.ndarray:
    ext = s.meta.get("external")
    if not ext:
        return store.weights(s.uid)
    if ext.get("shard"):
        return _read_shard(s, ext)
    from diffract._core.arrays import to_numpy
    from diffract._core.tree import dotted_name, tree_leaves_with_path
    from diffract.extract import model_tree

    path = ext["path"]
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise StoreError(
            f"the checkpoint behind {s.model_id}:{s.name} is gone: {path}; restore it or re-add the model"
        ) from None
    if not _same(st, ext):
        raise _changed(s, path)
    key: tuple[Any, ...] = (path, st.st_size, st.st_mtime)
    if os.path.isdir(path):  # an older ref to a folder of shards: key on the shards too
        key += _folder_signature(path)

    def load() -> dict[str, Any]:
        return {dotted_name(p): leaf for p, leaf in tree_leaves_with_path(model_tree(path).tree)}

    return to_numpy(_cached_leaves(key, load)[ext["tensor"]])


# ------------------------------------------------------------------------------------------
# compute
# ------------------------------------------------------------------------------------------


class _StoreView:
    """The store as the runner sees it, with external (referenced) weights resolved."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def weights(self, uid: str) -> np.ndarray:
        return _read_weights(self._store, self._store.slice(uid))


class ErasedCount(int):
    """What :meth:`Compute.erase` removed: the number of values (an int), with ``fields``
    (field -> values erased) and ``dependents`` (the fields erased because they are computed
    from the fields named)."""

    fields: dict[str, int]
    dependents: list[str]

    def __new__(
        cls, n: int, fields: dict[str, int] | None = None, dependents: list[str] | None = None
    ) -> ErasedCount:
        obj = super().__new__(cls, n)
        obj.fields = dict(fields or {})
        obj.dependents = list(dependents or [])
        return obj

    def __repr__(self) -> str:
        return f"ErasedCount({int(self)}, fields={self.fields!r}, dependents={self.dependents!r})"


def _dependents(registry: KernelRegistry, fields: Sequence[str]) -> list[str]:
    """Fields computed (directly or through others) from ``fields``, not among them."""
    users: dict[str, set[str]] = {}
    for k in registry.kernels():
        for i in k.field_inputs():
            users.setdefault(i, set()).update(k.outputs)
    seen = set(fields)
    out: list[str] = []
    todo = list(fields)
    while todo:
        for f in sorted(users.get(todo.pop(0), ())):
            if f not in seen:
                seen.add(f)
                out.append(f)
                todo.append(f)
    return out


def _depends_on_scope(
    store: Store, owner: str, uids: set[str], models: set[str], names: set[tuple[str, str]]
) -> bool:
    """Whether values stored under ``owner`` were computed from slices of the scope: the
    slice itself, a model owner (any selection) of a scope model, or a cross pair with a
    scope slice on either side."""
    if owner.startswith("@"):
        return owner[1:].split("[", 1)[0] in models
    if "@" in owner:
        uid, _, ref = owner.partition("@")
        if uid in uids:
            return True
        try:
            return (ref, store.slice(uid).name) in names
        except Exception:
            return False
    return owner in uids


class Compute(_Namespace):
    """Run kernels on the scope: ``apply`` (missing fields only), ``erase``, ``configure``."""

    def apply(
        self,
        *fields: str,
        progress: bool | ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        workers: int | None = None,
        memory_budget: int | str | None = None,
        executor: Any = None,
        kernel_options: dict[str, dict[str, Any]] | None = None,
        **options: Any,
    ) -> RunReport:
        """Compute ``fields`` (and what they depend on) where they are not stored yet.

        ``options`` set kernel options by name for every kernel of this run that has them
        (``kernel_options={"kernel": {...}}`` targets one kernel); they override
        :meth:`configure`. ``progress``: None (auto: a widget in a notebook, a bar in a
        terminal), True (terminal bar), False, or a callback receiving ProgressEvent.
        ``executor``: "threads" (default), "processes", a dask ``Client`` or a scheduler
        address; chunks then run there while this process stays the single writer.
        """
        session = self._session
        session._check_writable()
        if not fields:
            raise ValueError("apply() needs at least one field name, e.g. apply('frob_norm')")
        _check_field_names(fields, "apply()")
        for f in fields:
            session.registry.producer(f)  # unknown field: clear error before any work
        # run settings and option values: checked before any work
        if (
            progress is not None
            and not isinstance(progress, (bool, np.bool_))
            and not callable(progress)
        ):
            raise InvalidArgumentError(
                "progress must be None, True, False or a callback receiving ProgressEvent, "
                f"got {type(progress).__name__}: {progress!r}"
            )
        if cancel is not None and not callable(getattr(cancel, "is_set", None)):
            raise InvalidArgumentError(
                f"cancel must be a threading.Event, got {type(cancel).__name__}: {cancel!r}"
            )
        check_kernel_options_shape(kernel_options)
        budget = (
            parse_bytes(memory_budget, "memory_budget")
            if memory_budget is not None
            else session.memory_budget
        )
        n_workers = check_workers(workers) if workers is not None else session.workers
        # configured options apply where a kernel of this run has them; all are validated
        # here, once, before anything is shown or read (an option no kernel of the run takes
        # is an error)
        closure = session.registry.closure(fields)
        names = {k.name for k in closure}
        known = {o for k in closure for o in k.options}
        merged_opts = {k: v for k, v in session._options.items() if k in known}
        merged_opts.update(options)
        merged_kopts = {k: dict(v) for k, v in session._kernel_options.items() if k in names}
        for k, v in (kernel_options or {}).items():
            merged_kopts.setdefault(k, {}).update(v)
        validate_options(closure, merged_opts, merged_kopts)
        self._store.refresh()
        cancel = cancel or threading.Event()
        session._cancel = cancel
        callback, finish = _progress_callback(progress, fields, cancel)
        runner = Runner(
            _StoreView(self._store),
            session.registry,
            options=merged_opts,
            kernel_options=merged_kopts,
            memory_budget=budget,
            workers=n_workers,
            progress=callback,
            cancel=cancel,
            call_counter=session.kernel_calls,
            executor=executor if executor is not None else session.executor,
        )
        scope = self._scope
        selected = scope._slices()  # one read of the selection per apply
        try:
            report = runner.run(
                fields,
                selected,
                scope_key=None if scope._chain.is_empty else scope._chain.key(),
                model_slices={m: self._store.slices(m) for m in {s.model_id for s in selected}},
            )
        finally:
            if finish is not None:
                finish()
            session._cancel = None
        session.last_report = report
        return report

    def apply_async(self, *fields: str, display: bool = False, **options: Any) -> Any:
        """Start ``apply`` in a worker thread and return at once with a run handle
        (:class:`diffract.widgets.ProgressRun`): in a notebook it shows the progress widget,
        whose Cancel button works while the run goes on; ``run.wait()`` or ``await run``
        gives the :class:`RunReport`. Needs the widgets extra."""
        from diffract.widgets import run_with_progress

        display = _check_flag(display, "display")
        return run_with_progress(self._scope, *fields, display=display, **options)

    def cancel(self) -> None:
        """Ask the running ``apply`` to stop after the slice or kernel in progress (values
        finished so far are stored; ``RunReport.skipped`` counts the rest)."""
        ev = self._session._cancel
        if ev is not None:
            ev.set()

    def erase(self, *fields: str) -> ErasedCount:
        """Remove stored values of ``fields`` in this scope so ``apply`` recomputes them,
        and the stored values computed from them (their dependents in the registry,
        transitively: erasing ``esd`` also erases ``pl_alpha``; erasing ``frob_norm`` also
        erases ``model_frob_norm`` of the scope's models and ``delta_frob_norm`` of pairs with
        a slice of the scope on either side), which would be stale otherwise.

        Returns the number of values erased, an int that also says what was erased:
        ``.fields`` (field -> values erased) and ``.dependents`` (fields erased because they
        depend on those named)."""
        session = self._session
        session._check_writable()
        if not fields:
            raise ValueError("erase() needs the field names to erase, e.g. erase('frob_norm')")
        _check_field_names(fields, "erase()")
        registry = session.registry
        for f in fields:
            registry.producer(f)
        named = list(dict.fromkeys(fields))
        store = self._store
        store.refresh()
        owners = self._scope._owners()
        erase = set(store.present([(o, f) for o in owners for f in named]))
        dependents = _dependents(registry, named)
        if dependents:
            slices = self._scope._slices()
            uids = {s.uid for s in slices}
            models = {s.model_id for s in slices}
            names = {(s.model_id, s.name) for s in slices}
            for o, f in store.keys():
                if f in dependents and _depends_on_scope(store, o, uids, models, names):
                    erase.add((o, f))
        store.commit(Batch(erase=sorted(erase)))
        counts: dict[str, int] = {}
        for _, f in erase:
            counts[f] = counts.get(f, 0) + 1
        return ErasedCount(
            len(erase),
            fields={f: counts[f] for f in [*named, *dependents] if f in counts},
            dependents=[f for f in dependents if f in counts],
        )

    def configure(self, kernel_or_field: str | None = None, **options: Any) -> dict[str, Any]:
        """Set kernel options for this session's later runs (stored results are kept:
        erase them to recompute). With a name, only that kernel; without, any kernel with
        those option names. Returns the options now configured."""
        from diffract.kernels.spec import check_options

        session = self._session
        if kernel_or_field is None:
            known = {o for k in session.registry.kernels() for o in k.options}
            unknown = sorted(set(options) - known)
            if unknown:
                from diffract._errors import UnknownOptionError

                raise UnknownOptionError(
                    f"no kernel has option(s) {unknown}; known options: {sorted(known)}"
                )
            check_options(session.registry.kernels(), options)  # before anything is kept
            session._options.update(options)
            return dict(session._options)
        if not isinstance(kernel_or_field, str):
            raise InvalidArgumentError(
                "configure() takes a kernel or field name (a string) or None, got "
                f"{type(kernel_or_field).__name__}: {kernel_or_field!r}"
            )
        k = session.registry.kernel(kernel_or_field)
        bad = sorted(set(options) - set(k.options))
        if bad:
            from diffract._errors import UnknownOptionError

            raise UnknownOptionError(
                f"kernel {k.name!r} has no option(s) {bad}; it accepts {sorted(k.options)}"
            )
        check_options([k], {}, {k.name: options})  # before anything is kept
        session._kernel_options.setdefault(k.name, {}).update(options)
        return dict(session._kernel_options[k.name])

    def fields(self) -> list[str]:
        """Every field a registered kernel can compute."""
        return self._session.registry.fields()

    def describe(self, field: str) -> dict[str, Any]:
        """Kernel, inputs, options, level and formula (docstring) of a field."""
        k = self._session.registry.producer(field)
        return {
            "field": field,
            "kernel": k.name,
            "inputs": list(k.inputs),
            "outputs": list(k.outputs),
            "options": dict(k.options),
            "level": k.level,
            "doc": k.doc,
        }


def _progress_callback(
    progress: bool | ProgressCallback | None,
    fields: Sequence[str],
    cancel: threading.Event | None = None,
) -> tuple[ProgressCallback | None, Callable[[], None] | None]:
    if progress is False:
        return None, None
    if callable(progress):
        return progress, None
    if progress is None:
        if _in_notebook():
            try:
                from diffract.widgets import notebook_progress

                return notebook_progress(fields, cancel=cancel)
            except ImportError:
                pass
        if not sys.stderr.isatty():
            return None, None
    from tqdm.auto import tqdm

    bar: dict[str, Any] = {}

    def on_event(ev: ProgressEvent) -> None:
        if ev.stage == "start":
            bar["bar"] = tqdm(
                total=ev.slices_total, desc=", ".join(fields)[:40], unit="slice", leave=True
            )
            return
        b = bar.get("bar")
        if b is None:
            return
        if ev.param:
            b.set_postfix_str(f"{ev.field} @ {ev.param}"[:50], refresh=False)
        b.n = ev.slices_done
        b.refresh()

    def finish() -> None:
        if "bar" in bar:
            bar["bar"].close()

    return on_event, finish


def _in_notebook() -> bool:
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython() if hasattr(ipython, "get_ipython") else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


# ------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------


class Results(_Namespace):
    """Read stored fields of the scope as tables."""

    def export_metrics(
        self, *fields: str, export_format: str = "dict", reference: str | None = None
    ) -> Any:
        """One row per parameter (model_id, name, uid, type, one column per field) in
        ``export_format``: "dict" (columns), "list" (rows), "json", "pandas", "polars".
        Model-level fields give one row per model; cross-model fields need ``reference``."""
        session = self._session
        if not fields:
            raise ValueError("export_metrics() needs at least one field name")
        _check_field_names(fields, "export_metrics()")
        if reference is not None and not isinstance(reference, str):
            raise InvalidArgumentError(
                f"reference must be a model_id (a string), got {type(reference).__name__}: {reference!r}"
            )
        store = self._store
        store.refresh()
        levels = {f: session.registry.producer(f).level for f in fields}
        scope = self._scope
        slices = scope._slices()
        rows: list[dict[str, Any]] = []
        param_fields = [f for f in fields if levels[f] == "param"]
        cross_fields = [f for f in fields if levels[f] == "cross"]
        model_fields = [f for f in fields if levels[f] == "model"]
        if cross_fields and not reference:
            raise ValueError(
                f"cross-model field(s) {cross_fields} need export_metrics(..., reference='<model_id>')"
            )
        if cross_fields and not store.has_model(reference):
            raise UnknownModelError(
                f"reference model {reference!r} is not in the store (cross-model field(s) "
                f"{cross_fields} are read against it); stored models: {sorted(store.models())}"
            )
        found = dict.fromkeys(fields, False)
        compared = False  # a row with a counterpart in the reference model
        if param_fields or cross_fields:
            ref_names = {s.name for s in store.slices(reference)} if cross_fields else set()
            for s in slices:
                is_ref = bool(cross_fields) and s.model_id == reference
                if is_ref and not param_fields:
                    continue  # only cross columns: the reference has no values against itself
                row: dict[str, Any] = {
                    "model_id": s.model_id,
                    "name": s.name,
                    "uid": s.uid,
                    "type": s.type.value,
                }
                for f in param_fields:
                    v = store.get((s.uid, f)) if store.has((s.uid, f)) else None
                    found[f] |= v is not None
                    row[f] = v
                compared |= not is_ref and s.name in ref_names
                for f in cross_fields:
                    key = (f"{s.uid}@{reference}", f)
                    v = None if is_ref or not store.has(key) else store.get(key)
                    found[f] |= v is not None
                    row[f] = v
                if cross_fields:
                    row["reference"] = reference
                rows.append(row)
        if model_fields:
            for m in sorted({s.model_id for s in slices}):
                owner = scope._model_owner(m)
                row = {"model_id": m, "name": "", "uid": owner, "type": "model"}
                for f in model_fields:
                    v = store.get((owner, f)) if store.has((owner, f)) else None
                    found[f] |= v is not None
                    row[f] = v
                rows.append(row)
        missing = [f for f, ok in found.items() if not ok]
        if missing and slices:
            where = "this selection" if not scope._chain.is_empty else "any stored model"
            plain = [f for f in missing if levels[f] != "cross"]
            cross = [f for f in missing if levels[f] == "cross"]
            parts = []
            if plain:
                parts.append(
                    f"field(s) {plain} have not been computed for {where}; "
                    f"run .compute.apply({', '.join(repr(f) for f in plain)}) first"
                )
            if cross and compared:
                parts.append(
                    f"cross-model field(s) {cross} have not been computed against reference "
                    f"{reference!r} for {where}; run .compute.apply("
                    f"{', '.join(repr(f) for f in cross)}, reference={reference!r}) first"
                )
            elif cross:
                only_ref = all(s.model_id == reference for s in slices)
                why = (
                    f"{where} holds only the reference model {reference!r}, and a model is "
                    "not compared with itself; select other models too, or choose another "
                    "reference"
                    if only_ref
                    else f"no slice of {where} has a same-named slice in the reference model "
                    f"{reference!r} (cross-model fields pair slices by name)"
                )
                parts.append(f"cross-model field(s) {cross} have no values: {why}")
            raise FieldNotComputedError("; ".join(parts))
        columns = list(KEY_COLUMNS) + (["reference"] if cross_fields else []) + list(fields)
        return to_format(rows, columns, export_format)

    def get(
        self,
        field: str,
        uid_or_name: str,
        model_id: str | None = None,
        *,
        reference: str | None = None,
    ) -> Any:
        """The stored value of one field.

        Per-parameter fields: on one slice, by uid, or name (+ ``model_id`` when the name is
        in several models). Model-level fields: on a model of the scope, by its id (or the
        owner key ``"@<model_id>"``, or any slice of it). Cross-model fields: on one slice
        against the same-named slice of ``reference``, which they need."""
        session = self._session
        k = session.registry.producer(field)  # an unknown field: a clear error first
        if reference is not None and not isinstance(reference, str):
            raise InvalidArgumentError(
                f"reference must be a model_id (a string), got {type(reference).__name__}: {reference!r}"
            )
        store = self._store
        store.refresh()
        if k.level == "model":
            return self._get_model_level(field, uid_or_name, model_id)
        s = self._scope._find(uid_or_name, model_id)
        if k.level == "cross":
            if not reference:
                raise InvalidArgumentError(
                    f"{field!r} is a cross-model field: pass the model it was computed against, "
                    f"results.get({field!r}, {uid_or_name!r}"
                    + (f", {model_id!r}" if model_id else "")
                    + ", reference='<model_id>')"
                )
            if not store.has_model(reference):
                raise UnknownModelError(
                    f"reference model {reference!r} is not in the store; stored models: "
                    f"{sorted(store.models())}"
                )
            if s.model_id == reference:
                raise FieldNotComputedError(
                    f"{s.model_id}:{s.name} is in the reference model {reference!r}; a model "
                    f"is not compared with itself: read {field!r} on a slice of another model"
                )
            key = (f"{s.uid}@{reference}", field)
            if not store.has(key):
                raise FieldNotComputedError(
                    f"field {field!r} is not stored for {s.model_id}:{s.name} against reference "
                    f"{reference!r}; run .compute.apply({field!r}, reference={reference!r})"
                )
            return store.get(key)
        if not store.has((s.uid, field)):
            raise FieldNotComputedError(
                f"field {field!r} is not stored for {s.model_id}:{s.name}; run .compute.apply({field!r})"
            )
        return store.get((s.uid, field))

    def _get_model_level(self, field: str, uid_or_name: str, model_id: str | None) -> Any:
        scope = self._scope
        store = self._store
        ids = scope.models.ids()
        if uid_or_name.startswith("@"):
            owner = uid_or_name
            m = owner[1:].split("[", 1)[0]
            if m not in ids:
                raise UnknownModelError(
                    f"no model {m!r} in this scope (owner {owner!r}); models: {ids}"
                )
        else:
            if uid_or_name in ids and model_id in (None, uid_or_name):
                m = uid_or_name
            else:
                m = scope._find(uid_or_name, model_id).model_id
            owner = scope._model_owner(m)
        if not store.has((owner, field)):
            where = "" if owner == f"@{m}" else " in this selection"
            raise FieldNotComputedError(
                f"model-level field {field!r} is not stored for model {m!r}{where}; "
                f"run .compute.apply({field!r})"
            )
        return store.get((owner, field))

    def fields(self) -> list[str]:
        """Names of the fields stored for at least one owner of this scope."""
        self._store.refresh()
        owners = set(self._scope._owners())
        return sorted({f for (o, f) in self._store.keys() if o in owners})


# ------------------------------------------------------------------------------------------
# viz and utils
# ------------------------------------------------------------------------------------------


class Viz(_Namespace):
    """Static Plotly figures from stored fields (see :mod:`diffract.viz`)."""

    def __getattr__(self, name: str) -> Any:
        from diffract import viz

        if name not in viz.__all__:
            raise AttributeError(f"viz has no figure {name!r}; available: {viz.__all__}")
        fn = getattr(viz, name)

        def bound(*args: Any, **kwargs: Any) -> Any:
            return fn(self._scope, *args, **kwargs)

        bound.__doc__ = fn.__doc__
        bound.__name__ = name
        return bound

    def __dir__(self) -> list[str]:
        from diffract import viz

        return list(viz.__all__)


class Utils(_Namespace):
    """Helpers: the slice table, the filter as JSON, the filter-builder widget."""

    def slices_table(self, export_format: str = "list") -> Any:
        """Every slice of the scope with its shape and dtype."""
        rows = [s.to_row() for s in self._scope._slices()]
        return to_format(rows, [*KEY_COLUMNS, "shape", "dtype"], export_format)

    def filter_json(self) -> str:
        """The scope's filter as canonical JSON (what the filter-builder widget edits)."""
        return self._scope._chain.to_json()

    def filter_builder(self) -> Any:
        """An interactive filter builder over this scope (needs the widgets extra)."""
        from diffract.widgets import FilterBuilder

        return FilterBuilder(self._scope)


# ------------------------------------------------------------------------------------------
# scope and session
# ------------------------------------------------------------------------------------------


class Scope:
    """A selection of slices with the session's namespaces limited to it."""

    def __init__(self, session: Session, chain: FilterChain) -> None:
        self._session = session
        self._chain = chain
        self.models = Models(self)
        self.compute = Compute(self)
        self.results = Results(self)
        self.viz = Viz(self)
        self.utils = Utils(self)

    @property
    def session(self) -> Session:
        """The session this scope belongs to (itself for a Session)."""
        return self._session

    @property
    def filter_chain(self) -> FilterChain:
        """The filter of this scope, as data."""
        return self._chain

    def filter(
        self,
        model_ids: Sequence[str] | str | None = None,
        param_names: Sequence[str] | str | None = None,
        param_types: Sequence[ParameterType | str] | ParameterType | str | None = None,
        param_ids: Sequence[str] | str | None = None,
    ) -> Scope:
        """A narrower scope: criteria AND together and with this scope's; names and model ids
        accept ``re:`` regular expressions (full match)."""
        f = Filter.make(
            model_ids=model_ids,
            param_names=param_names,
            param_types=param_types,
            param_ids=param_ids,
        )
        return Scope(self._session, self._chain.and_(f))

    def _slices(self) -> list[SliceInfo]:
        store = self._session.store
        store.refresh()
        if self._chain.is_empty:
            return store.slices()
        out = []
        for m in store.models():
            if self._chain.matches_model(m):
                out.extend(s for s in store.slices(m) if self._chain.matches(s))
        return out

    def _has_slices(self, model_id: str) -> bool:
        return any(self._chain.matches(s) for s in self._session.store.slices(model_id))

    def _model_owner(self, model_id: str) -> str:
        all_slices = self._session.store.slices(model_id)
        mine = [s for s in all_slices if self._chain.matches(s)]
        if self._chain.is_empty or len(mine) == len(all_slices):
            return f"@{model_id}"
        return f"@{model_id}[{self._chain.key()}]"

    def _owners(self) -> list[str]:
        slices = self._slices()
        owners = [s.uid for s in slices]
        uids = set(owners)
        models = {s.model_id for s in slices}
        owners += [self._model_owner(m) for m in sorted(models)]
        owners += [
            o
            for (o, _) in self._session.store.keys()
            if "@" in o and not o.startswith("@") and o.partition("@")[0] in uids
        ]
        return list(dict.fromkeys(owners))

    def _find(self, uid_or_name: str, model_id: str | None) -> SliceInfo:
        slices = self._slices()
        for s in slices:
            if s.uid == uid_or_name:
                return s
        matches = [
            s
            for s in slices
            if s.name == uid_or_name and (model_id is None or s.model_id == model_id)
        ]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise KeyError(
                f"no slice with uid or name {uid_or_name!r}"
                + (f" in model {model_id!r}" if model_id else "")
                + " in this scope"
            )
        raise KeyError(
            f"name {uid_or_name!r} is in several models {[s.model_id for s in matches]}; pass model_id="
        )

    def __len__(self) -> int:
        return len(self._slices())

    def __repr__(self) -> str:
        return f"<diffract scope {self._chain.to_json()}: {len(self)} slices>"


class Session(Scope):
    """The entry point: configuration, the store, and the scoped namespaces.

    ``profile="local"`` persists into an HDF5 store under ``./.diffract`` (``path=`` to choose
    another folder); ``profile="ram"`` keeps nothing; ``"sqlite"``, ``"zarr"``, ``"hybrid"``
    choose the other backends. Settings not given come from the environment
    (``DIFFRACT_*``) and the project file (``diffract.toml`` or ``[tool.diffract]``): see
    :mod:`diffract._core.config`. Use it as a context manager (or call :meth:`close`) to release
    the store's writer lock.
    """

    def __init__(
        self,
        profile: str | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        backend: str | None = None,
        cache: str | None = None,
        memory_budget: int | str | None = None,
        workers: int | None = None,
        readonly: bool = False,
        lock_timeout: float | None = None,
        executor: Any = None,
        registry: KernelRegistry | None = None,
    ) -> None:
        from diffract._core.config import resolve
        from diffract._errors import ConfigError
        from diffract.store import make_cache, open_backend

        readonly = _check_flag(readonly, "readonly")
        self.config = resolve(
            profile=profile,
            path=path,
            backend=backend,
            cache=cache,
            memory_budget=memory_budget,
            workers=workers,
            lock_timeout=lock_timeout,
        )
        cfg = self.config
        if cfg["backend"] == "ram" and path is not None:
            raise ConfigError(
                "profile 'ram' keeps nothing on disk; drop path= or use profile='local'"
            )
        self.profile = cfg["profile"]
        self.store: Store = open_backend(
            cfg["backend"],
            cfg["path"],
            readonly=readonly,
            lock_timeout=cfg["lock_timeout"],
            cache=make_cache(cfg["cache"], max_bytes=cfg["cache_bytes"]),
            arrays=cfg["arrays"],
        )
        self.readonly = readonly
        self.memory_budget = cfg["memory_budget"]
        self.workers = cfg["workers"]
        #: where chunks run by default: "threads", "processes", a dask Client or address
        self.executor = executor
        self.registry = registry if registry is not None else default_registry()
        self._options: dict[str, Any] = {}
        self._kernel_options: dict[str, dict[str, Any]] = {}
        self._cancel: threading.Event | None = None
        #: kernel name -> number of (slice) calls made by this session
        self.kernel_calls: dict[str, int] = {}
        self.last_report: RunReport | None = None
        super().__init__(self, FilterChain())

    def _check_writable(self) -> None:
        if self.readonly:
            raise StoreError(
                f"this session opened {self.store.path} read-only; open it with readonly=False to write"
            )

    def close(self) -> None:
        """Release the store (and its writer lock)."""
        self.store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.store.path or "memory"
        return f"<diffract Session profile={self.profile!r} store={where!r}: {len(self.models.ids())} models, {len(self)} slices>"
