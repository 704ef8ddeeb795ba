"""Issue 18, points 1-7: crafted stores, special files, broken stores and odd request paths
against the sidebar API. Every reply is a fast JSON 4xx naming paths relative to the root."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time

import h5py
import numpy as np
import pytest
from tornado.httpclient import HTTPClientError

from _ui_helpers import mlp
from diffract import Session
from diffract._errors import StoreCorruptError

pytest_plugins = ("pytest_jupyter.jupyter_server",)

SECRET = b"TOP-SECRET-0123456789abcdef-TOP-SECRET-0123456789abcdef-TOP-SECR"  # 64 bytes


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"diffract": True}}}


def _store(path, backend="hdf5"):
    with Session(backend=backend, path=path) as s:
        s.models.add(mlp(0), "m1")
        s.compute.apply("frob_norm", progress=False)
    return path


async def failure(jp_fetch, endpoint, **params):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("diffract", "api", endpoint, params=params)
    return info.value.code, json.loads(info.value.response.body)


def _clean(body, root):
    """No absolute path, no exception class name, no parser internals in an error body."""
    text = json.dumps(body)
    assert str(root) not in text and "/tmp" not in text, body
    assert not re.search(r"\b\w*(Error|Exception)\b", body["error"]), body
    assert "Traceback" not in text and "\\n" not in text, body


def _segment(store):
    """A crafted segment (the next in sequence) that overrides frob_norm of every slice, in
    a store made to look written before manifests existed (its segments are then read
    through h5py, where these defences apply; a store with manifests refuses a segment
    without one: issue 28 point 19)."""
    for m in (store / "segments").glob("*.h5.json"):
        m.unlink()
    marker = store / "diffract-store.json"
    info = json.loads(marker.read_text())
    info.pop("manifests", None)
    marker.write_text(json.dumps(info))
    seq = 1 + max(int(p.name[:12]) for p in (store / "segments").glob("*.h5"))
    seg = store / "segments" / f"{seq:012d}.h5"
    owners = []
    for p in sorted((store / "segments").glob("*.h5")):
        with h5py.File(p, "r") as f:
            if "fields/frob_norm" in f:
                owners = [o.decode() for o in f["fields/frob_norm/owners"][()]]
    f = h5py.File(seg, "w")
    f.attrs["format"] = "diffract-segment"
    f.attrs["layout_version"] = 1
    f.attrs["seq"] = seq
    f.attrs["created"] = 0.0
    g = f.create_group("fields").create_group("frob_norm")
    g.attrs["kind"] = "int"
    g.create_dataset("owners", data=np.array(owners, dtype=object), dtype=h5py.string_dtype())
    return f, g, owners


def _secret(tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    secret = outside / "secret.bin"
    secret.write_bytes(SECRET)
    return outside, secret


def _leaked(body):
    text = json.dumps(body)
    ints = np.frombuffer(SECRET, dtype=np.int64)
    return any(str(int(i)) in text for i in ints) or "SECRET" in text


async def _field_refused_without_leak(jp_fetch, root, path):
    """A field read of the crafted store at ``path`` is a clean 4xx that shows no secret."""
    code, body = await failure(jp_fetch, "field", path=path, field="frob_norm")
    assert 400 <= code < 500 and not _leaked(body)
    _clean(body, root)


async def test_external_storage_does_not_read_outside(jp_fetch, jp_root_dir, tmp_path_factory):
    store = _store(jp_root_dir / "ext" / ".diffract")
    _, secret = _secret(tmp_path_factory)
    f, g, owners = _segment(store)
    g.create_dataset(
        "values", shape=(len(owners),), dtype=np.int64, external=[(str(secret), 0, len(SECRET))]
    )
    f.close()
    await _field_refused_without_leak(jp_fetch, jp_root_dir, "ext/.diffract")


async def test_external_links_are_not_followed(jp_fetch, jp_root_dir, tmp_path_factory):
    store = _store(jp_root_dir / "lnk" / ".diffract")
    outside, _ = _secret(tmp_path_factory)
    other = outside / "other.h5"
    with h5py.File(other, "w") as o:
        o["v"] = np.frombuffer(SECRET, dtype=np.int64)
    f, g, _ = _segment(store)
    g["values"] = h5py.ExternalLink(str(other), "/v")
    f.close()
    await _field_refused_without_leak(jp_fetch, jp_root_dir, "lnk/.diffract")


async def test_virtual_datasets_are_refused(jp_fetch, jp_root_dir, tmp_path_factory):
    store = _store(jp_root_dir / "vds" / ".diffract")
    outside, _ = _secret(tmp_path_factory)
    other = outside / "other.h5"
    with h5py.File(other, "w") as o:
        o["v"] = np.frombuffer(SECRET, dtype=np.int64)
    f, g, owners = _segment(store)
    layout = h5py.VirtualLayout(shape=(len(owners),), dtype=np.int64)
    layout[:] = h5py.VirtualSource(str(other), "v", shape=(8,))[: len(owners)]
    g.create_virtual_dataset("values", layout)
    f.close()
    await _field_refused_without_leak(jp_fetch, jp_root_dir, "vds/.diffract")


async def test_array_refs_cannot_leave_the_store(jp_fetch, jp_root_dir, tmp_path_factory):
    store = _store(jp_root_dir / "ref" / ".diffract")
    outside, _ = _secret(tmp_path_factory)
    with h5py.File(outside / "x.h5", "w") as o:
        o["ds"] = np.frombuffer(SECRET, dtype=np.int64)
    f, g, owners = _segment(store)
    g.create_dataset("values", data=np.arange(len(owners)))
    rel = os.path.relpath(outside / "x.h5", store / "segments")
    refs = [f"{owners[0]}\x1fspectrum\x1f{rel}:ds"]
    f.create_dataset("array_refs", data=np.array(refs, dtype=object), dtype=h5py.string_dtype())
    f.close()
    code, body = await failure(jp_fetch, "store", path="ref/.diffract")
    assert 400 <= code < 500 and not _leaked(body)
    _clean(body, jp_root_dir)
    with pytest.raises(StoreCorruptError, match="outside its folder"):
        Session(path=store, readonly=True)


async def test_a_fifo_segment_does_not_freeze_the_server(jp_fetch, jp_root_dir):
    store = _store(jp_root_dir / "fifo" / ".diffract")
    seq = 1 + max(int(p.name[:12]) for p in (store / "segments").glob("*.h5"))
    os.mkfifo(store / "segments" / f"{seq:012d}.h5")
    os.mkfifo(jp_root_dir / "x.diffract.sqlite")
    for path in ("fifo/.diffract", "x.diffract.sqlite"):
        t0 = time.monotonic()
        code, body = await asyncio.wait_for(failure(jp_fetch, "store", path=path), 10)
        assert 400 <= code < 500 and time.monotonic() - t0 < 5, (path, body)
        _clean(body, jp_root_dir)
    r = await asyncio.wait_for(jp_fetch("diffract", "api", "stores"), 10)
    assert r.code == 200


async def test_broken_stores_do_not_starve_healthy_ones(jp_fetch, jp_root_dir):
    _store(jp_root_dir / "good" / ".diffract")
    bad = _store(jp_root_dir / "bad" / ".diffract")
    seq = 1 + max(int(p.name[:12]) for p in (bad / "segments").glob("*.h5"))
    (bad / "segments" / f"{seq:012d}.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 500)
    t0 = time.monotonic()
    broken = [failure(jp_fetch, "store", path="bad/.diffract") for _ in range(64)]
    results = await asyncio.gather(
        *broken, jp_fetch("diffract", "api", "store", params={"path": "good/.diffract"})
    )
    assert all(400 <= code < 500 for code, _ in results[:-1])
    assert results[-1].code == 200
    assert time.monotonic() - t0 < 4


async def test_symlink_loop_and_long_names_are_clean_4xx(jp_fetch, jp_root_dir):
    os.symlink("loop", jp_root_dir / "loop")
    for path in ("loop", "loop/x", "a" * 300, "/".join(["b" * 250] * 20)):
        code, body = await failure(jp_fetch, "store", path=path)
        assert 400 <= code < 500, (path, code, body)
        _clean(body, jp_root_dir)


async def test_corrupt_listed_stores_answer_clean_4xx(jp_fetch, jp_root_dir):
    bad = _store(jp_root_dir / "bad" / ".diffract")
    (bad / "diffract-store.json").write_text("{ not json")
    cut = _store(jp_root_dir / "cut.diffract.sqlite", "sqlite")
    cut.write_bytes(cut.read_bytes()[:200])
    for path in ("bad/.diffract", "cut.diffract.sqlite"):
        code, body = await failure(jp_fetch, "store", path=path)
        assert 400 <= code < 500, (path, body)
        assert path in body["error"]
        _clean(body, jp_root_dir)


async def test_a_folder_named_like_a_drive_is_a_store_on_posix(jp_fetch, jp_root_dir):
    if os.name == "nt":
        pytest.skip("a drive letter on Windows")
    _store(jp_root_dir / "c:runs" / ".diffract")
    r = await jp_fetch("diffract", "api", "store", params={"path": "c:runs/.diffract"})
    assert json.loads(r.body)["models"][0]["model_id"] == "m1"


async def test_control_characters_in_path_are_refused(jp_fetch, jp_root_dir):
    _store(jp_root_dir / ".diffract")
    _store(jp_root_dir / "ctl x" / ".diffract")
    for path in (".diffract\x00", ".diffract ", " .diffract", "ctl\x01x/.diffract", "\t.diffract"):
        code, body = await failure(jp_fetch, "store", path=path)
        assert code in (400, 403, 404), (path, body)
    r = await jp_fetch("diffract", "api", "store", params={"path": "ctl x/.diffract"})
    assert r.code == 200
