"""Naming schemes and model layouts: which parameters of a stored transformer form each
layer, found from their names and shapes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from diffract.sampling.base import SamplingError

#: ``<prefix><layer|layers|h|block|blocks>.<index>.<rest>``: what a per-layer parameter looks like
_LAYER_NAME = re.compile(
    r"^(?P<prefix>(?:.*\.)?)(?:layer|layers|h|block|blocks)\.(?P<idx>\d+)\.(?P<rest>.+)$"
)


@dataclass(frozen=True)
class NamingScheme:
    """How one family of checkpoints names the parts of a transformer block.

    Each entry is a module path relative to the layer (``<prefix>layer.<i>.``); the
    parameter names are ``<path>.weight`` and optional ``<path>.bias``. Weights are
    ``(out, in)`` as in PyTorch. ``ffn_in`` modules have the intermediate channels as
    rows (several for gated FFNs), ``ffn_out`` as columns.
    """

    name: str
    query: str
    key: str
    value: str
    attn_out: str
    ffn_in: tuple[str, ...]
    ffn_out: str

    def attention_modules(self) -> tuple[str, ...]:
        """Module names of the attention subblock (query, key, value, output)."""
        return (self.query, self.key, self.value, self.attn_out)

    def ffn_modules(self) -> tuple[str, ...]:
        """Module names of the FFN subblock (up/gate/down projections)."""
        return (*self.ffn_in, self.ffn_out)


#: the naming rules :func:`candidates_from_model` understands, tried in this order
NAMING_SCHEMES: tuple[NamingScheme, ...] = (
    NamingScheme(
        name="bert",
        query="attention.self.query",
        key="attention.self.key",
        value="attention.self.value",
        attn_out="attention.output.dense",
        ffn_in=("intermediate.dense",),
        ffn_out="output.dense",
    ),
    NamingScheme(
        name="llama",
        query="self_attn.q_proj",
        key="self_attn.k_proj",
        value="self_attn.v_proj",
        attn_out="self_attn.o_proj",
        ffn_in=("mlp.gate_proj", "mlp.up_proj"),
        ffn_out="mlp.down_proj",
    ),
)


@dataclass(frozen=True)
class LayerLayout:
    """The parameter names of one layer: ``{module path: {"weight": name, "bias": name}}``."""

    index: int
    prefix: str
    attention: Mapping[str, Mapping[str, str]]
    ffn: Mapping[str, Mapping[str, str]]
    other: tuple[str, ...]
    intermediate_size: int
    num_heads: int
    num_kv_heads: int


@dataclass(frozen=True)
class ModelLayout:
    """What :func:`model_layout` found: scheme, widths, heads, and each layer's names."""

    scheme: NamingScheme
    hidden_width: int
    head_dim: int
    layers: Mapping[int, LayerLayout] = field(default_factory=dict)


def _match_layers(shapes: Mapping[str, Sequence[int]]) -> dict[int, tuple[str, dict[str, str]]]:
    """``{layer: (prefix, {rest: full name})}`` of every per-layer parameter."""
    out: dict[int, tuple[str, dict[str, str]]] = {}
    for name in shapes:
        m = _LAYER_NAME.match(name)
        if m is None:
            continue
        idx = int(m["idx"])
        prefix = name[: len(name) - len(m["rest"])]
        entry = out.setdefault(idx, (prefix, {}))
        if entry[0] == prefix:
            entry[1][m["rest"]] = name
    return out


def model_layout(
    shapes: Mapping[str, Sequence[int]],
    *,
    num_heads: int | None = None,
    head_dim: int | None = None,
) -> ModelLayout:
    """Find the transformer blocks in ``{parameter name: shape}``.

    A layer is a run of names ``<prefix><layer|layers|h|block|blocks>.<i>.<rest>``; its
    attention and FFN modules are recognized by the first of :data:`NAMING_SCHEMES` whose
    query, key, value, output and FFN weights are all present. The number of heads is
    not in the shapes: give ``num_heads`` (query heads) or ``head_dim``; KV heads are
    ``key rows / head_dim`` (GQA when fewer than the query heads).
    """
    layers = _match_layers(shapes)
    if not layers:
        raise SamplingError(
            "no transformer layers found: parameter names must look like "
            "'<prefix>layer.<i>.<module>.weight' (also 'layers', 'h', 'block', 'blocks')"
        )
    first = layers[min(layers)][1]
    scheme = _scheme_of(min(layers), first)
    q_shape = tuple(shapes[first[f"{scheme.query}.weight"]])
    hidden = int(q_shape[1])
    if head_dim is None:
        head_dim = _head_dim(q_shape, num_heads)
    out = {
        idx: _layer_layout(idx, prefix, rest, scheme, shapes, head_dim)
        for idx, (prefix, rest) in sorted(layers.items())
    }
    return ModelLayout(scheme=scheme, hidden_width=hidden, head_dim=head_dim, layers=out)


def _scheme_of(idx: int, names: Mapping[str, str]) -> NamingScheme:
    """The first naming scheme whose attention and FFN weights are all among ``names``."""
    for s in NAMING_SCHEMES:
        if all(f"{m}.weight" in names for m in (*s.attention_modules(), *s.ffn_modules())):
            return s
    raise SamplingError(
        f"layer {idx} matches none of the naming schemes "
        f"{[s.name for s in NAMING_SCHEMES]}; its parameters are {sorted(names)[:12]}"
    )


def _head_dim(q_shape: tuple[int, ...], num_heads: int | None) -> int:
    if num_heads is None:
        raise SamplingError(
            "the number of attention heads is not in the weight shapes: pass num_heads= "
            "(e.g. num_heads=12 for MiniLM, the 'num_attention_heads' of its config.json)"
        )
    if q_shape[0] % num_heads:
        raise SamplingError(f"num_heads={num_heads} does not divide the query rows {q_shape[0]}")
    return int(q_shape[0] // num_heads)


def _layer_layout(
    idx: int,
    prefix: str,
    rest: Mapping[str, str],
    scheme: NamingScheme,
    shapes: Mapping[str, Sequence[int]],
    head_dim: int,
) -> LayerLayout:
    """One layer's modules under ``scheme`` (weights and biases), heads from the q/k rows."""

    def group(mods: Iterable[str]) -> dict[str, dict[str, str]]:
        g: dict[str, dict[str, str]] = {}
        for m in mods:
            if f"{m}.weight" not in rest:
                raise SamplingError(f"layer {idx} lacks {m}.weight (scheme {scheme.name})")
            g[m] = {"weight": rest[f"{m}.weight"]}
            if f"{m}.bias" in rest:
                g[m]["bias"] = rest[f"{m}.bias"]
        return g

    attention = group(scheme.attention_modules())
    ffn = group(scheme.ffn_modules())
    used = {n for g in (attention, ffn) for d in g.values() for n in d.values()}
    q_rows = int(shapes[attention[scheme.query]["weight"]][0])
    k_rows = int(shapes[attention[scheme.key]["weight"]][0])
    if q_rows % head_dim or k_rows % head_dim:
        raise SamplingError(f"layer {idx}: head_dim={head_dim} does not divide q/k rows")
    return LayerLayout(
        index=idx,
        prefix=prefix,
        attention=attention,
        ffn=ffn,
        other=tuple(sorted(n for n in rest.values() if n not in used)),
        intermediate_size=int(shapes[ffn[scheme.ffn_in[0]]["weight"]][0]),
        num_heads=q_rows // head_dim,
        num_kv_heads=k_rows // head_dim,
    )
