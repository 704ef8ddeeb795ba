"""Edge cases of the ``%diffract`` magics: export of mixed fields, ``add`` with checkpoint paths
and expressions, ``show --kind esd``, unknown subcommands, a failed open."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pytest
from IPython.core.error import UsageError

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _mlp(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "layers.0.weight": rng.normal(size=(12, 8)).astype(np.float32),
        "layers.0.bias": rng.normal(size=12).astype(np.float32),
        "layers.1.weight": rng.normal(size=(6, 12)).astype(np.float32),
        "layers.1.bias": rng.normal(size=6).astype(np.float32),
    }


@pytest.fixture
def ip(fresh_shell):
    """A new shell per test (conftest.fresh_shell: no DIFFRACT_* variables, fresh folder)."""
    fresh_shell.user_ns["mlp"] = _mlp
    return fresh_shell


def _magics(shell):
    return shell.magics_manager.registry["DiffractMagics"]


def _csv_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


# --- 4. export of mixed fields -------------------------------------------------------------------


@pytest.mark.parametrize("sparse_rows", [False, True])
def test_export_csv_of_param_and_model_fields_has_every_column(
    ip, in_tmp, monkeypatch, sparse_rows
):
    ip.run_line_magic("diffract", "open --profile ram")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    ip.run_line_magic("diffract", "compute frob_norm model_stable_rank --wait")
    if sparse_rows:  # rows that carry only their own fields (list export without padding)
        results = type(_magics(ip).session.results)
        real = results.export_table

        def sparse(self, *fields, **kw):
            rows = real(self, *fields, **kw)
            if kw.get("export_format") != "list":
                return rows
            return [{k: v for k, v in r.items() if k not in fields or v is not None} for r in rows]

        monkeypatch.setattr(results, "export_table", sparse)
    ip.run_line_magic("diffract", "export frob_norm model_stable_rank --to out.csv")
    text = (in_tmp / "out.csv").read_text()
    header = text.splitlines()[0].split(",")
    assert header[:4] == ["model_id", "name", "uid", "type"]
    assert "frob_norm" in header and "model_stable_rank" in header
    rows = _csv_rows(in_tmp / "out.csv")
    params = [r for r in rows if r["type"] != "model"]
    (model,) = [r for r in rows if r["type"] == "model"]
    assert any(r["frob_norm"] for r in params) and model["model_stable_rank"]
    assert model["frob_norm"] == "" and all(r["model_stable_rank"] == "" for r in params)
    assert [p.name for p in in_tmp.iterdir()] == ["out.csv"]  # no temporary file left


def test_export_that_fails_leaves_no_half_written_file(ip, in_tmp, monkeypatch):
    ip.run_line_magic("diffract", "open --profile ram")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    ip.run_line_magic("diffract", "compute frob_norm --wait")
    (in_tmp / "out.csv").write_text("previous content\n")

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("cannot format this value")

    results = type(_magics(ip).session.results)
    real = results.export_table

    def rows_failing_late(self, *fields, **kw):
        rows = real(self, *fields, **kw)
        rows[-1] = {**rows[-1], "frob_norm": Unprintable()}
        return rows

    monkeypatch.setattr(results, "export_table", rows_failing_late)
    with pytest.raises(UsageError, match="cannot format this value"):
        ip.run_line_magic("diffract", "export frob_norm --to out.csv")
    assert (in_tmp / "out.csv").read_text() == "previous content\n"
    assert sorted(p.name for p in in_tmp.iterdir()) == ["out.csv"]


# --- 5. add: checkpoint paths and expressions ----------------------------------------------------


def _documented_example_lines() -> list[str]:
    text = (DOCS / "magics.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (block,) = [b for b in blocks if "%diffract add" in b]
    return [ln for ln in block.splitlines() if "%diffract" in ln]


def test_the_documented_magics_example_runs(ip, in_tmp, capsys):
    from safetensors.numpy import save_file

    (in_tmp / "checkpoints").mkdir()
    save_file(_mlp(0), str(in_tmp / "checkpoints" / "step-1000.safetensors"))
    lines = _documented_example_lines()
    assert any('add "checkpoints/step-1000.safetensors"' in ln for ln in lines)
    result = None
    for ln in lines:
        rest = ln.split("%diffract", 1)[1].strip()
        result = ip.run_line_magic("diffract", rest)
        if ln.startswith("session = "):
            assert result is _magics(ip).session
    assert "added 4 slices as 'step-1000'" in capsys.readouterr().out
    assert _magics(ip).session.models.ids() == ["step-1000"]
    rows = _csv_rows(in_tmp / "alpha.csv")
    assert rows and {"pl_alpha", "stable_rank"} <= set(rows[0])
    assert all(r["type"] == "dense" for r in rows if r["stable_rank"])


@pytest.mark.parametrize(
    "form",
    [
        'add "ck.npz" --id m',  # quoted (as documented)
        "add ck.npz --id m",  # unquoted
        "add '\"ck.npz\"' --id m",  # a Python string literal, quoted for the shell
        "add str(Path('ck.npz')) --id m",  # an expression giving the path
    ],
)
def test_add_takes_a_checkpoint_path_in_each_form(ip, in_tmp, form, capsys):
    np.savez(in_tmp / "ck.npz", **_mlp(0))
    ip.run_cell("from pathlib import Path")
    ip.run_line_magic("diffract", "open --profile ram")
    ip.run_line_magic("diffract", form)
    assert "added 4 slices as 'm'" in capsys.readouterr().out


def test_add_evaluates_expressions_with_quotes_and_spaces(ip, capsys):
    ip.run_line_magic("diffract", "open --profile ram")
    ip.user_ns["w"] = np.ones((4, 3), np.float32)
    ip.run_line_magic("diffract", 'add {"fc.weight": w, "fc.bias": w[0]} --id m1')
    ip.run_line_magic("diffract", "add mlp(1) --replace --id m2")
    assert _magics(ip).session.models.ids() == ["m1", "m2"]
    assert "added 2 slices as 'm1'" in capsys.readouterr().out


def test_a_variable_wins_over_a_folder_of_the_same_name(ip, in_tmp, capsys):
    (in_tmp / "weights").mkdir()
    ip.user_ns["weights"] = _mlp(0)
    ip.run_line_magic("diffract", "open --profile ram")
    ip.run_line_magic("diffract", "add weights --id m")
    assert "added 4 slices as 'm'" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ('add "missing/step-1.safetensors" --id m', r"'missing/step-1\.safetensors'.*not found"),
        ("add missing.safetensors --id m", r"'missing\.safetensors'.*not found"),
        ("add not_defined --id m", r"cannot evaluate 'not_defined'.*NameError"),
        ("add mlp( --id m", r"cannot evaluate 'mlp\('.*SyntaxError"),
    ],
)
def test_add_errors_name_the_argument(ip, form, message):
    ip.run_line_magic("diffract", "open --profile ram")
    with pytest.raises(UsageError, match=message) as info:
        ip.run_line_magic("diffract", form)
    assert "\n" not in str(info.value).strip()


# --- 6. show --kind esd, unknown subcommands, a failed open ---------------------------------------


def test_show_esd_without_slice_says_slice_is_needed(ip):
    ip.run_line_magic("diffract", "open --profile ram")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    with pytest.raises(UsageError, match=r"--kind esd needs --slice UID"):
        ip.run_line_magic("diffract", "show esd --kind esd")
    p = ip.run_line_magic("diffract", "show esd --kind esd --slice layers.0.weight")
    assert p.kind == "esd" and p.slice == "layers.0.weight"
    p.stop()


def test_an_unknown_subcommand_names_the_magic_once(ip):
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("diffract", "frobnicate")
    msg = str(info.value)
    assert msg.startswith("%diffract: ") and msg.count("%diffract") == 1
    assert "invalid choice: 'frobnicate'" in msg


def test_a_failed_open_keeps_the_previous_session(ip, in_tmp):
    first = ip.run_line_magic("diffract", "open st1")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    with pytest.raises(UsageError, match=r"unknown profile 'nope'.*stays open and in use") as info:
        ip.run_line_magic("diffract", "open st2 --profile nope")
    assert "st1" in str(info.value)
    assert _magics(ip).session is first and not (in_tmp / "st2").exists()
    ip.run_line_magic("diffract", "compute frob_norm --wait")  # still usable, still writable
    assert first.results.get("frob_norm", "layers.0.weight", "m1") > 0
    # a store that cannot be opened (a plain file where the folder should be)
    (in_tmp / "notastore").write_text("hello")
    with pytest.raises(UsageError, match=r"stays open and in use"):
        ip.run_line_magic("diffract", "open notastore")
    assert _magics(ip).session is first
    first.models.add(_mlp(1), model_id="m2")  # the store was never closed


def test_a_failed_open_of_the_same_store_reopens_the_previous_session(ip, in_tmp):
    first = ip.run_line_magic("diffract", "open st1")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    # the same folder as another backend: the open store is released, the open fails
    with pytest.raises(UsageError, match=r"not an SQLite store .*was reopened and stays in use"):
        ip.run_line_magic("diffract", "open st1 --profile sqlite")
    again = _magics(ip).session
    assert again.store.path == first.store.path and again.models.ids() == ["m1"]
    again.models.add(_mlp(1), model_id="m2")  # writable again


def test_reopening_the_open_store_works(ip, in_tmp):
    first = ip.run_line_magic("diffract", "open st1")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    second = ip.run_line_magic("diffract", "open st1")
    assert second is not first and second.models.ids() == ["m1"]
    second.models.add(_mlp(1), model_id="m2")
    third = ip.run_line_magic("diffract", "open --profile ram")
    assert third.store.backend == "ram"


def test_open_without_profile_uses_the_configured_one(ip, in_tmp):
    (in_tmp / "diffract.toml").write_text('profile = "ram"\n')
    s = ip.run_line_magic("diffract", "open")
    assert s.store.backend == "ram" and list(in_tmp.iterdir()) == [in_tmp / "diffract.toml"]
