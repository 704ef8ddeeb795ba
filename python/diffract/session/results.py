"""``scope.results``: stored fields of the scope as tables (``export_metrics``) or values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from diffract._core.owners import cross_owner, is_model_owner, model_owner, parse_owner
from diffract._core.slices import SliceInfo
from diffract._errors import FieldNotComputedError, InvalidArgumentError, UnknownModelError
from diffract.run.plan import cross_pairs
from diffract.session.checks import check_field_names, check_reference
from diffract.session.export import KEY_COLUMNS, to_format
from diffract.session.exports import DiffractResults, by_step, model_order
from diffract.session.outcomes import Outcomes, warn_gaps
from diffract.store import Store


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


class Results(DiffractResults):
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
        :class:`~diffract.session.outcomes.MissingValuesWarning` saying per field how many
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
        slices = by_step(store, scope._slices())
        if table.of("param") or cross_fields:
            _param_rows(table, store, slices)
        self._model_rows(table, slices)
        where = "this selection" if not scope._chain.is_empty else "any stored model"
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
            owner = self._scope._model_owner(m)
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
        s = self._scope._find(uid_or_name, model_id)
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
        ids = scope._model_ids()
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
                m = scope._find(uid_or_name, model_id).model_id
            owner = scope._model_owner(m)
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
        owners = set(self._scope._owners())
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
        from diffract.session._frontends import frontend

        return frontend("finetune_diff")(self._scope, base, tuned, **options)
