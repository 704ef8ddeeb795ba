"""The README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow
def test_readme_example_runs(in_tmp, capsys):
    code = re.search(r"## Ten lines\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "pl_alpha" in out and "mean" in out
    assert (in_tmp / ".diffract" / "diffract-store.json").exists()
