"""The Zarr store: a local folder or any fsspec URL (``memory://``, ``s3://``, ...).

Layout::

    <root>/diffract-store.json      marker (format, layout_version, backend "zarr", store_id)
    <root>/data/<seq>/<i>           Zarr v3 arrays of batch <seq> (weights, array fields)
    <root>/commits/<seq>.json       the batch's record, written LAST and atomically

A batch is committed when its record exists: arrays are written first, then the record
(a temporary file renamed into place on a local folder; a single object PUT on object
stores). Readers replay records in order and never see arrays of an uncommitted batch;
``data/<seq>`` folders without a record (a crash) are removed when a writer opens the store.
One writer per store is enforced with a lock file on local folders; on object stores the
caller must make sure of it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from diffract._errors import StoreCorruptError, StoreError
from diffract._vocab.arrays import to_numpy
from diffract.store._base import (
    LAYOUT_VERSION,
    Batch,
    StaleRefError,
    StoreState,
    slice_from_json,
    slice_to_json,
)
from diffract.store._folder import STORE_MARKER, check_version, is_marker_temp, is_url
from diffract.store._lock import WriterLock, atomic_write_text, fsync_dir
from diffract.store.log import RecordVanished, SegmentLog

#: array attribute: CRC-32 of the array's little-endian C-order bytes, checked on read
CRC_ATTR = "diffract_crc32"


def array_crc(arr: np.ndarray) -> int:
    """CRC-32 of ``arr``'s values (little-endian, C order): independent of how it is stored."""
    a = np.ascontiguousarray(arr)
    a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False))
    return zlib.crc32(a.reshape(-1).view(np.uint8))


def create_checked_array(group: Any, path: str, arr: np.ndarray) -> None:
    """Write ``arr`` at ``path`` with every chunk stored (no fill-value holes) and its CRC."""
    z = group.create_array(
        path,
        shape=arr.shape,
        dtype=arr.dtype,
        overwrite=True,
        attributes={CRC_ATTR: array_crc(arr)},
        config={"write_empty_chunks": True},
    )
    z[...] = arr


def check_array(z: Any, arr: np.ndarray, fs: Any, base: str) -> None:
    """Raise if ``arr`` (read from ``z`` at ``base``) is not what was written: Zarr reads a
    missing chunk as its fill value, so a deleted chunk file would otherwise give zeros
    silently. A missing chunk raises :class:`StaleRefError` naming it, other mismatches
    :class:`StoreCorruptError`. Arrays written before checksums pass unchecked."""
    want = z.attrs.get(CRC_ATTR)
    if want is None or array_crc(arr) == int(want):
        return
    missing: list[str] = []
    with contextlib.suppress(Exception):
        grid = itertools.product(*(range(n) for n in z.cdata_shape))
        for idx in itertools.islice(grid, 100_000):
            key = f"{base}/{z.metadata.encode_chunk_key(idx)}"
            if not fs.exists(key):
                missing.append(key)
    if missing:
        # deleted under a reader by a compaction's clean-up, or lost: the caller refreshes
        # and reads again once; still missing then, it is damage (StoreCorruptError)
        more = f", and {len(missing) - 1} more chunk(s)" if len(missing) > 1 else ""
        raise StaleRefError(
            missing[0], f"missing chunk file of array {base} (it would read as zeros{more})"
        )
    raise StoreCorruptError(
        f"{base}: array data does not match its checksum (a chunk file was changed); "
        "the store is damaged"
    )


class ZarrRef:
    """Where an array lives in the group, and the content digest its commit record
    recorded (``digest_key``, the value's cache key; None when not recorded)."""

    __slots__ = ("digest_key", "path")

    def __init__(self, path: str, digest_key: str | None = None) -> None:
        self.path = path
        self.digest_key = digest_key

    def cache_key(self) -> str:
        return self.path


