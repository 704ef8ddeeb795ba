"""Caches: the LRU respects its byte budget; Redis against a real redis-server; an
unreachable Redis warns and the session goes on uncached. Values never go through pickle."""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import time

import numpy as np
import pytest

from diffract import Session
from diffract.store import (
    CacheWarning,
    CodecError,
    LRUCache,
    RedisCache,
    decode_value as decode,
    encode_value as encode,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """One redis-server for the module, with enough databases for one per test."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail(
            "redis-server is not installed: `make test` installs it (apt-get install redis-server)"
        )
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--databases",
            "1000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start")
    yield port, itertools.count(1)
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def redis_url(redis_server):
    """A database of its own for each test (empty at the start), so that no test sees the
    keys another left behind, in whatever order they run."""
    import redis

    port, numbers = redis_server
    url = f"redis://127.0.0.1:{port}/{next(numbers)}"
    assert redis.Redis.from_url(url).dbsize() == 0
    return url


def test_codec_round_trips_without_pickle():
    for v in (
        1.5,
        -2,
        True,
        "x",
        np.arange(6, dtype=np.int16).reshape(2, 3),
        np.linspace(0, 1, 5, dtype=np.float32),
    ):
        out = decode(encode(v))
        if isinstance(v, np.ndarray):
            assert out.dtype == v.dtype and np.array_equal(out, v)
        else:
            assert out == v and type(out) is type(v)
    with pytest.raises(CodecError):
        encode({"a": 1})
    with pytest.raises(CodecError):
        encode(np.array([object()], dtype=object))
    with pytest.raises(CodecError, match="bad magic"):
        decode(b"\x80\x04pickle")


def test_lru_respects_its_byte_budget():
    cache = LRUCache(max_bytes=10_000)
    for i in range(50):
        cache.set(f"k{i}", np.zeros(100))  # ~ 900 bytes each
        assert cache.nbytes <= 10_000
    assert 5 <= len(cache) <= 12
    assert cache.get("k0") is None and cache.get("k49") is not None
    cache.get("k40")  # touch: k40 becomes most recent and survives the next evictions
    for i in range(50, 55):
        cache.set(f"k{i}", np.zeros(100))
    assert cache.get("k40") is not None and cache.get("k41") is None
    cache.set("huge", np.zeros(10_000))  # larger than the budget: not cached, nothing evicted
    assert cache.get("huge") is None and cache.nbytes <= 10_000


def test_redis_cache_serves_arrays_across_sessions(redis_url, tmp_path, mlp_weights):
    import redis

    with Session(path=tmp_path / "st", cache=redis_url) as s:
        assert s.store.cache.name == "redis" and s.store.cache.available
        s.models.add(mlp_weights, model_id="m")
        s.compute.apply("esd", progress=False)
        first = s.results.export_table("esd", export_format="list")
    keys = redis.Redis.from_url(redis_url).keys("diffract:*")
    assert len(keys) == 3  # one ESD per 2-D slice
    reader = Session(path=tmp_path / "st", cache=redis_url, readonly=True)
    cache = reader.store.cache
    calls = []
    original = reader.store._read_array
    reader.store._read_array = lambda ref: calls.append(ref) or original(ref)
    again = reader.results.export_table("esd", export_format="list")
    assert calls == []  # every array came from Redis
    for a, b in zip(first, again, strict=True):
        assert (a["esd"] is None and b["esd"] is None) or np.array_equal(a["esd"], b["esd"])
    assert cache.available


def test_unreachable_redis_warns_and_goes_on_uncached(tmp_path, mlp_weights):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with pytest.warns(CacheWarning, match="unreachable"):
        s = Session(path=tmp_path / "st", cache=url)
    s.models.add(mlp_weights, model_id="m")
    s.compute.apply("esd", progress=False)
    assert len(s.results.export_table("esd", export_format="list")) == 6
    assert not s.store.cache.available
    s.close()


def test_redis_cache_ignores_foreign_values(redis_url):
    import redis

    cache = RedisCache(redis_url)
    redis.Redis.from_url(redis_url).set("diffract:foreign", b"\x80\x04K\x01.")  # a pickle of 1
    assert cache.get("foreign") is None


def _esd_store(path, url, values):
    """An HDF5 store with a Redis cache holding the arrays ``values`` (owner -> array)."""
    from diffract.store import Batch, open_backend

    st = open_backend("hdf5", path, cache=RedisCache(url))
    st.commit(Batch(fields={(o, "esd"): v for o, v in values.items()}))
    return st


def test_divergent_copies_of_a_store_never_share_a_cache_entry(redis_url, tmp_path):
    """Issue 28 point 4: after `cp -r` (same store id) and different writes to each copy,
    the copy's value is served, not the original's that sits in Redis under the same
    segment and dataset names."""
    from diffract.store import Batch, open_backend

    a = tmp_path / "a"
    _esd_store(a, redis_url, {"u": np.arange(4.0)}).close()
    b = tmp_path / "b"
    shutil.copytree(a, b)
    for path, v in ((a, np.full(3, 1.0)), (b, np.full(3, 2.0))):
        with open_backend("hdf5", path) as st:
            st.commit(Batch(fields={("v", "esd"): v}))  # segment 2 in both copies
    ra = open_backend("hdf5", a, readonly=True, cache=RedisCache(redis_url))
    rb = open_backend("hdf5", b, readonly=True, cache=RedisCache(redis_url))
    assert ra.store_id == rb.store_id
    np.testing.assert_array_equal(ra.get(("v", "esd")), np.full(3, 1.0))  # cached from a
    np.testing.assert_array_equal(rb.get(("v", "esd")), np.full(3, 2.0))
    np.testing.assert_array_equal(ra.get(("u", "esd")), np.arange(4.0))
    np.testing.assert_array_equal(rb.get(("u", "esd")), np.arange(4.0))


def test_a_forged_redis_entry_is_dropped_and_the_value_read_from_the_store(redis_url, tmp_path):
    """Issue 28 point 5: whoever can write to the Redis server cannot change a value. Every
    entry is overwritten with a well-formed value of the same shape; a reader checks each
    against the digest the store's manifest recorded, drops it, and reads the store."""
    import redis

    true = {"u": np.linspace(0.0, 1.0, 7), "w": np.arange(5.0)}
    st = _esd_store(tmp_path / "s", redis_url, true)
    for o in true:
        st.get((o, "esd"))  # fills the cache
    st.close()
    client = redis.Redis.from_url(redis_url)
    keys = client.keys("diffract:*")
    assert len(keys) == 2
    for k in keys:
        forged = np.zeros_like(decode(client.get(k)))
        client.set(k, encode(forged))
    cache = RedisCache(redis_url)
    from diffract.store import open_backend

    reader = open_backend("hdf5", tmp_path / "s", readonly=True, cache=cache)
    calls = []
    original = reader._read_array
    reader._read_array = lambda ref: calls.append(ref) or original(ref)
    for o, v in true.items():
        np.testing.assert_array_equal(reader.get((o, "esd")), v)
    assert len(calls) == 2 and cache.rejected == 2
    # the true values replaced the forged ones: the next reader is served from Redis
    for k in client.keys("diffract:*"):
        assert any(np.array_equal(decode(client.get(k)), v) for v in true.values())
    calls.clear()
    for o, v in true.items():
        np.testing.assert_array_equal(reader.get((o, "esd")), v)
    assert calls == []


def test_content_keys_survive_a_compaction(redis_url, tmp_path):
    """A compaction carries each array's recorded digest (copied or referenced), so its
    values keep their content keys: the entries cached before it serve the reader after."""
    import hashlib

    import redis

    from diffract.store import Batch, open_backend

    values = {"u": np.arange(5.0), "v": np.arange(3, dtype=np.float32)}
    st = open_backend("hdf5", tmp_path / "s", cache=RedisCache(redis_url))
    for o, v in values.items():
        st.commit(Batch(fields={(o, "esd"): v}))
        st.get((o, "esd"))
    st.compact()
    st.close()
    client = redis.Redis.from_url(redis_url)
    # independent of the store: each key is the SHA-256 of the value's encoding
    expected = {
        b"diffract:sha256:" + hashlib.sha256(encode(v)).hexdigest().encode()
        for v in values.values()
    }
    assert set(client.keys("diffract:*")) == expected
    reader = open_backend("hdf5", tmp_path / "s", readonly=True, cache=RedisCache(redis_url))
    reader._read_array = lambda ref: pytest.fail(f"read from the store: {ref.dataset}")
    for o, v in values.items():
        got = reader.get((o, "esd"))
        assert got.dtype == v.dtype and np.array_equal(got, v)


def test_a_shared_cache_skips_values_without_a_recorded_digest(redis_url, tmp_path):
    """SQLite rows record no digest of their values: under Redis they are read from the store
    each time (a copy of the database would otherwise share its row numbers)."""
    import redis

    from diffract.store import Batch, open_backend

    st = open_backend("sqlite", tmp_path / "s.diffract.sqlite", cache=RedisCache(redis_url))
    st.commit(Batch(fields={("u", "esd"): np.arange(4.0)}))
    for _ in range(2):
        np.testing.assert_array_equal(st.get(("u", "esd")), np.arange(4.0))
    st.close()
    assert redis.Redis.from_url(redis_url).keys("diffract:*") == []


def test_zarr_values_are_content_keyed_and_checked_too(redis_url, tmp_path):
    """A Zarr store records each array's digest in its commit record: a divergent copy's
    value is its own, and a forged entry is dropped (points 4 and 5 on Zarr)."""
    import redis

    from diffract.store import Batch, open_backend

    a, b = tmp_path / "a", tmp_path / "b"
    with open_backend("zarr", a) as st:
        st.commit(Batch(fields={("u", "esd"): np.arange(4.0)}))
    shutil.copytree(a, b)
    for path, v in ((a, np.full(3, 1.0)), (b, np.full(3, 2.0))):
        with open_backend("zarr", path) as st:
            st.commit(Batch(fields={("v", "esd"): v}))
    ra = open_backend("zarr", a, readonly=True, cache=RedisCache(redis_url))
    rb = open_backend("zarr", b, readonly=True, cache=RedisCache(redis_url))
    np.testing.assert_array_equal(ra.get(("v", "esd")), np.full(3, 1.0))
    np.testing.assert_array_equal(rb.get(("v", "esd")), np.full(3, 2.0))
    client = redis.Redis.from_url(redis_url)
    for k in client.keys("diffract:*"):
        client.set(k, encode(np.zeros(3)))
    cache = RedisCache(redis_url)
    rc = open_backend("zarr", a, readonly=True, cache=cache)
    np.testing.assert_array_equal(rc.get(("v", "esd")), np.full(3, 1.0))
    assert cache.rejected == 1


def test_decode_checks_the_claimed_size_exactly():
    """A header whose shape's product wraps around int64 (2**62 x 4 float64 = 0 mod 2**64)
    is refused by the exact size it claims, never allocated."""
    import json
    import struct

    for shape, claimed in (([2**62, 4], 8 * 2**64), ([3, 4], 96)):
        head = json.dumps({"kind": "array", "dtype": "<f8", "shape": shape}).encode()
        with pytest.raises(CodecError, match=f"payload of 0 bytes, its header claims {claimed} "):
            decode(b"DFV1" + struct.pack("<I", len(head)) + head)
