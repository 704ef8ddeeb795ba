"""ONNX: the initializers of a ``ModelProto`` (or a ``.onnx`` path), typed by the operator
that consumes them (Gemm/MatMul -> dense, Conv -> conv, Gather -> embedding, *Normalization
-> norm; a 1-D input 2 of Gemm/Conv/*Normalization -> bias).

Layout comes from the consuming operator: ``MatMul(X, W)`` stores W (in, out) and so does
``Gemm`` with ``transB=0``: both are ``in_out``; ``Gemm`` with ``transB=1`` and Conv weights
are ``out_in``. BatchNormalization's running mean and variance (inputs 3 and 4) are state,
not parameters: skipped. A ``.onnx`` file is read whole (protobuf is not memory-mapped), so
its weights are always copied into the store."""

from __future__ import annotations

import os
import sys
from typing import Any

from diffract._errors import ExtractionError
from diffract._vocab.slices import ParameterType
from diffract.extract import Extractor, ModelTree, nest_dotted

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


def _attr(node: Any, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _layout(node: Any, pos: int, ndim: int) -> str | None:
    """The layout of the initializer at input ``pos`` of ``node`` (None: no opinion)."""
    if ndim != 2:
        return None
    if node.op_type == "MatMul":  # Y = X @ W: W is (in, out); Y = W @ X: W is (out, in)
        return "in_out" if pos == 1 else "out_in"
    if node.op_type == "Gemm":  # Y = op(A) @ op(B): B (in, out) unless transB=1
        if pos == 1:
            return "out_in" if _attr(node, "transB", 0) else "in_out"
        if pos == 0:
            return "in_out" if _attr(node, "transA", 0) else "out_in"
    return None


def _external_data_problem(t: Any, source: str) -> str | None:
    from onnx import TensorProto

    if t.data_location != TensorProto.EXTERNAL:
        return None
    where = {e.key: e.value for e in t.external_data}.get("location", "?")
    if source == "ModelProto":
        return (
            f"ONNX initializer {t.name!r} keeps its data in the external file {where!r}, which "
            "this ModelProto was loaded without (load_external_data=False): load it with "
            "onnx.load(path) (load_external_data=True, the default) or pass the .onnx file path"
        )
    return f"{source}: ONNX initializer {t.name!r}: its external data file {where!r} was not read"


def from_model_proto(model: Any, source: str = "ModelProto") -> ModelTree:
    from onnx import numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    for t in inits.values():
        problem = _external_data_problem(t, source)
        if problem:
            raise ExtractionError(problem)
    types: dict[str, ParameterType] = {}
    layouts: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for node in graph.node:
        for pos, name in enumerate(node.input):
            if name not in inits:
                continue
            ndim = len(inits[name].dims)
            if name not in layouts:
                layout = _layout(node, pos, ndim)
                if layout is not None:
                    layouts[name] = layout
            if name in types or name in skipped:
                continue
            if node.op_type == "BatchNormalization" and pos in (3, 4):
                skipped[name] = (
                    "normalization running statistic (BatchNormalization input "
                    f"{'mean' if pos == 3 else 'var'}), not a parameter"
                )
                continue
            t = _OP_TYPES.get(node.op_type)
            if t is None:
                continue
            if ndim == 1 and pos == 2 and node.op_type in _BIAS_AT_2:
                t = ParameterType.BIAS
            types[name] = t
    try:
        flat = {name: numpy_helper.to_array(t) for name, t in inits.items() if name not in skipped}
    except Exception as exc:  # a malformed tensor: name it
        raise ExtractionError(f"{source}: cannot read an ONNX initializer ({exc})") from None
    tree = nest_dotted(flat)
    return ModelTree(
        tree=tree,
        types=types,
        framework="onnx",
        source=source,
        skipped=skipped,
        layouts=layouts,
    )


def load_onnx_file(path: str | os.PathLike[str]) -> ModelTree:
    import onnx

    try:
        model = onnx.load(os.fspath(path))
    except Exception as exc:  # onnx raises DecodeError and friends
        raise ExtractionError(f"{os.fspath(path)}: not a readable ONNX model ({exc})") from None
    return from_model_proto(model, source=os.fspath(path))


EXTRACTORS = [Extractor("onnx", _is_onnx, from_model_proto)]
