"""Parameter-level work in chunks: size them under the memory budget, run kernels on a chunk
(pure, so it runs the same here, in a process pool or on a Dask worker), and the one loop
that submits chunks, honours cancel, commits each chunk's values and reports progress, for
the local and the remote executors alike."""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from diffract._core.arrays import storable_error
from diffract._core.slices import SliceInfo
from diffract._core.threads import BLAS_LIMIT
from diffract.extract.references import reference_file
from diffract.kernels.spec import Kernel, SliceNotApplicable
from diffract.run.live import ChunkProgress, RunProgress
from diffract.run.plan import SlicePlan
from diffract.run.report import Failure
from diffract.run.state import (
    NOT_APPLICABLE,
    Failed,
    NonFiniteWeights,
    NotApplicable,
    RunState,
    normalise,
    short_error,
)
from diffract.run.weights import BY_PATH, load_weights, read_by_path
from diffract.store import Batch

if TYPE_CHECKING:  # concurrent.futures imports logging, its process pool multiprocessing
    from concurrent.futures import ThreadPoolExecutor

#: working memory of a slice during a run, as a multiple of its float32 size (weights,
#: a float64 copy, Gram matrix, intermediates)
WORKING_SET_FACTOR = 4

Values = dict[str, dict[str, Any]]
Plans = dict[str, SlicePlan]
#: a chunk ready to run: its kernels in order, uid -> kernel names, values, kernel options
Prepared = tuple[list["Kernel"], dict[str, set[str]], Values, dict[str, dict[str, Any]]]


# --- running kernels on a chunk (no store access) -----------------------------------------
#: seconds one call of a vectorized kernel should take: its slices go in batches about this
#: long (at least one per core), so progress, cancel and commits come between them
VECTOR_BATCH_SECONDS = 1.0

Result = dict[str, Any] | Failed | NotApplicable


class KernelHooks(Protocol):
    """What :func:`run_kernels` tells as it goes (progress, commits inside a chunk):
    ``started`` before each call (a vectorized batch: its first slice), ``finished`` once the
    values of ``slices`` are in place (``seconds`` the call took; ``called`` False for slices
    that needed no call: not applicable, or an input failed)."""

    def started(self, k: Kernel, s: SliceInfo) -> None: ...

    def finished(
        self, k: Kernel, slices: list[SliceInfo], seconds: float, called: bool
    ) -> None: ...


def _split(k: Kernel, o: Any) -> Result:
    if isinstance(o, (Failed, NotApplicable)):
        return o
    if isinstance(o, SliceNotApplicable):
        return NotApplicable(str(o))
    if isinstance(o, BaseException):
        return Failed(short_error(o))
    try:
        return k.split_outputs(o)
    except Exception as exc:  # an unstorable value: that slice fails, not the batch
        return Failed(short_error(exc))


def _one(k: Kernel, call: Callable[[], Any]) -> Result:
    """One slice call: its outputs, or the marker of why there are none."""
    try:
        out = call()
    except SliceNotApplicable as exc:  # the kernel says why the slice has no value
        return NotApplicable(str(exc))
    except Exception as exc:  # recorded per parameter, the run goes on
        return Failed(short_error(exc))
    return _split(k, out)


def _batches(ready: list[SliceInfo], stop: Callable[[], bool] | None) -> Iterator[list[SliceInfo]]:
    """The slices of a vectorized call in batches of about :data:`VECTOR_BATCH_SECONDS`
    (sized by bytes from the previous batches' time, at least one slice per core); stops
    between batches when ``stop`` says so. The caller sends each batch's time back."""
    least = max(1, os.cpu_count() or 1)
    i, size, rate = 0, least, 0.0
    while i < len(ready):
        if i and stop is not None and stop():
            return
        if rate > 0:
            size, budget = 0, VECTOR_BATCH_SECONDS / rate
            while i + size < len(ready) and (size < least or budget > 0):
                budget -= max(ready[i + size].nbytes, 1)
                size += 1
        batch = ready[i : i + max(size, 1)]
        t = time.perf_counter()
        yield batch
        dt = time.perf_counter() - t
        rate = dt / max(sum(s.nbytes for s in batch), 1)
        i += len(batch)


