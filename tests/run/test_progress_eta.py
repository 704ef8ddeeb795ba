"""The ETA of a run on a synthetic sequence shaped like a real one (MiniLM: a large embedding
first, then attention and FFN matrices of two sizes, a costly spectrum kernel then a cheaper
fit, noisy call times): it says nothing before a few calls, never jumps, and converges; the
estimate the widget used to show (slices done / elapsed) jumps on the same sequence."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from diffract.run.eta import ETA_MIN_SAMPLES, EtaEstimator

KERNELS = {"weights_spectrum": 1.0e-7, "pl_fit": 4.0e-8}  # seconds per byte


def sequence(seed: int = 0):
    """Calls in run order (kernel by kernel over the slices): (kernel, bytes, seconds)."""
    rng = np.random.default_rng(seed)
    sizes = [30522 * 384 * 4]
    for _layer in range(6):
        sizes += [384 * 384 * 4] * 4 + [1536 * 384 * 4] * 2
    calls = []
    for k, rate in KERNELS.items():
        for b in sizes:
            calls.append((k, b, rate * b * rng.lognormal(0.0, 0.3)))
    return sizes, calls


def replay(calls, sizes):
    planned = {k: float(sum(sizes)) for k in KERNELS}
    est = EtaEstimator(planned, start=0.0)
    now, out = 0.0, []
    for k, b, dt in calls:
        now += dt
        est.add(k, b, dt)
        out.append((now, est.estimate(now)))
    return out, now


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_eta_waits_for_samples_never_jumps_and_converges(seed):
    sizes, calls = sequence(seed)
    out, total = replay(calls, sizes)
    assert all(eta is None for _, eta in out[: ETA_MIN_SAMPLES - 1])
    assert all(eta is not None for _, eta in out[ETA_MIN_SAMPLES - 1 :])
    predicted = [now + eta for now, eta in out if eta is not None]
    # the run's predicted length moves by at most a quarter from one call to the next
    steps = [b / a for a, b in itertools.pairwise(predicted)]
    assert max(steps) < 1.25 and min(steps) > 0.8
    # within a factor 2 from the first number shown, within 15% over the last fifth
    assert all(0.5 < p / total < 2.0 for p in predicted)
    assert all(abs(p / total - 1) < 0.15 for p in predicted[-len(predicted) // 5 :])
    assert out[-1][1] == pytest.approx(0.0, abs=1e-9)


def test_the_slice_count_rate_jumps_on_the_same_sequence():
    """The estimate this replaces (elapsed / slices done x slices left) on the same run:
    minutes after the embedding, then a drop: the 40 s -> 5 min -> 1 min of the report."""
    _, calls = sequence(0)
    n = len(calls)
    now, predicted = 0.0, []
    for i, (_, _, dt) in enumerate(calls, start=1):
        now += dt
        predicted.append(now + now / i * (n - i))
    total = now
    assert max(predicted) / total > 3
    steps = [b / a for a, b in itertools.pairwise(predicted)]
    assert min(steps) < 0.8


def test_work_that_needs_no_call_counts_as_done():
    est = EtaEstimator({"k": 400.0}, start=0.0, min_samples=1)
    est.add("k", 100.0, 1.0)
    est.skip("k", 200.0)  # not applicable: nothing left of it
    assert est.raw(1.0) == pytest.approx(1.0)  # 100 bytes left at 1 s per 100
    with pytest.raises(ValueError, match="smoothing"):
        EtaEstimator({}, start=0.0, smoothing=0.0)


def test_the_range_waits_for_enough_work_and_widens_for_kernels_not_measured():
    # 100 units each of two kernels; "a" costs 0.1 s per unit
    est = EtaEstimator({"a": 100.0, "b": 100.0}, start=0.0, min_samples=3)
    for _ in range(3):  # 3 units of 200: under 5% of the work, no range yet
        est.add("a", 1.0, 0.1)
    eta = est.estimate(0.3)
    assert eta is not None and est.bounds(eta) is None
    for _ in range(7):  # 10 of 200 units: 5%
        est.add("a", 1.0, 0.1)
    eta = est.estimate(1.0)
    lo, hi = est.bounds(eta)
    # "b" is not measured: half the time left is a guess, so the range is wide
    assert lo < 0.75 * eta and hi > 1.9 * eta
    for _ in range(10):  # once "b" is measured at the same cost the range narrows
        est.add("b", 1.0, 0.1)
    eta2 = est.estimate(2.0)
    lo2, hi2 = est.bounds(eta2)
    assert lo2 <= eta2 <= hi2 and (hi2 - lo2) / eta2 < (hi - lo) / eta
    # the real time left (180 units at 0.1 s) is inside the range
    assert lo2 <= 18.0 <= hi2
