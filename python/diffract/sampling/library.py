"""Candidate libraries from a teacher model's layout, and slicing a layer's weights down
to a candidate block (numpy imported inside the functions that slice)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from diffract.sampling.base import SOURCE_TEACHER, SamplingError
from diffract.sampling.candidates import Candidate, SubblockConfig
from diffract.sampling.layout import LayerLayout, ModelLayout, NamingScheme, model_layout
from diffract.sampling.sources import ModelSource


def _fractions(full: int, values: Sequence[int] | None, fractions: Sequence[float]) -> list[int]:
    if values is None:
        values = [max(1, round(full * f)) for f in fractions]
    return sorted({int(v) for v in values if 1 <= int(v) < full})


def _attention_config(kv: int, layer: LayerLayout, head_dim: int) -> dict[str, Any]:
    return {
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "queries_per_kv": layer.num_heads // layer.num_kv_heads,
    }


def candidates_from_model(
    session: Any,
    model_id: str,
    *,
    num_heads: int | None = None,
    head_dim: int | None = None,
    ffn_sizes: Sequence[int] | None = None,
    ffn_fractions: Sequence[float] = (0.25, 0.5, 0.75),
    kv_heads: Sequence[int] | None = None,
    kv_fractions: Sequence[float] = (0.25, 0.5, 0.75),
    no_op: bool = True,
    pairwise: bool = True,
) -> list[Candidate]:
    """A candidate library from the stored transformer ``model_id`` (its names and shapes).

    Per layer (see :func:`model_layout` for the naming rules): the teacher block
    (``source="self"``); FFNs with fewer intermediate channels (``ffn_sizes``, default
    ``ffn_fractions`` of the teacher's), axis ``ffn.intermediate_size``; attention with
    fewer KV heads (``kv_heads``, default ``kv_fractions``; with no GQA every head is a KV
    head and its query head goes with it), axis ``attention.num_kv_heads``; if ``pairwise``
    every FFN x KV combination (two axes); if ``no_op`` the block with attention disabled
    and with the FFN disabled (axes ``attention.no_op`` / ``ffn.no_op``; the samplers
    exclude these as no-ops, they are listed so the manifest says so).

    Which channels / heads are kept is decided when materializing (by importance, see
    :func:`slice_block`); the configs hold only sizes. Candidate ids are
    ``<model_id>.L<layer>.<variant>``.
    """
    shapes = ModelSource(session).shapes(model_id)
    layout = model_layout(shapes, num_heads=num_heads, head_dim=head_dim)
    cands: list[Candidate] = []
    for idx, layer in layout.layers.items():
        t_attn = _attention_config(layer.num_kv_heads, layer, layout.head_dim)
        t_ffn = {"intermediate_size": layer.intermediate_size}

        def make(
            variant, source, axes, attn=t_attn, ffn=t_ffn, attn_noop=False, ffn_noop=False, idx=idx
        ):
            return Candidate(
                candidate_id=f"{model_id}.L{idx}.{variant}",
                layer_idx=idx,
                hidden_width=layout.hidden_width,
                source=source,
                subblocks=(
                    SubblockConfig(
                        kind="attention", name="attention", config=attn, no_op=attn_noop
                    ),
                    SubblockConfig(kind="ffn", name="ffn", config=ffn, no_op=ffn_noop),
                ),
                changed_axes=axes,
            )

        cands.append(make("teacher", SOURCE_TEACHER, ()))
        sizes = _fractions(layer.intermediate_size, ffn_sizes, ffn_fractions)
        heads = _fractions(layer.num_kv_heads, kv_heads, kv_fractions)
        for f in sizes:
            cands.append(
                make(
                    f"ffn{f}", "ffn_prune", ("ffn.intermediate_size",), ffn={"intermediate_size": f}
                )
            )
        for k in heads:
            attn = _attention_config(k, layer, layout.head_dim)
            cands.append(make(f"kv{k}", "head_prune", ("attention.num_kv_heads",), attn=attn))
            if pairwise:
                for f in sizes:
                    cands.append(
                        make(
                            f"kv{k}.ffn{f}",
                            "head_ffn_prune",
                            ("attention.num_kv_heads", "ffn.intermediate_size"),
                            attn=attn,
                            ffn={"intermediate_size": f},
                        )
                    )
        if no_op:
            cands.append(make("attn-noop", "no_op", ("attention.no_op",), attn_noop=True))
            cands.append(make("ffn-noop", "no_op", ("ffn.no_op",), ffn_noop=True))
    return cands


# --- slicing ---------------------------------------------------------------------------------


def _top(scores: Any, k: int) -> Any:
    """Indices of the ``k`` largest scores (ties: lower index first), in ascending order."""
    import numpy as np

    order = np.lexsort((np.arange(len(scores)), -np.asarray(scores, dtype=np.float64)))
    return np.sort(order[:k])


def _f64(a: Any) -> Any:
    import numpy as np

    return np.asarray(a, dtype=np.float64)


def _ffn_channels(
    weights: Mapping[str, Any], layer: LayerLayout, scheme: NamingScheme, k: int
) -> Any:
    """FFN channel importance: ||rows of the input weights|| * ||column of the output weight||."""
    import numpy as np

    rows = np.zeros(layer.intermediate_size)
    for m in scheme.ffn_in:
        rows += (_f64(weights[layer.ffn[m]["weight"]]) ** 2).sum(axis=1)
    cols = (_f64(weights[layer.ffn[scheme.ffn_out]["weight"]]) ** 2).sum(axis=0)
    return _top(np.sqrt(rows) * np.sqrt(cols), k)


def _kv_heads(
    weights: Mapping[str, Any], layer: LayerLayout, scheme: NamingScheme, head_dim: int, k: int
) -> Any:
    """KV head importance: product of the Frobenius norms of its K and V rows, its query
    heads' Q rows and their columns of the output projection."""
    import numpy as np

    g = layer.num_heads // layer.num_kv_heads
    q = _f64(weights[layer.attention[scheme.query]["weight"]]).reshape(
        layer.num_kv_heads, g * head_dim, -1
    )
    kk = _f64(weights[layer.attention[scheme.key]["weight"]]).reshape(
        layer.num_kv_heads, head_dim, -1
    )
    v = _f64(weights[layer.attention[scheme.value]["weight"]]).reshape(
        layer.num_kv_heads, head_dim, -1
    )
    o = _f64(weights[layer.attention[scheme.attn_out]["weight"]])
    o = o.reshape(o.shape[0], layer.num_kv_heads, g * head_dim).transpose(1, 0, 2)
    score = np.ones(layer.num_kv_heads)
    for part in (q, kk, v, o):
        score *= np.sqrt((part.reshape(layer.num_kv_heads, -1) ** 2).sum(axis=1))
    return _top(score, k)


def _kept_count(subblock: dict[str, Any], key: str, full: int, layer_idx: int) -> int:
    """How many of ``full`` (heads, channels) a subblock config keeps under ``key``
    (all by default); between 1 and ``full``."""
    k = int(subblock.get("config", {}).get(key, full))
    if not 1 <= k <= full:
        raise SamplingError(f"{key}={k} is outside 1..{full} at layer {layer_idx}")
    return k


def _cut(
    out: dict[str, Any],
    weights: Any,
    modules: Mapping[str, Mapping[str, str]],
    inputs: Iterable[tuple[str, Any]],
    output: str,
    cols: Any,
) -> None:
    """Into ``out``: the given rows of every parameter of each input module, and the columns
    ``cols`` of the output module's weight (its bias is copied whole)."""
    import numpy as np

    for mod, rows in inputs:
        for name in modules[mod].values():
            out[name] = np.ascontiguousarray(np.asarray(weights[name])[rows])
    o = modules[output]
    out[o["weight"]] = np.ascontiguousarray(np.asarray(weights[o["weight"]])[:, cols])
    if "bias" in o:
        out[o["bias"]] = np.array(weights[o["bias"]], copy=True)


def slice_block(
    weights: Mapping[str, Any],
    layout: ModelLayout,
    layer_idx: int,
    block_config: Mapping[str, Any],
    *,
    subblocks: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The weights of layer ``layer_idx`` reshaped to ``block_config`` (NumPy arrays).

    ``block_config`` is a record's ``block_config`` (``{"attention": {...}, "ffn": {...}}``).
    FFN: the ``intermediate_size`` channels of largest importance (``||input rows|| *
    ||output column||``) are kept, in their original order. Attention: the
    ``num_kv_heads`` KV heads of largest importance (product of the Frobenius norms of their
    Q, K, V rows and output columns) with their query heads. A ``no_op`` subblock has no
    weights. Norms and other parameters of the layer are copied unchanged; ``subblocks``
    limits the result to the named subblocks. Names are the teacher's, so cross-model
    fields line up with the teacher's slices. Ties in importance go to the lower index.
    """
    import numpy as np

    layer = layout.layers.get(layer_idx)
    if layer is None:
        raise SamplingError(f"the teacher has no layer {layer_idx}; it has {sorted(layout.layers)}")
    scheme, hd = layout.scheme, layout.head_dim
    wanted = set(subblocks) if subblocks is not None else {"attention", "ffn", "other"}
    out: dict[str, Any] = {}
    attn = block_config.get("attention", {})
    if "attention" in wanted and not attn.get("no_op", False):
        k = _kept_count(attn, "num_kv_heads", layer.num_kv_heads, layer_idx)
        g = layer.num_heads // layer.num_kv_heads
        heads = _kv_heads(weights, layer, scheme, hd, k)
        kv_rows = (heads[:, None] * hd + np.arange(hd)).ravel()
        q_rows = (heads[:, None] * g * hd + np.arange(g * hd)).ravel()
        inputs = ((scheme.query, q_rows), (scheme.key, kv_rows), (scheme.value, kv_rows))
        _cut(out, weights, layer.attention, inputs, scheme.attn_out, q_rows)
    ffn = block_config.get("ffn", {})
    if "ffn" in wanted and not ffn.get("no_op", False):
        k = _kept_count(ffn, "intermediate_size", layer.intermediate_size, layer_idx)
        ch = _ffn_channels(weights, layer, scheme, k)
        _cut(out, weights, layer.ffn, ((m, ch) for m in scheme.ffn_in), scheme.ffn_out, ch)
    if "other" in wanted:
        for name in layer.other:
            out[name] = np.array(weights[name], copy=True)
    return out
