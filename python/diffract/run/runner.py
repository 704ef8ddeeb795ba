"""The scheduler's entry point: :class:`Runner` runs one ``apply``. It plans what is missing
(:mod:`~diffract.run.plan`), then runs the parameter, model and cross-model levels
(:mod:`~diffract.run.levels`), parameter-level values chunk by chunk under a memory budget
(:mod:`~diffract.run.chunks`), each chunk written atomically, with progress and cancel.

Reuse is keyed by presence: a value already in the store is never recomputed (erase it to
recompute). A kernel that raises on one slice is recorded as a failure for that slice and
its dependents; the run goes on.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from diffract._errors import ConfigError, OptionValueError, UnknownOptionError
from diffract._vocab.config import DEFAULT_MEMORY_BUDGET
from diffract._vocab.slices import SliceInfo
from diffract.kernels.registry import KernelRegistry
from diffract.kernels.spec import SPECIAL_INPUTS, Kernel, check_options, is_builtin
from diffract.run.executors import make_executor
from diffract.run.levels import run_cross_level, run_model_level, run_param_level
from diffract.run.plan import Planner, make_plan
from diffract.run.report import (
    KernelFailureWarning,
    NonFiniteWeightsWarning,
    NothingToCompareWarning,
    ProgressCallback,
    RunReport,
)
from diffract.run.state import RunState
from diffract.store import Store

__all__ = ["Runner", "check_kernel_options_shape", "validate_options"]


class Runner:
    """Runs one ``apply``: param-level fields chunk by chunk, then model, then cross level.

    Args:
        store: the store read and written.
        registry: the kernels.
        options: options for every kernel that has them (``reference`` names the reference
            model of cross-model fields).
        kernel_options: per-kernel options (kernel name -> options).
        memory_budget: bytes the chunks in flight may use together.
        workers: threads (or processes, with ``executor="processes"``).
        progress: called with each :class:`~diffract.run.report.ProgressEvent`.
        cancel: set it to stop the run; finished work is kept.
        call_counter: kernel name -> slice calls, updated in place.
        executor: where chunks run (see :mod:`~diffract.run.executors`).
        warn_failures: warn (``KernelFailureWarning``) when kernels failed; False when the
            caller raises them instead.

    Raises:
        ConfigError: an unknown executor.
    """

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
        warn_failures: bool = True,
    ) -> None:
        #: warn about failures at the end of a run (off when the caller raises them instead)
        self.warn_failures = warn_failures
        self.state = RunState(
            store,
            registry,
            options=dict(options or {}),
            kernel_options={k: dict(v) for k, v in (kernel_options or {}).items()},
            memory_budget=memory_budget,
            workers=max(1, int(workers)),
            progress=progress,
            cancel=cancel or threading.Event(),
            calls=call_counter if call_counter is not None else {},
        )
        self.executor = make_executor(executor)

    @property
    def cancel(self) -> threading.Event:
        """The run's cancel event."""
        return self.state.cancel

    @property
    def calls(self) -> dict[str, int]:
        """Kernel name -> slice calls made."""
        return self.state.calls

    def run(
        self,
        fields: Iterable[str],
        slices: list[SliceInfo],
        *,
        scope_key: str | None,
        model_slices: Mapping[str, list[SliceInfo]],
    ) -> RunReport:
        """Compute what is missing of ``fields`` over ``slices`` and store it.

        Args:
            fields: the fields asked for.
            slices: the selected slices.
            scope_key: the key of the selection (owner of model fields of partly selected
                models).
            model_slices: model id -> all its slices.

        Returns:
            The :class:`~diffract.run.report.RunReport` (failures are also warned about).

        Raises:
            UnknownFieldError: a field no registered kernel produces.
            UnknownOptionError, UnknownModelError: cross-model fields without a (stored)
                reference.
            ConfigError: a device option that cannot work here.
        """
        state = self.state
        fields = tuple(dict.fromkeys(fields))
        kernels = state.registry.closure(fields)  # raises UnknownFieldError
        # options were validated by Compute.apply, before any widget or store work
        self._check_devices(kernels)
        state.report = report = RunReport(requested=fields)
        state.t0 = time.perf_counter()
        planner = Planner(state.store, state.registry)
        plan = make_plan(
            state.store,
            state.registry,
            fields,
            slices,
            reference=state.options.get("reference"),
            scope_key=scope_key,
            model_slices=model_slices,
            planner=planner,
        )
        for note in plan.notes:
            report.notes.append(note)
            warnings.warn(note, NothingToCompareWarning, stacklevel=3)
        state.averaged = averaged_inputs(state.registry, plan.by_level["model"])
        run_param_level(state, plan, self.executor)
        if not state.cancelled and plan.by_level["model"]:
            run_model_level(state, plan)
        if not state.cancelled and plan.by_level["cross"]:
            run_cross_level(state, planner, plan)
        report.elapsed = time.perf_counter() - state.t0
        report.kernel_calls = dict(state.run_calls)
        report.cancelled = state.cancelled
        if report.non_finite:
            _warn_non_finite(report)
        if report.failures and self.warn_failures:
            _warn_failures(report)
        return report

    def _check_devices(self, kernels: list[Kernel]) -> None:
        """Device options of the built-in kernels, checked once before any work: a device
        that cannot work here is one ConfigError, not a failure on every slice."""
        from diffract.kernels.device import check_svd_device, resolve_device

        for k in kernels:
            if not is_builtin(k) or not ({"device", "svd_device"} & set(k.options)):
                continue
            opts = self.state.opts(k)
            try:
                if "device" in k.options:
                    resolve_device(opts.get("device"))
                if "svd_device" in k.options:
                    check_svd_device(opts.get("svd_device"))
            except ConfigError as exc:
                raise ConfigError(f"{exc} (an option of kernel {k.name!r})") from None


