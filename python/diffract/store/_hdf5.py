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
import time
import urllib.parse
from collections.abc import Callable
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
    StoreState,
    slice_from_json,
    slice_to_json,
)
from diffract.store._folder import open_store_folder, write_marker_if_missing
from diffract.store._lock import WriterLock, fsync_dir
from diffract.store._safe import check_h5, h5_dataset, plain_name, require_regular
from diffract.store.log import RecordVanished, SegmentLog

SEGMENT_FORMAT = "diffract-segment"


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


class HDF5Store(SegmentLog):
    """Folder of immutable HDF5 segments (see the module docstring).

    Takes the arguments of :class:`~diffract.store._base.PersistentStore`; ``path`` is the
    store folder.
    """

    backend = "hdf5"
    record_suffix = ".h5"
    record_kind = "segment"
    records_word = "segments"
    #: arrays up to this many bytes are copied into a compaction; larger ones are referenced
    COPY_LIMIT = 4 * 1024**2

    def _open_log(self, path: str | os.PathLike[str]) -> None:
        self.root = Path(path).expanduser().resolve()
        self.path = str(self.root)
        self.segments_dir = self.root / "segments"
        self._lock = WriterLock(self.root / "writer.lock", str(self.root))
        info = open_store_folder(self.root, "hdf5", create=not self.readonly)
        if info and not self.segments_dir.is_dir():
            # segments/ is made before the marker: a store without it is damaged, not new
            raise StoreCorruptError(
                f"{self.segments_dir}: missing folder of segments (the store's marker is "
                "there); the store is damaged, nothing was changed"
            )
        if not self.readonly:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock.acquire(self._lock_timeout)
            self.segments_dir.mkdir(exist_ok=True)
            info = write_marker_if_missing(self.root, "hdf5")
            for stale in self.segments_dir.glob(".tmp-*"):
                stale.unlink(missing_ok=True)
        self.store_id = info.get("store_id", "")

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.close()

    # --- the log's steps -------------------------------------------------------------------
    def _list_names(self) -> list[str]:
        if not self.segments_dir.exists():
            return []
        return [p.name for p in self.segments_dir.iterdir()]

    def _record_path(self, name: str) -> str:
        return str(self.segments_dir / name)

    def _data_seq(self, ref: Any) -> int | None:
        return int(ref.file.name[:12]) if isinstance(ref, ArrayRef) else None

    def _data_seqs(self) -> list[int]:
        # a segment holds its own data: it is deleted with its data (see _delete_record)
        return [int(n[:12]) for n in self._record_names()]

    def _data_path(self, seq: int) -> str:
        return self._record_path(self._name(seq))

    def _delete_data(self, seq: int) -> None:
        for compaction in (False, True):
            (self.segments_dir / self._name(seq, compaction=compaction)).unlink(missing_ok=True)

    def _delete_record(self, name: str) -> None:
        """Nothing to do: a segment is deleted with its data, unless its data is referenced."""

    def _read_record(self, name: str, state: StoreState) -> None:
        file = self.segments_dir / name
        require_regular(file, "store segment")  # a FIFO would block the open
        try:
            with _h5py().File(file, "r") as f:
                _check_segment(f, file)
                check_h5(f, file)
                contents = _segment_contents(f, file, self.segments_dir)
        except StoreCorruptError:
            raise
        except (
            OSError,
            KeyError,
            ValueError,
            TypeError,
            AttributeError,
            RuntimeError,
            IndexError,
            json.JSONDecodeError,
        ) as exc:  # h5py raises any of them on damaged bytes
            if not file.exists():
                raise RecordVanished(str(file)) from None
            raise StoreCorruptError(
                f"{file}: unreadable store segment ({type(exc).__name__}: {exc})"
            ) from None
        state.apply(**contents)

    def _write_record(self, name: str, batch: Batch) -> None:
        self._write_segment(name, lambda f, str_dt: _fill_batch(f, batch, str_dt))

    def _write_compaction(self, name: str, state: StoreState) -> None:
        """Weights (and arrays over ``COPY_LIMIT``) are referenced, not copied, so a
        compaction costs about the size of the field values."""
        limit = self.COPY_LIMIT
        self._write_segment(name, lambda f, str_dt: _fill_state(f, state, str_dt, limit))

    def _read_array(self, ref: ArrayRef) -> np.ndarray:
        h5py = _h5py()
        require_regular(ref.file, "store segment")
        try:
            with h5py.File(ref.file, "r") as f:
                return h5_dataset(f, ref.dataset, ref.file)[()]
        except StoreCorruptError:
            raise
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
            if not ref.file.exists():
                raise StaleRefError(str(ref.file)) from None
            raise StoreCorruptError(f"{ref.file}: cannot read {ref.dataset} ({exc})") from None

    def _write_segment(self, name: str, fill: Callable[[Any, Any], None]) -> None:
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