def _call_kernel(
    k: Kernel,
    ready: list[SliceInfo],
    values: Values,
    opts: dict[str, Any],
    record: Callable[[list[SliceInfo], list[Result], float], None],
    stop: Callable[[], bool] | None = None,
    start: Callable[[SliceInfo], None] | None = None,
) -> int:
    """Call one kernel on the ready slices: per slice, or on lists when the kernel is
    vectorized (in batches; one call per slice again if a batch raises, to isolate the
    failing slice; a streamed kernel: one call, each slice recorded as its result comes). ``start(slice)`` is told of each call as it starts (a batch: its first
    slice), ``record(slices, results, seconds)`` receives its results as it ends. Returns the number of slice calls. With ``stop``, calls end when it says so:
    the results then cover the first slices of ``ready`` only."""

    def call(s: SliceInfo, as_list: bool) -> Any:
        if as_list:  # a vectorized kernel on a list of one (a streamed one may yield it)
            return next(iter(k.func(*[[values[s.uid][i]] for i in k.inputs], **opts)))
        return k.func(*[values[s.uid][i] for i in k.inputs], **opts)

    def each(part: list[SliceInfo], as_list: bool) -> int:
        n = 0
        for s in part:
            if stop is not None and stop():
                break
            if start is not None:
                start(s)
            t = time.perf_counter()
            res = _one(k, partial(call, s, as_list))
            record([s], [res], time.perf_counter() - t)
            n += 1
        return n

    if not k.vectorized:
        return each(ready, False)
    if k.streamed:
        return _call_streamed(k, ready, values, opts, record, each, stop, start)
    n = 0
    for batch in _batches(ready, stop):
        if start is not None:
            start(batch[0])
        t = time.perf_counter()
        try:
            outs = k.func(*[[values[s.uid][i] for s in batch] for i in k.inputs], **opts)
            if len(outs) != len(batch):
                raise ValueError(
                    f"vectorized kernel {k.name!r} returned {len(outs)} results for {len(batch)} slices"
                )
        except Exception:
            n += each(batch, True)
            continue
        record(batch, [_split(k, o) for o in outs], time.perf_counter() - t)
        n += len(batch)
    return n


def _call_streamed(k, ready, values, opts, record, each, stop, start) -> int:
    """A streamed kernel: one call on every ready slice, largest first; each slice recorded
    as its result comes (so no worker waits at a batch's end), ``stop`` asked between
    results (the rest are dropped). If the call or a result raises, the slices left are
    called one by one, to isolate the failing one."""
    order = sorted(ready, key=lambda s: -s.nbytes)
    if start is not None:
        start(order[0])
    t = time.perf_counter()
    try:
        outs = k.func(*[[values[s.uid][i] for s in order] for i in k.inputs], **opts)
        results = iter(outs)
    except Exception:
        return each(order, True)
    n = 0
    try:
        for s in order:
            if n and stop is not None and stop():
                break
            if n and start is not None:
                start(s)
            try:
                o = next(results)
            except StopIteration:
                o = Failed(f"streamed kernel {k.name!r} returned fewer results than slices")
            except Exception:
                return n + each(order[n:], True)
            now = time.perf_counter()
            record([s], [_split(k, o)], now - t)
            t, n = now, n + 1
    finally:
        cancel = getattr(outs, "cancel", None)
        if n < len(order) and callable(cancel):
            cancel()
    return n


