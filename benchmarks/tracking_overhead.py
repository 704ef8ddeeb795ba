"""Training-loop overhead of ``session.track`` (issue 19): the same seeded loop with and
without a tracker snapshotting every ``--every`` steps, analysis in the background.

The loop trains a PyTorch MLP (64-512-512-10) on scikit-learn's ``load_digits`` with Adam,
``--steps`` steps of ``--batch`` images; the tracked loop adds ``tracker.step(model, step=i)``
each step (fields ``pl_alpha`` and ``stable_rank`` computed by the worker thread while
training goes on, into a ``ram`` session). Runs alternate (plain, tracked) ``--repeats``
times; the medians of the loop's wall time are compared, and the tracked run's drain time
at ``close()`` (the analysis still queued when the loop ended), its time spent copying
weights on the training thread, and its committed / skipped counts are printed. Both loops
draw the same batches (seeded) and end with the same loss to the last digit: the tracker
reads the weights, it does not change them.

    python benchmarks/tracking_overhead.py [--steps 2000] [--every 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch
from sklearn.datasets import load_digits

from diffract import Session

FIELDS = ["pl_alpha", "stable_rank"]


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )


def train(steps: int, batch: int, tracker=None) -> tuple[float, float]:
    """(loop wall seconds, final loss) of one seeded run."""
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for i in range(steps + 1):
        if tracker is not None:
            tracker.step(model, step=i)
        idx = torch.from_numpy(rng.integers(0, len(x), batch))
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - start, loss.item()


def tracked(steps: int, batch: int, every: int, max_pending: int) -> dict:
    session = Session(profile="ram")
    tracker = session.track("bench", FIELDS, every=every, max_pending=max_pending)
    wall, loss = train(steps, batch, tracker)
    t = time.perf_counter()
    status = tracker.close()
    drain = time.perf_counter() - t
    return {"wall": wall, "loss": loss, "drain": drain, "status": status}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--max-pending", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)  # the same for both loops; the worker gets the other core
    tracked(50, args.batch, args.every, args.max_pending)  # warm-up: imports, kernel families
    plain_walls, runs = [], []
    for _ in range(args.repeats):
        wall, plain_loss = train(args.steps, args.batch)
        plain_walls.append(wall)
        runs.append(tracked(args.steps, args.batch, args.every, args.max_pending))
    plain = statistics.median(plain_walls)
    walls = [r["wall"] for r in runs]
    with_tracking = statistics.median(walls)
    last = runs[-1]
    st = last["status"]
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores, torch threads 1")
    print(
        f"steps {args.steps}, batch {args.batch}, snapshot every {args.every}, K={args.max_pending}"
    )
    print(
        f"plain loop     : median {plain:.2f} s  (runs {', '.join(f'{w:.2f}' for w in plain_walls)})"
    )
    print(
        f"tracked loop   : median {with_tracking:.2f} s  (runs {', '.join(f'{w:.2f}' for w in walls)})"
    )
    print(f"overhead       : {100 * (with_tracking / plain - 1):+.1f}% of the loop's wall time")
    print(
        f"tracked run    : {st.committed} steps committed, {st.skipped} skipped, "
        f"{len(st.failures)} failures; snapshots took {1000 * st.snapshot_seconds:.1f} ms on the "
        f"training thread in all, the worker {st.analysis_seconds:.2f} s; drain at close "
        f"{last['drain']:.2f} s"
    )
    same = all(r["loss"] == plain_loss for r in runs)
    print(
        f"final loss     : plain {plain_loss:.6f}, tracked {last['loss']:.6f} (identical: {same})"
    )


if __name__ == "__main__":
    main()
