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

from .._errors import ExtractionError
from .._lazy import LazyArray, safetensors_leaves, to_numpy
from . import Extractor, ModelTree, nest_dotted

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


def _torch_leaves(path: Path) -> dict[str, Any]:
    import torch

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
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise ExtractionError(
            f"{path}: expected a state_dict (a dict of tensors), got {type(obj).__name__}"
        )
    leaves: dict[str, Any] = {}
    for k, v in obj.items():
        if isinstance(v, torch.Tensor):
            leaves[str(k)] = LazyArray(
                tuple(v.shape),
                str(v.dtype).replace("torch.", ""),
                lambda v=v: to_numpy(v),
                f"{path}::{k}",
            )
        else:
            leaves[str(k)] = v
    return leaves


def _extract_path(obj: Any) -> ModelTree:
    path = Path(os.fspath(obj)).expanduser()
    if not path.exists():
        raise ExtractionError(f"checkpoint not found: {path}")
    if path.is_dir():
        flat = _safetensors_folder(path)
    else:
        suffix = path.suffix.lower()
        if suffix == ".safetensors":
            flat = safetensors_leaves(path)
        elif suffix == ".npz":
            flat = _npz_leaves(path)
        elif suffix in (".pt", ".pth", ".bin"):
            flat = _torch_leaves(path)
        elif suffix == ".onnx":
            from ._onnx import load_onnx_file

            return load_onnx_file(path)
        else:
            raise ExtractionError(
                f"{path}: unsupported checkpoint suffix {suffix!r}; use one of {', '.join(SUFFIXES)}"
            )
    return ModelTree(tree=nest_dotted(flat), framework="file", source=str(path), file_backed=True)


EXTRACTORS = [Extractor("file", _is_path, _extract_path)]
