"""Owner keys: who a stored field value belongs to. The only module that builds or parses them.

A store keys every value by ``(owner, field)``. Three kinds of owner exist:

* a **slice**: its uid, e.g. ``"3f2a9c..."`` (parameter-level fields);
* a **model**: ``"@<model_id>"`` for the whole model, or ``"@<model_id>[<scope key>]"`` for a
  model-level field computed over a selection of its slices;
* a **cross pair**: ``"<uid>@<reference model_id>"``, a slice compared with the slice of the
  same name in a reference model.

Model ids never contain ``@ [ ] , /`` (see :func:`diffract._vocab.slices.validate_model_id`), so
the three forms cannot be confused.

It also builds and parses **contextual keys**, the names an aggregate is exported under
(Diffract's aggregate uid): ``field@models[m1,m2]@params[p1,p2]`` (members sorted).
Parameter names may hold ``@ [ ] , /`` (an ONNX initializer ``/layer.0/MatMul``, a NumPy dict
key ``a,b``), which would make ``params[a,b]`` mean one name or two; in a contextual key each
member (and the field) is written with those characters, and ``%`` itself, percent-escaped
(``a,b`` -> ``a%2Cb``). Names without them keep the key Diffract writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Owner",
    "contextual_field",
    "contextual_key",
    "cross_owner",
    "is_cross_owner",
    "is_model_owner",
    "model_owner",
    "owner_level",
    "owner_model_ids",
    "parse_contextual_key",
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


# --- contextual keys -------------------------------------------------------------------------

#: the characters with a meaning in a contextual key, and ``%``, which escapes them
KEY_SYNTAX = "%@[],/"
_ESCAPES = {c: f"%{ord(c):02X}" for c in KEY_SYNTAX}
_ESCAPED = re.compile("|".join(re.escape(e) for e in _ESCAPES.values()))
_UNESCAPES = {e: c for c, e in _ESCAPES.items()}
_NEEDS_ESCAPE = re.compile(f"[{re.escape(KEY_SYNTAX)}]")


def escape_member(name: str) -> str:
    """``name`` as written inside a contextual key: ``% @ [ ] , /`` as ``%25 %40 %5B %5D
    %2C %2F``; a name without them is unchanged."""
    if _NEEDS_ESCAPE.search(name) is None:
        return name
    return "".join(_ESCAPES.get(c, c) for c in name)


def unescape_member(text: str) -> str:
    """The name :func:`escape_member` wrote as ``text``."""
    return _ESCAPED.sub(lambda m: _UNESCAPES[m.group(0)], text)


def contextual_key(field: str, models: Iterable[str], params: Iterable[str]) -> str:
    """``field@models[a,b]@params[x,y]``: an aggregate's key (Diffract's aggregate uid).

    Members are sorted; each (and the field) is escaped by :func:`escape_member`, so every
    key names one field and one context. An empty member list leaves its part out.

    Args:
        field: the aggregate's field.
        models: the model ids of its context.
        params: the parameter names of its context.

    Returns:
        The key.
    """
    key = escape_member(field)
    models, params = sorted(models), sorted(params)
    if models:
        key += f"@models[{','.join(map(escape_member, models))}]"
    if params:
        key += f"@params[{','.join(map(escape_member, params))}]"
    return key


_PART = re.compile(r"@(models|params)\[([^\[\]@]*)\]")


def parse_contextual_key(key: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """``(field, models, params)`` of a key made by :func:`contextual_key`.

    Args:
        key: a contextual key (a bare field name is a key with an empty context).

    Returns:
        The field and the context's members, unescaped.

    Raises:
        ValueError: ``key`` is not of that form.
    """
    head, sep, rest = key.partition("@")
    parts: dict[str, tuple[str, ...]] = {"models": (), "params": ()}
    pos = 0
    rest = sep + rest
    while pos < len(rest):
        m = _PART.match(rest, pos)
        if m is None or parts[m.group(1)] or (m.group(1) == "models" and parts["params"]):
            raise ValueError(f"{key!r} is not a contextual key (field@models[m1,m2]@params[p1,p2])")
        members = tuple(unescape_member(t) for t in m.group(2).split(","))
        parts[m.group(1)] = members
        pos = m.end()
    return unescape_member(head), parts["models"], parts["params"]


def contextual_field(key: str) -> str:
    """The field of a contextual key (``log_norm@models[m]`` -> ``log_norm``)."""
    return unescape_member(key.split("@", 1)[0])
