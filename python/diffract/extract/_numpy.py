"""Plain pytrees of arrays: dicts (flat with dotted names, or nested), lists, tuples.

A nested dict of JAX arrays while Flax is imported is read as Flax Linen params: its
``kernel`` leaves are (in, out) / (*kernel, in, out).
"""

from __future__ import annotations

import sys
from typing import Any

from diffract._errors import ExtractionError
from diffract._vocab.tree import tree_leaves_with_path
from diffract.extract import Extractor, ModelTree, nest_dotted


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


def _check_keys(obj: Any, where: str = "") -> None:
    """Parameter names come from dict keys: every key of every nested dict must be a str."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                at = f" (in {where!r})" if where else ""
                raise ExtractionError(
                    f"parameter names must be strings: the model dict has the key {k!r} "
                    f"of type {type(k).__name__}{at}; use string keys such as {str(k)!r}"
                )
            _check_keys(v, f"{where}.{k}" if where else k)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_keys(v, f"{where}.{i}" if where else str(i))


def _extract(obj: Any) -> ModelTree:
    _check_keys(obj)
    if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
        flat = all(not isinstance(v, (dict, list, tuple)) for v in obj.values())
        tree = nest_dotted(obj) if flat else obj
    else:
        tree = obj
    skipped: dict[str, str] = {}
    if "equinox" in sys.modules:
        from diffract.extract._jax import drop_equinox_state

        tree, skipped = drop_equinox_state(tree)
    if _looks_like_flax_params(tree):
        from diffract.extract._jax import split_linen_variables

        tree, linen_skipped = split_linen_variables(tree)
        return ModelTree(
            tree=tree,
            framework="flax.linen",
            kernel_layout="in_out",
            skipped={**skipped, **linen_skipped},
        )
    return ModelTree(tree=tree, framework="numpy", skipped=skipped)


EXTRACTORS = [Extractor("pytree", _is_container, _extract)]
