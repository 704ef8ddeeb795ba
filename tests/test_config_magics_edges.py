"""Edge cases of the configuration, the ``%diffract`` magics, live panels of array fields,
and reading sampling manifests back: bad input gets a clear error naming the problem."""

from __future__ import annotations

import csv
import io
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from diffract import ConfigError, Session
from diffract._core.config import resolve
from diffract.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _mlp(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "layers.0.weight": rng.normal(size=(12, 8)).astype(np.float32),
        "layers.0.bias": rng.normal(size=12).astype(np.float32),
        "layers.1.weight": rng.normal(size=(6, 12)).astype(np.float32),
        "layers.1.bias": rng.normal(size=6).astype(np.float32),
    }


# --- 1. project profiles without a path --------------------------------------------------------


def test_project_profile_overriding_a_builtin_keeps_its_path(in_tmp, no_diffract_env):
    (in_tmp / "diffract.toml").write_text("[profiles.local]\nworkers = 4\n")
    cfg = resolve(cwd=in_tmp, env={})
    assert (cfg["backend"], cfg["path"], cfg["workers"]) == ("hdf5", str(in_tmp / ".diffract"), 4)
    assert cfg.sources["path"] == "profile 'local'"
    assert (
        cfg.sources["workers"].startswith("profile 'local' (")
        and "diffract.toml" in (cfg.sources["workers"])
    )
    with Session() as s:
        assert s.workers == 4 and Path(s.store.path) == (in_tmp / ".diffract").resolve()


def test_project_profile_changing_a_builtins_backend_gets_that_backends_path(tmp_path):
    (tmp_path / "diffract.toml").write_text('[profiles.local]\nbackend = "sqlite"\n')
    cfg = resolve(cwd=tmp_path, env={})
    assert (cfg["backend"], cfg["path"]) == ("sqlite", str(tmp_path / ".diffract.sqlite"))


def test_new_project_profile_without_a_path_names_the_profile_and_the_file(
    in_tmp, capsys, no_diffract_env
):
    (in_tmp / "diffract.toml").write_text('profile = "runs"\n[profiles.runs]\nworkers = 2\n')
    message = r"profile 'runs' in .*diffract\.toml sets no path, and the hdf5 backend needs one"
    with pytest.raises(ConfigError, match=message):
        resolve(cwd=in_tmp, env={})
    with pytest.raises(ConfigError, match=message):
        Session()
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert "profile 'runs'" in err and "diffract.toml" in err and "needs one" in err
    # a path from the environment (or an argument) completes it
    cfg = resolve(cwd=in_tmp, env={"DIFFRACT_PATH": "store"})
    assert cfg["path"] == str(in_tmp / "store") and cfg.sources["path"] == "environment"
    assert resolve(cwd=in_tmp, env={}, path="p")["path"] == str(in_tmp / "p")


# --- 2. the ram profile, unrelated pyproject.toml -------------------------------------------------


def test_ram_profile_ignores_backend_and_path_from_the_file(in_tmp, no_diffract_env):
    (in_tmp / "diffract.toml").write_text('backend = "sqlite"\npath = "x.sqlite"\n')
    with Session(profile="ram") as s:
        assert s.store.backend == "ram" and s.store.path is None
        s.models.add(_mlp(), model_id="m")
    assert not (in_tmp / "x.sqlite").exists()
    assert sorted(p.name for p in in_tmp.iterdir()) == ["diffract.toml"]
    # the file's other settings still apply; its profile key may choose ram too
    (in_tmp / "diffract.toml").write_text('profile = "ram"\npath = "x"\nworkers = 3\n')
    cfg = resolve(cwd=in_tmp, env={})
    assert (cfg["backend"], cfg["path"], cfg["workers"]) == ("ram", None, 3)


