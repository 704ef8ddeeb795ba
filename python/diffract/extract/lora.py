"""LoRA / PEFT adapters: each adapted layer becomes one slice holding its update B @ A.

PEFT stores a LoRA adapter of a layer as two matrices, ``<layer>.lora_A[.<adapter>].weight``
(r x in) and ``<layer>.lora_B[.<adapter>].weight`` (out x r); the layer's update is
``scaling * B @ A`` with ``scaling = lora_alpha / r`` (``lora_alpha / sqrt(r)`` with
``use_rslora``), as PEFT's ``LoraLayer`` computes it. The extractors here find the pairs
(:func:`find_pairs`); :func:`diffract.extract.extract` then makes them slices
(:func:`resolve`) as its options say:

* ``lora="update"`` (default): the slice ``<layer>.lora`` (``<layer>.lora.<adapter>`` for an
  adapter not named ``default``) of type dense holding the update, in float64 (a rank-r update
  has exactly r nonzero singular values);
* ``lora="merged"``: the base weight ``<layer>.weight`` replaced by ``W + scaling * B @ A``
  (float32, PEFT's ``merge_and_unload`` weight); needs the base weights (a PEFT module);
* ``lora_scaling="none"``: the plain ``B @ A``, as WeightWatcher's ``analyze(peft=True)``
  (it does not scale by alpha / r).

Each such slice's meta ``"lora"`` holds the rank, the scaling applied, the mode and the
adapter (``layer_selection="peft"`` analyzes just those, as WeightWatcher's ``peft=True``).
``base_model.model.`` is left off every name; every other leaf stays, named as in the base
model (a PEFT module's ``base_model.model.<layer>.base_layer.weight`` is ``<layer>.weight``).

Recognised inputs:

- a PyTorch module with LoRA layers (a ``peft`` model, or any module with ``lora_A`` /
  ``lora_B`` parameters): the scaling is the layer's own ``scaling[adapter]`` when it has one,
  else 1;
- a PEFT adapter folder (``adapter_config.json`` with ``adapter_model.safetensors`` or
  ``.bin``) or the weights file itself beside its ``adapter_config.json``: the scaling comes
  from the config (``lora_alpha``, ``r``, ``use_rslora``, ``alpha_pattern``, ``rank_pattern``).

Mismatched pairs (ranks that differ between A and B, or from the config; a matrix without its
partner) are :class:`~diffract.ExtractionError` naming the slice.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from diffract._core.tree import dotted_name, tree_leaves_with_path
from diffract._errors import ExtractionError
from diffract.extract import Extractor, ModelTree, nest_dotted

_PAIR = re.compile(r"^(?P<layer>.+)\.lora_(?P<ab>[AB])(?:\.(?P<adapter>[^.]+))?\.weight$")
_PREFIX = "base_model.model."
_CONFIG = "adapter_config.json"
_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def as_numpy(leaf: Any, dtype: Any = np.float32) -> np.ndarray:
    """A leaf (PyTorch tensor, lazy checkpoint array, NumPy or JAX array) as a NumPy array.

    Args:
        leaf: the leaf.
        dtype: the NumPy dtype wanted (float32 or float64).

    Returns:
        A NumPy array of that dtype.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(leaf, torch.Tensor):
        tdtype = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32
        return leaf.detach().to("cpu", dtype=tdtype).numpy()
    load = getattr(leaf, "load", None)  # a LazyArray from a checkpoint file
    return np.asarray(load() if callable(load) else leaf, dtype=dtype)


def slice_name(layer: str, adapter: str | None) -> str:
    """The slice name of a LoRA pair: ``<layer>.lora`` (``.lora.<adapter>`` unless default).

    Args:
        layer: the adapted layer's dotted name (``base_model.model.`` is left off).
        adapter: the adapter's name, or None when the names carry none (PEFT files).

    Returns:
        The dotted slice name.
    """
    base = layer.removeprefix(_PREFIX)
    return f"{base}.lora" if adapter in (None, "default") else f"{base}.lora.{adapter}"


