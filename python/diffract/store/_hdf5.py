"""The default store: a folder of immutable HDF5 segment files.

Layout (readable with h5py alone, documented in docs/storage.md)::

    <store>/                      e.g. ./.diffract
      diffract-store.json         {"format": "diffract-store", "layout_version": 1, "backend": "hdf5"}
      writer.lock                 flock-ed by the one writing process (holds its pid)
      segments/
        000000000001.h5           one committed batch each, never modified after rename
        000000000001.h5.json      its manifest: contents and checksum, read without h5py
        000000000002.h5
        000000000002.h5.json
        .tmp-...                  a batch being written (ignored by readers, removed on open)

Each batch is written to a temporary file, flushed and fsync-ed, then ``os.replace``-d to
its final name, which is atomic. HDF5 writes it through :class:`GuardedFile`, so a full disk
is an ``OSError`` naming it (never a crash in the HDF5 library) and the temporary file is
removed. A process killed at any moment therefore leaves either the
whole segment or none of it: readers never see a half-written field, and nothing committed
before is touched. Readers list ``segments/`` and replay the files in sequence order.

The manifest (:mod:`diffract.store._manifest`, docs/concepts/segments.md) is renamed into
place just before its segment: a reader replays a segment from its manifest alone, without
importing h5py, and hashes a segment file before h5py first opens it. A segment without a
manifest (written before manifests existed) is replayed through h5py as it always was.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from itertools import repeat, zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from diffract._errors import StoreCorruptError, StoreError
from diffract._vocab.arrays import scalar_kind, to_numpy
from diffract._vocab.slices import SliceInfo
from diffract.store._base import (
    LAYOUT_VERSION,
    Batch,
    Key,
    Parts,
    StaleRefError,
    StoreState,
    slice_from_json,
    slice_to_json,
    slices_from_columns,
    slices_to_columns,
)
from diffract.store._folder import STORE_MARKER, open_store_folder, write_marker_if_missing
from diffract.store._lock import WriterLock, atomic_write_text, fsync_dir
from diffract.store._manifest import (
    TOO_DEEP,
    file_digest,
    manifest_path,
    read_manifest,
    verify_file,
    write_manifest,
)
from diffract.store._safe import check_h5, h5_dataset, plain_name, require_regular
from diffract.store.log import RecordVanished, SegmentLog

SEGMENT_FORMAT = "diffract-segment"
#: the layout of a compaction written by this version: its slices are two string datasets
#: (``slice_infos``, ``weights_refs``) instead of one group each, so a compaction writes a
#: few HDF5 objects, not several per slice (an older diffract refuses it by this number)
COMPACTION_LAYOUT = 2
#: a segment file or its manifest: ``<12 digits>[-c].h5[.json]``
_DATA_NAME = re.compile(r"^\d{12}(-c)?\.h5(\.json)?$")
#: a manifest's temporary file (``atomic_write_text``: ``.<name>.<random>.tmp``)
_STALE_MANIFEST = re.compile(r"^\..*\.json\..*\.tmp$", re.S)


_SEP = "\x1f"
#: an array value's content digest as a manifest records it
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
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
    """Where an array value lives: (segment file, dataset path), the file's checksum from
    its manifest (None for a segment written without one) and the value's own content
    digest from it (``digest_key``, :func:`diffract.store._codec.digest`; None when not
    recorded): a cache key that every cache checks its entries against. Immutable."""

    __slots__ = ("dataset", "digest", "digest_key", "file")

    def __init__(
        self, file: Path, dataset: str, digest: str | None = None, digest_key: str | None = None
    ) -> None:
        self.file = file
        self.dataset = dataset
        self.digest = digest
        self.digest_key = digest_key

    def cache_key(self) -> str:
        return f"{self.file.name}/{self.dataset}"

    def where(self) -> str:
        """``<segment file name>:<dataset>``, as a compaction refers to it."""
        return f"{self.file.name}:{self.dataset}"


class HDF5Store(SegmentLog):
    """Folder of immutable HDF5 segments (see the module docstring).

    Takes the arguments of :class:`~diffract.store._base.PersistentStore`; ``path`` is the
    store folder.
    """

    backend = "hdf5"
    record_suffix = ".h5"
    record_kind = "segment"
    records_word = "segments"
    #: arrays up to this many bytes are copied into a compaction from the segments written
    #: since the one before (so those can be deleted); larger ones, and every array already
    #: in a compaction, are referenced where they are: a compaction copies only what changed
    #: since the last (copying every array again made each compaction of a 50-checkpoint
    #: store slower than the one before, up to a minute here)
    COPY_LIMIT = 4 * 1024**2
    #: a segment holding at least this many live arrays is kept and referenced, not copied
    #: from: copying is for the stragglers (a few arrays keeping a file alive), and a
    #: training run's batches of whole-model ESDs stay where they were written
    KEEP_ARRAYS = 16

    def _open_log(self, path: str | os.PathLike[str]) -> None:
        self.root = Path(path).expanduser().resolve()
        self.path = str(self.root)
        self.segments_dir = self.root / "segments"
        #: record name -> the older segments it refers to (from its manifest; immutable)
        self._refers: dict[str, set[int]] = {}
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
            info = write_marker_if_missing(self.root, "hdf5", manifests=MANIFESTS)
            for name in os.listdir(self.segments_dir):  # a segment, a manifest being written
                if name.startswith(".tmp-") or _STALE_MANIFEST.match(name):
                    (self.segments_dir / name).unlink(missing_ok=True)
            info = _mark_manifests(self.root, self.segments_dir, info)
        self.store_id = info.get("store_id", "")
        #: every segment has a manifest (the marker says so): one without is damage
        self._manifests = bool(info.get("manifests"))
        #: the lowest sequence number of a segment replayed from its manifest
        self._first_manifest: int | None = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.close()

    # --- the log's steps -------------------------------------------------------------------
    def _refers_to(self, compaction: str) -> set[int] | None:
        return self._refers.get(compaction)

    def _list_names(self) -> list[str]:
        try:
            return os.listdir(self.segments_dir)
        except FileNotFoundError:
            return []

    def _record_path(self, name: str) -> str:
        return str(self.segments_dir / name)

    def _data_seq(self, ref: Any) -> int | None:
        return int(ref.file.name[:12]) if isinstance(ref, ArrayRef) else None

    def _data_seqs(self) -> list[int]:
        # a segment holds its own data: it is deleted with its data (see _delete_record);
        # a manifest without its segment is the batch a crash interrupted
        return sorted({int(n[:12]) for n in self._list_names() if _DATA_NAME.match(n)})

    def _data_path(self, seq: int) -> str:
        return self._record_path(self._name(seq))

    def _delete_data(self, seq: int) -> None:
        for compaction in (False, True):
            segment = self.segments_dir / self._name(seq, compaction=compaction)
            segment.unlink(missing_ok=True)  # the segment first: a listed one has its manifest
            manifest_path(segment).unlink(missing_ok=True)

    def _delete_record(self, name: str) -> None:
        """Nothing to do: a segment is deleted with its data, unless its data is referenced."""

    def _read_record(self, name: str, state: StoreState) -> None:
        file = self.segments_dir / name
        manifest = manifest_path(file)
        if os.path.lexists(manifest):
            refers = _replay_manifest(manifest, file, self.segments_dir, state)
            self._refers[name] = {int(n[:12]) for n in refers if _DATA_NAME.match(n)}
            seq = int(name[:12])
            if self._first_manifest is None or seq < self._first_manifest:
                self._first_manifest = seq
            return
        self._check_manifest_missing(file)
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

    def _check_manifest_missing(self, file: Path) -> None:
        """Refuse the segment ``file``, found without its manifest, in a store whose segments
        have manifests: the marker says so, or an earlier segment has one (a version that
        writes manifests writes one for every later segment). Only stores from before
        manifests existed replay segments without one (unchecked, through h5py).

        Raises:
            StoreCorruptError: the manifest is missing; nothing was read from the segment.
        """
        seq = int(file.name[:12])
        earlier = self._first_manifest is not None and self._first_manifest < seq
        if not (self._manifests or earlier):
            return
        if not os.path.lexists(file):
            raise RecordVanished(str(file))
        why = (
            f"{STORE_MARKER} says every segment has one"
            if self._manifests
            else f"segment {self._first_manifest:012d} before it has one"
        )
        raise StoreCorruptError(
            f"{manifest_path(file)}: missing manifest of the segment {file.name} ({why}, so "
            "its checksum cannot be checked); the store is damaged, nothing was read from it"
        )

    def _write_record(self, name: str, batch: Batch) -> None:
        self._write_segment(name, lambda f, str_dt, check: _fill_batch(f, batch, str_dt, check))

    def _write_compaction(self, name: str, state: StoreState) -> None:
        """Weights and arrays (over ``COPY_LIMIT``) are referenced, not copied, so a
        compaction costs about the size of the slices and scalar values."""
        limit = (self.COPY_LIMIT, self.KEEP_ARRAYS)
        self._write_segment(
            name,
            lambda f, str_dt, check: _fill_state(f, state, str_dt, limit, check),
            COMPACTION_LAYOUT,
        )

    def _read_array(self, ref: ArrayRef) -> np.ndarray:
        require_regular(ref.file, "store segment")
        try:
            with open_segment(ref) as f:
                return h5_dataset(f, ref.dataset, ref.file)[()]
        except StoreCorruptError:
            raise
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
            if not ref.file.exists():
                raise StaleRefError(str(ref.file)) from None
            raise StoreCorruptError(f"{ref.file}: cannot read {ref.dataset} ({exc})") from None

    def _write_segment(
        self,
        name: str,
        fill: Callable[[Any, Any, Callable[[], None]], dict[str, Any]],
        layout: int = LAYOUT_VERSION,
    ) -> None:
        """Write a segment through a temporary file; write its manifest (with the file's
        checksum), fsync, and rename the segment into place: that rename commits it.

        Raises:
            OSError: a write failed (a full disk: errno ``ENOSPC``); nothing was committed.
        """
        final = self.segments_dir / name
        tmp = self.segments_dir / f".tmp-{name}-{os.getpid()}"
        try:
            with create_h5(tmp, libver="latest") as (f, check):
                f.attrs["format"] = SEGMENT_FORMAT
                f.attrs["layout_version"] = layout
                f.attrs["seq"] = int(name[:12])
                f.attrs["created"] = time.time()
                body = fill(f, _h5py().string_dtype(), check)
            body.update(segment=name, size=tmp.stat().st_size, digest=file_digest(tmp))
            write_manifest(manifest_path(final), *_split_manifest(body))
            os.replace(tmp, final)
            fsync_dir(self.segments_dir)
        except BaseException:
            tmp.unlink(missing_ok=True)
            if not final.exists():  # a manifest without its segment: not committed
                manifest_path(final).unlink(missing_ok=True)
            raise


# --- manifests ------------------------------------------------------------------------------

#: the marker entry saying that every segment of the store has a manifest (stores created by
#: this version, and older ones a writer found whole): a segment without one is then damage
MANIFESTS = 1


def _mark_manifests(root: Path, segments_dir: Path, info: dict[str, Any]) -> dict[str, Any]:
    """The marker ``info``, with ``"manifests"`` added (and written) when every segment in
    ``segments_dir`` has its manifest: a store created before the marker said so, by a
    version that already wrote manifests. A store that holds segments without one (from
    before manifests existed) is left as it is."""
    if info.get("manifests"):
        return info
    names = set(os.listdir(segments_dir))
    segments = [n for n in names if _DATA_NAME.match(n) and n.endswith(".h5")]
    if any(manifest_path(Path(n)).name not in names for n in segments):
        return info
    info = {**info, "manifests": MANIFESTS}
    atomic_write_text(root / STORE_MARKER, json.dumps(info, sort_keys=True))
    return info


# --- writing an HDF5 file safely --------------------------------------------------------------


class GuardedFile:
    """The file a new HDF5 file is written through (h5py's ``fileobj`` driver), so that the
    HDF5 library never sees a write fail.

    HDF5 does not recover from a failed write: after one (a full disk, a quota, a file size
    limit), its flush and close fail too, and the library is left in a state where a later
    call crashes the process (SIGSEGV in ``File.flush`` or ``close``). Here the first failed
    write is recorded instead; it and every later write are kept in memory, so whatever
    HDF5 reads back is what it wrote, and :meth:`check` raises the recorded error. The writer
    calls it between datasets (so little is held in memory) and once the file is closed;
    the file, now incomplete, is deleted by its caller.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644
        )
        self._pos = 0
        self._size = 0
        #: the first write that failed; from then on writes are kept in ``_held``
        self.error: OSError | None = None
        self._held: dict[int, bytes] = {}  # offset -> bytes, oldest first

    def check(self) -> None:
        """Raise the error of the first write that failed, if one did."""
        if self.error is not None:
            raise self.error

    # --- the file methods h5py's fileobj driver calls ---------------------------------------
    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def write(self, data: Any) -> int:
        offset, view = self._pos, memoryview(data).cast("B")
        n = len(view)
        if self.error is None:
            try:
                done = 0
                while done < n:
                    done += os.pwrite(self._fd, view[done:], offset + done)  # type: ignore[arg-type]
            except OSError as exc:
                self.error = exc
        if self.error is not None:
            self._held.pop(offset, None)
            self._held[offset] = bytes(view)
        self._pos = offset + n
        self._size = max(self._size, self._pos)
        return n

    def read(self, n: int = -1) -> bytes:
        offset = self._pos
        n = max(self._size - offset, 0) if n < 0 else n
        out = bytearray(os.pread(self._fd, n, offset))  # type: ignore[arg-type]
        out.extend(bytes(n - len(out)))  # past the end: zeros, as HDF5's own driver reads
        for at, held in self._held.items():
            lo, hi = max(at, offset), min(at + len(held), offset + n)
            if lo < hi:
                out[lo - offset : hi - offset] = held[lo - at : hi - at]
        self._pos = offset + n
        return bytes(out)

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        self._size = size
        if self.error is None:
            try:
                os.ftruncate(self._fd, size)  # type: ignore[arg-type]
            except OSError as exc:
                self.error = exc
        return size

    def flush(self) -> None:
        """Nothing: writes are not buffered here (the file is fsync-ed when complete)."""

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def sync(self) -> None:
        """fsync the file (raises the recorded error, or the fsync's own)."""
        self.check()
        os.fsync(self._fd)  # type: ignore[arg-type]


