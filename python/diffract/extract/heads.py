"""Per-head attention slices: each head's Q/K/V/O matrices and its TransformerLens-style
QK and OV circuits, derived from the whole attention weights with the model's head counts.

``extract(model, heads=...)`` (and ``models.add(..., heads=...)``) adds, next to the slices
it comes from, for every attention block found (prefix ``P``, e.g.
``model.layers.0.self_attn`` or ``h.0.attn``):

* ``P.head<h>.q`` and ``P.head<h>.o`` for each query head h (type ``attention_head``):
  W_Q,h is rows ``h*d:(h+1)*d`` of the out x in query weight (d x d_model), W_O,h columns
  ``h*d:(h+1)*d`` of the output weight (d_model x d);
* ``P.kv_head<g>.k`` and ``P.kv_head<g>.v`` for each key/value head g (type
  ``attention_head``): with grouped-query attention (GQA, MQA) the ``num_heads /
  num_kv_heads`` query heads h with ``h // (num_heads / num_kv_heads) == g`` share them, as
  Hugging Face's ``repeat_kv`` does;
* ``P.head<h>.qk`` = W_Q,h^T W_K,g (type ``qk_circuit``, d_model x d_model, rows the query
  side of the bilinear form x_q^T QK x_k): TransformerLens's ``W_Q[h] @ W_K[h].T`` (its
  W_Q[h] is d_model x d, our W_Q,h transposed);
* ``P.head<h>.ov`` = W_O,h W_V,g (type ``ov_circuit``, d_model x d_model, out x in as every
  slice): TransformerLens's ``W_V[h] @ W_O[h]`` transposed (the same singular values).

The circuits have rank at most d (``head_dim``), so their ESD has d_model - d zero
eigenvalues; fits drop those (``fit_evals_thresh``). They are d_model x d_model float64
arrays (float64 so that their rank is ``head_dim`` to rounding, as for ``intra`` products:
4.7 MB each for GPT-2 small, 134 MB for d_model 4096, so 2 x 32 x 32 of them for a 7B
model is far too much). By default (``circuits=None``) they are added unless they would
take more than :data:`CIRCUIT_LIMIT` (2 GiB), which is an error saying so; pass
``circuits=False`` (or ``heads="no-circuits"``) to add the per-head matrices only (float32,
together as large as the weights they split), ``circuits=True`` to add them whatever their
size.

Layouts recognised (the attention block's prefix is what precedes the projection's name):

* separate ``q_proj`` / ``k_proj`` / ``v_proj`` with ``o_proj`` (Llama, Mistral, Qwen2,
  Gemma) or ``out_proj`` (OPT, BART, CLIP), out x in (PyTorch) or in x out (a Flax/Keras
  ``kernel`` leaf, by its layout);
* fused ``c_attn`` with ``c_proj`` (GPT-2's ``Conv1D``, stored in x out: d_model x 3 d_model;
  found by its shape, as the extracted slice says out x in), q, k, v contiguous in that
  order;
* fused ``qkv_proj`` with ``o_proj`` (Phi-3), out x in, q, k, v contiguous
  (num_heads * d, then num_kv_heads * d twice);
* BERT / ViT ``<attention>.self.query`` / ``.key`` / ``.value`` (ViT: ``attention.attention``)
  with ``<attention>.output.dense``.

Interleaved fused layouts (GPT-NeoX / Falcon ``query_key_value``, which put each head's q, k
and v next to each other) are not split: their head order is the model's own code.

Every new slice's meta holds ``{"attention_head": {"block": P, "role": "q"|"k"|"v"|"o"|
"qk"|"ov", "head": h (or None), "kv_head": g, "num_heads", "num_kv_heads", "head_dim",
"of": [source slice names]}}``, so a heads x layers table of any field is a pivot of the
field rows on ``head`` and ``block`` (docs/llm-heads.md).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from diffract._errors import ExtractionError
from diffract._vocab.slices import ParameterType
from diffract.extract.derived import derived_leaf
from diffract.extract.lora import as_numpy

#: the most bytes the QK/OV circuits may take when ``circuits`` is not given (2 GiB)
CIRCUIT_LIMIT = 2 * 2**30

#: the types of the slices this module adds
ATTENTION_HEAD = ParameterType.from_string("attention_head")
QK_CIRCUIT = ParameterType.from_string("qk_circuit")
OV_CIRCUIT = ParameterType.from_string("ov_circuit")

#: config keys (config.json, ``PretrainedConfig`` attributes) in the order they are tried
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
_KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads")
_WIDTH_KEYS = ("hidden_size", "n_embd", "d_model", "dim")

#: separate projections: (q, k, v) suffixes and the output projections paired with them
_SEPARATE = (("q_proj", "k_proj", "v_proj"), ("o_proj", "out_proj"))
#: BERT / ViT: query, key, value; the output projection is ``<parent>.output.dense``
_BERT: tuple[tuple[str, str, str], tuple[str, ...]] = (("query", "key", "value"), ())
_FUSED = {"c_attn": ("c_proj",), "qkv_proj": ("o_proj",)}
_WEIGHT = re.compile(r"^(?P<block>.+)\.(?P<proj>[A-Za-z_]+)\.(?:weight|kernel)$")


@dataclass(frozen=True)
class HeadConfig:
    """How the attention weights split into heads.

    Attributes:
        num_heads: query heads per layer.
        num_kv_heads: key/value heads (GQA; MQA is 1); None: ``num_heads``.
        head_dim: width of a head; None: the query weight's rows / ``num_heads``.
        circuits: also add each head's QK and OV circuits (d_model x d_model each): True,
            False, or None (default: add them unless they exceed :data:`CIRCUIT_LIMIT`,
            which is then an error).
    """

    num_heads: int
    num_kv_heads: int | None = None
    head_dim: int | None = None
    circuits: bool | None = None

    def __post_init__(self) -> None:
        for key in ("num_heads", "num_kv_heads", "head_dim"):
            v = getattr(self, key)
            if v is None and key != "num_heads":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ExtractionError(f"heads: {key} must be a positive int, got {v!r}")
        kv = self.kv_heads
        if self.num_heads % kv:
            raise ExtractionError(
                f"heads: num_heads={self.num_heads} is not a multiple of num_kv_heads={kv} "
                "(grouped-query attention shares each key/value head among a whole group)"
            )
        if self.circuits is not None and not isinstance(self.circuits, bool):
            raise ExtractionError(f"heads: circuits must be a bool or None, got {self.circuits!r}")

    @property
    def kv_heads(self) -> int:
        """The number of key/value heads (``num_kv_heads``, else ``num_heads``)."""
        return int(self.num_kv_heads or self.num_heads)

    @classmethod
    def from_config(cls, config: Any, *, circuits: bool | None = None) -> HeadConfig:
        """The head counts of a model config.

        Args:
            config: a ``transformers.PretrainedConfig``, a dict as in ``config.json``
                (``num_attention_heads`` / ``n_head``, ``num_key_value_heads``,
                ``head_dim`` or ``hidden_size`` / ``n_embd``), or the path of a
                ``config.json`` (or of the folder holding it).
            circuits: also add the QK and OV circuits (see the attribute).

        Returns:
            The head config.

        Raises:
            ExtractionError: the config has no head count, or a file that is not JSON.
        """
        if isinstance(config, (str, os.PathLike)):
            config = _read_config(os.fspath(config))
        get = config.get if isinstance(config, dict) else lambda k: getattr(config, k, None)
        heads = _first(get, _HEAD_KEYS)
        if heads is None:
            raise ExtractionError(
                f"heads: the config has none of {list(_HEAD_KEYS)}; pass "
                "heads=HeadConfig(num_heads=..., num_kv_heads=..., head_dim=...)"
            )
        kv = _first(get, _KV_KEYS)
        if kv is None and get("multi_query") is True:
            kv = 1  # Falcon / GPT-BigCode multi-query attention
        head_dim = get("head_dim")
        if head_dim is None:
            width = _first(get, _WIDTH_KEYS)
            head_dim = int(width) // int(heads) if width is not None else None
        return cls(
            int(heads),
            None if kv is None else int(kv),
            None if head_dim is None else int(head_dim),
            circuits,
        )


def _first(get: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        v = get(k)
        if v is not None:
            return v
    return None


def _read_config(path: str) -> dict[str, Any]:
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ExtractionError(f"heads: no model config at {path!r}") from None
    except (OSError, ValueError) as exc:
        raise ExtractionError(f"heads: cannot read the model config {path!r} ({exc})") from None
    if not isinstance(data, dict):
        raise ExtractionError(f"heads: {path!r} does not hold a JSON object")
    return data


def resolve_head_config(heads: Any, model: Any = None, source: str = "") -> HeadConfig | None:
    """The :class:`HeadConfig` ``heads`` names, or None when ``heads`` is None / False.

    Args:
        heads: None/False (no per-head slices); True (the model's own config: its
            ``.config`` attribute, or ``config.json`` next to a checkpoint path); a
            :class:`HeadConfig`; a config (``PretrainedConfig``, dict, ``config.json`` path);
            or ``"no-circuits"`` (as True, without the QK/OV circuits).
        model: the model given to ``extract``.
        source: the checkpoint path the model was read from, if any.

    Returns:
        The head config, or None.

    Raises:
        ExtractionError: no config can be found, or it has no head count.
    """
    if heads is None or heads is False:
        return None
    if isinstance(heads, HeadConfig):
        return heads
    if heads is True or heads == "no-circuits":
        circuits = None if heads is True else False
        found = getattr(model, "config", None)
        if found is not None and not isinstance(found, (str, bytes)):
            return HeadConfig.from_config(found, circuits=circuits)
        for path in (model, source):
            if isinstance(path, (str, os.PathLike)) and os.path.exists(path):
                p = os.fspath(path)
                folder = p if os.path.isdir(p) else os.path.dirname(os.path.abspath(p))
                if os.path.isfile(os.path.join(folder, "config.json")):
                    return HeadConfig.from_config(folder, circuits=circuits)
        raise ExtractionError(
            "heads=True: the model has no .config and no config.json next to its checkpoint; "
            "pass heads=HeadConfig(num_heads=..., num_kv_heads=...) or a config"
        )
    if isinstance(heads, (dict, str, os.PathLike)) or hasattr(heads, "num_attention_heads"):
        return HeadConfig.from_config(heads)
    raise ExtractionError(
        f"heads must be None, True, a HeadConfig, a model config or a config.json path, "
        f"got {type(heads).__name__}"
    )


@dataclass
class _Block:
    """The attention weights of one block: q/k/v as out x in matrices, o as out x in."""

    prefix: str
    like: Any
    q: np.ndarray | None = None
    k: np.ndarray | None = None
    v: np.ndarray | None = None
    o: np.ndarray | None = None
    names: tuple[str, ...] = ()


def _out_in(leaf: Any) -> np.ndarray:
    w = as_numpy(leaf.array, np.float64)
    if w.ndim != 2:
        raise ExtractionError(f"heads: {leaf.name!r} is not a matrix (shape {tuple(w.shape)})")
    return w.T if leaf.layout == "in_out" else w


def _blocks(leaves: list[Any], cfg: HeadConfig) -> list[_Block]:
    """The attention blocks among ``leaves``, their q/k/v/o as out x in float64 matrices."""
    by_block: dict[str, dict[str, Any]] = {}
    for leaf in leaves:
        m = _WEIGHT.match(leaf.name)
        if m and len(leaf.shape) == 2:
            by_block.setdefault(m["block"], {})[m["proj"]] = leaf
    blocks = []
    for prefix, projs in by_block.items():
        b = _separate_block(prefix, projs, by_block)
        if b is not None:
            blocks.append(b)
            continue
        for fused, fused_outs in _FUSED.items():
            if fused in projs:
                blocks.append(_fused_block(prefix, projs, fused, fused_outs, cfg))
    return blocks


def _separate_block(
    prefix: str, projs: dict[str, Any], by_block: dict[str, dict[str, Any]]
) -> _Block | None:
    """A block with separate q/k/v weights (Llama-style or BERT-style names), or None."""
    for (q, k, v), outs in (_SEPARATE, _BERT):
        if not (q in projs or k in projs or v in projs):
            continue
        b = _Block(prefix, next(projs[p] for p in (q, k, v) if p in projs))
        b.q, b.k, b.v = (_out_in(projs[p]) if p in projs else None for p in (q, k, v))
        if outs:
            o = next((projs[p] for p in outs if p in projs), None)
        else:  # BERT / ViT: <attention>.self.query ... with <attention>.output.dense
            o = by_block.get(prefix.rpartition(".")[0] + ".output", {}).get("dense")
        b.o = None if o is None else _out_in(o)
        b.names = tuple(projs[p].name for p in (q, k, v) if p in projs)
        b.names += () if o is None else (o.name,)
        return b
    return None


def _fused_block(
    prefix: str, projs: dict[str, Any], fused: str, outs: tuple[str, ...], cfg: HeadConfig
) -> _Block:
    """A block with a fused q/k/v weight: split on the out axis, (H + 2 KV) * d wide."""
    leaf = projs[fused]
    w = as_numpy(leaf.array, np.float64)
    if leaf.layout == "in_out":
        w, conv1d = w.T, False
    else:  # the fused out axis is the wider one: wider columns are GPT-2's Conv1D (in x out)
        conv1d = w.shape[1] > w.shape[0]
        w = w.T if conv1d else w
    d = cfg.head_dim
    if d is None:
        if cfg.kv_heads != cfg.num_heads or w.shape[0] % (3 * cfg.num_heads):
            raise ExtractionError(
                f"heads: cannot split {leaf.name!r} (shape {tuple(leaf.shape)}) without head_dim"
            )
        d = w.shape[0] // (3 * cfg.num_heads)
    nq, nkv = cfg.num_heads * d, cfg.kv_heads * d
    if w.shape[0] != nq + 2 * nkv:
        raise ExtractionError(
            f"heads: the fused q/k/v weight {leaf.name!r} (shape {tuple(leaf.shape)}) does not "
            f"have (num_heads + 2 num_kv_heads) * head_dim = ({cfg.num_heads} + 2*{cfg.kv_heads})"
            f" * {d} = {nq + 2 * nkv} outputs"
        )
    b = _Block(prefix, leaf, w[:nq], w[nq : nq + nkv], w[nq + nkv :])
    o_leaf = next((projs[p] for p in outs if p in projs), None)
    names = [leaf.name]
    if o_leaf is not None:
        # GPT-2's Conv1D stores the output projection in x out too
        b.o = _out_in(o_leaf).T if conv1d and o_leaf.layout != "in_out" else _out_in(o_leaf)
        names.append(o_leaf.name)
    b.names = tuple(names)
    return b


def _check(b: _Block, cfg: HeadConfig) -> int:
    """The head width of block ``b``, checked against every matrix's shape."""
    d = cfg.head_dim
    if d is None:
        ref = b.q if b.q is not None else b.k
        assert ref is not None
        n = cfg.num_heads if b.q is not None else cfg.kv_heads
        if ref.shape[0] % n:
            raise ExtractionError(
                f"heads: {b.prefix}: {ref.shape[0]} query rows do not split into {n} heads"
            )
        d = ref.shape[0] // n
    want = {"q": cfg.num_heads * d, "k": cfg.kv_heads * d, "v": cfg.kv_heads * d}
    for role, rows in want.items():
        m = getattr(b, role)
        if m is not None and m.shape[0] != rows:
            raise ExtractionError(
                f"heads: {b.prefix}: the {role} weight has {m.shape[0]} outputs, not "
                f"{rows} (= {'num_heads' if role == 'q' else 'num_kv_heads'} * head_dim "
                f"{d}); check the config's head counts"
            )
    if b.o is not None and b.o.shape[1] != cfg.num_heads * d:
        raise ExtractionError(
            f"heads: {b.prefix}: the output weight has {b.o.shape[1]} inputs, not "
            f"num_heads * head_dim = {cfg.num_heads * d}"
        )
    return d