def run_kernels(
    chunk: list[SliceInfo],
    kernels: list[Kernel],
    plan_of: dict[str, set[str]],
    values: Values,
    opts_of: dict[str, dict[str, Any]],
    hooks: KernelHooks | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> dict[str, int]:
    """Run ``kernels`` (in dependency order) on the slices of a chunk whose plan names
    them, filling ``values`` in place as each call ends; markers where a value cannot be
    made. Pure: no store access, so it runs the same in this process, a process pool or a
    Dask worker. ``hooks`` hears of each call (progress, commits inside the chunk).

    ``cancelled`` (e.g. ``event.is_set``) is asked before each kernel and, for per-slice
    kernels, before each slice (vectorized ones: before each batch): once it says yes,
    nothing more is started and the values not made yet are left out of ``values`` (every
    value present is complete).

    Returns:
        Kernel name -> number of slice calls made.
    """
    calls: dict[str, int] = {}
    stopped = False

    def stop() -> bool:
        nonlocal stopped
        if not stopped and cancelled is not None and cancelled():
            stopped = True
        return stopped

    for k in kernels:
        if stop():
            break

        def record(done: list[SliceInfo], results: list[Result], seconds: float, k=k) -> None:
            for s, res in zip(done, results, strict=True):
                if type(res) is Failed:
                    res = _nan_input(k, values[s.uid]) or res
                if isinstance(res, (Failed, NotApplicable)):
                    values[s.uid].update(dict.fromkeys(k.outputs, res))
                else:
                    values[s.uid].update(res)
            if hooks is not None:
                hooks.finished(k, done, seconds, True)

        ready, skipped = _ready(k, [s for s in chunk if k.name in plan_of[s.uid]], values)
        if skipped and hooks is not None:
            hooks.finished(k, skipped, 0.0, False)
        if not ready:
            continue
        start = None if hooks is None else (lambda s, k=k: hooks.started(k, s))
        n = _call_kernel(k, ready, values, opts_of[k.name], record, stop, start)
        if n:
            calls[k.name] = calls.get(k.name, 0) + n
    return calls


def _nan_input(k: Kernel, vals: dict[str, Any]) -> NonFiniteWeights | None:
    """When ``k`` failed on a slice with a NaN scalar among its inputs (a value stored as NaN
    because the slice's weights are not finite, e.g. its ``esd``): the NaN marker, so the
    outputs are NaN as well, not failures. None otherwise."""
    for i in k.inputs:
        v = vals.get(i)
        if isinstance(v, float) and v != v:
            return NonFiniteWeights(f"input {i!r} is NaN")
    return None


def _ready(
    k: Kernel, targets: list[SliceInfo], values: Values
) -> tuple[list[SliceInfo], list[SliceInfo]]:
    """The target slices ``k`` can be called on, and those it cannot (too few dimensions, an
    input that failed or is not applicable), whose outputs get the marker at once."""
    ready: list[SliceInfo] = []
    skipped: list[SliceInfo] = []
    for s in targets:
        vals = values[s.uid]
        if s.effective_ndim < k.min_ndim:
            vals.update(dict.fromkeys(k.outputs, NOT_APPLICABLE))
            skipped.append(s)
            continue
        blocked = next(
            (v for i in k.inputs if isinstance(v := vals.get(i), (Failed, NotApplicable))),
            None,
        )
        if blocked is not None:
            vals.update(dict.fromkeys(k.outputs, blocked))
            skipped.append(s)
            continue
        ready.append(s)
    return ready, skipped


def remote_chunk(chunk, kernels, plan_of, values, opts_of, cancel=None):
    """Task body for process pools and Dask workers: read the weights sent by path, run the
    kernels, send back the values (inputs such as the weights are dropped from the reply).
    ``cancel``: a token of the executor (``is_set()``) that says the run was cancelled."""
    read_by_path(values)
    calls = run_kernels(
        chunk,
        kernels,
        plan_of,
        values,
        opts_of,
        cancelled=None if cancel is None else cancel.is_set,
    )
    for vals in values.values():
        vals.pop("weights", None)
        vals.pop("slice_info", None)
    return values, calls


# --- chunk sizing -------------------------------------------------------------------------
def split_even(items: list[SliceInfo], n: int) -> list[list[SliceInfo]]:
    """``n`` groups of about equal total size (largest first, each to the lightest group)."""
    groups: list[list[SliceInfo]] = [[] for _ in range(max(1, n))]
    loads = [0] * len(groups)
    for s in sorted(items, key=lambda s: -s.nbytes):
        i = loads.index(min(loads))
        groups[i].append(s)
        loads[i] += s.nbytes
    order = {s.uid: k for k, s in enumerate(items)}
    return [sorted(g, key=lambda s: order[s.uid]) for g in groups]


def budget_chunks(slices: list[SliceInfo], budget: int) -> list[list[SliceInfo]]:
    """Consecutive slices grouped so each group's working set fits ``budget`` bytes (a slice
    larger than the budget is a chunk of its own)."""
    chunks: list[list[SliceInfo]] = []
    cur: list[SliceInfo] = []
    used = 0
    for s in slices:
        size = s.nbytes * WORKING_SET_FACTOR
        if cur and used + size > budget:
            chunks.append(cur)
            cur, used = [], 0
        cur.append(s)
        used += size
    if cur:
        chunks.append(cur)
    return chunks


def make_chunks(slices: list[SliceInfo], budget: int, min_chunks: int = 1) -> list[list[SliceInfo]]:
    """Consecutive slices grouped under ``budget``; split further (by count) when that gives
    fewer than ``min_chunks`` groups, so parallel workers all get work."""
    chunks = budget_chunks(slices, budget)
    if len(chunks) < min_chunks and len(slices) > len(chunks):
        n = min(min_chunks, len(slices))
        chunks = [list(part) for part in split_even(slices, n)]
    return chunks


def requested_in(batch: Batch, explicit: set[str]) -> int:
    """How many of ``batch``'s values were asked for (stored intermediates are not counted:
    "computed" says what the user asked for)."""
    return sum(1 for (_, o) in batch.fields if o in explicit)


def planned_count(slices: Iterable[SliceInfo], plans: Plans, explicit: set[str]) -> int:
    """How many requested values the plans of ``slices`` would make."""
    return sum(1 for s in slices for k in plans[s.uid].kernels for o in k.outputs if o in explicit)


# --- chunk inputs and outputs -------------------------------------------------------------
def prepare_chunk(
    state: RunState,
    chunk: list[SliceInfo],
    plans: Plans,
    by_path: Callable[[SliceInfo], bool] | None = None,
) -> Prepared:
    """Inputs of a chunk read from the store (weights, stored fields) and its kernels in
    one global dependency order, with their options. A slice for which ``by_path`` says yes
    gets :data:`BY_PATH` for its weights (the worker reads them from the checkpoint)."""
    values: Values = {}
    kernels: dict[str, Kernel] = {}
    plan_of: dict[str, set[str]] = {}
    to_read: list[SliceInfo] = []
    for s in chunk:
        p = plans[s.uid]
        vals = values.setdefault(s.uid, {})
        for f in p.to_load:
            vals[f] = state.store.get((s.uid, f))
        if any("weights" in k.inputs for k in p.kernels):
            if by_path is not None and by_path(s):
                vals["weights"] = BY_PATH
            else:
                to_read.append(s)
        vals["slice_info"] = s
        plan_of[s.uid] = {k.name for k in p.kernels}
        for k in p.kernels:
            kernels.setdefault(k.name, k)
    for s, w in zip(to_read, read_weights_of(state, to_read), strict=True):
        values[s.uid]["weights"] = w
    everything = [o for k in kernels.values() for o in k.outputs]
    rank = {k.name: i for i, k in enumerate(state.registry.closure(everything))}
    ordered = sorted(kernels.values(), key=lambda k: rank[k.name])
    return ordered, plan_of, values, {k.name: state.opts(k) for k in ordered}


#: a chunk whose weights (float32 bytes) exceed this is read by READ_THREADS threads side by
#: side (decoding bf16, the NaN/Inf check: NumPy work that releases the GIL); the spectrum's
#: workers wait for the chunk, so a serial read leaves all but one core idle
PARALLEL_READ_ABOVE = 64 * 1024**2
READ_THREADS = 2


def read_weights_of(state: RunState, slices: list[SliceInfo]) -> list[Any]:
    """The weights of ``slices`` as kernels see them (or their failure markers), in order;
    a large chunk is read by a few threads (the store's reads are thread-safe, each slice's
    file reference is its own memory map)."""
    threads = min(READ_THREADS, os.cpu_count() or 1, len(slices))
    if threads < 2 or sum(s.nbytes for s in slices) <= PARALLEL_READ_ABOVE:
        return [load_weights(state.store, s) for s in slices]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="diffract-read") as pool:
        # largest first, so the threads end together; results back in the chunk's order
        order = sorted(range(len(slices)), key=lambda i: -slices[i].nbytes)
        futures = {i: pool.submit(load_weights, state.store, slices[i]) for i in order}
        return [futures[i].result() for i in range(len(slices))]


