"""Track a training run: snapshot the weights every N steps, analyze them in the background.

Placeholder of the layout; the tracker itself is built in this package (issue 19).
"""

from __future__ import annotations

from typing import Any


class Tracker:  # pragma: no cover - replaced by the tracker implementation
    """Not built yet."""

    def __init__(self, session: Any, run: str, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("diffract.tracking.Tracker is being built (issue 19)")
