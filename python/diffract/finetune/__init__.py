"""Fine-tune diff: what fine-tuning (full or LoRA) changed in each layer of a base model.

:func:`diff` compares two models (objects, checkpoints or PEFT adapters), :func:`diff_stored`
two models of a session; both return a :class:`DiffResult` (a per-layer table, a summary).
One module per concept: the MP law and the noise level (:mod:`.spectrum`), ranks and the
low-rank rule (:mod:`.rank`), subspace overlap (:mod:`.overlap`), the table (:mod:`.table`).
See ``docs/finetune-diff.md`` for the definitions, thresholds and sources.
"""

from __future__ import annotations

from diffract.finetune.table import COLUMNS, DiffResult, diff, diff_pairs, diff_stored, layer_diff

__all__ = ["COLUMNS", "DiffResult", "diff", "diff_pairs", "diff_stored", "layer_diff"]