def compute_here(
    state: RunState,
    chunk: list[SliceInfo],
    plans: Plans,
    pool: ThreadPoolExecutor | None = None,
    hooks: KernelHooks | None = None,
    cancelled: Callable[[], bool] | None = None,
    prepared: Prepared | None = None,
) -> Values:
    """Run each slice's planned kernels in this process (parts of the chunk side by side on
    ``pool``); values in memory, with markers where a value could not be made. ``prepared``:
    the chunk's :func:`prepare_chunk` (read here when not given)."""
    kernels, plan_of, values, opts_of = prepared or prepare_chunk(state, chunk, plans)

    def run(part: list[SliceInfo]) -> dict[str, int]:
        return run_kernels(part, kernels, plan_of, values, opts_of, hooks, cancelled)

    if pool is None or len(chunk) < 2:
        results = [run(chunk)]
    else:  # workers: parts of the chunk side by side, vectorized kernels included
        parts = [p for p in split_even(chunk, state.workers) if p]
        with BLAS_LIMIT:  # N workers x N BLAS threads would oversubscribe the cores
            results = list(pool.map(run, parts))
    for calls in results:
        state.count(calls)
    return values


def chunk_batch(
    state: RunState,
    chunk: list[SliceInfo],
    plans: Plans,
    values: Values,
    explicit: set[str],
    kept: set[tuple[str, str]] | None = None,
    final: bool = True,
) -> Batch:
    """The values to persist (requested fields and non-transient intermediates); failures,
    values not applicable and values skipped by a cancel are counted in the report.

    ``kept``: the keys an earlier batch of this chunk handled (left out here; the keys
    handled here are added). ``final`` False: a batch taken while the chunk goes on, which
    leaves out the values not made yet instead of counting them as skipped."""
    report = state.report
    batch = Batch()
    for s in chunk:
        vals = values[s.uid]
        for k in plans[s.uid].kernels:
            for o in k.outputs:
                if kept is not None and (s.uid, o) in kept:
                    continue
                if o not in vals:  # not made yet, or not reached: the run was cancelled
                    if final and o in explicit:
                        if state.cancelled:
                            report.skipped += 1
                        else:  # pragma: no cover - run_kernels fills every planned output
                            report.failures.append(
                                Failure(s.model_id, s.name, s.uid, o, f"{o!r} was not computed")
                            )
                    continue
                if kept is not None:
                    kept.add((s.uid, o))
                v = vals[o]
                if isinstance(v, NonFiniteWeights):
                    if o in explicit or o not in k.transient:
                        batch.fields[(s.uid, o)] = float("nan")  # Diffract's NaN, row kept
                        report.note_non_finite(s.model_id, s.name, s.uid, v.message)
                    continue
                error = _unkept(k, o, v, explicit)
                if error is not None:
                    if isinstance(v, NotApplicable):
                        report.not_applicable += o in explicit
                        if v.reason and o in explicit:
                            report.note_not_applicable(s.model_id, s.name, s.uid, v.reason)
                    elif error:
                        report.failures.append(Failure(s.model_id, s.name, s.uid, o, error))
                    elif isinstance(v, Failed) and o in state.averaged:
                        # not asked for, but a requested model-level field averages over it
                        error = f"{v.message} (left out of {', '.join(state.averaged[o])})"
                        report.failures.append(Failure(s.model_id, s.name, s.uid, o, error))
                    continue
                batch.fields[(s.uid, o)] = normalise(v)
    report.failures[:] = _dedupe(report.failures)
    return batch


