"""CLI paths: ``diffract --version``, ``diffract fields``, parquet export,
``analyze --names/--types``."""

from __future__ import annotations

import numpy as np
import pytest

import diffract
from diffract import Session
from diffract.cli import main
from diffract.kernels import default_registry


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "layers.0.weight": rng.normal(size=(8, 6)).astype(np.float32),
        "layers.0.bias": rng.normal(size=8).astype(np.float32),
        "layers.1.weight": rng.normal(size=(5, 8)).astype(np.float32),
        "embed.weight": rng.normal(size=(10, 6)).astype(np.float32),
    }


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"diffract-lab {diffract.__version__}"


def test_cli_fields_lists_every_field_with_its_level(capsys):
    assert main(["fields"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == diffract.fields()
    reg = default_registry()
    for ln in lines:
        name, level = ln.split()[:2]
        assert level == reg.producer(name).level, ln
    frob = next(ln for ln in lines if ln.split()[0] == "frob_norm")
    assert reg.producer("frob_norm").doc.splitlines()[0] in frob


def test_cli_export_parquet(in_tmp, capsys):
    import pandas as pd

    with Session() as s:
        s.models.add(_weights(), model_id="m")
        s.compute.apply("frob_norm", progress=False)
    assert main(["export", "frob_norm", "--to", "out.parquet"]) == 0
    df = pd.read_parquet(in_tmp / "out.parquet")
    assert list(df.columns) == ["model_id", "name", "uid", "type", "frob_norm"]
    w = _weights()
    got = {r.name: r.frob_norm for r in df.itertuples() if r.frob_norm == r.frob_norm}
    assert got == pytest.approx(
        {n: float(np.linalg.norm(v.astype(np.float64))) for n, v in w.items() if v.ndim == 2},
        rel=1e-6,
    )
    assert main(["export", "frob_norm", "--to", "out.xlsx"]) == 2
    assert "use a .json, .csv or .parquet" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (["--names", "layers.0.weight", "re:embed\\..*"], ["embed.weight", "layers.0.weight"]),
        (["--types", "embedding"], ["embed.weight"]),
        (["--types", "dense", "--names", "re:layers\\.1\\..*"], ["layers.1.weight"]),
    ],
)
def test_cli_analyze_names_and_types_select_the_rows(in_tmp, capsys, selection, expected):
    np.savez(in_tmp / "m.npz", **_weights())
    assert main(["analyze", "m.npz", "--quiet", "--fields", "frob_norm", *selection]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["name", "type", "shape", "frob_norm"]
    rows = sorted(ln.split()[0] for ln in lines[2:] if ln.strip())
    assert rows == expected
    with Session(readonly=True) as s:  # only the selection was computed
        names = {sl.uid: sl.name for sl in s.models.slices()}
        stored = {names[o] for o, f in s.store.keys() if f == "frob_norm" and o in names}
    assert sorted(stored) == expected
