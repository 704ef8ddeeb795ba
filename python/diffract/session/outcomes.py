"""Why a field has no value on some slices of a scope: it failed, it does not apply, or it
was never computed.

Exports read this to say what happened to each field instead of "not computed" for every
gap. Failures and the not-applicable reasons a kernel gave come from the session's last run
(``session.last_report``: the store keeps values, not the runs that did not make them); a
slice with too few dimensions for the field's kernels is not applicable whatever was run.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field as _field

from diffract._core.slices import SliceInfo
from diffract.kernels.registry import KernelRegistry
from diffract.run.plan import Planner
from diffract.run.report import RunReport
from diffract.store import Store

__all__ = ["FieldOutcome", "MissingValuesWarning", "Outcomes"]


class MissingValuesWarning(RuntimeWarning):
    """An export has fields without a value on some slices because they failed, or on every
    slice of the scope; the message says, per field, how many failed, were not applicable or
    were never computed."""


@dataclass
class FieldOutcome:
    """What one export found for one field over the slices (or models) it read.

    Attributes:
        field: the field name.
        unit: what the export read it for ("slices", or "models" for a model-level field).
        read: how many of them the export read.
        stored: how many of them hold a value.
        failed: ``"model:name: message"`` of each owner whose kernel failed in the last run.
        not_applicable: ``"model:name: reason"`` of each owner it does not apply to.
        not_computed: ``"model:name"`` of each owner with no value and no recorded reason.
        hint: the call that computes it (``.compute.apply('<field>')`` when empty).
    """

    field: str
    unit: str = "slices"
    read: int = 0
    stored: int = 0
    failed: list[str] = _field(default_factory=list)
    not_applicable: list[str] = _field(default_factory=list)
    not_computed: list[str] = _field(default_factory=list)
    hint: str = ""

    @property
    def explained(self) -> bool:
        """Whether the gaps have a known cause: a failure, or not applicable on every one."""
        return bool(self.failed) or bool(self.not_applicable and not self.not_computed)

    def describe(self) -> str:
        """One sentence: the counts of each kind of gap, with an example of each."""
        parts = []
        if self.failed:
            parts.append(f"failed on {len(self.failed)} (e.g. {self.failed[0]})")
        if self.not_applicable:
            # one example of each kind: a reason a kernel gave, and a slice too small in ndim
            static = [e for e in self.not_applicable if e.endswith(_NDIM_REASON)]
            given = [e for e in self.not_applicable if not e.endswith(_NDIM_REASON)]
            eg = "; ".join(x[0] for x in (given, static) if x)
            parts.append(f"not applicable on {len(self.not_applicable)} (e.g. {eg})")
        if self.not_computed:
            parts.append(
                f"not computed on {len(self.not_computed)} (e.g. {self.not_computed[0]}; "
                f"run {self.hint or f'.compute.apply({self.field!r})'})"
            )
        missing = self.read - self.stored
        head = f"{self.field!r} has no value on {missing} of the {self.read} {self.unit} read"
        return head + ": " + ", ".join(parts)


#: the end of the reason of a slice with too few dimensions for a field
_NDIM_REASON = " slice"


def _label(model_id: str, name: str) -> str:
    return f"{model_id}:{name}" if name else model_id


class Outcomes:
    """Classifies the owners an export found without a value, field by field.

    Args:
        store: the store the export reads.
        registry: the session's kernels (they say which slices a field applies to).
        report: the session's last run report, or None.
    """

    def __init__(self, store: Store, registry: KernelRegistry, report: RunReport | None) -> None:
        self._planner = Planner(store, registry)
        self._registry = registry
        self._failed: dict[tuple[str, str], str] = {}
        self._na: dict[str, str] = {}
        self._requested: set[str] = set()
        if report is not None:
            self._failed = {(f.uid, f.field): f.error for f in report.failures}
            self._na = {n.uid: n.reason for n in report.not_applicable_reasons}
            self._requested = set(report.requested)
        self.fields: dict[str, FieldOutcome] = {}

    def _of(self, f: str) -> FieldOutcome:
        out = self.fields.get(f)
        if out is None:
            out = self.fields[f] = FieldOutcome(f, unit="slices")
        return out

    def per_model(self, f: str) -> None:
        """Count ``f`` per model (a model-level field) in the messages."""
        self._of(f).unit = "models"

    def hint(self, f: str, call: str) -> None:
        """The call that computes ``f``, for the messages (e.g. with its ``reference=``)."""
        self._of(f).hint = call

    def stored(self, f: str) -> None:
        """Count one owner holding a value of ``f``."""
        out = self._of(f)
        out.read += 1
        out.stored += 1

    def missing(self, f: str, owner: str, model_id: str, name: str, s: SliceInfo | None) -> None:
        """Classify one owner without a value of ``f``.

        Args:
            f: the field.
            owner: the owner key the value would be stored under.
            model_id: the model, for the message.
            name: the slice name ("" for a model-level value).
            s: the slice of a per-parameter field (its shape decides applicability).
        """
        out = self._of(f)
        out.read += 1
        where = _label(model_id, name)
        error = self._failed.get((owner, f))
        if error is not None:
            out.failed.append(f"{where}: {error}")
        elif s is not None and not self._applicable(f, s):
            out.not_applicable.append(f"{where}: a {s.effective_ndim}-D{_NDIM_REASON}")
        elif owner in self._na and f in self._requested:
            out.not_applicable.append(f"{where}: {self._na[owner]}")
        else:
            out.not_computed.append(where)

    def applies(self, f: str, s: SliceInfo) -> bool:
        """Whether a per-parameter field ``f`` can have a value on slice ``s`` (its kernels
        take slices of that many dimensions; any field no kernel computes applies)."""
        return self._applicable(f, s)

    def _applicable(self, f: str, s: SliceInfo) -> bool:
        registry = self._registry
        if not registry.has_field(f) or registry.producer(f).level != "param":
            return True
        return self._planner.applicable(f, s.effective_ndim)

    def gaps(self, fields: Sequence[str]) -> list[FieldOutcome]:
        """The outcomes of ``fields`` that are worth telling: no value at all, or a failure."""
        return [
            o
            for f in fields
            if (o := self.fields.get(f)) is not None and o.read and (not o.stored or o.failed)
        ]


def warn_gaps(gaps: Sequence[FieldOutcome], where: str, stacklevel: int = 3) -> None:
    """One :class:`MissingValuesWarning` listing each field's gaps (none when ``gaps`` is empty)."""
    if gaps:
        text = "; ".join(g.describe() for g in gaps)
        warnings.warn(
            f"{where}: exported the other values; {text}",
            MissingValuesWarning,
            stacklevel=stacklevel,
        )
