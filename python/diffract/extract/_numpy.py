"""Plain pytrees of arrays: dicts (flat with dotted names, or nested), lists, tuples."""

from __future__ import annotations

from typing import Any

from . import Extractor, ModelTree, nest_dotted


def _is_container(obj: Any) -> bool:
    return isinstance(obj, (dict, list, tuple))


def _extract(obj: Any) -> ModelTree:
    if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
        flat = all(not isinstance(v, (dict, list, tuple)) for v in obj.values())
        tree = nest_dotted(obj) if flat else obj
    else:
        tree = obj
    return ModelTree(tree=tree, framework="numpy")


EXTRACTORS = [Extractor("pytree", _is_container, _extract)]
