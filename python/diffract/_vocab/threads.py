"""One BLAS thread while our own workers run side by side (N workers x N BLAS threads would
oversubscribe the cores): :data:`BLAS_LIMIT`, the process's one limiter. Every part of the
engine that runs work side by side holds it (a chunk's thread workers, the spectrum helpers'
kept pool, each process-pool worker for its lifetime)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = ["BLAS_LIMIT", "BlasLimit"]


class BlasLimit:
    """BLAS limited to one thread while any holder needs it: the first hold applies the
    limit, the last release restores the limits found then. Counted, so that holds that
    overlap (a run's workers and the spectrum helpers inside them, a tracker's run and the
    user's) cannot leave the process limited, or unlimited too early, by restoring out of
    order. The threadpoolctl controller is kept until a module is imported (a fresh
    ``threadpool_limits`` scans the loaded libraries: ~10x the cost of a kept controller's
    ``limit``; a library loaded since would not be limited). Without threadpoolctl holding
    does nothing."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Forget every hold (a forked child: the parent's holders are not in it)."""
        self._lock = threading.Lock()
        self._holds = 0
        self._limiter: Any = None
        self._ctl: Any = None
        self._modules = 0

    @property
    def holds(self) -> int:
        """How many holders need the limit now."""
        return self._holds

    def hold(self) -> None:
        """Need the limit (until the matching :meth:`release`)."""
        with self._lock:
            if self._holds == 0:
                modules = len(sys.modules)  # a module imported since may bring a BLAS
                if self._ctl is None or modules != self._modules:
                    try:
                        from threadpoolctl import ThreadpoolController
                    except ImportError:  # pragma: no cover - a dependency of diffract
                        self._holds += 1
                        return
                    self._ctl, self._modules = ThreadpoolController(), modules
                self._limiter = self._ctl.limit(limits=1, user_api="blas")
            self._holds += 1

    def release(self) -> None:
        """No longer need the limit; the last release restores the limits of the first hold."""
        with self._lock:
            if self._holds == 0:
                raise RuntimeError("BLAS limit released more often than held")
            self._holds -= 1
            if self._holds == 0 and self._limiter is not None:
                self._limiter.restore_original_limits()
                self._limiter = None

    def __enter__(self) -> BlasLimit:
        self.hold()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


#: the process's one BLAS limiter
BLAS_LIMIT = BlasLimit()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=BLAS_LIMIT._reset)
