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
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from diffract._core.jsonable import to_jsonable
from diffract._core.owners import contextual_field, contextual_key as contextual_key
from diffract._core.slices import SliceInfo

#: the export formats, in the order error messages list them
FORMATS = ("dict", "json", "list", "pandas", "polars")
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
    if export_format not in FORMATS:
        raise ValueError(f"Unsupported format {export_format!r}; choose one of {list(FORMATS)}")
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
#: and parsed in :mod:`diffract._core.owners` (``contextual_key`` is imported from there)
base_name = contextual_field
