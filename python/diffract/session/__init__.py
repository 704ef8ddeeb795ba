"""The session layer: :class:`Session`, :class:`Scope` and their namespaces.

``session.models``, ``session.compute``, ``session.results``, ``session.viz`` and
``session.utils`` each live in a module of their own (``models``, ``compute``, ``results``,
``viz``, ``utils``), as accessor classes of :class:`Scope`; views (widgets, viz, server,
magics) talk to the engine only through these objects.
"""

from diffract.session.compute import Compute as Compute
from diffract.session.models import Models as Models
from diffract.session.results import Results as Results
from diffract.session.session import Scope as Scope
from diffract.session.session import Session as Session
from diffract.session.utils import Utils as Utils
from diffract.session.viz import Viz as Viz

__all__ = ["Compute", "Models", "Results", "Scope", "Session", "Utils", "Viz"]
