"""The session layer: :class:`Session`, :class:`Scope` and their namespaces.

``session.models``, ``session.compute``, ``session.results``, ``session.viz`` and
``session.utils`` each live in a module of their own (``models``, ``compute``, ``results``,
``viz``, ``utils``), as accessor classes of :class:`Scope`; views (widgets, viz, server,
magics) talk to the engine only through these objects.

The published Diffract's session names are importable from here too: its errors
(``SessionError`` and subclasses), ``ApplySummary``, ``EraseSummary``, ``ParameterOverrides``
and ``ParameterType``.
"""

from diffract._core.slices import ParameterType as ParameterType
from diffract._errors import (
    IncompatibleStoreError as IncompatibleStoreError,
    InvalidIdentifierError as InvalidIdentifierError,
    KernelNotFoundError as KernelNotFoundError,
    ModelAlreadyExistsError as ModelAlreadyExistsError,
    ModelNotFoundError as ModelNotFoundError,
    ScopeValidationError as ScopeValidationError,
    SessionError as SessionError,
)
from diffract.session.compute import Compute as Compute
from diffract.session.models import Models as Models
from diffract.session.results import Results as Results
from diffract.session.session import Scope as Scope, Session as Session
from diffract.session.summaries import (
    ApplySummary as ApplySummary,
    EraseSummary as EraseSummary,
    ParameterOverrides as ParameterOverrides,
)
from diffract.session.utils import Utils as Utils
from diffract.session.viz import Viz as Viz

__all__ = [
    "ApplySummary",
    "Compute",
    "EraseSummary",
    "IncompatibleStoreError",
    "InvalidIdentifierError",
    "KernelNotFoundError",
    "ModelAlreadyExistsError",
    "ModelNotFoundError",
    "Models",
    "ParameterOverrides",
    "ParameterType",
    "Results",
    "Scope",
    "ScopeValidationError",
    "Session",
    "SessionError",
    "Utils",
    "Viz",
]
