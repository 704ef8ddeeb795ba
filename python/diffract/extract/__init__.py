"""Model objects and checkpoint files -> pytree -> named weight slices.

An *extractor* turns one kind of model into a :class:`ModelTree`: a pytree of array leaves
plus the types it knows from module classes. Extraction then is Equinox's
``partition(tree, filter_spec)``: the kept leaves, flattened with their key paths, become
dotted names. Extractors for a framework only activate when the user has already imported
that framework (checked in ``sys.modules``), so ``import diffract`` imports none.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from diffract._core.arrays import dtype_name, shape_of
from diffract._core.slices import ParameterType, infer_type
from diffract._core.tree import (
    dotted_name,
    is_array,
    is_inexact_array,
    partition,
    tree_leaves_with_path,
)
from diffract._errors import ExtractionError


@dataclass
class ModelTree:
    """What an extractor returns: the pytree, known slice types, and provenance.

    Attributes:
        tree: the pytree of array leaves.
        types: dotted name -> :class:`~diffract.ParameterType` known from module classes
            (other leaves get a type from their name and shape).
        framework: the framework it came from (``"torch"``, ``"flax.nnx"``, ``"numpy"``...).
        source: a file path or a description of the object.
        file_backed: True when leaves read from a file that stays on disk.
        kernel_layout: ``"in_out"`` when ``kernel`` leaves follow the Flax/Keras layout.
        skipped: leaves left out on purpose, with the reason (tied aliases, buffers, running
            statistics, optimizer state...).
        layouts: per-leaf layout (dotted name -> ``"in_out"`` / ``"out_in"``), over the
            name-based rule.
        lora: the LoRA pairs found (:class:`diffract.extract.lora.LoraPair`), made slices
            by :func:`extract` as its ``lora`` options say.
        meta: per-leaf facts kept in the slice's meta.
        order: the leaves' names in model order, where the extractor knows it.
    """

    tree: Any
    types: dict[str, ParameterType] = field(default_factory=dict)
    framework: str = "numpy"
    source: str = ""
    #: True when leaves read from a file that stays on disk (weights need not be copied)
    file_backed: bool = False
    #: "in_out" when ``kernel`` / ``*_kernel`` leaves follow the Flax/Keras layout
    kernel_layout: str = "out_in"
    #: leaves the extractor left out of ``tree`` on purpose, with the reason (aliases of a
    #: tied parameter, buffers, running statistics, optimizer state...)
    skipped: dict[str, str] = field(default_factory=dict)
    #: per-leaf layout (dotted name -> "in_out"/"out_in"), over the name-based rule
    layouts: dict[str, str] = field(default_factory=dict)
    #: LoRA pairs found (:class:`diffract.extract.lora.LoraPair`): :func:`extract` makes
    #: them slices as its ``lora`` options say
    lora: list[Any] = field(default_factory=list)
    #: per-leaf facts kept in the slice's meta (dotted name -> JSON-ready dict)
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the leaves' names in model order (a module's own order), where the extractor knows
    #: it; ``intra`` pairs consecutive layers in this order (else natural name order)
    order: list[str] = field(default_factory=list)
    #: model-level architecture facts (a Hugging Face ``config.json``'s heads, KV heads,
    #: head_dim, tied embeddings; a GGUF's metadata): :func:`diffract.extract.hf.read_config`
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExtractedLeaf:
    """One kept leaf: its name, array, shape, dtype, type, layout and meta."""

    name: str
    array: Any
    shape: tuple[int, ...]
    dtype: str
    type: ParameterType
    layout: str = "out_in"
    #: facts the slice's meta keeps (LoRA rank and scaling, the base of a delta, ...)
    meta: dict[str, Any] = field(default_factory=dict)


#: frameworks whose ``kernel`` leaves are stored (in, out) / (*kernel, in, out)
IN_OUT_FRAMEWORKS = ("flax.linen", "flax.nnx", "keras")

#: leaf names Flax/Keras store (in, out) / (*kernel, in, out): ``kernel`` and ``*_kernel``
#: (Keras ``recurrent_kernel`` of LSTM/GRU/SimpleRNN, ``depthwise_kernel``,
#: ``pointwise_kernel`` of separable convolutions)
_KERNEL_LEAF = re.compile(r"(?:^|_)kernel$")


def is_kernel_leaf(leaf_name: str) -> bool:
    """True for the leaf names stored (in, out) by Flax and Keras.

    Args:
        leaf_name: the last component of a leaf's key path.

    Returns:
        Whether it is ``kernel`` or ends in ``_kernel``.
    """
    return bool(_KERNEL_LEAF.search(str(leaf_name)))


@dataclass
class Extracted:
    """The result of :func:`extract`: the kept leaves and what was left out.

    Attributes:
        leaves: the named leaves, in natural name order.
        skipped: dotted name -> why the leaf is not a weight slice.
        framework: the framework the model came from.
        source: a file path or a description of the object.
        file_backed: True when leaves read from a file that stays on disk.
        config: model-level architecture facts (:attr:`ModelTree.config`).
    """

    leaves: list[ExtractedLeaf]
    skipped: dict[str, str]
    framework: str
    source: str
    file_backed: bool
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Extractor:
    """A named rule: ``applies(obj)`` is cheap; ``extract(obj)`` builds the ModelTree.

    Attributes:
        name: the extractor's name (also the ``framework`` of what it extracts).
        applies: whether this extractor handles an object.
        extract: the object's :class:`ModelTree`.
    """

    name: str
    applies: Callable[[Any], bool]
    extract: Callable[[Any], ModelTree]


_USER: list[Extractor] = []


def register_extractor(
    name: str, applies: Callable[[Any], bool], extract: Callable[[Any], ModelTree | Any]
) -> Extractor:
    """Register a custom extractor; it is tried before the built-in ones.

    Registering a name again replaces the earlier extractor of that name.

    Args:
        name: the extractor's name.
        applies: ``applies(obj) -> bool``, cheap; an exception counts as False.
        extract: ``extract(obj)``, returning a :class:`ModelTree` or any pytree of arrays.

    Returns:
        The registered extractor.

    Raises:
        TypeError: ``applies`` or ``extract`` is not callable.
    """
    if not callable(applies) or not callable(extract):
        raise TypeError(
            "register_extractor(name, applies, extract): applies and extract must be callables"
        )

    def wrapped(obj: Any) -> ModelTree:
        out = extract(obj)
        return out if isinstance(out, ModelTree) else ModelTree(tree=out, framework=name)

    ex = Extractor(name, applies, wrapped)
    _USER[:] = [e for e in _USER if e.name != name]
    _USER.insert(0, ex)
    return ex


def unregister_extractor(name: str) -> None:
    """Remove the custom extractor named ``name`` (nothing happens if there is none).

    Args:
        name: the name it was registered under.
    """
    _USER[:] = [e for e in _USER if e.name != name]


def _builtin() -> list[Extractor]:
    from diffract.extract import _files, _jax, _keras, _numpy, _onnx, _torch, lora

    return [
        *lora.EXTRACTORS,  # PEFT adapters: before the file and torch extractors
        *_files.EXTRACTORS,
        *_torch.EXTRACTORS,
        *_jax.EXTRACTORS,
        *_keras.EXTRACTORS,
        *_onnx.EXTRACTORS,
        *_numpy.EXTRACTORS,
    ]


def checkpoint_suffixes() -> tuple[str, ...]:
    """The suffixes of the checkpoint files ``models.add`` reads (``.safetensors``, ...), from
    the one table of checkpoint formats (:data:`diffract.extract._files.FORMATS`)."""
    from diffract.extract._files import SUFFIXES

    return SUFFIXES


def extractors() -> list[Extractor]:
    """The extractors in the order they are tried.

    Returns:
        The user extractors (newest first), then the built-in ones.
    """
    return [*_USER, *_builtin()]


def model_tree(model: Any) -> ModelTree:
    """The :class:`ModelTree` of ``model`` from the first extractor that applies.

    Args:
        model: a model object, state dict, pytree of arrays or checkpoint path.

    Returns:
        Its model tree.

    Raises:
        ExtractionError: no extractor applies; the message lists what is supported.
    """
    for ex in extractors():
        try:
            ok = ex.applies(model)
        except Exception:  # a probing error means "not mine"
            ok = False
        if ok:
            return ex.extract(model)
    if isinstance(model, (str, os.PathLike)):
        from diffract.extract._files import formats_text

        raise ExtractionError(
            f"cannot read {os.fspath(model)!r}: supported checkpoint files are "
            f"{formats_text()}, and Hugging Face repo ids in the local cache"
        )
    raise ExtractionError(
        f"cannot extract weights from an object of type {type(model).__module__}.{type(model).__qualname__}: "
        "pass a dict of arrays, a PyTorch nn.Module or state_dict, a Flax params dict or NNX module, "
        "an Equinox module, a Keras model, an ONNX ModelProto, a checkpoint path, or register an "
        "extractor with diffract.register_extractor(name, applies, extract)"
    )


#: dtype-name prefixes of real numeric weights: bool, ints, floats (bf16 and fp8 included)
_WEIGHT_DTYPE_PREFIXES = ("bool", "int", "uint", "float", "bfloat", "half", "double")


def is_weight_dtype(dtype: str) -> bool:
    """True for the dtypes a weight slice may have.

    Bool, (unsigned) integers and real floating point (float16/32/64, bfloat16, float8
    variants). Complex, object, string, bytes, datetime/timedelta, void and structured dtypes
    are not weights.

    Args:
        dtype: a dtype name (NumPy's, or PyTorch's with or without ``torch.``).

    Returns:
        Whether a slice may have this dtype.
    """
    name = dtype.replace("torch.", "").strip()
    try:
        kind = np.dtype(name).kind
    except (TypeError, ValueError):
        kind = None
    if kind is not None and kind != "V":  # ml_dtypes' bfloat16/fp8 are kind "V": by name
        return kind in "biuf"
    return name.startswith(_WEIGHT_DTYPE_PREFIXES)


def _dtype_problem(name: str, dtype: str) -> str:
    if dtype.replace("torch.", "").startswith("complex"):
        why = (
            "complex weights are not supported: every field would silently drop the "
            "imaginary part. Store real and imaginary parts as two leaves "
            "(np.real / np.imag) or the magnitude (np.abs)"
        )
    else:
        why = (
            "only bool, integer and real floating-point arrays (bf16/fp8 included) are "
            "weights. Convert it, or drop it with filter_spec"
        )
    return f"leaf {name!r} has dtype {dtype}, which is not a numeric weight dtype: {why}"


def _is_masked(leaf: Any) -> bool:
    # a masked array exists only once numpy.ma is imported: no import of it here (numpy
    # loads it lazily, ~30 ms of a process's first extraction)
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(leaf, ma.MaskedArray)


_MASKED = (
    "a masked array (numpy.ma): its mask would be ignored and the masked-out values analyzed "
    "as weights. Pass a.filled(value) for chosen values, or np.asarray(a) if the mask does "
    "not matter"
)


def default_filter_spec(leaf: Any) -> bool:
    """The default extraction predicate: real floating arrays with ndim >= 1 and data.

    Complex arrays (every field would drop the imaginary part), empty arrays (no values) and
    NumPy masked arrays (the mask would be ignored) are left out: :func:`extract` records
    each in ``skipped`` with its reason, and the rest of the model is read.

    Args:
        leaf: a pytree leaf.

    Returns:
        Whether :func:`extract` keeps the leaf by default.
    """
    if not is_inexact_array(leaf) or _is_masked(leaf):
        return False
    shape = shape_of(leaf)
    return len(shape) >= 1 and 0 not in shape and is_weight_dtype(dtype_name(leaf))


_NUM = re.compile(r"(\d+)")


def natural_key(name: str, *, fold_case: bool = False) -> tuple[int | str, ...]:
    """Sort key that orders ``layer.2`` before ``layer.10``: the one natural order of names
    (extraction, ``describe``, head grids and the filter builder's preview all sort by it).

    Args:
        name: a dotted name, model id or any text.
        fold_case: compare the text parts case-insensitively (the filter builder's columns).

    Returns:
        The name split into text and integer parts (text first, then alternating), so any
        two keys compare.
    """
    parts = _NUM.split(name.lower() if fold_case else name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def extract(
    model: Any,
    filter_spec: Any = None,
    *,
    lora: str = "update",
    lora_scaling: str = "peft",
    base_model: Any = None,
    intra: bool = False,
    pool: bool = True,
    heads: Any = None,
) -> Extracted:
    """Named weight slices of ``model``: ``partition(tree, filter_spec)`` keeps leaves.

    Args:
        model: a model object, state dict, pytree of arrays or checkpoint path.
        filter_spec: a predicate ``leaf -> bool``, a bool, or a prefix tree of them (as for
            :func:`~diffract.partition`); default: inexact arrays with ``ndim >= 1``.
        lora: LoRA adapters as their update ``<layer>.lora`` (``"update"``, default) or
            merged into the base weight, ``<layer>.weight`` = W + B @ A (``"merged"``).
        lora_scaling: ``"peft"`` (default) scales B @ A as PEFT does (alpha / r, rsLoRA
            alpha / sqrt(r)); ``"none"`` keeps the plain product (WeightWatcher's ``peft``).
        base_model: a model (anything ``extract`` reads, or an :class:`Extracted`) whose
            weights are subtracted: each
            slice with a same-named base slice becomes W - W_base
            (:mod:`diffract.extract.delta`).
        intra: also the products of consecutive chained dense layers (WeightWatcher's
            ``intra``; :func:`diffract.extract.derived.intra_slices`), consecutive in the
            module's order for PyTorch, else in natural name order.
        pool: False adds one slice per kernel position of every convolution (WeightWatcher's
            ``pool=False``; :func:`diffract.extract.derived.kernel_position_slices`).
        heads: also per-head attention slices and QK/OV circuits
            (:mod:`diffract.extract.heads`): True (the model's config), a ``HeadConfig``,
            or a config (``PretrainedConfig``, dict, ``config.json`` path).

    Returns:
        The kept leaves with their names, types and layouts, and the skipped ones with reasons.

    Raises:
        ExtractionError: no extractor applies, ``filter_spec`` does not fit the pytree, a kept
            leaf cannot be a weight slice, a bad LoRA pair or option, or a ``base_model``
            with no matching slice or another shape for one.
    """
    from diffract.extract import derived, lora as lora_mod

    lora_mod.check_lora_options(lora, lora_scaling)
    mt = _with_lora(model_tree(model), lora, lora_scaling)
    leaves, skipped = kept_leaves(mt, filter_spec)
    if base_model is not None:
        from diffract.extract.delta import subtract_base

        base = (
            base_model
            if isinstance(base_model, Extracted)
            else extract(base_model, lora=lora, lora_scaling=lora_scaling)
        )
        leaves, not_in_base = subtract_base(leaves, base)
        skipped.update(not_in_base)
    extra = derived.intra_slices(_model_order(leaves, mt.order)) if intra else []
    if not pool:
        extra += derived.kernel_position_slices(leaves)
    if heads is not None and heads is not False:
        from diffract.extract import heads as heads_mod

        cfg = heads_mod.resolve_head_config(heads, model, mt.source)
        extra += heads_mod.head_slices(leaves, cfg) if cfg is not None else []
    leaves += extra
    names = [leaf.name for leaf in leaves]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ExtractionError(f"two leaves flatten to the same dotted name(s) {dup[:5]}")
    leaves.sort(key=lambda leaf: natural_key(leaf.name))
    computed = base_model is not None or bool(extra)
    return Extracted(
        leaves, skipped, mt.framework, mt.source, mt.file_backed and not computed, dict(mt.config)
    )


def _model_order(leaves: list[ExtractedLeaf], order: list[str]) -> list[ExtractedLeaf]:
    """``leaves`` in model order: the extractor's ``order``, then natural name order."""
    rank = {name: i for i, name in enumerate(order)}
    return sorted(leaves, key=lambda leaf: (rank.get(leaf.name, len(rank)), natural_key(leaf.name)))


def _with_lora(mt: ModelTree, lora: str, lora_scaling: str) -> ModelTree:
    """``mt`` with its LoRA pairs made slices (:func:`diffract.extract.lora.resolve`)."""
    if not mt.lora:
        return mt
    from diffract.extract.lora import resolve

    flat = {dotted_name(p): leaf for p, leaf in tree_leaves_with_path(mt.tree)}
    leaves, meta = resolve(flat, mt.lora, lora, lora_scaling)
    types = dict(mt.types)
    if lora == "update":
        types.update(dict.fromkeys(meta, ParameterType.DENSE))
    return replace(mt, tree=nest_dotted(leaves), types=types, meta={**mt.meta, **meta}, lora=[])


def kept_leaves(mt: ModelTree, filter_spec: Any) -> tuple[list[ExtractedLeaf], dict[str, str]]:
    """The leaves ``filter_spec`` keeps (in tree order), and the dropped ones with reasons."""
    spec = default_filter_spec if filter_spec is None else filter_spec
    try:
        kept, dropped = partition(mt.tree, spec)
    except ValueError as exc:
        raise ExtractionError(
            f"filter_spec does not fit the model's pytree ({exc}); pass a predicate Leaf -> bool, "
            "a bool, or a prefix tree of bools/predicates with the model's structure"
        ) from None
    skipped: dict[str, str] = dict(mt.skipped)
    for path, leaf in tree_leaves_with_path(dropped):
        if leaf is not None:
            name = dotted_name(path)
            skipped[name] = _drop_reason(name, leaf)
    leaves: list[ExtractedLeaf] = []
    for path, leaf in tree_leaves_with_path(kept):
        if leaf is not None:
            leaves.append(_kept_leaf(mt, path, leaf))
    return leaves, skipped


def _drop_reason(name: str, leaf: Any) -> str:
    if not is_array(leaf):
        return f"not an array ({type(leaf).__name__})"
    if _is_masked(leaf):
        return _MASKED
    dtype = dtype_name(leaf)
    if is_inexact_array(leaf) and not is_weight_dtype(dtype):
        return _dtype_problem(name, dtype)  # complex
    if not is_inexact_array(leaf):
        return f"not a floating-point array (dtype {dtype})"
    shape = shape_of(leaf)
    if len(shape) == 0:
        return "0-d (a scalar)"
    if 0 in shape:
        return f"empty (shape {tuple(shape)}): no values to analyze"
    return "excluded by filter_spec"


def _kept_leaf(mt: ModelTree, path: Any, leaf: Any) -> ExtractedLeaf:
    """One kept leaf, checked to be a weight slice."""
    name = dotted_name(path)
    if not name:
        raise ExtractionError(
            "the model is a single bare array; wrap it in a dict: {'weight': array}"
        )
    if not is_array(leaf):
        raise ExtractionError(
            f"leaf {name!r} is kept by filter_spec but is not an array ({type(leaf).__name__}); "
            "filter_spec must keep array leaves only"
        )
    if _is_masked(leaf):
        raise ExtractionError(f"leaf {name!r} is kept by filter_spec but is {_MASKED}")
    dtype = dtype_name(leaf)
    if not is_weight_dtype(dtype):
        raise ExtractionError(_dtype_problem(name, dtype))
    shape = shape_of(leaf)
    if len(shape) == 0:
        raise ExtractionError(
            f"leaf {name!r} is 0-d (a scalar); weight slices need ndim >= 1. "
            "Drop it with filter_spec (the default keeps floating arrays with ndim >= 1)"
        )
    if 0 in shape:
        raise ExtractionError(f"leaf {name!r} is empty (shape {shape}); weight slices need data")
    ptype = mt.types.get(name) or infer_type(name, shape)
    layout = mt.layouts.get(name)
    if layout is None:
        in_out = is_kernel_leaf(path[-1]) and (
            mt.framework in IN_OUT_FRAMEWORKS or mt.kernel_layout == "in_out"
        )
        layout = "in_out" if in_out else "out_in"
    return ExtractedLeaf(name, leaf, shape, dtype, ptype, layout, dict(mt.meta.get(name, {})))


def nest_dotted(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b.c": x}`` -> ``{"a": {"b": {"c": x}}}``.

    Falls back to the flat dict when a name is both a leaf and a prefix of another (so no
    name is ever lost).

    Args:
        flat: dotted name -> value.

    Returns:
        The nested dict, or a flat copy of ``flat`` when it cannot be nested.
    """
    root: dict[str, Any] = {}
    for name, value in flat.items():
        parts = name.split(".")
        node = root
        ok = True
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                ok = False
                break
            node = nxt
        if not ok or (parts[-1] in node and isinstance(node[parts[-1]], dict)) or "" in parts:
            return dict(flat)
        node[parts[-1]] = value
    return root
