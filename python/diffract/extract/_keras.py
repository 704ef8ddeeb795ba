"""Keras 3 (any backend) and tf.keras models: their weights, typed by layer class.

Weights are the model's parameters: variables created trainable (a frozen layer's weights
stay). Variables created non-trainable are state (BatchNormalization ``moving_mean`` /
``moving_variance``, Normalization statistics, seed-generator state): skipped with a reason.
"""

from __future__ import annotations

import sys
from typing import Any

from diffract._vocab.arrays import to_numpy
from diffract._vocab.slices import ParameterType
from diffract._vocab.tree import is_array
from diffract.extract import Extractor, ModelTree, nest_dotted
from diffract.extract._jax import class_type


def _is_keras(obj: Any) -> bool:
    for modname in ("keras", "tf_keras", "tensorflow"):
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        keras = getattr(mod, "keras", mod) if modname == "tensorflow" else mod
        layer = getattr(getattr(keras, "layers", None), "Layer", None)
        if layer is not None and isinstance(obj, layer):
            return True
    return False


def _weight_name(model: Any, weight: Any) -> str:
    path = getattr(weight, "path", None) or weight.name.split(":")[0]
    prefix = f"{model.name}/"
    if path.startswith(prefix):
        path = path[len(prefix) :]
    return path.replace("/", ".")


def _from_keras(model: Any) -> ModelTree:
    flat: dict[str, Any] = {}
    types: dict[str, ParameterType] = {}
    layers = list(model._flatten_layers()) if hasattr(model, "_flatten_layers") else [model]
    owner: dict[int, Any] = {}
    state: set[int] = set()  # variables created non-trainable: state, not parameters
    for layer in reversed(layers):  # innermost layer wins
        for w in getattr(layer, "weights", []):
            owner.setdefault(id(w), layer)
        created_state = getattr(layer, "_non_trainable_variables", None)
        if created_state is not None:  # Keras 3: kept when a layer is frozen later
            state.update(id(v) for v in created_state)
    keras3 = any(hasattr(layer, "_non_trainable_variables") for layer in layers)
    skipped: dict[str, str] = {}
    for w in model.weights:
        name = _weight_name(model, w)
        if id(w) in state if keras3 else getattr(w, "trainable", True) is False:
            leaf = name.rsplit(".", 1)[-1]
            skipped[name] = (
                "normalization running statistic (a non-trainable Keras variable), not a parameter"
                if leaf.startswith("moving_")
                else "non-trainable Keras variable (layer state), not a parameter"
            )
            continue
        value = getattr(w, "value", w)  # the backend array (JAX/torch/TF tensor)
        flat[name] = value if is_array(value) else to_numpy(value)
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("bias", "beta"):  # beta is a normalization layer's shift: a bias
            types[name] = ParameterType.BIAS
        elif leaf == "gamma":
            types[name] = ParameterType.NORM
        else:
            t = class_type(owner.get(id(w), model))
            if t is not None:
                types[name] = t
    return ModelTree(
        tree=nest_dotted(flat), types=types, framework="keras", source=model.name, skipped=skipped
    )


EXTRACTORS = [Extractor("keras", _is_keras, _from_keras)]
