"""The store protocol and the in-memory state every backend shares.

A store holds models (metadata), slices (identity + weights) and field values keyed by
``(owner, field)``. An *owner* is a slice uid for per-parameter fields, ``@<model_id>`` for
a model aggregate (``@<model_id>[<scope-key>]`` when aggregated over a filtered scope), and
``<uid>@<reference model_id>`` for cross-model fields. The reserved model-id characters
``@ [ ] , /`` make these keys unambiguous.

Every write is a :class:`Batch` committed atomically: after a crash a store holds each batch
either whole or not at all. Backends implement ``_commit`` and ``_read_array``; replaying
batches in order through :class:`StoreState` gives the live content.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diffract._errors import StoreCorruptError, StoreError, UnknownModelError
from diffract._vocab.arrays import storable_error
from diffract._vocab.owners import owner_level, owner_model_ids
from diffract._vocab.slices import ParameterType, SliceInfo
from diffract.store._lock import named_write_error

LAYOUT_VERSION = 1
Key = tuple[str, str]  # (owner, field)


def locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a store method under the store's re-entrant mutex: a session may be read by a
    panel's thread while a background run writes through it."""

    @functools.wraps(method)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
        with self._mutex:
            return method(self, *args, **kwargs)

    return wrapper


class StaleRefError(StoreError):
    """A value's file vanished (compacted by a writer); refresh and read again.

    ``path`` names the missing file or array. When the file is still missing after one
    refresh, the store is damaged: :meth:`Store.weights` and :meth:`Store.get` raise
    :class:`StoreCorruptError` naming it.
    """

    def __init__(self, path: str, detail: str = "missing store file") -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


def _missing(exc: StaleRefError, what: str) -> StoreCorruptError:
    return StoreCorruptError(
        f"{exc.path}: {exc.detail} (referenced by {what}; still missing after a refresh); "
        "the store is damaged"
    )


@dataclass
class Batch:
    """One atomic write."""

    add_models: dict[str, dict[str, Any]] = field(default_factory=dict)
    slices: list[SliceInfo] = field(default_factory=list)
    #: uid -> array-like (numpy, torch, jax, LazyArray); loaded one at a time while writing
    weights: dict[str, Any] = field(default_factory=dict)
    fields: dict[Key, Any] = field(default_factory=dict)
    erase: list[Key] = field(default_factory=list)
    remove_models: list[str] = field(default_factory=list)
    documents: dict[tuple[str, str], str] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (
            self.add_models
            or self.slices
            or self.fields
            or self.erase
            or self.remove_models
            or self.documents
        )


@dataclass
class Parts:
    """What a record holds besides its models and documents (see :meth:`StoreState.defer`)."""

    slices: Iterable[SliceInfo] = ()
    weight_refs: dict[str, Any] = field(default_factory=dict)
    values: dict[Key, Any] = field(default_factory=dict)
    erase: Iterable[Key] = ()


#: the entries of a slice's JSON form (:func:`slice_to_json`), in the order of its columns
SLICE_KEYS = ("model_id", "name", "uid", "type", "shape", "dtype", "index", "meta")


def _slice_dict(s: SliceInfo) -> dict[str, Any]:
    return {
        "model_id": s.model_id,
        "name": s.name,
        "uid": s.uid,
        "type": s.type.value,
        "shape": list(s.shape),
        "dtype": s.dtype,
        "index": s.index,
        "meta": s.meta,
    }


def slice_to_json(s: SliceInfo) -> str:
    """A slice as JSON text (keys sorted)."""
    return json.dumps(_slice_dict(s), sort_keys=True)


def slice_from_json(text: str) -> SliceInfo:
    """The slice :func:`slice_to_json` wrote."""
    d = json.loads(text)
    return SliceInfo(
        model_id=d["model_id"],
        name=d["name"],
        uid=d["uid"],
        type=ParameterType.from_string(d["type"]),
        shape=tuple(d["shape"]),
        dtype=d["dtype"],
        index=int(d.get("index", 0)),
        meta=d.get("meta") or {},
    )


def slices_to_columns(slices: Iterable[SliceInfo]) -> dict[str, list[Any]]:
    """Slices as one list per entry of :data:`SLICE_KEYS` (a compact JSON form that parses
    several times faster than one object per slice)."""
    rows = [_slice_dict(s) for s in slices]
    return {k: [r[k] for r in rows] for k in SLICE_KEYS}