def averaged_inputs(
    registry: KernelRegistry, model_fields: Iterable[str]
) -> dict[str, tuple[str, ...]]:
    """Per-parameter field -> the model-level fields of ``model_fields`` computed from it
    (through other model-level fields too), so a slice where it fails is reported."""
    out: dict[str, list[str]] = {}
    for f in model_fields:
        todo, seen = [f], set()
        while todo:
            k = registry.producer(todo.pop())
            for inp in k.inputs:
                if inp in seen or inp in SPECIAL_INPUTS:
                    continue
                seen.add(inp)
                level = registry.producer(inp).level
                if level == "param":
                    out.setdefault(inp, []).append(f)
                elif level == "model":
                    todo.append(inp)
    return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}


def _warn_non_finite(report: RunReport) -> None:
    shown = "\n  ".join(f"{e.model_id}:{e.name}: {e.reason}" for e in report.non_finite[:10])
    n = len(report.non_finite)
    more = f"\n  ... and {n - 10} more" if n > 10 else ""
    warnings.warn(
        f"{n} slice(s) with NaN or Inf weights (or a NaN input): their values are stored as "
        "NaN, as Diffract stores them (see "
        f"RunReport.non_finite):\n  {shown}{more}",
        NonFiniteWeightsWarning,
        stacklevel=4,
    )


def _warn_failures(report: RunReport) -> None:
    shown = "\n  ".join(str(f) for f in report.failures[:10])
    more = f"\n  ... and {len(report.failures) - 10} more" if len(report.failures) > 10 else ""
    warnings.warn(
        f"{len(report.failures)} kernel failure(s) (the run went on; see RunReport.failures; "
        "Diffract's apply raises SessionError here: apply(..., on_failure='raise') does too):"
        f"\n  {shown}{more}",
        KernelFailureWarning,
        stacklevel=4,
    )


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
        from diffract.kernels.conventions import ww_keyword_hints

        raise UnknownOptionError(
            f"unknown option(s) {unknown} for the kernels of this apply; "
            f"options they accept: {sorted(known) or 'none'}{ww_keyword_hints(unknown)}"
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
