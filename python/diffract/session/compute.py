"""``scope.compute``: run kernels on the scope (``apply``), ``erase`` and ``configure``; the
run's progress display (a widget in a notebook, a bar in a terminal)."""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from diffract._errors import (
    InvalidArgumentError,
    KernelExecutionError,
    ScopeValidationError,
    UnknownOptionError,
)
from diffract._vocab.config import check_workers, parse_bytes
from diffract._vocab.owners import parse_owner
from diffract._vocab.slices import SliceInfo
from diffract.extract.references import ReferenceReader
from diffract.kernels.registry import BINARY_KERNELS, KernelRegistry
from diffract.kernels.spec import SPECIAL_INPUTS, Kernel, check_options
from diffract.run.provenance import ReusedOptionsWarning, option_records, reuse_mismatches
from diffract.run.report import ProgressCallback, ProgressEvent, RunReport
from diffract.run.runner import Runner, check_kernel_options_shape, validate_options
from diffract.session.models import read_weights
from diffract.session.scope import Namespace, SessionLike, check_field_names, check_flag, frontend
from diffract.session.summaries import NOTHING_WRITTEN, ApplySummary
from diffract.store import Batch, Store

_log = logging.getLogger("diffract.session.compute")

#: what ``apply`` does when kernels fail: warn and return the report, or raise after storing
ON_FAILURE = ("warn", "raise")


def check_on_failure(value: Any) -> str:
    """``value`` if it is one of :data:`ON_FAILURE`, else an InvalidArgumentError."""
    if not isinstance(value, str) or value not in ON_FAILURE:
        raise InvalidArgumentError(
            f"on_failure must be 'warn' or 'raise', got {type(value).__name__}: {value!r}"
        )
    return str(value)


class _StoreView:
    """The store as the runner sees it, with external (referenced) weights resolved."""

    def __init__(self, store: Store, references: ReferenceReader) -> None:
        self._store = store
        self._references = references

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def weights(self, uid: str) -> np.ndarray:
        return read_weights(self._store, self._references, self._store.slice(uid))


class ErasedCount(int):
    """What :meth:`Compute.erase` removed: the number of values (an int), with ``fields``
    (field -> values erased) and ``dependents`` (the fields erased because they are computed
    from the fields named)."""

    fields: dict[str, int]
    dependents: list[str]

    def __new__(
        cls, n: int, fields: dict[str, int] | None = None, dependents: list[str] | None = None
    ) -> ErasedCount:
        obj = super().__new__(cls, n)
        obj.fields = dict(fields or {})
        obj.dependents = list(dependents or [])
        return obj

    def __repr__(self) -> str:
        return f"ErasedCount({int(self)}, fields={self.fields!r}, dependents={self.dependents!r})"


def dependents(registry: KernelRegistry, fields: Sequence[str]) -> list[str]:
    """Fields computed (directly or through others) from ``fields``, not among them. The
    other outputs of the kernel that makes a field count too (recomputing ``weights_svals``
    remakes the transient ``kernel_svals``, so ``rank_loss``, made from it, is stale)."""
    users: dict[str, set[str]] = {}
    for k in registry.kernels():
        for i in k.field_inputs():
            users.setdefault(i, set()).update(k.outputs)
        for o in k.outputs:
            users.setdefault(o, set()).update(x for x in k.outputs if x != o)
    seen = set(fields)
    out: list[str] = []
    todo = list(fields)
    while todo:
        for f in sorted(users.get(todo.pop(0), ())):
            if f not in seen:
                seen.add(f)
                out.append(f)
                todo.append(f)
    return out


def _depends_on_scope(
    store: Store, owner: str, uids: set[str], models: set[str], names: set[tuple[str, str]]
) -> bool:
    """Whether values stored under ``owner`` were computed from slices of the scope: the
    slice itself, a model owner (any selection) of a scope model, or a cross pair with a
    scope slice on either side."""
    o = parse_owner(owner)
    if o.level == "model":
        return o.model_id in models
    if o.level == "cross":
        if o.uid in uids:
            return True
        try:
            return (o.model_id, store.slice(o.uid).name) in names
        except Exception:
            return False
    return owner in uids


