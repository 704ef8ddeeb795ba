"""Issue 14, point 4: ``Session(profile=, config_path=, other_session=)`` with Diffract's
configuration files (INI, YAML, JSON; DIFFRACT-API.md §1), ``list_profiles``, merging, and
the bad input of the issue's last acceptance point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import diffract
from diffract import Session
from diffract._errors import ConfigError, IncompatibleSessionsError
from diffract._vocab.diffract_config import settings_from_file
from diffract.session import SessionError

INI = """
[storage]
backend = sqlite

[storage.sqlite]
path = ${STORE_HOME}/sqlite/sqlite_storage.db
wal_mode = true

[metadata.sqlite]
path = :memory:

[cache]
backend = simple

[cache.simple]
max_memory_mb = 128_000

[parallel.thread_pool]
max_workers = 3

[nn.extractor]
skip_not_implemented_types = true

[export]
default_export_format = list

[logging]
version = 1
"""


def _mlp(seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_list_profiles(in_tmp, no_diffract_env):
    names = diffract.list_profiles()
    assert names[:3] == ["ram", "local", "hybrid"] and "sqlite" in names
    (in_tmp / "diffract.toml").write_text('[profiles.team]\nbackend = "zarr"\npath = "z"\n')
    assert diffract.list_profiles()[-1] == "team"


def test_ini_file_with_diffract_sections(in_tmp, no_diffract_env, monkeypatch):
    monkeypatch.setenv("STORE_HOME", str(in_tmp / ".diffract"))
    (in_tmp / "c.ini").write_text(INI)
    settings, extras = settings_from_file(in_tmp / "c.ini")
    assert settings == {
        "backend": "sqlite",
        "path": str(in_tmp / ".diffract.sqlite"),  # ours, beside Diffract's .diffract/sqlite/
        "cache": "lru",
        "cache_bytes": "128000MB",
        "workers": 3,
    }
    assert extras["default_export_format"] == "list"
    assert "logging" in extras["ignored"] and "nn.extractor" in extras["ignored"]
    s = Session(config_path=in_tmp / "c.ini", profile="local")  # the file wins over the profile
    assert s.config["backend"] == "sqlite" and s.workers == 3
    s.models.add(_mlp(0), model_id="m")
    s.compute.apply("frob_norm", progress=False)
    rows = s.results.export_metrics("frob_norm")  # the file's default format: list
    assert isinstance(rows, list) and len(rows) == 2
    s.close()


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_yaml_and_json_files(in_tmp, no_diffract_env, monkeypatch, suffix):
    monkeypatch.setenv("HOME_DIR", str(in_tmp))
    data = {
        "storage": {"backend": "hdf5", "hdf5": {"path": "${HOME_DIR}/h/store.h5"}},
        "cache": {"backend": "redis", "redis": {"host": "h", "port": 6380, "db": 2}},
        "export": {"default_export_format": "pandas"},
    }
    p = in_tmp / f"c{suffix}"
    if suffix == ".json":
        p.write_text(json.dumps(data))
    else:
        import yaml

        p.write_text(yaml.safe_dump(data))
    settings, extras = settings_from_file(p)
    assert settings["path"] == str(in_tmp / "h" / "store.diffract-lab")
    assert settings["cache"] == "redis://h:6380/2" and extras["default_export_format"] == "pandas"


def test_a_ram_file_and_our_toml_still_work(in_tmp, no_diffract_env):
    (in_tmp / "r.ini").write_text("[storage]\nbackend = ram\n[cache]\nbackend = none\n")
    assert Session(config_path="r.ini").config["backend"] == "ram"
    (in_tmp / "diffract.toml").write_text('profile = "ram"\n')
    assert Session().config["backend"] == "ram"


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("bad.ini", "[storage]\nbackend = ram\n[bogus]\nx = 1\n", r"unknown section \[bogus\]"),
        ("key.ini", "[storage.sqlite]\npath = a.db\nspeed = 3\n", "unknown key 'speed'"),
        ("broken.ini", "[storage\nbackend = ram\n", "malformed INI"),
        ("broken.yaml", "storage: [unclosed\n", "malformed YAML"),
        ("broken.json", '{"storage": ', "malformed JSON"),
        ("c.toml", "x = 1\n", "unsupported configuration file type"),
        ("v.ini", "[export]\ndefault_export_format = xml\n", "default_export_format"),
    ],
)
def test_bad_config_files_are_named_errors(in_tmp, no_diffract_env, name, text, match):
    (in_tmp / name).write_text(text)
    with pytest.raises(ConfigError, match=match):
        Session(config_path=name)


def test_unknown_profile_and_missing_file(in_tmp, no_diffract_env):
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        Session(profile="nope")
    with pytest.raises(ConfigError, match="container"):
        Session(container=object())
    assert issubclass(ConfigError, SessionError) and issubclass(ConfigError, ValueError)


def test_missing_config_file_warns_and_the_profile_applies(in_tmp, no_diffract_env, caplog):
    """Issue 26 point 19 (the behaviour changed from a ConfigError): Diffract's documented
    fallback, a warning naming the path, then the profile."""
    from diffract.session import MissingConfigWarning

    with (
        caplog.at_level("WARNING", logger="diffract.session"),
        pytest.warns(MissingConfigWarning, match=r"'prod\.ini'.*profile applies"),
    ):
        s = Session(profile="ram", config_path="prod.ini")
    assert s.profile == "ram" and s.store.path is None
    assert any("prod.ini" in r.getMessage() for r in caplog.records)  # logged, as Diffract
    with pytest.warns(MissingConfigWarning, match="sub/none.yaml"):
        local = Session(config_path=in_tmp / "sub" / "none.yaml", path=in_tmp / "store")
    assert local.profile == "local" and Path(local.store.path) == in_tmp / "store"
    local.close()
    with pytest.raises(ConfigError, match="config_path must be a path"):
        Session(config_path=3)
    assert not (in_tmp / "prod.ini").exists()


def test_container_is_refused(in_tmp, no_diffract_env):
    with pytest.raises(ConfigError, match="container"):
        Session(container=object())
    assert issubclass(ConfigError, SessionError) and issubclass(ConfigError, ValueError)


def test_merge_other_session_and_other_session_argument():
    a = Session(profile="ram")
    a.models.add(_mlp(0), model_id="model-a")
    a.compute.apply("frob_norm", "stable_rank", progress=False)
    b = Session(profile="ram")
    b.models.add(_mlp(1), model_id="model-b")
    b.utils.merge_other_session(a, fields=["frob_norm"])
    assert b.models.list() == ["model-a", "model-b"]
    rows = b.results.export_metrics("frob_norm", "stable_rank", export_format="list")
    # b has not computed its own: its rows are there without values (issue 26, point 2)
    assert {r["model_id"] for r in rows if "frob_norm" in r} == {"model-a"}
    assert all("stable_rank" not in r for r in rows)  # only the fields asked for
    b.utils.merge_other_session(a)  # everything else now; what b holds is kept
    assert all(
        "stable_rank" in r
        for r in b.filter(model_ids=["model-a"]).results.export_metrics(
            "stable_rank", export_format="list"
        )
    )
    c = Session(profile="ram", other_session=a)
    assert c.models.list() == ["model-a"]
    bad = Session(profile="ram")
    bad.models.add({"0.weight": __import__("numpy").zeros((3, 3), "float32")}, model_id="model-a")
    bad.compute.apply("frob_norm", progress=False)
    with pytest.raises(IncompatibleSessionsError, match=r"model-a.*in both sessions"):
        bad.utils.merge_other_session(a)
    assert bad.models.list() == ["model-a"] and len(bad.models.slices()) == 1  # nothing lost
    assert bad.results.export_metrics("frob_norm", export_format="list")[0]["frob_norm"] == 0.0
    assert diffract.upgrade_metadata_index is not None
    with pytest.raises(FileNotFoundError):
        diffract.upgrade_metadata_index(Path("no") / "metadata_index.db")
