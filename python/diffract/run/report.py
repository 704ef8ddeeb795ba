"""What a run reports: progress events, failures and the final :class:`RunReport`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "Failure",
    "KernelFailureWarning",
    "NonFiniteWeightsWarning",
    "NotApplicableSlice",
    "NothingToCompareWarning",
    "ProgressCallback",
    "ProgressEvent",
    "ReusedOptionsWarning",
    "RunReport",
]


class KernelFailureWarning(RuntimeWarning):
    """Some kernels failed on some parameters (see ``RunReport.failures``)."""


class NonFiniteWeightsWarning(RuntimeWarning):
    """Some slices' weights hold NaN or Inf: their values were stored as NaN, as the
    published Diffract stores them (see ``RunReport.non_finite``)."""


class NothingToCompareWarning(RuntimeWarning):
    """Cross-model fields were asked for, but some (or every) slice of the selection has no
    same-named counterpart to compare with, so they were not computed for it (see
    ``RunReport.notes``)."""


class ReusedOptionsWarning(UserWarning):
    """``apply`` was given an option that differs from the one its stored values were
    computed with, and reused them (stored values are kept whatever the options, as in
    Diffract); ``apply(..., recompute=True)`` computes them again."""


@dataclass(frozen=True)
class _SliceNote:
    """What a report says about one slice: its model, name and uid (the fields come first)."""

    model_id: str
    name: str
    uid: str


@dataclass(frozen=True)
class Failure(_SliceNote):
    """A kernel that raised on one parameter (or one model, for aggregates)."""

    field: str
    error: str

    def __str__(self) -> str:
        return f"{self.model_id}:{self.name} [{self.field}] {self.error}"


@dataclass(frozen=True)
class NotApplicableSlice(_SliceNote):
    """A slice whose requested values a kernel declared not applicable, and why (e.g. the
    WeightWatcher size guards: ``"num_evals 2 < min_evals 8"``)."""

    reason: str

    def __str__(self) -> str:
        return f"{self.model_id}:{self.name} not applicable: {self.reason}"


@dataclass(frozen=True)
class ProgressEvent:
    """One progress notification. ``stage`` is "start", "kernel" (a kernel call starts or
    ends inside a chunk), "commit" (values finished inside a chunk were committed), "chunk"
    (a chunk was committed) or "done".

    ``slices_done`` counts the slices with every planned kernel done, ``slices_stored``
    those whose values are committed (None: the same as ``slices_done``). Inside a chunk
    run in this process, ``steps_done``/``steps_total`` count kernel steps (one per planned
    kernel and slice), ``kernel`` is the kernel in progress, ``kernel_rank`` its place among
    the ``kernels_total`` of the run, ``kernel_done``/``kernel_total`` its slices in the
    chunk; ``eta`` is smoothed (:class:`~diffract.run.eta.EtaEstimator`), ``eta_low`` and
    ``eta_high`` bound it (None until enough of the run is measured for a range to mean
    something). ``values_done``/``values_total`` count the requested values (a requested
    field on a slice) whose kernel has run: what the user asked for, not kernel steps."""

    stage: str
    chunks_done: int
    chunks_total: int
    slices_done: int
    slices_total: int
    field: str | None
    param: str | None
    elapsed: float
    eta: float | None
    failures: int
    cancelled: bool = False
    slices_stored: int | None = None
    steps_done: int = 0
    steps_total: int = 0
    kernel: str | None = None
    kernel_rank: int = 0
    kernels_total: int = 0
    kernel_done: int = 0
    kernel_total: int = 0
    values_done: int = 0
    values_total: int = 0
    eta_low: float | None = None
    eta_high: float | None = None


@dataclass
class RunReport:
    """What an ``apply`` did."""

    requested: tuple[str, ...]
    computed: int = 0
    reused: int = 0
    not_applicable: int = 0
    failures: list[Failure] = field(default_factory=list)
    cancelled: bool = False
    #: values asked for that were not computed because the run was cancelled (per-parameter
    #: values of the slices, and of the chunks, that were not reached)
    skipped: int = 0
    chunks: int = 0
    elapsed: float = 0.0
    #: kernel name -> slice calls this run made (the session's total is session.kernel_calls)
    kernel_calls: dict[str, int] = field(default_factory=dict)
    #: things the run could not do that are not failures (also warned about), e.g. cross
    #: fields asked for on a selection with nothing to compare against the reference
    notes: list[str] = field(default_factory=list)
    #: slices whose requested values are not applicable for a stated reason, one entry per
    #: slice (the values are counted in ``not_applicable``)
    not_applicable_reasons: list[NotApplicableSlice] = field(default_factory=list)
    #: slices whose weights hold NaN or Inf (``reason`` counts them), or whose kernel failed
    #: on a NaN input, one entry per slice: their values are stored as NaN, as Diffract
    #: does, and are not failures
    non_finite: list[NotApplicableSlice] = field(default_factory=list)

    def note_non_finite(self, model_id: str, name: str, uid: str, reason: str) -> None:
        """Record that a slice's weights are not finite (once per slice).

        Args:
            model_id: the slice's model.
            name: the slice's name.
            uid: the slice's uid.
            reason: how many NaN and Inf values they hold.
        """
        if all(e.uid != uid for e in self.non_finite):
            self.non_finite.append(NotApplicableSlice(model_id, name, uid, reason))

    def note_not_applicable(self, model_id: str, name: str, uid: str, reason: str) -> None:
        """Record why a slice's values are not applicable (once per slice).

        Args:
            model_id: the slice's model.
            name: the slice's name.
            uid: the slice's uid.
            reason: why, as the kernel said.
        """
        if all(e.uid != uid for e in self.not_applicable_reasons):
            self.not_applicable_reasons.append(NotApplicableSlice(model_id, name, uid, reason))

    @property
    def ok(self) -> bool:
        """True when nothing failed and the run was not cancelled."""
        return not self.failures and not self.cancelled

    def __str__(self) -> str:
        head = (
            f"computed {self.computed} values, reused {self.reused} stored ones, "
            f"{self.not_applicable} not applicable, {len(self.failures)} failures "
            f"in {self.chunks} chunk(s), {self.elapsed:.2f}s"
        )
        if self.cancelled:
            head += f" (cancelled: {self.skipped} value(s) skipped, finished values kept)"
        for note in self.notes:
            head += f"\n  note: {note}"
        if self.non_finite:
            head += f"\n  {len(self.non_finite)} slice(s) with NaN/Inf weights (or a NaN input) stored as NaN, e.g. "
            e = self.non_finite[0]
            head += f"{e.model_id}:{e.name}: {e.reason}"
        if self.not_applicable_reasons:
            head += f"\n  {len(self.not_applicable_reasons)} slice(s) not applicable, e.g. "
            head += str(self.not_applicable_reasons[0])
        return head


ProgressCallback = Callable[[ProgressEvent], None]
