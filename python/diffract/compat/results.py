"""Diffract's ``results``: exports, ingestion and erasing of fields, over our
:class:`diffract.session.results.Results`.

Shapes are Diffract's (see :mod:`diffract.session.records`). A requested field that was
never computed is a logged WARNING and no values, as in Diffract; a name nothing produces and
nothing stores is a :class:`~diffract._errors.UnknownFieldError` (a ``KernelNotFoundError``).
A field that failed on some parameters in the session's last run, or that has no value
because it failed or does not apply, is a logged WARNING too, saying so with counts and an
example (:mod:`diffract.session.results`); the export never raises for it, as Diffract's
exports never raise for missing values.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from diffract._core.owners import cross_owner
from diffract._errors import (
    InvalidArgumentError,
    ParameterNotFoundError,
    SessionError,
    UnknownFieldError,
)
from diffract.session.compute import dependents
from diffract.session.models import Models as OurModels, read_weights
from diffract.session.records import (
    AGGREGATE_DOC,
    META_DOC,
    aggregate_records,
    aggregates_to_format,
    base_name,
    check_format,
    check_metric_name,
    contextual_key,
    entries_to_format,
    ingest_documents,
    metadata,
)
from diffract.session.results import FieldOutcome, Outcomes, Results as OurResults, by_step
from diffract.session.scope import check_field_names, check_flag, check_reference
from diffract.session.summaries import EraseSummary
from diffract.store import Batch, Store

log = logging.getLogger("diffract.session.results")

#: the field Diffract gives every parameter: its weights (stored with the model, not computed)
WEIGHTS = "weights"

_SOURCES = ("metrics", "aggregates", "all")


class Results(OurResults):
    """``session.results`` with Diffract's methods too (``export_metrics``,
    ``export_aggregates``, ``export``, ``ingest_*``, ``erase``)."""

    def _format(self, export_format: str | None) -> str:
        fmt = export_format or getattr(self._session, "default_export_format", "dict")
        return check_format(fmt)

    def _level(self, name: str) -> str | None:
        """The level of a field's kernel; "param" for an ingested metric; None if unknown."""
        registry = self._session.registry
        if registry.has_field(name):
            return registry.producer(name).level
        if name == WEIGHTS:
            return "param"
        if name in self._store.field_names():
            return "param"
        if any(base_name(n) == name for n in self._store.documents(AGGREGATE_DOC)):
            return "model"
        return None

    def _levels(self, fields: Sequence[str], where: str) -> dict[str, str]:
        if not fields:
            raise ValueError(f"{where} needs at least one field name")
        check_field_names(fields, where)
        out = {}
        for f in fields:
            level = self._level(base_name(f))
            if level is None:
                raise UnknownFieldError(self._session.registry.unknown_field_message(f))
            out[f] = level
        return out

    def _entries(
        self, fields: Sequence[str], levels: dict[str, str], reference: str | None
    ) -> tuple[dict[str, dict[str, Any]], Outcomes, set[str]]:
        """Entries of every parameter of the scope, what was found for each field, and the
        uids a requested field applies to (their records are listed even without a value).

        Each entry's fields come in the order they were stored (``weights`` first: it is
        stored with the model), as Diffract lists a parameter's fields; ``weights`` is read
        from the store, or from the checkpoint a lazily added model references.
        """
        store = self._store
        patched = store.documents(META_DOC)
        session = self._session
        outcomes = Outcomes(store, session.registry, session.last_report)
        slices = by_step(store, self._scope.slices())
        wanted: dict[str, list[tuple[str, tuple[str, str]]]] = {}
        for s in slices:
            keys = wanted[s.uid] = []
            for f in fields:
                if f == WEIGHTS and levels[f] == "param" and not store.has((s.uid, f)):
                    continue
                if levels[f] == "param":
                    keys.append((f, (s.uid, f)))
                elif levels[f] == "cross" and reference and s.model_id != reference:
                    keys.append((f, (cross_owner(s.uid, reference), f)))
        position = _positions(store, {k for keys in wanted.values() for _, k in keys})
        entries: dict[str, dict[str, Any]] = {}
        applies: set[str] = set()
        for s in slices:
            # a row is left out only when every field asked is a per-parameter kernel's
            # that never applies to the slice (frob_norm on a 1-D bias)
            if any(outcomes.applies(base_name(f), s) for f in fields):
                applies.add(s.uid)
            values: dict[str, Any] = {}
            if WEIGHTS in fields and levels[WEIGHTS] == "param" and not store.has((s.uid, WEIGHTS)):
                values[WEIGHTS] = read_weights(store, session.references, s)
                outcomes.stored(WEIGHTS)
            found = []
            for f, key in wanted[s.uid]:
                if key in position:
                    found.append((position[key], f, key))
                else:
                    outcomes.missing(f, key[0], s.model_id, s.name, s)
            for _, f, key in sorted(found):
                values[f] = store.get(key)
                outcomes.stored(f)
            entries[s.uid] = {"metadata": metadata(s, patched), "fields": values}
        return entries, outcomes, applies

    def _warn_missing(self, names: Sequence[str], other: str) -> None:
        for f in names:
            log.warning(
                "Requested field %r has no computed values in the current scope. Compute "
                "it with session.compute.apply(%r), or widen the session filter if it was "
                "computed under a narrower scope%s.",
                f,
                base_name(f),
                other,
            )

    def export_metrics(
        self, *fields: str, export_format: str | None = None, reference: str | None = None
    ) -> Any:
        """Per-parameter values of ``fields``, in Diffract's shapes.

        ``dict``: ``{uid: {"metadata": {...}, "fields": {...}}}`` for every parameter of the
        scope; ``list``: flat records (``parameter_uid``, ``model_id``, ``parameter_name``,
        ``parameter_type``, ``meta_<key>``..., the fields it holds) for every parameter of
        the scope holding a value or that a requested field applies to (a field without a
        value has no key there, NaN or null in a frame: Diffract's parameters are 2-D
        weights, ours also biases and norms, which ``frob_norm`` does not apply to);
        ``pandas`` / ``polars``: those records as a frame; ``json``: the dict as JSON.
        Models come in step order: tracked checkpoints (``meta["track"]``) by run and step,
        then the other models by id, as in Diffract.

        Args:
            *fields: field names.
            export_format: "dict", "json", "list", "pandas" or "polars"; default: the
                configuration's ``default_export_format`` ("dict").
            reference: also read cross-model fields against this model (ours; without it
                cross-model fields are aggregates: :meth:`export_aggregates`).

        Returns:
            The values in ``export_format``.

        Raises:
            ValueError: no field, or an unknown format.
            UnknownFieldError: a field nothing computes and nothing stores.
            UnknownModelError: ``reference`` is not stored.
        """
        fmt = self._format(export_format)
        levels = self._levels(fields, "export_metrics()")
        check_reference(reference)
        if reference is not None:
            OurModels(self._scope).require_stored(reference)
        self._store.refresh()
        entries, outcomes, applies = self._entries(fields, levels, reference)
        for f in fields:
            told = outcomes.fields.get(f)
            if _tell(told) or (told is not None and told.stored):
                continue
            if levels[f] == "param":
                self._warn_missing([f], "")
            elif not (levels[f] == "cross" and reference):
                log.warning(
                    "Field %r is an aggregate (%s-level) field: read it with "
                    "results.export_aggregates(%r) or results.export(%r).",
                    f,
                    levels[f],
                    f,
                    f,
                )
            else:
                self._warn_missing([f], f" (against reference {reference!r})")
        return entries_to_format(entries, fields, fmt, applies)

    def export_aggregates(self, *fields: str, export_format: str | None = None) -> Any:
        """Model-level and cross-model values of ``fields`` as Diffract's aggregate records.

        Each record is ``{"field", "context_models", "context_params", "value"}``; a list
        for ``dict`` and ``list``, a frame with those columns for ``pandas`` / ``polars``.

        Args:
            *fields: field names.
            export_format: as for :meth:`export_metrics`.

        Returns:
            The records in ``export_format``.

        Raises:
            ValueError: no field, or an unknown format.
            UnknownFieldError: a field nothing computes and nothing stores.
        """
        fmt = self._format(export_format)
        levels = self._levels(fields, "export_aggregates()")
        self._store.refresh()
        recs = aggregate_records(self._scope, [base_name(f) for f in fields])
        have = {r["field"] for r in recs}
        for f in fields:
            if base_name(f) in have:
                continue
            if levels[f] == "param":
                log.warning(
                    "Field %r is a per-parameter field: read it with results.export_metrics(%r).",
                    f,
                    f,
                )
            else:
                self._warn_missing([f], "")
        return aggregates_to_format(recs, fmt)

    def export(
        self,
        *fields: str,
        sources: str = "all",
        export_format: str | None = None,
        expand_contextual: bool = True,
    ) -> Any:
        """Per-parameter values and aggregates together, in the shapes of :meth:`export_metrics`.

        With ``expand_contextual`` each aggregate is copied into the ``fields`` of every
        parameter of the scope in its context, under its contextual key
        ``<field>@models[<ids>]@params[<names>]``.

        Args:
            *fields: field names.
            sources: "metrics" (= :meth:`export_metrics`), "aggregates" (=
                :meth:`export_aggregates`) or "all".
            export_format: as for :meth:`export_metrics`.
            expand_contextual: copy aggregates onto the parameters of their context (with
                False, "all" gives the per-parameter values only).

        Returns:
            The values in ``export_format``.

        Raises:
            ValueError: an unknown ``sources`` or format, or no field.
            UnknownFieldError: a field nothing computes and nothing stores.
        """
        if sources not in _SOURCES:
            raise ValueError(f"sources must be one of {list(_SOURCES)}, got {sources!r}")
        expand_contextual = check_flag(expand_contextual, "expand_contextual")
        if sources == "metrics":
            return self.export_metrics(*fields, export_format=export_format)
        if sources == "aggregates":
            return self.export_aggregates(*fields, export_format=export_format)
        fmt = self._format(export_format)
        levels = self._levels(fields, "export()")
        self._store.refresh()
        entries, outcomes, applies = self._entries(fields, levels, None)
        recs = aggregate_records(self._scope, [base_name(f) for f in fields])
        found = {r["field"] for r in recs}
        for f in fields:
            told = outcomes.fields.get(f)
            if _tell(told) or (told is not None and told.stored):
                found.add(base_name(f))
        if expand_contextual:
            _expand(entries, recs)
        self._warn_missing([f for f in fields if base_name(f) not in found], "")
        return entries_to_format(entries, fields, fmt, applies)

    def ingest_metrics(
        self, fields_by_uid: dict[str, dict[str, Any]], *, force: bool = False
    ) -> None:
        """Store externally computed per-parameter values: ``{uid: {field: value}}``.

        Args:
            fields_by_uid: values by parameter uid, then field name.
            force: overwrite values already stored.

        Raises:
            InvalidIdentifierError: a field name with one of ``< > : " / \\ | ? *``.
            ParameterNotFoundError: an unknown uid (a SessionError).
            SessionError: a value already stored and ``force`` is False.
        """
        self._session.check_writable()
        force = check_flag(force, "force")
        if not isinstance(fields_by_uid, dict):
            raise InvalidArgumentError(
                f"ingest_metrics() takes {{uid: {{field: value}}}}, got {type(fields_by_uid).__name__}"
            )
        store = self._store
        store.refresh()
        uids = {s.uid for s in store.slices()}
        values: dict[tuple[str, str], Any] = {}
        for uid, fv in fields_by_uid.items():
            if uid not in uids:
                raise ParameterNotFoundError(f"no parameter with uid {uid!r} is stored")
            if not isinstance(fv, dict):
                raise InvalidArgumentError(f"the values of {uid!r} must be a dict of fields")
            for f, v in fv.items():
                check_metric_name(f)
                if store.has((uid, f)) and not force:
                    raise SessionError(
                        f"field {f!r} is already stored for {uid!r}; pass force=True to overwrite it"
                    )
                values[(uid, f)] = v
        store.commit(Batch(fields=values))

    def ingest_aggregates(self, aggregates: list[dict[str, Any]], *, force: bool = False) -> None:
        """Store externally computed aggregates.

        Args:
            aggregates: dicts with ``field_name``, ``context_models``, optional
                ``context_params`` and ``value``.
            force: overwrite an aggregate already stored under the same contextual key.

        Raises:
            SessionError: a missing key, or an existing aggregate without ``force``.
            InvalidIdentifierError: a bad field name or context member.
        """
        self._session.check_writable()
        force = check_flag(force, "force")
        store = self._store
        store.refresh()
        docs = ingest_documents(aggregates, store.documents(AGGREGATE_DOC), force)
        store.commit(Batch(documents=docs))

    def erase(
        self, *fields_to_erase: str, erase_dependent_also: bool = False, erase_all: bool = False
    ) -> EraseSummary:
        """Erase stored values of fields in this scope (Diffract's ``results.erase``).

        Values computed from them are erased too (always, so nothing stale is left: that is
        what ``erase_dependent_also=True`` asks for in Diffract).

        Args:
            *fields_to_erase: field names.
            erase_dependent_also: accepted for Diffract's code; dependents always go.
            erase_all: erase every computed field of the scope (the weights stay).

        Returns:
            An :class:`EraseSummary`, as Diffract's: ``fields`` the fields this erase
            removes (those named and every field computed from them, sorted; with
            ``erase_all``, every field the registry produces), ``affected_uids`` how many
            parameters of the scope held one of them.

        Raises:
            ValueError: neither or both of field names and ``erase_all``.
            UnknownFieldError: a field no kernel computes (``weights`` among them: they are
                the stored weights, removed with the model by ``models.erase``).
        """
        check_flag(erase_dependent_also, "erase_dependent_also")
        erase_all = check_flag(erase_all, "erase_all")
        if bool(fields_to_erase) == erase_all:
            raise ValueError("erase() takes field names or erase_all=True (not both, not neither)")
        if WEIGHTS in fields_to_erase:
            raise UnknownFieldError(
                "'weights' are the parameters' stored weights, not a computed field, and "
                "results.erase() removes computed fields only (as in Diffract); remove the "
                "weights with their model: models.erase('<model_id>')"
            )
        registry = self._session.registry
        compute = self._scope.compute  # type: ignore[attr-defined]
        if erase_all:
            stored = tuple(
                f
                for f in self._scope.results.fields()  # type: ignore[attr-defined]
                if registry.has_field(f)
            )
            named: tuple[str, ...] = tuple(registry.fields())
        else:
            check_field_names(fields_to_erase, "erase()")
            for f in fields_to_erase:
                registry.producer(f)  # an unknown field: a clear error before any work
            stored = named = tuple(dict.fromkeys(fields_to_erase))
        resolved = set(named) | set(dependents(registry, named))
        uids = {s.uid for s in self._scope.slices()}
        self._store.refresh()
        affected = {o for (o, f) in self._store.keys() if f in resolved and o in uids}
        if stored:
            compute.erase(*stored)
        return EraseSummary(fields=tuple(sorted(resolved)), affected_uids=len(affected))


def _positions(store: Store, keys: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The rank of each stored key of ``keys`` in the store's order (the order of storing)."""
    if not keys:
        return {}
    if len(keys) == 1:
        return {k: 0 for k in keys if store.has(k)}
    return {k: i for i, k in enumerate(store.keys()) if k in keys}


def _tell(told: FieldOutcome | None) -> bool:
    """Log what happened to a field that failed somewhere, or that has no value because it
    failed or does not apply (Diffract's run raises where ours records a failure); True
    when something was logged."""
    if told is None or not (told.failed or (told.explained and not told.stored)):
        return False
    log.warning("Requested field %s; the other values are exported.", told.describe())
    return True


def _expand(entries: dict[str, dict[str, Any]], recs: list[dict[str, Any]]) -> None:
    """Copy each aggregate into the fields of the entries in its context."""
    for r in recs:
        if not r["context_params"]:
            continue
        key = contextual_key(r["field"], r["context_models"], r["context_params"])
        models, params = set(r["context_models"]), set(r["context_params"])
        for e in entries.values():
            md = e["metadata"]
            if md["model_id"] in models and md["name"] in params:
                e["fields"][key] = r["value"]
