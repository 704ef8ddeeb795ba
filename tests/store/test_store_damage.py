"""Damaged stores: a missing or corrupt file gives StoreCorruptError naming it, and opening
(or reading) a damaged store deletes and rewrites nothing.

Each test damages a real store the way a user, a sync tool or a disk can (a deleted file or
folder, a truncated database, a foreign database, a malformed value) and checks the error
type, that the message names the file, and that the store's files are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import struct

import numpy as np
import pytest

from _store_helpers import make_slices
from diffract import StoreCorruptError
from diffract.store import (
    Batch,
    CodecError,
    HDF5Store,
    decode_value as decode,
    encode_value as encode,
    log as store_log,
    open_backend,
)

KINDS = {
    "hdf5": ("hdf5", "store", {}),
    "sqlite": ("sqlite", "store.sqlite", {}),
    "zarr": ("zarr", "store", {}),
    "hybrid": ("hybrid", "store", {}),
    "hybrid-zarr": ("hybrid", "store", {"arrays": "zarr"}),
}
VOLATILE = ("writer.lock", ".lock", "-shm", "-wal")  # lock files, SQLite's WAL index


def opener(kind, tmp_path):
    backend, name, extra = KINDS[kind]
    path = tmp_path / name

    def open_(**kw):
        return open_backend(backend, path, **extra, **kw)

    return open_, path


def snapshot(path):
    """{relative file name: sha256} of a store (lock files and SQLite -shm/-wal left out)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {
        str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in files
        if not p.name.endswith(VOLATILE)
    }


