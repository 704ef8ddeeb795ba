"""The session layer: :class:`Session`, :class:`Scope` and their namespaces.

``session.models``, ``session.compute``, ``session.results``, ``session.viz`` and
``session.utils`` each live in a module of their own; views (widgets, viz, server, magics)
talk to the engine only through these objects.
"""

from diffract.session.api import Compute as Compute
from diffract.session.api import Models as Models
from diffract.session.api import Results as Results
from diffract.session.api import Scope as Scope
from diffract.session.api import Session as Session
from diffract.session.api import Utils as Utils
from diffract.session.api import Viz as Viz

__all__ = ["Compute", "Models", "Results", "Scope", "Session", "Utils", "Viz"]
