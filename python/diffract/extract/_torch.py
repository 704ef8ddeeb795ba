"""PyTorch: an ``nn.Module`` (types from module classes) or a ``state_dict``.

The weights of a module are its *parameters* (``named_parameters()``: trainable or not), each
tensor once under its first name (tied and shared parameters are listed as skipped aliases).
Buffers (BatchNorm running statistics, masks, ...) are state, not parameters: skipped with a
reason. A parametrized tensor (``torch.nn.utils.parametrizations.weight_norm`` /
``spectral_norm``, ``torch.nn.utils.parametrize``) is extracted as the effective tensor the
forward pass uses, under ``<module>.<tensor>``; its ``original*`` inputs are skipped.
Wrappers (``torch.compile``, ``DataParallel``, ``DistributedDataParallel``) are unwrapped so
names match the plain model. A ``state_dict`` has no module to ask: entries named like
BatchNorm buffers (``running_mean``, ``running_var``, ``num_batches_tracked``) are skipped,
and a ``module.`` / ``_orig_mod.`` prefix on every key is dropped.
"""

from __future__ import annotations

import sys
from typing import Any

from diffract._core.slices import ParameterType
from diffract._errors import ExtractionError
from diffract.extract import Extractor, ModelTree, nest_dotted


def _torch():
    return sys.modules.get("torch")


def _module_type(module: Any, pname: str) -> ParameterType | None:
    torch = _torch()
    nn = torch.nn
    if pname == "bias" or pname.endswith("_bias"):
        return ParameterType.BIAS
    if isinstance(module, nn.RNNBase | nn.RNNCellBase):  # RNN, LSTM, GRU and their cells
        return ParameterType.BIAS if pname.startswith("bias") else ParameterType.RECURRENT
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


# --- shared by state_dicts and checkpoint files --------------------------------------------

#: key prefixes of wrapper modules: torch.compile (``_orig_mod.``), DataParallel and
#: DistributedDataParallel (``module.``)
WRAPPER_PREFIXES = ("_orig_mod.", "module.")

#: BatchNorm buffer names: running statistics, not parameters
BATCHNORM_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")

RUNNING_STAT_REASON = "normalization running statistic (a buffer), not a parameter"


def strip_wrapper_prefix(flat: dict[str, Any]) -> dict[str, Any]:
    """Drop ``_orig_mod.`` / ``module.`` when *every* key starts with it (repeatedly, so a
    compiled DataParallel model's ``_orig_mod.module.`` goes too)."""
    while flat:
        for prefix in WRAPPER_PREFIXES:
            if all(isinstance(k, str) and k.startswith(prefix) for k in flat):
                flat = {k[len(prefix) :]: v for k, v in flat.items()}
                break
        else:
            return flat
    return flat


def is_batchnorm_buffer(name: str) -> bool:
    return str(name).rsplit(".", 1)[-1] in BATCHNORM_BUFFERS


