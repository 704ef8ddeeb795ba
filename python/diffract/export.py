"""Tables of field values in every export format: dict, list, json, pandas, polars.

One row per parameter (model_id, name, uid, type, then one column per field); model-level
fields give one row per model (``name`` empty, ``type`` "model", ``uid`` the owner key);
cross-model fields carry the reference model in a ``reference`` column.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

EXPORT_FORMATS = ("dict", "list", "json", "pandas", "polars")
KEY_COLUMNS = ("model_id", "name", "uid", "type")


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return None
    return v


def to_format(rows: list[dict[str, Any]], columns: Sequence[str], export_format: str) -> Any:
    """Turn rows (dicts with every column) into the requested format."""
    if export_format not in EXPORT_FORMATS:
        raise ValueError(
            f"unknown export_format {export_format!r}; choose one of {list(EXPORT_FORMATS)}"
        )
    if export_format == "list":
        return [dict(r) for r in rows]
    if export_format == "dict":
        return {c: [r.get(c) for r in rows] for c in columns}
    if export_format == "json":
        return json.dumps(
            [{c: _jsonable(r.get(c)) for c in columns} for r in rows], allow_nan=False
        )
    if export_format == "pandas":
        import pandas as pd

        return pd.DataFrame({c: [r.get(c) for r in rows] for c in columns}, columns=list(columns))
    import polars as pl

    data = {}
    for c in columns:
        col = [r.get(c) for r in rows]
        if any(isinstance(v, np.ndarray) for v in col):
            col = [None if v is None else np.asarray(v).ravel().tolist() for v in col]
        data[c] = col
    return pl.DataFrame(data, strict=False)