# --- reading a segment ------------------------------------------------------------------------


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _key(entry: Any) -> Key:
    """An ``owner<SEP>field`` entry as a key."""
    owner, _, fld = _text(entry).partition(_SEP)
    return (owner, fld)


def _check_segment(f: Any, file: Path) -> None:
    if f.attrs.get("format") != SEGMENT_FORMAT:
        raise StoreCorruptError(f"{file}: not a diffract segment (format attribute missing)")
    if int(f.attrs.get("layout_version", -1)) != LAYOUT_VERSION:
        raise StoreCorruptError(
            f"{file}: segment layout version {f.attrs.get('layout_version')} "
            f"(this diffract reads {LAYOUT_VERSION})"
        )


def _where(segments_dir: Path, where: str) -> ArrayRef:
    """An array referenced as ``<segment file>:<dataset>`` (in a compaction)."""
    fname, _, ds = where.partition(":")
    return ArrayRef(segments_dir / plain_name(fname, str(segments_dir)), ds)


def _segment_contents(f: Any, file: Path, segments_dir: Path) -> dict[str, Any]:
    """What an open segment holds, as keyword arguments of :meth:`StoreState.apply`."""
    add_models = {
        _from_h5(m): json.loads(f["models"][m].attrs["meta"]) for m in f.get("models", ())
    }
    slices, refs = [], {}
    for link, g in f.get("slices", {}).items():
        slices.append(slice_from_json(g.attrs["info"]))
        if "weights" in g:
            refs[_from_h5(link)] = ArrayRef(file, f"slices/{link}/weights")
        elif "weights_ref" in g.attrs:
            refs[_from_h5(link)] = _where(segments_dir, str(g.attrs["weights_ref"]))
    docs = {
        (_from_h5(kind), _from_h5(name)): _text(ds[()])
        for kind, g in f.get("documents", {}).items()
        for name, ds in g.items()
    }
    erase = [_key(e) for e in f["erase"][()]] if "erase" in f else []
    remove = [_text(s) for s in f["remove_models"][()]] if "remove_models" in f else []
    return {
        "add_models": add_models,
        "slices": slices,
        "weight_refs": refs,
        "values": _segment_values(f, file, segments_dir),
        "erase": erase,
        "remove_models": remove,
        "documents": docs,
    }


def _segment_values(f: Any, file: Path, segments_dir: Path) -> dict[Key, Any]:
    values: dict[Key, Any] = {}
    for link, g in f.get("fields", {}).items():
        fname = _from_h5(link)
        kind = g.attrs.get("kind", "float")
        for o, v in zip(g["owners"][()], g["values"][()], strict=True):
            values[(_text(o), fname)] = _scalar(v, kind)
    for flink, g in f.get("arrays", {}).items():
        for olink in g:
            values[(_from_h5(olink), _from_h5(flink))] = ArrayRef(file, f"arrays/{flink}/{olink}")
    if "array_refs" in f:
        for e in f["array_refs"][()]:
            o, fn, where = _text(e).split(_SEP)
            values[(o, fn)] = _where(segments_dir, where)
    return values


# --- writing a segment ------------------------------------------------------------------------


def _write_models(f: Any, models: dict[str, dict[str, Any]]) -> None:
    for m, meta in models.items():
        f.require_group("models").create_group(_h5name(m)).attrs["meta"] = json.dumps(
            meta, sort_keys=True, default=str
        )


def _write_documents(f: Any, documents: dict[tuple[str, str], str], str_dt: Any) -> None:
    for (kind, name), text in documents.items():
        f.require_group("documents").require_group(_h5name(kind)).create_dataset(
            _h5name(name), data=text, dtype=str_dt
        )


def _fill_batch(f: Any, batch: Batch, str_dt: Any) -> None:
    """Write one batch into the open segment ``f``."""
    if batch.remove_models:
        f.create_dataset(
            "remove_models", data=np.array(batch.remove_models, dtype=object), dtype=str_dt
        )
    _write_models(f, batch.add_models)
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
    _write_documents(f, batch.documents, str_dt)


