"""The filter builder's table: sorted columns, pages over thousands of slices, "did you mean"
for exact names and types that match nothing, and the ``.filter(...)`` line it copies."""

from __future__ import annotations

import re

import numpy as np
import pytest

from _ui_helpers import mlp
from diffract import Session
from diffract.extract import natural_key
from diffract.widgets import FilterBuilder
from diffract.widgets.filter_help import sort_slices


@pytest.fixture(scope="module")
def big():
    """Two models of 600 layers (2,400 slices)."""
    s = Session("ram")
    s.models.add(mlp(0, layers=600, width=4), "m-10")
    s.models.add(mlp(1, layers=600, width=4), "m-9")
    return s


def _pages(fb):
    """Every page's uids, turning the pages as the front end does."""
    seen = []
    for p in range(-(-fb.count // fb.preview_limit)):  # ceil
        fb.page = p
        seen.extend(r["uid"] for r in fb.preview)
    return seen


def test_pages_cover_every_match_once_in_store_order(big):
    fb = FilterBuilder(big, preview_limit=100)
    assert fb.count == fb.total == 2400 and len(fb.preview) == 100
    assert _pages(fb) == [s.uid for s in big.models.slices()]
    fb.page = 10_000  # past the end: the last page
    assert fb.page == 23 and len(fb.preview) == 100
    fb.names = "re:layers\\.1\\d\\d\\.weight"  # a new filter starts at the first page
    assert fb.page == 0 and fb.count == 200
    assert [r["name"] for r in fb.preview[:2]] == ["layers.100.weight", "layers.101.weight"]


def test_sorting_runs_over_all_matches_not_the_page(big):
    fb = FilterBuilder(big, preview_limit=50)
    fb.page = 3
    fb.sort_by = "name"
    assert fb.page == 0  # a new order starts at its first page
    names = [(s.name, s.model_id) for s in big.models.slices()]
    # numbers in names compare as numbers: layers.2 before layers.10 (an independent key)
    expected = sorted(
        names,
        key=lambda nm: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", nm[0])],
    )
    assert [r["name"] for r in fb.preview] == [n for n, _ in expected[:50]]
    assert fb.preview[0]["name"] == "layers.0.bias" and fb.preview[2]["name"] == "layers.0.weight"
    fb.sort_desc = True
    assert fb.preview[0]["name"] == "layers.599.weight"
    fb.sort_by, fb.sort_desc = "model_id", False
    assert fb.preview[0]["model_id"] == "m-9"  # m-9 < m-10
    fb.sort_by, fb.sort_desc = "shape", True
    sizes = [int(np.prod([int(d) for d in r["shape"].split("×")])) for r in fb.preview]
    largest = max(int(np.prod(s.shape)) for s in big.models.slices())
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == largest
    fb.sort_by = "uid; drop table"  # not a column: back to the store's order
    assert fb.sort_by == "" and fb.preview[0]["uid"] == big.models.slices()[0].uid


def test_did_you_mean_for_names_and_types_that_match_nothing():
    s = Session("ram")
    s.models.add(mlp(0), "m1")
    fb = FilterBuilder(s)
    fb.names = "layers.1.wieght, layers.2.bias"
    assert fb.count == 1  # layers.2.bias matches; the misspelt one is named
    (hint,) = fb.hints
    assert hint["kind"] == "name" and hint["given"] == "layers.1.wieght"
    assert hint["suggestions"][0] == "layers.1.weight"
    fb._on_msg(
        fb,
        {"type": "suggest", "kind": "name", "given": "layers.1.wieght", "value": "layers.1.weight"},
        [],
    )
    assert fb.names == "layers.1.weight, layers.2.bias" and fb.count == 2 and fb.hints == []
    fb.names = ""
    fb.param_types = ["dens"]  # a custom type nothing has
    assert fb.count == 0
    assert fb.hints == [{"kind": "type", "given": "dens", "suggestions": ["dense"]}]
    fb.take_suggestion("type", "dens", "dense")
    assert fb.param_types == ["dense"] and fb.count == 4 and fb.hints == []
    fb.names = "zzz"
    assert fb.hints == [{"kind": "name", "given": "zzz", "suggestions": []}]
    fb.names = "re:zzz.*"  # a pattern is not an exact name: no hint
    assert fb.hints == []
    with pytest.raises(ValueError, match="unknown suggestion kind"):
        fb.take_suggestion("uid", "a", "b")


def test_copied_code_selects_the_same_slices(big):
    fb = FilterBuilder(big)
    assert fb.code == "session.filter()"
    fb.model_ids = ["m-9"]
    fb.names = "re:layers\\.5\\d\\.weight"
    fb.param_types = ["dense"]
    fb.uids = ""
    scope = eval(fb.code, {"session": big})  # what a user pastes
    assert [s.uid for s in scope.models.slices()] == [s.uid for s in fb.scope.models.slices()]
    assert len(scope.models.slices()) == 10
    narrow = big.filter(model_ids="m-10")
    fb2 = FilterBuilder(narrow, source_name="runs")
    fb2.param_types = ["bias"]
    assert fb2.code == "runs.filter(param_types=['bias'])"
    assert FilterBuilder(narrow).code == "scope.filter()"


def test_natural_key_and_sort_helpers():
    assert sorted(["b10", "b9", "a"], key=natural_key) == ["a", "b9", "b10"]
    names = ["B2", "a10", "a9", "10", "9a"]
    assert sorted(names, key=natural_key) == ["9a", "10", "B2", "a9", "a10"]  # as extraction
    folded = sorted(names, key=lambda n: natural_key(n, fold_case=True))  # the preview's columns
    assert folded == ["9a", "10", "a9", "a10", "B2"]
    with pytest.raises(ValueError, match="unknown sort column 'x'"):
        sort_slices([], "x")