def slices_from_columns(columns: dict[str, list[Any]]) -> list[SliceInfo]:
    """The slices :func:`slices_to_columns` wrote.

    Raises:
        KeyError, TypeError, ValueError: the columns are malformed (a damaged or crafted
            source; the caller names it).
    """
    cols = [columns[k] for k in SLICE_KEYS]
    if len({len(c) for c in cols}) > 1:
        raise ValueError("slice columns of different lengths")
    from_string = ParameterType.from_string
    return [
        SliceInfo(
            model_id=str(m),
            name=str(n),
            uid=str(u),
            type=from_string(t),
            shape=tuple(shape),
            dtype=str(dt),
            index=int(i),
            meta=dict(meta or {}),
        )
        for m, n, u, t, shape, dt, i, meta in zip(*cols, strict=True)
    ]


class StoreState:
    """The live content, rebuilt by replaying batches in commit order.

    ``values`` maps a key to the value itself or to a backend reference (read lazily).

    A backend may replay a record in two steps (:meth:`defer`): its models and documents at
    once, and its slices, weight references and values when ``slices``, ``weight_refs`` or
    ``values`` are first read. Opening a store with many records then costs about the
    models' metadata; the deferred parts are applied in commit order, so the state read is
    the same as a full replay.
    """

    def __init__(self) -> None:
        self.models: dict[str, dict[str, Any]] = {}
        self.documents: dict[tuple[str, str], str] = {}
        self._slices: dict[str, SliceInfo] = {}
        self._weight_refs: dict[str, Any] = {}
        self._values: dict[Key, Any] = {}
        self._by_model_uids: dict[str, list[str]] = {}
        #: deferred records, oldest first: (added models, removed models, the parts' loader)
        self._pending: deque[tuple[list[str], list[str], Callable[[], Parts]]] = deque()

    def content_token(self) -> tuple[int, ...]:
        """What changes when a record lands (models, deferred records, values, slices), read
        without applying the deferred ones: cheap enough to poll."""
        return (len(self.models), len(self._pending), len(self._values), len(self._slices))

    # --- the parts a deferred record fills (applied in order on first read) ---------------------
    @property
    def slices(self) -> dict[str, SliceInfo]:
        """uid -> slice."""
        self.load()
        return self._slices

    @property
    def weight_refs(self) -> dict[str, Any]:
        """uid -> the weights or a backend reference."""
        self.load()
        return self._weight_refs

    @property
    def values(self) -> dict[Key, Any]:
        """(owner, field) -> the value or a backend reference."""
        self.load()
        return self._values

    @property
    def _by_model(self) -> dict[str, list[str]]:
        self.load()
        return self._by_model_uids

    @property
    def loaded(self) -> bool:
        """Whether no record waits to be applied (see :meth:`defer`)."""
        return not self._pending

    def load(self) -> None:
        """Apply the deferred records, oldest first. A record whose parts cannot be read
        raises (a named error from its loader) and stays pending with the ones after it:
        what was applied before is kept, and the next read raises again."""
        while self._pending:
            added, removed, parts = self._pending[0]
            self._apply_parts(added, removed, parts())
            self._pending.popleft()

    def defer(
        self,
        *,
        add_models: dict[str, dict[str, Any]],
        remove_models: list[str],
        documents: dict[tuple[str, str], str],
        parts: Callable[[], Parts],
    ) -> None:
        """Replay a record's models and documents now and the rest when first read.

        Args:
            add_models: the record's added (or replaced) models and their meta.
            remove_models: the record's removed models.
            documents: its documents.
            parts: returns the record's ``Parts`` (its slices, weight references, values and
                erased keys); called once, on first read, with the records before it applied.
        """
        for m in remove_models:
            self.models.pop(m, None)
        for m, meta in add_models.items():
            self.models[m] = dict(meta)
        self.documents.update(documents)
        self._pending.append((list(add_models), list(remove_models), parts))

    def _drop_model_parts(self, model_id: str) -> None:
        uids = self._by_model_uids.pop(model_id, [])
        for uid in uids:
            self._slices.pop(uid, None)
            self._weight_refs.pop(uid, None)
        slice_models = dict.fromkeys(uids, model_id)
        if not uids:  # a new model id (each checkpoint of a training run): only a model or
            # a cross owner can name it, and those are the keys with "@" (uids have none)
            dead = [
                k
                for k in self._values
                if "@" in k[0] and model_id in owner_model_ids(k[0], slice_models)
            ]
            for k in dead:
                del self._values[k]
            return
        belongs: dict[str, bool] = {}  # owners repeat (one per field): look at each once
        dead = []
        for k in self._values:
            owner = k[0]
            hit = belongs.get(owner)
            if hit is None:
                # a slice's own values need no parsing (the common case, and the cheap one)
                hit = belongs[owner] = (
                    owner in slice_models
                    if owner_level(owner) == "param"
                    else model_id in owner_model_ids(owner, slice_models)
                )
            if hit:
                dead.append(k)
        for k in dead:
            del self._values[k]

    def _apply_parts(self, added: Iterable[str], removed: Iterable[str], parts: Parts) -> None:
        for m in removed:
            self._drop_model_parts(m)
        for m in added:
            self._drop_model_parts(m)
            self._by_model_uids[m] = []
        for s in parts.slices:
            self._slices[s.uid] = s
            self._by_model_uids.setdefault(s.model_id, []).append(s.uid)
        self._weight_refs.update(parts.weight_refs)
        for k in parts.erase:
            self._values.pop(tuple(k), None)
        self._values.update(parts.values)

    def apply(
        self,
        *,
        add_models: dict[str, dict[str, Any]] | None = None,
        slices: Iterable[SliceInfo] = (),
        weight_refs: dict[str, Any] | None = None,
        values: dict[Key, Any] | None = None,
        erase: Iterable[Key] = (),
        remove_models: Iterable[str] = (),
        documents: dict[tuple[str, str], str] | None = None,
    ) -> None:
        """Replay one record whole (after the deferred ones)."""
        self.load()
        add_models, remove_models = add_models or {}, list(remove_models)
        for m in remove_models:
            self.models.pop(m, None)
        for m, meta in add_models.items():
            self.models[m] = dict(meta)
        self._apply_parts(
            add_models, remove_models, Parts(slices, weight_refs or {}, values or {}, erase)
        )
        self.documents.update(documents or {})

    def model_slices(self, model_id: str) -> list[SliceInfo]:
        return [self.slices[u] for u in self._by_model.get(model_id, [])]


