"""``diffract.session.namespaces``: Diffract's names of the namespace classes (ours)."""

from diffract.session.compute import Compute as ComputeNamespace
from diffract.session.models import Models as ModelsNamespace
from diffract.session.results import Results as ResultsNamespace
from diffract.session.utils import Utils as UtilsNamespace
from diffract.session.viz import Viz as VizNamespace

__all__ = [
    "ComputeNamespace",
    "ModelsNamespace",
    "ResultsNamespace",
    "UtilsNamespace",
    "VizNamespace",
]
