"""The small value types of Diffract's session API: summaries and parameter overrides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diffract._vocab.slices import ParameterType

#: the reason Diffract gives for a requested field that wrote nothing
NOTHING_WRITTEN = "no new field written (already computed or out of scope)"


@dataclass(frozen=True)
class ApplySummary:
    """What ``compute.apply`` wrote, by level (Diffract's summary).

    Attributes:
        parameter_fields: per-parameter fields written (dependencies included), sorted.
        in_model_fields: model-level fields written, sorted.
        cross_model_fields: cross-model fields written, sorted.
        skipped: ``(field, reason)`` for requested fields that wrote nothing.
    """

    parameter_fields: tuple[str, ...] = ()
    in_model_fields: tuple[str, ...] = ()
    cross_model_fields: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EraseSummary:
    """What an erase removed (Diffract's summary).

    Attributes:
        models: the models erased, sorted.
        fields: the fields named, sorted.
        affected_uids: parameters removed, or parameters of the scope that held one of the fields.
    """

    models: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    affected_uids: int = 0


@dataclass
class ParameterOverrides:
    """A new name, type or extra metadata for one parameter, given to ``models.add``.

    Attributes:
        name: the name to store the parameter under.
        ptype: its :class:`ParameterType` (or the type's name).
        other_meta: extra metadata (``other_meta`` keys, ``meta_<key>`` columns).
    """

    name: str | None = None
    ptype: str | ParameterType | None = None
    other_meta: dict[str, Any] | None = None