def head_slices(leaves: list[Any], cfg: HeadConfig) -> list[Any]:
    """The per-head slices (and circuits) of every attention block among ``leaves``.

    Args:
        leaves: the extracted leaves.
        cfg: the head counts.

    Returns:
        The new leaves (head matrices float32, circuits float64; see the module docstring
        for names, types and meta).

    Raises:
        ExtractionError: no attention weights are found, or their shapes do not fit ``cfg``.
    """
    blocks = _blocks(leaves, cfg)
    if not blocks:
        raise ExtractionError(
            "heads: no attention weights found (q_proj/k_proj/v_proj with o_proj or "
            "out_proj, c_attn with c_proj, qkv_proj with o_proj, or query/key/value with "
            "output.dense)"
        )
    if cfg.circuits is None:
        size = sum(2 * cfg.num_heads * 8 * _width(b) ** 2 for b in blocks)
        if size > CIRCUIT_LIMIT:
            raise ExtractionError(
                f"heads: the QK and OV circuits of {len(blocks)} attention blocks x "
                f"{cfg.num_heads} heads would take {size / 2**30:.1f} GiB (d_model x d_model "
                'float64 each); pass heads="no-circuits" (or HeadConfig(..., circuits=False)) '
                "for the per-head matrices only, or HeadConfig(..., circuits=True) to make them"
            )
        cfg = replace(cfg, circuits=True)
    out: list[Any] = []
    for b in blocks:
        out += _block_slices(b, cfg)
    return out


