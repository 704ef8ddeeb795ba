"""Where chunk tasks run when not in this process: a local process pool, or Dask.

``executor=`` accepts ``None``/``"threads"`` (this process; ``workers`` threads across
slices), ``"processes"`` (a pool of ``workers`` processes, for kernels that hold the GIL),
a ``dask.distributed.Client``, or a Dask scheduler address (``"tcp://host:8786"``).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from diffract._errors import ConfigError
from diffract._vocab.threads import BLAS_LIMIT
from diffract.extract.references import readable_here

Submit = Callable[..., Any]


@dataclass
class Opened:
    """An executor ready for one run: ``submit(fn, *args)`` gives a future (``done()``,
    ``result()``, ``cancel()``), at most ``slots`` tasks should be in flight, ``token`` is
    passed to each task (its ``is_set()`` says the run was cancelled), ``signal_cancel()``
    sets it, ``close()`` ends the run. ``sees(files)`` says which checkpoint files
    (:func:`~diffract.extract.references.reference_file` tuples) every worker reads as
    recorded: their slices' weights are read there by path instead of sent with the task."""

    submit: Submit
    slots: int
    close: Callable[[], None]
    token: Any = None
    signal_cancel: Callable[[], None] = lambda: None
    sees: Callable[[list[tuple[str, int, float]]], set[str]] = lambda files: set(
        readable_here(files)
    )


_ADVICE = (
    "use executor='threads' (the default; workers=N runs N threads), a Dask client "
    "(it sends functions by value), or define the kernel in an importable module (a .py "
    "file on the path) and import it from there"
)


def _main_importable() -> bool:
    """Whether spawned worker processes can import this process's ``__main__`` (a script
    or ``python -m``: yes; ``python -c``, the REPL, a notebook: no)."""
    main = sys.modules.get("__main__")
    if main is None:
        return False
    if getattr(getattr(main, "__spec__", None), "name", None):
        return True
    path = getattr(main, "__file__", None)
    return bool(path) and os.path.isfile(path)


class ProcessExecutor:
    """A fresh process pool per run (workers import diffract once, then stay warm)."""

    name = "processes"

    def check_kernels(self, kernels: Iterable[Any]) -> None:
        """A :class:`ConfigError` naming the first kernel that worker processes cannot
        receive: a lambda or a function defined inside another one (not picklable), or a
        function of an interactive ``__main__`` (spawned workers start fresh without it)."""
        for k in kernels:
            func = getattr(k, "func", k)
            name = getattr(k, "name", getattr(func, "__qualname__", repr(func)))
            where = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"
            try:
                pickle.dumps(k)
            except Exception as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ConfigError(
                    f"kernel {name!r} ({where}) cannot be sent to worker processes "
                    f"(executor='processes'): {type(exc).__name__}: {first}. Worker processes "
                    f"receive kernels by reference, so lambdas and nested functions cannot "
                    f"go there; {_ADVICE}"
                ) from None
            if getattr(func, "__module__", None) == "__main__" and not _main_importable():
                raise ConfigError(
                    f"kernel {name!r} ({where}) is defined in the __main__ of an interactive "
                    "session (a notebook, python -c or the REPL); executor='processes' starts "
                    f"fresh worker processes that cannot import it; {_ADVICE}"
                )

    def open(self, workers: int) -> Opened:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        ctx = mp.get_context("spawn")
        event = ctx.Event()  # reaches the workers through the initializer (inheritance)
        pool = ProcessPoolExecutor(
            max(1, workers),
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(event, os.getpid()),
        )
        return Opened(
            pool.submit,
            max(1, workers),
            lambda: pool.shutdown(wait=True, cancel_futures=True),
            _PoolCancel(),
            event.set,
        )


def _init_worker(event: Any = None, parent: int | None = None) -> None:
    """Process-pool initializer: keep the run's cancel event; one BLAS thread per worker
    process (N processes x N BLAS threads would oversubscribe the cores); exit when the
    parent is gone (a SIGKILLed writer must not leave its workers running)."""
    global _CANCEL
    _CANCEL = event
    BLAS_LIMIT.hold()  # for the worker's lifetime (never released)
    if parent is not None:
        import threading

        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    """In a pool worker: exit at once when the process that started it is gone (the pool
    would otherwise wait on a queue nobody writes to)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


#: in a pool worker: the run's cancel event (a multiprocessing.Event), set by the parent
_CANCEL: Any = None


class _PoolCancel:
    """Cancel token of a process pool run: reads the event the worker got at start."""

    def is_set(self) -> bool:
        ev = _CANCEL
        return ev is not None and ev.is_set()


class _DaskCancel:
    """Cancel token of a Dask run: a ``distributed.Event`` by name, asked at most every
    ``every`` seconds (each ask is a round trip to the scheduler)."""

    every = 0.2

    def __init__(self, name: str) -> None:
        self.name = name
        self._last = 0.0
        self._set = False

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["name"])

    def is_set(self) -> bool:
        if self._set:
            return True
        now = time.monotonic()
        if now - self._last < self.every:
            return False
        self._last = now
        try:
            from distributed import Event

            self._set = bool(Event(self.name).is_set())
        except Exception:  # no scheduler to ask: the chunk runs to its end
            return False
        return self._set


class DaskExecutor:
    """Chunks as tasks on an existing Dask cluster; results come back to the one writer."""

    name = "dask"

    def __init__(self, client: Any) -> None:
        self.client = client
        self._owned = False

    def check_kernels(self, kernels: Iterable[Any]) -> None:
        """Dask sends functions by value (cloudpickle): lambdas and notebook kernels work."""

    def open(self, workers: int) -> Opened:
        client = self.client
        if isinstance(client, str):
            from distributed import Client

            client = Client(client)
            self._owned = True
        n = len(client.scheduler_info().get("workers", {})) or 1
        name = f"diffract-cancel-{uuid.uuid4().hex}"
        try:
            from distributed import Event

            event = Event(name, client=client)
        except Exception:  # pragma: no cover - an old distributed: chunks run to their end
            event = None

        def submit(fn, *args):
            return client.submit(fn, *args, pure=False)

        def signal_cancel():
            if event is not None:
                with contextlib.suppress(Exception):  # scheduler gone: nothing to stop
                    event.set()

        def close():
            if event is not None:
                with contextlib.suppress(Exception):
                    event.clear()
            if self._owned:
                client.close()

        def sees(files: list[tuple[str, int, float]]) -> set[str]:
            """The files every worker of the cluster sees as recorded (shared storage)."""
            try:
                found = client.run(readable_here, files)
            except Exception:  # workers unreachable for this: send the weights
                return set()
            if not found:
                return set()
            return set.intersection(*(set(paths) for paths in found.values()))

        return Opened(submit, 2 * n, close, _DaskCancel(name), signal_cancel, sees)


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
