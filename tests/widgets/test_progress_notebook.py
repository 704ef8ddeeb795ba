"""A saved notebook and its nbconvert HTML keep the progress widget's FINAL state (issue 29,
point 2): the static copy shown where no widget model is around is replaced when the run
ends, for the blocking ``compute.apply`` widget and for ``run_with_progress`` (whose run
ends after its cell), so neither reads "running" once the run is done or cancelled."""

from __future__ import annotations

import html
import os
import sys
from pathlib import Path

import nbclient
import nbformat
from nbconvert import HTMLExporter

TESTS = Path(__file__).resolve().parents[1]
PYTHON = TESTS.parent / "python"

SETUP = f"""
import sys, time
sys.path.insert(0, {str(TESTS)!r})
import numpy as np, diffract
from _ui_helpers import mlp
from diffract import Session
from diffract.widgets import run_with_progress

@diffract.kernel(outputs="nb_slow_norm", min_ndim=2, replace=True)
def nb_slow_norm(weights):
    time.sleep(0.2)
    return float(np.linalg.norm(weights))

session = Session("ram")
session.models.add(mlp(0, layers=6), "m")
"""

HTML = "text/html"
WIDGET = "application/vnd.jupyter.widget-view+json"


def _snapshots(cell) -> list[str]:
    return [o["data"][HTML] for o in cell.outputs if HTML in o.get("data", {})]


def test_saved_outputs_and_nbconvert_show_the_final_state(tmp_path):
    cells = [
        SETUP,
        'report = session.compute.apply("nb_slow_norm")  # the blocking widget',
        'run = run_with_progress(session, "frob_norm", "stable_rank")\nrun',
        "print('ended', run.wait(60).ok, run.widget.status)",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env_path
    old_pp = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(PYTHON) + (os.pathsep + old_pp if old_pp else "")
    try:
        nbclient.NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
    finally:
        os.environ["PATH"] = env_path
        if old_pp is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_pp
    assert "ended True done" in "".join(o.get("text", "") for o in nb.cells[3].outputs)
    blocking, background = _snapshots(nb.cells[1]), _snapshots(nb.cells[2])
    assert len(blocking) == 1 and len(background) == 1
    for snap, n in ((blocking[0], 6), (background[0], 12)):  # 6 matrices x 1 or 2 fields
        assert "running" not in snap and "data-status='done'" in snap, snap
        assert f"{n} of {n} requested values" in snap and "width:100.0%" in snap
    # the finished widgets' outputs are the static picture alone: no widget view to read
    # "model not found" in a new kernel, or to be left blank by nbconvert
    for cell in (nb.cells[1], nb.cells[2]):
        assert not any(WIDGET in o.get("data", {}) for o in cell.outputs)
    page = HTMLExporter().from_notebook_node(nb)[0]
    # nbconvert writes the HTML back with its own quoting: read each snapshot's text
    parts = page.split("diffract-progress-snapshot")[1:]
    shown = [html.unescape(p.split("</details></div>")[0]).replace('"', "'") for p in parts]
    assert len(shown) == 2 and all("data-status='done'" in s and "running" not in s for s in shown)
    assert "6 of 6 requested values" in shown[0] and "12 of 12 requested values" in shown[1]
