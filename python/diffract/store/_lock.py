"""One writer per store: an ``flock`` on a lock file that holds the writer's pid; and the
errors a failed write is reported as (a full disk, read-only media)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
import weakref
from pathlib import Path

from diffract._errors import StoreError, StoreLockedError

#: writer locks this process holds, by lock file: a newer session on the same store takes
#: the lock over from an older one (a re-run notebook cell ``session = Session()``)
_HELD: dict[str, weakref.ref] = {}
_HELD_GUARD = threading.Lock()


#: the errno values of a write that failed for want of room, and what each is called
DISK_FULL = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file size limit exceeded",
}


def disk_full_error(where: str, exc: OSError) -> StoreError:
    """The error a write of the store ``where`` that failed for want of room (``exc``, one
    of :data:`DISK_FULL`) is raised as: a :class:`StoreError` (an ``OSError``) with
    ``exc``'s errno, that names the problem without the library's internals."""
    reason = DISK_FULL.get(exc.errno or 0, "no space left on device")
    err = StoreError(
        f"{reason} while writing {where}: this write was not stored; what the store "
        "committed before is intact (free some space and write again)"
    )
    err.errno = exc.errno or errno.ENOSPC  # (no strerror: str() stays the message above)
    return err


def read_only_error(where: str, exc: OSError | None = None) -> StoreError:
    """The error a writer of the store ``where`` gets when it lives on read-only media (or a
    folder this user may not write): a :class:`StoreError` with errno ``EROFS``/``EACCES``."""
    code = exc.errno if exc is not None and exc.errno else errno.EROFS
    what = "on read-only media" if code == errno.EROFS else "in a folder this user cannot write"
    if os.path.exists(where):
        err = StoreError(f"store at {where} is {what}; open it with readonly=True to read it")
    else:
        err = StoreError(f"cannot create a store at {where}: it is {what} (choose another path=)")
    err.errno = code
    return err


def named_write_error(where: str, exc: BaseException) -> BaseException:
    """``exc`` (raised while writing the store ``where``) as the error to report: a full disk
    and read-only media are named (see :func:`disk_full_error`, :func:`read_only_error`);
    anything else is returned as it is."""
    if isinstance(exc, OSError) and not isinstance(exc, StoreError):
        if exc.errno in DISK_FULL:
            return disk_full_error(where, exc)
        if exc.errno == errno.EROFS:
            return read_only_error(where, exc)
    return exc


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
    an older one (:attr:`took_over`), silently: re-running a notebook cell
    ``session = Session()`` is the common case and rebinds the name to the new session at
    once, so a warning would only alarm. The older session becomes unable to write
    (:attr:`superseded`), and its next write raises an error saying why and what to use.
    A lock object that is garbage collected releases its lock.
    """

    def __init__(self, path: Path, store_name: str) -> None:
        self.path = path
        self.store_name = store_name
        self._fd: int | None = None
        self._finalizer: weakref.finalize | None = None
        #: another writer of this process took this lock over; writes must stop
        self.superseded = False
        #: this lock was taken over from an older writer of this process
        self.took_over = False

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
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise read_only_error(self.store_name, exc) from None
            raise
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
                    holder = _describe_holder(fd)
                    os.close(fd)
                    raise StoreLockedError(
                        f"store {self.store_name} is open for writing by another process "
                        f"({holder}); close that session, wait (lock_timeout=seconds), or open "
                        "this one with readonly=True"
                    ) from None
                time.sleep(0.05)
        with contextlib.suppress(OSError):  # who holds it, for the error another writer gets
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {_start_time(os.getpid())}\n".encode(), 0)
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
        # no warning: the older session says so itself if it is asked to write again
        self.took_over = True
        self._own(fd)
        return True

    def _forget_in_child(self) -> None:
        """In a forked child: drop the inherited descriptor without unlocking (an ``flock``
        belongs to the open file, shared with the parent: unlocking it here would unlock the
        parent, and keeping it open would keep the store locked after the parent exits)."""
        fd, self._fd = self._fd, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

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


def _after_fork_in_child() -> None:
    """A forked child holds no writer lock: the descriptors it inherited are closed (see
    :meth:`WriterLock._forget_in_child`); to write, the child opens the store itself."""
    global _HELD_GUARD
    _HELD_GUARD = threading.Lock()  # another thread may have held it at the fork
    held = [ref() for ref in _HELD.values()]
    _HELD.clear()
    for lock in held:
        if lock is not None:
            lock._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``; "" where there
    is none): a pid with another start time is another process that reuses the number."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
        return stat[stat.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        return ""


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            return fh.read().decode(errors="replace").strip()
    except OSError:
        return ""


def _holds_flock(pid: int, dev: int, ino: int) -> bool:
    """Whether process ``pid`` has the file (``dev``, ``ino``) open with an ``flock`` on it
    (``/proc/<pid>/fdinfo`` lists the locks of each open file)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
            if st.st_ino != ino or st.st_dev != dev:
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
                if any(line.startswith("lock:") and "FLOCK" in line for line in fh):
                    return True
        except OSError:
            continue
    return False


def _lock_holders(fd: int) -> list[int]:
    """The processes that hold the ``flock`` on the file open as ``fd`` (Linux: found in
    ``/proc``; an empty list elsewhere)."""
    st = os.fstat(fd)
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    me = os.getpid()
    return [p for p in pids if p != me and _holds_flock(p, st.st_dev, st.st_ino)]


def _describe_holder(fd: int) -> str:
    """Who holds the lock on the file open as ``fd``, for an error message: the pid the
    writer recorded when it is still that process and holds the lock; else the processes
    that do hold it (a child the writer forked keeps its lock after the writer exits)."""
    try:
        recorded = os.pread(fd, 64, 0).decode(errors="replace").split()
    except OSError:
        recorded = []
    pid = int(recorded[0]) if recorded and recorded[0].isdigit() else None
    started = recorded[1] if len(recorded) > 1 else None
    st = os.fstat(fd)
    alive = pid is not None and (started is None or _start_time(pid) == started)
    if (
        pid is not None
        and alive
        and (not os.path.isdir("/proc") or _holds_flock(pid, st.st_dev, st.st_ino))
    ):
        name = _process_name(pid)
        return f"pid {pid}{f' ({name})' if name else ''}"
    holders = _lock_holders(fd)
    if holders:
        named = ", ".join(f"pid {p}{f' ({n})' if (n := _process_name(p)) else ''}" for p in holders)
        gone = f"; the writer that took it, pid {pid}, has exited" if pid is not None else ""
        return f"{named}, which inherited the lock{gone}"
    return f"pid {pid}" if pid is not None else "pid unknown"


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
