"""Diffract-shaped exports: entries nested by parameter uid, flat records, aggregate records.

The published Diffract (``diffract-core`` 0.3.1) fixes these shapes, and ``results`` follows
them so a Diffract user's code runs unchanged:

* ``dict``: ``{uid: {"metadata": {"name", "model_id", "parameter_type", <other_meta keys>},
  "fields": {field: value}}}`` for every parameter of the scope;
* ``list`` (and the rows of ``pandas`` / ``polars``): one record per parameter of the scope
  that holds a value or that a requested field applies to (Diffract's parameters are 2-D
  weights, to which every field applies; ours are also 1-D biases and norms), keys ``parameter_uid``, ``model_id``, ``parameter_name``, ``parameter_type``,
  ``meta_<key>``..., then the fields it holds (a field without a value has no key: NaN in
  ``pandas``, null in ``polars``);
* aggregates: ``{"field", "context_models", "context_params", "value"}`` records.

Aggregates (model-level, cross-model, contextual and ingested records) and the context
documents ``compute.apply`` keeps for them live here too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from diffract._errors import InvalidIdentifierError, SessionError
from diffract._vocab.diffract_config import EXPORT_FORMATS
from diffract._vocab.jsonable import to_jsonable
from diffract._vocab.owners import (
    contextual_field,
    contextual_key as contextual_key,
    is_cross_owner,
    is_model_owner,
    model_owner,
    parse_owner,
)
from diffract._vocab.slices import SliceInfo
from diffract._vocab.steps import order_by_step
from diffract.session.scope import Selection
from diffract.store import Batch

#: the identity columns of a flat record, in order
ID_COLUMNS = ("parameter_uid", "model_id", "parameter_name", "parameter_type")
#: the columns of an aggregate record
AGGREGATE_COLUMNS = ("field", "context_models", "context_params", "value")
#: the document kind holding a parameter's patched ``other_meta`` (``patch_meta``)
META_DOC = "other_meta"
#: the document kind holding ingested aggregates (``ingest_aggregates``)
AGGREGATE_DOC = "aggregate"
#: the document kind holding the names a model-level value of a selection was computed
#: over (``@m[<scope key>]`` -> JSON list of names): its context, as Diffract names it
CONTEXT_DOC = "aggregate_context"


def check_format(export_format: Any) -> str:
    """``export_format`` if it is a known format, else a ValueError listing them."""
    if export_format not in EXPORT_FORMATS:
        raise ValueError(
            f"Unsupported format {export_format!r}; choose one of {list(EXPORT_FORMATS)}"
        )
    return str(export_format)


def other_meta(s: SliceInfo, patched: Mapping[str, str]) -> dict[str, Any]:
    """A parameter's ``other_meta``: its position and dtype, then what was given or patched.

    Args:
        s: the slice.
        patched: uid -> JSON text of ``patch_meta`` updates (the store's documents).

    Returns:
        ``in_model_idx``, ``dtype``, the overrides' ``original_name``/``original_ptype`` and
        the user's keys.
    """
    meta: dict[str, Any] = {"in_model_idx": s.index, "dtype": s.dtype}
    meta.update(s.meta.get("other_meta") or {})
    text = patched.get(s.uid)
    if text:
        meta.update(json.loads(text))
    return meta


def metadata(s: SliceInfo, patched: Mapping[str, str]) -> dict[str, Any]:
    """The ``metadata`` of one entry: name, model_id, parameter_type, then ``other_meta``."""
    out: dict[str, Any] = {"name": s.name, "model_id": s.model_id, "parameter_type": s.type.name}
    out.update(other_meta(s, patched))
    return out


def records(
    entries: Mapping[str, Mapping[str, Any]], listed: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """Flat records of entries: one per parameter, as Diffract's, whose fields may be none.

    Args:
        entries: the entries, by uid.
        listed: uids whose record is kept without a field value (the parameters a
            requested field applies to); None: every parameter.

    A record with nothing beside its four identity keys (no metadata, no field) is left
    out, as in Diffract; every parameter has ``meta_in_model_idx`` and ``meta_dtype``.
    """
    out = []
    for uid, e in entries.items():
        if listed is not None and not e["fields"] and uid not in listed:
            continue
        md = e["metadata"]
        rec: dict[str, Any] = {
            "parameter_uid": uid,
            "model_id": md["model_id"],
            "parameter_name": md["name"],
            "parameter_type": md["parameter_type"],
        }
        for k, v in md.items():
            if k not in ("name", "model_id", "parameter_type"):
                rec[f"meta_{k}"] = v
        rec.update(e["fields"])
        if len(rec) > len(ID_COLUMNS):
            out.append(rec)
    return out


def _dumps(value: Any) -> str:
    return json.dumps(to_jsonable(value, other="str"), indent=2)


def entries_to_format(
    entries: dict[str, dict[str, Any]],
    fields: Sequence[str],
    export_format: str,
    listed: Collection[str] | None = None,
) -> Any:
    """Entries nested by uid in ``export_format`` (see the module docstring); the flat
    formats list the entries with a value or in ``listed`` (None: all)."""
    if export_format == "dict":
        return entries
    if export_format == "json":
        return _dumps(entries)
    rows = records(entries, listed)
    if export_format == "list":
        return rows
    empty = ["model_id", "parameter_name", "parameter_uid", "parameter_type", *fields]
    return _frame(rows, export_format, empty)


def aggregates_to_format(recs: list[dict[str, Any]], export_format: str) -> Any:
    """Aggregate records in ``export_format``: a list for dict and list, else a table."""
    if export_format in ("dict", "list"):
        return recs
    if export_format == "json":
        return _dumps(recs)
    return _frame(recs, export_format, list(AGGREGATE_COLUMNS))


def _frame(rows: list[dict[str, Any]], export_format: str, empty: Iterable[str]) -> Any:
    if export_format == "pandas":
        try:
            import pandas as pd
        except ImportError:
            raise ValueError(
                "export_format='pandas' needs pandas: pip install 'diffract-lab[pandas]'"
            ) from None
        if not rows:
            return pd.DataFrame(columns=list(empty))
        return pd.DataFrame(rows)
    try:
        import polars as pl
    except ImportError:
        raise ValueError(
            "export_format='polars' needs polars: pip install 'diffract-lab[polars]'"
        ) from None
    if not rows:
        return pl.DataFrame({c: [] for c in empty})
    columns = list(dict.fromkeys(k for r in rows for k in r))
    series = []
    for c in columns:
        col = [r.get(c) for r in rows]
        try:
            series.append(pl.Series(c, col, strict=False))
        except Exception:  # arrays, tuples of mixed kinds: keep them as objects
            series.append(pl.Series(c, col, dtype=pl.Object))
    return pl.DataFrame(series)


#: the field of a contextual key (``log_norm@models[m]`` -> ``log_norm``); the keys are built
#: and parsed in :mod:`diffract._vocab.owners` (``contextual_key`` is imported from there)
base_name = contextual_field


#: Diffract's identifier alphabet (model ids, parameter names, aggregate field names)
_IDENT = re.compile(r"[A-Za-z0-9_.\-]+")
#: characters a metric field name may not hold
_BAD_FIELD_CHARS = '<>:"/\\|?*'


def check_identifier(value: Any, what: str) -> str:
    """``value`` if it is a non-empty string of letters, digits, ``_ - .``; else raise.

    Raises:
        InvalidIdentifierError: naming ``what`` and the first bad character.
    """
    if not isinstance(value, str) or not value:
        raise InvalidIdentifierError(f"{what} must be a non-empty string, got {value!r}")
    if not _IDENT.fullmatch(value):
        bad = next(c for c in value if not _IDENT.fullmatch(c))
        raise InvalidIdentifierError(
            f"{what} {value!r} holds the character {bad!r}; use ASCII letters, digits, "
            "'_', '-' or '.'"
        )
    return value


def check_metric_name(name: Any) -> str:
    """A metric field name for ``ingest_metrics``: a string without ``< > : " / \\ | ? *``."""
    if not isinstance(name, str) or not name:
        raise InvalidIdentifierError(f"a field name must be a non-empty string, got {name!r}")
    bad = [c for c in name if c in _BAD_FIELD_CHARS]
    if bad:
        raise InvalidIdentifierError(
            f"field name {name!r} holds the character {bad[0]!r}; the characters "
            f"{' '.join(_BAD_FIELD_CHARS)} are not allowed"
        )
    return name


def _record(field: str, models: Iterable[str], params: Iterable[str], value: Any) -> dict[str, Any]:
    return {
        "field": field,
        "context_models": tuple(sorted(models)),
        "context_params": tuple(sorted(params)),
        "value": value,
    }


def _scope_names(scope: Selection) -> tuple[list[SliceInfo], set[tuple[str, str]]]:
    """The scope's slices, and its (model id, name) pairs."""
    slices = scope.slices()
    return slices, {(s.model_id, s.name) for s in slices}


def model_records(scope: Selection, field: str) -> list[dict[str, Any]]:
    """Model-level values of ``field`` whose context meets the scope, as Diffract shows them.

    A value's context is its model and the names it was computed over: every slice of the
    model (``@m``), or the selection it was computed on (``@m[scope]``, names kept in a
    :data:`~diffract.session.records.CONTEXT_DOC` document by ``compute.apply``). It is in
    the scope when the scope holds a slice of that model with one of those names. A
    selection value of a store written before those documents is shown to its own scope only.
    """
    store = scope.session.store
    slices, pairs = _scope_names(scope)
    by_model: dict[str, list[str]] = {}
    for s in slices:
        by_model.setdefault(s.model_id, []).append(s.name)
    contexts = store.documents(CONTEXT_DOC)
    mine = scope.filter_chain.key()
    whole: dict[str, list[str]] = {}  # every name of a model, read once
    found: dict[str, list[tuple[tuple[str, ...], str]]] = {}
    for owner, f in store.keys():
        if f != field or not is_model_owner(owner):
            continue
        o = parse_owner(owner)
        m = o.model_id or ""
        if m not in by_model:
            continue
        if o.scope is None:
            if m not in whole:
                whole[m] = [s.name for s in store.slices(m)]
            names: list[str] = whole[m]
        elif owner in contexts:
            names = json.loads(contexts[owner])
        elif o.scope == mine:
            names = by_model[m]
        else:
            continue
        if any((m, n) in pairs for n in names):
            found.setdefault(m, []).append((tuple(sorted(names)), owner))
    models = store.models()
    out = []
    for m in order_by_step(found, lambda mid: models.get(mid, {}).get("meta")):
        # within a model, the narrower context first (as Diffract lists them)
        for names_, owner in sorted(found[m], key=lambda t: (len(t[0]), t[0])):
            out.append(_record(field, [m], names_, store.get((owner, field))))
    return out


def cross_records(scope: Selection, field: str) -> list[dict[str, Any]]:
    """Cross-model values of ``field`` whose context meets the scope, one per pair and name.

    The context of a value comparing slice ``n`` of model ``a`` with slice ``n`` of model
    ``b`` is models ``(a, b)`` and name ``n``; it is in the scope when the scope holds
    ``n`` of ``a`` or of ``b`` (as Diffract shows aggregates whose context meets the scope).
    A value stored in both directions (each model as the reference) is reported once, with
    the direction whose reference sorts first.
    """
    store = scope.session.store
    _, pairs = _scope_names(scope)
    if not pairs:
        return []
    by_uid = {s.uid: s for s in store.slices()}
    found: dict[tuple[tuple[str, ...], str], tuple[str, Any]] = {}
    for owner, f in list(store.keys()):
        if f != field or not is_cross_owner(owner):
            continue
        o = parse_owner(owner)
        s = by_uid.get(o.uid or "")
        ref = o.model_id or ""
        if s is None or ((s.model_id, s.name) not in pairs and (ref, s.name) not in pairs):
            continue
        pair = tuple(sorted((s.model_id, ref)))
        prev = found.get((pair, s.name))
        if prev is None or ref < prev[0]:
            found[(pair, s.name)] = (ref, (owner, f))
    return [
        _record(field, pair, [name], store.get(key))
        for (pair, name), (_, key) in sorted(found.items())
    ]


def record_contexts(scope: Selection, selected: Sequence[SliceInfo], fields: Sequence[str]) -> None:
    """Keep the names a run's model-level values of a partial selection are computed over.

    ``compute.apply`` on a selection holding part of a model stores its model-level values
    under ``@m[<scope key>]``; the key is a hash of the filter, so the names go in a
    :data:`~diffract.session.records.CONTEXT_DOC` document (what :func:`model_records` reads
    to show the value to every scope meeting them). Nothing is written for whole models,
    for runs without model-level fields, or when the document is there already.
    """
    session = scope.session
    if scope.filter_chain.is_empty:
        return
    try:
        kernels = session.registry.closure(fields)
    except Exception:  # an unknown field: the run says so itself
        return
    if not any(k.level == "model" for k in kernels):
        return
    store = session.store
    by_model: dict[str, list[str]] = {}
    for s in selected:
        by_model.setdefault(s.model_id, []).append(s.name)
    existing = store.documents(CONTEXT_DOC)
    docs = {}
    key = scope.filter_chain.key()
    for m, names in by_model.items():
        if len(names) == len(store.slices(m)):
            continue
        owner = model_owner(m, key)
        text = json.dumps(sorted(names))
        if existing.get(owner) != text:
            docs[(CONTEXT_DOC, owner)] = text
    if docs:
        store.commit(Batch(documents=docs))


def ingested_records(scope: Selection, field: str) -> list[dict[str, Any]]:
    """Aggregates ingested with ``ingest_aggregates`` whose context meets the scope."""
    models = set(scope.model_ids())
    names = {s.name for s in scope.slices()}
    out = []
    for _, text in sorted(scope.session.store.documents(AGGREGATE_DOC).items()):
        rec = json.loads(text)
        if rec["field"] != field or not models & set(rec["context_models"]):
            continue
        if rec["context_params"] and not names & set(rec["context_params"]):
            continue
        value = rec["value"]
        if rec.get("array"):
            value = np.asarray(value, dtype=rec["array"])
        out.append(_record(field, rec["context_models"], rec["context_params"], value))
    return out


def aggregate_records(scope: Selection, fields: Sequence[str]) -> list[dict[str, Any]]:
    """Every aggregate record of ``fields`` in the scope, field by field."""
    out: list[dict[str, Any]] = []
    for f in fields:
        out += model_records(scope, f)
        out += cross_records(scope, f)
        out += ingested_records(scope, f)
    return out


def ingest_documents(
    aggregates: Any, existing: dict[str, str], force: bool
) -> dict[tuple[str, str], str]:
    """The store documents for ``ingest_aggregates(aggregates)``, checked first.

    Raises:
        SessionError: not a list of dicts, a missing key, or an existing uid without force.
        InvalidIdentifierError: a bad field name or context member.
    """
    if not isinstance(aggregates, (list, tuple)):
        raise SessionError(
            f"ingest_aggregates() takes a list of dicts, got {type(aggregates).__name__}"
        )
    docs: dict[tuple[str, str], str] = {}
    for i, agg in enumerate(aggregates):
        if not isinstance(agg, dict):
            raise SessionError(f"aggregate #{i} must be a dict, got {type(agg).__name__}")
        missing = [k for k in ("field_name", "context_models", "value") if k not in agg]
        if missing:
            raise SessionError(f"aggregate #{i} lacks the key(s) {missing}")
        field = check_identifier(agg["field_name"], "aggregate field name")
        models = _members(agg["context_models"], "context model")
        params = _members(agg.get("context_params") or (), "context parameter")
        uid = contextual_key(field, models, params)
        if (uid in existing or (AGGREGATE_DOC, uid) in docs) and not force:
            raise SessionError(
                f"aggregate {uid!r} is already stored; pass force=True to overwrite it"
            )
        value = agg["value"]
        rec = {
            "field": field,
            "context_models": sorted(models),
            "context_params": sorted(params),
            "value": to_jsonable(value, where=uid, nonfinite="keep"),
        }
        if isinstance(value, np.ndarray):
            rec["array"] = str(value.dtype)
        docs[(AGGREGATE_DOC, uid)] = json.dumps(rec, allow_nan=True)
    return docs


def _members(values: Any, what: str) -> list[str]:
    if isinstance(values, str):
        values = [values]
    return [check_identifier(v, what) for v in values]
