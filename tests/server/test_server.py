"""The server extension: listing stores, one store, one field, auth, traversal, and reading a
store while another process writes to it (pytest-jupyter's jp_fetch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tornado.httpclient import HTTPClientError

from _ui_helpers import make_store

pytest_plugins = ("pytest_jupyter.jupyter_server",)

HERE = Path(__file__).parents[1]


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"diffract": True}}}


@pytest.fixture
def stores(jp_root_dir):
    make_store(jp_root_dir / ".diffract", models=("m1", "m2"), fields=("frob_norm", "stable_rank"))
    make_store(
        jp_root_dir / "runs" / "exp1" / ".diffract", models=("ckpt-000", "ckpt-100"), fields=()
    )
    # a real store in a folder the finder skips (SKIP_DIRS): listed if the skip rule broke
    make_store(jp_root_dir / "node_modules" / "x" / ".diffract", models=("dep",), fields=())
    (jp_root_dir / "notes").mkdir()
    return jp_root_dir


async def get(jp_fetch, endpoint, **params):
    r = await jp_fetch("diffract", "api", endpoint, params=params)
    return json.loads(r.body)


async def status_of(jp_fetch, endpoint, headers=None, **params):
    try:
        r = await jp_fetch("diffract", "api", endpoint, params=params, headers=headers)
    except HTTPClientError as exc:
        return exc.code
    return r.code


async def test_version_handshake(jp_fetch):
    import diffract

    v = await get(jp_fetch, "version")
    assert v == {"version": diffract.__version__, "api": 1, "package": "diffract-lab"}


async def test_lists_stores_under_the_root(jp_fetch, stores):
    reply = await get(jp_fetch, "stores")
    paths = [s["path"] for s in reply["stores"]]
    assert paths == [".diffract", "runs/exp1/.diffract"]  # not node_modules/x/.diffract
    s = reply["stores"][0]
    assert s["segments"] > 0 and s["updated"] > 0 and s["stamp"]


async def test_one_store_models_slices_fields(jp_fetch, stores):
    d = await get(jp_fetch, "store", path=".diffract")
    assert {
        "path",
        "name",
        "segments",
        "updated",
        "stamp",
        "models",
        "fields",
        "levels",
        "manifests",
    } == set(d)
    assert [m["model_id"] for m in d["models"]] == ["m1", "m2"]
    m1 = d["models"][0]
    assert m1["slices"] == 8 and set(m1["fields"]) >= {"frob_norm", "stable_rank"}
    assert m1["framework"] == "numpy" and m1["added"] > 0
    assert "frob_norm" in d["fields"] and d["levels"]["frob_norm"] == "param"
    d2 = await get(jp_fetch, "store", path="runs/exp1/.diffract")
    assert [m["fields"] for m in d2["models"]] == [[], []]


async def test_one_field_values_in_depth_order(jp_fetch, stores):
    d = await get(jp_fetch, "field", path=".diffract", field="frob_norm", model="m2")
    assert [m["model_id"] for m in d["models"]] == ["m2"]
    pts = d["models"][0]["points"]
    assert [p["name"] for p in pts] == [f"layers.{i}.weight" for i in range(4)]
    assert all(isinstance(p["value"], float) and p["value"] > 0 for p in pts)
    assert [p["index"] for p in pts] == sorted(p["index"] for p in pts)
    both = await get(jp_fetch, "field", path=".diffract", field="frob_norm")
    assert len(both["models"]) == 2
    assert await status_of(jp_fetch, "field", path=".diffract") == 400
    assert (
        await status_of(jp_fetch, "field", path=".diffract", field="frob_norm", model="nope") == 404
    )


async def test_refuses_without_auth(jp_fetch, stores):
    for endpoint in ("version", "stores", "store", "field"):
        code = await status_of(
            jp_fetch, endpoint, headers={"Authorization": ""}, path=".diffract", field="frob_norm"
        )
        assert code == 403, endpoint


async def test_never_reads_outside_the_root(jp_fetch, stores, tmp_path_factory):
    outside = make_store(
        tmp_path_factory.mktemp("outside") / ".diffract", models=("secret",), fields=()
    )
    (stores / "link").symlink_to(outside.parent)
    (stores / "linkstore").symlink_to(outside)
    refused = [
        "../outside/.diffract",
        "/etc",
        str(outside),
        "runs/../../x",
        "link/.diffract",
        "linkstore",
        "..",
        "runs/..\\..",
        "C:/x",
    ]
    for p in refused:
        code = await status_of(jp_fetch, "store", path=p)
        assert code in (403, 404), (p, code)
        assert code == 403 or p in ("runs/..\\..", "C:/x"), (p, code)
    assert await status_of(jp_fetch, "store", path="notes") == 404
    assert await status_of(jp_fetch, "store", path="missing/.diffract") == 404
    assert await status_of(jp_fetch, "store") == 404
    listed = [s["path"] for s in (await get(jp_fetch, "stores"))["stores"]]
    assert not any("link" in p for p in listed)


async def test_refuses_a_store_whose_files_link_outside_the_root(
    jp_fetch, stores, tmp_path_factory
):
    """A store folder inside the root whose segments (or any file) are symlinks to another
    store outside the root is refused; the same links inside the root are fine."""
    import shutil

    outside = make_store(
        tmp_path_factory.mktemp("outside2") / ".diffract", models=("secret",), fields=()
    )
    marker = next(p.name for p in outside.iterdir() if p.suffix == ".json")
    sneaky = stores / "sneaky"
    sneaky.mkdir()
    shutil.copy(outside / marker, sneaky / marker)
    for entry in outside.iterdir():
        if entry.name != marker:
            (sneaky / entry.name).symlink_to(entry)
    assert await status_of(jp_fetch, "store", path="sneaky") == 403
    assert await status_of(jp_fetch, "field", path="sneaky", field="frob_norm") == 403
    # links that stay inside the root are served
    inner = stores / "inner-links"
    inner.mkdir()
    own = stores / ".diffract"
    shutil.copy(own / marker, inner / marker)
    for entry in own.iterdir():
        if entry.name != marker and not entry.name.startswith("writer.lock"):
            (inner / entry.name).symlink_to(entry)
    d = await get(jp_fetch, "store", path="inner-links")
    assert [m["model_id"] for m in d["models"]] == ["m1", "m2"]


#: the writer commits one model at a time; after each it says so (``done<i>``) and, keeping its
#: session (and the writer lock) open, waits for the reader's ``go<i>`` before the next
WRITER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {tests!r})
    from _ui_helpers import mlp
    from diffract import Session
    sig = {signals!r}
    with Session(path={path!r}) as s:
        for i in range({n}):
            s.models.add(mlp(i, layers=3), f"w{{i:02d}}")
            s.filter(model_ids=f"w{{i:02d}}").compute.apply("frob_norm", progress=False)
            open(os.path.join(sig, f"done{{i}}"), "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(sig, f"go{{i}}")):
                if time.monotonic() > deadline:
                    sys.exit("the reader never said go")
                time.sleep(0.01)
    """
)