def _unkept(k: Kernel, o: str, v: Any, explicit: set[str]) -> str | None:
    """None when output ``o`` of ``k`` is stored; else the failure to record ("" for none)."""
    if isinstance(v, NotApplicable):
        return ""
    if isinstance(v, Failed):
        return v.message if o in explicit else ""
    if o in k.transient:
        if o not in explicit:
            return ""
        # split_outputs checked the persisted outputs; a transient one asked for by name is
        # checked here
        problem = storable_error(v)
        if problem is not None:
            return f"KernelDefinitionError: {k.unstorable_message(o, problem)}"
    return None


def _dedupe(failures: list[Failure]) -> list[Failure]:
    seen: set[tuple[str, str]] = set()
    out = []
    for f in failures:
        key = (f.uid, f.field)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


# --- where chunks run ---------------------------------------------------------------------
class ChunkRunner(Protocol):
    """Where chunks run: ``begin`` gives it the run's progress and requested fields,
    ``submit`` starts a chunk (``at``: chunks done, chunks in all, slices done, slices in
    all, for progress), ``wait`` gives its values (None: it was cancelled before it
    started), ``kept`` the keys already committed while it ran (None: nothing was), at most
    ``slots`` in flight."""

    slots: int

    def begin(self, live: RunProgress, explicit: set[str]) -> None: ...

    def submit(self, chunk: list[SliceInfo], at: tuple[int, int, int, int]) -> Any: ...

    def wait(self, handle: Any) -> Values | None: ...

    def kept(self, handle: Any) -> set[tuple[str, str]] | None: ...

    def poll_cancel(self) -> None: ...

    def close(self) -> None: ...


