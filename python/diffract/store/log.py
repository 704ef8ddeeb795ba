"""One crash-safe segment log, shared by the HDF5 and the Zarr store.

A log store keeps a folder of *records*, one per committed batch, named by sequence number
(``<12 digits><suffix>``; a compaction is ``<12 digits>-c<suffix>``). A record is written
whole and atomically, last: once its name is listed, everything it refers to is on disk.
:class:`SegmentLog` runs every operation on the log — numbering, replay, the gap check,
compaction and garbage collection — and a backend supplies only the record steps (list the
record names, read one record, write a batch or the live state as one, say which data a
reference lives in, delete data and records), as xarray's ``backends/common.py`` does for
its stores. A crash-safety fix is therefore made here, once, for both backends.

The rules:

* Live records start at the newest compaction (or at 1) and each commit takes the next
  number, so a number missing among them is damage (:class:`StoreCorruptError` naming it);
  a crash can only lose the record being written, the last one.
* A reader whose listing raced a compaction rebuilds its state from a listing that a second
  look confirms, and replaces its state only when the rebuild is complete.
* Garbage is collected one compaction late: what the *second newest* compaction supersedes
  (and nothing live refers to) is deleted, so a reader whose snapshot predates the newest
  compaction still finds every file it lists.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from typing import Any, ClassVar

from diffract._errors import StoreCorruptError, StoreError
from diffract.store._base import Batch, PersistentStore, StoreState, locked
from diffract.store._lock import DISK_FULL

__all__ = ["COMPACT_EVERY", "RecordVanished", "SegmentLog", "first_missing_seq"]

#: Write a compaction once more than this many records are live. 32 for both backends (HDF5
#: used 32, Zarr 64): garbage is collected one compaction late, so a store holds up to about
#: twice this many records; 32 keeps that near 70 files and bounds what a reopen replays,
#: while a compaction copies only field values (weights and, on Zarr, all arrays are
#: referenced in place), so compacting twice as often costs little.
COMPACT_EVERY = 32
#: attempts of one refresh before records that keep vanishing are reported
_ATTEMPTS = 5


class RecordVanished(Exception):
    """A record disappeared while being read (a writer compacted meanwhile); the message
    names it. Raised by a backend's ``_read_record``."""


def first_missing_seq(names: list[str]) -> int | None:
    """The first sequence number missing from the live records ``names`` (sorted), or None.

    Args:
        names: record names ``<12-digit seq><suffix>`` or ``<seq>-c<suffix>`` (a
            compaction), from the newest compaction on.

    Returns:
        The first number missing, or None when the sequence has no hole. Live records start
        at the newest compaction (or at 1) and each commit takes the next number, so a hole
        means a record was lost.
    """
    if not names:
        return None
    expected = int(names[0][:12]) if names[0][12:14] == "-c" else 1
    for n in names:
        if int(n[:12]) != expected:
            return expected
        expected += 1
    return None


def _seq(name: str) -> int:
    return int(name[:12])


def _is_compaction(name: str) -> bool:
    return name[12:14] == "-c"


