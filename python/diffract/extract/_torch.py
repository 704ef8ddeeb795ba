"""PyTorch: an ``nn.Module`` (types from module classes) or a ``state_dict``."""

from __future__ import annotations

import sys
from typing import Any

from .._params import ParameterType
from . import Extractor, ModelTree, nest_dotted


def _torch():
    return sys.modules.get("torch")


def _module_type(module: Any, pname: str) -> ParameterType | None:
    torch = _torch()
    nn = torch.nn
    if pname == "bias" or pname.endswith("_bias"):
        return ParameterType.BIAS
    if isinstance(module, nn.Embedding | nn.EmbeddingBag):
        return ParameterType.EMBEDDING
    if isinstance(module, nn.modules.conv._ConvNd):
        return ParameterType.CONV
    norm_types = [nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase]
    if hasattr(nn, "RMSNorm"):
        norm_types.append(nn.RMSNorm)
    if isinstance(module, tuple(norm_types)):
        return ParameterType.NORM
    if isinstance(module, nn.Linear | nn.Bilinear):
        return ParameterType.DENSE
    if isinstance(module, nn.MultiheadAttention):
        return ParameterType.from_string("attention")
    if "norm" in type(module).__name__.lower():  # e.g. a model's own RMSNorm class
        return ParameterType.NORM
    return None


def _is_module(obj: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(obj, torch.nn.Module)


def _is_state_dict(obj: Any) -> bool:
    torch = _torch()
    return (
        torch is not None
        and isinstance(obj, dict)
        and bool(obj)
        and all(isinstance(k, str) for k in obj)
        and any(isinstance(v, torch.Tensor) for v in obj.values())
        and all(isinstance(v, torch.Tensor | int | float) or v is None for v in obj.values())
    )


def _from_module(module: Any) -> ModelTree:
    types: dict[str, ParameterType] = {}
    for mname, sub in module.named_modules():
        for pname, _ in sub.named_parameters(recurse=False):
            t = _module_type(sub, pname)
            if t is not None:
                types[f"{mname}.{pname}" if mname else pname] = t
    state = module.state_dict(keep_vars=False)
    return ModelTree(
        tree=nest_dotted(dict(state)),
        types=types,
        framework="torch",
        source=type(module).__qualname__,
    )


def _from_state_dict(state: dict) -> ModelTree:
    return ModelTree(tree=nest_dotted(dict(state)), framework="torch", source="state_dict")


EXTRACTORS = [
    Extractor("torch.nn.Module", _is_module, _from_module),
    Extractor("torch.state_dict", _is_state_dict, _from_state_dict),
]