class ZarrStore(SegmentLog):
    """A Zarr store on a local folder or an fsspec URL (see the module docstring).

    Takes the arguments of :class:`~diffract.store._base.PersistentStore`; ``path`` is a
    folder or a URL (``memory://``, ``s3://``, ...), and ``lock_timeout`` applies to local
    folders only (on object stores the caller makes sure there is one writer).
    """

    backend = "zarr"
    record_suffix = ".json"
    record_kind = "commit record"
    records_word = "records"

    def _open_log(self, path: str | os.PathLike[str]) -> None:
        import fsspec

        raw = os.fspath(path)
        self.remote = is_url(raw)
        if self.remote:
            self.fs, self.root = fsspec.core.url_to_fs(raw)
            self.path = raw
            self.url = raw
        else:
            local = Path(raw.removeprefix("file://")).expanduser().resolve()
            self.fs = fsspec.filesystem("file")
            self.root = str(local)
            self.path = str(local)
            self.url = str(local)
        self._lock = None if self.remote else WriterLock(Path(self.root) / "writer.lock", self.path)
        self._open()

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def _read_marker(self) -> dict[str, Any] | None:
        marker = self._join(STORE_MARKER)
        if not self.fs.exists(marker):
            return None
        try:
            info = json.loads(self.fs.cat_file(marker))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoreCorruptError(f"{marker}: unreadable store marker ({exc})") from None
        if not isinstance(info, dict) or info.get("format") != "diffract-store":
            raise StoreCorruptError(f"{marker}: not a diffract store marker")
        check_version(self.path, info.get("layout_version"))
        if info.get("backend") != "zarr":
            raise StoreCorruptError(
                f"{self.path}: a {info.get('backend')!r} store, opened as 'zarr'"
            )
        return info

    def _check_new_folder(self) -> None:
        """Refuse a foreign folder. Allowed: nothing, or what an interrupted (or a running)
        creation leaves (``writer.lock``, an empty ``commits/`` and the marker's temporary
        file: the marker is written last)."""
        if not self.fs.exists(self.root):
            return
        for p in self.fs.ls(self.root, detail=False):
            name = p.rstrip("/").rsplit("/", 1)[-1]
            if (name == "writer.lock" or is_marker_temp(name)) and not self.remote:
                continue
            if name == "commits" and self.fs.isdir(p) and not self.fs.ls(p, detail=False):
                continue
            raise StoreCorruptError(
                f"{self.path} exists but is not a diffract store (no {STORE_MARKER}); choose another path="
            )

    def _check_commits_folder(self) -> None:
        """A store whose ``commits/`` folder is gone is damaged, not new (its data would
        look like uncommitted batches and be deleted)."""
        commits = self._join("commits")
        if self.fs.exists(commits):
            return
        # local folders get commits/ before their marker; object stores have no empty
        # folders, so there only data without any record is damage (checked with orphans)
        if not self.remote:
            raise StoreCorruptError(
                f"{commits}: missing folder of commit records (the store's marker is there); "
                "the store is damaged, nothing was deleted"
            )

    def _open(self) -> None:
        if self.fs.exists(self.root) and not self.fs.isdir(self.root):
            raise StoreCorruptError(f"{self.path} is a file, not a diffract zarr store folder")
        info = self._read_marker()
        if info is None:
            self._check_new_folder()
            if self.readonly:
                raise StoreError(f"no diffract store at {self.path}")
            self.fs.makedirs(self.root, exist_ok=True)
        if not self.readonly and self._lock is not None:
            self._lock.acquire(self._lock_timeout)
        try:
            if info is None:
                info = self._read_marker()  # another writer may have created it meanwhile
            if info is None:
                import uuid

                self.fs.makedirs(self._join("commits"), exist_ok=True)
                info = {
                    "format": "diffract-store",
                    "layout_version": LAYOUT_VERSION,
                    "backend": "zarr",
                    "store_id": uuid.uuid4().hex,
                }
                self._put(STORE_MARKER, json.dumps(info, sort_keys=True))
            self._check_commits_folder()
            self.store_id = info.get("store_id", "")
        except BaseException:
            self.close()
            raise

    def _put(self, rel: str, text: str) -> None:
        if self.remote:
            self.fs.pipe_file(self._join(rel), text.encode())
        else:
            atomic_write_text(Path(self._join(rel)), text)

    # --- the log's steps ---------------------------------------------------------------------
    def _list_names(self) -> list[str]:
        d = self._join("commits")
        if not self.fs.exists(d):
            return []
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(d, detail=False)]

    def _record_path(self, name: str) -> str:
        return self._join("commits", name)

    def _data_seq(self, ref: Any) -> int | None:
        return int(ref.path.split("/")[1]) if isinstance(ref, ZarrRef) else None

    def _data_seqs(self) -> list[int]:
        data = self._join("data")
        if not self.fs.exists(data):
            return []
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(data, detail=False)]
        return [int(n) for n in names if n.isdigit()]

    def _data_path(self, seq: int) -> str:
        return self._join("data", f"{seq:012d}")

    def _delete_data(self, seq: int) -> None:
        self.fs.rm(self._data_path(seq), recursive=True)

    def _delete_record(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._record_path(name))

    def _read_record(self, name: str, state: StoreState) -> None:
        where = self._record_path(name)
        try:
            rec = json.loads(self.fs.cat_file(where))
            contents = _record_contents(rec)
        except FileNotFoundError:
            raise RecordVanished(where) from None
        except (
            OSError,
            UnicodeDecodeError,
            json.JSONDecodeError,
            KeyError,
            TypeError,
            ValueError,
        ) as exc:
            if not self.fs.exists(where):
                raise RecordVanished(where) from None
            raise StoreCorruptError(
                f"{where}: unreadable commit record ({type(exc).__name__}: {exc})"
            ) from None
        state.apply(**contents)

    def _write_compaction(self, name: str, state: StoreState) -> None:
        """One record holding the live state; its arrays are referenced, not copied."""
        scalars: dict[str, dict[str, Any]] = {}
        arrays: dict[str, dict[str, str]] = {}
        for (owner, fld), v in state.values.items():
            if isinstance(v, ZarrRef):
                arrays.setdefault(fld, {})[owner] = v.path
            else:
                scalars.setdefault(fld, {})[owner] = _json_scalar(v)
        rec = {
            "seq": int(name[:12]),
            "created": time.time(),
            "compaction": True,
            "models": state.models,
            "slices": [slice_to_json(s) for s in state.slices.values()],
            "weights": {u: r.path for u, r in state.weight_refs.items() if isinstance(r, ZarrRef)},
            "scalars": scalars,
            "arrays": arrays,
            "digests": {
                v.path: v.digest_key
                for v in state.values.values()
                if isinstance(v, ZarrRef) and v.digest_key
            },
            "documents": [[k, n, t] for (k, n), t in state.documents.items()],
        }
        self._put(f"commits/{name}", json.dumps(rec, sort_keys=True, default=str))

    def _write_record(self, name: str, batch: Batch) -> None:
        """The batch's arrays under ``data/<seq>/``, then its record (a crash in between
        leaves data without a record, removed when a writer next opens the store)."""
        import zarr

        tag = name[:12]
        scalars, arrays, array_fields = _split_fields(batch, tag)
        weights: dict[str, str] = {}
        root = zarr.open_group(self.url, mode="a")
        try:
            for s in batch.slices:
                if s.uid in batch.weights:
                    path = f"data/{tag}/{len(arrays) + len(weights)}"
                    arr = np.ascontiguousarray(to_numpy(batch.weights[s.uid]))
                    create_checked_array(root, path, arr)
                    weights[s.uid] = path
            for path, arr in arrays.items():
                create_checked_array(root, path, arr)
            rec = {
                "seq": int(tag),
                "created": time.time(),
                "models": batch.add_models,
                "remove_models": batch.remove_models,
                "slices": [slice_to_json(s) for s in batch.slices],
                "weights": weights,
                "scalars": scalars,
                "arrays": array_fields,
                # each array value's content digest: its cache key (see store/_cache.py)
                "digests": {path: _value_digest(arr) for path, arr in arrays.items()},
                "erase": [list(k) for k in batch.erase],
                "documents": [[k, n, t] for (k, n), t in batch.documents.items()],
            }
            self._put(f"commits/{name}", json.dumps(rec, sort_keys=True, default=str))
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm(self._join("data", tag), recursive=True)
            raise
        if not self.remote:
            fsync_dir(Path(self._join("commits")))

    def _read_array(self, ref: ZarrRef) -> np.ndarray:
        import zarr

        where = self._join(ref.path)
        try:
            z = zarr.open_array(self.url, path=ref.path, mode="r")
            arr = np.asarray(z[...])
        except Exception as exc:
            if not self.fs.exists(where):
                raise StaleRefError(where) from None
            raise StoreCorruptError(
                f"{where}: cannot read array {ref.path!r} of {self.path} ({type(exc).__name__}: {exc})"
            ) from None
        check_array(z, arr, self.fs, where)
        return arr


