"""Checkpoint files, read tensor by tensor: ``.safetensors`` (memory-mapped; also a folder of
shards with ``model.safetensors.index.json``), ``.npz`` (one array at a time), PyTorch
``.pt``/``.pth``/``.bin`` (``torch.load(weights_only=True, mmap=True)``: never unpickles
arbitrary objects) and ``.onnx``."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from diffract._core.arrays import LazyArray, dtype_name, to_numpy
from diffract._errors import ExtractionError
from diffract.extract import Extractor, ModelTree, nest_dotted
from diffract.extract.safetensors import safetensors_leaves

SUFFIXES = (".safetensors", ".npz", ".pt", ".pth", ".bin", ".onnx")


def _is_path(obj: Any) -> bool:
    return isinstance(obj, (str, os.PathLike))


def _safetensors_folder(folder: Path) -> dict[str, LazyArray]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ExtractionError(f"{index}: not a safetensors shard index ({exc})") from None
        leaves: dict[str, LazyArray] = {}
        for shard in sorted(set(weight_map.values())):
            shard_path = (folder / shard).resolve()
            if folder.resolve() not in shard_path.parents:
                raise ExtractionError(f"{index}: shard {shard!r} lies outside {folder}")
            leaves.update(safetensors_leaves(shard_path))
        missing = sorted(set(weight_map) - set(leaves))
        if missing:
            raise ExtractionError(f"{index}: tensors {missing[:3]} are not in any shard")
        return leaves
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ExtractionError(
            f"{folder}: a folder checkpoint needs model.safetensors.index.json or *.safetensors files"
        )
    leaves = {}
    for f in files:
        leaves.update(safetensors_leaves(f))
    return leaves


def _npz_leaves(path: Path) -> dict[str, LazyArray]:
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ExtractionError(f"{path}: not a readable .npz archive ({exc})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ExtractionError(f"{path}: holds a single array, not an .npz archive of named arrays")
    leaves: dict[str, LazyArray] = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            with zf.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
                else:  # format 3.0 has no public header reader: read that array once
                    arr = archive[key]
                    shape, dtype = arr.shape, arr.dtype

            def load(key=key) -> np.ndarray:
                with np.load(path, allow_pickle=False) as arc:
                    return arc[key]

            leaves[key] = LazyArray(tuple(shape), str(dtype), load, f"{path}::{key}")
    return leaves


#: top-level keys of a training checkpoint that hold the model's weights, in the order tried
CHECKPOINT_MODEL_KEYS = (
    "model",
    "model_state_dict",
    "state_dict",
    "module",
    "net",
    "network",
    "model_state",
)
#: keys of exponential-moving-average weights: used only when no key above holds weights
CHECKPOINT_EMA_KEYS = ("ema", "model_ema", "ema_state_dict", "state_dict_ema", "ema_model")
#: keys of training state that never hold the model's weights
CHECKPOINT_TRAINING_KEYS = (
    "optimizer",
    "optimizer_state_dict",
    "optimizer_states",
    "optim",
    "opt",
    "scheduler",
    "lr_scheduler",
    "lr_schedulers",
    "scaler",
    "grad_scaler",
)


def _holds_tensors(obj: Any, torch: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, dict):
        return any(_holds_tensors(v, torch) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_holds_tensors(v, torch) for v in obj)
    return False


def _lazy_tensors(obj: Any, path: Path, where: str, torch: Any, skipped: dict[str, str]) -> Any:
    """``obj`` with every tensor, at any depth, wrapped as a LazyArray over the
    memory-mapped file (containers rebuilt as dicts/lists with string keys). Tensors named
    like BatchNorm buffers are left out and recorded in ``skipped``."""
    from diffract.extract._torch import RUNNING_STAT_REASON, check_not_meta, is_batchnorm_buffer

    if isinstance(obj, torch.Tensor):
        check_not_meta(where, obj, f"{path}: ")
        if is_batchnorm_buffer(where):
            skipped[where] = RUNNING_STAT_REASON
            return None
        return LazyArray(
            tuple(obj.shape),
            dtype_name(obj),
            lambda v=obj: to_numpy(v),
            f"{path}::{where}",
        )
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            leaf = _lazy_tensors(v, path, f"{where}.{k}" if where else str(k), torch, skipped)
            if leaf is not None or v is None:
                out[str(k)] = leaf
        return out
    if isinstance(obj, (list, tuple)):
        return [
            _lazy_tensors(v, path, f"{where}.{i}" if where else str(i), torch, skipped)
            for i, v in enumerate(obj)
        ]
    return obj


def _checkpoint_weights(obj: dict, path: Path, torch: Any) -> tuple[Any, dict[str, str]]:
    """(the weights part of a loaded checkpoint dict, skipped top-level key -> reason).

    A flat state_dict (tensors at the top level) is the weights. A training checkpoint holds
    them under one well-known key (``model``, ``model_state_dict``, ``state_dict``, ...;
    EMA keys only when none of those is present): that key is taken and every other entry
    (optimizer, scheduler, epoch, ...) is skipped. Nested tensors under no known key with no
    training state beside them are a nested model. Anything else is ambiguous: an error
    that lists the keys."""
    if any(isinstance(v, torch.Tensor) for v in obj.values()):  # a flat state_dict
        training = [
            k
            for k in obj
            if str(k).lower() in CHECKPOINT_TRAINING_KEYS and isinstance(obj[k], (dict, list))
        ]
        return {k: v for k, v in obj.items() if k not in training}, {
            str(k): "training-checkpoint entry (training state), not the model's weights"
            for k in training
        }
    keys = [str(k) for k in obj]
    with_tensors = [k for k in obj if _holds_tensors(obj[k], torch)]
    primary = [k for k in CHECKPOINT_MODEL_KEYS if k in with_tensors and isinstance(obj[k], dict)]
    ema = [k for k in CHECKPOINT_EMA_KEYS if k in with_tensors and isinstance(obj[k], dict)]
    training = [k for k in with_tensors if str(k).lower() in CHECKPOINT_TRAINING_KEYS]
    chosen = primary if primary else ema
    if len(chosen) == 1:
        key = chosen[0]
        skipped = {}
        for k in obj:
            if k == key:
                continue
            if k in with_tensors:
                what = "EMA weights" if k in CHECKPOINT_EMA_KEYS else "training state"
                skipped[str(k)] = (
                    f"training-checkpoint entry ({what}), not the model's weights: they were "
                    f"taken from {key!r}"
                )
            else:
                skipped[str(k)] = f"training-checkpoint metadata (weights taken from {key!r})"
        return obj[key], skipped
    if not chosen and not training:
        return obj, {}  # a nested model: {"encoder": {...}, "decoder": {...}}
    why = (
        f"several keys could hold the model's weights ({', '.join(map(repr, chosen))})"
        if chosen
        else "no key holds the model's weights (looked for "
        + ", ".join(repr(k) for k in CHECKPOINT_MODEL_KEYS + CHECKPOINT_EMA_KEYS)
        + ")"
    )
    raise ExtractionError(
        f"{path}: a training checkpoint with top-level keys {keys}; {why}. Choose the "
        "weights yourself: models.add(torch.load(path, weights_only=True)[KEY], model_id) "
        "(in memory, so the weights are copied), or save that state_dict to its own file "
        "(torch.save / safetensors) to have it referenced"
    )


def _torch_leaves(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    import torch

    from diffract.extract._torch import strip_wrapper_prefix

    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:  # legacy (non-zip) format cannot be memory-mapped
            if "mmap" not in str(exc):
                raise
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ExtractionError(
            f"{path}: cannot load as a PyTorch checkpoint with weights_only=True ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). Only tensors and plain containers are "
            "accepted; arbitrary pickled objects are refused for safety"
        ) from None
    if not isinstance(obj, dict):
        raise ExtractionError(
            f"{path}: expected a state_dict (a dict of tensors), got {type(obj).__name__}"
        )
    weights, skipped = _checkpoint_weights(obj, path, torch)  # always a dict
    weights = strip_wrapper_prefix({str(k): v for k, v in weights.items()})
    leaves = _lazy_tensors(weights, path, "", torch, skipped)
    return leaves, skipped


def _extract_path(obj: Any) -> ModelTree:
    path = Path(os.fspath(obj)).expanduser()
    if not path.exists():
        raise ExtractionError(f"checkpoint not found: {path}")
    skipped: dict[str, str] = {}
    if path.is_dir():
        flat = _safetensors_folder(path)
    else:
        suffix = path.suffix.lower()
        if suffix == ".safetensors":
            flat = safetensors_leaves(path)
        elif suffix == ".npz":
            flat = _npz_leaves(path)
        elif suffix in (".pt", ".pth", ".bin"):
            flat, skipped = _torch_leaves(path)
        elif suffix == ".onnx":
            from diffract.extract._onnx import load_onnx_file

            return load_onnx_file(path)
        else:
            raise ExtractionError(
                f"{path}: unsupported checkpoint suffix {suffix!r}; use one of {', '.join(SUFFIXES)}"
            )
    return ModelTree(
        tree=nest_dotted(flat),
        framework="file",
        source=str(path),
        file_backed=True,
        skipped=skipped,
    )


EXTRACTORS = [Extractor("file", _is_path, _extract_path)]
