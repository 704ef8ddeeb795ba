"""Edge cases of the configuration: project profiles without a path, the ram profile, an
unrelated or malformed pyproject.toml / diffract.toml, empty environment variables; bad input
gets a clear error naming the problem."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from diffract import ConfigError, Session
from diffract._vocab.config import resolve
from diffract.cli import main


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
