"""Hugging Face layouts, offline: a model folder's ``config.json``, and a repo id resolved in
the local Hugging Face cache (never downloaded).

A repo id (``"TinyLlama/TinyLlama-1.1B-Chat-v1.0"``, optionally ``"org/name@revision"``)
names the snapshot folder ``<cache>/models--org--name/snapshots/<commit>/`` of the hub's
cache; the cache is ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``, read when the id is resolved. ``huggingface_hub``'s
``try_to_load_from_cache`` finds the snapshot where it is installed (the documented layout
is read directly otherwise); nothing touches the network.

``config.json`` supplies what the weights do not: attention heads, KV heads, head_dim, tied
embeddings. :func:`read_config` keeps those facts (the model's ``config``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from diffract._errors import ExtractionError

#: files that mark a snapshot folder holding weights, in the order looked for
WEIGHT_FILES = ("model.safetensors.index.json", "model.safetensors", "config.json")
#: a repo id: ``org/name`` (the hub's characters), optionally ``@revision``
_REPO_ID = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)/([A-Za-z0-9][A-Za-z0-9._-]*)(?:@([^\s/]+(?:/[^\s/]+)*))?$"
)


def hub_cache() -> Path:
    """The Hugging Face hub cache folder, from the environment now (not at import).

    Returns:
        ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
        else ``~/.cache/huggingface/hub``.
    """
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def parse_repo_id(text: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` when ``text`` reads as a hub repo id, else None.

    Args:
        text: ``"org/name"`` or ``"org/name@revision"``.

    Returns:
        The repo id and the revision (None: ``main``), or None for anything else.
    """
    m = _REPO_ID.match(text)
    if not m or ".." in text:
        return None
    return f"{m.group(1)}/{m.group(2)}", m.group(3)


