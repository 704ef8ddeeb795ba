"""Diffract's synonyms of our namespace methods, declared once.

:data:`ALIASES` lists Diffract's names that do exactly what one of ours does (same
arguments, same result): :func:`with_aliases` makes each a one-line alias on the compat
namespace. :data:`SYNONYMS` lists Diffract's names of our operations whose arguments or
result differ (Diffract's ``models.erase`` takes several ids and returns an
``EraseSummary``, our ``remove`` one id): those are methods of the compat namespaces, which
say in their docstrings what differs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

#: namespace -> Diffract's name -> ours: the same operation, arguments and result
ALIASES: dict[str, dict[str, str]] = {
    "models": {"list": "ids"},
}

#: namespace -> Diffract's name -> ours: the same operation, other arguments or result
#: (methods of :mod:`diffract.compat`'s namespaces; listed here so the pairs are in one place)
SYNONYMS: dict[str, dict[str, str]] = {
    "models": {"erase": "remove"},
    "compute": {
        "list_available_metrics": "fields",
        "configure_kernel": "configure",
    },
    "results": {"erase": "compute.erase", "export_metrics": "export_table"},
}

C = TypeVar("C", bound=type)


def with_aliases(namespace: str) -> Callable[[C], C]:
    """Class decorator: add :data:`ALIASES` ``[namespace]`` to a compat namespace class."""

    def add(cls: C) -> C:
        for theirs, ours in ALIASES.get(namespace, {}).items():
            setattr(cls, theirs, getattr(cls, ours))
        return cls

    return add