class SegmentLog(PersistentStore):
    """A store whose content is a log of records; the base class of the HDF5 and Zarr stores.

    It runs opening, commit, compaction, refresh (replay) and garbage collection; a backend
    sets ``record_suffix`` and the words its errors use, and implements the steps below.
    The constructor's arguments are :class:`~diffract.store._base.PersistentStore`'s.
    """

    #: how a record's name ends (``.h5``, ``.json``)
    record_suffix: ClassVar[str] = ""
    #: what a record is called in error messages, singular and plural
    record_kind: ClassVar[str] = "record"
    records_word: ClassVar[str] = "records"

    def _open_at(self, path: str | os.PathLike[str]) -> None:
        self._lock: Any = None  # a WriterLock, or None where the backend cannot lock
        #: the live records replayed into the current state, in order
        self._seen: list[str] = []
        self._record_name = re.compile(rf"^(\d{{12}})(-c)?{re.escape(self.record_suffix)}$")
        self._is_record: dict[str, bool] = {}
        self._open_log(path)
        self._start()

    # --- the steps a backend supplies --------------------------------------------------------
    def _open_log(self, path: str | os.PathLike[str]) -> None:
        """Find (a writer: create) the store at ``path`` and set ``_lock``; the log is
        replayed after it."""
        raise NotImplementedError

    def _list_names(self) -> list[str]:
        """The names in the records folder (others than records are filtered out here)."""
        raise NotImplementedError

    def _record_path(self, name: str) -> str:
        """Where the record ``name`` lives (for error messages)."""
        raise NotImplementedError

    def _read_record(self, name: str, state: StoreState) -> None:
        """Replay the record ``name`` into ``state``; raise :class:`RecordVanished` if it is
        gone and :class:`StoreCorruptError` if it is unreadable."""
        raise NotImplementedError

    def _write_record(self, name: str, batch: Batch) -> None:
        """Write ``batch`` (its data first) and then its record ``name``, atomically."""
        raise NotImplementedError

    def _write_compaction(self, name: str, state: StoreState) -> None:
        """Write the live ``state`` as the compaction record ``name``."""
        raise NotImplementedError

    def _data_seq(self, ref: Any) -> int | None:
        """The sequence number whose data the stored reference ``ref`` lives in (None: not a
        reference of this backend, e.g. a scalar)."""
        raise NotImplementedError

    def _data_seqs(self) -> list[int]:
        """The sequence numbers that have data on disk."""
        raise NotImplementedError

    def _data_path(self, seq: int) -> str:
        """Where the data of ``seq`` lives (for error messages)."""
        raise NotImplementedError

    def _delete_data(self, seq: int) -> None:
        """Delete the data of ``seq``."""
        raise NotImplementedError

    def _delete_record(self, name: str) -> None:
        """Delete the record ``name`` (already superseded; missing is fine)."""
        raise NotImplementedError

    # --- names -------------------------------------------------------------------------------
    def _name(self, seq: int, *, compaction: bool = False) -> str:
        return f"{seq:012d}{'-c' if compaction else ''}{self.record_suffix}"

    def _record_names(self) -> list[str]:
        known = self._is_record  # each name is matched once per store (a listing repeats them)
        if len(known) > 4096:  # names of deleted records: a long-lived writer sheds them
            known.clear()
        out = []
        for n in self._list_names():
            hit = known.get(n)
            if hit is None:
                hit = known[n] = self._record_name.match(n) is not None
            if hit:
                out.append(n)
        return sorted(out)

    def _live_names(self) -> list[str]:
        """Records from the newest compaction on (a compaction supersedes all before it)."""
        names = self._record_names()
        starts = [i for i, n in enumerate(names) if _is_compaction(n)]
        return names[starts[-1] :] if starts else names

    def _next_seq(self) -> int:
        names = self._record_names()
        return _seq(names[-1]) + 1 if names else 1

    # --- opening and closing -----------------------------------------------------------------
    def _acquire(self) -> None:
        if self._lock is not None:
            self._lock.acquire(self._lock_timeout)  # released by close() / a finished ``with``

    def _start(self) -> None:
        """Replay the log; a writer then removes what crashes and compactions left behind.
        On any error the store is closed (a damaged store is refused, its lock not kept)."""
        try:
            self.refresh()
            if not self.readonly:
                self._collect_garbage()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._lock is not None:
            self._lock.release()

    # --- reading -----------------------------------------------------------------------------
    def _gap_error(self, gap: int, names: list[str]) -> StoreCorruptError:
        return StoreCorruptError(
            f"{self._record_path(self._name(gap))}: missing {self.record_kind} (sequence "
            f"number {gap}; found {names[0]} to {names[-1]}); the store is damaged and its "
            f"later {self.records_word} cannot be replayed without it"
        )

    @locked
    def refresh(self) -> None:
        """Replay the records committed since the last look (by this or another process).

        A rebuild (after a compaction) replays into a new state that replaces the current one
        only when complete: an error leaves what was read before in place.

        Raises:
            StoreCorruptError: a record is missing in the middle of the live sequence, or
                unreadable.
            StoreError: records kept vanishing under every attempt (retry).
        """
        rebuild, vanished = False, self._record_path("").rstrip("/")
        for attempt in range(_ATTEMPTS):
            names = self._live_names()
            gap = first_missing_seq(names)
            if gap is not None:
                if attempt < 2:  # a listing that raced a compaction: look again
                    time.sleep(0.01)
                    continue
                raise self._gap_error(gap, names)
            if rebuild or names[: len(self._seen)] != self._seen:  # compacted: rebuild
                # a listing taken while a compaction deletes old records can miss both the
                # new compaction and some old records: rebuild only from a listing that a
                # second look confirms (it may only have grown at the end)
                if self._live_names()[: len(names)] != names:
                    rebuild = True
                    continue
                state, seen = StoreState(), []
                try:
                    for name in names:
                        self._read_record(name, state)
                        seen.append(name)
                except RecordVanished as exc:
                    vanished, rebuild = str(exc), True
                    continue
                self._state, self._seen = state, seen
                return
            try:
                for name in names[len(self._seen) :]:
                    self._read_record(name, self._state)
                    self._seen.append(name)
                return
            except RecordVanished as exc:
                vanished, rebuild = str(exc), True
        raise StoreError(f"{vanished}: {self.records_word} keep vanishing while reading; retry")

    # --- writing -----------------------------------------------------------------------------
    def _commit(self, batch: Batch) -> None:
        self._acquire()
        self.refresh()
        self._write_record(self._name(self._next_seq()), batch)
        self.refresh()
        if len(self._seen) > COMPACT_EVERY:
            try:
                self.compact()
            except OSError as exc:
                if isinstance(exc, StoreError) or exc.errno not in DISK_FULL:
                    raise
                # the batch is committed: a compaction that finds no room waits for the
                # next commit (saying the commit failed would make a caller write it again)
                warnings.warn(
                    f"{self.path}: {DISK_FULL[exc.errno]}; the batch was committed, its "
                    "compaction is postponed to a later commit (free some space)",
                    ResourceWarning,
                    stacklevel=4,
                )

    @locked
    def compact(self) -> None:
        """Write the live state as one compaction record, then collect garbage.

        Readers that listed the old records see them vanish, rebuild from the compaction,
        and go on.
        """
        self._acquire()
        self.refresh()
        self._write_compaction(self._name(self._next_seq(), compaction=True), self._state)
        self.refresh()
        self._collect_garbage()

    def _refers_to(self, compaction: str) -> set[int] | None:
        """The sequence numbers whose data the compaction record ``compaction`` refers to,
        when the backend knows them without the replayed state (else None)."""
        return None

    def _referenced_seqs(self) -> set[int]:
        if not self._state.loaded and self._seen and _is_compaction(self._seen[0]):
            # the live records are the newest compaction and batches after it, which hold
            # their own data: a superset of what the state refers to, without loading it
            known = self._refers_to(self._seen[0])
            if known is not None:
                return known | {_seq(n) for n in self._seen}
        refs = [*self._state.weight_refs.values(), *self._state.values.values()]
        return {s for s in map(self._data_seq, refs) if s is not None}

    def _collect_garbage(self) -> None:
        """Delete the data of uncommitted batches (a crash) and what compactions superseded.

        Superseded records and data are deleted one compaction late (see the module
        docstring); data still referenced by the live state is kept. A crash leaves at most
        the data of the one batch being written (``last + 1``): data of later batches means
        records were lost, which is damage, and then nothing is deleted.

        Raises:
            StoreCorruptError: data of a batch beyond the last record + 1.
        """
        names = self._record_names()
        last = _seq(names[-1]) if names else 0
        compactions = [n for n in names if _is_compaction(n)]
        cutoff = _seq(compactions[-2]) if len(compactions) >= 2 else 0
        referenced: set[int] | None = None  # looked up only when data predates the cutoff
        doomed = []
        for seq in self._data_seqs():
            if seq > last + 1:
                raise StoreCorruptError(
                    f"{self._record_path(self._name(last + 1))}: missing {self.record_kind} "
                    f"({self._data_path(seq)} holds data of batch {seq}, but the "
                    f"{self.records_word} end at {last}); the store is damaged, nothing was "
                    "deleted"
                )
            if seq < cutoff and referenced is None:
                referenced = self._referenced_seqs()
            if seq > last or (seq < cutoff and seq not in (referenced or ())):
                doomed.append(seq)
        for seq in doomed:
            self._delete_data(seq)
        for name in names:
            if _seq(name) < cutoff:
                self._delete_record(name)