def _fill_state(f: Any, state: StoreState, str_dt: Any, copy_limit: int) -> None:
    """Write the live ``state`` into the open compaction segment ``f``: arrays up to
    ``copy_limit`` bytes copied, larger ones and all weights referenced where they are."""
    _write_models(f, state.models)
    for uid, sl in state.slices.items():
        g = f.require_group("slices").create_group(_h5name(uid))
        g.attrs["info"] = slice_to_json(sl)
        ref = state.weight_refs.get(uid)
        if isinstance(ref, ArrayRef):
            g.attrs["weights_ref"] = f"{ref.file.name}:{ref.dataset}"
    scalars: dict[Key, Any] = {}
    refs = []
    for key, v in state.values.items():
        if not isinstance(v, ArrayRef):
            scalars[key] = v
            continue
        if not v.file.exists():
            raise StoreCorruptError(
                f"{v.file}: missing segment (the value {key!r} lives in it); "
                "the store is damaged, nothing was compacted"
            )
        with h5py_file(v.file) as src:
            ds = h5_dataset(src, v.dataset, v.file)
            if ds.nbytes <= copy_limit:
                f.require_group("arrays").require_group(_h5name(key[1])).create_dataset(
                    _h5name(key[0]), data=ds[()]
                )
            else:
                refs.append(f"{key[0]}{_SEP}{key[1]}{_SEP}{v.file.name}:{v.dataset}")
    _write_fields(f, scalars, str_dt)
    if refs:
        f.create_dataset("array_refs", data=np.array(refs, dtype=object), dtype=str_dt)
    _write_documents(f, state.documents, str_dt)


def h5py_file(path: Path):
    return _h5py().File(path, "r")


_INT64 = (-(2**63), 2**63 - 1)


def _scalar(v: Any, kind: str) -> Any:
    if kind == "str":
        return v.decode() if isinstance(v, bytes) else str(v)
    if kind == "int":
        return int(v)
    if kind == "bool":
        return bool(v)
    if kind == "complex":
        return complex(v)
    if kind == "tagged":
        return _untag(_text(v))
    return float(v)


def _kind(v: Any) -> str | None:
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, (complex, np.complexfloating)):
        return "complex"
    if isinstance(v, str):
        return "str"
    return None


def _native(v: Any, kind: str) -> bool:
    """Whether HDF5 holds ``v`` as its kind's dataset type exactly (int64, UTF-8 text)."""
    if kind == "int":
        return _INT64[0] <= int(v) <= _INT64[1]
    if kind == "str":
        if "\x00" in v:
            return False
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            return False
    return True


def _tag(v: Any, kind: str) -> str:
    """A scalar as tagged text: the kind's letter and an exact text form (a field whose
    values are of several kinds, or that HDF5 cannot hold natively, is stored this way)."""
    if kind == "str":
        return "s" + v.encode("utf-8", "surrogatepass").hex()
    if kind == "int":
        return f"i{int(v)}"
    if kind == "bool":
        return "b1" if v else "b0"
    if kind == "complex":
        c = complex(v)
        return f"c{c.real!r},{c.imag!r}"
    return f"f{float(v)!r}"


def _untag(t: str) -> Any:
    letter, body = t[:1], t[1:]
    if letter == "s":
        return bytes.fromhex(body).decode("utf-8", "surrogatepass")
    if letter == "i":
        return int(body)
    if letter == "b":
        return body == "1"
    if letter == "c":
        re_, _, im = body.partition(",")
        return complex(float(re_), float(im))
    if letter == "f":
        return float(body)
    raise ValueError(f"unknown tagged value {t[:20]!r}")


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
        bucket = scalars.setdefault(fname, {"owners": [], "values": [], "kinds": []})
        bucket["owners"].append(owner)
        bucket["values"].append(v)
        bucket["kinds"].append(kind)
    for fname, b in scalars.items():
        kinds = set(b["kinds"])
        kind = kinds.pop() if len(kinds) == 1 else "tagged"
        if kind != "tagged" and not all(_native(v, kind) for v in b["values"]):
            kind = "tagged"
        g = f.require_group("fields").create_group(_h5name(fname))
        g.attrs["kind"] = kind
        g.create_dataset("owners", data=np.array(b["owners"], dtype=object), dtype=str_dt)
        vals = b["values"]
        if kind == "tagged":
            tagged = [_tag(v, k) for v, k in zip(vals, b["kinds"], strict=True)]
            g.create_dataset("values", data=np.array(tagged, dtype=object), dtype=str_dt)
        elif kind == "str":
            g.create_dataset("values", data=np.array(vals, dtype=object), dtype=str_dt)
        elif kind == "int":
            g.create_dataset("values", data=np.array([int(x) for x in vals], dtype=np.int64))
        elif kind == "bool":
            g.create_dataset("values", data=np.array(vals, dtype=bool))
        elif kind == "complex":
            g.create_dataset("values", data=np.array(vals, dtype=np.complex128))
        else:
            g.create_dataset("values", data=np.array(vals, dtype=np.float64))
