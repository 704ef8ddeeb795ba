"""Diffract compatibility, one layer above the session.

Every name and behaviour of the published Diffract that differs from ours lives here:
:class:`Session` and :class:`Scope` (Diffract's ``SessionContext``) carry Diffract's
namespace methods over ours (:mod:`.models`, :mod:`.compute`, :mod:`.results`); its
synonyms of our methods are declared once in :mod:`.aliases`; :func:`upgrade_metadata_index`
is Diffract's store migration. Diffract's import paths (``diffract.core.*``,
``diffract.session``, ``diffract.containers``) re-export these. Nothing below this layer
imports it (import-linter's layers contract in ``pyproject.toml``).
"""

from diffract.compat.compute import Compute as Compute
from diffract.compat.migrate import upgrade_metadata_index as upgrade_metadata_index
from diffract.compat.models import Models as Models, Parameters as Parameters
from diffract.compat.results import Results as Results
from diffract.compat.session import (
    Scope as Scope,
    Session as Session,
    SessionContext as SessionContext,
)

__all__ = [
    "Compute",
    "Models",
    "Parameters",
    "Results",
    "Scope",
    "Session",
    "SessionContext",
    "upgrade_metadata_index",
]