def base_name(name: str) -> str:
    """The name of a PEFT model's other leaf as in the base model: ``base_model.model.`` and
    the ``.base_layer`` of adapted layers left off.

    Args:
        name: a dotted leaf name of the adapted model.

    Returns:
        The base model's name for it.
    """
    return name.removeprefix(_PREFIX).replace(".base_layer.", ".")


def _pairs(flat: dict[str, Any]) -> tuple[dict[tuple[str, str | None], dict[str, str]], list[str]]:
    pairs: dict[tuple[str, str | None], dict[str, str]] = {}
    others = []
    for name in flat:
        m = _PAIR.match(name)
        if m is None:
            others.append(name)
        else:
            pairs.setdefault((m["layer"], m["adapter"]), {})[m["ab"]] = name
    return pairs, others


@dataclass(frozen=True)
class LoraPair:
    """One adapted layer's LoRA factors, found by an extractor; :func:`resolve` turns it into
    a slice.

    Attributes:
        slice: the update slice's name (:func:`slice_name`).
        base: the adapted layer's weight as named in the base model (``<layer>.weight``).
        a: ``lora_A`` (r x in), as a float32 NumPy array.
        b: ``lora_B`` (out x r).
        scaling: PEFT's scaling of the update (``alpha / r``, ``alpha / sqrt(r)`` with rsLoRA).
        adapter: the adapter's name (None when the names carry none).
        fan_in_fan_out: the base weight is stored (in, out), as GPT-2's ``Conv1D`` (PEFT's
            ``fan_in_fan_out``): a merge adds the transposed update.
    """

    slice: str
    base: str
    a: np.ndarray
    b: np.ndarray
    scaling: float
    adapter: str | None
    fan_in_fan_out: bool = False

    @property
    def rank(self) -> int:
        """The adapter's rank r."""
        return int(self.a.shape[0])


def find_pairs(
    flat: dict[str, Any],
    scaling: Any,
    source: str = "model",
    fan_in_fan_out: Container[str] = frozenset(),
) -> tuple[dict[str, Any], list[LoraPair], dict[str, str]]:
    """Split ``flat`` into the other leaves (named as in the base model) and its LoRA pairs.

    Args:
        flat: dotted name -> array (tensor, NumPy array or lazy checkpoint array).
        scaling: ``scaling(layer, adapter, rank) -> float``.
        source: what the leaves came from, for error messages.
        fan_in_fan_out: the adapted layers whose base weight is stored (in, out)
            (:attr:`LoraPair.fan_in_fan_out`).

    Returns:
        ``(leaves, pairs, skipped)``: the other leaves unchanged, one :class:`LoraPair` per
        adapted 2-D layer, and the factors left out with the reason (conv or embedding LoRA).

    Raises:
        ExtractionError: a pair with mismatched ranks or a matrix without its partner.
    """
    names_of, others = _pairs(flat)
    out = {base_name(name): flat[name] for name in others}
    found: list[LoraPair] = []
    skipped: dict[str, str] = {}
    for (layer, adapter), names in names_of.items():
        target = slice_name(layer, adapter)
        if set(names) != {"A", "B"}:
            have, lack = next(iter(names)), "B" if "A" in names else "A"
            raise ExtractionError(
                f"LoRA slice {target!r} ({source}): {names[have]!r} has no lora_{lack} partner"
            )
        a, b = as_numpy(flat[names["A"]]), as_numpy(flat[names["B"]])
        if a.ndim != 2 or b.ndim != 2:
            for n in names.values():
                skipped[n] = "LoRA factor of a convolution or embedding: not merged (kept out)"
            continue
        if a.shape[0] != b.shape[1]:
            raise ExtractionError(
                f"LoRA slice {target!r} ({source}): mismatched ranks, lora_A {tuple(a.shape)} "
                f"has rank {a.shape[0]} but lora_B {tuple(b.shape)} has rank {b.shape[1]}"
            )
        s = float(scaling(layer, adapter, int(a.shape[0])))
        base = f"{layer.removeprefix(_PREFIX)}.weight"
        found.append(LoraPair(target, base, a, b, s, adapter, layer in fan_in_fan_out))
    return out, found, skipped


