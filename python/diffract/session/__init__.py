"""The session layer: :class:`Session`, :class:`Scope` and their namespaces.

``session.models``, ``session.compute``, ``session.results``, ``session.viz``,
``session.utils`` and ``session.weightwatcher`` each live in a module of their own (``models``,
``compute``, ``results``, ``viz``, ``utils``, ``weightwatcher``), as accessor classes of
:class:`Scope`; views (widgets, viz, server,
magics) talk to the engine only through these objects.

The published Diffract's session names are importable from here too: its errors
(``SessionError`` and subclasses), ``ApplySummary``, ``EraseSummary``, ``ParameterOverrides``,
``ParameterType`` and ``SessionContext``; its field addresses are
:mod:`diffract.session.resolver`. ``Session``, ``Scope`` and ``SessionContext`` here are
Diffract's import path: :mod:`diffract.compat`'s classes (ours with Diffract's names), loaded
on first use, since the compat layer sits above this package; ours are in
:mod:`diffract.session.session`.
"""

from typing import TYPE_CHECKING, Any

from diffract._core.slices import ParameterType as ParameterType
from diffract.session.compute import Compute as Compute

# Diffract's session error names: the list is kept once, in diffract.session.errors.__all__
from diffract.session.errors import *  # noqa: F403
from diffract.session.errors import __all__ as _error_names
from diffract.session.models import Models as Models
from diffract.session.results import (
    MissingValuesWarning as MissingValuesWarning,
    Results as Results,
)
from diffract.session.session import MissingConfigWarning as MissingConfigWarning
from diffract.session.summaries import (
    ApplySummary as ApplySummary,
    EraseSummary as EraseSummary,
    ParameterOverrides as ParameterOverrides,
)
from diffract.session.utils import Utils as Utils
from diffract.session.viz import Viz as Viz
from diffract.session.weightwatcher import WeightWatcher as WeightWatcher

if TYPE_CHECKING:
    from diffract.compat.session import (
        Scope as Scope,
        Session as Session,
        SessionContext as SessionContext,
    )

#: Diffract's import path of the compat layer's classes (a re-export, loaded on first use)
_COMPAT = ("Scope", "Session", "SessionContext")


def __getattr__(name: str) -> Any:
    if name in _COMPAT:
        from diffract.compat import session as compat

        return getattr(compat, name)
    raise AttributeError(f"module 'diffract.session' has no attribute {name!r}")


__all__ = [
    "ApplySummary",
    "Compute",
    "EraseSummary",
    "MissingConfigWarning",
    "MissingValuesWarning",
    "Models",
    "ParameterOverrides",
    "ParameterType",
    "Results",
    "Scope",
    "Session",
    "SessionContext",
    "Utils",
    "Viz",
    "WeightWatcher",
    *_error_names,
]
