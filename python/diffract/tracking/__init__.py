"""Track a training run: snapshot the weights every N steps, analyze them in the background.

``tracker = session.track("run", fields=["pl_alpha"], every=50)`` then
``tracker.step(model, step=i)`` in the training loop (see :class:`Tracker` and
``docs/tracking.md``). Checkpoints are ordinary models ``<run>-s<step:09d>`` whose meta holds
the step (:mod:`diffract._vocab.steps`).
"""

from __future__ import annotations

from diffract.tracking.adapters import (
    LightningTracking,
    hf_callback,
    keras_callback,
    lightning_callback,
)
from diffract.tracking.alerts import DiagnosisWarning, RuleEvent
from diffract.tracking.ids import STEP_DIGITS, checkpoint_id, parse_checkpoint_id
from diffract.tracking.ledger import (
    DOC_KIND,
    RUN_KIND,
    RunSteps,
    all_runs,
    committed_ids,
    committed_steps,
    complete_scope,
    drop_incomplete,
    incomplete_checkpoints,
    run_steps,
)
from diffract.tracking.policy import POLICIES, SnapshotQueue
from diffract.tracking.snapshot import Snapshot, take_snapshot
from diffract.tracking.status import TrackerStatus
from diffract.tracking.tracker import Tracker

__all__ = [
    "DOC_KIND",
    "POLICIES",
    "RUN_KIND",
    "STEP_DIGITS",
    "DiagnosisWarning",
    "LightningTracking",
    "RuleEvent",
    "RunSteps",
    "Snapshot",
    "SnapshotQueue",
    "Tracker",
    "TrackerStatus",
    "all_runs",
    "checkpoint_id",
    "committed_ids",
    "committed_steps",
    "complete_scope",
    "drop_incomplete",
    "hf_callback",
    "incomplete_checkpoints",
    "keras_callback",
    "lightning_callback",
    "parse_checkpoint_id",
    "run_steps",
    "take_snapshot",
]
