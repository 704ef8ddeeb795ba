"""The store summary's dating and step axis: when each model's fields last changed (the
reader's ChangeClock), a tracked run's checkpoints in step order with their run and step, and
one slice's spectrum for the sidebar's ESD view."""

from __future__ import annotations

import os

import numpy as np
import pytest

from _ui_helpers import mlp
from diffract import Session
from diffract.server import StoreReader
from diffract.store.reader import NotAStore


def _summary(path):
    return StoreReader.get(path.resolve()).summary()


def _touch_all(path, when):
    """Give every file of the store the modification time ``when`` (a known clock)."""
    for folder, _, files in os.walk(path):
        for f in files:
            os.utime(os.path.join(folder, f), (when, when))


def test_changed_follows_fields_not_when_added(tmp_path):
    path = tmp_path / ".diffract"
    with Session(path=path) as s:
        s.models.add(mlp(0), "m1")
        s.models.add(mlp(1), "m2")
    _touch_all(path, 1_000_000_000.0)
    first = {m["model_id"]: m for m in _summary(path)["models"]}
    # no values yet: dated by when each was added
    assert first["m1"]["changed"] == first["m1"]["added"]
    assert first["m2"]["changed"] == first["m2"]["added"]
    with Session(path=path) as s:
        s.filter(model_ids="m2").compute.apply("frob_norm", progress=False)
    later = max(first["m1"]["added"], first["m2"]["added"]) + 500.0
    _touch_all(path, later)
    second = {m["model_id"]: m for m in _summary(path)["models"]}
    assert second["m2"]["changed"] == pytest.approx(later)  # the commit that landed them
    assert second["m1"]["changed"] == first["m1"]["changed"]  # m1's fields did not change
    assert second["m2"]["added"] == first["m2"]["added"]
    # a read with nothing new keeps the dates
    _touch_all(path, later + 100.0)
    third = {m["model_id"]: m for m in _summary(path)["models"]}
    assert third["m2"]["changed"] == pytest.approx(later)


def test_tracked_checkpoints_come_in_step_order_with_their_run(tmp_path):
    path = tmp_path / ".diffract"
    with Session(path=path) as s:
        # added out of order, with ids whose string order is not the step order
        for step in (100, 9, 10):
            s.models.add(
                mlp(step % 7), f"run-a-{step}", meta={"track": {"run": "run-a", "step": step}}
            )
        s.models.add(mlp(3), "plain")
        s.models.add(mlp(4), "other", meta={"track": {"run": "run-a", "step": -1}})  # not a step
    models = _summary(path)["models"]
    assert [m["model_id"] for m in models] == ["run-a-9", "run-a-10", "run-a-100", "other", "plain"]
    assert [m["track"] for m in models[:3]] == [
        {"run": "run-a", "step": 9},
        {"run": "run-a", "step": 10},
        {"run": "run-a", "step": 100},
    ]
    assert models[3]["track"] is None and models[4]["track"] is None


def test_esd_of_one_slice_matches_the_eigenvalues(tmp_path):
    path = tmp_path / ".diffract"
    weights = mlp(0)
    with Session(path=path) as s:
        s.models.add(weights, "m1")
        s.compute.apply("pl_alpha", progress=False)
        uid = next(x.uid for x in s.models.slices() if x.name == "layers.1.weight")
        bias = next(x.uid for x in s.models.slices() if x.name == "layers.1.bias")
        xmin = s.store.get((uid, "pl_esd_xmin"))
    reply = StoreReader.get(path.resolve()).esd(uid)
    assert reply["name"] == "layers.1.weight" and reply["model_id"] == "m1"
    # WeightWatcher's ESD: eigenvalues of W^T W / N (N the larger dimension), here 48 x 48
    w = weights["layers.1.weight"].astype(np.float64)
    expected = np.linalg.eigvalsh(w.T @ w / max(w.shape))
    np.testing.assert_allclose(sorted(reply["values"]), sorted(expected), rtol=1e-4, atol=1e-8)
    assert reply["xmin"] == pytest.approx(xmin) and reply["alpha"] > 1
    assert StoreReader.get(path.resolve()).esd(bias)["values"] is None  # no spectrum stored
    with pytest.raises(NotAStore, match="no slice 'nope'"):
        StoreReader.get(path.resolve()).esd("nope")


# --- the routes ------------------------------------------------------------------------------

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"diffract": True}}}


async def test_routes_carry_changed_track_and_esd(jp_fetch, jp_root_dir):
    import json

    from tornado.httpclient import HTTPClientError

    with Session(path=jp_root_dir / ".diffract") as s:
        s.models.add(mlp(0), "ck-2", meta={"track": {"run": "r", "step": 2}})
        s.compute.apply("esd", progress=False)
        uid = next(x.uid for x in s.models.slices() if x.name == "layers.0.weight")
    r = await jp_fetch("diffract", "api", "store", params={"path": ".diffract"})
    (m,) = json.loads(r.body)["models"]
    assert m["track"] == {"run": "r", "step": 2} and m["changed"] >= m["added"]
    r = await jp_fetch("diffract", "api", "esd", params={"path": ".diffract", "uid": uid})
    esd = json.loads(r.body)
    from _ui_helpers import ts_interfaces  # the wire contract, as js/shared/wire.ts says

    assert set(esd) == ts_interfaces()["EsdReply"]
    assert esd["name"] == "layers.0.weight"
    assert len(esd["values"]) == min(mlp(0)["layers.0.weight"].shape)  # one per singular value
    for params, code in (({"path": ".diffract"}, 400), ({"path": ".diffract", "uid": "x"}, 404)):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("diffract", "api", "esd", params=params)
        assert err.value.code == code
