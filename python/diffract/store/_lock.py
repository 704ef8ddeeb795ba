"""One writer per store: an ``flock`` on a lock file that holds the writer's pid."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
import warnings
import weakref
from pathlib import Path

from diffract._errors import StoreError, StoreLockedError

#: writer locks this process holds, by lock file: a newer session on the same store takes
#: the lock over from an older one (a re-run notebook cell ``session = Session()``)
_HELD: dict[str, weakref.ref] = {}
_HELD_GUARD = threading.Lock()


def _unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.close(fd)


class WriterLock:
    """Exclusive, non-blocking (or waiting up to ``timeout`` s) lock on ``path``: one writer
    per store across processes.

    The kernel releases an flock when its process dies, so a killed writer never leaves
    a stale lock behind. Within one process a newer lock on the same file takes over from
    an older one (with a warning): re-running a notebook cell ``session = Session()`` works,
    and the older session becomes unable to write (:attr:`superseded`), with an error saying
    so. A lock object that is garbage collected releases its lock.
    """

    def __init__(self, path: Path, store_name: str) -> None:
        self.path = path
        self.store_name = store_name
        self._fd: int | None = None
        self._finalizer: weakref.finalize | None = None
        #: another writer of this process took this lock over; writes must stop
        self.superseded = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _key(self) -> str:
        return os.path.realpath(self.path)

    def check_current(self) -> None:
        """Raise when a newer session of this process took the writer lock over."""
        if self.superseded:
            raise StoreError(
                f"store {self.store_name}: a newer session of this process opened it for "
                "writing and took the writer lock over; write through that session (this one "
                "can still read)"
            )

    def acquire(self, timeout: float = 0.0) -> None:
        self.check_current()
        if self._fd is not None:
            return
        if self._take_over():
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    holder = self._holder(fd)
                    os.close(fd)
                    raise StoreLockedError(
                        f"store {self.store_name} is open for writing by another process (pid {holder}); "
                        "close that session, wait (lock_timeout=seconds), or open this one with "
                        "readonly=True"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._own(fd)

    def _own(self, fd: int) -> None:
        self._fd = fd
        self._finalizer = weakref.finalize(self, _unlock, fd)
        with _HELD_GUARD:
            _HELD[self._key()] = weakref.ref(self)

    def _take_over(self) -> bool:
        """Take the lock over from an older lock of this process on the same file."""
        with _HELD_GUARD:
            ref = _HELD.get(self._key())
            older = ref() if ref is not None else None
            if older is None or older is self or older._fd is None:
                return False
            fd = older._fd
            if older._finalizer is not None:
                older._finalizer.detach()
            older._fd, older._finalizer, older.superseded = None, None, True
        warnings.warn(
            f"store {self.store_name}: an earlier session of this process had it open for "
            "writing; this session takes the writer lock over and the earlier one can only read "
            "now (close sessions you replace, or use `with Session(...) as session:`)",
            stacklevel=4,
        )
        self._own(fd)
        return True

    @staticmethod
    def _holder(fd: int) -> str:
        try:
            return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        except OSError:
            return "unknown"

    def release(self) -> None:
        if self._fd is not None:
            with _HELD_GUARD:
                ref = _HELD.get(self._key())
                if ref is not None and ref() is self:
                    del _HELD[self._key()]
            if self._finalizer is not None:  # set with the fd by _own
                self._finalizer()  # unlocks and closes once
                self._finalizer = None
            self._fd = None


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str, *, newline: str | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename: ``path`` is
    either left as it was or holds the whole text (no temporary file is left behind)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", newline=newline) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