class LocalChunks:
    """Chunks run here, one at a time (``workers`` threads across each chunk's slices); a
    cancel stops between kernels and between slices. Inside a chunk each kernel call is a
    "kernel" event, and the values finished are committed every ``state.commit_every``
    seconds (:class:`~diffract.run.live.ChunkProgress`)."""

    slots = 1

    def __init__(self, state: RunState, plans: Plans) -> None:
        self.state = state
        self.plans = plans
        self.live: RunProgress | None = None
        self.explicit: set[str] = set()
        self.pool: ThreadPoolExecutor | None = None
        if state.workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(state.workers)

    def begin(self, live: RunProgress, explicit: set[str]) -> None:
        self.live, self.explicit = live, explicit

    def submit(
        self, chunk: list[SliceInfo], at: tuple[int, int, int, int]
    ) -> tuple[Values, set[tuple[str, str]]]:
        state, plans = self.state, self.plans
        prepared = prepare_chunk(state, chunk, plans)
        values = prepared[2]

        def commit_part(kept: set[tuple[str, str]]) -> int:
            batch = chunk_batch(state, chunk, plans, values, self.explicit, kept, final=False)
            state.store.commit(batch)
            state.report.computed += requested_in(batch, self.explicit)
            return len(batch.fields)

        live = self.live or RunProgress(state, [chunk], plans, self.explicit)
        hooks = ChunkProgress(state, live, chunk, at, plans, commit_part)
        compute_here(state, chunk, plans, self.pool, hooks, state.cancel.is_set, prepared)
        return values, hooks.kept

    def wait(self, handle: tuple[Values, set[tuple[str, str]]]) -> Values:
        return handle[0]

    def kept(self, handle: tuple[Values, set[tuple[str, str]]]) -> set[tuple[str, str]]:
        return handle[1]

    def poll_cancel(self) -> None:
        """A cancel reaches the kernels through ``state.cancel`` itself."""

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


