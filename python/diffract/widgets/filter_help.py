"""What the filter builder adds around a filter: the preview's sort orders, "did you mean"
for names and types that match nothing, and the ``.filter(...)`` line that rebuilds it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from diffract.extract import natural_key

__all__ = ["SORT_COLUMNS", "filter_code", "sort_slices", "suggestions"]

#: the preview's columns that sort (the synced ``sort_by`` is one of them, or "")
SORT_COLUMNS = ("model_id", "name", "type", "shape")


def _shape_key(s: Any) -> tuple[int, tuple[int, ...]]:
    n = 1
    for d in s.shape:
        n *= int(d)
    return (n, tuple(s.shape))


def sort_slices(slices: Sequence[Any], column: str, descending: bool = False) -> list[Any]:
    """``slices`` sorted by a preview column; the store's order (depth) when ``column`` is "".

    Args:
        slices: SliceInfo records.
        column: one of :data:`SORT_COLUMNS`, or "" for no sort.
        descending: reverse the order.

    Returns:
        A new list (ties keep the store's order); shapes sort by element count, then shape.

    Raises:
        ValueError: an unknown column.
    """
    if not column:
        return list(reversed(slices)) if descending else list(slices)
    keys = {
        "model_id": lambda s: natural_key(s.model_id, fold_case=True),
        "name": lambda s: natural_key(s.name, fold_case=True),
        "type": lambda s: s.type.value,
        "shape": _shape_key,
    }
    if column not in keys:
        raise ValueError(f"unknown sort column {column!r}; choose one of {', '.join(SORT_COLUMNS)}")
    return sorted(slices, key=keys[column], reverse=descending)


def suggestions(
    slices: Sequence[Any], names: Sequence[str] | None, types: Sequence[str] | None
) -> list[dict[str, Any]]:
    """ "Did you mean" for the exact names and the types that no slice of ``slices`` has.

    Args:
        slices: the slices the names and types are looked up in (the base scope, narrowed to
            the chosen models).
        names: the names criterion (``re:`` patterns are left alone).
        types: the types criterion.

    Returns:
        ``{"kind": "name" | "type", "given", "suggestions": [closest first, at most 3]}`` per
        entry that matches nothing, in the order given (``suggestions`` may be empty).
    """
    out: list[dict[str, Any]] = []
    known_names = {s.name for s in slices}
    known_types = {s.type.value for s in slices}
    for kind, given, known, cutoff in (
        ("name", names or (), known_names, 0.6),
        ("type", types or (), known_types, 0.5),
    ):
        for g in given:
            if (kind == "name" and g.startswith("re:")) or g in known:
                continue
            close = difflib.get_close_matches(g, sorted(known), n=3, cutoff=cutoff)
            out.append({"kind": kind, "given": g, "suggestions": close})
    return out


def filter_code(source_name: str, criteria: Mapping[str, Iterable[str] | None]) -> str:
    """The ``.filter(...)`` call that selects what the builder selects.

    Args:
        source_name: the variable the builder was made from (``session``, a scope's name).
        criteria: the builder's ``criteria()``: ``filter(...)`` keyword arguments, None for
            no constraint.

    Returns:
        One line of Python, e.g. ``session.filter(model_ids=['m1'], param_types=['dense'])``.
    """
    args = ", ".join(f"{k}={list(v)!r}" for k, v in criteria.items() if v is not None)
    return f"{source_name}.filter({args})"