def _record_contents(rec: dict[str, Any]) -> dict[str, Any]:
    """A commit record's content, as keyword arguments of :meth:`StoreState.apply`."""
    values: dict = {}
    for fld, owners in rec.get("scalars", {}).items():
        for owner, v in owners.items():
            if isinstance(v, dict):  # see _split_fields
                re_, im = v["complex"]
                v = complex(float(re_), float(im))
            values[(owner, fld)] = v
    digests = rec.get("digests")
    digests = digests if isinstance(digests, dict) else {}
    for fld, owners in rec.get("arrays", {}).items():
        for owner, p in owners.items():
            d = digests.get(p)
            values[(owner, fld)] = ZarrRef(
                p, d if isinstance(d, str) and _DIGEST.fullmatch(d) else None
            )
    return {
        "add_models": rec.get("models", {}),
        "slices": [slice_from_json(t) for t in rec.get("slices", [])],
        "weight_refs": {uid: ZarrRef(p) for uid, p in rec.get("weights", {}).items()},
        "values": values,
        "erase": [tuple(e) for e in rec.get("erase", [])],
        "remove_models": rec.get("remove_models", []),
        "documents": {(d[0], d[1]): d[2] for d in rec.get("documents", [])},
    }


#: an array value's content digest as a commit record holds it
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _value_digest(arr: np.ndarray) -> str | None:
    """The content digest of an array value (:func:`diffract.store._codec.digest`)."""
    from diffract.store._codec import CodecError, digest

    try:
        return digest(arr)
    except CodecError:
        return None