@contextlib.contextmanager
def create_h5(path: Path, **kwargs: Any) -> Iterator[tuple[Any, Callable[[], None]]]:
    """Create the HDF5 file ``path`` through a :class:`GuardedFile`: yields the open h5py
    file and a ``check()`` to call between large writes; the file is closed and fsync-ed
    on leaving.

    Raises:
        OSError: a write failed (errno ``ENOSPC`` for a full disk); ``path`` is then
            incomplete and the caller deletes it.
    """
    guard = GuardedFile(path)
    try:
        with _h5py().File(guard, "w", **kwargs) as f:
            yield f, guard.check
        guard.sync()
    finally:
        guard.close()


def _no_check() -> None:
    """The check of a writer that cannot run out of room mid-file (see :func:`create_h5`)."""


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
    if int(f.attrs.get("layout_version", -1)) not in (LAYOUT_VERSION, COMPACTION_LAYOUT):
        raise StoreCorruptError(
            f"{file}: segment layout version {f.attrs.get('layout_version')} "
            f"(this diffract reads {LAYOUT_VERSION} and {COMPACTION_LAYOUT})"
        )


def _where(segments_dir: Path, where: str) -> ArrayRef:
    """An array referenced as ``<segment file>:<dataset>`` (in a compaction)."""
    fname, _, ds = where.partition(":")
    return ArrayRef(segments_dir / plain_name(fname, str(segments_dir)), ds)


