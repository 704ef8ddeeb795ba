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

from diffract._core.jsonable import to_jsonable

EXPORT_FORMATS = ("dict", "list", "json", "pandas", "polars")
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