def _json_scalar(v: Any) -> Any:
    """A scalar as the record holds it: JSON has no complex numbers (read back in
    :func:`_record_contents`)."""
    if isinstance(v, complex):
        return {"complex": [repr(v.real), repr(v.imag)]}
    return v


def _split_fields(
    batch: Batch, tag: str
) -> tuple[dict[str, dict[str, Any]], dict[str, np.ndarray], dict[str, dict[str, str]]]:
    """A batch's field values: scalars by field and owner, arrays by their data path, and
    each array's path by field and owner. Refuses a value that cannot be stored."""
    scalars: dict[str, dict[str, Any]] = {}
    arrays: dict[str, np.ndarray] = {}
    array_fields: dict[str, dict[str, str]] = {}
    for (owner, fld), v in batch.fields.items():
        if isinstance(v, np.ndarray) and v.ndim > 0:
            path = f"data/{tag}/{len(arrays)}"
            arrays[path] = v
            array_fields.setdefault(fld, {})[owner] = path
            continue
        if isinstance(v, (np.ndarray, np.generic)):
            v = v.item()
        if isinstance(v, complex):
            v = _json_scalar(v)
        elif not isinstance(v, (bool, int, float, str)):
            raise StoreError(
                f"field {fld!r} value of type {type(v).__name__} cannot be stored (use a number, str or ndarray)"
            )
        scalars.setdefault(fld, {})[owner] = v
    return scalars, arrays, array_fields
