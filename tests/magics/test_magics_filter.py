"""``%diffract filter``: the builder works on the notebook's Session, and its "copy as code"
line names the variable that Session lives in (so the pasted line runs as is)."""

from __future__ import annotations

import pytest


@pytest.fixture
def ip(fresh_shell):
    fresh_shell.run_cell("from _ui_helpers import mlp\nfrom diffract import Session")
    return fresh_shell


def test_filter_builder_code_names_the_notebooks_variable(ip):
    ip.run_cell("runs = Session(profile='ram')\nruns.models.add(mlp(0), 'm1')")
    fb = ip.run_line_magic("diffract", "filter")
    assert fb.count == fb.total == len(ip.user_ns["runs"].models.slices()) == 8
    fb.param_types = ["bias"]
    assert fb.code == "runs.filter(param_types=['bias'])"
    ip.user_ns["fb"] = fb
    ip.run_cell(f"picked = [s.uid for s in {fb.code}.models.slices()]")
    assert ip.user_ns["picked"] == [s.uid for s in fb.scope.models.slices()]
    assert len(ip.user_ns["picked"]) == 4