def _width(b: _Block) -> int:
    """d_model of block ``b`` (the inputs of its q/k/v weights)."""
    m = next(m for m in (b.q, b.k, b.v) if m is not None)
    return int(m.shape[1])


def _block_slices(b: _Block, cfg: HeadConfig) -> list[Any]:
    """The per-head slices and circuits of one attention block."""
    d = _check(b, cfg)
    group = cfg.num_heads // cfg.kv_heads
    base = {
        "block": b.prefix,
        "num_heads": cfg.num_heads,
        "num_kv_heads": cfg.kv_heads,
        "head_dim": d,
        "of": list(b.names),
    }
    out: list[Any] = []

    def add(name: str, m: np.ndarray, ptype: ParameterType, **where: Any) -> None:
        meta = {"attention_head": {**base, **where}}
        # float64 circuits: their rank is head_dim to float64 rounding (as intra slices)
        dtype = np.float32 if ptype == ATTENTION_HEAD else np.float64
        out.append(derived_leaf(b.like, f"{b.prefix}.{name}", m, ptype, meta, dtype))

    for g in range(cfg.kv_heads):
        rows = slice(g * d, (g + 1) * d)
        if b.k is not None:
            add(f"kv_head{g}.k", b.k[rows], ATTENTION_HEAD, role="k", head=None, kv_head=g)
        if b.v is not None:
            add(f"kv_head{g}.v", b.v[rows], ATTENTION_HEAD, role="v", head=None, kv_head=g)
    for h in range(cfg.num_heads):
        g, rows = h // group, slice(h * d, (h + 1) * d)
        kv = slice(g * d, (g + 1) * d)
        at = {"head": h, "kv_head": g}
        if b.q is not None:
            add(f"head{h}.q", b.q[rows], ATTENTION_HEAD, role="q", **at)
        if b.o is not None:
            add(f"head{h}.o", b.o[:, rows], ATTENTION_HEAD, role="o", **at)
        if not cfg.circuits:
            continue
        if b.q is not None and b.k is not None:
            add(f"head{h}.qk", b.q[rows].T @ b.k[kv], QK_CIRCUIT, role="qk", **at)
        if b.v is not None and b.o is not None:
            add(f"head{h}.ov", b.o[:, rows] @ b.v[kv], OV_CIRCUIT, role="ov", **at)
    return out


