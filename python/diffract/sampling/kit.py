"""The kit side of :mod:`diffract.sampling`: candidate libraries from stored transformer
models, materializing selected candidates as models, persisting manifests.

numpy is imported inside the functions that slice weights, never at module import.

Where models live (the *source* / *target* argument, called ``session``):

* a :class:`diffract.Session` -- read through ``session.store`` (or ``session.models``),
  added through ``session.models.add(weights, model_id=...)``;
* a store (:class:`diffract.store.Store`) -- read through ``slices(model_id)`` /
  ``weights(uid)``, added through the path of ``session.models.add`` (its checks apply);
* a plain ``dict`` ``{model_id: {parameter name: ndarray}}`` -- read and written in place
  (no engine needed).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diffract._errors import RESERVED_MODEL_ID_CHARS
from diffract.sampling.records import (
    MODE_REPLACEMENT,
    SOURCE_TEACHER,
    Candidate,
    SamplingError,
    SparseSampleManifest,
    SparseSampleRecord,
    SubblockConfig,
    canonical_json,
    manifest_from_dict,
)

__all__ = [
    "NAMING_SCHEMES",
    "ModelLayout",
    "NamingScheme",
    "candidates_from_model",
    "export_manifest",
    "list_manifests",
    "load_manifest",
    "materialize",
    "model_layout",
    "save_manifest",
    "slice_block",
]

# --- naming schemes -------------------------------------------------------------------------

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
    scheme = next(
        (
            s
            for s in NAMING_SCHEMES
            if all(f"{m}.weight" in first for m in (*s.attention_modules(), *s.ffn_modules()))
        ),
        None,
    )
    if scheme is None:
        raise SamplingError(
            f"layer {min(layers)} matches none of the naming schemes "
            f"{[s.name for s in NAMING_SCHEMES]}; its parameters are {sorted(first)[:12]}"
        )
    q_shape = tuple(shapes[first[f"{scheme.query}.weight"]])
    hidden = int(q_shape[1])
    if head_dim is None:
        if num_heads is None:
            raise SamplingError(
                "the number of attention heads is not in the weight shapes: pass num_heads= "
                "(e.g. num_heads=12 for MiniLM, the 'num_attention_heads' of its config.json)"
            )
        if q_shape[0] % num_heads:
            raise SamplingError(
                f"num_heads={num_heads} does not divide the query rows {q_shape[0]}"
            )
        head_dim = q_shape[0] // num_heads
    out: dict[int, LayerLayout] = {}
    for idx in sorted(layers):
        prefix, rest = layers[idx]

        def group(mods: Iterable[str], rest=rest, idx=idx) -> dict[str, dict[str, str]]:
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
        out[idx] = LayerLayout(
            index=idx,
            prefix=prefix,
            attention=attention,
            ffn=ffn,
            other=tuple(sorted(n for n in rest.values() if n not in used)),
            intermediate_size=int(shapes[ffn[scheme.ffn_in[0]]["weight"]][0]),
            num_heads=q_rows // head_dim,
            num_kv_heads=k_rows // head_dim,
        )
    return ModelLayout(scheme=scheme, hidden_width=hidden, head_dim=head_dim, layers=out)


# --- candidate libraries ----------------------------------------------------------------------


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
    shapes = _Models(session).shapes(model_id)
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
        k = int(attn.get("config", {}).get("num_kv_heads", layer.num_kv_heads))
        if not 1 <= k <= layer.num_kv_heads:
            raise SamplingError(
                f"num_kv_heads={k} is outside 1..{layer.num_kv_heads} at layer {layer_idx}"
            )
        g = layer.num_heads // layer.num_kv_heads
        heads = _kv_heads(weights, layer, scheme, hd, k)
        kv_rows = (heads[:, None] * hd + np.arange(hd)).ravel()
        q_rows = (heads[:, None] * g * hd + np.arange(g * hd)).ravel()
        for mod, rows in ((scheme.query, q_rows), (scheme.key, kv_rows), (scheme.value, kv_rows)):
            for name in layer.attention[mod].values():
                out[name] = np.ascontiguousarray(np.asarray(weights[name])[rows])
        o = layer.attention[scheme.attn_out]
        out[o["weight"]] = np.ascontiguousarray(np.asarray(weights[o["weight"]])[:, q_rows])
        if "bias" in o:
            out[o["bias"]] = np.array(weights[o["bias"]], copy=True)
    ffn = block_config.get("ffn", {})
    if "ffn" in wanted and not ffn.get("no_op", False):
        k = int(ffn.get("config", {}).get("intermediate_size", layer.intermediate_size))
        if not 1 <= k <= layer.intermediate_size:
            raise SamplingError(
                f"intermediate_size={k} is outside 1..{layer.intermediate_size} at layer {layer_idx}"
            )
        ch = _ffn_channels(weights, layer, scheme, k)
        for m in scheme.ffn_in:
            for name in layer.ffn[m].values():
                out[name] = np.ascontiguousarray(np.asarray(weights[name])[ch])
        d = layer.ffn[scheme.ffn_out]
        out[d["weight"]] = np.ascontiguousarray(np.asarray(weights[d["weight"]])[:, ch])
        if "bias" in d:
            out[d["bias"]] = np.array(weights[d["bias"]], copy=True)
    if "other" in wanted:
        for name in layer.other:
            out[name] = np.array(weights[name], copy=True)
    return out


# --- where models live ---------------------------------------------------------------------


class _LazyWeights(Mapping):
    """``{name: ndarray}`` of one stored model, read on first access."""

    def __init__(self, models: _Models, model_id: str, names: Sequence[str]) -> None:
        self._models, self._model_id, self._names = models, model_id, list(names)
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = self._models.array(self._model_id, name)
        return self._cache[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class _Models:
    """One interface over a session, a store, or a ``{model_id: {name: array}}`` dict."""

    def __init__(self, target: Any) -> None:
        self.target = target
        if isinstance(target, MutableMapping):
            self.kind = "dict"
        elif hasattr(target, "models") and hasattr(getattr(target, "models", None), "add"):
            self.kind = "session"
        elif hasattr(target, "slices") and hasattr(target, "weights") and hasattr(target, "commit"):
            self.kind = "store"
        else:
            raise TypeError(
                "expected a diffract Session, a Store, or a dict {model_id: {name: ndarray}}; "
                f"got {type(target).__name__}"
            )

    @property
    def store(self) -> Any:
        if self.kind == "store":
            return self.target
        if self.kind == "session":
            return getattr(self.target, "store", None)
        return None

    def _slices(self, model_id: str) -> dict[str, Any]:
        store = self.store
        if store is not None:
            found = store.slices(model_id)
        else:  # a session without a public store: go through its model view
            found = [s for s in self.target.models.slices() if s.model_id == model_id]
        if not found:
            raise SamplingError(f"model {model_id!r} has no stored slices")
        return {s.name: s for s in found}

    def shapes(self, model_id: str) -> dict[str, tuple[int, ...]]:
        if self.kind == "dict":
            if model_id not in self.target:
                raise SamplingError(f"no model {model_id!r}; models: {sorted(self.target)}")
            return {n: tuple(getattr(a, "shape", ())) for n, a in self.target[model_id].items()}
        return {n: tuple(s.shape) for n, s in self._slices(model_id).items()}

    def weights(self, model_id: str) -> Mapping[str, Any]:
        if self.kind == "dict":
            return self.target[model_id]
        return _LazyWeights(self, model_id, list(self._slices(model_id)))

    def array(self, model_id: str, name: str) -> Any:
        info = self._slices(model_id)[name]
        if self.kind == "session":  # resolves checkpoint-referenced weights too
            return self.target.models.weights(info.uid)
        return self.target.weights(info.uid)

    def has(self, model_id: str) -> bool:
        if self.kind == "dict":
            return model_id in self.target
        store = self.store
        if store is not None:
            return store.has_model(model_id)
        return any(s.model_id == model_id for s in self.target.models.slices())

    def add(
        self, model_id: str, weights: dict[str, Any], *, replace: bool, meta: dict[str, Any]
    ) -> None:
        if self.kind == "dict":
            self.target[model_id] = weights
        elif self.kind == "session":
            self.target.models.add(weights, model_id=model_id, replace=replace, meta=meta)
        else:
            _store_add(self.target, model_id, weights, meta, replace=replace)


def _store_add(
    store: Any,
    model_id: str,
    weights: Mapping[str, Any],
    meta: dict[str, Any],
    *,
    replace: bool = False,
) -> None:
    """Add a ``{name: ndarray}`` model to a bare store (no session needed).

    It goes through :func:`diffract.session.models.add_model`, the path of
    ``session.models.add``: the same model-id, duplicate and meta checks apply, and the
    model's info has the same shape (``meta`` under ``"meta"``).
    """
    from diffract.session.models import add_model

    add_model(store, dict(weights), model_id, replace=replace, meta=meta)


# --- materializing ---------------------------------------------------------------------------

_ID_UNSAFE = re.compile("[" + re.escape("".join(RESERVED_MODEL_ID_CHARS)) + r"\s]")


def _model_id_for(record: SparseSampleRecord, mode: str) -> str:
    base = record.candidate_id
    if mode != MODE_REPLACEMENT:
        base = f"{base}.{record.subblock_name}"
    return _ID_UNSAFE.sub("_", base)


def materialize(
    session: Any,
    manifest_or_records: SparseSampleManifest | Iterable[SparseSampleRecord],
    teacher_id: str,
    *,
    num_heads: int | None = None,
    head_dim: int | None = None,
    scope: str = "block",
    replace: bool = False,
) -> dict[str, SparseSampleRecord]:
    """Add each selected record as a model whose weights are sliced from ``teacher_id``.

    ``manifest_or_records``: a manifest (its ``selected`` records are used) or records.
    ``scope="block"`` stores only the record's layer (subblock mode: only its subblock),
    ``scope="model"`` the whole teacher with that layer replaced. Parameter names are the
    teacher's, so every per-slice field works and cross-model fields compare with the
    teacher. Model ids are the candidate ids (subblock mode: ``<candidate_id>.<subblock>``)
    with the reserved characters ``@ [ ] , /`` and spaces replaced by ``_``. The heads are
    found from the records' ``head_dim`` (or ``num_heads``/``head_dim`` given here).
    Returns ``{model_id: record}``. An existing model id is an error unless ``replace``.
    """
    if scope not in ("block", "model"):
        raise SamplingError(f"scope must be 'block' or 'model', got {scope!r}")
    if isinstance(manifest_or_records, SparseSampleManifest):
        mode, records = manifest_or_records.mode, list(manifest_or_records.selected)
    else:
        records = list(manifest_or_records)
        mode = MODE_REPLACEMENT if all(r.subblock_config is None for r in records) else "subblock"
    models = _Models(session)
    shapes = models.shapes(teacher_id)
    if not records:
        return {}  # nothing selected: nothing to add (the teacher is still checked above)
    if head_dim is None and num_heads is None:
        dims = {
            r.block_config.get("attention", {}).get("config", {}).get("head_dim") for r in records
        }
        dims.discard(None)
        if len(dims) > 1:
            raise SamplingError(f"records disagree on head_dim: {sorted(dims)}; pass head_dim=")
        head_dim = dims.pop() if dims else None
        if head_dim is None:
            raise SamplingError("the records carry no head_dim; pass num_heads= or head_dim=")
    layout = model_layout(shapes, num_heads=num_heads, head_dim=head_dim)
    weights = models.weights(teacher_id)
    done: dict[str, SparseSampleRecord] = {}
    for rec in records:
        mid = _model_id_for(rec, mode)
        if mid in done:
            raise SamplingError(f"two records map to the model id {mid!r}")
        if not replace and models.has(mid):
            raise SamplingError(f"model {mid!r} already exists; pass replace=True to overwrite it")
        subs = None if rec.subblock_config is None else [rec.subblock_name]
        block = slice_block(weights, layout, rec.layer_idx, rec.block_config, subblocks=subs)
        if scope == "model":
            lay = layout.layers[rec.layer_idx]
            groups = {"attention": lay.attention, "ffn": lay.ffn}
            layer_names = set(lay.other) if subs is None else set()
            for g_name, g in groups.items():
                if subs is None or g_name in subs:
                    layer_names |= {n for d in g.values() for n in d.values()}
            full = {n: weights[n] for n in shapes if n not in layer_names}
            full.update(block)
            block = {n: full[n] for n in shapes if n in full}
        meta = {"sampling": {"teacher_id": teacher_id, "sample_id": rec.sample_id, "mode": mode}}
        models.add(mid, block, replace=replace, meta=meta)
        done[mid] = rec
    return done


# --- persisting manifests --------------------------------------------------------------------

#: the document kind manifests are saved under in a store
DOCUMENT_KIND = "sampling_manifest"
_FORMAT = "diffract.sampling.manifest/1"


def _store_of(target: Any) -> Any:
    store = getattr(target, "store", target)
    if not (hasattr(store, "commit") and hasattr(store, "documents")):
        raise TypeError(
            "manifests are saved in a diffract Store (or a Session's store); "
            f"got {type(target).__name__}. To write a file, use export_manifest(manifest, path)"
        )
    return store


def save_manifest(
    target: Any,
    manifest: SparseSampleManifest,
    *,
    label: str | None = None,
    teacher_id: str | None = None,
    models: Mapping[str, SparseSampleRecord] | None = None,
) -> str:
    """Save ``manifest`` in the store of ``target`` (a Session or Store) as a document of
    kind ``"sampling_manifest"`` named by its identity; returns the identity. ``models``
    (what :func:`materialize` returned) records which model holds which sample."""
    from diffract.store import Batch

    store = _store_of(target)
    doc = {
        "format": _FORMAT,
        "label": label,
        "teacher_id": teacher_id,
        "models": {m: r.sample_id for m, r in sorted((models or {}).items())},
        "manifest": manifest.to_dict(),
    }
    store.commit(Batch(documents={(DOCUMENT_KIND, manifest.identity): canonical_json(doc)}))
    return manifest.identity


def _read_doc(text: str) -> dict[str, Any]:
    doc = json.loads(text)
    if doc.get("format") != _FORMAT:
        raise SamplingError(f"not a sampling manifest document (format {doc.get('format')!r})")
    return doc


def load_manifest(target: Any, identity: str) -> SparseSampleManifest:
    """The manifest saved under ``identity`` (a unique, non-empty prefix is enough)."""
    if not isinstance(identity, str):
        raise TypeError(
            f"identity must be a str (a manifest identity or a unique prefix of one), got "
            f"{type(identity).__name__}: {identity!r}"
        )
    if not identity.strip():
        raise SamplingError(
            f"identity {identity!r} is empty: give a saved manifest's identity or a unique "
            "prefix of one (list_manifests() lists them)"
        )
    docs = _store_of(target).documents(DOCUMENT_KIND)
    hits = [k for k in docs if k.startswith(identity)]
    if len(hits) != 1:
        raise SamplingError(
            f"{'no' if not hits else 'more than one'} saved manifest matches {identity!r}; "
            f"saved: {sorted(docs)}"
        )
    return manifest_from_dict(_read_doc(docs[hits[0]])["manifest"])


def list_manifests(target: Any) -> list[dict[str, Any]]:
    """One summary row per saved manifest (for tables, the sidebar and panels): identity,
    label, teacher_id, mode, policy, counts, and the materialized model ids."""
    rows = []
    for ident, text in sorted(_store_of(target).documents(DOCUMENT_KIND).items()):
        doc = _read_doc(text)
        m = doc["manifest"]
        rows.append(
            {
                "identity": ident,
                "label": doc.get("label"),
                "teacher_id": doc.get("teacher_id"),
                "mode": m["mode"],
                "policy": m["policy"],
                "n_eligible": len(m["eligible"]),
                "n_selected": len(m["selected"]),
                "n_excluded": len(m["excluded"]),
                "models": sorted(doc.get("models", {})),
            }
        )
    return rows


def export_manifest(manifest: SparseSampleManifest, path: str | os.PathLike[str]) -> Path:
    """Write ``manifest.to_dict()`` as JSON (sorted keys, indented) to ``path``."""
    p = Path(path)
    p.write_text(
        json.dumps(manifest.to_dict(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    )
    return p
