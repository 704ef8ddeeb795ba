"""Parameter-level work in chunks: size them under the memory budget, run kernels on a chunk
(pure, so it runs the same here, in a process pool or on a Dask worker), and the one loop
that submits chunks, honours cancel, commits each chunk's values and reports progress, for
the local and the remote executors alike."""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from diffract._core.arrays import storable_error
from diffract._core.slices import SliceInfo
from diffract._core.threads import one_blas_thread
from diffract.extract.references import reference_file
from diffract.kernels.spec import Kernel, SliceNotApplicable
from diffract.run.plan import SlicePlan
from diffract.run.report import Failure
from diffract.run.state import (
    NOT_APPLICABLE,
    Failed,
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


# --- running kernels on a chunk (no store access) -----------------------------------------
def _call_kernel(
    k: Kernel,
    ready: list[SliceInfo],
    values: Values,
    opts: dict[str, Any],
    stop: Callable[[], bool] | None = None,
) -> tuple[list[dict[str, Any] | Failed | NotApplicable], int]:
    """Call one kernel on the ready slices: per slice, or once on lists when the kernel is
    vectorized (one call per slice again if that call raises, to isolate the failing slice).
    Returns results and the number of slice calls. With ``stop``, per-slice calls end when
    it says so: the results then cover the first slices of ``ready`` only."""

    def split(o: Any) -> dict[str, Any] | Failed | NotApplicable:
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

    def each(call: Callable[[SliceInfo], Any]) -> list[dict[str, Any] | Failed | NotApplicable]:
        res: list[dict[str, Any] | Failed | NotApplicable] = []
        for s in ready:
            if stop is not None and stop():
                break
            try:
                out = call(s)
            except SliceNotApplicable as exc:  # the kernel says why the slice has no value
                res.append(NotApplicable(str(exc)))
                continue
            except Exception as exc:  # recorded per parameter, the run goes on
                res.append(Failed(short_error(exc)))
                continue
            res.append(split(out))
        return res

    if not k.vectorized:
        out = each(lambda s: k.func(*[values[s.uid][i] for i in k.inputs], **opts))
        return out, len(out)
    try:
        outs = k.func(*[[values[s.uid][i] for s in ready] for i in k.inputs], **opts)
        if len(outs) != len(ready):
            raise ValueError(
                f"vectorized kernel {k.name!r} returned {len(outs)} results for {len(ready)} slices"
            )
    except Exception:
        res = each(lambda s: k.func(*[[values[s.uid][i]] for i in k.inputs], **opts)[0])
        return res, len(res)
    return [split(o) for o in outs], len(ready)


def run_kernels(
    chunk: list[SliceInfo],
    kernels: list[Kernel],
    plan_of: dict[str, set[str]],
    values: Values,
    opts_of: dict[str, dict[str, Any]],
    on_kernel: Callable[[Kernel, SliceInfo], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> dict[str, int]:
    """Run ``kernels`` (in dependency order) on the slices of a chunk whose plan names
    them, filling ``values`` in place; markers where a value cannot be made. Pure: no store
    access, so it runs the same in this process, a process pool or a Dask worker.

    ``cancelled`` (e.g. ``event.is_set``) is asked before each kernel and, for per-slice
    kernels, before each slice: once it says yes, nothing more is started and the values
    not made yet are left out of ``values`` (every value present is complete).

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
        targets = [s for s in chunk if k.name in plan_of[s.uid]]
        if targets and on_kernel is not None:
            on_kernel(k, targets[0])
        ready: list[SliceInfo] = []
        for s in targets:
            vals = values[s.uid]
            if s.effective_ndim < k.min_ndim:
                vals.update(dict.fromkeys(k.outputs, NOT_APPLICABLE))
                continue
            blocked = next(
                (v for i in k.inputs if isinstance(v := vals.get(i), (Failed, NotApplicable))),
                None,
            )
            if blocked is not None:
                vals.update(dict.fromkeys(k.outputs, blocked))
                continue
            ready.append(s)
        if not ready:
            continue
        results, n = _call_kernel(k, ready, values, opts_of[k.name], stop)
        if n:
            calls[k.name] = calls.get(k.name, 0) + n
        for s, res in zip(ready[: len(results)], results, strict=True):
            if isinstance(res, (Failed, NotApplicable)):
                values[s.uid].update(dict.fromkeys(k.outputs, res))
            else:
                values[s.uid].update(res)
    return calls


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


def planned_count(slices: Iterable[SliceInfo], plans: Plans, explicit: set[str]) -> int:
    """How many requested values the plans of ``slices`` would make."""
    return sum(1 for s in slices for k in plans[s.uid].kernels for o in k.outputs if o in explicit)


# --- chunk inputs and outputs -------------------------------------------------------------
def prepare_chunk(
    state: RunState,
    chunk: list[SliceInfo],
    plans: Plans,
    by_path: Callable[[SliceInfo], bool] | None = None,
) -> tuple[list[Kernel], dict[str, set[str]], Values, dict[str, dict[str, Any]]]:
    """Inputs of a chunk read from the store (weights, stored fields) and its kernels in
    one global dependency order, with their options. A slice for which ``by_path`` says yes
    gets :data:`BY_PATH` for its weights (the worker reads them from the checkpoint)."""
    values: Values = {}
    kernels: dict[str, Kernel] = {}
    plan_of: dict[str, set[str]] = {}
    for s in chunk:
        p = plans[s.uid]
        vals = values.setdefault(s.uid, {})
        for f in p.to_load:
            vals[f] = state.store.get((s.uid, f))
        if any("weights" in k.inputs for k in p.kernels):
            if by_path is not None and by_path(s):
                vals["weights"] = BY_PATH
            else:
                vals["weights"] = load_weights(state.store, s)
        vals["slice_info"] = s
        plan_of[s.uid] = {k.name for k in p.kernels}
        for k in p.kernels:
            kernels.setdefault(k.name, k)
    everything = [o for k in kernels.values() for o in k.outputs]
    rank = {k.name: i for i, k in enumerate(state.registry.closure(everything))}
    ordered = sorted(kernels.values(), key=lambda k: rank[k.name])
    return ordered, plan_of, values, {k.name: state.opts(k) for k in ordered}


def compute_here(
    state: RunState,
    chunk: list[SliceInfo],
    plans: Plans,
    pool: ThreadPoolExecutor | None = None,
    on_kernel: Callable[[Kernel, SliceInfo], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Values:
    """Run each slice's planned kernels in this process (parts of the chunk side by side on
    ``pool``); values in memory, with markers where a value could not be made."""
    kernels, plan_of, values, opts_of = prepare_chunk(state, chunk, plans)

    def run(part: list[SliceInfo]) -> dict[str, int]:
        return run_kernels(part, kernels, plan_of, values, opts_of, on_kernel, cancelled)

    if pool is None or len(chunk) < 2:
        results = [run(chunk)]
    else:  # workers: parts of the chunk side by side, vectorized kernels included
        parts = [p for p in split_even(chunk, state.workers) if p]
        with one_blas_thread():  # N workers x N BLAS threads would oversubscribe the cores
            results = list(pool.map(run, parts))
    for calls in results:
        state.count(calls)
    return values


def chunk_batch(
    state: RunState, chunk: list[SliceInfo], plans: Plans, values: Values, explicit: set[str]
) -> Batch:
    """The values to persist (requested fields and non-transient intermediates); failures,
    values not applicable and values skipped by a cancel are counted in the report."""
    report = state.report
    batch = Batch()
    for s in chunk:
        vals = values[s.uid]
        for k in plans[s.uid].kernels:
            for o in k.outputs:
                if o not in vals:  # not reached: the run was cancelled
                    if o in explicit:
                        if state.cancelled:
                            report.skipped += 1
                        else:  # pragma: no cover - run_kernels fills every planned output
                            report.failures.append(
                                Failure(s.model_id, s.name, s.uid, o, f"{o!r} was not computed")
                            )
                    continue
                v = vals[o]
                error = _unkept(k, o, v, explicit)
                if error is not None:
                    if isinstance(v, NotApplicable):
                        report.not_applicable += o in explicit
                        if v.reason and o in explicit:
                            report.note_not_applicable(s.model_id, s.name, s.uid, v.reason)
                    elif error:
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
    """Where chunks run: ``submit`` starts one (``at``: chunks done, chunks in all, slices
    done, slices in all, for progress), ``wait`` gives its values (None: it was cancelled
    before it started), at most ``slots`` in flight."""

    slots: int

    def submit(self, chunk: list[SliceInfo], at: tuple[int, int, int, int]) -> Any: ...

    def wait(self, handle: Any) -> Values | None: ...

    def poll_cancel(self) -> None: ...

    def close(self) -> None: ...


class LocalChunks:
    """Chunks run here, one at a time (``workers`` threads across each chunk's slices); a
    cancel stops between kernels and between slices."""

    slots = 1

    def __init__(self, state: RunState, plans: Plans) -> None:
        self.state = state
        self.plans = plans
        self.pool: ThreadPoolExecutor | None = None
        if state.workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(state.workers)

    def submit(self, chunk: list[SliceInfo], at: tuple[int, int, int, int]) -> Values:
        state = self.state
        ci, nchunks, done, total = at

        def on_kernel(k: Kernel, s: SliceInfo) -> None:
            state.emit("kernel", ci, nchunks, done, total, k.outputs[0], s.name)

        return compute_here(state, chunk, self.plans, self.pool, on_kernel, state.cancel.is_set)

    def wait(self, handle: Values) -> Values:
        return handle

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
    commit each chunk's values as it finishes, report progress; on a cancel, submit nothing
    more, count what was not reached as skipped, and keep (commit) what finished."""
    report = state.report
    total = sum(len(c) for c in chunks)
    done = 0
    pending: deque[tuple[list[SliceInfo], Any]] = deque()
    state.emit("start", 0, len(chunks), 0, total)

    def finish_one() -> None:
        nonlocal done
        chunk, handle = pending.popleft()
        values = runner.wait(handle)
        if values is None:  # cancelled before it started
            report.skipped += planned_count(chunk, plans, explicit)
            return
        batch = chunk_batch(state, chunk, plans, values, explicit)
        state.store.commit(batch)
        report.computed += len(batch.fields)
        report.chunks += 1
        done += len(chunk)
        state.emit("chunk", report.chunks, len(chunks), done, total)

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
    state.emit("done", report.chunks, len(chunks), done, total)