def _repo_folder(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def _manual_snapshot(cache: Path, repo_id: str, revision: str) -> Path | None:
    """The snapshot folder by the documented layout: ``refs/<revision>`` holds the commit."""
    repo = _repo_folder(cache, repo_id)
    commit = revision
    ref = repo / "refs" / revision
    if ref.is_file():
        commit = ref.read_text().strip()
    snap = repo / "snapshots" / commit
    return snap if snap.is_dir() else None


def _hub_snapshot(cache: Path, repo_id: str, revision: str) -> Path | None:
    """The snapshot folder through ``huggingface_hub.try_to_load_from_cache`` (local only)."""
    from huggingface_hub import try_to_load_from_cache

    for fname in WEIGHT_FILES:
        found = try_to_load_from_cache(
            repo_id, fname, cache_dir=str(cache), revision=revision, repo_type="model"
        )
        if isinstance(found, str):
            return Path(found).parent
    return None


def resolve_repo_id(repo_id: str, revision: str | None = None) -> Path:
    """The local snapshot folder of a hub model: offline, never downloading.

    Args:
        repo_id: ``"org/name"``.
        revision: a branch, tag or commit hash (default ``main``).

    Returns:
        The snapshot folder (``<cache>/models--org--name/snapshots/<commit>``).

    Raises:
        ExtractionError: the model (or that revision) is not in the local cache; the message
            says which folder was looked in.
    """
    rev = revision or "main"
    cache = hub_cache()
    try:
        snap = _hub_snapshot(cache, repo_id, rev)
    except ImportError:
        snap = None
    if snap is None:
        snap = _manual_snapshot(cache, repo_id, rev)
    if snap is None:
        where = _repo_folder(cache, repo_id)
        state = (
            f"{where} exists but has no snapshot for revision {rev!r}"
            if where.is_dir()
            else f"there is no {where}"
        )
        raise ExtractionError(
            f"{repo_id!r} (revision {rev!r}) is not in the local Hugging Face cache: {state} "
            "(the cache is HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub). "
            f"diffract never downloads: fetch it first (hf download {repo_id}), or pass the "
            "model's folder"
        )
    return snap


#: config.json keys kept, with the older names some architectures use (GPT-2's n_head...)
_CONFIG_KEYS = {
    "model_type": ("model_type",),
    "architectures": ("architectures",),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"),
    "head_dim": ("head_dim",),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "vocab_size": ("vocab_size",),
    "tie_word_embeddings": ("tie_word_embeddings",),
}


def read_config(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The architecture facts of a model folder's ``config.json`` (empty when it has none).

    ``num_key_value_heads`` defaults to the attention heads (no GQA) and ``head_dim`` to
    ``hidden_size // num_attention_heads``, as transformers does; a nested ``text_config``
    (multimodal models) is read when the top level lacks the heads.

    Args:
        folder: the model folder.

    Returns:
        ``model_type``, ``architectures``, ``hidden_size``, ``num_hidden_layers``,
        ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
        ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings`` where known.

    Raises:
        ExtractionError: ``config.json`` is not a JSON object.
    """
    path = Path(folder) / "config.json"
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ExtractionError(f"{path}: not a JSON config ({exc})") from None
    if not isinstance(raw, dict):
        raise ExtractionError(f"{path}: not a JSON config (not an object)")
    if "num_attention_heads" not in raw and isinstance(raw.get("text_config"), dict):
        raw = {**raw["text_config"], **{k: v for k, v in raw.items() if k != "text_config"}}
    out: dict[str, Any] = {}
    for key, aliases in _CONFIG_KEYS.items():
        for alias in aliases:
            if raw.get(alias) is not None:
                out[key] = raw[alias]
                break
    heads = out.get("num_attention_heads")
    if isinstance(heads, int) and heads > 0:
        out.setdefault("num_key_value_heads", heads)
        hidden = out.get("hidden_size")
        if isinstance(hidden, int) and "head_dim" not in out:
            out["head_dim"] = hidden // heads
    return out


#: attention projection names that get the heads in their meta
_ATTENTION = re.compile(
    r"(?:^|\.)(q_proj|k_proj|v_proj|o_proj|c_attn|qkv_proj|query|key|value|attn_q|attn_k|"
    r"attn_v|attn_output|out_proj|c_proj)\.weight$"
)


def attention_meta(names: list[str], config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-slice meta for attention projections: the heads the config gives.

    Args:
        names: the model's dotted names.
        config: :func:`read_config`'s facts.

    Returns:
        Name -> ``{"attention": {"heads", "kv_heads", "head_dim"}}`` for every attention
        projection weight (``c_proj`` only under an ``attn`` module), when the config gives
        the heads.
    """
    heads = config.get("num_attention_heads")
    if not isinstance(heads, int):
        return {}
    facts = {
        "heads": heads,
        "kv_heads": config.get("num_key_value_heads", heads),
        "head_dim": config.get("head_dim"),
    }
    out = {}
    for name in names:
        m = _ATTENTION.search(name)
        if m and (m.group(1) != "c_proj" or ".attn." in name):
            out[name] = {"attention": dict(facts)}
    return out


def tied_skips(names: list[str], config: dict[str, Any]) -> dict[str, str]:
    """The output embedding a tied checkpoint leaves out, with the reason.

    Args:
        names: the checkpoint's dotted names.
        config: :func:`read_config`'s facts.

    Returns:
        ``{"lm_head.weight": why}`` when ``tie_word_embeddings`` is true and the checkpoint
        has an input embedding but no ``lm_head.weight``; else empty.
    """
    if config.get("tie_word_embeddings") is not True or "lm_head.weight" in names:
        return {}
    emb = next((n for n in names if n.endswith(("embed_tokens.weight", "wte.weight"))), None)
    if emb is None:
        return {}
    return {
        "lm_head.weight": f"tied to {emb} (config.json tie_word_embeddings=true): the same "
        "matrix, not stored again, analyzed once as the embedding"
    }