class Store:
    """Base class of the backends: queries over :class:`StoreState`, writes via ``_commit``."""

    backend = "abstract"
    persistent = False

    def __init__(self, *, readonly: bool = False, cache: Any = None) -> None:
        from diffract.store._cache import NoCache

        self.readonly = readonly
        self._mutex = threading.RLock()
        self._state = StoreState()
        self.path: str | None = None
        #: identifies this store in shared caches (written in its marker at creation)
        self.store_id: str = ""
        self.cache = cache if cache is not None else NoCache()

    # --- backend hooks -------------------------------------------------------------------
    def _commit(self, batch: Batch) -> None:
        raise NotImplementedError

    def _read_array(self, ref: Any) -> np.ndarray:
        raise NotImplementedError

    def refresh(self) -> None:
        """See other processes' writes (no-op for in-process stores)."""

    def close(self) -> None:
        """Release files and locks."""

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "path": self.path,
            "readonly": self.readonly,
            "cache": self.cache.describe(),
        }

    def content_token(self) -> tuple[int, ...]:
        """A token that changes when the store's content changes: a commit here or, after
        :meth:`refresh`, another process's (for a view that follows the store by polling).

        Returns:
            A tuple to compare with the previous one (equal: nothing new).
        """
        state = self._state
        return (id(state), *state.content_token())

    @property
    def superseded(self) -> bool:
        """Whether a newer session of this process took this store's writer lock over (a
        re-run ``session = Session(...)`` cell): this store can no longer write."""
        lock = getattr(self, "_lock", None)  # RAM stores and readers hold no lock
        return bool(getattr(lock, "superseded", False))

    @property
    def took_over(self) -> bool:
        """Whether this store took the writer lock over from an older session of this
        process (which can now only read)."""
        lock = getattr(self, "_lock", None)
        return bool(getattr(lock, "took_over", False))

    # --- writes --------------------------------------------------------------------------
    @locked
    def commit(self, batch: Batch) -> None:
        """Write ``batch`` atomically (all of it, or nothing)."""
        if self.readonly:
            raise StoreError(
                f"store {self.path or self.backend} is open read-only; open it with readonly=False to write"
            )
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.check_current()
        if batch.is_empty():
            return
        for (_, fld), v in batch.fields.items():
            # complex scalars read back as Python complex (a store copy writes them again)
            problem = None if isinstance(v, complex) else storable_error(v)
            if problem is not None:
                raise StoreError(
                    f"field {fld!r}: {problem} cannot be stored (use a number, str or numeric "
                    "ndarray)"
                )
        try:
            self._commit(batch)
        except OSError as exc:  # a full disk or read-only media: named, without internals
            named = named_write_error(self.path or self.backend, exc)
            if named is exc:
                raise
            raise named from None

    # --- reads ---------------------------------------------------------------------------
    @locked
    def models(self) -> dict[str, dict[str, Any]]:
        return {m: dict(meta) for m, meta in sorted(self._state.models.items())}

    @locked
    def has_model(self, model_id: str) -> bool:
        return model_id in self._state.models

    @locked
    def slices(self, model_id: str | None = None) -> list[SliceInfo]:
        """Slices of one model (or all), ordered by model id, then depth index."""
        if model_id is not None:
            if model_id not in self._state.models:
                raise UnknownModelError(
                    f"no model {model_id!r} in the store; stored models: {sorted(self._state.models)}"
                )
            return sorted(self._state.model_slices(model_id), key=lambda s: s.index)
        out: list[SliceInfo] = []
        for m in sorted(self._state.models):
            out.extend(sorted(self._state.model_slices(m), key=lambda s: s.index))
        return out

    @locked
    def slice(self, uid: str) -> SliceInfo:
        try:
            return self._state.slices[uid]
        except KeyError:
            raise StoreError(f"no slice with uid {uid!r} in the store") from None

    @locked
    def weights(self, uid: str) -> np.ndarray:
        """The stored weights of one slice as a NumPy array (bf16/fp8 sources as float32)."""
        if uid not in self._state.weight_refs:
            s = self.slice(uid)
            raise StoreError(f"the weights of {s.model_id}:{s.name} are not in the store")
        ref = self._state.weight_refs[uid]
        if isinstance(ref, np.ndarray):
            return ref
        try:
            return self._shaped(uid, self._read_array(ref))
        except StaleRefError:
            pass
        # compacted meanwhile: read the weights where they live now (once; a file still
        # missing after a refresh is damage, not a race)
        self.refresh()
        ref = self._state.weight_refs.get(uid)
        if ref is None:
            raise StoreError(f"slice {uid!r} was removed from the store meanwhile")
        if isinstance(ref, np.ndarray):
            return ref
        try:
            return self._shaped(uid, self._read_array(ref))
        except StaleRefError as exc:
            s = self._state.slices.get(uid)
            raise _missing(exc, f"the weights of {s.model_id}:{s.name}" if s else uid) from None

    def _shaped(self, uid: str, arr: np.ndarray) -> np.ndarray:
        """``arr``, the stored weights of slice ``uid``, if they have the shape the slice
        claims (every view of a slice shows its claimed shape).

        Raises:
            StoreCorruptError: the shapes differ (a damaged or crafted store).
        """
        s = self._state.slices.get(uid)
        if s is not None and tuple(arr.shape) != tuple(s.shape):
            raise StoreCorruptError(
                f"{self.path or self.backend}: slice {s.model_id}:{s.name} claims the shape "
                f"{tuple(s.shape)}, its stored weights have {tuple(arr.shape)}; the store is "
                "damaged or crafted"
            )
        return arr

    @locked
    def has(self, key: Key) -> bool:
        return tuple(key) in self._state.values

    @locked
    def present(self, keys: Iterable[Key]) -> set[Key]:
        vals = self._state.values
        return {tuple(k) for k in keys if tuple(k) in vals}

    @locked
    def get(self, key: Key) -> Any:
        v = self._state.values[tuple(key)]
        if isinstance(v, (int, float, complex, str, bool, np.ndarray, np.generic)) or v is None:
            return v
        ckey = self._cache_key(v)
        if ckey is not None:
            hit = self.cache.get(ckey)
            if hit is not None:
                return hit
        try:
            value = self._read_array(v)
        except StaleRefError:  # compacted meanwhile: read the value where it lives now
            self.refresh()
            if tuple(key) not in self._state.values:
                raise KeyError(key) from None
            v = self._state.values[tuple(key)]
            if isinstance(v, (int, float, complex, str, bool, np.ndarray, np.generic)) or v is None:
                return v
            ckey = self._cache_key(v)
            try:
                value = self._read_array(v)
            except StaleRefError as exc:  # still missing after a refresh: damage
                raise _missing(exc, f"the value {tuple(key)!r}") from None
        if ckey is not None:
            self._cache_set(ckey, value)
        return value

    def _cache_key(self, ref: Any) -> str | None:
        """The cache key of the value at ``ref``: the content digest the store recorded for
        it (checked against every entry read, so a copy of the store or a forged entry can
        never serve another value); else, for an in-process cache only, where the value
        lives in this store. None: not cached (see :mod:`diffract.store._cache`)."""
        digest = getattr(ref, "digest_key", None)
        if digest is not None:
            return str(digest)
        if self.cache.shared or not hasattr(ref, "cache_key"):
            return None
        return f"{self.path}:{self.store_id}:{ref.cache_key()}"

    def _cache_set(self, key: str, value: Any) -> None:
        """Cache ``value`` under ``key``: under a content digest only when the value read
        from the store hashes to it (a mismatch is the store's to report, not the cache's)."""
        from diffract.store._codec import DIGEST_PREFIX, CodecError, digest

        if key.startswith(DIGEST_PREFIX):
            try:
                if digest(value) != key:
                    return
            except CodecError:
                return
        self.cache.set(key, value)

    @locked
    def get_many(self, keys: Iterable[Key]) -> dict[Key, Any]:
        return {tuple(k): self.get(k) for k in keys if tuple(k) in self._state.values}

    @locked
    def keys(self) -> Iterator[Key]:
        return iter(list(self._state.values))

    @locked
    def fields_of(self, owner: str) -> list[str]:
        return sorted(f for (o, f) in self._state.values if o == owner)

    @locked
    def field_names(self) -> list[str]:
        return sorted({f for (_, f) in self._state.values})

    @locked
    def documents(self, kind: str) -> dict[str, str]:
        return {n: t for (k, n), t in self._state.documents.items() if k == kind}

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PersistentStore(Store):
    """Base class of the backends kept at a path; its constructor is theirs.

    Args:
        path: where the store lives (created by a writer when missing).
        readonly: open for reading only (no lock is taken, nothing is deleted).
        lock_timeout: seconds a writer waits for another process's writer lock.
        cache: the value cache (see :func:`diffract.store.make_cache`).

    Raises:
        StoreCorruptError: the location is damaged or not a diffract store of this backend.
        StoreLockedError: another process holds the writer lock.
    """

    persistent = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        lock_timeout: float = 0.0,
        cache: Any = None,
    ) -> None:
        super().__init__(readonly=readonly, cache=cache)
        self._lock_timeout = lock_timeout
        try:
            self._open_at(path)
        except OSError as exc:  # creating a store on read-only media or a full disk: named
            named = named_write_error(os.fspath(path), exc)
            if named is exc:
                raise
            raise named from None

    def _open_at(self, path: str | os.PathLike[str]) -> None:
        """Open the store at ``path`` (a writer creates it): the backend's step."""
        raise NotImplementedError


class RamStore(Store):
    """Keeps everything in this process; nothing persists (``profile="ram"``)."""

    backend = "ram"

    def _commit(self, batch: Batch) -> None:
        from diffract._vocab.arrays import to_numpy

        weights = {uid: np.array(to_numpy(a), copy=True) for uid, a in batch.weights.items()}
        values = {
            k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v)
            for k, v in batch.fields.items()
        }
        self._state.apply(
            add_models=batch.add_models,
            slices=batch.slices,
            weight_refs=weights,
            values=values,
            erase=batch.erase,
            remove_models=batch.remove_models,
            documents=batch.documents,
        )
