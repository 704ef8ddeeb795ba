"""The command line: analyze the demo model, list, export, store copy, errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from diffract import Session
from diffract.cli import main
from diffract.store import open_path


@pytest.mark.slow
def test_analyze_demo_model_prints_a_per_layer_table(in_tmp):
    proc = subprocess.run(
        [sys.executable, "-m", "diffract.cli", "analyze", "--quiet"],
        capture_output=True,
        text=True,
        cwd=in_tmp,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = lines[0].split()
    assert (
        header[:3] == ["name", "type", "shape"] and "frob_norm" in header and "pl_alpha" in header
    )
    table = lines[2 : lines.index("")]  # the diagnosis block follows an empty line
    rows = [line for line in table if line.strip()]
    assert lines[lines.index("") + 1].startswith("diagnosis of all-MiniLM-L6-v2: ")
    assert len(rows) == 40  # MiniLM's 2-D weights: 36 encoder matrices, 3 embeddings, the pooler
    assert any(r.startswith("encoder.layer.0.attention.self.query.weight") for r in rows)
    assert "added 'all-MiniLM-L6-v2': 103 slices" in proc.stderr
    again = subprocess.run(
        [sys.executable, "-m", "diffract.cli", "analyze", "--quiet"],
        capture_output=True,
        text=True,
        cwd=in_tmp,
    )
    assert "already stored; reusing it" in again.stderr and "computed 0 values" in again.stderr
    assert again.stdout == proc.stdout


def test_list_and_export(in_tmp, mlp_weights, capsys):
    with Session() as s:
        s.models.add(mlp_weights, model_id="m")
        s.compute.apply("frob_norm", progress=False)
    assert main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["model_id"] == "m" and listed[0]["slices"] == 6
    assert main(["export", "frob_norm", "--to", "out.json"]) == 0
    rows = json.loads((in_tmp / "out.json").read_text())
    assert [r["name"] for r in rows][:2] == ["layers.0.bias", "layers.0.weight"]
    assert main(["export", "frob_norm", "--to", "out.csv"]) == 0
    assert (in_tmp / "out.csv").read_text().splitlines()[0] == "model_id,name,uid,type,frob_norm"


@pytest.mark.parametrize(
    "dst,backend",
    [
        ("copy.sqlite", "sqlite"),
        ("copy.zarr", "zarr"),
        ("copy-hybrid", "hybrid"),
        ("copy-h5", "hdf5"),
    ],
)
def test_store_copy_is_lossless(in_tmp, mlp_weights, dst, backend, capsys):
    with Session() as s:
        s.models.add(mlp_weights, model_id="m")
        s.models.add({k: v * 2 for k, v in mlp_weights.items()}, model_id="m2")
        s.compute.apply("stable_rank", "esd", "weights_std", progress=False)
    args = ["store", "copy", ".diffract", dst] + (
        ["--backend", backend] if backend == "hybrid" else []
    )
    assert main(args) == 0
    assert f"-> {backend}" in capsys.readouterr().out
    src, out = open_path(".diffract"), open_path(dst)
    assert out.backend == backend
    assert src.models() == out.models()
    assert [s.uid for s in src.slices()] == [s.uid for s in out.slices()]
    for s in src.slices():
        np.testing.assert_array_equal(src.weights(s.uid), out.weights(s.uid))
    assert sorted(src.keys()) == sorted(out.keys())
    for k in src.keys():
        a, b = src.get(k), out.get(k)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b


def test_errors_are_one_line(in_tmp, capsys):
    assert main(["analyze", "missing.safetensors", "--id", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("diffract: error: checkpoint not found")
    assert main(["analyze", "missing.safetensors", "--id", "bad/id"]) == 2
    assert "reserved character '/'" in capsys.readouterr().err


def test_conflicting_or_empty_selections_are_errors(in_tmp, mlp_weights, capsys):
    with Session() as s:
        s.models.add(mlp_weights, model_id="m")
        s.compute.apply("frob_norm", progress=False)
    assert main(["list", "--store", ".diffract", "--profile", "ram"]) == 2
    assert "--profile ram conflict" in capsys.readouterr().err
    assert main(["export", "frob_norm", "--to", "o.csv", "--models", "nope", "m"]) == 2
    err = capsys.readouterr().err
    assert "no model 'nope'" in err and "stored: ['m']" in err
    assert not (in_tmp / "o.csv").exists()


@pytest.mark.parametrize("dst", [".diffract", ".diffract/inner", "."])
def test_store_copy_refuses_targets_inside_or_around_a_store(in_tmp, mlp_weights, dst, capsys):
    with Session() as s:
        s.models.add(mlp_weights, model_id="m")
    before = sorted(p.relative_to(in_tmp) for p in in_tmp.rglob("*"))
    assert main(["store", "copy", ".diffract", dst]) == 2
    assert "copy to" in capsys.readouterr().err
    assert sorted(p.relative_to(in_tmp) for p in in_tmp.rglob("*")) == before
    other = in_tmp / "other"
    with Session(path=str(other)) as s:
        s.models.add(mlp_weights, model_id="o")
    assert main(["store", "copy", ".diffract", "other/nested"]) == 2
    assert "inside the store folder" in capsys.readouterr().err


def test_default_model_ids_keep_dots_and_refuse_a_different_source(in_tmp, capsys):
    from safetensors.numpy import save_file

    from diffract.cli import default_model_id

    for folder, rows in (("llama-3.1-8B", 8), ("llama-3.2-1B", 12)):
        (in_tmp / folder).mkdir()
        save_file({"w": np.ones((rows, 8), np.float32)}, str(in_tmp / folder / "model.safetensors"))
    assert default_model_id(in_tmp / "llama-3.1-8B") == "llama-3.1-8B"
    assert default_model_id(in_tmp / "step-1000.safetensors") == "step-1000"
    assert default_model_id(in_tmp / "notes.txt") == "notes.txt"
    assert main(["analyze", "llama-3.1-8B", "--quiet", "--fields", "frob_norm"]) == 0
    assert main(["analyze", "llama-3.2-1B", "--quiet", "--fields", "frob_norm"]) == 0
    out = capsys.readouterr()
    assert "added 'llama-3.2-1B'" in out.err and "12x8" in out.out
    np.savez(in_tmp / "m.npz", w=np.ones((4, 3), np.float32))
    save_file({"w": np.ones((5, 3), np.float32)}, str(in_tmp / "m.safetensors"))
    assert main(["analyze", "m.npz", "--quiet", "--fields", "frob_norm"]) == 0
    capsys.readouterr()
    assert main(["analyze", "m.safetensors", "--quiet", "--fields", "frob_norm"]) == 2
    err = capsys.readouterr().err
    assert "already stored from" in err and "--id" in err
    assert main(["analyze", "m.safetensors", "--id", "m2", "--quiet", "--fields", "frob_norm"]) == 0


@pytest.mark.parametrize(
    "extra,message",
    [(["--fields", "frob_norm,nope_field"], "nope_field"), (["--workers", "0"], "--workers")],
)
def test_analyze_checks_its_arguments_before_adding(in_tmp, extra, message, capsys):
    np.savez(in_tmp / "m.npz", w=np.ones((4, 3), np.float32))
    assert main(["analyze", "m.npz", "--quiet", *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (in_tmp / ".diffract").exists() or main(["list", "--json"]) == 0
    if (in_tmp / ".diffract").exists():
        assert json.loads(capsys.readouterr().out) == []


def test_export_models_accepts_patterns(in_tmp, mlp_weights):
    with Session() as s:
        s.models.add(mlp_weights, model_id="llama-1")
        s.compute.apply("frob_norm", progress=False)
    assert main(["export", "frob_norm", "--to", "o.json", "--models", "re:llama-.*"]) == 0
    assert {r["model_id"] for r in json.loads((in_tmp / "o.json").read_text())} == {"llama-1"}
    assert main(["export", "frob_norm", "--to", "p.json", "--models", "re:gpt-.*"]) == 2