def test_ram_profile_ignores_backend_and_path_from_the_environment(in_tmp, monkeypatch):
    monkeypatch.setenv("DIFFRACT_BACKEND", "sqlite")
    monkeypatch.setenv("DIFFRACT_PATH", "y.sqlite")
    with Session(profile="ram") as s:
        assert s.store.backend == "ram"
    assert list(in_tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"backend": "sqlite"},
            r"profile 'ram' .*conflicts with the argument\(s\) backend='sqlite'",
        ),
        ({"path": "x.sqlite"}, r"profile 'ram' .*conflicts with the argument\(s\) path='x.sqlite'"),
    ],
)
def test_ram_profile_with_a_disk_argument_is_a_conflict(in_tmp, no_diffract_env, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Session(profile="ram", **kwargs)
    assert list(in_tmp.iterdir()) == []
    with Session(profile="ram", backend="ram") as s:  # no conflict
        assert s.store.backend == "ram"


def test_ram_backend_argument_with_a_path_argument_is_a_conflict(in_tmp, no_diffract_env):
    with pytest.raises(ConfigError, match=r"ram backend .*conflicts with the argument path='p'"):
        Session(backend="ram", path="p")


def test_a_profiles_ram_table_cannot_put_ram_on_disk(tmp_path):
    (tmp_path / "diffract.toml").write_text('[profiles.ram]\nbackend = "sqlite"\n')
    with pytest.raises(ConfigError, match=r"diffract\.toml \[profiles\.ram\]: the ram profile"):
        resolve(cwd=tmp_path, env={}, profile="ram")
    (tmp_path / "diffract.toml").write_text("[profiles.ram]\nworkers = 2\n")
    cfg = resolve(cwd=tmp_path, env={}, profile="ram")
    assert (cfg["backend"], cfg["path"], cfg["workers"]) == ("ram", None, 2)


def test_unparsable_pyproject_is_ignored_with_a_warning(in_tmp, no_diffract_env):
    (in_tmp / "pyproject.toml").write_text("[project\nname = 'x'\n")
    with (
        pytest.warns(UserWarning, match=r"pyproject\.toml: cannot read it .*ignoring it"),
        Session(profile="ram") as s,
    ):
        assert s.store.backend == "ram"
    with pytest.warns(UserWarning, match="pyproject.toml"):
        cfg = resolve(cwd=in_tmp, env={})
    assert cfg["profile"] == "local" and cfg.config_file is None


def test_pyproject_without_tool_diffract_is_ignored_quietly(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n[tool.ruff]\nline-length = 99\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = resolve(cwd=tmp_path, env={})
    assert cfg["profile"] == "local" and cfg.config_file is None


def test_unparsable_diffract_toml_stays_an_error(tmp_path):
    (tmp_path / "diffract.toml").write_text("workers = \n")
    (tmp_path / "pyproject.toml").write_text("[tool.diffract]\nworkers = 2\n")
    with pytest.raises(ConfigError, match=r"diffract\.toml: cannot read the configuration"):
        resolve(cwd=tmp_path, env={})


# --- 3. malformed tables, empty environment variables --------------------------------------------


def test_tool_diffract_that_is_not_a_table_names_it_and_the_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool]\ndiffract = 3\n")
    with pytest.raises(
        ConfigError, match=r"pyproject\.toml \[tool\.diffract\] must be a table of settings"
    ):
        resolve(cwd=tmp_path, env={})


def test_a_profile_that_is_not_a_table_says_so(tmp_path):
    (tmp_path / "diffract.toml").write_text("[profiles]\nruns = 'x'\n")
    with pytest.raises(ConfigError, match=r"profile 'runs' must be a table") as info:
        resolve(cwd=tmp_path, env={})
    assert "unknown key" not in str(info.value)


def test_empty_environment_variables_count_as_unset(tmp_path):
    cfg = resolve(cwd=tmp_path, env={"DIFFRACT_PROFILE": "", "DIFFRACT_WORKERS": " "})
    assert (cfg["profile"], cfg["workers"]) == ("local", 1)
    assert cfg.sources["profile"] == "default" and cfg.sources["workers"] == "default"


# --- magics --------------------------------------------------------------------------------------

from IPython.core.error import UsageError  # noqa: E402


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


# --- 7. a line panel of an array field --------------------------------------------------------------


def test_line_panel_of_an_array_field_says_it_needs_a_scalar_field():
    from diffract.widgets import FieldPanel

    s = Session(profile="ram")
    s.models.add(_mlp(), model_id="m1")
    before = FieldPanel(s, "esd", live=False)
    assert "nothing stored yet" in before.status.value
    s.compute.apply("esd", progress=False)
    for kind in ("line", "bar", "heatmap"):
        p = FieldPanel(s, "esd", kind=kind, live=False)
        status = p.status.value
        assert "nothing stored yet" not in status
        assert f"a {kind} panel needs a scalar field" in status and "kind='esd'" in status
        assert "array per slice" in p.snapshot_html()
    before.refresh()
    assert "array per slice" in before.status.value


# --- 8, 9. sampling -----------------------------------------------------------------------------


def _manifest():
    from diffract.sampling import Candidate, sample_replacement_candidates

    attn = {"kind": "attention", "name": "attention", "config": {"num_kv_heads": 4, "head_dim": 2}}
    ffn = {"kind": "ffn", "name": "ffn", "config": {"intermediate_size": 16}}
    cands = [
        Candidate(
            candidate_id="L0.teacher", layer_idx=0, hidden_width=8, source="self",
            subblocks=(attn, ffn),
        ),
        Candidate(
            candidate_id="L0.ffn8", layer_idx=0, hidden_width=8, source="p",
            subblocks=(attn, {**ffn, "config": {"intermediate_size": 8}}),
            changed_axes=("ffn.intermediate_size",),
        ),
    ]  # fmt: skip
    return sample_replacement_candidates(cands)


def test_materialize_of_an_empty_selection_returns_nothing():
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from test_sampling_kit import bert_like
    finally:
        sys.path.remove(str(Path(__file__).parent))
    from diffract.sampling import materialize, sample_replacement_candidates

    s = Session(profile="ram")
    s.models.add(bert_like(), model_id="t")
    assert materialize(s, sample_replacement_candidates([]), "t") == {}
    assert materialize(s, [], "t") == {}
    assert s.models.ids() == ["t"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy": {"foo": 1}}, r"policy has unknown key\(s\) \['foo'\]"),
        ({"policy": None}, r"policy must be a mapping"),
        ({"policy": {"seed": "x"}}, r"manifest policy: .*seed must be an int"),
        ({"eligible": None}, r"'eligible' must be a list of records"),
        ({"selected": "abc"}, r"'selected' must be a list of records"),
        ({"excluded": [None]}, r"excluded\[0\]: a record must be a mapping"),
    ],
)
def test_malformed_manifest_data_is_a_sampling_error(change, message):
    from diffract.sampling import SamplingError, manifest_from_dict

    data = {**_manifest().to_dict(include_identity=False), **change}
    with pytest.raises(SamplingError, match=message):
        manifest_from_dict(data)


def test_load_manifest_rejects_an_empty_identity():
    from diffract.sampling import SamplingError, load_manifest, save_manifest

    s = Session(profile="ram")
    m = _manifest()
    ident = save_manifest(s, m)
    with pytest.raises(SamplingError, match=r"identity '' is empty"):
        load_manifest(s, "")
    with pytest.raises(SamplingError, match=r"identity ' ' is empty"):
        load_manifest(s, " ")
    with pytest.raises(TypeError, match=r"identity must be a str"):
        load_manifest(s, None)
    assert load_manifest(s, ident[:8]) == m
