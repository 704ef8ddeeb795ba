"""The sidebar API on stores other than HDF5 (SQLite, Zarr, hybrid) and its error paths: a
bad, outside or corrupt path is a clean 4xx/5xx JSON reply that names no absolute path."""

from __future__ import annotations

import json

import pytest
from tornado.httpclient import HTTPClientError

from _ui_helpers import mlp
from diffract import Session

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"diffract": True}}}


def _store(path, backend, models=("m1",)):
    with Session(backend=backend, path=path) as s:
        for i, m in enumerate(models):
            s.models.add(mlp(i), m)
        s.compute.apply("frob_norm", progress=False)
    return path


@pytest.fixture
def mixed(jp_root_dir):
    """One store of each on-disk backend but HDF5 (HDF5's are covered by test_server.py)."""
    _store(jp_root_dir / "a.diffract.sqlite", "sqlite", models=("s1", "s2"))
    _store(jp_root_dir / "z" / ".diffract.zarr", "zarr", models=("z1",))
    _store(jp_root_dir / "h" / ".diffract-hybrid", "hybrid", models=("h1",))
    return jp_root_dir


async def get(jp_fetch, endpoint, **params):
    r = await jp_fetch("diffract", "api", endpoint, params=params)
    return json.loads(r.body)


async def failure(jp_fetch, endpoint, **params):
    """(status, JSON body) of a request that must fail."""
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("diffract", "api", endpoint, params=params)
    return info.value.code, json.loads(info.value.response.body)


async def test_sidebar_lists_and_reads_sqlite_zarr_and_hybrid_stores(jp_fetch, mixed):
    listed = (await get(jp_fetch, "stores"))["stores"]
    assert [s["path"] for s in listed] == [
        "a.diffract.sqlite",
        "h/.diffract-hybrid",
        "z/.diffract.zarr",
    ]
    assert all(s["stamp"] and s["updated"] > 0 for s in listed)
    expected = {
        "a.diffract.sqlite": ["s1", "s2"],
        "z/.diffract.zarr": ["z1"],
        "h/.diffract-hybrid": ["h1"],
    }
    for path, models in expected.items():
        d = await get(jp_fetch, "store", path=path)
        assert d["path"] == path and [m["model_id"] for m in d["models"]] == models, path
        assert d["models"][0]["slices"] == 8 and "frob_norm" in d["models"][0]["fields"]
        assert d["levels"]["frob_norm"] == "param"
        f = await get(jp_fetch, "field", path=path, field="frob_norm", model=models[0])
        pts = f["models"][0]["points"]
        assert [p["name"] for p in pts] == [f"layers.{i}.weight" for i in range(4)]
        assert all(isinstance(p["value"], float) and p["value"] > 0 for p in pts), path


async def test_sqlite_values_match_the_session(jp_fetch, mixed):
    f = await get(jp_fetch, "field", path="a.diffract.sqlite", field="frob_norm", model="s2")
    with Session(backend="sqlite", path=mixed / "a.diffract.sqlite", readonly=True) as s:
        want = {
            sl.name: s.results.get("frob_norm", sl.uid)
            for sl in s.models.slices()
            if sl.model_id == "s2" and sl.name.endswith(".weight")
        }
    got = {p["name"]: p["value"] for p in f["models"][0]["points"]}
    assert got == pytest.approx(want) and len(got) == 4


def _no_absolute_path(body: dict, root) -> None:
    text = json.dumps(body)
    assert str(root) not in text and str(root.resolve()) not in text, text


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("missing/.diffract", 404, "no diffract store at 'missing/.diffract'"),
        ("../elsewhere", 403, "'..' is refused"),
        ("/etc", 403, "absolute paths are refused"),
        ("notes", 404, "no diffract store at 'notes'"),
    ],
)
async def test_bad_paths_are_clean_json_errors(jp_fetch, mixed, path, status, words):
    (mixed / "notes").mkdir()
    for endpoint, extra in (("store", {}), ("field", {"field": "frob_norm"})):
        code, body = await failure(jp_fetch, endpoint, path=path, **extra)
        assert (code, body["status"]) == (status, status), (endpoint, path, body)
        assert words in body["error"], body
        _no_absolute_path(body, mixed)


def test_a_nul_byte_in_a_path_is_refused(tmp_path):
    """(Tornado turns %00 in a query into a space, so this is checked on the resolver.)"""
    from diffract.server import PathRefused, resolve_store

    with pytest.raises(PathRefused, match="invalid path"):
        resolve_store(tmp_path, "a\x00b")


async def test_missing_arguments_are_clean_json_errors(jp_fetch, mixed):
    code, body = await failure(jp_fetch, "store")
    assert code == 404 and "missing ?path=" in body["error"]
    code, body = await failure(jp_fetch, "field", path="a.diffract.sqlite")
    assert code == 400 and body == {"error": "missing ?field=<field name>", "status": 400}
    code, body = await failure(
        jp_fetch, "field", path="a.diffract.sqlite", field="frob_norm", model="nope"
    )
    assert code == 404 and "nope" in body["error"]
    _no_absolute_path(body, mixed)


async def test_a_corrupt_store_is_an_error_reply_not_a_crash(jp_fetch, jp_root_dir):
    """A store whose marker is garbage, and an SQLite store whose file is cut short: the
    reply is a JSON error (no traceback page), and the sidebar's listing still works."""
    good = _store(jp_root_dir / "good" / ".diffract", "hdf5")
    bad = _store(jp_root_dir / "bad" / ".diffract", "hdf5")
    marker = bad / "diffract-store.json"
    marker.write_text("{ not json")
    cut = _store(jp_root_dir / "cut.diffract.sqlite", "sqlite")
    data = cut.read_bytes()
    cut.write_bytes(data[:200])  # the SQLite header survives, the rest does not
    for path, words in (
        ("bad/.diffract", "unreadable store marker"),
        ("cut.diffract.sqlite", "truncated SQLite store"),
    ):
        for endpoint, extra in (("store", {}), ("field", {"field": "frob_norm"})):
            code, body = await failure(jp_fetch, endpoint, path=path, **extra)
            assert (code, body["status"]) == (422, 422), (path, body)
            assert body["error"].startswith("cannot read the store: ") and words in body["error"]
            assert "Traceback" not in body["error"] and "\n" not in body["error"]
            assert path in body["error"] and "Error" not in body["error"]
            _no_absolute_path(body, jp_root_dir)
    listed = [s["path"] for s in (await get(jp_fetch, "stores"))["stores"]]
    assert "good/.diffract" in listed
    assert [
        m["model_id"] for m in (await get(jp_fetch, "store", path="good/.diffract"))["models"]
    ] == ["m1"]
    assert good.exists()
