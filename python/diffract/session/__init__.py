"""The session layer: :class:`Session`, :class:`Scope` and their namespaces.

``session.models``, ``session.compute``, ``session.results``, ``session.viz``,
``session.utils`` and ``session.weightwatcher`` each live in a module of their own (``models``,
``compute``, ``results``, ``viz``, ``utils``, ``weightwatcher``), as accessor classes of
:class:`Scope`; views (widgets, viz, server,
magics) talk to the engine only through these objects.

The published Diffract's session names are importable from here too: its errors
(``SessionError`` and subclasses), ``ApplySummary``, ``EraseSummary``, ``ParameterOverrides``,
``ParameterType`` and ``SessionContext`` (our :class:`Scope`); its field addresses are
:mod:`diffract.session.resolver`.
"""

from diffract._core.slices import ParameterType as ParameterType
from diffract.session.compute import Compute as Compute

# Diffract's session error names: the list is kept once, in diffract.session.errors.__all__
from diffract.session.errors import *  # noqa: F403
from diffract.session.errors import __all__ as _error_names
from diffract.session.models import Models as Models
from diffract.session.outcomes import MissingValuesWarning as MissingValuesWarning
from diffract.session.results import Results as Results
from diffract.session.session import (
    MissingConfigWarning as MissingConfigWarning,
    Scope as Scope,
    Session as Session,
    SessionContext as SessionContext,
)
from diffract.session.summaries import (
    ApplySummary as ApplySummary,
    EraseSummary as EraseSummary,
    ParameterOverrides as ParameterOverrides,
)
from diffract.session.utils import Utils as Utils
from diffract.session.viz import Viz as Viz
from diffract.session.weightwatcher import WeightWatcher as WeightWatcher

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
