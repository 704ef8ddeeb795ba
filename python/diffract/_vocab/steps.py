"""The step axis of tracked training runs: how a checkpoint says which run and step it is.

A tracked checkpoint (``session.track(...)``, :mod:`diffract.tracking`) is an ordinary model
whose ``meta`` holds ``{"track": {"run": <run name>, "step": <int >= 0>}}``. Everything that
orders checkpoints (exports, panels, the sidebar) orders them by that step, not by the id's
string, through :func:`step_of` and :func:`order_by_step`. Models without it keep the seed's
rule (their ids sort as strings) and come after every tracked checkpoint of the same listing.

A checkpoint a tracker wrote is **incomplete** until the tracker commits its step mark (a store
document of kind :data:`STEP_MARK_KIND` named by the model id, recording the model's ``added``
time): after a crash mid-step its weights are stored but its fields may be missing.
:func:`checkpoint_states` and :func:`incomplete_checkpoints` are the one store-level check every
reader uses (panels, figures, the sidebar) to leave those out; :mod:`diffract.tracking.ledger`
writes the marks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: the key of a model's ``meta`` that holds its run and step
TRACK_KEY = "track"
#: the kind of the store documents that mark a tracked step committed (named by the model id)
STEP_MARK_KIND = "diffract.tracking.step"
#: the kind of the store documents that say a tracker writes a run (named by the run)
RUN_MARK_KIND = "diffract.tracking.run"


def track_of(meta: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """``(run, step)`` of a model's meta, or None for a model that is not a tracked checkpoint."""
    if not isinstance(meta, Mapping):
        return None
    track = meta.get(TRACK_KEY)
    if not isinstance(track, Mapping):
        return None
    run, step = track.get("run"), track.get("step")
    if not isinstance(run, str) or isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None
    return run, step


def step_of(meta: Mapping[str, Any] | None) -> int | None:
    """The training step of a model's meta, or None when it is not a tracked checkpoint."""
    tracked = track_of(meta)
    return None if tracked is None else tracked[1]


def order_by_step(
    ids: Iterable[str], meta_of: Callable[[str], Mapping[str, Any] | None]
) -> list[str]:
    """``ids`` ordered as checkpoints: tracked ones by (run, step), then the rest by string.

    Args:
        ids: model ids.
        meta_of: the ``meta`` of a model id (None when it has none).

    Returns:
        The ids, tracked checkpoints first in (run, step) order, then untracked ids sorted.
    """
    tracked: list[tuple[str, int, str]] = []
    plain: list[str] = []
    for mid in ids:
        t = track_of(meta_of(mid))
        if t is None:
            plain.append(mid)
        else:
            tracked.append((t[0], t[1], mid))
    return [mid for _, _, mid in sorted(tracked)] + sorted(plain)


def checkpoint_states(store: Any) -> dict[str, tuple[str, int, bool]]:
    """Every tracked checkpoint of ``store`` as it was last refreshed, and whether it is committed.

    A checkpoint is committed when its step mark matches it (same ``added`` time, so a removed
    and re-added model is not taken for a finished one), or when no tracker wrote its run (no
    :data:`RUN_MARK_KIND` document and no step mark of the run: checkpoints added by hand);
    otherwise it is incomplete.

    Args:
        store: a :class:`~diffract.store.Store` (``session.store``), read as it is.

    Returns:
        model id -> ``(run, step, committed)``, in the store's model order.
    """
    marks = store.documents(STEP_MARK_KIND)
    by_tracker = set(store.documents(RUN_MARK_KIND)) | {_mark(d).get("run") for d in marks.values()}
    out: dict[str, tuple[str, int, bool]] = {}
    for mid, info in store.models().items():
        tracked = track_of(info.get("meta"))
        if tracked is None:
            continue
        mark = _mark(marks.get(mid))
        committed = tracked[0] not in by_tracker or (
            bool(mark) and mark.get("added") == info.get("added")
        )
        out[mid] = (tracked[0], tracked[1], committed)
    return out


def incomplete_checkpoints(store: Any) -> dict[str, tuple[str, int]]:
    """The incomplete checkpoints of every run in ``store`` (as it was last refreshed).

    What readers of the store leave out: the weights of a step whose analysis had not
    finished when its process died (or is still going on).

    Args:
        store: a :class:`~diffract.store.Store` (``session.store``).

    Returns:
        model id -> ``(run, step)``.
    """
    return {
        mid: (run, step) for mid, (run, step, done) in checkpoint_states(store).items() if not done
    }


def _mark(doc: str | None) -> dict[str, Any]:
    """A step mark's JSON record ({} when it is not one)."""
    if doc is None:
        return {}
    try:
        record = json.loads(doc)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}
