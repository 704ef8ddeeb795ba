"""``diffract.session.resolver``: Diffract's field addresses, a plain field name or a
contextual key ``field@models[a,b]@params[x,y]`` (the aggregates' keys), as structure.

:func:`resolve` parses an address into a :class:`FieldSelector`; :func:`render_label`
writes one back as the key the aggregates are stored and exported under.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from diffract.session.records import contextual_key

__all__ = ["FieldSelector", "render_label", "resolve"]

_MODELS = re.compile(r"^models\[(.+)\]$")
_PARAMS = re.compile(r"^params\[(.+)\]$")


@dataclass(frozen=True)
class FieldSelector:
    """A field address as structure.

    Attributes:
        field: the field name.
        models: the model ids of its context, or None.
        params: the parameter names of its context, or None.
        steps: reserved (Diffract's too), None.
        roles: reserved (Diffract's too), None.
    """

    field: str
    models: tuple[str, ...] | None = None
    params: tuple[str, ...] | None = None
    steps: tuple[int, ...] | None = None
    roles: tuple[str, ...] | None = None

    @property
    def is_contextual(self) -> bool:
        """Whether the address names an aggregate's context."""
        return self.models is not None or self.params is not None


def resolve(address: str | FieldSelector | Any) -> FieldSelector:
    """The :class:`FieldSelector` of an address.

    Args:
        address: a field name, a contextual key, an object with a string ``field``
            attribute (a figure's field reference), or a FieldSelector.

    Returns:
        The selector, context members in the order written. Parts after the field that are
        not ``models[...]`` or ``params[...]`` add no context (as in Diffract).

    Raises:
        TypeError: ``address`` is none of these.
    """
    if isinstance(address, FieldSelector):
        return address
    text = address if isinstance(address, str) else getattr(address, "field", None)
    if not isinstance(text, str):
        raise TypeError(
            f"cannot resolve a field address of type {type(address).__name__}; expected a "
            "field name, a contextual key, an object with a .field string, or a FieldSelector"
        )
    field, *parts = text.split("@")
    models: tuple[str, ...] | None = None
    params: tuple[str, ...] | None = None
    for part in parts:
        if m := _MODELS.match(part):
            models = tuple(m.group(1).split(","))
        elif m := _PARAMS.match(part):
            params = tuple(m.group(1).split(","))
    return FieldSelector(field=field, models=models, params=params)


def render_label(selector: FieldSelector) -> str:
    """The key of a selector: the field, then ``@models[...]``/``@params[...]`` sorted.

    Args:
        selector: the selector.

    Returns:
        The label (the stored aggregate's key for a contextual selector).
    """
    return contextual_key(selector.field, selector.models or (), selector.params or ())
