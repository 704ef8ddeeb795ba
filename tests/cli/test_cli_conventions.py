"""The conventions setting (``diffract analyze --conventions``, ``DIFFRACT_CONVENTIONS``, the
project file and its profiles) and ``diffract analyze --table ww`` (WeightWatcher 0.7.7's
table, checked against its golden run on the conv net: tests/golden/ww_extras_convnet.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from diffract import ConfigError, Session
from diffract._vocab.config import CONVENTION_NAMES, resolve
from diffract.cli import main
from diffract.kernels.conventions import CONVENTIONS

GOLDEN = Path(__file__).parents[1] / "golden"
WW = json.loads((GOLDEN / "ww_extras_convnet.json").read_text())["default"]


@pytest.fixture
def convnet(in_tmp, no_diffract_env):
    shutil.copy(GOLDEN / "convnet.npz", in_tmp / "convnet.npz")
    return in_tmp / "convnet.npz"


def table(out: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of a printed fixed-width table."""
    lines = out.splitlines()
    rows = []
    for line in lines[2:]:
        if not line.strip():
            break
        rows.append(line.split())
    return lines[0].split(), rows


def test_conventions_names_match_the_presets():
    assert set(CONVENTION_NAMES) == set(CONVENTIONS)


def test_table_ww_prints_weightwatchers_table(convnet, capsys):
    assert main(["analyze", "convnet.npz", "--quiet", "--profile", "ram", "--table", "ww"]) == 0
    out = capsys.readouterr().out
    header, rows = table(out)
    cols = ["D", "M", "N", "Q", "alpha", "alpha_weighted", "entropy", "has_esd", "lambda_max"]
    assert header[:11] == ["layer_id", "name", *cols]
    assert header[-3:] == ["weak_rank_loss", "xmax", "xmin"] and len(header) == 32
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5"]  # WW's state-dict ids
    assert [r[1] for r in rows] == ["0", "2", "4", "8", "10"]
    alpha = header.index("alpha")
    for r in rows:
        assert float(r[alpha]) == pytest.approx(WW["rows"][f"{r[1]}.weight"]["alpha"], rel=1e-3)
    want = WW["summary"]["alpha"]
    assert f"alpha={want:.4g}" in out.split("get_summary():")[1]


@pytest.mark.parametrize("how", ["flag", "env", "file", "profile"])
def test_conventions_from_the_flag_the_environment_and_the_project_file(
    convnet, monkeypatch, capsys, how
):
    """WeightWatcher's eigenvalue scale (lambda_max = s_max^2 for a dense layer; Conv2d
    halved) only under the convention: the default scale divides by N."""
    argv = ["analyze", "convnet.npz", "--quiet", "--fields", "esd_max", "--profile", "ram"]
    if how == "flag":
        argv += ["--conventions", "weightwatcher"]
    elif how == "env":
        monkeypatch.setenv("DIFFRACT_CONVENTIONS", "weightwatcher")
    elif how == "file":
        (convnet.parent / "diffract.toml").write_text('conventions = "weightwatcher"\n')
    else:
        (convnet.parent / "diffract.toml").write_text(
            '[profiles.ram]\nconventions = "weightwatcher"\n'
        )
    assert main(argv) == 0
    _, rows = table(capsys.readouterr().out)
    got = {r[0]: float(r[-1]) for r in rows}
    for name in ("0.weight", "8.weight", "10.weight"):
        assert got[name] == pytest.approx(WW["rows"][name]["lambda_max"], rel=1e-3)


def test_without_conventions_the_scale_is_ours(convnet, capsys):
    argv = ["analyze", "convnet.npz", "--quiet", "--fields", "esd_max", "--profile", "ram"]
    assert main(argv) == 0
    _, rows = table(capsys.readouterr().out)
    got = {r[0]: float(r[-1]) for r in rows}
    n = 48  # 8.weight: 48 x 24, eigenvalues s^2 / N
    assert got["8.weight"] == pytest.approx(WW["rows"]["8.weight"]["lambda_max"] / n, rel=1e-3)


def test_flag_overrides_the_environment(convnet, monkeypatch, capsys):
    monkeypatch.setenv("DIFFRACT_CONVENTIONS", "weightwatcher")
    argv = ["analyze", "convnet.npz", "--quiet", "--fields", "esd_max", "--profile", "ram"]
    assert main([*argv, "--conventions", "diffract"]) == 0
    _, rows = table(capsys.readouterr().out)
    got = {r[0]: float(r[-1]) for r in rows}
    assert got["8.weight"] == pytest.approx(WW["rows"]["8.weight"]["lambda_max"] / 48, rel=1e-3)


def test_session_reads_the_setting(in_tmp, no_diffract_env, monkeypatch):
    with Session(profile="ram") as s:
        assert s.conventions is None
    monkeypatch.setenv("DIFFRACT_CONVENTIONS", "weightwatcher")
    with Session(profile="ram") as s:
        assert s.conventions == "weightwatcher"
        s.models.add({"small.weight": np.ones((4, 300))}, model_id="m")
        report = s.compute.apply("esd_max", progress=False)
        assert [e.name for e in report.not_applicable_reasons] == ["small.weight"]
    with Session(profile="ram", conventions="diffract") as s:  # the argument wins
        assert s.conventions == "diffract"
    assert resolve(cwd=in_tmp).sources["conventions"] == "environment"


def test_bad_conventions_are_named(in_tmp, no_diffract_env, monkeypatch, capsys):
    (in_tmp / "diffract.toml").write_text('conventions = "tensorflow"\n')
    with pytest.raises(ConfigError, match=r"invalid conventions='tensorflow' \(valid conventions"):
        resolve(cwd=in_tmp)
    with pytest.raises(SystemExit):
        main(["analyze", "m.npz", "--conventions", "ww"])
    assert "invalid choice: 'ww'" in capsys.readouterr().err
