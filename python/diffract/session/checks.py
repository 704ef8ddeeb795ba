"""Argument checks shared by the session's namespaces: flags, field names, meta, references.

Each raises :class:`diffract.InvalidArgumentError` naming the argument and what it accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np

from diffract._core.jsonable import to_jsonable
from diffract._errors import FieldNameError, InvalidArgumentError


@overload
def check_flag(value: Any, name: str, *, allow_none: Literal[False] = False) -> bool: ...
@overload
def check_flag(value: Any, name: str, *, allow_none: bool) -> bool | None: ...
def check_flag(value: Any, name: str, *, allow_none: bool = False) -> bool | None:
    """``value`` as a bool flag: ``replace="no"`` is not False.

    Args:
        value: what was passed.
        name: the argument's name, for the error.
        allow_none: whether None is accepted (and returned as None).

    Returns:
        ``value`` as a Python bool, or None.

    Raises:
        InvalidArgumentError: anything but a bool, a ``numpy.bool_`` (or None where allowed).
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    expected = "True, False or None" if allow_none else "True or False"
    raise InvalidArgumentError(f"{name} must be {expected}, got {type(value).__name__}: {value!r}")


def check_field_names(fields: Sequence[Any], where: str) -> None:
    """Field names must be strings given as separate arguments: ``f('a', 'b')``.

    Raises:
        FieldNameError: a field is not a string (a list of them says how to spread it); an
            ``InvalidArgumentError`` and, as Diffract's, a ``KernelNotFoundError``.
    """
    for f in fields:
        if isinstance(f, str):
            continue
        if isinstance(f, (list, tuple)):
            raise FieldNameError(
                f"{where} takes field names as separate arguments, got a {type(f).__name__}: "
                f"{f!r}; write {where.split('(')[0]}(*{f!r})"
            )
        raise FieldNameError(f"{where}: field names must be strings, got {type(f).__name__}: {f!r}")


def check_meta(meta: Any) -> dict[str, Any]:
    """A model's ``meta`` as plain JSON data (NumPy scalars and arrays converted).

    Raises:
        InvalidArgumentError: not a dict, a key that is not a string, or a value JSON cannot
            hold; the message names where in ``meta``.
    """
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise InvalidArgumentError(
            f"meta must be a dict of JSON-ready values, got {type(meta).__name__}: {meta!r}"
        )
    out: dict[str, Any] = to_jsonable(meta, where="meta", nonfinite="keep")
    return out


def check_reference(reference: Any) -> None:
    """``reference`` must be None or a model id.

    Raises:
        InvalidArgumentError: it is something else.
    """
    if reference is not None and not isinstance(reference, str):
        raise InvalidArgumentError(
            f"reference must be a model_id (a string), got {type(reference).__name__}: {reference!r}"
        )


def names(items: Sequence[str], n: int = 5) -> str:
    """The first ``n`` of ``items`` quoted, then how many more."""
    shown = ", ".join(repr(x) for x in items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")