def split_state_dict(flat: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(kept entries, skipped name -> reason) of a flat state_dict without its module."""
    flat = strip_wrapper_prefix(dict(flat))
    kept: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for k, v in flat.items():
        if is_batchnorm_buffer(k):
            skipped[k] = RUNNING_STAT_REASON
        else:
            kept[k] = v
    return kept, skipped


def check_not_meta(name: str, tensor: Any, where: str = "") -> None:
    if getattr(tensor, "is_meta", False):
        raise ExtractionError(
            f"{where}parameter {name!r} is on the meta device (a shape without data): materialize "
            "the model first (model.to_empty(device='cpu') and load its weights, or build it "
            "without torch.device('meta') / init_empty_weights)"
        )


# --- nn.Module -----------------------------------------------------------------------------


def unwrap_module(module: Any) -> Any:
    """The model inside ``torch.compile`` / ``DataParallel`` / ``DistributedDataParallel``."""
    torch = _torch()
    parallel = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
    for _ in range(16):
        inner = module.__dict__.get("_modules", {})
        if type(module).__name__ == "OptimizedModule" and "_orig_mod" in inner:
            module = inner["_orig_mod"]
        elif isinstance(module, parallel) and "module" in inner:
            module = inner["module"]
        else:
            break
    return module


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _legacy_reparametrizations(module: Any) -> list[tuple[str, Any, tuple[str, ...]]]:
    """(tensor name, compute() -> effective tensor, parameter and buffer names it replaces)
    of the hook-based ``torch.nn.utils.weight_norm`` / ``spectral_norm`` (deprecated API)."""
    out: list[tuple[str, Any, tuple[str, ...]]] = []
    for hook in getattr(module, "_forward_pre_hooks", {}).values():
        kind = type(hook).__name__
        if type(hook).__module__.startswith("torch.nn.utils") and hasattr(hook, "name"):
            name = hook.name
            if kind == "WeightNorm":
                out.append(
                    (name, lambda h=hook: h.compute_weight(module), (f"{name}_g", f"{name}_v"))
                )
            elif kind == "SpectralNorm":
                out.append(
                    (
                        name,
                        lambda h=hook: h.compute_weight(module, do_power_iteration=False),
                        (f"{name}_orig", f"{name}_u", f"{name}_v"),
                    )
                )
    return out


def _effective(module: Any, tname: str) -> Any:
    """The parametrized tensor as the forward pass sees it, computed once without changing
    the module (spectral_norm's power iteration runs only in training mode: evaluated in
    eval mode, with the training flags restored)."""
    torch = _torch()
    plist = module.parametrizations[tname]
    flags = [(m, m.training) for m in plist.modules()]
    try:
        plist.eval()
        with torch.no_grad():
            return getattr(module, tname).detach()
    finally:
        for m, training in flags:
            m.training = training


def from_module(module: Any) -> ModelTree:
    torch = _torch()
    parametrize = torch.nn.utils.parametrize
    module = unwrap_module(module)
    for name, p in module.named_parameters():
        check_not_meta(name, p)

    # parametrized tensors: parameter name -> the effective tensor's name
    replaced: dict[str, str] = {}
    effective: dict[str, tuple[Any, Any]] = {}  # name -> (owner module, compute)
    for mname, sub in module.named_modules():
        if parametrize.is_parametrized(sub):
            for tname in sub.parametrizations:
                eff = _join(mname, tname)
                effective[eff] = (sub, lambda sub=sub, tname=tname: _effective(sub, tname))
                for pname, _ in sub.parametrizations[tname].named_parameters():
                    replaced[_join(mname, f"parametrizations.{tname}.{pname}")] = eff
                for bname, _ in sub.parametrizations[tname].named_buffers():
                    replaced[_join(mname, f"parametrizations.{tname}.{bname}")] = eff
        for tname, compute, pnames in _legacy_reparametrizations(sub):
            eff = _join(mname, tname)
            effective[eff] = (sub, compute)
            for pname in pnames:
                replaced[_join(mname, pname)] = eff

    owners = {}
    for mname, sub in module.named_modules(remove_duplicate=False):
        for pname, _ in sub.named_parameters(recurse=False):
            owners[_join(mname, pname)] = (sub, pname)
    # WeightWatcher's layer_id of a module: its position in named_modules() (the root is 0)
    ww_ids = {mname: i for i, (mname, _) in enumerate(module.named_modules())}

    flat: dict[str, Any] = {}
    types: dict[str, ParameterType] = {}
    meta: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    first_name: dict[int, str] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        if id(p) in first_name:
            skipped[name] = (
                f"alias of {first_name[id(p)]!r} (a tied or shared parameter is extracted once)"
            )
            continue
        first_name[id(p)] = name
        if name in replaced:
            eff = replaced[name]
            skipped[name] = f"parametrization input of {eff!r} (the effective tensor is extracted)"
            if eff not in flat:  # replaced and effective are filled together
                sub, compute = effective[eff]
                with torch.no_grad():
                    flat[eff] = compute().detach()
                t = _module_type(sub, eff.rsplit(".", 1)[-1])
                if t is not None:
                    types[eff] = t
            continue
        flat[name] = p.detach()
        mname = name.rpartition(".")[0]
        if mname in ww_ids:
            meta[name] = {"ww_layer_id": ww_ids[mname]}
        sub, pname = owners.get(name, (None, None))
        t = _module_type(sub, pname) if sub is not None else None
        if t is not None:
            types[name] = t
    seen_buffers: set[int] = set()
    for name, b in module.named_buffers(remove_duplicate=False):
        if name in replaced:
            skipped[name] = f"parametrization state of {replaced[name]!r}, not a parameter"
        elif is_batchnorm_buffer(name):
            skipped[name] = RUNNING_STAT_REASON
        elif id(b) in seen_buffers:
            skipped[name] = "buffer alias (buffers are state, not parameters)"
        else:
            skipped[name] = "buffer (module state registered with register_buffer), not a parameter"
        seen_buffers.add(id(b))
    return ModelTree(
        tree=nest_dotted(flat),
        types=types,
        framework="torch",
        source=type(module).__qualname__,
        skipped=skipped,
        order=list(flat),
        meta=meta,
    )


def _from_state_dict(state: dict) -> ModelTree:
    kept, skipped = split_state_dict(state)
    for name, v in kept.items():
        check_not_meta(name, v, "state_dict ")
    # WeightWatcher's layer_id of a state dict's tensor: 1, 2, ... over its ".weight" keys
    weights = [k for k in kept if k.endswith(".weight")]
    meta = {k: {"ww_state_dict_id": i} for i, k in enumerate(weights, start=1)}
    return ModelTree(
        tree=nest_dotted(kept),
        framework="torch",
        source="state_dict",
        skipped=skipped,
        order=list(kept),
        meta=meta,
    )


EXTRACTORS = [
    Extractor("torch.nn.Module", _is_module, from_module),
    Extractor("torch.state_dict", _is_state_dict, _from_state_dict),
]
