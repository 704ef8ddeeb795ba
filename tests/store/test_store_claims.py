"""Issue 28 points 6 and 18: every size a store's file claims is checked against what it
holds (or can hold) before anything is allocated or shown.

A crafted HDF5 segment (its manifest resealed, as anyone who can write the store can do)
claims a fill-valued ESD of 2e7 elements in 80 KB, or a slice shape of 100000 x 100000 over
60 x 30 weights. Reading either is a StoreCorruptError naming the claim; the sidebar's API
answers 422 naming the limit, and stays responsive.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import h5py
import numpy as np
import pytest
from tornado.httpclient import HTTPClientError

from _store_helpers import make_slices
from diffract._errors import StoreCorruptError
from diffract.store import Batch, open_backend, reader

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"diffract": True}}}


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _reseal(segment, edit=None):
    """Rewrite the manifest of ``segment`` after its bytes changed: its size and digest,
    ``edit(head, body)`` applied, both hashes matching (docs/concepts/segments.md)."""
    manifest = segment.with_name(segment.name + ".json")
    lines = manifest.read_text().split("\n")
    head, body = json.loads(lines[1]), json.loads(lines[2])
    data = segment.read_bytes()
    head["size"], head["digest"] = len(data), _sha(data)
    if edit is not None:
        edit(head, body)
    h, b = json.dumps(head), json.dumps(body)
    manifest.write_text(f"diffract-manifest 2 {_sha(h.encode())} {_sha(b.encode())}\n{h}\n{b}")


def _store(path, esd=None):
    """One model with one 60 x 30 slice (weights stored) and its ESD (or ``esd``)."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(60, 30))
    sl = make_slices("m", {"fc.weight": w})
    if esd is None:
        esd = np.sort(np.linalg.svd(w, compute_uv=False) ** 2 / 60)
    with open_backend("hdf5", path) as st:
        st.commit(Batch(add_models={"m": {}}, slices=sl, weights={sl[0].uid: w}))
        st.commit(Batch(fields={(sl[0].uid, "esd"): esd}))
    return path, sl[0].uid, w


def _fill_valued_esd(path, n=20_000_000):
    """Replace the stored ESD by a dataset claiming ``n`` float64 values, never written
    (HDF5 reads its fill value): the file stays tens of KB."""
    seg = path / "segments" / "000000000002.h5"
    with h5py.File(seg, "r+") as f:
        (name,) = list(f["arrays/esd"])
        del f[f"arrays/esd/{name}"]
        f.create_dataset(f"arrays/esd/{name}", shape=(n,), dtype="f8", fillvalue=1.0)
    _reseal(seg)
    return seg


def test_a_fill_valued_esd_claim_is_refused_before_reading(tmp_path):
    path, uid, _ = _store(tmp_path / "s")
    seg = _fill_valued_esd(path)
    assert seg.stat().st_size < 100_000
    with (
        open_backend("hdf5", path, readonly=True) as st,
        pytest.raises(StoreCorruptError, match=r"claims 20000000 float64 values .* stores 0 bytes"),
    ):
        st.get((uid, "esd"))


def test_a_crafted_slice_shape_is_refused_when_the_store_is_read(tmp_path):
    """Point 18: the claimed shape of 1e10 elements cannot fit in the segment holding the
    weights: refused when the store's slices are first read (not shown)."""
    path, _uid, _ = _store(tmp_path / "s")
    seg = path / "segments" / "000000000001.h5"

    def edit(head, body):
        body["slices"]["shape"] = [[100000, 100000]]

    _reseal(seg, edit)
    st = open_backend("hdf5", path, readonly=True)
    with pytest.raises(StoreCorruptError, match=r"claims the shape \(100000, 100000\)"):
        st.slices()


def test_a_slice_shape_that_differs_from_its_weights_is_refused_when_read(tmp_path):
    """A claim that fits in the file (60 x 31 over 60 x 30 weights) is caught when the
    weights are read: the stored array is the truth."""
    path, uid, w = _store(tmp_path / "s")

    def edit(head, body):
        body["slices"]["shape"] = [[60, 31]]

    _reseal(path / "segments" / "000000000001.h5", edit)
    with open_backend("hdf5", path, readonly=True) as st:
        assert st.slice(uid).shape == (60, 31)
        with pytest.raises(StoreCorruptError, match=r"claims the shape \(60, 31\), its stored"):
            st.weights(uid)
    with open_backend("hdf5", _store(tmp_path / "ok")[0], readonly=True) as st:
        np.testing.assert_array_equal(st.weights(uid), w)


def test_esd_size_limit_is_one_eigenvalue_per_singular_value():
    # independent reference: the singular values numpy finds per kernel position
    rng = np.random.default_rng(1)
    conv = rng.normal(size=(8, 3, 3, 3))  # (out, in, kh, kw)
    n_svals = sum(
        len(np.linalg.svd(conv[:, :, i, j], compute_uv=False)) for i in range(3) for j in range(3)
    )
    assert reader.esd_size_limit(conv.shape) == n_svals == 27
    keras = np.moveaxis(np.moveaxis(conv, 0, -1), 0, -2)  # (kh, kw, in, out)
    assert reader.esd_size_limit(keras.shape, "in_out") == 27
    assert reader.esd_size_limit((60, 30)) == len(
        np.linalg.svd(np.ones((60, 30)), compute_uv=False)
    )
    assert reader.esd_size_limit((7,)) == 7


def test_the_reader_refuses_an_esd_longer_than_its_slice_can_hold(tmp_path):
    path, uid, _ = _store(tmp_path / "s", esd=np.arange(31.0))  # a 60 x 30 slice has 30
    with pytest.raises(StoreCorruptError, match=r"holds 31 values, more than the 30 a slice"):
        reader.StoreReader(path).esd(uid)
    ok, uid, _w = _store(tmp_path / "ok")
    reply = reader.StoreReader(ok).esd(uid)
    assert len(reply["values"]) == 30 and reader.MAX_ESD_VALUES >= 30


async def test_the_server_answers_a_crafted_esd_claim_with_422_at_once(jp_fetch, jp_root_dir):
    """Point 6: the request that took 10.9 s and 1.1 GB is a 422 naming the claim; four at
    once leave /version answering."""
    path, uid, _ = _store(jp_root_dir / "bomb" / ".diffract")
    _fill_valued_esd(path)
    rel = "bomb/.diffract"

    async def esd():
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("diffract", "api", "esd", params={"path": rel, "uid": uid})
        return info.value.code, json.loads(info.value.response.body)

    *replies, version = await asyncio.gather(
        *(esd() for _ in range(4)), jp_fetch("diffract", "api", "version")
    )
    assert version.code == 200
    for code, body in replies:
        assert code == 422, body
        assert "claims 20000000 float64 values" in body["error"], body
        assert "stores 0 bytes" in body["error"], body
    # a written ESD longer than its slice can hold: 422 naming the limit
    _path2, uid2, _ = _store(jp_root_dir / "long" / ".diffract", esd=np.arange(45.0))
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("diffract", "api", "esd", params={"path": "long/.diffract", "uid": uid2})
    body = json.loads(info.value.response.body)
    assert info.value.code == 422 and "more than the 30 a slice of shape [60, 30]" in body["error"]
