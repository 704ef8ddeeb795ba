"""The step axis of tracked training runs: how a checkpoint says which run and step it is.

A tracked checkpoint (``session.track(...)``, :mod:`diffract.tracking`) is an ordinary model
whose ``meta`` holds ``{"track": {"run": <run name>, "step": <int >= 0>}}``. Everything that
orders checkpoints (exports, panels, the sidebar) orders them by that step, not by the id's
string, through :func:`step_of` and :func:`order_by_step`. Models without it keep the seed's
rule (their ids sort as strings) and come after every tracked checkpoint of the same listing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: the key of a model's ``meta`` that holds its run and step
TRACK_KEY = "track"


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
