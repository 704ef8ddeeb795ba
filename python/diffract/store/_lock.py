"""One writer per store: an ``flock`` on a lock file that holds the writer's pid."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import os
import time
import weakref
from pathlib import Path

from .._errors import StoreLockedError


def _unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.close(fd)


class WriterLock:
    """Exclusive, non-blocking (or waiting up to ``timeout`` s) lock on ``path``.

    The kernel releases an flock when its process dies, so a killed writer never leaves
    a stale lock behind. Within a process the lock is released when it is released
    explicitly or when the lock object is garbage collected (a notebook cell that runs
    ``session = Session()`` again drops the previous session); a lock held by an
    unreachable session of this process is reclaimed on contention (one ``gc.collect()``).
    """

    def __init__(self, path: Path, store_name: str) -> None:
        self.path = path
        self.store_name = store_name
        self._fd: int | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, timeout: float = 0.0) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        collected = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                holder = self._holder(fd)
                if holder == str(os.getpid()) and not collected:
                    # maybe a session of this process nobody references any more (a re-run
                    # notebook cell): collecting it runs its lock's finalizer
                    collected = True
                    gc.collect()
                    continue
                if time.monotonic() >= deadline:
                    os.close(fd)
                    if holder == str(os.getpid()):
                        raise StoreLockedError(
                            f"store {self.store_name} is open for writing by another session of "
                            "this process that is still referenced; close it (session.close(), "
                            "or open sessions with `with Session(...) as session:`), or open "
                            "this one with readonly=True"
                        ) from None
                    raise StoreLockedError(
                        f"store {self.store_name} is open for writing by another process (pid {holder}); "
                        "close that session, wait (lock_timeout=seconds), or open this one with "
                        "readonly=True"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        self._finalizer = weakref.finalize(self, _unlock, fd)

    @staticmethod
    def _holder(fd: int) -> str:
        try:
            return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        except OSError:
            return "unknown"

    def release(self) -> None:
        if self._fd is not None:
            if self._finalizer is not None:
                self._finalizer()  # unlocks and closes once
                self._finalizer = None
            else:  # pragma: no cover
                _unlock(self._fd)
            self._fd = None


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
