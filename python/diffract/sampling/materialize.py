"""Materializing selected sampling candidates as models where the teacher lives."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from diffract._errors import RESERVED_MODEL_ID_CHARS
from diffract.sampling.base import MODE_REPLACEMENT, SamplingError
from diffract.sampling.layout import model_layout
from diffract.sampling.library import slice_block
from diffract.sampling.records import SparseSampleManifest, SparseSampleRecord
from diffract.sampling.sources import ModelSource

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
    models = ModelSource(session)
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
