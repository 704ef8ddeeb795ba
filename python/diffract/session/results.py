"""``scope.results``: stored fields of the scope as tables (``export_table``) or values; the
table formats (dict, list, json, pandas, polars) and what a field without values says
(:class:`MissingValuesWarning`)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, field as _field
from typing import Any

import numpy as np

from diffract._errors import FieldNotComputedError, InvalidArgumentError, UnknownModelError
from diffract._vocab.diffract_config import EXPORT_FORMATS
from diffract._vocab.jsonable import to_jsonable
from diffract._vocab.owners import cross_owner, is_model_owner, model_owner, parse_owner
from diffract._vocab.slices import SliceInfo
from diffract._vocab.steps import order_by_step
from diffract.kernels.registry import KernelRegistry
from diffract.run.plan import Planner, cross_pairs
from diffract.run.report import RunReport
from diffract.session.scope import Namespace, check_field_names, check_reference, frontend
from diffract.store import Store

__all__ = [
    "EXPORT_FORMATS",
    "KEY_COLUMNS",
    "FieldOutcome",
    "MissingValuesWarning",
    "Outcomes",
    "Results",
    "by_step",
    "model_order",
    "to_format",
    "warn_gaps",
]


def model_order(store: Store, model_ids: Sequence[str]) -> list[str]:
    """``model_ids`` as exports list them: tracked checkpoints by (run, step), then the other
    ids as strings (the seed's order), through :func:`diffract._vocab.steps.order_by_step`."""
    models = store.models()
    return order_by_step(dict.fromkeys(model_ids), lambda m: models.get(m, {}).get("meta"))


def by_step(store: Store, slices: list[SliceInfo]) -> list[SliceInfo]:
    """``slices`` with their models in :func:`model_order`, each model's slices kept in order."""
    rank = {m: i for i, m in enumerate(model_order(store, [s.model_id for s in slices]))}
    return sorted(slices, key=lambda s: rank[s.model_id])


@dataclass
class _Table:
    """The rows of one export and what they found."""

    fields: Sequence[str]
    levels: dict[str, str]
    reference: str | None
    outcomes: Outcomes
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: a row with a counterpart in the reference model
    compared: bool = False

    def of(self, level: str) -> list[str]:
        return [f for f in self.fields if self.levels[f] == level]

    def value(
        self,
        store: Store,
        key: tuple[str, str],
        where: tuple[str, str],
        s: SliceInfo | None = None,
        skip: bool = False,
    ) -> Any:
        """The stored value of ``key`` (None when absent), counted in ``outcomes``."""
        if skip:
            return None
        v = store.get(key) if store.has(key) else None
        if v is None:
            self.outcomes.missing(key[1], key[0], where[0], where[1], s)
        else:
            self.outcomes.stored(key[1])
        return v


def _param_rows(table: _Table, store: Store, slices: list[SliceInfo]) -> None:
    """One row per slice: its per-parameter fields, and cross fields against the reference."""
    param_fields, cross_fields, reference = table.of("param"), table.of("cross"), table.reference
    paired = (
        {s.uid for s, _ in cross_pairs(slices, reference, store.slices(reference))}
        if cross_fields and reference
        else set()
    )
    for s in slices:
        is_ref = bool(cross_fields) and s.model_id == reference
        if is_ref and not param_fields:
            continue  # only cross columns: the reference has no values against itself
        row: dict[str, Any] = {
            "model_id": s.model_id,
            "name": s.name,
            "uid": s.uid,
            "type": s.type.value,
        }
        where = (s.model_id, s.name)
        for f in param_fields:
            row[f] = table.value(store, (s.uid, f), where, s)
        table.compared |= s.uid in paired
        for f in cross_fields:
            key = (cross_owner(s.uid, reference or ""), f)
            row[f] = table.value(store, key, where, s, skip=is_ref)
        if cross_fields:
            row["reference"] = reference
        table.rows.append(row)


def _missing_error(
    table: _Table, missing: list[str], slices: list[SliceInfo], where: str
) -> FieldNotComputedError:
    """What an export with fields stored nowhere in the scope says, and how to fix it: why
    each field has no value (failed, not applicable, never computed)."""
    reference, outcomes = table.reference, table.outcomes.fields
    told = [f for f in missing if f in outcomes and outcomes[f].explained]
    parts = [outcomes[f].describe() for f in told]
    plain = [f for f in missing if f not in told and table.levels[f] != "cross"]
    cross = [f for f in missing if f not in told and table.levels[f] == "cross"]
    if plain:
        parts.append(
            f"field(s) {plain} have not been computed for {where}; "
            f"run .compute.apply({', '.join(repr(f) for f in plain)}) first"
        )
    if cross and table.compared:
        parts.append(
            f"cross-model field(s) {cross} have not been computed against reference "
            f"{reference!r} for {where}; run .compute.apply("
            f"{', '.join(repr(f) for f in cross)}, reference={reference!r}) first"
        )
    elif cross:
        only_ref = all(s.model_id == reference for s in slices)
        why = (
            f"{where} holds only the reference model {reference!r}, and a model is "
            "not compared with itself; select other models too, or choose another "
            "reference"
            if only_ref
            else f"no slice of {where} has a same-named slice in the reference model "
            f"{reference!r} (cross-model fields pair slices by name)"
        )
        parts.append(f"cross-model field(s) {cross} have no values: {why}")
    return FieldNotComputedError("; ".join(parts))


def _check_gaps(table: _Table, slices: list[SliceInfo], where: str) -> None:
    """Raise when no requested field has a value in the scope; otherwise warn about the
    fields without any value, or with failures, and let the rest be exported."""
    if not slices:
        return
    outcomes = table.outcomes
    if not any(o.stored for o in outcomes.fields.values()):
        raise _missing_error(table, list(table.fields), slices, where)
    warn_gaps(outcomes.gaps(table.fields), "export_table()", stacklevel=4)


class Results(Namespace):
    """Read stored fields of the scope: Diffract's exports, tables, single values."""

    def export_table(
        self, *fields: str, export_format: str = "dict", reference: str | None = None
    ) -> Any:
        """One row per parameter: model_id, name, uid, type, then one column per field.

        Models come in step order: tracked checkpoints (``meta["track"]``) by run and
        step, then the other models by id.

        diffract-lab 0.1's ``export_metrics`` table: ``dict`` is column-wise (``{column:
        [values]}``), the other formats row-wise. :meth:`export_metrics` gives Diffract's
        shapes (nested by uid) instead.

        Model-level fields give one row per model (``name`` empty, ``type`` "model", ``uid``
        the owner key); cross-model fields need ``reference`` and add a ``reference`` column.

        Args:
            *fields: field names.
            export_format: "dict" (columns), "list" (rows), "json", "pandas" or "polars".
            reference: the model cross-model fields were computed against.

        A field without a value on some rows has None there. A field that failed in the
        session's last run, or has no value on any row, is a
        :class:`~diffract.session.results.MissingValuesWarning` saying per field how many
        values failed (naming one slice and its error), were not applicable or were never
        computed; the other fields are exported.

        Returns:
            The table in ``export_format``.

        Raises:
            ValueError: no field given, an unknown format, or cross fields without reference.
            InvalidArgumentError, UnknownFieldError: a bad or unknown field name.
            UnknownModelError: ``reference`` is not stored.
            FieldNotComputedError: no requested field has a value anywhere in the scope (the
                message says why for each: failed, not applicable, or how to compute it).
        """
        if not fields:
            raise ValueError("export_table() needs at least one field name")
        check_field_names(fields, "export_table()")
        check_reference(reference)
        store = self._store
        store.refresh()
        session = self._session
        levels: dict[str, str] = {f: session.registry.producer(f).level for f in fields}
        outcomes = Outcomes(store, session.registry, session.last_report)
        table = _Table(fields, levels, reference, outcomes)
        cross_fields = table.of("cross")
        if cross_fields and not reference:
            raise ValueError(
                f"cross-model field(s) {cross_fields} need export_table(..., reference='<model_id>')"
            )
        if cross_fields and not store.has_model(reference):
            raise UnknownModelError(
                f"reference model {reference!r} is not in the store (cross-model field(s) "
                f"{cross_fields} are read against it); stored models: {sorted(store.models())}"
            )
        for f in cross_fields:
            outcomes.hint(f, f".compute.apply({f!r}, reference={reference!r})")
        scope = self._scope
        slices = by_step(store, scope.slices())
        if table.of("param") or cross_fields:
            _param_rows(table, store, slices)
        self._model_rows(table, slices)
        where = "this selection" if not scope.filter_chain.is_empty else "any stored model"
        _check_gaps(table, slices, where)
        columns = list(KEY_COLUMNS) + (["reference"] if cross_fields else []) + list(fields)
        return to_format(table.rows, columns, export_format)

    def _model_rows(self, table: _Table, slices: list[SliceInfo]) -> None:
        """One row per model of the scope with its model-level fields (none without them)."""
        model_fields = table.of("model")
        if not model_fields:
            return
        for f in model_fields:
            table.outcomes.per_model(f)
        for m in model_order(self._store, [s.model_id for s in slices]):
            owner = self._scope.model_owner(m)
            row = {"model_id": m, "name": "", "uid": owner, "type": "model"}
            for f in model_fields:
                row[f] = table.value(self._store, (owner, f), (m, ""))
            table.rows.append(row)

    def get(
        self,
        field: str,
        uid_or_name: str,
        model_id: str | None = None,
        *,
        reference: str | None = None,
    ) -> Any:
        """The stored value of one field.

        Args:
            field: a field name.
            uid_or_name: per-parameter and cross-model fields: a slice's uid or name.
                Model-level fields: a model of the scope (its id, the owner key
                ``"@<model_id>"``, or any slice of it).
            model_id: the model, where a slice name occurs in several.
            reference: cross-model fields: the model the slice was compared with.

        Returns:
            The stored value.

        Raises:
            UnknownFieldError: no kernel computes ``field``.
            InvalidArgumentError: ``reference`` missing for a cross field, or not a string.
            UnknownModelError: the model or reference is not in the scope or store.
            KeyError: no such slice in this scope.
            FieldNotComputedError: the value is not stored (the message says how to compute it).
        """
        k = self._session.registry.producer(field)  # an unknown field: a clear error first
        check_reference(reference)
        store = self._store
        store.refresh()
        if k.level == "model":
            return self._get_model_level(field, uid_or_name, model_id)
        s = self._scope.find_slice(uid_or_name, model_id)
        if k.level == "cross":
            return self._get_cross(field, s, uid_or_name, model_id, reference)
        if not store.has((s.uid, field)):
            raise FieldNotComputedError(
                f"field {field!r} is not stored for {s.model_id}:{s.name}; run .compute.apply({field!r})"
            )
        return store.get((s.uid, field))

    def _get_cross(
        self,
        field: str,
        s: SliceInfo,
        uid_or_name: str,
        model_id: str | None,
        reference: str | None,
    ) -> Any:
        store = self._store
        if not reference:
            raise InvalidArgumentError(
                f"{field!r} is a cross-model field: pass the model it was computed against, "
                f"results.get({field!r}, {uid_or_name!r}"
                + (f", {model_id!r}" if model_id else "")
                + ", reference='<model_id>')"
            )
        if not store.has_model(reference):
            raise UnknownModelError(
                f"reference model {reference!r} is not in the store; stored models: "
                f"{sorted(store.models())}"
            )
        if s.model_id == reference:
            raise FieldNotComputedError(
                f"{s.model_id}:{s.name} is in the reference model {reference!r}; a model "
                f"is not compared with itself: read {field!r} on a slice of another model"
            )
        key = (cross_owner(s.uid, reference), field)
        if not store.has(key):
            raise FieldNotComputedError(
                f"field {field!r} is not stored for {s.model_id}:{s.name} against reference "
                f"{reference!r}; run .compute.apply({field!r}, reference={reference!r})"
            )
        return store.get(key)

    def _get_model_level(self, field: str, uid_or_name: str, model_id: str | None) -> Any:
        scope = self._scope
        store = self._store
        ids = scope.model_ids()
        if is_model_owner(uid_or_name):
            owner = uid_or_name
            m = parse_owner(owner).model_id or ""
            if m not in ids:
                raise UnknownModelError(
                    f"no model {m!r} in this scope (owner {owner!r}); models: {ids}"
                )
        else:
            if uid_or_name in ids and model_id in (None, uid_or_name):
                m = uid_or_name
            else:
                m = scope.find_slice(uid_or_name, model_id).model_id
            owner = scope.model_owner(m)
        if not store.has((owner, field)):
            where = "" if owner == model_owner(m) else " in this selection"
            raise FieldNotComputedError(
                f"model-level field {field!r} is not stored for model {m!r}{where}; "
                f"run .compute.apply({field!r})"
            )
        return store.get((owner, field))

    def fields(self) -> list[str]:
        """Names of the fields stored for at least one owner of this scope.

        Returns:
            The field names, sorted.
        """
        self._store.refresh()
        owners = set(self._scope.owners())
        return sorted({f for (o, f) in self._store.keys() if o in owners})

    def diff(self, base: str, tuned: str, **options: Any) -> Any:
        """What fine-tuning changed: the per-layer fine-tune diff of two stored models
        (relative change, effective and signal rank, low-rank or full-rank, signal share above
        the Marchenko-Pastur edge, top singular subspace overlap, ranking); see
        ``docs/finetune-diff.md``.

        Args:
            base: the base model's id.
            tuned: the fine-tuned model's id.
            **options: ``k``, ``min_change``, ``low_rank_fraction``, ``bulk_ks_max``.

        Returns:
            A :class:`diffract.finetune.DiffResult` (``.table`` a DataFrame, ``.summary``).
        """
        return frontend("finetune_diff")(self._scope, base, tuned, **options)


KEY_COLUMNS = ("model_id", "name", "uid", "type")


def to_format(rows: list[dict[str, Any]], columns: Sequence[str], export_format: str) -> Any:
    """Turn rows (dicts with every column) into the requested format."""
    if export_format not in EXPORT_FORMATS:
        raise ValueError(
            f"unknown export_format {export_format!r}; choose one of {list(EXPORT_FORMATS)}"
        )
    if export_format == "list":  # every row has every column, in the order of the others
        return [{c: r.get(c) for c in columns} for r in rows]
    if export_format == "dict":
        return {c: [r.get(c) for r in rows] for c in columns}
    if export_format == "json":
        return json.dumps(
            [{c: to_jsonable(r.get(c), other="keep") for c in columns} for r in rows],
            allow_nan=False,
        )
    if export_format == "pandas":
        import pandas as pd

        return pd.DataFrame({c: [r.get(c) for r in rows] for c in columns}, columns=list(columns))
    import polars as pl

    data = {}
    for c in columns:
        col = [r.get(c) for r in rows]
        if any(isinstance(v, np.ndarray) for v in col):
            # nested lists keep the shape of 2-D (and higher) values, as JSON does
            col = [np.atleast_1d(v).tolist() if isinstance(v, np.ndarray) else v for v in col]
        data[c] = col
    try:
        return pl.DataFrame(data, strict=False)
    except Exception:  # values of mixed nesting in one column: keep them as objects
        return pl.DataFrame([_series(c, data[c]) for c in columns])


def _series(name: str, col: list[Any]) -> Any:
    """A polars column; one mixing nesting depths (or kinds) becomes an Object column."""
    import polars as pl

    try:
        return pl.Series(name, col, strict=False)
    except Exception:
        return pl.Series(name, col, dtype=pl.Object)


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
