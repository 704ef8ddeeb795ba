"""The bounded queue between the training loop and the analysis worker, and its policies.

At most ``capacity`` (K) snapshots wait; the worker holds one more while it stores and analyzes
it. When training outpaces analysis and the queue is full, the policy decides which snapshot
is skipped (each skip is counted, with its step):

``"thin"`` (default)
    The new snapshot always enters; the waiting snapshot whose removal leaves the smallest
    gap in the step axis goes (the gap between its neighbours: the previous waiting step, or
    the step the worker took last, and the next one, or the new step; ties drop the older).
    Under sustained overload the analyzed steps stay spread over the whole run rather than
    bunched at its start or its end.
``"drop_oldest"``
    The new snapshot enters; the oldest waiting one goes (the latest state is always
    analyzed).
``"drop_new"``
    The new snapshot is skipped (the waiting ones stay); the tracker does not even copy the
    weights when it knows the queue is full.
``"block"``
    The training thread waits for room, at most ``block_timeout`` seconds; after that the
    new snapshot is skipped as with ``"drop_new"``. Training is never blocked for longer.

Memory: the queue never holds more than K snapshots, the worker one, and the call offering a
new one one more for the moment it takes to choose: at most K + 2 copies of the weights exist
at any time.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from typing import Any

from diffract._errors import InvalidArgumentError

#: the queue policies, by name
POLICIES = ("thin", "drop_oldest", "drop_new", "block")


def check_policy(policy: object, capacity: object, block_timeout: object) -> None:
    """Refuse an unknown policy, a capacity that is not an int >= 1, a bad timeout.

    Raises:
        InvalidArgumentError: naming the bad value.
    """
    if policy not in POLICIES:
        raise InvalidArgumentError(f"policy must be one of {POLICIES}, got {policy!r}")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise InvalidArgumentError(f"max_pending must be an int >= 1, got {capacity!r}")
    if (
        isinstance(block_timeout, bool)
        or not isinstance(block_timeout, int | float)
        or block_timeout < 0
    ):
        raise InvalidArgumentError(
            f"block_timeout must be a number of seconds >= 0, got {block_timeout!r}"
        )


class SnapshotQueue:
    """A bounded FIFO of items with a ``step`` attribute, for one producer and one consumer.

    Args:
        capacity: the most items that wait (K).
        policy: one of :data:`POLICIES`.
        block_timeout: the longest ``"block"`` waits for room, in seconds.
    """

    def __init__(self, capacity: int, policy: str = "thin", block_timeout: float = 1.0) -> None:
        check_policy(policy, capacity, block_timeout)
        self.capacity = capacity
        self.policy = policy
        self.block_timeout = float(block_timeout)
        self._items: deque[Any] = deque()
        self._cond = threading.Condition()
        self._busy = False  # the consumer holds an item it took
        self._last_taken: int | None = None
        self._taken: weakref.ref[Any] | None = None  # the item the consumer took last
        self._closed = False
        #: the most items that ever waited at once
        self.peak = 0

    # --- producer --------------------------------------------------------------------------
    def full(self) -> bool:
        """Whether an item offered now would make the policy skip one."""
        with self._cond:
            return len(self._items) >= self.capacity

    def offer(self, item: Any) -> list[Any]:
        """Put ``item`` in the queue, by the policy when it is full.

        Returns:
            The items skipped to make room (``item`` itself when the policy refuses it).
        """
        with self._cond:
            if self._closed:
                return [item]
            if len(self._items) >= self.capacity and self.policy == "block":
                deadline = time.monotonic() + self.block_timeout
                while len(self._items) >= self.capacity and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._cond.wait(left):
                        break
            skipped: list[Any] = []
            if len(self._items) >= self.capacity:
                if self.policy in ("drop_new", "block"):
                    return [item]
                victim = 0 if self.policy == "drop_oldest" else self._thin_victim(item.step)
                skipped.append(self._items[victim])
                del self._items[victim]
            self._items.append(item)
            self.peak = max(self.peak, len(self._items))
            self._cond.notify_all()
            return skipped

    def _thin_victim(self, new_step: int) -> int:
        """The index of the waiting item whose removal leaves the smallest step gap."""
        steps = [it.step for it in self._items]
        best, best_gap = 0, None
        for i in range(len(steps)):
            prev = steps[i - 1] if i > 0 else self._last_taken
            if prev is None:
                continue  # the first step of the run is kept while another can go
            nxt = steps[i + 1] if i + 1 < len(steps) else new_step
            gap = nxt - prev
            if best_gap is None or gap < best_gap:
                best, best_gap = i, gap
        return best

    # --- consumer --------------------------------------------------------------------------
    def take(self, stop: threading.Event, poll: float = 0.1) -> Any | None:
        """The oldest waiting item (marked in progress), or None once ``stop`` is set and
        nothing waits."""
        with self._cond:
            while not self._items:
                if stop.is_set() or self._closed:
                    return None
                self._cond.wait(poll)
            item = self._items.popleft()
            self._busy = True
            self._last_taken = item.step
            try:
                self._taken = weakref.ref(item)
            except TypeError:  # an item without weak references: holds() sees it waiting only
                self._taken = None
            self._cond.notify_all()
            return item

    def done(self) -> None:
        """The consumer finished the item it took."""
        with self._cond:
            self._busy = False
            self._cond.notify_all()

    # --- both --------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Items waiting (not counting the one in progress)."""
        with self._cond:
            return len(self._items)

    @property
    def busy(self) -> bool:
        """Whether the consumer is working on an item."""
        with self._cond:
            return self._busy

    def holds(self, item: Any) -> bool:
        """Whether ``item`` was accepted: it waits, or the consumer took it last.

        What the producer asks after an :meth:`offer` that did not return (a
        ``KeyboardInterrupt`` while ``"block"`` waited, or at any point of the call): the
        answer is read from the queue itself, so it is right wherever the interrupt came.
        The consumer cannot have taken a later item than the producer's last one.
        """
        with self._cond:
            if any(it is item for it in self._items):
                return True
            return self._taken is not None and self._taken() is item

    def steps(self) -> list[int]:
        """The steps of the waiting items, oldest first."""
        with self._cond:
            return [it.step for it in self._items]

    def join(self, timeout: float | None = None) -> bool:
        """Wait until nothing waits and nothing is in progress.

        Returns:
            True when the queue drained, False at the timeout.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._items or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.1 if left is None else min(left, 0.1))
            return True

    def clear(self) -> list[Any]:
        """Remove every waiting item; returns them."""
        with self._cond:
            items = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return items

    def close(self) -> None:
        """Refuse further items (offers return them as skipped) and wake every waiter."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
