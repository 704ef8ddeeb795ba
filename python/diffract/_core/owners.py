"""Owner keys: who a stored field value belongs to. The only module that builds or parses them.

A store keys every value by ``(owner, field)``. Three kinds of owner exist:

* a **slice**: its uid, e.g. ``"3f2a9c..."`` (parameter-level fields);
* a **model**: ``"@<model_id>"`` for the whole model, or ``"@<model_id>[<scope key>]"`` for a
  model-level field computed over a selection of its slices;
* a **cross pair**: ``"<uid>@<reference model_id>"``, a slice compared with the slice of the
  same name in a reference model.

Model ids never contain ``@ [ ] , /`` (see :func:`diffract._core.slices.validate_model_id`), so
the three forms cannot be confused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Owner",
    "cross_owner",
    "is_cross_owner",
    "is_model_owner",
    "model_owner",
    "owner_level",
    "owner_model_ids",
    "parse_owner",
]

OwnerLevel = Literal["param", "model", "cross"]


@dataclass(frozen=True)
class Owner:
    """A parsed owner key.

    Attributes:
        level: ``"param"``, ``"model"`` or ``"cross"``.
        uid: the slice uid (param and cross owners), else None.
        model_id: the model (model owners) or the reference model (cross owners), else None.
        scope: the scope key of a model owner computed over a selection, else None.
    """

    level: OwnerLevel
    uid: str | None = None
    model_id: str | None = None
    scope: str | None = None


def model_owner(model_id: str, scope: str | None = None) -> str:
    """The owner key of a model-level value: ``@m`` (whole model) or ``@m[scope]``.

    Args:
        model_id: the model's id.
        scope: the key of the selection it was computed over; None for the whole model.

    Returns:
        The owner key.
    """
    return f"@{model_id}" if scope is None else f"@{model_id}[{scope}]"


def cross_owner(uid: str, reference: str) -> str:
    """The owner key of a value comparing slice ``uid`` with its peer in model ``reference``."""
    return f"{uid}@{reference}"


def is_model_owner(owner: str) -> bool:
    """Whether ``owner`` is a model owner (``@m`` or ``@m[scope]``)."""
    return owner.startswith("@")


def is_cross_owner(owner: str) -> bool:
    """Whether ``owner`` is a cross-pair owner (``uid@reference``)."""
    return not owner.startswith("@") and "@" in owner


def owner_level(owner: str) -> OwnerLevel:
    """``"model"``, ``"cross"`` or ``"param"`` for an owner key."""
    if owner.startswith("@"):
        return "model"
    return "cross" if "@" in owner else "param"


def parse_owner(owner: str) -> Owner:
    """Split an owner key into its parts.

    Args:
        owner: an owner key of any of the three forms.

    Returns:
        The :class:`Owner` it names.
    """
    if owner.startswith("@"):
        body = owner[1:]
        if body.endswith("]") and "[" in body:
            model_id, _, scope = body[:-1].partition("[")
            return Owner("model", model_id=model_id, scope=scope)
        return Owner("model", model_id=body)
    if "@" in owner:
        uid, _, ref = owner.partition("@")
        return Owner("cross", uid=uid, model_id=ref)
    return Owner("param", uid=owner)


def owner_model_ids(owner: str, slice_models: dict[str, str]) -> set[str]:
    """The model ids an owner key belongs to (dropping any of them drops the value).

    Args:
        owner: an owner key.
        slice_models: slice uid -> its model id, for the slices of the store.

    Returns:
        The model of a model owner; the slice's model of a param owner; both the slice's model
        and the reference model of a cross owner (an unknown uid contributes nothing).
    """
    o = parse_owner(owner)
    if o.level == "model":
        return {o.model_id} if o.model_id is not None else set()
    out = {o.model_id} if o.model_id else set()
    m = slice_models.get(o.uid or "")
    if m is not None:
        out.add(m)
    return out
