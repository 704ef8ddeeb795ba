"""The README's example runs as written, and does what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.slow
def test_readme_example_runs(in_tmp, capsys):
    from diffract import ParameterType, Session

    code = re.search(r"## Eleven lines\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert len(code.strip().splitlines()) == 11
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    out = capsys.readouterr().out
    # "an HDF5 store in ./.diffract": the store is there and holds the demo model
    assert (in_tmp / ".diffract" / "diffract-store.json").exists()
    with Session(path=in_tmp / ".diffract", readonly=True) as s:
        assert s.models.ids() == ["minilm"]
        dense = [sl for sl in s.models.slices() if sl.type == ParameterType.DENSE]
        alpha = {sl.name: s.results.get("pl_alpha", sl.uid) for sl in dense}
        ranks = {sl.name: s.results.get("stable_rank", sl.uid) for sl in dense}
    # df: one row per dense parameter, with the values stored
    df = ns["df"]
    # the name column: "parameter_name" in Diffract's table, "name" in diffract-lab 0.1's
    df = df.set_index("parameter_name" if "parameter_name" in df.columns else "name")
    assert sorted(df.index) == sorted(alpha) and len(alpha) == 37  # 36 encoder + the pooler
    assert df["pl_alpha"].to_dict() == pytest.approx(alpha, nan_ok=True)
    assert df["stable_rank"].to_dict() == pytest.approx(ranks)
    assert all(r >= 1.0 for r in ranks.values())
    # the printed describe() is that of the attention rows' pl_alpha ("scopes chain")
    attn = [a for n, a in alpha.items() if re.fullmatch(r".*attention.*", n) and a is not None]
    attn = np.array([a for a in attn if np.isfinite(a)])
    header = out.splitlines()[0].split()
    col = header.index("pl_alpha")  # describe() of the numeric columns, pl_alpha among them
    table = {ln.split()[0]: ln.split()[1 + col] for ln in out.splitlines()[1:] if ln.strip()}
    assert float(table["count"]) == len(attn) == 24  # q, k, v, output of 6 layers
    assert float(table["mean"]) == pytest.approx(attn.mean(), rel=1e-5)
    assert float(table["max"]) == pytest.approx(attn.max(), rel=1e-5)
    # run again in the same folder (issue 26): the model is kept, nothing is recomputed,
    # and the same table and summary come out
    again: dict = {}
    exec(compile(code, "README.md", "exec"), again)
    assert capsys.readouterr().out == out
    assert again["session"].kernel_calls == {}
    assert again["df"].equals(ns["df"])
    with Session(path=in_tmp / ".diffract", readonly=True) as s:
        assert s.models.ids() == ["minilm"]