async def test_reads_a_store_another_process_is_writing(jp_fetch, jp_root_dir, tmp_path):
    import asyncio

    n = 6
    path = jp_root_dir / "live" / ".diffract"
    make_store(path, models=("base",), fields=("frob_norm",))
    code = WRITER.format(
        tests=str(Path(__file__).parents[1]), path=str(path), signals=str(tmp_path), n=n
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    seen = []  # models listed at each handshake, while the writer holds its session open
    try:
        for i in range(n):
            while not (tmp_path / f"done{i}").exists():  # read on while the writer writes
                assert proc.poll() is None, "the writer ended early"
                d = await get(jp_fetch, "store", path="live/.diffract")
                assert len(d["models"]) in (i + 1, i + 2)  # before or after model i lands
                await asyncio.sleep(0.01)
            assert proc.poll() is None  # still writing: the next models are not there yet
            d = await get(jp_fetch, "store", path="live/.diffract")
            seen.append([m["model_id"] for m in d["models"]])
            f = await get(jp_fetch, "field", path="live/.diffract", field="frob_norm")
            assert all(all(isinstance(p["value"], float) for p in m["points"]) for m in f["models"])
            assert len(f["models"]) == i + 2
            (tmp_path / f"go{i}").touch()
    finally:
        for i in range(n):
            (tmp_path / f"go{i}").touch()
        proc.wait(60)
    assert proc.returncode == 0
    # each reply showed exactly the models committed so far, in order, never going back
    assert seen == [["base", *(f"w{j:02d}" for j in range(i + 1))] for i in range(n)]
    d = await get(jp_fetch, "store", path="live/.diffract")
    assert len(d["models"]) == n + 1


def test_store_summary_lists_sampling_manifests(tmp_path):
    """Manifests saved with diffract.sampling.save_manifest show in the sidebar's store reply."""
    from diffract import Session
    from diffract.sampling import (
        Candidate,
        SubblockConfig,
        sample_replacement_candidates,
        save_manifest,
    )
    from diffract.server import StoreReader

    attn = SubblockConfig(kind="attention", name="attention", config={"heads": 4})
    ffn = SubblockConfig(kind="ffn", name="ffn", config={"size": 64})
    cands = [
        Candidate(
            candidate_id="teacher.L0",
            layer_idx=0,
            hidden_width=16,
            source="self",
            subblocks=(attn, ffn),
        )
    ]
    cands.append(
        Candidate(
            candidate_id="ffn32.L0",
            layer_idx=0,
            hidden_width=16,
            source="derived",
            subblocks=(attn, SubblockConfig(kind="ffn", name="ffn", config={"size": 32})),
            changed_axes=("ffn.size",),
        )
    )
    manifest = sample_replacement_candidates(cands)
    with Session(path=tmp_path / ".diffract") as s:
        ident = save_manifest(s, manifest, label="demo", teacher_id="t")
    reply = StoreReader.get((tmp_path / ".diffract").resolve()).summary()
    (entry,) = reply["manifests"]
    assert entry["identity"] == ident and entry["label"] == "demo" and entry["teacher_id"] == "t"
    assert entry["n_selected"] == len(manifest.selected) and entry["mode"] == manifest.mode
