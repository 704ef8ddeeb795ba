"""Which steps of a tracked run are committed: the crash-safety record.

A step is stored in two kinds of commits: ``models.add`` (the weights and the model's meta
``{"track": {"run", "step"}}``, one atomic commit) and then the runs of ``compute.apply``
(one commit per chunk). After the last of them the worker commits a store document of kind
:data:`DOC_KIND`, named by the checkpoint's model id, that records the run, the step, the
fields and the model's ``added`` time. A step is **committed** when its model is stored and
its document matches it (same ``added`` time, so a removed and re-added model is not taken
for a finished one); a tracked model without a matching document is **incomplete**: the
process died (or the analysis failed) between the two. Every store commit is atomic, so
after a crash a step is either absent, incomplete (weights stored, fields missing or partly
stored) or committed. :func:`run_steps` tells them apart; a new tracker for the run finishes
or removes the incomplete ones (its ``incomplete=`` argument), and :func:`drop_incomplete`
removes them without one.

A tracker also commits, before its first step, a document of kind :data:`RUN_KIND` named by
the run: the run is **tracked by a tracker**, so its models without a mark are incomplete.
Checkpoints of a run no tracker wrote (models added by hand with the ``track`` meta, which
never get marks) count as committed. Readers (the panels, the sidebar's summary) leave out
the incomplete checkpoints: :func:`incomplete_checkpoints` on a store (it lives in
:mod:`diffract._vocab.steps`, so the static figures of :mod:`diffract.viz` use it too),
:func:`complete_scope` on a scope.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from diffract._vocab.steps import (
    RUN_MARK_KIND,
    STEP_MARK_KIND,
    checkpoint_states,
    incomplete_checkpoints,
)
from diffract.store import Batch
from diffract.tracking.ids import literal_ids

#: the kind of the store documents that mark a step committed
DOC_KIND = STEP_MARK_KIND
#: the kind of the store documents that say a tracker writes a run (named by the run)
RUN_KIND = RUN_MARK_KIND


@dataclass
class RunSteps:
    """The stored steps of one run.

    Attributes:
        committed: step -> model id of the committed steps.
        incomplete: step -> model id of the tracked models whose analysis did not finish.
    """

    committed: dict[int, str] = field(default_factory=dict)
    incomplete: dict[int, str] = field(default_factory=dict)

    @property
    def stored(self) -> set[int]:
        """Every step with a stored model (committed or not)."""
        return set(self.committed) | set(self.incomplete)

    @property
    def last(self) -> int | None:
        """The largest stored step, or None for a run with none."""
        return max(self.stored) if self.stored else None


def run_steps(session: Any, run: str) -> RunSteps:
    """The committed and incomplete steps of ``run`` in ``session``'s store (re-read).

    Args:
        session: a :class:`~diffract.Session` (read-only ones too).
        run: the run's name.

    Returns:
        Its :class:`RunSteps`.
    """
    store = session.store
    store.refresh()
    return all_runs(store).get(run, RunSteps())


def all_runs(store: Any) -> dict[str, RunSteps]:
    """Every tracked run of ``store`` as it was last refreshed: run -> :class:`RunSteps`.

    A tracked model is committed when its mark matches it, or when no tracker wrote its run
    (no :data:`RUN_KIND` document and no mark of the run: checkpoints added by hand);
    otherwise it is incomplete (:func:`diffract._vocab.steps.checkpoint_states`).

    Args:
        store: a :class:`~diffract.store.Store` (``session.store``), read as it is.

    Returns:
        The runs, each with its committed and incomplete steps.
    """
    out: dict[str, RunSteps] = {}
    for mid, (run, step, committed) in checkpoint_states(store).items():
        steps = out.setdefault(run, RunSteps())
        (steps.committed if committed else steps.incomplete)[step] = mid
    return out


def complete_scope(scope: Any, keep: Sequence[str] = ()) -> Any:
    """``scope`` without the incomplete checkpoints of tracked runs (re-read).

    Args:
        scope: a session or scope.
        keep: model ids kept even when incomplete (models a caller named).

    Returns:
        ``scope`` itself when it holds no incomplete checkpoint, else a narrower scope.
    """
    store = scope.session.store
    store.refresh()
    hide = set(incomplete_checkpoints(store)).difference(keep)
    ids = scope.models.ids()
    if hide.isdisjoint(ids):
        return scope
    return scope.filter(model_ids=literal_ids(m for m in ids if m not in hide))


def mark_run(session: Any, run: str) -> None:
    """Commit the document that says a tracker writes ``run`` (once; before its first step).

    Args:
        session: the writing session.
        run: the run's name.
    """
    store = session.store
    if run not in store.documents(RUN_KIND):
        record = {"run": run, "started": time.time()}
        store.commit(Batch(documents={(RUN_KIND, run): json.dumps(record)}))


def mark_committed(session: Any, run: str, step: int, model_id: str, fields: Sequence[str]) -> None:
    """Commit the document that says step ``step`` (model ``model_id``) is complete.

    Args:
        session: the writing session.
        run: the run's name.
        step: the step.
        model_id: its checkpoint's model id.
        fields: the fields computed on it.
    """
    added = session.store.models()[model_id].get("added")
    record = {"run": run, "step": step, "fields": list(fields), "added": added, "at": time.time()}
    session.store.commit(Batch(documents={(DOC_KIND, model_id): json.dumps(record)}))


def committed_steps(session: Any, run: str) -> list[int]:
    """The committed steps of ``run``, in order (what a reader of the store should show).

    Args:
        session: a :class:`~diffract.Session`.
        run: the run's name.

    Returns:
        The steps.
    """
    return sorted(run_steps(session, run).committed)


def committed_ids(session: Any, run: str) -> list[str]:
    """The model ids of the committed steps of ``run``, in step order.

    Args:
        session: a :class:`~diffract.Session`.
        run: the run's name.

    Returns:
        The ids.
    """
    committed = run_steps(session, run).committed
    return [committed[s] for s in sorted(committed)]


def drop_incomplete(session: Any, run: str) -> list[int]:
    """Remove the incomplete steps of ``run`` (their models and whatever fields they have).

    Args:
        session: a writable :class:`~diffract.Session`.
        run: the run's name.

    Returns:
        The steps removed, in order.

    Raises:
        StoreError: the session is read-only.
    """
    incomplete = run_steps(session, run).incomplete
    ids = [incomplete[s] for s in sorted(incomplete)]
    if ids:
        session.models.erase(*ids)
    return sorted(incomplete)