class RemoteChunks:
    """Chunks as tasks of an opened executor (a process pool or Dask). A cancel is passed on
    to the tasks once (they stop after the slice or kernel in progress and send back what
    they finished), and pool tasks not started are cancelled. The weights of a slice that
    references a checkpoint every worker sees (``opened.sees``) are read there, by path;
    other weights travel with the task."""

    def __init__(self, state: RunState, plans: Plans, opened: Any) -> None:
        self.state = state
        self.plans = plans
        self.opened = opened
        self.slots = opened.slots
        self.signalled = False
        self.futures: list[Any] = []
        self._seen: dict[tuple[str, int, float], bool] = {}

    def by_path(self, s: SliceInfo) -> bool:
        """Whether the workers read slice ``s``'s weights from its checkpoint themselves."""
        ext = s.meta.get("external")
        if not ext:
            return False
        try:
            ref = reference_file(ext)
        except (KeyError, TypeError):  # an older or partial reference: send the weights
            return False
        if ref not in self._seen:
            self._seen[ref] = ref[0] in self.opened.sees([ref])
        return self._seen[ref]

    def _probe(self, chunk: list[SliceInfo]) -> None:
        """Ask the workers once about every checkpoint file of ``chunk`` not asked about."""
        refs = set()
        for s in chunk:
            ext = s.meta.get("external")
            if ext:
                try:
                    refs.add(reference_file(ext))
                except (KeyError, TypeError):
                    continue
        new = [r for r in refs if r not in self._seen]
        if new:
            seen = self.opened.sees(new)
            self._seen.update({r: r[0] in seen for r in new})

    def begin(self, live: RunProgress, explicit: set[str]) -> None:
        """Remote chunks report when they end: nothing to follow inside them."""

    def kept(self, handle: Any) -> None:
        """A remote chunk's values are all committed when it ends."""

    def submit(self, chunk: list[SliceInfo], at: tuple[int, int, int, int]) -> Any:
        self._probe(chunk)
        kernels, plan_of, values, opts_of = prepare_chunk(
            self.state, chunk, self.plans, self.by_path
        )
        fut = self.opened.submit(
            remote_chunk, chunk, kernels, plan_of, values, opts_of, self.opened.token
        )
        self.futures.append(fut)
        return fut

    def poll_cancel(self) -> None:
        if self.signalled or not self.state.cancelled:
            return
        self.signalled = True
        self.opened.signal_cancel()
        futures = sys.modules.get("concurrent.futures")  # loaded by any pool run
        pool_future = futures.Future if futures is not None else ()
        for fut in self.futures:
            # a pool future not started yet is dropped (a running one refuses and stops by
            # itself); Dask futures are left alone (cancelling one that runs would lose its
            # finished slices): a task that starts now returns at once
            if isinstance(fut, pool_future) and not fut.done():
                fut.cancel()

    def wait(self, handle: Any) -> Values | None:
        while not handle.done():
            self.poll_cancel()
            time.sleep(0.02)
        if handle.cancelled():
            return None
        try:
            values, calls = handle.result()
        except Exception as exc:
            pools = sys.modules.get("concurrent.futures.process")  # loaded by a pool run
            if pools is None or not isinstance(exc, pools.BrokenProcessPool):
                raise
            raise pools.BrokenProcessPool(
                f"{exc} A worker process ended abruptly: out of memory, or it could "
                "not load a kernel (kernels must be importable by the worker "
                "processes; a kernel defined under `if __name__ == '__main__':` "
                "is not); executor='threads' runs in this process"
            ) from exc
        self.state.count(calls)
        return values

    def close(self) -> None:
        self.opened.close()


def run_chunks(
    state: RunState,
    chunks: list[list[SliceInfo]],
    runner: ChunkRunner,
    plans: Plans,
    explicit: set[str],
) -> None:
    """The one loop over chunks: submit them in order (at most ``runner.slots`` in flight),
    commit each chunk's values as it finishes (what the runner committed while it ran
    stays), report progress; on a cancel, submit nothing more, count what was not reached
    as skipped, and keep (commit) what finished."""
    report = state.report
    total = sum(len(c) for c in chunks)
    done = 0
    pending: deque[tuple[list[SliceInfo], Any]] = deque()
    live = RunProgress(state, chunks, plans, explicit)
    runner.begin(live, explicit)
    state.emit(
        "start",
        0,
        len(chunks),
        0,
        total,
        steps_total=live.steps_total,
        values_total=live.values_total,
    )

    def finish_one() -> None:
        nonlocal done
        chunk, handle = pending.popleft()
        values = runner.wait(handle)
        if values is None:  # cancelled before it started
            report.skipped += planned_count(chunk, plans, explicit)
            return
        kept = runner.kept(handle)
        if kept is None:  # a remote chunk: its steps end together
            live.steps_done += sum(len(plans[s.uid].kernels) for s in chunk)
            live.values_done += sum(live.asked(k) for s in chunk for k in plans[s.uid].kernels)
        batch = chunk_batch(state, chunk, plans, values, explicit, kept)
        state.store.commit(batch)
        report.computed += requested_in(batch, explicit)
        report.chunks += 1
        done += len(chunk)
        state.emit("chunk", report.chunks, len(chunks), done, total, **live.counts())

    def stopped(ci: int) -> bool:
        runner.poll_cancel()
        if state.cancelled:
            rest = (s for c in chunks[ci:] for s in c)
            report.skipped += planned_count(rest, plans, explicit)
        return state.cancelled

    try:
        for ci, chunk in enumerate(chunks):
            if stopped(ci):
                break
            while len(pending) >= runner.slots:
                finish_one()
            if stopped(ci):
                break
            at = (ci, len(chunks), done, total)
            pending.append((chunk, runner.submit(chunk, at)))
        while pending:  # finished work is kept, also after a cancel
            finish_one()
    finally:
        runner.close()
    state.emit(
        "done",
        report.chunks,
        len(chunks),
        done,
        total,
        **{**live.counts(), "eta": None, "eta_low": None, "eta_high": None},
    )
