"""The scheduler: plan which (slice, field) values are missing, run kernels chunk by chunk
under a memory budget, write each chunk atomically, report progress, honour cancel.

Reuse is keyed by presence: a value already in the store is never recomputed (erase it to
recompute). A kernel that raises on one slice is recorded as a failure for that slice and
its dependents; the run goes on.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Any

import numpy as np

from diffract._core.arrays import storable_error
from diffract._core.config import DEFAULT_MEMORY_BUDGET
from diffract._core.slices import ParameterType, SliceInfo
from diffract._core.threads import one_blas_thread
from diffract._errors import ConfigError, OptionValueError, UnknownOptionError
from diffract.kernels.spec import Kernel, KernelRegistry, check_options
from diffract.run.report import (
    Failure,
    KernelFailureWarning,
    NothingToCompareWarning,
    ProgressCallback,
    ProgressEvent,
    RunReport,
)
from diffract.store import Batch, Store

#: working memory of a slice during a run, as a multiple of its float32 size (weights,
#: a float64 copy, Gram matrix, intermediates)
WORKING_SET_FACTOR = 4


class _NotApplicable:
    __slots__ = ()


NOT_APPLICABLE = _NotApplicable()


class _Failed:
    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def canonical_layout(w: np.ndarray, s: SliceInfo) -> np.ndarray:
    """The weights in PyTorch layout, whatever the framework: dense (out, in), conv
    (out, in, *kernel). Flax/Keras kernels (in, out) / (*kernel, in, out) are transposed;
    bias and norm slices lose singleton axes."""
    if s.type in (ParameterType.BIAS, ParameterType.NORM) and w.ndim > 1:
        w = w.reshape([d for d in w.shape if d != 1] or [1])
    if s.layout == "in_out" and w.ndim >= 2:
        if w.ndim == 2:
            return w.T
        return np.moveaxis(np.moveaxis(w, -1, 0), -1, 1)
    return w


def _as_float_array(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "f" and arr.dtype.itemsize >= 4:
        return arr
    if arr.dtype.kind == "c":
        return arr
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)
    return arr.astype(np.float64)


def validate_options(
    kernels: Iterable[Kernel],
    options: Mapping[str, Any],
    kernel_options: Mapping[str, Mapping[str, Any]],
) -> None:
    kernels = list(kernels)
    if not isinstance(options, Mapping):
        raise OptionValueError(f"options must be a dict, got {type(options).__name__}")
    check_kernel_options_shape(kernel_options)
    known = {o for k in kernels for o in k.options}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UnknownOptionError(
            f"unknown option(s) {unknown} for the kernels of this apply; "
            f"options they accept: {sorted(known) or 'none'}"
        )
    by_name = {k.name: k for k in kernels}
    for kname, opts in kernel_options.items():
        if kname not in by_name:
            raise UnknownOptionError(
                f"kernel_options names kernel {kname!r}, which this apply does not run; kernels: {sorted(by_name)}"
            )
        bad = sorted(set(opts) - set(by_name[kname].options))
        if bad:
            raise UnknownOptionError(
                f"kernel {kname!r} has no option(s) {bad}; it accepts {sorted(by_name[kname].options)}"
            )
    check_options(kernels, options, kernel_options)


def check_kernel_options_shape(kernel_options: Any) -> None:
    """``kernel_options`` must map kernel names to dicts of options."""
    if kernel_options is None:
        return
    if not isinstance(kernel_options, Mapping):
        raise OptionValueError(
            "kernel_options must be a dict {kernel_name: {option: value}}, got "
            f"{type(kernel_options).__name__}: {kernel_options!r}"
        )
    for kname, opts in kernel_options.items():
        if not isinstance(kname, str):
            raise OptionValueError(
                f"kernel_options keys must be kernel names (strings), got {type(kname).__name__}: {kname!r}"
            )
        if not isinstance(opts, Mapping):
            raise OptionValueError(
                f"kernel_options[{kname!r}] must be a dict of options, got "
                f"{type(opts).__name__}: {opts!r}"
            )


def _call_kernel(
    k: Kernel,
    ready: list[SliceInfo],
    values: dict[str, dict[str, Any]],
    opts: dict[str, Any],
    stop: Callable[[], bool] | None = None,
) -> tuple[list[dict[str, Any] | _Failed], int]:
    """Call one kernel on the ready slices: per slice, or once on lists when the kernel is
    vectorized (one call per slice again if that call raises, to isolate the failing slice).
    Returns results and the number of slice calls. With ``stop``, per-slice calls end when
    it says so: the results then cover the first slices of ``ready`` only."""

    def one(s: SliceInfo) -> dict[str, Any] | _Failed:
        vals = values[s.uid]
        try:
            out = k.func(*[vals[i] for i in k.inputs], **opts)
            return k.split_outputs(out)
        except Exception as exc:  # recorded per parameter, the run goes on
            return _Failed(_short_error(exc))

    def split(o: Any) -> dict[str, Any] | _Failed:
        if isinstance(o, _Failed):
            return o
        if isinstance(o, BaseException):
            return _Failed(_short_error(o))
        try:
            return k.split_outputs(o)
        except Exception as exc:  # an unstorable value: that slice fails, not the batch
            return _Failed(_short_error(exc))

    if k.vectorized:
        try:
            outs = k.func(*[[values[s.uid][i] for s in ready] for i in k.inputs], **opts)
            if len(outs) != len(ready):
                raise ValueError(
                    f"vectorized kernel {k.name!r} returned {len(outs)} results for {len(ready)} slices"
                )
        except Exception:
            res: list[dict[str, Any] | _Failed] = []
            for s in ready:
                if stop is not None and stop():
                    break
                try:
                    out = k.func(*[[values[s.uid][i]] for i in k.inputs], **opts)[0]
                except Exception as exc:
                    res.append(_Failed(_short_error(exc)))
                    continue
                res.append(split(out))
            return res, len(res)
        return [split(o) for o in outs], len(ready)
    out: list[dict[str, Any] | _Failed] = []
    for s in ready:
        if stop is not None and stop():
            break
        out.append(one(s))
    return out, len(out)


def run_kernels(
    chunk: list[SliceInfo],
    kernels: list[Kernel],
    plan_of: dict[str, set[str]],
    values: dict[str, dict[str, Any]],
    opts_of: dict[str, dict[str, Any]],
    on_kernel: Callable[[Kernel, SliceInfo], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> dict[str, int]:
    """Run ``kernels`` (in dependency order) on the slices of a chunk whose plan names
    them, filling ``values`` in place; markers where a value cannot be made. Pure: no store
    access, so it runs the same in this process, a process pool or a Dask worker.

    ``cancelled`` (e.g. ``event.is_set``) is asked before each kernel and, for per-slice
    kernels, before each slice: once it says yes, nothing more is started and the values
    not made yet are left out of ``values`` (every value present is complete)."""
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
                for o in k.outputs:
                    vals[o] = NOT_APPLICABLE
                continue
            blocked = next(
                (v for i in k.inputs if isinstance(v := vals.get(i), (_Failed, _NotApplicable))),
                None,
            )
            if blocked is not None:
                for o in k.outputs:
                    vals[o] = blocked
                continue
            ready.append(s)
        if not ready:
            continue
        results, n = _call_kernel(k, ready, values, opts_of[k.name], stop)
        if n:
            calls[k.name] = calls.get(k.name, 0) + n
        for s, res in zip(ready[: len(results)], results, strict=True):
            vals = values[s.uid]
            if isinstance(res, _Failed):
                for o in k.outputs:
                    vals[o] = res
            else:
                vals.update(res)
    return calls


def remote_chunk(chunk, kernels, plan_of, values, opts_of, cancel=None):
    """Task body for process pools and Dask workers: run the kernels, send back the values
    (inputs that were shipped in, such as the weights, are dropped from the reply).
    ``cancel``: a token of the executor (``is_set()``) that says the run was cancelled."""
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


class Runner:
    """Runs one ``apply``: param-level fields chunk by chunk, then model, then cross level."""

    def __init__(
        self,
        store: Store,
        registry: KernelRegistry,
        *,
        options: Mapping[str, Any] | None = None,
        kernel_options: Mapping[str, Mapping[str, Any]] | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        workers: int = 1,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        call_counter: dict[str, int] | None = None,
        executor: Any = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.options = dict(options or {})
        self.kernel_options = {k: dict(v) for k, v in (kernel_options or {}).items()}
        self.memory_budget = memory_budget
        self.workers = max(1, int(workers))
        self.progress = progress
        self.cancel = cancel or threading.Event()
        self.calls = call_counter if call_counter is not None else {}
        from diffract.run.executors import make_executor

        self.executor = make_executor(executor)
        self._applicable_cache: dict[tuple[str, int], bool] = {}
        self._closure_cache: dict[frozenset[str], list[Kernel]] = {}

    # --- helpers ---------------------------------------------------------------------------
    def _opts(self, k: Kernel) -> dict[str, Any]:
        opts = k.resolve_options(self.options)
        opts.update(self.kernel_options.get(k.name, {}))
        return opts

    def _count(self, k: Kernel, n: int = 1) -> None:
        self.calls[k.name] = self.calls.get(k.name, 0) + n

    # --- the plan --------------------------------------------------------------------------
    def run(
        self,
        fields: Iterable[str],
        slices: list[SliceInfo],
        *,
        scope_key: str | None,
        model_slices: Mapping[str, list[SliceInfo]],
    ) -> RunReport:
        fields = tuple(dict.fromkeys(fields))
        kernels = self.registry.closure(fields)  # raises UnknownFieldError
        # options were validated by Compute.apply, before any widget or store work
        self._check_devices(kernels)
        report = RunReport(requested=fields)
        t0 = time.perf_counter()
        by_level = {
            lvl: [f for f in fields if self.registry.producer(f).level == lvl]
            for lvl in ("param", "model", "cross")
        }
        reference = self.options.get("reference")
        cross_slices: list[SliceInfo] = []
        if by_level["cross"]:
            from diffract._errors import UnknownModelError

            if not reference:
                raise UnknownOptionError(
                    f"cross-model field(s) {by_level['cross']} need a reference model: apply(..., reference='<model_id>')"
                )
            if not self.store.has_model(reference):
                raise UnknownModelError(
                    f"reference model {reference!r} is not in the store; stored: {sorted(self.store.models())}"
                )
            ref_names = {s.name: s for s in self.store.slices(reference)}
            cross_slices = [s for s in slices if s.model_id != reference and s.name in ref_names]
            self._ref_names = ref_names
            if not cross_slices and slices:
                others = sorted({s.model_id for s in slices if s.model_id != reference})
                if not others:
                    why = (
                        f"the selection holds only the reference model {reference!r}, and a "
                        "model is not compared with itself; select other models too (or "
                        "choose another reference)"
                    )
                else:
                    why = (
                        f"no slice of {others} has a same-named slice in the reference model "
                        f"{reference!r}; cross-model fields pair slices by name"
                    )
                report.notes.append(
                    f"cross-model field(s) {by_level['cross']}: nothing computed: {why}"
                )
                warnings.warn(report.notes[-1], NothingToCompareWarning, stacklevel=3)
        # param-level needs: requested param fields, plus param inputs of model/cross kernels
        param_needed: dict[str, set[str]] = {}
        param_fields = set(by_level["param"])
        for lvl in ("model", "cross"):
            for f in by_level[lvl]:
                for k in self.registry.closure([f]):
                    if k.level == "param":
                        param_fields.update(o for o in k.outputs if o not in k.transient)
        explicit = set(fields)
        for s in slices:
            param_needed[s.uid] = set(param_fields)
        if cross_slices:
            for s in cross_slices:
                ref = self._ref_names[s.name]
                param_needed.setdefault(ref.uid, set()).update(param_fields)
        all_slices = {s.uid: s for s in slices}
        if cross_slices:
            for s in cross_slices:
                ref = self._ref_names[s.name]
                all_slices.setdefault(ref.uid, ref)
        self._run_param_level(all_slices, param_needed, explicit, report, t0)
        if not self.cancel.is_set() and by_level["model"]:
            self._run_model_level(by_level["model"], slices, model_slices, scope_key, report)
        if not self.cancel.is_set() and by_level["cross"]:
            self._run_cross_level(by_level["cross"], cross_slices, reference, report)
        report.elapsed = time.perf_counter() - t0
        report.kernel_calls = dict(self.calls)
        report.cancelled = self.cancel.is_set()
        if report.failures:
            shown = "\n  ".join(str(f) for f in report.failures[:10])
            more = (
                f"\n  ... and {len(report.failures) - 10} more" if len(report.failures) > 10 else ""
            )
            warnings.warn(
                f"{len(report.failures)} kernel failure(s) (the run went on; see RunReport.failures):\n  {shown}{more}",
                KernelFailureWarning,
                stacklevel=3,
            )
        return report

    def _check_devices(self, kernels: list[Kernel]) -> None:
        """Device options of the built-in kernels, checked once before any work: a device
        that cannot work here is one ConfigError, not a failure on every slice."""
        from diffract.kernels.device import check_svd_device, resolve_device
        from diffract.kernels.spec import _is_builtin

        for k in kernels:
            if not _is_builtin(k) or not ({"device", "svd_device"} & set(k.options)):
                continue
            opts = self._opts(k)
            try:
                if "device" in k.options:
                    resolve_device(opts.get("device"))
                if "svd_device" in k.options:
                    check_svd_device(opts.get("svd_device"))
            except ConfigError as exc:
                raise ConfigError(f"{exc} (an option of kernel {k.name!r})") from None

    def _planned(self, slices: Iterable[SliceInfo], plans, explicit: set[str]) -> int:
        """How many requested values the plans of ``slices`` would make."""
        return sum(1 for s in slices for k in plans[s.uid][0] for o in k.outputs if o in explicit)

    # --- per-parameter level -------------------------------------------------------------
    def _closure(self, wanted: frozenset[str]) -> list[Kernel]:
        """``registry.closure(wanted)``, once per distinct set of fields in a run."""
        hit = self._closure_cache.get(wanted)
        if hit is None:
            hit = self._closure_cache[wanted] = self.registry.closure(wanted)
        return hit

    def _applicable(self, f: str, ndim: int) -> bool:
        """Whether ``f`` can exist on a slice of ``ndim`` dims (min_ndim of the whole chain)."""
        key = (f, ndim)
        hit = self._applicable_cache.get(key)
        if hit is None:
            k = self.registry.producer(f)
            hit = ndim >= k.min_ndim and all(
                self._applicable(d, ndim)
                for d in k.field_inputs()
                if self.registry.producer(d).level == "param"
            )
            self._applicable_cache[key] = hit
        return hit

    def _slice_plan(
        self, s: SliceInfo, wanted: set[str], explicit: set[str]
    ) -> tuple[list[Kernel], set[str], int, int]:
        """Kernels to run for one slice, fields to load, counts reused and not applicable."""
        present = set(self.store.fields_of(s.uid))
        to_run: dict[str, Kernel] = {}
        to_load: set[str] = set()
        reused = 0
        ndim = s.effective_ndim
        skipped = 0
        for f in [f for f in wanted if not self._applicable(f, ndim)]:
            wanted = wanted - {f}
            skipped += f in explicit

        def need(f: str) -> None:
            if f in present:
                to_load.add(f)
                return
            k = self.registry.producer(f)
            if k.name in to_run:
                return
            for dep in k.field_inputs():
                need(dep)
            to_run[k.name] = k

        for f in sorted(wanted):
            if f in present:
                reused += 1
                continue
            need(f)
        order = [k for k in self._closure(frozenset(wanted)) if k.name in to_run] if wanted else []
        return order, to_load, reused, skipped

    def _chunks(self, slices: list[SliceInfo], min_chunks: int = 1) -> list[list[SliceInfo]]:
        """Consecutive slices grouped under the memory budget; split further (by count) when
        that gives fewer than ``min_chunks`` groups, so parallel workers all get work."""
        chunks = self._budget_chunks(slices)
        if len(chunks) < min_chunks and len(slices) > len(chunks):
            n = min(min_chunks, len(slices))
            chunks = [list(part) for part in _split(slices, n)]
        return chunks

    def _budget_chunks(self, slices: list[SliceInfo]) -> list[list[SliceInfo]]:
        chunks: list[list[SliceInfo]] = []
        cur: list[SliceInfo] = []
        used = 0
        for s in slices:
            size = s.nbytes * WORKING_SET_FACTOR
            if cur and used + size > self.memory_budget:
                chunks.append(cur)
                cur, used = [], 0
            cur.append(s)
            used += size
        if cur:
            chunks.append(cur)
        return chunks

    def _emit(
        self,
        stage: str,
        report: RunReport,
        t0: float,
        chunks_done: int,
        chunks_total: int,
        done: int,
        total: int,
        fld: str | None = None,
        param: str | None = None,
    ) -> None:
        if self.progress is None:
            return
        elapsed = time.perf_counter() - t0
        eta = (elapsed / done) * (total - done) if done else None
        self.progress(
            ProgressEvent(
                stage,
                chunks_done,
                chunks_total,
                done,
                total,
                fld,
                param,
                elapsed,
                eta,
                len(report.failures),
                self.cancel.is_set(),
            )
        )

    def _run_param_level(
        self,
        all_slices: dict[str, SliceInfo],
        needed: dict[str, set[str]],
        explicit: set[str],
        report: RunReport,
        t0: float,
    ) -> None:
        plans: dict[str, tuple[list[Kernel], set[str]]] = {}
        work: list[SliceInfo] = []
        for uid, wanted in needed.items():
            if not wanted:
                continue
            s = all_slices[uid]
            order, to_load, reused, skipped = self._slice_plan(s, wanted, explicit)
            report.reused += reused
            report.not_applicable += skipped
            if order:
                plans[uid] = (order, to_load)
                work.append(s)
        work.sort(key=lambda s: (s.model_id, s.index))
        if self.executor is not None:
            return self._run_param_remote(work, plans, explicit, report, t0)
        chunks = self._chunks(work)
        total = len(work)
        self._emit("start", report, t0, 0, len(chunks), 0, total)
        done = 0
        pool = ThreadPoolExecutor(self.workers) if self.workers > 1 else None
        try:
            for ci, chunk in enumerate(chunks):
                if self.cancel.is_set():
                    report.skipped += self._planned(
                        (s for c in chunks[ci:] for s in c), plans, explicit
                    )
                    break
                batch = self._run_chunk(
                    chunk, plans, explicit, report, t0, ci, len(chunks), done, total, pool
                )
                self.store.commit(batch)
                report.computed += len(batch.fields)
                report.chunks += 1
                done += len(chunk)
                self._emit("chunk", report, t0, ci + 1, len(chunks), done, total)
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        self._emit("done", report, t0, report.chunks, len(chunks), done, total)

    def _run_param_remote(
        self, work: list[SliceInfo], plans, explicit: set[str], report: RunReport, t0: float
    ) -> None:
        """Chunks as tasks on a process pool or a Dask cluster. This process stays the single
        writer: it reads each chunk's inputs, ships them, and commits results in order. At
        most ``slots`` chunks are in flight, and chunks are sized so that all of them
        together fit the memory budget.

        A cancel is passed on to the tasks (they stop after the slice or kernel in
        progress and send back what they finished), tasks not started are cancelled, and
        no new chunk is submitted."""
        from collections import deque

        if not work:  # nothing to run: no pool to start
            self._emit("start", report, t0, 0, 0, 0, 0)
            self._emit("done", report, t0, 0, 0, 0, 0)
            return
        check = getattr(self.executor, "check_kernels", None)
        if check is not None:  # a kernel worker processes cannot receive: one clear error
            check({k.name: k for order, _ in plans.values() for k in order}.values())
        opened = self.executor.open(self.workers)
        slots = opened.slots
        budget = self.memory_budget
        self.memory_budget = max(1, budget // slots)
        try:
            chunks = self._chunks(work, min_chunks=slots)
        finally:
            self.memory_budget = budget
        total = len(work)
        self._emit("start", report, t0, 0, len(chunks), 0, total)
        done = 0
        pending: deque = deque()
        signalled = False

        def watch_cancel() -> None:
            """Pass a cancel on to the tasks once; cancel the ones not started."""
            nonlocal signalled
            if signalled or not self.cancel.is_set():
                return
            signalled = True
            opened.signal_cancel()
            for _, fut in pending:
                # a pool future not started yet is dropped (a running one refuses and stops
                # by itself); Dask futures are left alone (cancelling one that runs would
                # lose its finished slices): a task that starts now returns at once
                if isinstance(fut, concurrent.futures.Future):
                    fut.cancel()

        def finish_one() -> None:
            nonlocal done
            chunk, future = pending.popleft()
            while not future.done():
                watch_cancel()
                time.sleep(0.02)
            if future.cancelled():
                report.skipped += self._planned(chunk, plans, explicit)
                return
            try:
                values, calls = future.result()
            except BrokenProcessPool as exc:
                raise BrokenProcessPool(
                    f"{exc} A worker process ended abruptly: out of memory, or it could "
                    "not load a kernel (kernels must be importable by the worker "
                    "processes; a kernel defined under `if __name__ == '__main__':` "
                    "is not); executor='threads' runs in this process"
                ) from exc
            for name, n in calls.items():
                self.calls[name] = self.calls.get(name, 0) + n
            batch = self._batch(chunk, plans, values, explicit, report)
            self.store.commit(batch)
            report.computed += len(batch.fields)
            report.chunks += 1
            done += len(chunk)
            self._emit("chunk", report, t0, report.chunks, len(chunks), done, total)

        try:
            for ci, chunk in enumerate(chunks):
                watch_cancel()
                if self.cancel.is_set():
                    report.skipped += self._planned(
                        (s for c in chunks[ci:] for s in c), plans, explicit
                    )
                    break
                while len(pending) >= slots:
                    finish_one()
                if self.cancel.is_set():
                    report.skipped += self._planned(
                        (s for c in chunks[ci:] for s in c), plans, explicit
                    )
                    break
                kernels, plan_of, values, opts_of = self._prepare(chunk, plans)
                pending.append(
                    (
                        chunk,
                        opened.submit(
                            remote_chunk, chunk, kernels, plan_of, values, opts_of, opened.token
                        ),
                    )
                )
            while pending:  # finished work is kept, also after a cancel
                finish_one()
        finally:
            opened.close()
        self._emit("done", report, t0, report.chunks, len(chunks), done, total)

    def _load_weights(self, s: SliceInfo) -> np.ndarray | _Failed:
        try:
            w = canonical_layout(_as_float_array(self.store.weights(s.uid)), s)
        except Exception as exc:
            return _Failed(_short_error(exc))
        if not np.all(np.isfinite(w)):
            n_nan = int(np.isnan(w).sum())
            n_inf = int(np.isinf(w).sum())
            return _Failed(f"weights contain {n_nan} NaN and {n_inf} Inf value(s) of {w.size}")
        return w

    def _run_chunk(
        self,
        chunk: list[SliceInfo],
        plans,
        explicit: set[str],
        report: RunReport,
        t0: float,
        ci: int,
        nchunks: int,
        done: int,
        total: int,
        pool,
    ) -> Batch:
        values = self._compute_values(chunk, plans, pool, report, t0, ci, nchunks, done, total)
        return self._batch(chunk, plans, values, explicit, report)

    def _batch(
        self,
        chunk: list[SliceInfo],
        plans,
        values: dict[str, dict[str, Any]],
        explicit: set[str],
        report: RunReport,
    ) -> Batch:
        """The values to persist: requested fields and non-transient intermediates."""
        batch = Batch()
        for s in chunk:
            vals = values[s.uid]
            for k in plans[s.uid][0]:
                for o in k.outputs:
                    if o not in vals:  # not reached: the run was cancelled
                        if o in explicit:
                            if self.cancel.is_set():
                                report.skipped += 1
                            else:  # pragma: no cover - run_kernels fills every planned output
                                report.failures.append(
                                    Failure(s.model_id, s.name, s.uid, o, f"{o!r} was not computed")
                                )
                        continue
                    v = vals[o]
                    if isinstance(v, _NotApplicable):
                        if o in explicit:
                            report.not_applicable += 1
                        continue
                    if isinstance(v, _Failed):
                        if o in explicit:
                            report.failures.append(Failure(s.model_id, s.name, s.uid, o, v.message))
                        continue
                    if o in k.transient:
                        if o not in explicit:
                            continue
                        # split_outputs checked the persisted outputs; a transient one asked
                        # for by name is checked here
                        problem = storable_error(v)
                        if problem is not None:
                            report.failures.append(
                                Failure(
                                    s.model_id,
                                    s.name,
                                    s.uid,
                                    o,
                                    f"KernelDefinitionError: {k.unstorable_message(o, problem)}",
                                )
                            )
                            continue
                    batch.fields[(s.uid, o)] = _normalise(v)
        report.failures[:] = _dedupe(report.failures)
        return batch

    def _prepare(
        self, chunk: list[SliceInfo], plans
    ) -> tuple[
        list[Kernel], dict[str, set[str]], dict[str, dict[str, Any]], dict[str, dict[str, Any]]
    ]:
        """Inputs of a chunk read from the store (weights, stored fields) and its kernels in
        one global dependency order."""
        values: dict[str, dict[str, Any]] = {}
        kernels: dict[str, Kernel] = {}
        plan_of: dict[str, set[str]] = {}
        for s in chunk:
            order, to_load = plans[s.uid]
            vals = values.setdefault(s.uid, {})
            for f in to_load:
                vals[f] = self.store.get((s.uid, f))
            if any("weights" in k.inputs for k in order):
                vals["weights"] = self._load_weights(s)
            vals["slice_info"] = s
            plan_of[s.uid] = {k.name for k in order}
            for k in order:
                kernels.setdefault(k.name, k)
        rank = {
            k.name: i
            for i, k in enumerate(
                self.registry.closure([o for k in kernels.values() for o in k.outputs])
            )
        }
        ordered = sorted(kernels.values(), key=lambda k: rank[k.name])
        return ordered, plan_of, values, {k.name: self._opts(k) for k in ordered}

    def _compute_values(
        self,
        chunk: list[SliceInfo],
        plans,
        pool,
        report: RunReport | None = None,
        t0: float = 0.0,
        ci: int = 0,
        nchunks: int = 0,
        done: int = 0,
        total: int = 0,
    ) -> dict[str, dict[str, Any]]:
        """Run each slice's planned kernels here; values in memory (``_Failed`` /
        ``NOT_APPLICABLE`` markers where a value could not be made). In a param-level run
        (``report`` given) a cancel stops between kernels and between slices: values not
        made then are absent."""
        kernels, plan_of, values, opts_of = self._prepare(chunk, plans)
        cancelled = self.cancel.is_set if report is not None else None

        def on_kernel(k: Kernel, s: SliceInfo) -> None:
            if report is not None:
                self._emit("kernel", report, t0, ci, nchunks, done, total, k.outputs[0], s.name)

        if pool is None or len(chunk) < 2:
            results = [run_kernels(chunk, kernels, plan_of, values, opts_of, on_kernel, cancelled)]
        else:  # workers: parts of the chunk side by side, vectorized kernels included
            parts = [p for p in _split(chunk, self.workers) if p]
            with one_blas_thread():  # N workers x N BLAS threads would oversubscribe the cores
                results = list(
                    pool.map(
                        lambda part: run_kernels(
                            part, kernels, plan_of, values, opts_of, on_kernel, cancelled
                        ),
                        parts,
                    )
                )
        for calls in results:
            for name, n in calls.items():
                self.calls[name] = self.calls.get(name, 0) + n
        return values

    # --- model level -----------------------------------------------------------------------
    def _run_model_level(
        self,
        fields: list[str],
        slices: list[SliceInfo],
        model_slices: Mapping[str, list[SliceInfo]],
        scope_key: str | None,
        report: RunReport,
    ) -> None:
        by_model: dict[str, list[SliceInfo]] = {}
        for s in slices:
            by_model.setdefault(s.model_id, []).append(s)
        batch = Batch()
        for model_id, ms in sorted(by_model.items()):
            if self.cancel.is_set():  # models done so far are kept
                break
            full = len(ms) == len(model_slices.get(model_id, []))
            owner = f"@{model_id}" if full or scope_key is None else f"@{model_id}[{scope_key}]"
            ms = sorted(ms, key=lambda s: s.index)
            computed: dict[str, Any] = {
                f: self.store.get((owner, f)) for f in self.store.fields_of(owner)
            }
            for k in self.registry.closure(fields):
                if k.level != "model" or all(o in computed for o in k.outputs):
                    if k.level == "model" and any(o in fields for o in k.outputs):
                        report.reused += sum(1 for o in k.outputs if o in fields)
                    continue
                args = []
                use = []
                per_param = [
                    i
                    for i in k.inputs
                    if i != "slices" and self.registry.producer(i).level == "param"
                ]
                for s in ms:
                    if all(self.store.has((s.uid, i)) for i in per_param):
                        use.append(s)
                try:
                    for inp in k.inputs:
                        if inp == "slices":
                            args.append(use)
                        elif self.registry.producer(inp).level == "param":
                            args.append([self.store.get((s.uid, inp)) for s in use])
                        else:
                            args.append(computed[inp])
                    if not use and per_param:
                        raise ValueError(
                            f"no slice of the model has {per_param} (not applicable or failed)"
                        )
                except Exception as exc:
                    self._record_failure(
                        k, fields, report, Failure(model_id, "", owner, "", _short_error(exc))
                    )
                    continue
                self._call_owner_kernel(
                    k,
                    args,
                    owner,
                    fields,
                    computed,
                    batch,
                    report,
                    Failure(model_id, "", owner, "", ""),
                )
        self.store.commit(batch)
        report.computed += len(batch.fields)

    def _call_owner_kernel(
        self,
        k: Kernel,
        args: list[Any],
        owner: str,
        fields: list[str],
        computed: dict[str, Any],
        batch: Batch,
        report: RunReport,
        where: Failure,
    ) -> str | None:
        """Call a model- or cross-level kernel for one owner; keep its outputs in ``computed``,
        persist the non-transient (or requested) ones, record a failure if it raises (and
        return its message)."""
        try:
            self._count(k)
            out = k.split_outputs(k.func(*args, **self._opts(k)))
        except Exception as exc:
            self._record_failure(k, fields, report, replace(where, error=_short_error(exc)))
            return _short_error(exc)
        for o, v in out.items():
            computed[o] = v
            if o not in k.transient or o in fields:
                # split_outputs checked the persisted outputs; a transient one asked for by
                # name is checked here
                problem = storable_error(v) if o in k.transient else None
                if problem is not None:
                    self._record_failure(
                        k,
                        [o],
                        report,
                        replace(
                            where,
                            error=f"KernelDefinitionError: {k.unstorable_message(o, problem)}",
                        ),
                    )
                    continue
                batch.fields[(owner, o)] = _normalise(v)
        return None

    @staticmethod
    def _record_failure(k: Kernel, fields: list[str], report: RunReport, where: Failure) -> None:
        for o in k.outputs:
            if o in fields:
                report.failures.append(replace(where, field=o))

    # --- cross-model level -------------------------------------------------------------------
    def _param_values(self, s: SliceInfo, needed: set[str]) -> dict[str, Any]:
        """Per-parameter ``needed`` values of one slice: stored ones loaded, missing ones
        (transient intermediates included) computed in memory. A value that cannot be made
        is a marker (``NOT_APPLICABLE`` or ``_Failed``), so each kernel using it can be
        skipped or failed on its own."""
        out: dict[str, Any] = {}
        wanted: set[str] = set()
        for f in needed:
            if self._applicable(f, s.effective_ndim):
                wanted.add(f)
            else:
                out[f] = NOT_APPLICABLE
        if not wanted:
            return out
        order, to_load, _, _ = self._slice_plan(s, set(wanted), set(wanted))
        # stored values asked for are counted as reused by the plan, not loaded: load them
        produced = {o for k in order for o in k.outputs}
        stored = {f for f in wanted if f not in produced and self.store.has((s.uid, f))}
        if not order:
            for f in wanted:
                try:
                    out[f] = self.store.get((s.uid, f))
                except Exception as exc:
                    out[f] = _Failed(_short_error(exc))
            return out
        try:
            vals = self._compute_values([s], {s.uid: (order, set(to_load) | stored)}, None)[s.uid]
        except Exception as exc:  # a stored input that cannot be read
            return {**out, **{f: _Failed(_short_error(exc)) for f in wanted}}
        for f in wanted:
            out[f] = vals.get(f, _Failed(f"{f!r} was not computed"))
        return out

    def _run_cross_level(
        self, fields: list[str], slices: list[SliceInfo], reference: str, report: RunReport
    ) -> None:
        batch = Batch()
        kernels = [k for k in self.registry.closure(fields) if k.level == "cross"]

        def param_inputs_of(k: Kernel) -> list[tuple[str, str, bool]]:
            """(input name, param field, from the reference) for each param-level input."""
            res = []
            for i in k.inputs:
                if i in _CROSS_SPECIAL:
                    continue
                theirs = i.startswith("ref_")
                base = i[4:] if theirs else i
                if self.registry.producer(base).level == "param":
                    res.append((i, base, theirs))
            return res

        inputs_of = {k.name: param_inputs_of(k) for k in kernels}
        for s in slices:
            if self.cancel.is_set():  # slices done so far are kept
                break
            ref = self._ref_names[s.name]
            owner = f"{s.uid}@{reference}"
            computed: dict[str, Any] = {
                f: self.store.get((owner, f)) for f in self.store.fields_of(owner)
            }
            todo = [k for k in kernels if not all(o in computed for o in k.outputs)]
            report.reused += sum(
                1 for k in kernels if k not in todo for o in k.outputs if o in fields
            )
            if not todo:
                continue
            if s.effective_ndim != ref.effective_ndim:
                report.not_applicable += sum(1 for k in todo for o in k.outputs if o in fields)
                continue
            own_needed = {b for k in todo for (_, b, theirs) in inputs_of[k.name] if not theirs}
            ref_needed = {b for k in todo for (_, b, theirs) in inputs_of[k.name] if theirs}
            own = self._param_values(s, own_needed) if own_needed else {}
            theirs_vals = self._param_values(ref, ref_needed) if ref_needed else {}
            #: outputs of this slice's cross kernels that could not be made, and why
            unmade: dict[str, _Failed | _NotApplicable] = {}
            for k in todo:
                where = Failure(s.model_id, s.name, owner, "", "")
                # inputs checked per kernel: a failed input fails only the kernels using it
                blocked: _Failed | _NotApplicable | None = (
                    NOT_APPLICABLE if s.effective_ndim < k.min_ndim else None
                )
                for name, base, theirs in inputs_of[k.name] if blocked is None else ():
                    v = (theirs_vals if theirs else own)[base]
                    if isinstance(v, _NotApplicable):
                        blocked = v
                        break
                    if isinstance(v, _Failed):
                        side = f" (of the reference {reference}:{ref.name})" if theirs else ""
                        blocked = _Failed(f"LookupError: input {name!r}{side} failed: {v.message}")
                        break
                if blocked is None:  # outputs of other cross kernels of this slice
                    params = {n for n, _, _ in inputs_of[k.name]}
                    for i in k.inputs:
                        if i in params or i in _CROSS_SPECIAL or i in computed:
                            continue
                        v = unmade.get(i)
                        if isinstance(v, _NotApplicable):
                            blocked = v
                        else:
                            why = v.message if isinstance(v, _Failed) else "it was not computed"
                            blocked = _Failed(f"LookupError: input {i!r} failed: {why}")
                        break
                if isinstance(blocked, _NotApplicable):
                    report.not_applicable += sum(1 for o in k.outputs if o in fields)
                    unmade.update(dict.fromkeys(k.outputs, blocked))
                    continue
                if isinstance(blocked, _Failed):
                    self._record_failure(k, fields, report, replace(where, error=blocked.message))
                    unmade.update(dict.fromkeys(k.outputs, blocked))
                    continue
                try:
                    args = []
                    for inp in k.inputs:
                        if inp == "slice_info":
                            args.append(s)
                        elif inp == "ref_slice_info":
                            args.append(ref)
                        elif inp == "weights":
                            args.append(
                                canonical_layout(_as_float_array(self.store.weights(s.uid)), s)
                            )
                        elif inp == "ref_weights":
                            args.append(
                                canonical_layout(_as_float_array(self.store.weights(ref.uid)), ref)
                            )
                        elif inp.startswith("ref_") and inp[4:] in theirs_vals:
                            args.append(theirs_vals[inp[4:]])
                        elif inp in own:
                            args.append(own[inp])
                        else:  # an output of another cross kernel
                            args.append(computed[inp])
                except Exception as exc:
                    self._record_failure(k, fields, report, replace(where, error=_short_error(exc)))
                    unmade.update(dict.fromkeys(k.outputs, _Failed(_short_error(exc))))
                    continue
                error = self._call_owner_kernel(
                    k, args, owner, fields, computed, batch, report, where
                )
                if error is not None:
                    unmade.update(dict.fromkeys(k.outputs, _Failed(error)))
        self.store.commit(batch)
        report.computed += len(batch.fields)


_CROSS_SPECIAL = frozenset({"slice_info", "weights", "ref_weights", "ref_slice_info"})


def _split(items: list[SliceInfo], n: int) -> list[list[SliceInfo]]:
    """``n`` groups of about equal total size (largest first, each to the lightest group)."""
    groups: list[list[SliceInfo]] = [[] for _ in range(max(1, n))]
    loads = [0] * len(groups)
    for s in sorted(items, key=lambda s: -s.nbytes):
        i = loads.index(min(loads))
        groups[i].append(s)
        loads[i] += s.nbytes
    order = {s.uid: k for k, s in enumerate(items)}
    return [sorted(g, key=lambda s: order[s.uid]) for g in groups]


def _normalise(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v


def _dedupe(failures: list[Failure]) -> list[Failure]:
    seen: set[tuple[str, str]] = set()
    out = []
    for f in failures:
        key = (f.uid, f.field)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