#: the manifest entries a store reads when it opens (the rest, its body, on first need)
_HEAD_KEYS = ("segment", "size", "digest", "files", "models", "remove_models", "documents")


def _split_manifest(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A segment's manifest entries as (head, body) (see :func:`write_manifest`)."""
    head = {k: body[k] for k in _HEAD_KEYS}
    return head, {k: v for k, v in body.items() if k not in head}


def _replay_manifest(manifest: Path, file: Path, segments_dir: Path, state: StoreState) -> set[str]:
    """Replay the segment ``file`` from its manifest alone (h5py is not imported): its models
    and documents now, its slices and values when the state first needs them. Returns the
    names of the older segment files it refers to.

    Raises:
        RecordVanished: the segment or its manifest is gone (a compaction removed them).
        StoreCorruptError: the manifest is damaged, or describes another segment.
    """
    try:
        read = read_manifest(manifest)
    except FileNotFoundError:
        raise RecordVanished(str(file)) from None
    head = read.head
    with _unreadable(manifest):
        if str(head["segment"]) != file.name:
            raise StoreCorruptError(
                f"{file}: its manifest describes {str(head['segment'])[:40]!r}; the store is "
                "damaged"
            )
        size = int(head["size"])
        models = {str(m): _meta(t) for m, t in head["models"].items()}
        removed = [str(m) for m in head["remove_models"]]
        documents = {(str(k), str(n)): str(t) for k, n, t in head["documents"]}
        digests = {str(k): str(v) for k, v in head["files"].items()}
        digests[file.name] = str(head["digest"])
    try:
        found = os.stat(file).st_size
    except FileNotFoundError:
        raise RecordVanished(str(file)) from None
    require_regular(file, "store segment")
    if found != size:  # a truncated or replaced segment, found without reading it
        raise StoreCorruptError(
            f"{file}: {found} bytes, its manifest recorded {size}; the segment is damaged or "
            "was replaced"
        )

    def parts() -> Parts:
        with _unreadable(manifest):
            return _manifest_parts(read.body(), file, segments_dir, digests, size)

    state.defer(add_models=models, remove_models=removed, documents=documents, parts=parts)
    return set(digests) - {file.name}


@contextlib.contextmanager
def _unreadable(manifest: Path) -> Iterator[None]:
    """Turn a malformed entry of a (hash-consistent, so crafted) manifest into a
    :class:`StoreCorruptError` naming it."""
    try:
        yield
    except StoreCorruptError:
        raise
    except RecursionError:  # a model's meta nested thousands deep
        raise StoreCorruptError(f"{manifest}: unreadable manifest: {TOO_DEEP}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise StoreCorruptError(
            f"{manifest}: unreadable manifest ({type(exc).__name__}: {exc})"
        ) from None


def _meta(text: Any) -> dict[str, Any]:
    meta = json.loads(text)
    if not isinstance(meta, dict):
        raise TypeError("a model's meta is not a JSON object")
    return meta


def _manifest_slices(entry: Any) -> list[SliceInfo]:
    """A manifest's slices: columns (version 2) or one JSON text each (version 1)."""
    if isinstance(entry, dict):
        return slices_from_columns(entry)
    return [slice_from_json(t) for t in entry]


def _check_claims(
    slices: list[SliceInfo], weight_refs: dict[str, ArrayRef], sizes: dict[str, int]
) -> None:
    """Refuse a slice whose claimed shape cannot fit in the file holding its weights (at
    least one byte per element): a crafted shape is caught when the store is read, before
    anything shows it (the exact shape is checked when the weights are read).

    Raises:
        StoreCorruptError: naming the slice, its shape and the file's size.
    """
    for s in slices:
        ref = weight_refs.get(s.uid)
        if ref is None:
            continue
        name = ref.file.name
        if name not in sizes:
            try:
                sizes[name] = os.stat(ref.file).st_size
            except OSError:
                sizes[name] = -1  # missing: reading the weights says so
        n = 1
        for d in s.shape:
            if not isinstance(d, int) or d < 0:
                raise ValueError(f"slice {s.name!r}: shape {tuple(s.shape)!r}")
            n *= d
        if sizes[name] >= 0 and n > sizes[name]:
            raise StoreCorruptError(
                f"{ref.file}: slice {s.model_id}:{s.name} claims the shape {tuple(s.shape)} "
                f"({n} elements), more than its weights' file of {sizes[name]} bytes holds; "
                "the store is damaged or crafted"
            )


def _manifest_parts(
    body: dict[str, Any], file: Path, segments_dir: Path, digests: dict[str, str], size: int = -1
) -> Parts:
    """A segment's slices, weight references, values and erased keys from its manifest."""
    files: dict[str, tuple[Path, str | None]] = {"": (file, digests[file.name])}

    def ref(name: str, dataset: str, value_digest: str | None = None) -> ArrayRef:
        known = files.get(name)
        if known is None:  # each file's name checked and its path built once
            path = segments_dir / plain_name(name, str(segments_dir))
            known = files[name] = (path, digests.get(path.name))
        return ArrayRef(known[0], str(dataset), known[1], value_digest)

    values: dict[Key, Any] = {}
    for fname, (owners, tags) in body["values"].items():
        keys = zip(map(str, owners), repeat(str(fname)))  # repeat(): endless, so no strict=
        values.update(zip(keys, map(_untag, tags), strict=True))
    arrays = body["arrays"]
    # each array's content digest (written since issue 28; absent in older manifests)
    found = body.get("array_digests")
    value_digests = found if isinstance(found, list) and len(found) == len(arrays) else ()
    for (o, fname, name, dataset), d in zip_longest(arrays, value_digests):
        d = d if isinstance(d, str) and _DIGEST.fullmatch(d) else None
        values[(str(o), str(fname))] = ref(name, dataset, d)
    slices = _manifest_slices(body["slices"])
    weight_refs = {u: ref(name, ds) for u, (name, ds) in body["weights"].items()}
    _check_claims(slices, weight_refs, {file.name: int(size)})
    return Parts(
        slices=slices,
        weight_refs=weight_refs,
        values=values,
        erase=[(str(o), str(fn)) for o, fn in body["erase"]],
    )


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
    if "slice_infos" in f:  # a compaction of layout 2
        slices.extend(slice_from_json(_text(t)) for t in f["slice_infos"][()])
        for e in f["weights_refs"][()] if "weights_refs" in f else ():
            uid, _, where = _text(e).partition(_SEP)
            refs[uid] = _where(segments_dir, where)
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


def _body(
    models: dict[str, dict[str, Any]], slices: Any, documents: dict[tuple[str, str], str]
) -> dict[str, Any]:
    """The manifest entries of a segment's models, slices and documents (the texts the
    segment holds, so both read back alike)."""
    return {
        "models": {m: json.dumps(meta, sort_keys=True, default=str) for m, meta in models.items()},
        "slices": slices_to_columns(slices),
        "documents": [[kind, name, text] for (kind, name), text in documents.items()],
    }


def _fill_batch(
    f: Any, batch: Batch, str_dt: Any, check: Callable[[], None] = _no_check
) -> dict[str, Any]:
    """Write one batch into the open segment ``f``; return its manifest body. ``check()``
    is called before each array (it raises once a write failed, see :func:`create_h5`)."""
    body = _body(batch.add_models, batch.slices, batch.documents)
    if batch.remove_models:
        f.create_dataset(
            "remove_models", data=np.array(batch.remove_models, dtype=object), dtype=str_dt
        )
    _write_models(f, batch.add_models)
    weights = {}
    for s in batch.slices:
        g = f.require_group("slices").create_group(_h5name(s.uid))
        g.attrs["info"] = slice_to_json(s)
        if s.uid in batch.weights:
            check()
            arr = np.ascontiguousarray(to_numpy(batch.weights[s.uid]))
            g.create_dataset("weights", data=arr, chunks=None)
            weights[s.uid] = ["", f"slices/{_h5name(s.uid)}/weights"]
            del arr
    body["values"], body["arrays"] = _write_fields(f, batch.fields, str_dt, check)
    body["array_digests"] = [_value_digest(batch.fields[(o, fn)]) for o, fn, *_ in body["arrays"]]
    if batch.erase:
        f.create_dataset(
            "erase",
            data=np.array([f"{o}{_SEP}{fn}" for o, fn in batch.erase], dtype=object),
            dtype=str_dt,
        )
    _write_documents(f, batch.documents, str_dt)
    body.update(
        weights=weights,
        erase=[list(k) for k in batch.erase],
        remove_models=list(batch.remove_models),
        files={},
    )
    return body


def _fill_state(
    f: Any,
    state: StoreState,
    str_dt: Any,
    copy_limit: tuple[int, int],
    check: Callable[[], None] = _no_check,
) -> dict[str, Any]:
    """Write the live ``state`` into the open compaction segment ``f``: ``copy_limit`` is
    (bytes, arrays): arrays up to that many bytes copied from segments that are not
    compactions and hold fewer live arrays than that; all others and all weights referenced.
    Return its manifest body, with the checksum of every older file it refers to."""
    body = _body(state.models, state.slices.values(), state.documents)
    _write_models(f, state.models)
    weights, referenced = {}, []
    for uid in state.slices:
        ref = state.weight_refs.get(uid)
        if isinstance(ref, ArrayRef):
            weights[uid] = [ref.file.name, ref.dataset]
            referenced.append(ref)
    if state.slices:
        infos = [slice_to_json(s) for s in state.slices.values()]
        f.create_dataset("slice_infos", data=np.array(infos, dtype=object), dtype=str_dt)
    if weights:
        entries = [f"{uid}{_SEP}{n}:{ds}" for uid, (n, ds) in weights.items()]
        f.create_dataset("weights_refs", data=np.array(entries, dtype=object), dtype=str_dt)
    scalars: dict[Key, Any] = {}
    by_file: dict[Path, list[tuple[Key, ArrayRef]]] = {}
    for key, v in state.values.items():
        if not isinstance(v, ArrayRef):
            scalars[key] = v
            continue
        by_file.setdefault(v.file, []).append((key, v))
    refs, arrays = _place_arrays(f, by_file, copy_limit, referenced, check)
    body["values"], own = _write_fields(f, scalars, str_dt, check)
    if refs:
        f.create_dataset("array_refs", data=np.array(refs, dtype=object), dtype=str_dt)
    _write_documents(f, state.documents, str_dt)
    known = {k: v.digest_key for k, v in state.values.items() if isinstance(v, ArrayRef)}
    body.update(
        weights=weights,
        arrays=arrays + own,
        array_digests=[known.get((o, fn)) for o, fn, *_ in arrays]
        + [_value_digest(scalars[(o, fn)]) for o, fn, *_ in own],
        erase=[],
        remove_models=[],
        files=_digests(referenced),
    )
    return body


def _place_arrays(
    f: Any,
    by_file: dict[Path, list[tuple[Key, ArrayRef]]],
    copy_limit: tuple[int, int],
    referenced: list[ArrayRef],
    check: Callable[[], None] = _no_check,
) -> tuple[list[str], list[list[str]]]:
    """Copy the arrays of up to ``copy_limit`` bytes into the compaction ``f`` and refer to
    the others where they are (appended to ``referenced``). Return the segment's
    ``array_refs`` entries and the manifest's ``arrays``."""
    refs, arrays = [], []
    for file, items in by_file.items():
        if not file.exists():
            raise StoreCorruptError(
                f"{file}: missing segment (the value {items[0][0]!r} lives in it); "
                "the store is damaged, nothing was compacted"
            )
        copied: set[Key] = set()
        nbytes, keep = copy_limit
        if nbytes > 0 and "-c" not in file.name and len(items) < keep:
            with open_segment(items[0][1]) as src:  # each source file opened (and checked) once
                for key, v in items:
                    ds = h5_dataset(src, v.dataset, v.file)
                    if ds.nbytes <= nbytes:
                        check()
                        dataset = f"arrays/{_h5name(key[1])}/{_h5name(key[0])}"
                        f.create_dataset(dataset, data=ds[()])
                        arrays.append([*key, "", dataset])
                        copied.add(key)
        for key, v in items:
            if key not in copied:
                refs.append(f"{key[0]}{_SEP}{key[1]}{_SEP}{v.where()}")
                arrays.append([*key, v.file.name, v.dataset])
                referenced.append(v)
    return refs, arrays


def _value_digest(value: Any) -> str | None:
    """The content digest of an array value as a reader reads it back (None: not one)."""
    from diffract.store._codec import CodecError, digest

    try:
        return digest(np.asarray(value))
    except CodecError:
        return None


def _digests(refs: list[ArrayRef]) -> dict[str, str]:
    """The checksum of each file ``refs`` live in (hashed now for a file whose segment had
    no manifest: from this compaction on, it is checked too)."""
    out: dict[str, str] = {}
    for ref in refs:
        name = ref.file.name
        if name not in out:
            try:
                out[name] = ref.digest or file_digest(ref.file)
            except FileNotFoundError:
                raise StoreCorruptError(
                    f"{ref.file}: missing segment (it holds {ref.dataset}); the store is "
                    "damaged, nothing was compacted"
                ) from None
    return out


@contextlib.contextmanager
def open_segment(ref: ArrayRef) -> Iterator[Any]:
    """The segment file of ``ref`` open in h5py, after its bytes were checked against the
    checksum its manifest recorded (once per process; no check for a segment without one).

    Raises:
        StoreCorruptError: the file's bytes changed since it was committed.
        FileNotFoundError: the file is missing.
    """
    if ref.digest is not None:
        verify_file(ref.file, ref.digest)
    with _h5py().File(ref.file, "r") as f:
        yield f


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
    if letter == "f":  # the common kinds first: a store holds tens of thousands of them
        return float(body)
    if letter == "i":
        return int(body)
    if letter == "s":
        return bytes.fromhex(body).decode("utf-8", "surrogatepass")
    if letter == "b":
        return body == "1"
    if letter == "c":
        re_, _, im = body.partition(",")
        return complex(float(re_), float(im))
    raise ValueError(f"unknown tagged value {t[:20]!r}")


def _write_fields(
    f: Any, fields: dict[Key, Any], str_dt: Any, check: Callable[[], None] = _no_check
) -> tuple[dict[str, list[list[str]]], list[list[str]]]:
    """Write ``fields`` into the open segment ``f``: scalars grouped per field as one dataset
    of their kind, arrays one dataset each. Return the manifest's ``values`` (per field, the
    owners and the tagged values) and ``arrays`` (owner, field, "", dataset)."""
    scalars: dict[str, dict[str, list]] = {}
    arrays = []
    for (owner, fname), v in fields.items():
        if isinstance(v, np.ndarray) and v.ndim > 0:
            check()
            f.require_group("arrays").require_group(_h5name(fname)).create_dataset(
                _h5name(owner), data=v
            )
            arrays.append([owner, fname, "", f"arrays/{_h5name(fname)}/{_h5name(owner)}"])
            continue
        if isinstance(v, np.ndarray):
            v = v.item()
        kind = scalar_kind(v)
        if kind is None:
            raise StoreError(
                f"field {fname!r} value of type {type(v).__name__} cannot be stored (use a number, str or ndarray)"
            )
        bucket = scalars.setdefault(fname, {"owners": [], "values": [], "kinds": []})
        bucket["owners"].append(owner)
        bucket["values"].append(v)
        bucket["kinds"].append(kind)
    values = {}
    for fname, b in scalars.items():
        tagged = [_tag(v, k) for v, k in zip(b["values"], b["kinds"], strict=True)]
        _write_scalars(f.require_group("fields").create_group(_h5name(fname)), b, tagged, str_dt)
        values[fname] = [b["owners"], tagged]
    return values, arrays


def _write_scalars(g: Any, b: dict[str, list], tagged: list[str], str_dt: Any) -> None:
    """One field's scalars as the group ``g``: a dataset of their kind, or tagged text when
    they are of several kinds or HDF5 cannot hold one natively."""
    kinds = set(b["kinds"])
    kind = kinds.pop() if len(kinds) == 1 else "tagged"
    if kind != "tagged" and not all(_native(v, kind) for v in b["values"]):
        kind = "tagged"
    g.attrs["kind"] = kind
    g.create_dataset("owners", data=np.array(b["owners"], dtype=object), dtype=str_dt)
    vals = b["values"]
    if kind == "tagged":
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