_HEAD_NAME = re.compile(r"^(?P<block>.+)\.(?:head|kv_head)(?P<head>\d+)\.(?P<role>q|k|v|o|qk|ov)$")


def head_grid(names: Any, values: Any, role: str = "qk") -> tuple[list[str], list[int], np.ndarray]:
    """A heads x blocks table of one field over the per-head slices of one ``role``: the
    data of a heads x layers heatmap.

    Args:
        names: slice names (``<block>.head<h>.<role>`` or ``<block>.kv_head<g>.<role>``;
            others are ignored), e.g. the ``name`` column of ``results.export_table``.
        values: the field's value for each name (None for missing).
        role: ``"q"``, ``"k"``, ``"v"``, ``"o"``, ``"qk"`` or ``"ov"``.

    Returns:
        The blocks (columns, in natural order: ``h.2`` before ``h.10``), the head indices
        (rows, ascending) and the float table (NaN where a value is missing).

    Raises:
        ValueError: an unknown role, or names and values of different lengths.
    """
    from diffract.extract import natural_key

    if role not in ("q", "k", "v", "o", "qk", "ov"):
        raise ValueError(f"role must be one of q, k, v, o, qk, ov; got {role!r}")
    names, values = list(names), list(values)
    if len(names) != len(values):
        raise ValueError(f"{len(names)} names but {len(values)} values")
    cells: dict[tuple[str, int], float] = {}
    for name, v in zip(names, values, strict=True):
        m = _HEAD_NAME.match(str(name))
        if m and m["role"] == role:
            cells[(m["block"], int(m["head"]))] = np.nan if v is None else float(v)
    blocks = sorted({b for b, _ in cells}, key=natural_key)
    heads = sorted({h for _, h in cells})
    grid = np.full((len(heads), len(blocks)), np.nan)
    col, row = {b: j for j, b in enumerate(blocks)}, {h: i for i, h in enumerate(heads)}
    for (b, h), v in cells.items():
        grid[row[h], col[b]] = v
    return blocks, heads, grid
