"""Profiles, the project file, environment variables and arguments, in that precedence."""

from __future__ import annotations

import re

import pytest

from diffract import ConfigError, Session
from diffract._vocab.config import PROFILES, resolve
from diffract.cli import main
from diffract.store import BACKENDS


def test_defaults_are_the_local_profile(tmp_path):
    cfg = resolve(cwd=tmp_path, env={})
    assert cfg["profile"] == "local" and cfg["backend"] == "hdf5"
    assert cfg["path"] == str(tmp_path / ".diffract")
    assert cfg.sources["backend"] == "profile 'local'" and cfg.sources["cache"] == "default"


def test_precedence_file_then_env_then_argument(tmp_path):
    (tmp_path / "diffract.toml").write_text(
        'profile = "sqlite"\nworkers = 2\ncache = "lru"\nmemory_budget = "1GB"\n'
    )
    cfg = resolve(cwd=tmp_path, env={})
    assert cfg["backend"] == "sqlite" and cfg["workers"] == 2 and cfg["cache"] == "lru"
    assert cfg.sources["workers"].endswith("diffract.toml")
    cfg = resolve(cwd=tmp_path, env={"DIFFRACT_WORKERS": "3", "DIFFRACT_PROFILE": "zarr"})
    assert (
        cfg["workers"] == 3 and cfg["backend"] == "zarr" and cfg.sources["workers"] == "environment"
    )
    cfg = resolve(cwd=tmp_path, env={"DIFFRACT_WORKERS": "3"}, workers=1, profile="ram")
    assert cfg["workers"] == 1 and cfg["backend"] == "ram" and cfg["path"] is None
    assert cfg["memory_budget"] == 1024**3


def test_custom_profiles_in_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.diffract]\nprofile = "runs"\n\n[tool.diffract.profiles.runs]\nbackend = "hybrid"\npath = "store/runs"\narrays = "zarr"\n'
    )
    cfg = resolve(cwd=tmp_path, env={})
    assert (cfg["profile"], cfg["backend"], cfg["arrays"]) == ("runs", "hybrid", "zarr")
    assert cfg["path"] == str(tmp_path / "store" / "runs")
    assert "[tool.diffract]" in cfg.config_file


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('profile = "nope"', r"unknown profile 'nope'; valid profiles are \["),
        ('colour = "red"', r"unknown key\(s\) \['colour'\]; valid keys are \["),
        ('backend = "mongodb"', r"invalid backend='mongodb' \(valid backends are"),
        ('cache = "memcached"', r"valid caches are 'none', 'lru' and a redis:// URL"),
        ("workers = 0", "workers must be an int >= 1"),
        ('memory_budget = "lots"', "memory_budget must be a positive size"),
        ("[profiles.x]\ncolour = 1", r"\[profiles.x\]: unknown key"),
    ],
)
def test_bad_configuration_names_what_is_valid(tmp_path, toml, message):
    (tmp_path / "diffract.toml").write_text(toml)
    with pytest.raises(ConfigError, match=message):
        resolve(cwd=tmp_path, env={}, backends=BACKENDS)


def test_backends_are_the_store_registrys(in_tmp, no_diffract_env):
    """The store's registry is the one list of backends: the configuration checks against it
    (Session passes it), and every built-in profile opens a registered backend."""
    assert {backend for backend, _ in PROFILES.values()} <= set(BACKENDS)
    assert set(BACKENDS) <= set(PROFILES)  # each backend has a built-in profile of its name
    (in_tmp / "diffract.toml").write_text('backend = "mongodb"\n')
    valid = re.escape(str(list(BACKENDS)))
    with pytest.raises(
        ConfigError, match=rf"invalid backend='mongodb' \(valid backends are {valid}"
    ):
        Session()
    cfg = in_tmp / "diffract.ini"
    cfg.write_text("[storage]\nbackend = mongodb\n")
    with pytest.raises(
        ConfigError, match=rf"invalid \[storage\] backend='mongodb'; valid: {valid}"
    ):
        Session(config_path=cfg)


def test_broken_toml_names_the_file(tmp_path):
    (tmp_path / "diffract.toml").write_text("profile = ")
    with pytest.raises(ConfigError, match=r"diffract\.toml: cannot read the configuration"):
        resolve(cwd=tmp_path, env={})


def test_session_uses_the_resolved_configuration(in_tmp, monkeypatch, mlp_weights):
    (in_tmp / "diffract.toml").write_text('profile = "sqlite"\ncache = "lru"\n')
    monkeypatch.setenv("DIFFRACT_WORKERS", "2")
    with Session() as s:
        assert s.store.backend == "sqlite" and s.workers == 2 and s.store.cache.name == "lru"
        s.models.add(mlp_weights, model_id="m")
    assert (in_tmp / ".diffract.sqlite").exists()


def test_diffract_config_prints_values_and_sources(in_tmp, capsys, monkeypatch):
    monkeypatch.setenv("DIFFRACT_CACHE", "lru")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "backend" in out and "hdf5" in out and "(profile 'local')" in out
    assert "lru" in out and "(environment)" in out
