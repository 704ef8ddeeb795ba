# mypy: disable-error-code="import-untyped"
"""``diffract.viz.data``: what a plot reads (Diffract's names): field references, ordering,
value filters, and the entries a scope exports.

An axis, grouping or colour names a **field** (a stored or computable value) or a
**metadata key** of the parameters (``model_id``, ``name`` / ``parameter_name``,
``parameter_type``, ``in_model_idx`` and any ``other_meta`` key such as ``layer_id``).
Diffract 0.3.1 documents both but raises ``KernelNotFoundError`` for the second; here both work.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from diffract._errors import UnknownFieldError

__all__ = [
    "DataProvider",
    "DataShape",
    "DataType",
    "Entry",
    "FieldRef",
    "OrderMode",
    "Ordering",
    "apply_filter",
    "as_is",
    "by_key",
    "custom",
    "get_field_value",
    "get_field_values",
    "lexicographic",
    "numeric",
]

#: metadata names an axis may use besides the parameters' ``other_meta`` keys
ALIASES = {"parameter_name": "name", "parameter_uid": "uid", "uid": "uid"}


class OrderMode(enum.Enum):
    """How the categories of an axis are ordered."""

    AS_IS = "as_is"
    LEXICOGRAPHIC = "lexicographic"
    NUMERIC = "numeric"
    MAP = "map"
    CUSTOM = "custom"


class DataType(enum.Enum):
    """What kind of values a reference holds."""

    NUMERIC = "numeric"
    CATEGORICAL = "categorical"


class DataShape(enum.Enum):
    """Whether each entry holds one value or many."""

    SCALAR = "scalar"
    VECTOR = "vector"


@dataclass
class Ordering:
    """An order for categories: as met, by text, by number, by a key, or given."""

    mode: OrderMode = OrderMode.AS_IS
    descending: bool = False
    key: Callable[[Any], Any] | None = None
    custom_order: Sequence[Any] | None = None

    def apply(self, values: Iterable[Any]) -> list[Any]:
        """The distinct ``values`` in this order.

        Args:
            values: category values, repeated as met.

        Returns:
            Each distinct value once.
        """
        out = list(dict.fromkeys(values))
        if self.mode is OrderMode.LEXICOGRAPHIC:
            out.sort(key=str)
        elif self.mode is OrderMode.NUMERIC:
            out.sort(key=_number)
        elif self.mode is OrderMode.MAP and self.key is not None:
            out.sort(key=self.key)
        elif self.mode is OrderMode.CUSTOM and self.custom_order is not None:
            rank = {v: i for i, v in enumerate(self.custom_order)}
            out.sort(key=lambda v: rank.get(v, len(rank)))
        if self.descending:
            out.reverse()
        return out


def _number(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


def as_is() -> Ordering:
    """Categories in the order they are met."""
    return Ordering()


def lexicographic(descending: bool = False) -> Ordering:
    """Categories sorted as text."""
    return Ordering(OrderMode.LEXICOGRAPHIC, descending)


def numeric(descending: bool = False) -> Ordering:
    """Categories sorted as numbers."""
    return Ordering(OrderMode.NUMERIC, descending)


def by_key(key: Callable[[Any], Any], descending: bool = False) -> Ordering:
    """Categories sorted by ``key(value)``."""
    return Ordering(OrderMode.MAP, descending, key=key)


def custom(order: Sequence[Any], descending: bool = False) -> Ordering:
    """Categories in the order given (others after them)."""
    return Ordering(OrderMode.CUSTOM, descending, custom_order=order)


@dataclass
class FieldRef:
    """A reference to a field or metadata key, with how to read and order it."""

    field: str
    data_type: DataType | None = None
    data_shape: DataShape | None = None
    ordering: Ordering = dataclasses.field(default_factory=as_is)

    def __str__(self) -> str:
        return self.field


Entry = dict[str, Any]


def _contextual(entry: Entry, name: str) -> Any:
    """A value for ``name`` among the entry's contextual keys (``name@models[...]...``)."""
    best = None
    for key, v in entry["fields"].items():
        if not key.startswith(name + "@"):
            continue
        size = key.count(",")
        if best is None or size < best[0]:
            best = (size, v)
    return None if best is None else best[1]


def get_field_value(entry: Entry, name: str) -> Any:
    """The value of a field or metadata key in one exported entry, or None.

    Args:
        entry: ``{"uid", "metadata", "fields"}``.
        name: a field, a contextual key, or a metadata key.

    Returns:
        The value, or None when the entry has none.
    """
    fields = entry["fields"]
    if name in fields:
        return fields[name]
    v = _contextual(entry, name)
    if v is not None:
        return v
    key = ALIASES.get(name, name)
    if key == "uid":
        return entry.get("uid")
    return entry["metadata"].get(key)


def get_field_values(entries: Sequence[Entry], name: str) -> list[Any]:
    """``get_field_value`` over ``entries``."""
    return [get_field_value(e, name) for e in entries]


def _scalar(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return float(np.nanmean(v)) if v.size else math.nan
    return v


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def apply_filter(entries: Sequence[Entry], value_filter: dict[str, Any] | None) -> list[Entry]:
    """The entries passing every ``{name: (op, threshold)}`` condition.

    Arrays compare by their mean; entries without the value are dropped.

    Raises:
        ValueError: an unknown operator.
    """
    out = list(entries)
    for name, cond in (value_filter or {}).items():
        op, threshold = cond
        if op not in _OPS:
            raise ValueError(f"unknown value_filter operator {op!r}; use one of {list(_OPS)}")
        keep = []
        for e in out:
            v = _scalar(get_field_value(e, name))
            if v is not None and _OPS[op](v, threshold):
                keep.append(e)
        out = keep
    return out


class DataProvider:
    """Reads the entries of a scope for the names a plot uses."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def is_field(self, name: str) -> bool:
        """Whether ``name`` is a field (computable or stored) rather than a metadata key."""
        base = name.split("@", 1)[0]
        registry = self.session.session.registry
        return registry.has_field(base) or base in self.session.session.store.field_names()

    def entries(self, names: Iterable[str]) -> list[Entry]:
        """One entry per parameter of the scope, with the fields among ``names``.

        Raises:
            UnknownFieldError: a name that is neither a field nor a metadata key of any entry.
        """
        names = list(dict.fromkeys(names))
        fields = [n for n in names if self.is_field(n)]
        if fields:
            exported = self.session.results.export(*fields, export_format="dict")
        else:
            exported = {s.uid: {"metadata": m, "fields": {}} for s, m in self._metadata()}
        out = [{"uid": uid, **e} for uid, e in exported.items()]
        for n in names:
            if n in fields:
                continue
            key = ALIASES.get(n, n)
            if key != "uid" and not any(key in e["metadata"] for e in out) and out:
                registry = self.session.session.registry
                raise UnknownFieldError(
                    f"{n!r} is neither a field nor a metadata key of the parameters "
                    f"(metadata keys: {sorted(out[0]['metadata'])}); "
                    + registry.unknown_field_message(n)
                )
        return out

    def _metadata(self) -> list[tuple[Any, dict[str, Any]]]:
        from diffract.session.records import META_DOC, metadata

        patched = self.session.session.store.documents(META_DOC)
        return [(s, metadata(s, patched)) for s in self.session.models.slices()]
