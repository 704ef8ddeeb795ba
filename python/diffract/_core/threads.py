"""One BLAS thread while our own workers run side by side (N workers x N BLAS threads would
oversubscribe the cores)."""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["one_blas_thread"]


def one_blas_thread() -> Any:
    """Limit BLAS/LAPACK to one thread.

    Returns:
        A context manager that restores the previous limits on exit; entering it is optional:
        the limit holds from the call on (a worker process keeps it for its lifetime by holding
        the returned object). A no-op context when threadpoolctl is missing.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scipy's usual stack
        return contextlib.nullcontext()
    return threadpool_limits(limits=1)