#: accepted values of ``lora``: the update B @ A as its own slice, or W + B @ A in W's place
LORA_MODES = ("update", "merged")
#: accepted values of ``lora_scaling``: PEFT's (alpha / r, rsLoRA alpha / sqrt(r)), or none
#: (the plain product B @ A, as WeightWatcher's ``analyze(peft=True)``)
LORA_SCALINGS = ("peft", "none")


def check_lora_options(lora: str, lora_scaling: str) -> None:
    """Raise a clear error for an unknown ``lora`` or ``lora_scaling`` value.

    Args:
        lora: one of :data:`LORA_MODES`.
        lora_scaling: one of :data:`LORA_SCALINGS`.

    Raises:
        ExtractionError: an unknown value, naming the option.
    """
    if lora not in LORA_MODES:
        raise ExtractionError(f"option 'lora' must be one of {list(LORA_MODES)}, got {lora!r}")
    if lora_scaling not in LORA_SCALINGS:
        raise ExtractionError(
            f"option 'lora_scaling' must be one of {list(LORA_SCALINGS)}, got {lora_scaling!r}"
        )


def resolve(
    leaves: dict[str, Any], pairs: list[LoraPair], lora: str = "update", lora_scaling: str = "peft"
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The leaves with every LoRA pair made a slice, and the slices' meta.

    ``lora="update"``: a new slice ``<layer>.lora`` holding ``scaling * B @ A``;
    ``lora="merged"``: the base weight ``<layer>.weight`` replaced by ``W + scaling * B @ A``
    (PEFT's merged weight), which needs the base weight. ``lora_scaling="none"`` drops the
    scaling (WeightWatcher's plain ``B @ A``). Each such slice's meta ``"lora"`` records the
    rank, the scaling applied and the mode.

    Args:
        leaves: the other leaves, named as in the base model.
        pairs: the pairs found by :func:`find_pairs`.
        lora: one of :data:`LORA_MODES`.
        lora_scaling: one of :data:`LORA_SCALINGS`.

    Returns:
        ``(leaves, meta)``: the new leaves (a float64 update, so that its rank is r to
        float64 rounding; a float32 merged weight, the dtype PEFT's merge gives) and slice
        name -> meta.

    Raises:
        ExtractionError: an unknown option value, or ``lora="merged"`` for a pair whose base
            weight is not there (or has another shape) or has several adapters, naming the
            slice.
    """
    check_lora_options(lora, lora_scaling)
    out = dict(leaves)
    meta: dict[str, dict[str, Any]] = {}
    for p in pairs:
        s = p.scaling if lora_scaling == "peft" else 1.0
        update = s * (p.b.astype(np.float64) @ p.a.astype(np.float64))
        target = p.slice
        if lora == "merged":
            if p.base in meta:
                raise ExtractionError(
                    f"lora='merged': {p.base!r} has more than one adapter "
                    f"({meta[p.base]['lora']['adapter']!r}, {p.adapter!r}); which are active "
                    "is the model's state, not its weights: use lora='update' (one slice "
                    "per adapter)"
                )
            if p.base not in out:
                raise ExtractionError(
                    f"lora='merged': LoRA slice {p.slice!r} has no base weight {p.base!r} here "
                    "(a PEFT adapter file holds only the factors; add the PEFT model itself, "
                    "or use lora='update')"
                )
            w = as_numpy(out[p.base], np.float64)
            if p.fan_in_fan_out:  # B @ A is (out, in); the base is stored (in, out)
                update = update.T
            if w.shape != update.shape:
                raise ExtractionError(
                    f"lora='merged': LoRA slice {p.slice!r} has shape {update.shape} but its "
                    f"base weight {p.base!r} has shape {w.shape}"
                )
            update, target = (w + update).astype(np.float32), p.base
        out[target] = update  # an update stays float64: rank r exactly, no float32 noise
        meta[target] = {
            "lora": {"rank": p.rank, "scaling": s, "mode": lora, "adapter": p.adapter or "default"}
        }
    return out, meta


# --------------------------------------------------------------------------------------
# PyTorch modules
# --------------------------------------------------------------------------------------


def _is_lora_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.nn.Module):
        return False
    return any(_PAIR.match(name) for name, _p in obj.named_parameters())


def _from_lora_module(module: Any) -> ModelTree:
    from diffract.extract._torch import from_module

    base = from_module(module)
    flat = {dotted_name(p): leaf for p, leaf in tree_leaves_with_path(base.tree)}
    scales = {
        name: dict(sc)
        for name, m in module.named_modules()
        if isinstance(sc := getattr(m, "scaling", None), dict)
    }
    transposed = {
        name for name, m in module.named_modules() if getattr(m, "fan_in_fan_out", False) is True
    }

    def scaling(layer: str, adapter: str | None, _rank: int) -> float:
        return float(scales.get(layer, {}).get(adapter or "default", 1.0))

    leaves, pairs, skipped = find_pairs(flat, scaling, type(module).__qualname__, transposed)
    return ModelTree(
        tree=nest_dotted(leaves),
        types={base_name(k): v for k, v in base.types.items() if base_name(k) in leaves},
        framework="torch",
        source=base.source,
        skipped={**base.skipped, **skipped},
        layouts={base_name(k): v for k, v in base.layouts.items() if base_name(k) in leaves},
        lora=pairs,
        order=[base_name(k) for k in base.order if base_name(k) in leaves],
    )


# --------------------------------------------------------------------------------------
# PEFT adapter files
# --------------------------------------------------------------------------------------


def _adapter_files(obj: Any) -> tuple[Path, Path] | None:
    """(config, weights) of a PEFT adapter folder or weights file, or None."""
    if not isinstance(obj, (str, os.PathLike)):
        return None
    path = Path(os.fspath(obj)).expanduser()
    folder = path if path.is_dir() else path.parent
    config = folder / _CONFIG
    if not config.is_file():
        return None
    if path.is_dir():
        found = [folder / w for w in _WEIGHTS if (folder / w).is_file()]
        return (config, found[0]) if found else None
    return (config, path) if path.suffix in (".safetensors", ".bin") else None


def _is_adapter_path(obj: Any) -> bool:
    return _adapter_files(obj) is not None


def _pattern_value(patterns: dict[str, Any], layer: str, default: Any) -> Any:
    """PEFT's rank_pattern / alpha_pattern lookup: the first key matching the end of the
    layer's name (at a dot)."""
    for key, value in patterns.items():
        if re.fullmatch(rf"(.*\.)?(?:{key})", layer):
            return value
    return default


def _config_scaling(config: dict[str, Any], source: str) -> Any:
    r0, alpha0 = config.get("r", 8), config.get("lora_alpha", 8)
    rslora = bool(config.get("use_rslora", False))
    ranks, alphas = config.get("rank_pattern") or {}, config.get("alpha_pattern") or {}

    def scaling(layer: str, adapter: str | None, rank: int) -> float:
        name = layer.removeprefix(_PREFIX)
        r = int(_pattern_value(ranks, name, r0))
        if r != rank:
            raise ExtractionError(
                f"LoRA slice {slice_name(layer, adapter)!r} ({source}): mismatched ranks, the "
                f"factors have rank {rank} but {_CONFIG} says r={r}"
            )
        alpha = float(_pattern_value(alphas, name, alpha0))
        return alpha / math.sqrt(r) if rslora else alpha / r

    return scaling


def _from_adapter_path(obj: Any) -> ModelTree:
    from diffract.extract._files import extract_path

    found = _adapter_files(obj)
    assert found is not None
    config_path, weights = found
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise ExtractionError(
            f"{config_path}: not a readable PEFT adapter config ({exc})"
        ) from None
    if not isinstance(config, dict):
        raise ExtractionError(f"{config_path}: a PEFT adapter config is a JSON object")
    base = extract_path(weights)
    flat = {dotted_name(p): leaf for p, leaf in tree_leaves_with_path(base.tree)}
    leaves, pairs, skipped = find_pairs(flat, _config_scaling(config, str(weights)), str(weights))
    return ModelTree(
        tree=nest_dotted(leaves),
        framework="peft",
        source=str(weights),
        file_backed=not pairs,  # the updates are computed arrays, in memory
        skipped={**base.skipped, **skipped},
        lora=pairs,
    )


EXTRACTORS = [
    Extractor("peft.adapter", _is_adapter_path, _from_adapter_path),
    Extractor("peft.module", _is_lora_module, _from_lora_module),
]
