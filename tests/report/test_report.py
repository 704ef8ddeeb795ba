"""``diffract report`` (issue 16, point 8): one offline HTML file with the per-layer table,
alpha across depth, an ESD grid and the failures; the numbers are those ``diffract analyze``
stores."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from diffract import Session
from diffract.cli import PREFERRED_FIELDS, main
from diffract.report import fmt


class _Page(HTMLParser):
    """The tags' src/href attributes, the per-layer table and the failure lines of a report."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, str]] = []
        self.header: list[str] = []
        self.rows: list[list[tuple[str, str | None]]] = []
        self.failures: list[str] = []
        self._where: str | None = None
        self._text = ""
        self._value: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href", "action", "poster", "data"):
            if a.get(key):
                self.links.append((tag, key, a[key]))
        if tag == "table" and a.get("class") == "layers":
            self._where = "table"
        elif self._where == "table" and tag == "tr":
            self.rows.append([])
        elif self._where == "table" and tag in ("td", "th"):
            self._text, self._value = "", a.get("data-value")
        elif tag == "ul" and a.get("class") == "failures":
            self._where = "failures"
        elif self._where == "failures" and tag == "li":
            self._text = ""

    def handle_endtag(self, tag):
        if tag == "table" and self._where == "table":
            self._where = None
        elif self._where == "table" and tag in ("td", "th"):
            self.rows[-1].append((self._text, self._value))
        elif self._where == "failures" and tag == "li":
            self.failures.append(self._text)
        elif tag == "ul" and self._where == "failures":
            self._where = None

    def handle_data(self, data):
        self._text += data


def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.header = [t for t, _ in page.rows.pop(0)]
    return page


def _table(page: _Page) -> dict[str, dict[str, tuple[str, str | None]]]:
    name = page.header.index("name")
    return {r[name][0]: dict(zip(page.header, r, strict=True)) for r in page.rows}


@pytest.fixture
def checkpoint(in_tmp) -> Path:
    rng = np.random.default_rng(3)
    w = {f"blocks.{i}.mlp.weight": rng.normal(size=(64, 40)).astype(np.float32) for i in range(6)}
    w["blocks.0.mlp.bias"] = rng.normal(size=64).astype(np.float32)
    path = in_tmp / "step-10.safetensors"
    save_file(w, str(path))
    return path


def _stored_rows(store: Path) -> dict[str, dict]:
    with Session(path=str(store), readonly=True) as s:
        rows = s.results.export_table(*PREFERRED_FIELDS, export_format="list")
    return {r["name"]: r for r in rows if any(r.get(f) is not None for f in PREFERRED_FIELDS)}


