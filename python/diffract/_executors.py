"""Where chunk tasks run when not in this process: a local process pool, or Dask.

``executor=`` accepts ``None``/``"threads"`` (this process; ``workers`` threads across
slices), ``"processes"`` (a pool of ``workers`` processes, for kernels that hold the GIL),
a ``dask.distributed.Client``, or a Dask scheduler address (``"tcp://host:8786"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._errors import ConfigError

Submit = Callable[..., Any]


class ProcessExecutor:
    """A fresh process pool per run (workers import diffract once, then stay warm)."""

    name = "processes"

    def open(self, workers: int) -> tuple[Submit, int, Callable[[], None]]:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(
            max(1, workers), mp_context=mp.get_context("spawn"), initializer=_one_blas_thread
        )
        return pool.submit, max(1, workers), lambda: pool.shutdown(wait=True, cancel_futures=True)


def _one_blas_thread() -> None:
    """Process-pool initializer: one BLAS thread per worker process (N processes x N BLAS
    threads would oversubscribe the cores)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return
    global _LIMITS
    _LIMITS = threadpool_limits(limits=1)


_LIMITS = None


class DaskExecutor:
    """Chunks as tasks on an existing Dask cluster; results come back to the one writer."""

    name = "dask"

    def __init__(self, client: Any) -> None:
        self.client = client
        self._owned = False

    def open(self, workers: int) -> tuple[Submit, int, Callable[[], None]]:
        client = self.client
        if isinstance(client, str):
            from distributed import Client

            client = Client(client)
            self._owned = True
        n = len(client.scheduler_info().get("workers", {})) or 1

        def submit(fn, *args):
            return client.submit(fn, *args, pure=False)

        def close():
            if self._owned:
                client.close()

        return submit, 2 * n, close


def make_executor(spec: Any) -> ProcessExecutor | DaskExecutor | None:
    if spec is None or spec == "threads":
        return None
    if spec == "processes":
        return ProcessExecutor()
    if isinstance(spec, (ProcessExecutor, DaskExecutor)):
        return spec
    if isinstance(spec, str) and spec.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
        return DaskExecutor(spec)
    if hasattr(spec, "submit") and hasattr(spec, "scheduler_info"):
        return DaskExecutor(spec)
    raise ConfigError(
        f"unknown executor {spec!r}: use 'threads', 'processes', a dask.distributed.Client, "
        "or a Dask scheduler address such as 'tcp://127.0.0.1:8786'"
    )
