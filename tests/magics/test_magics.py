"""``%load_ext diffract`` and ``%diffract``: in-process IPython, and in a real kernel (nbclient)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbclient
import nbformat
import numpy as np
import pytest
from IPython.core.error import UsageError


@pytest.fixture
def ip(fresh_shell):
    """A new shell per test (conftest.fresh_shell: no DIFFRACT_* variables, fresh folder)."""
    fresh_shell.run_cell("from _ui_helpers import mlp")
    return fresh_shell


def test_open_add_compute_export(ip, in_tmp, capsys):
    s = ip.run_line_magic("diffract", "open")
    assert Path(s.store.path) == (in_tmp / ".diffract").resolve()
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    ip.run_line_magic("diffract", "add mlp(1, layers=2) --id m2")
    assert "added 8 slices as 'm1'" in capsys.readouterr().out
    ip.run_line_magic("diffract", "compute frob_norm --models m1 --types dense")
    assert "computed" in capsys.readouterr().out
    ip.run_line_magic("diffract", "export frob_norm --models m1 --to out.json")
    rows = json.loads((in_tmp / "out.json").read_text())
    assert rows and all(r["model_id"] == "m1" for r in (rows if isinstance(rows, list) else [rows]))
    ip.run_line_magic(
        "diffract", "export frob_norm --models m1 --names re:layers\\.[01]\\.weight --to out.csv"
    )
    lines = (in_tmp / "out.csv").read_text().splitlines()
    assert lines[0].startswith("model_id,name,uid,type") and len(lines) == 3
    runs = ip.run_line_magic("diffract", "runs")
    assert "m1: 8 slices" in repr(runs) and "<table" in runs._repr_html_()


def test_widgets_from_magics(ip):
    from diffract.widgets import FieldPanel, FilterBuilder

    ip.run_line_magic("diffract", "open --profile ram")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    fb = ip.run_line_magic("diffract", "filter")
    assert isinstance(fb, FilterBuilder) and fb.total == 8
    p = ip.run_line_magic("diffract", "show frob_norm --kind bar")
    assert isinstance(p, FieldPanel) and p.kind == "bar"
    p.stop()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("compute frob_norm", "no store is open"),
        ("", "needs a subcommand"),
        ("frobnicate", "invalid choice"),
        ("open --profile nope", "unknown profile"),
    ],
)
def test_errors_are_one_line(ip, line, message):
    with pytest.raises(UsageError, match=message) as info:
        ip.run_line_magic("diffract", line)
    assert "\n" not in str(info.value).strip()


def test_errors_after_open_are_one_line(ip):
    ip.run_line_magic("diffract", "open --profile ram")
    for line, message in [
        ("add nothing_here --id m", "cannot evaluate"),
        ("add mlp(0) --id bad/id", "bad/id"),
        ("compute frob_nrom", "frob_nrom"),
        ("export frob_norm --to out.xlsx", "unknown file type"),
        ("add mlp(0)", "--id"),
    ]:
        with pytest.raises(UsageError, match=message) as info:
            ip.run_line_magic("diffract", line)
        assert "\n" not in str(info.value).strip(), line


def test_help_documents_every_subcommand(ip):
    doc = ip.find_line_magic("diffract").__doc__
    for sub in ("open", "add", "compute", "show", "filter", "runs", "export"):
        assert f"%diffract {sub}" in doc


@pytest.mark.slow
def test_magics_and_widgets_in_a_real_kernel(in_tmp):
    cells = [
        f"import sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r}); from _ui_helpers import mlp",
        "%load_ext diffract",
        "session = %diffract open\n%diffract add mlp(0) --id m1",
        "run = %diffract compute frob_norm stable_rank\nrun",
        "report = run.wait(60); print('ok', report.ok, run.widget.status)",
        "session.compute.apply('pl_alpha')  # blocking apply: the notebook progress widget",
        "%diffract show frob_norm",
        "%diffract filter",
        "%diffract compute nope_field",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env_path
    try:
        nbclient.NotebookClient(
            nb,
            timeout=120,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(in_tmp)}},
        ).execute()
    finally:
        os.environ["PATH"] = env_path
    outs = [c.outputs for c in nb.cells]
    widget = "application/vnd.jupyter.widget-view+json"
    # the progress widgets of the background run and of the blocking apply: once their runs
    # ended, their outputs are the static final picture (no widget view left to go stale)
    for cell in (outs[3], outs[5]):
        html = [o["data"]["text/html"] for o in cell if "text/html" in o.get("data", {})]
        assert len(html) == 1 and "data-status='done'" in html[0], cell
        assert not any(widget in o.get("data", {}) for o in cell)
    assert "ok True done" in "".join(o.get("text", "") for o in outs[4])
    # a panel: the widget's output, then its static copy (the figure as Plotly JSON and HTML)
    kinds = [set(o.get("data", {})) for o in outs[6]]
    i = next(k for k, d in enumerate(kinds) if widget in d)
    assert {"application/vnd.plotly.v1+json", "text/html"} <= kinds[i + 1]
    assert any(widget in o.get("data", {}) for o in outs[7])
    # a usage error is one line on stderr, not a traceback
    text = "".join(o.get("text", "") for o in outs[8])
    assert "UsageError" in text and "nope_field" in text and "Traceback" not in text
    assert not [o for o in outs[8] if o.get("output_type") == "error"]


def test_show_esd_picks_the_model_with_models_or_the_old_model_spelling(ip):
    """One spelling in help and docs (--models ID...); --model ID still works (issue 16)."""
    ip.run_line_magic("diffract", "open --profile ram")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    ip.run_line_magic("diffract", "add mlp(1) --id m2")
    for option in ("--models m2", "--model m2"):
        p = ip.run_line_magic("diffract", f"show esd --kind esd --slice layers.0.weight {option}")
        assert p.kind == "esd" and p.slice_model == "m2"
        p.stop()


def test_show_compare_and_evolution_panels(ip):
    """--kind compare (--models A B, --mode) and --kind evolution (--run) reach the panel."""
    from _ui_helpers import mlp

    ip.run_line_magic("diffract", "open --profile ram")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    ip.run_line_magic("diffract", "add mlp(1) --id m2")
    ip.run_line_magic("diffract", "compute frob_norm --wait")
    p = ip.run_line_magic("diffract", "show frob_norm --kind compare --models m1 m2 --mode ratio")
    assert p.kind == "compare" and p.mode == "ratio"
    plotted = sorted(y for tr in p.state()["traces"] for y in tr["y"])
    a, b = mlp(0), mlp(1)
    expected = sorted(
        float(np.linalg.norm(b[k].astype(np.float64)) / np.linalg.norm(a[k].astype(np.float64)))
        for k in a
        if k.endswith(".weight")  # frob_norm is not applicable to 1-D biases
    )
    np.testing.assert_allclose(plotted, expected, rtol=1e-6)
    p.stop()
    # a run that has not stored a step yet: the panel follows it, empty until steps land
    e = ip.run_line_magic("diffract", "show frob_norm --kind evolution --run later")
    assert e.kind == "evolution" and e.run == "later" and e.n_values() == 0
    e.stop()


def test_runs_reads_left_to_right_with_a_field_count(tmp_path):
    """``%diffract runs``: names left-aligned (JupyterLab right-aligns table cells), a store
    named once, the fields as a count and the first names, all of them behind a click."""
    from _ui_helpers import mlp
    from diffract import Session
    from diffract.magics import RunsTable

    fields = ["frob_norm", "spectral_norm", "stable_rank", "weights_std", "layer_log_norm"]
    fields.append("esd_log_norm")
    with Session(profile="local", path=tmp_path / "a" / ".diffract") as s:
        s.models.add(mlp(0), "m1")
        s.models.add(mlp(1, layers=2), "m2")
        s.compute.apply(*fields, progress=False)
    table = RunsTable(tmp_path, [{"path": "a/.diffract"}])
    stored = table.stores[0]["models"][0]["fields"]
    n = len(stored)
    assert set(fields) <= set(stored) and n > 5
    lines = repr(table).splitlines()
    assert lines[0] == "a/.diffract: 2 model(s)"
    assert lines[1].startswith(f"  m1: 8 slices · {n} fields: {', '.join(stored[:5])}")
    assert lines[1].endswith(f"(+{n - 5} more)")
    assert max(len(line) for line in lines) < 160
    page = table._repr_html_()
    assert page.count("<code>a/.diffract</code>") == 1 and "rowspan='2'" in page
    assert "text-align:left" in page.split("<td")[2]  # the model name reads left
    assert f"<details><summary>{n} fields: " in page and f"(+{n - 5} more)</summary>" in page
    assert all(f in page for f in stored)  # every name, behind the click
