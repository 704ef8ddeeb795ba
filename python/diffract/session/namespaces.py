"""``diffract.session.namespaces``: Diffract's names of the namespace classes.

A re-export of :mod:`diffract.compat`'s (loaded on first use: the compat layer sits above this
package); ``VizNamespace`` and ``UtilsNamespace`` are ours, which Diffract's names need no
other methods of.
"""

from typing import TYPE_CHECKING, Any

from diffract.session.utils import Utils as UtilsNamespace
from diffract.session.viz import Viz as VizNamespace

if TYPE_CHECKING:
    from diffract.compat.compute import Compute as ComputeNamespace
    from diffract.compat.models import Models as ModelsNamespace
    from diffract.compat.results import Results as ResultsNamespace

_COMPAT = {
    "ComputeNamespace": "Compute",
    "ModelsNamespace": "Models",
    "ResultsNamespace": "Results",
}

__all__ = [
    "ComputeNamespace",
    "ModelsNamespace",
    "ResultsNamespace",
    "UtilsNamespace",
    "VizNamespace",
]


def __getattr__(name: str) -> Any:
    if name in _COMPAT:
        import diffract.compat as compat

        return getattr(compat, _COMPAT[name])
    raise AttributeError(f"module 'diffract.session.namespaces' has no attribute {name!r}")
