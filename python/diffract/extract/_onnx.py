"""ONNX: the initializers of a ``ModelProto`` (or a ``.onnx`` path), typed by the operator
that consumes them (Gemm/MatMul -> dense, Conv -> conv, Gather -> embedding, *Normalization
-> norm; a 1-D input 2 of Gemm/Conv/*Normalization -> bias)."""

from __future__ import annotations

import os
import sys
from typing import Any

from .._errors import ExtractionError
from .._params import ParameterType
from . import Extractor, ModelTree, nest_dotted

_OP_TYPES = {
    "Gemm": ParameterType.DENSE,
    "MatMul": ParameterType.DENSE,
    "Conv": ParameterType.CONV,
    "ConvTranspose": ParameterType.CONV,
    "Gather": ParameterType.EMBEDDING,
    "LayerNormalization": ParameterType.NORM,
    "BatchNormalization": ParameterType.NORM,
    "InstanceNormalization": ParameterType.NORM,
    "GroupNormalization": ParameterType.NORM,
    "RMSNormalization": ParameterType.NORM,
}


#: operators whose input 2, when 1-D, is a bias (Gemm C, Conv B, LayerNormalization B, ...)
_BIAS_AT_2 = (
    "Gemm",
    "Conv",
    "ConvTranspose",
    "LayerNormalization",
    "BatchNormalization",
    "InstanceNormalization",
    "GroupNormalization",
)


def _is_onnx(obj: Any) -> bool:
    onnx = sys.modules.get("onnx")
    return onnx is not None and isinstance(obj, onnx.ModelProto)


def from_model_proto(model: Any, source: str = "ModelProto") -> ModelTree:
    from onnx import numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    types: dict[str, ParameterType] = {}
    for node in graph.node:
        for pos, name in enumerate(node.input):
            if name not in inits or name in types:
                continue
            t = _OP_TYPES.get(node.op_type)
            if t is None:
                continue
            ndim = len(inits[name].dims)
            if ndim == 1 and pos == 2 and node.op_type in _BIAS_AT_2:
                t = ParameterType.BIAS
            types[name] = t
    flat = {name: numpy_helper.to_array(t) for name, t in inits.items()}
    tree = nest_dotted(flat)
    return ModelTree(tree=tree, types=types, framework="onnx", source=source)


def load_onnx_file(path: str | os.PathLike[str]) -> ModelTree:
    import onnx

    try:
        model = onnx.load(os.fspath(path))
    except Exception as exc:  # onnx raises DecodeError and friends
        raise ExtractionError(f"{os.fspath(path)}: not a readable ONNX model ({exc})") from None
    return from_model_proto(model, source=os.fspath(path))


EXTRACTORS = [Extractor("onnx", _is_onnx, from_model_proto)]
