"""JAX family: Equinox modules, Flax NNX modules, Flax Linen params (FrozenDict or dict) and
bound Flax Linen modules (``module.bind(variables)``).

Types come from the class of the nearest enclosing layer (Linear -> dense, Embed(ding) ->
embedding, Conv -> conv, *Norm -> norm, an RNN/LSTM/GRU layer or cell -> recurrent, also for
the Linear layers inside a Flax cell; leaves named ``bias`` or ``bias_*`` -> bias).

Weights are parameters; state is skipped with a reason: Equinox ``eqx.nn.StateIndex`` /
``eqx.nn.State`` leaves (BatchNorm running statistics), Flax NNX variables that are not
``nnx.Param`` (``BatchStat``, RNG state, caches), and the non-``params`` collections of a
Flax Linen variables dict (``batch_stats``, ``cache``, ...).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from diffract._vocab.slices import ParameterType
from diffract._vocab.tree import dotted_name, tree_leaves_with_path, tree_map
from diffract.extract import Extractor, ModelTree

#: class names of recurrent layers and cells (Flax ``LSTMCell``, ``OptimizedLSTMCell``,
#: ``GRUCell``, ``SimpleCell``, ``MGUCell``, ``RNN``; Keras ``LSTM``, ``GRU``, ``SimpleRNN`` and
#: their cells; Equinox ``LSTMCell``, ``GRUCell``)
_RECURRENT_CLASSES = re.compile(
    r"^(optimized)?(conv)?(lstm|gru|mgu|simplernn|rnn)(cell)?$|^simplecell$|^(lstm|gru|rnn)\w*cell$"
)


def is_recurrent_class(obj: Any) -> bool:
    """True for an RNN, LSTM or GRU layer or cell (by class name, any framework)."""
    return bool(_RECURRENT_CLASSES.match(type(obj).__name__.lower()))


def class_type(obj: Any) -> ParameterType | None:
    name = type(obj).__name__.lower()
    if is_recurrent_class(obj):
        return ParameterType.RECURRENT
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
    if leaf_name == "bias" or str(leaf_name).startswith("bias_"):
        return ParameterType.BIAS
    return owner_cls_type


def _typed_tree(
    model: Any,
    framework: str,
    tree: Any,
    owners: list[tuple[tuple[Any, ...], ParameterType | None]],
    skipped: dict[str, str],
) -> ModelTree:
    """The model's tree; a leaf's type is its owner module's (a ``bias`` is a bias), from
    ``owners``: (leaf path, owner type) pairs."""
    types: dict[str, ParameterType] = {}
    for path, owner in owners:
        t = _leaf_type(owner, path[-1]) if path else None
        if t is not None:
            types[dotted_name(path)] = t
    return ModelTree(
        tree=tree,
        types=types,
        framework=framework,
        source=type(model).__qualname__,
        skipped=skipped,
    )


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


EQUINOX_STATE_REASON = (
    "Equinox state (eqx.nn.StateIndex / eqx.nn.State: e.g. BatchNorm running statistics), "
    "not a parameter"
)


def drop_equinox_state(tree: Any) -> tuple[Any, dict[str, str]]:
    """``tree`` with its ``eqx.nn.StateIndex`` and ``eqx.nn.State`` nodes replaced by None,
    and the dotted names of their leaves -> reason."""
    eqx = sys.modules.get("equinox")
    nn = getattr(eqx, "nn", None) if eqx is not None else None
    kinds = tuple(
        k for k in (getattr(nn, "StateIndex", None), getattr(nn, "State", None)) if k is not None
    )
    if not kinds:
        return tree, {}

    def is_state(x: Any) -> bool:
        return isinstance(x, kinds)

    skipped: dict[str, str] = {}
    for path, node in tree_leaves_with_path(tree, is_leaf=is_state):
        if is_state(node):
            inner = tree_leaves_with_path(node)
            for sub, _leaf in inner:
                skipped[dotted_name((*path, *sub))] = EQUINOX_STATE_REASON
            if not inner:
                skipped[dotted_name(path)] = EQUINOX_STATE_REASON
    if not skipped:
        return tree, {}
    return tree_map(lambda x: None if is_state(x) else x, tree, is_leaf=is_state), skipped


def _from_equinox(model: Any) -> ModelTree:
    eqx = sys.modules["equinox"]
    owners: list[tuple[tuple[Any, ...], ParameterType | None]] = []
    for path, _leaf in tree_leaves_with_path(model):
        owner_type = class_type(model)
        obj = model
        try:
            for key in path[:-1]:
                obj = _child(obj, key)
                if isinstance(obj, eqx.Module) and owner_type is not ParameterType.RECURRENT:
                    owner_type = class_type(obj) or owner_type  # inside a cell: recurrent
        except (AttributeError, IndexError, KeyError, ValueError):
            continue
        owners.append((path, owner_type))
    tree, skipped = drop_equinox_state(model)
    return _typed_tree(model, "equinox", tree, owners, skipped)


# --- Flax NNX ----------------------------------------------------------------------------


def _is_nnx(obj: Any) -> bool:
    flax = sys.modules.get("flax.nnx")
    return flax is not None and isinstance(obj, flax.Module)


def _from_nnx(model: Any) -> ModelTree:
    nnx = sys.modules["flax.nnx"]
    state = nnx.state(model, nnx.Param)
    tree = nnx.to_pure_dict(state) if hasattr(nnx, "to_pure_dict") else state.to_pure_dict()
    module_types = {
        tuple(str(p) for p in path): class_type(mod) for path, mod in nnx.iter_modules(model)
    }
    owners: list[tuple[tuple[Any, ...], ParameterType | None]] = []
    for path, _leaf in tree_leaves_with_path(tree):
        owner = None
        for cut in range(len(path) - 1, -1, -1):
            owner = module_types.get(tuple(path[:cut]))
            if owner is not None:
                break
        if any(  # the Linear layers inside a recurrent cell are the cell's recurrent weights
            module_types.get(tuple(path[:cut])) is ParameterType.RECURRENT
            for cut in range(len(path) - 1)
        ):
            owner = ParameterType.RECURRENT
        owners.append((path, owner))
    skipped: dict[str, str] = {}
    other = nnx.state(model, nnx.Not(nnx.Param))
    flat_other = nnx.to_flat_state(other) if hasattr(nnx, "to_flat_state") else other.flat_state()
    for path, var in flat_other:
        kind = type(var).__name__
        name = dotted_name(tuple(str(p) for p in path))
        if isinstance(var, getattr(nnx, "BatchStat", ())):
            skipped[name] = f"normalization running statistic (nnx.{kind}), not a parameter"
        else:
            skipped[name] = f"Flax NNX state (nnx.{kind}), not a parameter (nnx.Param)"
    return _typed_tree(model, "flax.nnx", tree, owners, skipped)


# --- Flax Linen params -------------------------------------------------------------------


def _is_frozen_dict(obj: Any) -> bool:
    core = sys.modules.get("flax.core")
    return core is not None and isinstance(obj, core.FrozenDict)


def split_linen_variables(tree: Any) -> tuple[Any, dict[str, str]]:
    """A Flax Linen variables dict ``{"params": ..., "batch_stats": ..., ...}`` keeps only
    its ``params`` collection (names keep the ``params.`` prefix); the leaves of every other
    collection are skipped with a reason. Any other tree is returned as it is."""
    if not (
        isinstance(tree, dict)
        and isinstance(tree.get("params"), dict)
        and len(tree) > 1
        and all(isinstance(k, str) for k in tree)
    ):
        return tree, {}
    kept = {"params": tree["params"]}
    skipped: dict[str, str] = {}
    for key, value in tree.items():
        if key == "params":
            continue
        reason = (
            "normalization running statistic (Flax Linen collection 'batch_stats'), not a parameter"
            if key == "batch_stats"
            else f"Flax Linen collection {key!r} (state, not 'params')"
        )
        inner = tree_leaves_with_path(value)
        for path, _leaf in inner:
            skipped[dotted_name((key, *path))] = reason
        if not inner:
            skipped[key] = reason
    return kept, skipped


def _from_frozen(params: Any) -> ModelTree:
    core = sys.modules["flax.core"]
    tree, skipped = split_linen_variables(core.unfreeze(params))
    return ModelTree(tree=tree, framework="flax.linen", source="FrozenDict", skipped=skipped)


def _is_linen_module(obj: Any) -> bool:
    linen = sys.modules.get("flax.linen")
    return linen is not None and isinstance(obj, linen.Module)


def _from_linen_module(module: Any) -> ModelTree:
    """A bound Linen module (``module.bind(variables)``): its ``params`` collection, named as
    in ``variables["params"]`` (as Diffract names them); every other collection is skipped
    with a reason. An unbound module holds no weights: an error says what to pass."""
    from diffract._errors import ExtractionError

    if getattr(module, "scope", None) is None:
        raise ExtractionError(
            f"a Flax Linen module ({type(module).__qualname__}) that is not bound holds no "
            "weights: pass module.bind(variables), or the variables dict itself"
        )
    core = sys.modules["flax.core"]
    variables = core.unfreeze(module.variables)
    params = variables.get("params")
    if not isinstance(params, dict):
        raise ExtractionError(
            f"the bound Flax Linen module ({type(module).__qualname__}) has no 'params' "
            f"collection (it has {sorted(variables)})"
        )
    _, skipped = split_linen_variables({**variables, "params": params})
    return ModelTree(
        tree=params, framework="flax.linen", source=type(module).__qualname__, skipped=skipped
    )


EXTRACTORS = [
    Extractor("equinox", _is_equinox, _from_equinox),
    Extractor("flax.nnx", _is_nnx, _from_nnx),
    Extractor("flax.linen", _is_frozen_dict, _from_frozen),
    Extractor("flax.linen.Module", _is_linen_module, _from_linen_module),
]
