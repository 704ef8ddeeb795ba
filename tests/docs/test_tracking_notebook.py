"""notebooks/track_training.ipynb runs top to bottom in a real kernel (nbclient, a fresh
folder): a torch MLP trains on load_digits while a tracker commits pl_alpha per layer every
25 steps and an evolution panel redraws; it is committed without outputs."""

from __future__ import annotations

import json

import pytest

from test_notebooks import NOTEBOOKS, WIDGET, _text, run_without_errors

NAME = "track_training.ipynb"


def test_committed_without_outputs():
    nb = json.loads((NOTEBOOKS / NAME).read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.slow
def test_the_tracking_notebook_runs(tmp_path):
    cells = run_without_errors(NAME, tmp_path)
    text = "\n".join(_text(c) for c in cells)
    assert any(WIDGET in o.get("data", {}) for c in cells for o in c.outputs)  # the panel
    # 600 steps, every 25: 25 snapshots, each committed or skipped by the queue policy
    line = next(x for x in text.splitlines() if x.startswith("run 'digits':"))
    committed = int(line.split(":")[1].split()[0])
    skipped = int(line.split(", ")[2].split()[0])
    assert committed + skipped == 25 and committed >= 2, line
    assert "0 failures" in line
    assert "committed steps: [0, 25" in text and "600]" in text  # the first and the last
    assert f"resumed {committed} committed steps; next step 601" in text
    assert "step 0 again: None (already stored: 1 )" in text
