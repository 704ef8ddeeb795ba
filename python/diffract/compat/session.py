"""Diffract's ``Session`` and ``SessionContext``: ours, with Diffract's namespace methods.

:class:`Session` is what ``diffract.Session`` (and ``diffract.session.Session``) give: our
:class:`diffract.session.session.Session` whose ``models``, ``compute`` and ``results``
namespaces are the compat ones (:mod:`diffract.compat.models`, ``.compute``, ``.results``),
so Diffract's names and behaviours sit above ours and ours have one name per operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from diffract._core.slices import ParameterType
from diffract.compat.compute import Compute
from diffract.compat.models import Models
from diffract.compat.results import Results
from diffract.session.scope import Accessor
from diffract.session.session import Scope as OurScope, Session as OurSession


class Scope(OurScope):
    """A filtered view of a session (Diffract's ``SessionContext``), with Diffract's names.

    Made by :meth:`Session.filter` (or :meth:`Scope.filter`), not directly.

    Args:
        session: the session it belongs to.
        chain: the filter selecting its slices.
    """

    #: add, list, rename and erase models; the scope's parameters, slices and weights
    models = Accessor(Models)
    #: run kernels on the scope; Diffract's kernel listing and ``configure_kernel``
    compute = Accessor(Compute)
    #: stored fields of the scope: Diffract's exports and ingestion, our tables
    results = Accessor(Results)

    if TYPE_CHECKING:  # ours makes a scope of scope_class: this one, for the type checker

        def filter(
            self,
            model_ids: Sequence[str] | str | None = None,
            param_names: Sequence[str] | str | None = None,
            param_types: Sequence[ParameterType | str] | ParameterType | str | None = None,
            param_ids: Sequence[str] | str | None = None,
        ) -> Scope: ...


Scope.scope_class = Scope


class Session(OurSession, Scope):
    __doc__ = OurSession.__doc__


#: Diffract's name of a filtered view of a session (``session.filter(...)``)
SessionContext = Scope
