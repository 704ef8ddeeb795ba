"""Copy a store to another backend, losslessly: models, slices, weights, fields, documents."""

from __future__ import annotations

from collections import defaultdict

from diffract.store._base import Batch, Store


def copy_store(src: Store, dst: Store, *, batch_values: int = 50_000) -> dict[str, int]:
    """Write everything of ``src`` into ``dst`` (model by model, then fields in batches).

    Weights that ``src`` references in a checkpoint file stay references. Returns counts.
    """
    src.refresh()
    counts = {"models": 0, "slices": 0, "values": 0, "documents": 0}
    for model_id, meta in src.models().items():
        slices = src.slices(model_id)
        weights = {s.uid: src.weights(s.uid) for s in slices if not s.meta.get("external")}
        dst.commit(Batch(add_models={model_id: meta}, slices=slices, weights=weights))
        counts["models"] += 1
        counts["slices"] += len(slices)
    pending: dict = {}
    for key in sorted(src.keys()):
        pending[key] = src.get(key)
        if len(pending) >= batch_values:
            dst.commit(Batch(fields=pending))
            counts["values"] += len(pending)
            pending = {}
    if pending:
        dst.commit(Batch(fields=pending))
        counts["values"] += len(pending)
    docs = defaultdict(dict)
    for (kind, name), text in src._state.documents.items():
        docs[(kind, name)] = text
    if docs:
        dst.commit(Batch(documents=dict(docs)))
        counts["documents"] = len(docs)
    return counts
