"""The time left of a run, estimated from the kernel calls made so far.

The work of a run is known before it starts: one call per planned kernel and slice, of a
size (the slice's bytes). :class:`EtaEstimator` learns each kernel's cost per byte from
its calls (a kernel not seen yet costs the average of those seen), converts the busy time
left to wall time with the ratio observed so far (threads side by side, reading, commits),
and smooths the result: each new estimate moves the previous one, counted down, part of
the way. It says nothing before ``min_samples`` calls.

:meth:`EtaEstimator.bounds` gives a range around the estimate instead of one number, and
none until ``min_share`` of the planned work is done: early on, and while kernels that have
not run yet are left (their cost is a guess), the range is wide, so a user is not told a
confident number that later swings by a factor of three.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ETA_MIN_SAMPLES", "ETA_MIN_SHARE", "ETA_SMOOTHING", "EtaEstimator"]

#: weight of the newest raw estimate in the smoothed one
ETA_SMOOTHING = 0.3
#: kernel calls measured before an ETA is given
ETA_MIN_SAMPLES = 3
#: share of the planned work done before a range is given
ETA_MIN_SHARE = 0.05
#: relative half-width of the range when the cost of the work left is well measured
ETA_BASE_SPREAD = 0.1
#: a kernel not measured yet may cost this many times less, or more, than the average
ETA_UNSEEN_FACTOR = 3.0


class EtaEstimator:
    """Seconds left of a run whose work is planned as units (bytes) per kernel.

    Args:
        planned: kernel name -> units of work planned (the sum of its slices' sizes).
        start: the clock reading (``time.perf_counter()``) when the run started.
        min_samples: calls measured before :meth:`estimate` gives a number.
        smoothing: weight of the newest raw estimate (0 < smoothing <= 1).
    """

    def __init__(
        self,
        planned: Mapping[str, float],
        start: float,
        *,
        min_samples: int = ETA_MIN_SAMPLES,
        smoothing: float = ETA_SMOOTHING,
    ) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing!r}")
        self.left = {k: float(v) for k, v in planned.items()}
        self.planned = sum(self.left.values())
        self.start = start
        self.min_samples = min_samples
        self.smoothing = smoothing
        self.busy: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.samples = 0
        self._eta: float | None = None
        self._at = start

    def add(self, kernel: str, units: float, seconds: float) -> None:
        """Record a call of ``kernel`` on ``units`` of work that took ``seconds``."""
        self.left[kernel] = max(self.left.get(kernel, 0.0) - units, 0.0)
        self.busy[kernel] = self.busy.get(kernel, 0.0) + max(seconds, 0.0)
        self.done[kernel] = self.done.get(kernel, 0.0) + units
        self.samples += 1

    def skip(self, kernel: str, units: float) -> None:
        """Planned work that needs no call (a slice not applicable, an input that failed)."""
        self.left[kernel] = max(self.left.get(kernel, 0.0) - units, 0.0)

    def raw(self, now: float) -> float | None:
        """The unsmoothed estimate at clock reading ``now`` (None before enough samples)."""
        busy = sum(self.busy.values())
        units = sum(self.done.values())
        if self.samples < self.min_samples or busy <= 0 or units <= 0:
            return None
        mean_rate = busy / units
        busy_left = sum(
            left * (self.busy[k] / self.done[k] if self.done.get(k) else mean_rate)
            for k, left in self.left.items()
        )
        wall_per_busy = max(now - self.start, busy * 1e-3) / busy
        return busy_left * wall_per_busy

    def estimate(self, now: float) -> float | None:
        """The smoothed seconds left at clock reading ``now`` (None before enough samples).

        Args:
            now: a ``time.perf_counter()`` reading, not before the previous one.
        """
        raw = self.raw(now)
        if raw is None:
            return None
        if self._eta is None or raw == 0:  # the first number, or nothing left to do
            eta = raw
        else:
            counted_down = max(self._eta - (now - self._at), 0.0)
            eta = self.smoothing * raw + (1 - self.smoothing) * counted_down
        self._eta, self._at = eta, now
        return eta

    def bounds(self, eta: float | None) -> tuple[float, float] | None:
        """A range ``(low, high)`` of seconds left around the smoothed estimate ``eta``.

        None before ``min_samples`` calls or before ``ETA_MIN_SHARE`` of the planned work is
        done. Its half-width is ``ETA_BASE_SPREAD`` plus one over the square root of the calls
        measured, and the share of the time left that falls on kernels not measured yet
        widens it by up to ``ETA_UNSEEN_FACTOR`` either way.

        Args:
            eta: the smoothed estimate (:meth:`estimate`).
        """
        if eta is None or self.samples < self.min_samples or self.planned <= 0:
            return None
        left = sum(self.left.values())
        if (self.planned - left) / self.planned < ETA_MIN_SHARE:
            return None
        if eta <= 0:
            return (0.0, 0.0)
        busy = sum(self.busy.values())
        units = sum(self.done.values())
        mean_rate = busy / units if units > 0 else 0.0
        seen = unseen = 0.0
        for k, rest in self.left.items():
            if self.done.get(k):
                seen += rest * self.busy[k] / self.done[k]
            else:
                unseen += rest * mean_rate
        share = unseen / (seen + unseen) if seen + unseen > 0 else 0.0
        spread = ETA_BASE_SPREAD + self.samples**-0.5
        low = eta * max(1.0 - spread, 0.1) * (1.0 - share * (1.0 - 1.0 / ETA_UNSEEN_FACTOR))
        high = eta * (1.0 + spread) * (1.0 + share * (ETA_UNSEEN_FACTOR - 1.0))
        return (low, high)