def add_model(st, model_id, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {"w": rng.normal(size=(6, 4)) + 1.0}
    sl = make_slices(model_id, arrays)
    st.commit(Batch(add_models={model_id: {}}, slices=sl, weights={sl[0].uid: arrays["w"]}))
    return sl[0].uid, arrays["w"]


# --- 1. hybrid (and sqlite): a missing or empty metadata database ----------------------------


@pytest.mark.parametrize("kind", ["hybrid", "hybrid-zarr"])
@pytest.mark.parametrize("damage", ["missing", "empty"])
@pytest.mark.parametrize("readonly", [False, True])
def test_hybrid_without_its_meta_sqlite_is_damaged_not_new(kind, damage, readonly, tmp_path):
    open_, path = opener(kind, tmp_path)
    st = open_()
    add_model(st, "m0")
    add_model(st, "m1", seed=1)
    st.close()
    meta = path / "meta.sqlite"
    if damage == "missing":
        meta.unlink()
    else:
        meta.write_bytes(b"")
    before = snapshot(path)
    with pytest.raises(StoreCorruptError, match=r"meta\.sqlite") as err:
        open_(readonly=readonly)
    assert ("missing" if damage == "missing" else "empty") in str(err.value)
    assert snapshot(path) == before  # the array files are all still there
    arrays_dir = path / ("arrays" if kind == "hybrid" else "arrays.zarr")
    assert any(p.name.startswith("000000000002") for p in arrays_dir.iterdir())


def test_hybrid_interrupted_creation_is_completed(tmp_path):
    """meta.sqlite is renamed into place complete before the marker is written: a crash in
    between leaves a folder that the next writer finishes creating."""
    open_, path = opener("hybrid", tmp_path)
    st = open_()
    st.close()
    (path / "diffract-store.json").unlink()
    shutil.rmtree(path / "arrays")
    st = open_()
    add_model(st, "m")
    st.close()
    assert (path / "diffract-store.json").exists()
    assert list(open_(readonly=True).models()) == ["m"]


def test_sqlite_empty_file_is_refused_untouched(tmp_path):
    path = tmp_path / "store.sqlite"
    path.write_bytes(b"")
    for readonly in (False, True):
        with pytest.raises(StoreCorruptError, match=r"store\.sqlite: empty file"):
            open_backend("sqlite", path, readonly=readonly)
    assert path.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.sqlite"]


def test_sqlite_store_is_created_whole(tmp_path):
    """A new SQLite store is built under a temporary name and renamed into place."""
    path = tmp_path / "store.sqlite"
    st = open_backend("sqlite", path)
    add_model(st, "m")
    st.close()
    assert not list(tmp_path.glob(".store.sqlite.creating*"))
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


@pytest.mark.parametrize("kind", ["hybrid", "hybrid-zarr"])
def test_hybrid_meta_sqlite_that_lost_commits_deletes_no_arrays(kind, tmp_path):
    """An older copy of meta.sqlite: array files of later commits are not orphans."""
    open_, path = opener(kind, tmp_path)
    st = open_()
    add_model(st, "m0")
    st.close()
    old = (path / "meta.sqlite").read_bytes()
    st = open_()
    add_model(st, "m1", seed=1)
    add_model(st, "m2", seed=2)
    st.close()
    (path / "meta.sqlite").write_bytes(old)
    for suffix in ("-wal", "-shm"):
        (path / f"meta.sqlite{suffix}").unlink(missing_ok=True)
    before = snapshot(path)
    with pytest.raises(StoreCorruptError, match=r"meta\.sqlite"):
        open_()
    assert snapshot(path) == before


# --- 2. zarr: a missing commits/ folder -----------------------------------------------------


@pytest.mark.parametrize("readonly", [False, True])
def test_zarr_without_commits_folder_is_damaged_not_new(readonly, tmp_path):
    open_, path = opener("zarr", tmp_path)
    st = open_()
    add_model(st, "m0")
    add_model(st, "m1", seed=1)
    st.close()
    shutil.rmtree(path / "commits")
    before = snapshot(path)
    with pytest.raises(StoreCorruptError, match=r"commits: missing folder"):
        open_(readonly=readonly)
    assert snapshot(path) == before
    assert (path / "data" / "000000000002").is_dir()


@pytest.mark.parametrize("readonly", [False, True])
def test_hdf5_without_segments_folder_is_damaged_not_new(readonly, tmp_path):
    open_, path = opener("hdf5", tmp_path)
    st = open_()
    add_model(st, "m0")
    st.close()
    shutil.rmtree(path / "segments")
    before = snapshot(path)
    with pytest.raises(StoreCorruptError, match=r"segments: missing folder"):
        open_(readonly=readonly)
    assert snapshot(path) == before


@pytest.mark.parametrize("kind", ["hdf5", "zarr"])
def test_interrupted_creation_leftovers_become_a_store(kind, tmp_path):
    """The marker is written last: a folder holding only the lock file and an empty
    records folder is a creation a crash interrupted, not a foreign folder."""
    open_, path = opener(kind, tmp_path)
    path.mkdir()
    (path / "writer.lock").write_text("12345")
    (path / ("segments" if kind == "hdf5" else "commits")).mkdir()
    st = open_()
    add_model(st, "m")
    st.close()
    assert list(open_(readonly=True).models()) == ["m"]


def test_zarr_data_beyond_the_last_record_is_not_deleted(tmp_path):
    """A crash leaves at most the last batch's data; data of later batches means records
    were lost."""
    open_, path = opener("zarr", tmp_path)
    st = open_()
    for i in range(4):
        add_model(st, f"m{i}", seed=i)
    st.close()
    for seq in (3, 4):
        (path / "commits" / f"{seq:012d}.json").unlink()
    before = snapshot(path)
    with pytest.raises(StoreCorruptError, match=r"000000000003\.json: missing commit record"):
        open_()
    assert snapshot(path) == before


# --- 3. zarr: a missing chunk file is not read as zeros -------------------------------------


@pytest.mark.parametrize("kind", ["zarr", "hybrid-zarr"])
def test_missing_zarr_chunk_is_damage_not_zeros(kind, tmp_path):
    open_, path = opener(kind, tmp_path)
    st = open_()
    uid, w = add_model(st, "m")
    st.commit(Batch(fields={(uid, "esd"): np.arange(1.0, 9.0)}))
    st.close()
    chunks = sorted(p for p in path.rglob("*") if p.is_file() and "c" in p.relative_to(path).parts)
    assert len(chunks) == 2  # one chunk per (small) array
    for chunk in chunks:
        chunk.rename(chunk.with_name("moved-away"))
        before = snapshot(path)
        reader = open_(readonly=True)
        key = "/".join(chunk.relative_to(path).parts)
        with pytest.raises(StoreCorruptError, match=f"{re.escape(key)}.*missing chunk"):
            if chunk.relative_to(path).parts[1] == "000000000001":
                reader.weights(uid)
            else:
                reader.get((uid, "esd"))
        assert snapshot(path) == before
        chunk.with_name("moved-away").rename(chunk)
    reader = open_(readonly=True)
    np.testing.assert_array_equal(reader.weights(uid), w)
    np.testing.assert_array_equal(reader.get((uid, "esd")), np.arange(1.0, 9.0))


@pytest.mark.parametrize("kind", ["zarr", "hybrid-zarr"])
def test_all_zero_arrays_still_read_back(kind, tmp_path):
    """Every chunk is written (no fill-value holes), so zeros are data, not absence."""
    open_, _ = opener(kind, tmp_path)
    st = open_()
    st.commit(Batch(fields={("u", "esd"): np.zeros(5), ("v", "esd"): np.array([0.0, -0.0])}))
    st.close()
    reader = open_(readonly=True)
    np.testing.assert_array_equal(reader.get(("u", "esd")), np.zeros(5))
    np.testing.assert_array_equal(reader.get(("v", "esd")), np.zeros(2))


# --- 4. a file missing after a compaction: one retry, then a clear error --------------------


@pytest.fixture
def compact_soon(monkeypatch):
    monkeypatch.setattr(store_log, "COMPACT_EVERY", 2)  # one constant: HDF5 and Zarr
    monkeypatch.setattr(HDF5Store, "COPY_LIMIT", 0)  # arrays stay where they were written


@pytest.mark.parametrize("kind", ["hdf5", "zarr"])
def test_file_missing_after_compaction_is_damage_not_recursion(kind, tmp_path, compact_soon):
    open_, path = opener(kind, tmp_path)
    st = open_()
    uid, _ = add_model(st, "m")
    st.commit(Batch(fields={(uid, "esd"): np.arange(4.0)}))
    for i in range(5):
        st.commit(Batch(fields={("u", "f"): float(i)}))
    st.close()
    records = path / ("segments" if kind == "hdf5" else "commits")
    assert any("-c." in p.name for p in records.iterdir())  # compacted
    if kind == "hdf5":
        victims = [path / "segments" / "000000000001.h5", path / "segments" / "000000000002.h5"]
    else:
        victims = [path / "data" / "000000000001", path / "data" / "000000000002"]
    for victim in victims:
        (shutil.rmtree if victim.is_dir() else lambda p: p.unlink())(victim)
    before = snapshot(path)
    reader = open_(readonly=True)
    with pytest.raises(
        StoreCorruptError, match=f"{re.escape(victims[0].name)}.*missing store file"
    ):
        reader.weights(uid)
    with pytest.raises(
        StoreCorruptError, match=f"{re.escape(victims[1].name)}.*missing store file"
    ):
        reader.get((uid, "esd"))
    # the in-memory state is intact: the rest of the store still reads
    assert list(reader.models()) == ["m"] and reader.get(("u", "f")) == 4.0
    assert snapshot(path) == before


# --- 5. a record missing in the middle of the sequence --------------------------------------


@pytest.mark.parametrize("kind", ["hdf5", "zarr"])
@pytest.mark.parametrize("victim_seq", [1, 2])
@pytest.mark.parametrize("readonly", [False, True])
def test_missing_record_in_the_middle_is_damage(kind, victim_seq, readonly, tmp_path):
    open_, path = opener(kind, tmp_path)
    st = open_()
    for i in range(3):
        add_model(st, f"m{i}", seed=i)
    st.close()
    victim = (
        path / "segments" / f"{victim_seq:012d}.h5"
        if kind == "hdf5"
        else path / "commits" / f"{victim_seq:012d}.json"
    )
    victim.unlink()
    before = snapshot(path)
    with pytest.raises(StoreCorruptError, match=f"{re.escape(victim.name)}: missing"):
        open_(readonly=readonly)
    assert snapshot(path) == before


@pytest.mark.parametrize("kind", ["hdf5", "zarr"])
def test_missing_record_after_a_compaction_is_damage(kind, tmp_path):
    open_, path = opener(kind, tmp_path)
    st = open_()
    add_model(st, "m")
    for i in range(6):
        st.commit(Batch(fields={("u", f"f{i}"): float(i)}))
        if i == 3:
            st.compact()
    st.close()
    records = path / ("segments" if kind == "hdf5" else "commits")
    names = sorted(p.name for p in records.iterdir() if p.name[:12].isdigit())
    last_c = max(i for i, n in enumerate(names) if "-c." in n)
    assert len(names) - last_c >= 3, names  # a compaction and two records after it
    victim = records / names[last_c + 1]
    victim.unlink()
    before = snapshot(path)
    with pytest.raises(StoreCorruptError, match=f"{re.escape(victim.name)}: missing"):
        open_(readonly=True)
    assert snapshot(path) == before


@pytest.mark.parametrize("kind", ["hdf5", "zarr"])
def test_compaction_keeps_the_sequence_readable(kind, tmp_path, compact_soon):
    """Compaction and its clean-up remove files, but never leave a false gap."""
    open_, _ = opener(kind, tmp_path)
    st = open_()
    uid, w = add_model(st, "m")
    reader = open_(readonly=True)
    for i in range(12):
        st.commit(Batch(fields={("u", f"f{i % 3}"): float(i)}))
        reader.refresh()
        assert reader.get(("u", f"f{i % 3}")) == float(i)
    st.close()
    st = open_()
    np.testing.assert_array_equal(st.weights(uid), w)
    assert st.get(("u", "f2")) == 11.0


# --- 6. a foreign SQLite database is refused without being changed --------------------------


def test_foreign_sqlite_database_is_refused_untouched(tmp_path):
    path = tmp_path / "foreign.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (1)")
    db.commit()
    db.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreCorruptError, match=r"foreign\.db: an SQLite database but not"):
        open_backend("sqlite", path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.db"]  # no .lock, no -wal
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()


# --- 7. every valid model id works on every backend -----------------------------------------

ODD_IDS = [".", "..", "...", " lead", "trail ", ".x", "x.", "100%", "%2E", "a b", "é漢字"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_odd_but_valid_names_round_trip(kind, tmp_path):
    open_, _ = opener(kind, tmp_path)
    st = open_()
    expected_w, expected_v = {}, {}
    for i, mid in enumerate(ODD_IDS):
        uid, w = add_model(st, mid, seed=i)
        expected_w[uid] = w
        expected_v[(f"@{mid}", "model_f")] = float(i)
        expected_v[(uid, ".")] = np.arange(i + 1.0)
    st.commit(Batch(fields=dict(expected_v), documents={(".", ".."): "{}"}))
    if kind == "hdf5":
        st.compact()
    st.close()
    reader = open_(readonly=True)
    assert sorted(reader.models()) == sorted(ODD_IDS)
    for uid, w in expected_w.items():
        np.testing.assert_array_equal(reader.weights(uid), w)
    assert set(reader.keys()) == set(expected_v)
    for k, v in expected_v.items():
        np.testing.assert_array_equal(reader.get(k), v)
    assert reader.documents(".") == {"..": "{}"}


def test_model_id_dot_through_a_session_on_hdf5(tmp_path):
    from diffract import Session

    with Session(backend="hdf5", path=tmp_path / "st") as s:
        s.models.add({"w": np.random.default_rng(0).normal(size=(8, 4))}, ".")
        s.compute.apply("frob_norm", progress=False)
    with Session(backend="hdf5", path=tmp_path / "st", readonly=True) as s:
        assert s.models.ids() == ["."]
        assert s.results.get("frob_norm", "w", model_id=".") > 0


# --- 8. malformed encoded values are CodecError (and StoreCorruptError in a store) ---------


def _blob(header, payload=b""):
    head = json.dumps(header).encode()
    return b"DFV1" + struct.pack("<I", len(head)) + head + payload


MALFORMED = {
    "dtype bogus": _blob({"kind": "array", "dtype": "bogus", "shape": [1]}, b"\0" * 8),
    "no shape": _blob({"kind": "array", "dtype": "<f8"}, b"\0" * 8),
    "shape negative": _blob({"kind": "array", "dtype": "<f8", "shape": [-1]}),
    "shape not a list": _blob({"kind": "array", "dtype": "<f8", "shape": 3}, b"\0" * 24),
    "header a list": _blob([1, 2]),
    "header a string": _blob("array"),
    "int not a number": _blob({"kind": "int", "value": "x"}),
    "float missing": _blob({"kind": "float"}),
    "str not a string": _blob({"kind": "str", "value": [1]}),
    "header longer than data": b"DFV1" + struct.pack("<I", 1000) + b"{}",
    "bad magic": b"\x80\x04K\x01.",
}


@pytest.mark.parametrize("label", list(MALFORMED))
def test_malformed_values_raise_codec_error(label):
    with pytest.raises(CodecError):
        decode(MALFORMED[label])


def test_codec_still_round_trips():
    for v in (np.arange(6.0).reshape(2, 3), np.zeros((0, 3), np.int8), 3, 2.5, True, "s"):
        out = decode(encode(v))
        np.testing.assert_array_equal(out, v)
        assert type(out) is type(v)


def test_sqlite_malformed_blob_names_the_file(tmp_path):
    path = tmp_path / "store.sqlite"
    st = open_backend("sqlite", path)
    uid, _ = add_model(st, "m")
    st.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE slices SET weights=? WHERE uid=?", (MALFORMED["dtype bogus"], uid))
    db.commit()
    db.close()
    before = snapshot(path)
    reader = open_backend("sqlite", path, readonly=True)
    with pytest.raises(StoreCorruptError, match=r"store\.sqlite: corrupt array value"):
        reader.weights(uid)
    assert snapshot(path) == before


def test_redis_cache_ignores_malformed_values(monkeypatch):
    import redis

    from diffract.store import RedisCache

    class FakeRedis:
        def __init__(self):
            self.data = {}

        def ping(self):
            return True

        def get(self, key):
            return self.data.get(key)

        def set(self, key, value, ex=None):
            self.data[key] = value

    fake = FakeRedis()
    monkeypatch.setattr(redis.Redis, "from_url", staticmethod(lambda *a, **k: fake))
    cache = RedisCache("redis://nowhere:1/0")
    for i, blob in enumerate(MALFORMED.values()):
        fake.data[f"diffract:k{i}"] = blob
        assert cache.get(f"k{i}") is None
    cache.set("ok", np.arange(3.0))
    np.testing.assert_array_equal(cache.get("ok"), np.arange(3.0))


def test_sqlite_missing_file_with_its_wal_left_is_refused(tmp_path):
    """A deleted store file whose write-ahead log is still there is damage: a new database
    created there would replay the old log's pages."""
    path = tmp_path / "store.sqlite"
    st = open_backend("sqlite", path)
    add_model(st, "m")
    wal = tmp_path / "store.sqlite-wal"
    assert wal.stat().st_size > 0  # the writer is still open: commits live in the log
    saved = wal.read_bytes()
    st.close()
    path.unlink()
    wal.write_bytes(saved)
    for readonly in (False, True):
        with pytest.raises(StoreCorruptError, match=r"store\.sqlite: missing, but its write-ahead"):
            open_backend("sqlite", path, readonly=readonly)
    assert not path.exists() and wal.read_bytes() == saved
