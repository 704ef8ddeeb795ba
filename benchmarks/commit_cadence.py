"""How often a one-chunk run should commit the values it has finished, on the HDF5 store.

A run under the default memory budget is often one chunk: committing only at its end leaves
live panels (and read-only readers) empty until then. Inside a chunk the runner can commit
after every kernel call, or every ``commit_every`` seconds. This runs the same ``apply``
(``pl_alpha`` and ``stable_rank`` on an MLP of ``--slices`` 256x256 matrices: spectra,
fits, arrays and scalars, one chunk) three ways on a fresh HDF5 store each:

* per call (``commit_every = 0``), every 2 s (the default), at the chunk's end only (before);

and reports the wall time (ratio to chunk-end-only), the commits made, the store's bytes
on disk, and when a reader in another thread first saw a ``pl_alpha`` value (seconds
after the start).

    python benchmarks/commit_cadence.py [--slices 120] [--repeat 2]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

import diffract.run.state as run_state
from diffract import FieldNotComputedError, Session

CADENCES = {"per call": 0.0, "every 2 s": 2.0, "chunk end only": float("inf")}


def model(n: int, width: int = 256) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        f"layers.{i}.weight": rng.standard_t(3, size=(width, width)).astype(np.float32)
        for i in range(n)
    }


def first_seen(path: Path, stop: threading.Event, out: dict[str, float], t0: list[float]) -> None:
    """Poll a read-only session until a pl_alpha value shows; record when."""
    reader = Session(path=path, readonly=True)
    while not stop.is_set():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                rows = reader.results.export_table("pl_alpha", export_format="list")
            except FieldNotComputedError:
                rows = []
        if any(r.get("pl_alpha") is not None for r in rows):
            out["seen"] = time.perf_counter() - t0[0]
            return
        time.sleep(0.05)


def one(n: int, every: float, root: Path) -> dict[str, float]:
    path = root / f"store-{every}-{time.perf_counter_ns()}"
    run_state.COMMIT_EVERY = every
    events: list[str] = []
    with Session(path=path) as s:
        s.models.add(model(n), "m")
        stop, seen, t0 = threading.Event(), {}, [time.perf_counter()]
        watcher = threading.Thread(target=first_seen, args=(path, stop, seen, t0), daemon=True)
        watcher.start()
        t0[0] = time.perf_counter()
        report = s.compute.apply(
            "pl_alpha", "stable_rank", progress=lambda ev: events.append(ev.stage)
        )
        wall = time.perf_counter() - t0[0]
        watcher.join(30)
        stop.set()
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert report.chunks == 1, report
    return {
        "wall": wall,
        "commits": events.count("commit") + events.count("chunk"),
        "bytes": size,
        "seen": seen.get("seen", float("nan")),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slices", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    default = run_state.COMMIT_EVERY
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in CADENCES}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):  # interleaved, so load on the machine hits all alike
            for name, every in CADENCES.items():
                rows[name].append(one(args.slices, every, Path(tmp)))
    run_state.COMMIT_EVERY = default
    base = min(r["wall"] for r in rows["chunk end only"])
    print(f"{args.slices} slices, one chunk, best of {args.repeat}")
    print("| cadence | wall s | ratio | commits | store MB | first value seen s |")
    print("|---|---|---|---|---|---|")
    for name, rs in rows.items():
        best = min(rs, key=lambda r: r["wall"])
        print(
            f"| {name} | {best['wall']:.2f} | {best['wall'] / base:.2f} | {best['commits']:.0f}"
            f" | {best['bytes'] / 1e6:.2f} | {best['seen']:.2f} |"
        )


if __name__ == "__main__":
    main()