def test_no_external_urls(checkpoint, in_tmp):
    assert main(["report", str(checkpoint), "-o", "r.html"]) == 0
    text = (in_tmp / "r.html").read_text(encoding="utf-8")
    page = _read(in_tmp / "r.html")
    assert not page.links, page.links  # no src=, href= at all: nothing to fetch
    assert not re.search(r"<(script|link|img|iframe)[^>]*\s(src|href)\s*=", text, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", text, re.I)  # no CSS fetch
    # plotly.js itself is inline (its text names the CDN only as an inert default)
    assert "<script>/**\n* plotly.js v" in text and "Plotly.newPlot" in text
    assert len(re.findall(r"<script>", text)) >= 3  # plotly.js inline, then two figures
    assert 'id="alpha-depth"' in text and 'id="esd-grid"' in text


def test_numbers_equal_what_analyze_stores(checkpoint, in_tmp, capsys):
    assert main(["analyze", str(checkpoint), "--store", "st", "--quiet"]) == 0
    stored = _stored_rows(in_tmp / "st")
    assert main(["report", str(checkpoint), "-o", "ckpt.html"]) == 0  # in memory
    assert main(["report", "st", "-o", "store.html"]) == 0  # the store as it is
    for html_file in ("ckpt.html", "store.html"):
        page = _read(in_tmp / html_file)
        table = _table(page)
        assert set(table) == set(stored) and len(table) == 6  # the bias has no field
        assert [c for c in page.header if c in PREFERRED_FIELDS] == list(PREFERRED_FIELDS)
        for name, row in stored.items():
            shown = table[name]
            assert shown["shape"][0] == "64x40"
            for f in PREFERRED_FIELDS:
                text, value = shown[f]
                assert text == fmt(row[f]), (html_file, name, f)
                assert float(value) == pytest.approx(float(row[f]), rel=1e-12, abs=1e-300)
    store_text = (in_tmp / "store.html").read_text()
    assert "does not keep the failures of past runs" in store_text
    assert "No failures." in (in_tmp / "ckpt.html").read_text()


def test_nan_weights_are_a_row_of_nan(in_tmp):
    """Issue 26 point 6 (changed from a listed failure): NaN weights give NaN values, as in
    Diffract, so the layer keeps its row; the run warns, naming it."""
    rng = np.random.default_rng(0)
    w = {f"layers.{i}.weight": rng.normal(size=(48, 32)).astype(np.float32) for i in range(3)}
    w["layers.1.weight"][0, 0] = np.nan
    save_file(w, "bad.safetensors")
    with pytest.warns(Warning, match=r"NaN or Inf weights.*\n  bad:layers\.1\.weight: .*1 NaN"):
        assert main(["report", "bad.safetensors", "-o", "bad.html"]) == 0
    page = _read(in_tmp / "bad.html")
    table = _table(page)
    assert set(table) == {"layers.0.weight", "layers.1.weight", "layers.2.weight"}
    assert all(table["layers.1.weight"][f] == ("nan", "nan") for f in PREFERRED_FIELDS)
    assert float(table["layers.0.weight"]["frob_norm"][1]) == pytest.approx(
        np.linalg.norm(w["layers.0.weight"].astype(np.float64)), rel=1e-5
    )
    assert not page.failures


def test_errors(in_tmp, checkpoint, capsys):
    assert main(["report", str(checkpoint), "-o", "r.html", "--esds", "0"]) == 2
    assert "--esds must be a positive number" in capsys.readouterr().err
    assert main(["analyze", str(checkpoint), "--store", "st", "--quiet"]) == 0
    assert main(["report", "st", "--id", "x", "-o", "r.html"]) == 2
    assert "apply to a checkpoint" in capsys.readouterr().err
    assert not (in_tmp / "r.html").exists()


@pytest.mark.slow
def test_demo_model_report(in_tmp):
    """No argument: the bundled all-MiniLM-L6-v2, as ``diffract analyze`` reads it."""
    assert main(["report", "-o", "demo.html"]) == 0
    page = _read(in_tmp / "demo.html")
    assert len(page.rows) == 40 and not page.links


def test_many_checkpoints_are_one_heatmap_row_each_and_the_table_scrolls_in_view():
    from _ui_helpers import mlp
    from diffract import report

    s = Session("ram")
    for i in range(report.MAX_LINES + 4):
        s.models.add(mlp(i, layers=3), f"ckpt-{i:03d}")
    s.compute.apply("frob_norm", progress=False)
    page = report.figures(s, alpha_field="frob_norm")
    spec = json.loads(re.search(r"var f=(\{.*?\});Plotly", page).group(1))
    assert [t["type"] for t in spec["data"]] == ["heatmap"]
    assert len(spec["data"][0]["y"]) == report.MAX_LINES + 4
    assert f"{report.MAX_LINES + 4} models: one row each" in page
    few = Session("ram")
    few.models.add(mlp(0, layers=3), "a")
    few.compute.apply("frob_norm", progress=False)
    small = report.figures(few, alpha_field="frob_norm")
    assert (
        json.loads(re.search(r"var f=(\{.*?\});Plotly", small).group(1))["data"][0]["type"]
        == "scatter"
    )
    # the table's box scrolls inside the window: both scrollbars in view, not under row 40
    assert re.search(r"\.table-wrap \{[^}]*overflow: auto;[^}]*max-height: 70vh", report._STYLE)


def test_model_level_fields_are_a_row_without_shape(checkpoint, in_tmp, caplog, capsys):
    # log_norm has a model-level value (uid "@model"): the report failed with "no slice with
    # uid '@step-10' in the store" while looking up its shape
    fields = "frob_norm,log_norm,log_spectral_norm"
    assert main(["report", str(checkpoint), "--fields", fields, "-o", "m.html"]) == 0
    assert "(6 layers, 1 model-level)" in capsys.readouterr().err
    table = _table(_read(in_tmp / "m.html"))
    assert len(table) == 7  # six layers and the model's own row
    shapes = {name: row["shape"][0] for name, row in table.items()}
    assert sorted(shapes.values()).count("64x40") == 6 and "" in shapes.values()
    # the report asks only for what is stored: no "Requested field 'model_diag_outliers' has
    # no computed values" logged for a diagnosis the run did not make
    with Session(path="st") as s:  # a store with one rule computed, not the outlier one
        s.models.add(str(checkpoint), model_id="ckpt")
        s.compute.apply(*PREFERRED_FIELDS, "diag_over_trained", progress=False)
    caplog.clear()
    assert main(["report", "st", "-o", "s.html"]) == 0
    assert not [r for r in caplog.records if "has no computed values" in r.getMessage()]
