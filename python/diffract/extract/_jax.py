"""JAX family: Equinox modules, Flax NNX modules, Flax Linen params (FrozenDict or dict).

Types come from the class of the nearest enclosing layer (Linear -> dense, Embed(ding) ->
embedding, Conv -> conv, *Norm -> norm; leaves named ``bias`` -> bias).
"""

from __future__ import annotations

import sys
from typing import Any

from .._params import ParameterType
from .._tree import dotted_name, tree_leaves_with_path
from . import Extractor, ModelTree


def _class_type(obj: Any) -> ParameterType | None:
    name = type(obj).__name__.lower()
    if "embed" in name:
        return ParameterType.EMBEDDING
    if "conv" in name:
        return ParameterType.CONV
    if "norm" in name:
        return ParameterType.NORM
    if name in ("linear", "lineargeneral", "einsum", "dense", "densegeneral", "mlp"):
        return ParameterType.DENSE
    return None


def _leaf_type(owner_cls_type: ParameterType | None, leaf_name: str) -> ParameterType | None:
    if leaf_name == "bias":
        return ParameterType.BIAS
    return owner_cls_type


# --- Equinox -----------------------------------------------------------------------------


def _is_equinox(obj: Any) -> bool:
    eqx = sys.modules.get("equinox")
    return eqx is not None and isinstance(obj, eqx.Module)


def _child(obj: Any, key: str) -> Any:
    if isinstance(obj, (list, tuple)):
        return obj[int(key)]
    if isinstance(obj, dict):
        return obj[key] if key in obj else obj[int(key)]
    return getattr(obj, key)


def _from_equinox(model: Any) -> ModelTree:
    eqx = sys.modules["equinox"]
    types: dict[str, ParameterType] = {}
    for path, _leaf in tree_leaves_with_path(model):
        owner_type = _class_type(model)
        obj = model
        try:
            for key in path[:-1]:
                obj = _child(obj, key)
                if isinstance(obj, eqx.Module):
                    owner_type = _class_type(obj) or owner_type
        except (AttributeError, IndexError, KeyError, ValueError):
            continue
        t = _leaf_type(owner_type, path[-1]) if path else None
        if t is not None:
            types[dotted_name(path)] = t
    return ModelTree(tree=model, types=types, framework="equinox", source=type(model).__qualname__)


# --- Flax NNX ----------------------------------------------------------------------------


def _is_nnx(obj: Any) -> bool:
    flax = sys.modules.get("flax.nnx")
    return flax is not None and isinstance(obj, flax.Module)


def _from_nnx(model: Any) -> ModelTree:
    nnx = sys.modules["flax.nnx"]
    state = nnx.state(model, nnx.Param)
    tree = nnx.to_pure_dict(state) if hasattr(nnx, "to_pure_dict") else state.to_pure_dict()
    module_types = {
        tuple(str(p) for p in path): _class_type(mod) for path, mod in nnx.iter_modules(model)
    }
    types: dict[str, ParameterType] = {}
    for path, _leaf in tree_leaves_with_path(tree):
        owner = None
        for cut in range(len(path) - 1, -1, -1):
            owner = module_types.get(tuple(path[:cut]))
            if owner is not None:
                break
        t = _leaf_type(owner, path[-1])
        if t is not None:
            types[dotted_name(path)] = t
    return ModelTree(tree=tree, types=types, framework="flax.nnx", source=type(model).__qualname__)


# --- Flax Linen params -------------------------------------------------------------------


def _is_frozen_dict(obj: Any) -> bool:
    core = sys.modules.get("flax.core")
    return core is not None and isinstance(obj, core.FrozenDict)


def _from_frozen(params: Any) -> ModelTree:
    core = sys.modules["flax.core"]
    return ModelTree(tree=core.unfreeze(params), framework="flax.linen", source="FrozenDict")


EXTRACTORS = [
    Extractor("equinox", _is_equinox, _from_equinox),
    Extractor("flax.nnx", _is_nnx, _from_nnx),
    Extractor("flax.linen", _is_frozen_dict, _from_frozen),
]
