"""Plain pytrees of arrays: dicts (flat with dotted names, or nested), lists, tuples.

A nested dict of JAX arrays while Flax is imported is read as Flax Linen params: its
``kernel`` leaves are (in, out) / (*kernel, in, out).
"""

from __future__ import annotations

import sys
from typing import Any

from .._tree import tree_leaves_with_path
from . import Extractor, ModelTree, nest_dotted


def _is_container(obj: Any) -> bool:
    return isinstance(obj, (dict, list, tuple))


def _looks_like_flax_params(tree: Any) -> bool:
    jax = sys.modules.get("jax")
    if "flax" not in sys.modules or jax is None:
        return False
    leaves = tree_leaves_with_path(tree)
    return any(isinstance(leaf, jax.Array) for _, leaf in leaves) and any(
        p and p[-1] == "kernel" for p, _ in leaves
    )


def _extract(obj: Any) -> ModelTree:
    if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
        flat = all(not isinstance(v, (dict, list, tuple)) for v in obj.values())
        tree = nest_dotted(obj) if flat else obj
    else:
        tree = obj
    if _looks_like_flax_params(tree):
        return ModelTree(tree=tree, framework="flax.linen", kernel_layout="in_out")
    return ModelTree(tree=tree, framework="numpy")


EXTRACTORS = [Extractor("pytree", _is_container, _extract)]
