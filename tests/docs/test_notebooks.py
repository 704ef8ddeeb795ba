"""The example notebooks run top to bottom in a real kernel, and are committed without outputs.

Each notebook runs with nbclient in a fresh temporary folder (its ``./.diffract`` store lands
there), on the ``python3`` kernel of this virtual environment.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
NAMES = [
    "quickstart.ipynb",
    "training_evolution.ipynb",
    "filtering.ipynb",
    "compare_frameworks.ipynb",
    "llm.ipynb",
    "track_training.ipynb",  # run by tests/docs/test_tracking_notebook.py, with its own checks
]
WIDGET = "application/vnd.jupyter.widget-view+json"


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text", ""))
        out.append(str(o.get("data", {}).get("text/plain", "")))
    return "".join(out)


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name):
    nb = json.loads((NOTEBOOKS / name).read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("outputs") == [], (
            f"{name} cell {i} has outputs: strip them (scripts/make_notebooks.py)"
        )
        assert cell.get("execution_count") is None, f"{name} cell {i} has an execution count"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


def test_notebooks_match_their_source():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import make_notebooks
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    for name, cells in make_notebooks.NOTEBOOK_CELLS.items():
        assert (NOTEBOOKS / name).read_text() == make_notebooks.render(cells), (
            f"{name} differs from scripts/make_notebooks.py: edit the script and run it"
        )


def execute(name: str, folder: Path):
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    env_path = os.environ.get("PATH", "")
    # the kernelspec "python3" runs `python`: make it this venv's
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env_path
    start = time.monotonic()
    try:
        nbclient.NotebookClient(
            nb,
            timeout=180,
            kernel_name="python3",
            resources={"metadata": {"path": str(folder)}},
        ).execute()
    finally:
        os.environ["PATH"] = env_path
    return nb, time.monotonic() - start


def run_without_errors(name: str, tmp_path) -> list:
    """Execute notebook ``name`` in ``tmp_path``; its code cells, asserted free of errors."""
    nb, seconds = execute(name, tmp_path)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in cells for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, errors
    print(f"{name}: {seconds:.1f}s")
    return cells


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in NAMES if n != "track_training.ipynb"])
def test_notebook_runs(name, tmp_path):
    cells = run_without_errors(name, tmp_path)
    everything = "\n".join(_text(c) for c in cells)
    if name == "quickstart.ipynb":
        widgets = [c for c in cells if any(WIDGET in o.get("data", {}) for o in c.outputs)]
        assert len(widgets) >= 2  # the live panel and the progress widget
        assert "kernel calls: {}" in everything
        assert "reused: 0" not in everything
        assert (tmp_path / ".diffract").is_dir()
    if name == "training_evolution.ipynb":
        assert "mlp-step-0150" in everything and "flax-mlp-step-0150" in everything
    if name == "compare_frameworks.ipynb":
        assert everything.count("identical across frameworks") == 5
    if name == "llm.ipynb":
        assert "'analyzed': 16, 'stats only': 5, 'skipped': 0" in everything
        assert "head 5 uses kv head 1" in everything
        assert "weighted mean sparsity: 0.7" in everything
        plotly = "application/vnd.plotly.v1+json"
        assert any(plotly in o.get("data", {}) for c in cells for o in c.outputs)  # the heatmap