def _check_run_args(progress: Any, cancel: Any, kernel_options: Any) -> None:
    """The run settings of ``apply``, checked before any work."""
    if (
        progress is not None
        and not isinstance(progress, (bool, np.bool_))
        and not callable(progress)
    ):
        raise InvalidArgumentError(
            "progress must be None, True, False or a callback receiving ProgressEvent, "
            f"got {type(progress).__name__}: {progress!r}"
        )
    if cancel is not None and not callable(getattr(cancel, "is_set", None)):
        raise InvalidArgumentError(
            f"cancel must be a threading.Event, got {type(cancel).__name__}: {cancel!r}"
        )
    check_kernel_options_shape(kernel_options)


def _budget_and_workers(
    session: SessionLike, memory_budget: int | str | None, workers: int | None
) -> tuple[int, int]:
    """The run's memory budget and worker count: given ones checked, else the session's."""
    budget = (
        parse_bytes(memory_budget, "memory_budget")
        if memory_budget is not None
        else session.memory_budget
    )
    return budget, check_workers(workers) if workers is not None else session.workers


def _run_options(
    session: SessionLike,
    fields: Sequence[str],
    options: dict[str, Any],
    kernel_options: dict[str, dict[str, Any]] | None,
    conventions: str | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The options of one run: configured ones where a kernel of the run has them (the
    registry's ``configured``, then the session's), then the run's convention preset, then
    its own options; all validated here, once (an option no
    kernel of the run takes is an error)."""
    from diffract.kernels.conventions import with_conventions  # light, and only when run

    closure = session.registry.closure(fields)
    names = {k.name for k in closure}
    known = {o for k in closure for o in k.options}
    merged_opts = {k: v for k, v in session.options.items() if k in known}
    merged_opts.update(with_conventions(conventions, options, known))
    # a Diffract-style registry's own configuration (KernelRegistry.configure_kernel) first
    configured: dict[str, dict[str, Any]] = getattr(session.registry, "configured", {})
    merged_kopts = {k: dict(v) for k, v in configured.items() if k in names and v}
    for k, v in session.kernel_options.items():
        if k in names:
            merged_kopts.setdefault(k, {}).update(v)
    for k, v in (kernel_options or {}).items():
        merged_kopts.setdefault(k, {}).update(v)
    validate_options(closure, merged_opts, merged_kopts)
    return merged_opts, merged_kopts


def _kernel_options(
    session: SessionLike,
    fields: Sequence[str],
    options: dict[str, Any],
    kernel_options: dict[str, dict[str, Any]],
) -> tuple[list[Kernel], dict[str, dict[str, Any]], dict[str, set[str]]]:
    """The run's kernels, the options each runs with, and the options given for each (by
    name, a convention, ``configure`` or ``kernel_options``)."""
    closure = session.registry.closure(fields)
    opts_of, given = {}, {}
    for k in closure:
        own = kernel_options.get(k.name, {})
        opts_of[k.name] = {**k.resolve_options(options), **own}
        given[k.name] = (set(options) & set(k.options)) | set(own)
    return closure, opts_of, given


def _warn_reuse(
    store: Any,
    fields: Sequence[str],
    closure: list[Kernel],
    opts_of: dict[str, dict[str, Any]],
    given: dict[str, set[str]],
    selected: list[Any],
) -> None:
    """Warn when the run reuses stored values computed with other options than given."""
    if not any(given.values()):
        return
    lines = reuse_mismatches(store, closure, opts_of, given, selected)
    if not lines:
        return
    shown = "\n  ".join(lines[:10]) + (
        f"\n  ... and {len(lines) - 10} more" if len(lines) > 10 else ""
    )
    warnings.warn(
        f"apply({', '.join(map(repr, fields))}) reuses stored values computed with other "
        "options than those given (stored values are kept whatever the options, as in "
        "Diffract):\n  "
        f"{shown}\napply(..., recompute=True) computes them again with the options given "
        "(or erase them first: compute.erase(field)).",
        ReusedOptionsWarning,
        stacklevel=3,
    )


class Compute(Namespace):
    """Run kernels on the scope: ``apply`` (missing fields only), ``erase``, ``configure``."""

    def apply(
        self,
        *fields: str,
        progress: bool | ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        workers: int | None = None,
        memory_budget: int | str | None = None,
        executor: Any = None,
        kernel_options: dict[str, dict[str, Any]] | None = None,
        conventions: str | None = None,
        on_failure: str | None = None,
        recompute: bool = False,
        **options: Any,
    ) -> RunReport:
        """Compute ``fields`` (and what they depend on) where they are not stored yet.

        Stored values are reused whatever the options (Diffract's rule); when an option
        given to this apply differs from the one stored values were computed with (the
        store records them per model), apply warns (``ReusedOptionsWarning``), naming the
        field, the stored option and the one asked for. ``recompute=True`` computes them
        again instead.

        A kernel that fails on a slice does not stop the run: the values that succeed are
        stored and the failures listed in the report (and warned about); with
        ``on_failure="raise"`` apply then raises, as Diffract's does. A slice whose weights
        hold NaN or Inf gets NaN values (Diffract's), noted in ``RunReport.non_finite``.

        Args:
            *fields: field names, e.g. ``apply("frob_norm", "stable_rank")``.
            progress: None (auto: a widget in a notebook, a bar in a terminal), True
                (terminal bar), False, or a callback receiving ProgressEvent.
            cancel: an event that stops the run after the slice or kernel in progress.
            workers: worker threads or processes (default: the session's).
            memory_budget: bytes (or ``"2GB"``) of weights a chunk may hold.
            executor: "threads" (default), "processes", a dask ``Client`` or a scheduler
                address; chunks then run there while this process stays the single writer.
            kernel_options: ``{"kernel": {...}}`` options for one kernel.
            conventions: a kernel-option preset for this run, e.g. ``"weightwatcher"``
                (:data:`diffract.kernels.ww.CONVENTIONS`); options given by name win.
            on_failure: ``"warn"`` (warn, return the report) or ``"raise"`` (raise
                :class:`~diffract._errors.KernelExecutionError`, a ``SessionError``, once the
                values that succeeded are stored); None: the session's ``on_failure``.
            recompute: True erases (in this scope) the stored values of ``fields`` and of
                the fields they are computed from whose kernels take an option given here,
                with what depends on them, and computes them again.
            **options: kernel options by name, for every kernel of this run that has them;
                they override :meth:`configure`.

        Returns:
            The run's :class:`RunReport` (also kept as ``session.last_report``); its
            ``summary`` is Diffract's :class:`~diffract.session.summaries.ApplySummary`.
            With no field, as in Diffract, a warning is logged and the report is empty.

        Raises:
            StoreError: the session is read-only.
            KernelExecutionError: kernels failed and ``on_failure`` is ``"raise"``.
            FieldNameError: a field that is not a string (a ``KernelNotFoundError``).
            InvalidArgumentError: a bad field name, setting or option value.
            UnknownFieldError, UnknownOptionError: a field or option no kernel has.
            ScopeValidationError: cross-model fields without ``reference`` on a scope that
                does not hold exactly two models.
        """
        session = self._session
        session.check_writable()
        failure_mode = check_on_failure(
            on_failure if on_failure is not None else getattr(session, "on_failure", "warn")
        )
        if not fields:
            _log.warning("No fields specified for computation (apply() computes nothing)")
            empty = RunReport(requested=())
            empty.summary = ApplySummary()  # type: ignore[attr-defined]
            return empty
        check_field_names(fields, "apply()")
        for f in fields:
            session.registry.producer(f)  # unknown field: clear error before any work
        _check_run_args(progress, cancel, kernel_options)
        self._pair_reference(fields, options)
        budget, n_workers = _budget_and_workers(session, memory_budget, workers)
        merged_opts, merged_kopts = _run_options(
            session, fields, options, kernel_options, conventions
        )
        self._store.refresh()
        recompute = check_flag(recompute, "recompute")
        closure, opts_of, given = _kernel_options(session, fields, merged_opts, merged_kopts)
        if recompute:
            self._erase_for_recompute(fields, closure, given)
        else:
            _warn_reuse(self._store, fields, closure, opts_of, given, self._scope.slices())
        cancel = cancel or threading.Event()
        session.cancel_event = cancel
        callback, finish = progress_callback(progress, fields, cancel)
        runner = Runner(
            cast(Store, _StoreView(self._store, session.references)),  # a Store by delegation
            session.registry,
            options=merged_opts,
            kernel_options=merged_kopts,
            memory_budget=budget,
            workers=n_workers,
            progress=callback,
            cancel=cancel,
            call_counter=session.kernel_calls,
            executor=executor if executor is not None else session.executor,
            warn_failures=failure_mode == "warn",  # "raise" raises them below instead
        )
        before = set(self._store.keys())
        report = self._run(runner, fields, finish)
        self._store.refresh()
        written = set(self._store.keys()) - before
        if written:  # the options the new values were computed with
            docs = option_records(self._store, closure, opts_of, written)
            if docs:
                self._store.commit(Batch(documents=docs))
        #: Diffract's view of the run: the fields written, by level
        report.summary = summarize(  # type: ignore[attr-defined]
            session.registry, fields, written
        )
        session.last_report = report
        if report.failures and failure_mode == "raise":
            shown = "; ".join(str(f) for f in report.failures[:3])
            more = f" (and {len(report.failures) - 3} more)" if len(report.failures) > 3 else ""
            raise KernelExecutionError(
                f"Failed to produce fields: {len(report.failures)} kernel failure(s): "
                f"{shown}{more}; the values that succeeded are stored, the run's report is "
                "this error's .report",
                report,
            )
        return report

    def _pair_reference(self, fields: Sequence[str], options: dict[str, Any]) -> None:
        """Cross-model fields without ``reference``: exactly two models in scope, else raise.

        With two, the first id (sorted) becomes the reference of the run.
        """
        session = self._session
        if options.get("reference") or session.options.get("reference"):
            return
        closure = session.registry.closure(fields)
        binary = (
            BINARY_KERNELS
            | self._scope.session.binary_kernels
            | getattr(session.registry, "binary", set())
        )
        cross = [k for k in closure if k.level == "cross" and k.name in binary]
        if not cross:
            return  # other cross-model fields name their reference model
        models = self._scope.model_ids()
        if len(models) == 2:
            options["reference"] = models[0]
            return
        field = next(f for f in fields if any(f in k.outputs for k in closure))
        raise ScopeValidationError(
            f"Cannot produce {field!r}: it depends on the cross-model kernel "
            f"{cross[0].name!r}, which compares exactly two models, but the current scope has "
            f"{len(models)}: {models}. Restrict the scope to a model pair, e.g. "
            f"session.filter(model_ids={models[:2] or ['a', 'b']!r}).compute.apply({field!r}), "
            "or pass reference='<model_id>'."
        )

    def _selected(self, selected: Sequence[SliceInfo], fields: Sequence[str]) -> None:
        """Hook: ``apply`` has read its selection and runs ``fields`` on it next (nothing
        here; :mod:`diffract.compat` records the names Diffract's aggregates need)."""

    def _erase_for_recompute(
        self, fields: Sequence[str], closure: list[Kernel], given: dict[str, set[str]]
    ) -> None:
        """``apply(..., recompute=True)``: erase ``fields`` and the stored outputs of the
        kernels given options (erase takes their dependents too)."""
        named = list(fields)
        for k in closure:
            if given.get(k.name):
                named += [o for o in k.outputs if o not in k.transient]
        self.erase(*dict.fromkeys(named))

    def _run(self, runner: Runner, fields: Sequence[str], finish: Finish | None) -> RunReport:
        """Run on the scope's selection (read once); then close the progress and the run."""
        scope = self._scope
        try:
            selected = scope.slices()
            self._selected(selected, fields)
            return runner.run(
                fields,
                selected,
                scope_key=None if scope.filter_chain.is_empty else scope.filter_chain.key(),
                model_slices={m: self._store.slices(m) for m in {s.model_id for s in selected}},
            )
        finally:
            if finish is not None:
                finish()
            self._session.cancel_event = None

    def apply_async(self, *fields: str, display: bool = False, **options: Any) -> Any:
        """Start ``apply`` in a worker thread and return at once with a run handle.

        In a notebook the handle shows the progress widget, whose Cancel button works while
        the run goes on. Needs the widgets extra.

        Args:
            *fields: field names, as for :meth:`apply`.
            display: show the progress widget now.
            **options: what :meth:`apply` takes.

        Returns:
            A :class:`diffract.widgets.ProgressRun`: ``run.wait()`` or ``await run`` gives
            the :class:`RunReport`.

        Raises:
            InvalidArgumentError: ``display`` is not a bool.
            ImportError: the widgets extra is not installed.
        """
        display = check_flag(display, "display")
        return frontend("run_with_progress")(self._scope, *fields, display=display, **options)

    def cancel(self) -> None:
        """Ask the running ``apply`` to stop after the slice or kernel in progress.

        Values finished so far are stored; ``RunReport.skipped`` counts the rest.
        """
        ev = self._session.cancel_event
        if ev is not None:
            ev.set()

    def erase(self, *fields: str) -> ErasedCount:
        """Remove stored values of ``fields`` in this scope so ``apply`` recomputes them.

        Also erases the stored values computed from them (their dependents in the registry,
        transitively: erasing ``esd`` also erases ``pl_alpha``; erasing ``frob_norm`` also
        erases ``model_frob_norm`` of the scope's models and ``delta_frob_norm`` of pairs with
        a slice of the scope on either side), which would be stale otherwise.

        Args:
            *fields: field names.

        Returns:
            The number of values erased, an int that also says what was erased: ``.fields``
            (field -> values erased) and ``.dependents`` (fields erased because they depend
            on those named).

        Raises:
            StoreError: the session is read-only.
            ValueError: no field given.
            InvalidArgumentError, UnknownFieldError: a bad or unknown field name.
        """
        session = self._session
        session.check_writable()
        if not fields:
            raise ValueError("erase() needs the field names to erase, e.g. erase('frob_norm')")
        check_field_names(fields, "erase()")
        registry = session.registry
        for f in fields:
            registry.producer(f)
        named = list(dict.fromkeys(fields))
        store = self._store
        store.refresh()
        owners = self._scope.owners()
        erase = set(store.present([(o, f) for o in owners for f in named]))
        erased_too = dependents(registry, named)
        if erased_too:
            slices = self._scope.slices()
            uids = {s.uid for s in slices}
            models = {s.model_id for s in slices}
            names = {(s.model_id, s.name) for s in slices}
            for o, f in store.keys():
                if f in erased_too and _depends_on_scope(store, o, uids, models, names):
                    erase.add((o, f))
        store.commit(Batch(erase=sorted(erase)))
        counts: dict[str, int] = {}
        for _, f in erase:
            counts[f] = counts.get(f, 0) + 1
        return ErasedCount(
            len(erase),
            fields={f: counts[f] for f in [*named, *erased_too] if f in counts},
            dependents=[f for f in erased_too if f in counts],
        )

    def configure(
        self, kernel_or_field: str | None = None, conventions: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """Set kernel options for this session's later runs.

        Stored results are kept: erase them to recompute.

        Args:
            kernel_or_field: a kernel (or a field it computes) to configure only it; None
                for any kernel with those option names.
            conventions: a kernel-option preset (e.g. ``"weightwatcher"``) set as if its
                options were given here; options given by name win.
            **options: option values.

        Returns:
            The options now configured (for that kernel, or session-wide).

        Raises:
            InvalidArgumentError: ``kernel_or_field`` is not a string, or a bad option value.
            UnknownOptionError: an option no kernel (or not that kernel) has.
        """
        from diffract.kernels.conventions import with_conventions

        session = self._session
        if kernel_or_field is None:
            known = {o for k in session.registry.kernels() for o in k.options}
            options = with_conventions(conventions, options, known)
            unknown = sorted(set(options) - known)
            if unknown:
                raise UnknownOptionError(
                    f"no kernel has option(s) {unknown}; known options: {sorted(known)}"
                )
            check_options(session.registry.kernels(), options)  # before anything is kept
            session.options.update(options)
            return dict(session.options)
        if not isinstance(kernel_or_field, str):
            raise InvalidArgumentError(
                "configure() takes a kernel or field name (a string) or None, got "
                f"{type(kernel_or_field).__name__}: {kernel_or_field!r}"
            )
        k: Kernel = session.registry.kernel(kernel_or_field)
        options = with_conventions(conventions, options, set(k.options))
        bad = sorted(set(options) - set(k.options))
        if bad:
            raise UnknownOptionError(
                f"kernel {k.name!r} has no option(s) {bad}; it accepts {sorted(k.options)}"
            )
        check_options([k], {}, {k.name: options})  # before anything is kept
        session.kernel_options.setdefault(k.name, {}).update(options)
        return dict(session.kernel_options[k.name])

    def fields(self) -> list[str]:
        """Every field a registered kernel can compute.

        Returns:
            The field names.
        """
        return self._session.registry.fields()

    def describe(self, field: str) -> dict[str, Any]:
        """What computes a field.

        Args:
            field: a field name.

        Returns:
            Its kernel, inputs, outputs, options, level and formula (the kernel's docstring).

        Raises:
            UnknownFieldError: no kernel computes it.
        """
        k = self._session.registry.producer(field)
        return {
            "field": field,
            "kernel": k.name,
            "inputs": list(k.inputs),
            "outputs": list(k.outputs),
            "options": dict(k.options),
            "level": k.level,
            "doc": k.doc,
        }


def summarize(registry: Any, fields: Sequence[str], written: set[tuple[str, str]]) -> ApplySummary:
    """The :class:`ApplySummary` of a run that wrote the ``(owner, field)`` keys ``written``."""
    names = {f for _, f in written}
    by_level: dict[str, list[str]] = {"param": [], "model": [], "cross": []}
    for f in sorted(names):
        if registry.has_field(f) and f not in SPECIAL_INPUTS:
            by_level[registry.producer(f).level].append(f)
    return ApplySummary(
        parameter_fields=tuple(by_level["param"]),
        in_model_fields=tuple(by_level["model"]),
        cross_model_fields=tuple(by_level["cross"]),
        skipped=tuple((f, NOTHING_WRITTEN) for f in fields if f not in names),
    )


Finish = Callable[[], None]


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython already imported, a ZMQ shell)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython() if hasattr(ipython, "get_ipython") else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def progress_callback(
    progress: bool | ProgressCallback | None,
    fields: Sequence[str],
    cancel: threading.Event | None = None,
) -> tuple[ProgressCallback | None, Finish | None]:
    """The progress callback of one run and what to call when it ends.

    Args:
        progress: False (none), a callback (used as is), True (a terminal bar) or None (the
            widget in a notebook, a bar on a terminal, nothing otherwise).
        fields: the fields the run computes (the bar's label).
        cancel: the run's cancel event (the widget's Cancel button sets it).

    Returns:
        ``(callback, finish)``; either may be None.
    """
    if progress is False:
        return None, None
    if callable(progress):
        return progress, None
    if progress is None:
        if in_notebook():
            try:
                widget: tuple[ProgressCallback, Finish] = frontend("notebook_progress")(
                    fields, cancel=cancel
                )
                return widget
            except ImportError:
                pass
        if not sys.stderr.isatty():
            return None, None
    return _tqdm_progress(fields)


def _tqdm_progress(fields: Sequence[str]) -> tuple[ProgressCallback, Finish]:
    from tqdm.auto import tqdm

    bar: dict[str, Any] = {}

    def on_event(ev: ProgressEvent) -> None:
        # the bar is the work done (kernel steps, when the engine counts them); the postfix
        # counts the requested values made, then (shortened) the kernel in progress
        steps = ev.steps_total > 0
        if ev.stage == "start":
            bar["bar"] = tqdm(
                total=ev.steps_total if steps else ev.slices_total,
                desc=", ".join(fields)[:40],
                unit="step" if steps else "slice",
                leave=True,
            )
            return
        b = bar.get("bar")
        if b is None:
            return
        now = f"values {ev.values_done}/{ev.values_total}" if ev.values_total else ""
        if ev.kernel:
            now += f" · {ev.kernel} @ {ev.param or ''}"
        elif ev.param:
            now += f" · {ev.field} @ {ev.param}"
        b.set_postfix_str(now.strip(" ·")[:60], refresh=False)
        b.n = max(b.n, ev.steps_done if steps else ev.slices_done)
        b.refresh()

    def finish() -> None:
        if "bar" in bar:
            bar["bar"].close()

    return on_event, finish
