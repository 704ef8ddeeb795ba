"""The default store: a folder of immutable HDF5 segment files.

Layout (readable with h5py alone, documented in docs/storage.md)::

    <store>/                      e.g. ./.diffract
      diffract-store.json         {"format": "diffract-store", "layout_version": 1, "backend": "hdf5"}
      writer.lock                 flock-ed by the one writing process (holds its pid)
      segments/
        000000000001.h5           one committed batch each, never modified after rename
        000000000002.h5
        .tmp-...                  a batch being written (ignored by readers, removed on open)

Each batch is written to a temporary file, flushed and fsync-ed, then ``os.replace``-d to
its final name, which is atomic. A process killed at any moment therefore leaves either the
whole segment or none of it: readers never see a half-written field, and nothing committed
before is touched. Readers list ``segments/`` and replay the files in sequence order.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np

from diffract._core.arrays import to_numpy
from diffract._errors import StoreCorruptError, StoreError
from diffract.store._base import (
    LAYOUT_VERSION,
    Batch,
    Key,
    StaleRefError,
    Store,
    StoreState,
    first_missing_seq,
    locked,
    slice_from_json,
    slice_to_json,
)
from diffract.store._folder import open_store_folder, write_marker_if_missing
from diffract.store._lock import WriterLock, fsync_dir

SEGMENT_FORMAT = "diffract-segment"
_SEG_NAME = re.compile(r"^(\d{12})(-c)?\.h5$")
#: compact after this many segments since the last compaction
COMPACT_EVERY = 32
#: arrays up to this size are copied into a compaction; larger ones are referenced
COPY_LIMIT = 4 * 1024**2


class _Vanished(Exception):
    """A segment disappeared while being read (a writer compacted meanwhile)."""


_SEP = "\x1f"
#: prefix of an HDF5 link name that holds a percent-encoded name (see :func:`_h5name`)
_ESC = "@@"


def _h5name(name: str) -> str:
    """The HDF5 link name of a model id, uid, field, owner or document name.

    HDF5 cannot hold ``"."`` (the group itself), ``""``, or names with ``/`` or NUL as one
    link name; those (and names starting with ``@@``, so the mapping is reversible) are
    stored as ``@@`` + their percent-encoding. Every other name is stored as it is. No
    model id, uid or owner key can start with ``@@`` (``@`` is reserved in model ids).
    """
    if name in (".", "") or "/" in name or "\x00" in name or name.startswith(_ESC):
        return _ESC + urllib.parse.quote(name, safe="")
    return name


def _from_h5(name: str) -> str:
    """The name an HDF5 link name stands for (inverse of :func:`_h5name`)."""
    return urllib.parse.unquote(name[len(_ESC) :]) if name.startswith(_ESC) else name


def _h5py():
    import h5py

    return h5py


class ArrayRef:
    """Where an array value lives: (segment file, dataset path). Immutable once written."""

    __slots__ = ("dataset", "file")

    def __init__(self, file: Path, dataset: str) -> None:
        self.file = file
        self.dataset = dataset

    def cache_key(self) -> str:
        return f"{self.file.name}/{self.dataset}"


class HDF5Store(Store):
    """Folder of immutable HDF5 segments (see the module docstring)."""

    backend = "hdf5"
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
        self.root = Path(path).expanduser().resolve()
        self.path = str(self.root)
        self.segments_dir = self.root / "segments"
        self._lock = WriterLock(self.root / "writer.lock", str(self.root))
        self._lock_timeout = lock_timeout
        self._seen: list[str] = []
        info = open_store_folder(self.root, "hdf5", create=not readonly)
        if info and not self.segments_dir.is_dir():
            # segments/ is made before the marker: a store without it is damaged, not new
            raise StoreCorruptError(
                f"{self.segments_dir}: missing folder of segments (the store's marker is "
                "there); the store is damaged, nothing was changed"
            )
        if not readonly:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock.acquire(lock_timeout)
            self.segments_dir.mkdir(exist_ok=True)
            info = write_marker_if_missing(self.root, "hdf5")
            for stale in self.segments_dir.glob(".tmp-*"):
                stale.unlink(missing_ok=True)
        self.store_id = info.get("store_id", "")
        try:
            self.refresh()
            if not readonly:
                self._collect_garbage()
        except BaseException:
            self.close()  # a damaged store: refused, and the lock is not kept
            raise

    def close(self) -> None:
        self._lock.release()

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.close()

    # --- reading segments ----------------------------------------------------------------
    def _segment_files(self) -> list[str]:
        if not self.segments_dir.exists():
            return []
        return sorted(p.name for p in self.segments_dir.iterdir() if _SEG_NAME.match(p.name))

    def _live_segments(self) -> list[str]:
        """Segments from the last compaction on (a compaction supersedes all before it)."""
        names = self._segment_files()
        starts = [i for i, n in enumerate(names) if n.endswith("-c.h5")]
        return names[starts[-1] :] if starts else names

    @locked
    def refresh(self) -> None:
        """Replay segments committed since the last look (by this or another process).

        A rebuild (after a compaction) replays into a new state that replaces the current
        one only when complete: an error leaves what was read before in place. A segment
        missing in the middle of the live sequence is damage (:class:`StoreCorruptError`).
        """
        rebuild, vanished = False, str(self.segments_dir)
        for attempt in range(5):
            names = self._live_segments()
            gap = first_missing_seq(names)
            if gap is not None:
                if attempt < 2:  # a listing that raced a compaction: look again
                    time.sleep(0.01)
                    continue
                raise StoreCorruptError(
                    f"{self.segments_dir / f'{gap:012d}.h5'}: missing segment (sequence number "
                    f"{gap}; found {names[0]} to {names[-1]}); the store is damaged and its "
                    "later segments cannot be replayed without it"
                )
            if rebuild or names[: len(self._seen)] != self._seen:  # compacted: rebuild
                state, seen = StoreState(), []
                try:
                    for name in names:
                        self._replay(self.segments_dir / name, state)
                        seen.append(name)
                except _Vanished as exc:
                    vanished, rebuild = str(exc), True
                    continue
                self._state, self._seen = state, seen
                return
            try:
                for name in names[len(self._seen) :]:
                    self._replay(self.segments_dir / name, self._state)
                    self._seen.append(name)
                return
            except _Vanished as exc:
                vanished, rebuild = str(exc), True
        raise StoreError(f"{vanished}: segments keep vanishing while reading; retry")

    def _replay(self, file: Path, state: StoreState) -> None:
        h5py = _h5py()
        try:
            with h5py.File(file, "r") as f:
                if f.attrs.get("format") != SEGMENT_FORMAT:
                    raise StoreCorruptError(
                        f"{file}: not a diffract segment (format attribute missing)"
                    )
                if int(f.attrs.get("layout_version", -1)) != LAYOUT_VERSION:
                    raise StoreCorruptError(
                        f"{file}: segment layout version {f.attrs.get('layout_version')} "
                        f"(this diffract reads {LAYOUT_VERSION})"
                    )
                remove = (
                    [s.decode() if isinstance(s, bytes) else s for s in f["remove_models"][()]]
                    if "remove_models" in f
                    else []
                )
                add_models = {}
                if "models" in f:
                    for m in f["models"]:
                        add_models[_from_h5(m)] = json.loads(f["models"][m].attrs["meta"])
                slices, refs = [], {}
                if "slices" in f:
                    for link, g in f["slices"].items():
                        s = slice_from_json(g.attrs["info"])
                        slices.append(s)
                        uid = _from_h5(link)
                        if "weights" in g:
                            refs[uid] = ArrayRef(file, f"slices/{link}/weights")
                        elif "weights_ref" in g.attrs:
                            fname, _, ds = str(g.attrs["weights_ref"]).partition(":")
                            refs[uid] = ArrayRef(self.segments_dir / fname, ds)
                values: dict[Key, Any] = {}
                if "fields" in f:
                    for link, g in f["fields"].items():
                        fname = _from_h5(link)
                        owners = [
                            o.decode() if isinstance(o, bytes) else o for o in g["owners"][()]
                        ]
                        kind = g.attrs.get("kind", "float")
                        raw = g["values"][()]
                        for o, v in zip(owners, raw, strict=True):
                            values[(o, fname)] = _scalar(v, kind)
                if "arrays" in f:
                    for flink, g in f["arrays"].items():
                        for olink in g:
                            values[(_from_h5(olink), _from_h5(flink))] = ArrayRef(
                                file, f"arrays/{flink}/{olink}"
                            )
                if "array_refs" in f:
                    for e in f["array_refs"][()]:
                        o, fn, where = (e.decode() if isinstance(e, bytes) else e).split(_SEP)
                        fname, _, ds = where.partition(":")
                        values[(o, fn)] = ArrayRef(self.segments_dir / fname, ds)
                erase = []
                if "erase" in f:
                    for e in f["erase"][()]:
                        o, _, fn = (e.decode() if isinstance(e, bytes) else e).partition(_SEP)
                        erase.append((o, fn))
                docs = {}
                if "documents" in f:
                    for kind, g in f["documents"].items():
                        for name, ds in g.items():
                            docs[(_from_h5(kind), _from_h5(name))] = (
                                ds[()].decode() if isinstance(ds[()], bytes) else str(ds[()])
                            )
        except StoreCorruptError:
            raise
        except (OSError, KeyError, ValueError, json.JSONDecodeError) as exc:
            if not file.exists():
                raise _Vanished(str(file)) from None
            raise StoreCorruptError(
                f"{file}: unreadable store segment ({type(exc).__name__}: {exc})"
            ) from None
        state.apply(
            add_models=add_models,
            slices=slices,
            weight_refs=refs,
            values=values,
            erase=erase,
            remove_models=remove,
            documents=docs,
        )

    def _read_array(self, ref: ArrayRef) -> np.ndarray:
        h5py = _h5py()
        try:
            with h5py.File(ref.file, "r") as f:
                return f[ref.dataset][()]
        except (OSError, KeyError) as exc:
            if not ref.file.exists():
                raise StaleRefError(str(ref.file)) from None
            raise StoreCorruptError(f"{ref.file}: cannot read {ref.dataset} ({exc})") from None

    # --- writing -------------------------------------------------------------------------
    def _next_seq(self) -> int:
        names = self._segment_files()
        return int(names[-1][:12]) + 1 if names else 1

    def _write_segment(self, name: str, fill) -> None:
        """Write a segment through a temporary file, fsync, and rename it into place."""
        h5py = _h5py()
        final = self.segments_dir / name
        tmp = self.segments_dir / f".tmp-{name}-{os.getpid()}"
        try:
            with h5py.File(tmp, "w", libver="latest") as f:
                f.attrs["format"] = SEGMENT_FORMAT
                f.attrs["layout_version"] = LAYOUT_VERSION
                f.attrs["seq"] = int(name[:12])
                f.attrs["created"] = time.time()
                fill(f, h5py.string_dtype())
                f.flush()
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            fsync_dir(self.segments_dir)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    @locked
    def compact(self) -> None:
        """Write the live state as one compaction segment, then delete what it supersedes.

        Weights (and arrays over COPY_LIMIT) are referenced, not copied, so compaction costs
        about the size of the field values. Readers that listed the old segments see them
        vanish, rebuild from the compaction, and go on.
        """
        self._lock.acquire(self._lock_timeout)
        self.refresh()
        seq = self._next_seq()
        state = self._state

        def fill(f, str_dt):
            for m, meta in state.models.items():
                f.require_group("models").create_group(_h5name(m)).attrs["meta"] = json.dumps(
                    meta, sort_keys=True, default=str
                )
            for uid, sl in state.slices.items():
                g = f.require_group("slices").create_group(_h5name(uid))
                g.attrs["info"] = slice_to_json(sl)
                ref = state.weight_refs.get(uid)
                if isinstance(ref, ArrayRef):
                    g.attrs["weights_ref"] = f"{ref.file.name}:{ref.dataset}"
            scalars: dict[Key, Any] = {}
            refs = []
            for key, v in state.values.items():
                if isinstance(v, ArrayRef):
                    if not v.file.exists():
                        raise StoreCorruptError(
                            f"{v.file}: missing segment (the value {key!r} lives in it); "
                            "the store is damaged, nothing was compacted"
                        )
                    with h5py_file(v.file) as src:
                        ds = src[v.dataset]
                        if ds.nbytes <= COPY_LIMIT:
                            f.require_group("arrays").require_group(_h5name(key[1])).create_dataset(
                                _h5name(key[0]), data=ds[()]
                            )
                        else:
                            refs.append(f"{key[0]}{_SEP}{key[1]}{_SEP}{v.file.name}:{v.dataset}")
                else:
                    scalars[key] = v
            _write_fields(f, scalars, str_dt)
            if refs:
                f.create_dataset("array_refs", data=np.array(refs, dtype=object), dtype=str_dt)
            for (kind, name), text in state.documents.items():
                f.require_group("documents").require_group(_h5name(kind)).create_dataset(
                    _h5name(name), data=text, dtype=str_dt
                )

        self._write_segment(f"{seq:012d}-c.h5", fill)
        self.refresh()
        self._collect_garbage()

    def _collect_garbage(self) -> None:
        """Delete segments that nothing live refers to and that a reader can no longer need.

        Files superseded by the newest compaction are kept until the next one: a reader
        whose snapshot predates the newest compaction still finds every file it lists, so
        concurrent readers keep reading a consistent snapshot without errors.
        """
        compactions = [n for n in self._segment_files() if n.endswith("-c.h5")]
        if len(compactions) < 2:
            return
        cutoff = compactions[-2]
        referenced = {
            r.file.name for r in self._state.weight_refs.values() if isinstance(r, ArrayRef)
        }
        referenced |= {v.file.name for v in self._state.values.values() if isinstance(v, ArrayRef)}
        for name in self._segment_files():
            if name < cutoff and name not in referenced:
                (self.segments_dir / name).unlink(missing_ok=True)

    def _commit(self, batch: Batch) -> None:
        self._lock.acquire(self._lock_timeout)  # released by close() / a finished ``with``
        self.refresh()
        seq = self._next_seq()

        def fill(f, str_dt):
            if batch.remove_models:
                f.create_dataset(
                    "remove_models", data=np.array(batch.remove_models, dtype=object), dtype=str_dt
                )
            for m, meta in batch.add_models.items():
                f.require_group("models").create_group(_h5name(m)).attrs["meta"] = json.dumps(
                    meta, sort_keys=True, default=str
                )
            for s in batch.slices:
                g = f.require_group("slices").create_group(_h5name(s.uid))
                g.attrs["info"] = slice_to_json(s)
                if s.uid in batch.weights:
                    arr = np.ascontiguousarray(to_numpy(batch.weights[s.uid]))
                    g.create_dataset("weights", data=arr, chunks=None)
                    del arr
            _write_fields(f, batch.fields, str_dt)
            if batch.erase:
                f.create_dataset(
                    "erase",
                    data=np.array([f"{o}{_SEP}{fn}" for o, fn in batch.erase], dtype=object),
                    dtype=str_dt,
                )
            for (kind, name), text in batch.documents.items():
                f.require_group("documents").require_group(_h5name(kind)).create_dataset(
                    _h5name(name), data=text, dtype=str_dt
                )

        self._write_segment(f"{seq:012d}.h5", fill)
        self.refresh()
        if len(self._seen) > COMPACT_EVERY:
            self.compact()


def h5py_file(path: Path):
    return _h5py().File(path, "r")


def _scalar(v: Any, kind: str) -> Any:
    if kind == "str":
        return v.decode() if isinstance(v, bytes) else str(v)
    if kind == "int":
        return int(v)
    if kind == "bool":
        return bool(v)
    return float(v)


def _kind(v: Any) -> str | None:
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, str):
        return "str"
    return None


def _write_fields(f: Any, fields: dict[Key, Any], str_dt: Any) -> None:
    scalars: dict[str, dict[str, list]] = {}
    for (owner, fname), v in fields.items():
        if isinstance(v, np.ndarray) and v.ndim > 0:
            f.require_group("arrays").require_group(_h5name(fname)).create_dataset(
                _h5name(owner), data=v
            )
            continue
        if isinstance(v, np.ndarray):
            v = v.item()
        kind = _kind(v)
        if kind is None:
            raise StoreError(
                f"field {fname!r} value of type {type(v).__name__} cannot be stored (use a number, str or ndarray)"
            )
        bucket = scalars.setdefault(fname, {"owners": [], "values": [], "kinds": set()})
        bucket["owners"].append(owner)
        bucket["values"].append(v)
        bucket["kinds"].add(kind)
    for fname, b in scalars.items():
        kinds = b["kinds"]
        kind = kinds.pop() if len(kinds) == 1 else ("str" if "str" in kinds else "float")
        g = f.require_group("fields").create_group(_h5name(fname))
        g.attrs["kind"] = kind
        g.create_dataset("owners", data=np.array(b["owners"], dtype=object), dtype=str_dt)
        if kind == "str":
            g.create_dataset(
                "values", data=np.array([str(x) for x in b["values"]], dtype=object), dtype=str_dt
            )
        elif kind == "int":
            g.create_dataset("values", data=np.array(b["values"], dtype=np.int64))
        elif kind == "bool":
            g.create_dataset("values", data=np.array(b["values"], dtype=bool))
        else:
            g.create_dataset("values", data=np.array(b["values"], dtype=np.float64))
