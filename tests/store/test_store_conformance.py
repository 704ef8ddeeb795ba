"""One conformance suite, every backend: the same writes give the same reads."""

from __future__ import annotations

import uuid
import warnings

import numpy as np
import pytest

from _store_helpers import make_slices
from diffract import Session, StoreError
from diffract._vocab.slices import make_uid
from diffract.store import BACKENDS as REGISTERED, Batch, LRUCache, open_backend, open_path

#: every registered backend, plus Zarr in memory and a hybrid store keeping its arrays in Zarr
BACKENDS = [*REGISTERED, "zarr-memory", "hybrid-zarr"]
PERSISTENT = [b for b in BACKENDS if b not in ("ram", "zarr-memory")]


def _where(kind, tmp_path):
    if kind == "ram":
        return "ram", None, {}
    if kind == "zarr-memory":
        return "zarr", f"memory://diffract-{uuid.uuid4().hex}", {}
    if kind == "hybrid-zarr":
        return "hybrid", tmp_path / "store", {"arrays": "zarr"}
    suffix = ".sqlite" if kind == "sqlite" else ""
    return kind, tmp_path / f"store{suffix}", {}


def opener(kind, tmp_path):
    backend, path, extra = _where(kind, tmp_path)

    def open_(**kw):
        return open_backend(backend, path, **extra, **kw)

    return open_


@pytest.fixture(params=BACKENDS)
def kind(request):
    return request.param


def test_models_slices_and_weights_round_trip(kind, tmp_path, rng):
    open_ = opener(kind, tmp_path)
    arrays = {
        "a.weight": rng.normal(size=(5, 3)).astype(np.float32),
        "a.bias": rng.normal(size=5),
        "b.weight": rng.normal(size=(2, 4)).astype(np.float16),
    }
    st = open_()
    sl = make_slices("m1", arrays)
    st.commit(
        Batch(
            add_models={"m1": {"framework": "numpy", "n": 3}},
            slices=sl,
            weights={s.uid: arrays[s.name] for s in sl},
        )
    )
    for store in [st, open_(readonly=True)] if kind in PERSISTENT else [st]:
        store.refresh()
        assert store.models() == {"m1": {"framework": "numpy", "n": 3}}
        assert [s.name for s in store.slices("m1")] == list(arrays)
        for s in store.slices("m1"):
            w = store.weights(s.uid)
            assert w.dtype == arrays[s.name].dtype and np.array_equal(w, arrays[s.name])
    st.close()


def test_field_values_of_every_kind(kind, tmp_path):
    st = opener(kind, tmp_path)()
    values = {
        ("u1", "f"): 1.25,
        ("u1", "i"): -3,
        ("u1", "b"): False,
        ("u1", "s"): "over-trained",
        ("u1", "esd"): np.linspace(0, 1, 7),
        ("@m", "agg"): 2.5,
    }
    st.commit(Batch(fields=values))
    st.commit(Batch(fields={("u2", "nan"): float("nan")}))
    readers = [st, opener(kind, tmp_path)(readonly=True)] if kind in PERSISTENT else [st]
    for store in readers:
        store.refresh()
        for k, v in values.items():
            got = store.get(k)
            if isinstance(v, np.ndarray):
                np.testing.assert_array_equal(got, v)
            else:
                assert got == v and type(got) is type(v), (k, got)
        assert np.isnan(store.get(("u2", "nan")))
        assert store.fields_of("u1") == ["b", "esd", "f", "i", "s"]
    st.close()


def test_erase_remove_and_replace(kind, tmp_path, rng):
    st = opener(kind, tmp_path)()
    for m in ("m1", "m2"):
        arrays = {"w": rng.normal(size=(3, 3))}
        sl = make_slices(m, arrays)
        st.commit(Batch(add_models={m: {}}, slices=sl, weights={s.uid: arrays[s.name] for s in sl}))
        st.commit(
            Batch(
                fields={
                    (sl[0].uid, "f"): 1.0,
                    (sl[0].uid, "g"): 2.0,
                    (f"@{m}", "agg"): 3.0,
                    (f"{sl[0].uid}@m0", "x"): 4.0,
                }
            )
        )
    u1 = make_uid("m1", "w")
    u2 = make_uid("m2", "w")
    st.commit(Batch(erase=[(u1, "f")]))
    assert not st.has((u1, "f")) and st.has((u1, "g"))
    st.commit(Batch(remove_models=["m1"]))
    assert list(st.models()) == ["m2"]
    assert not any(o in (u1, "@m1", f"{u1}@m0") for o, _ in st.keys())
    assert st.has((u2, "f")) and st.has(("@m2", "agg"))
    arrays = {"w": np.ones((3, 3))}
    st.commit(
        Batch(
            add_models={"m2": {"v": 2}}, slices=make_slices("m2", arrays), weights={u2: arrays["w"]}
        )
    )
    assert st.models()["m2"] == {"v": 2} and not st.has((u2, "f")) and not st.has(("@m2", "agg"))
    np.testing.assert_array_equal(st.weights(u2), np.ones((3, 3)))
    if kind in PERSISTENT:
        st.close()
        again = opener(kind, tmp_path)(readonly=True)
        assert list(again.models()) == ["m2"] and not again.has((u2, "f"))


def test_documents(kind, tmp_path):
    st = opener(kind, tmp_path)()
    st.commit(Batch(documents={("sampling_manifest", "abc"): '{"x": 1}'}))
    assert st.documents("sampling_manifest") == {"abc": '{"x": 1}'}


def test_a_bad_value_aborts_the_whole_batch(kind, tmp_path):
    st = opener(kind, tmp_path)()
    st.commit(Batch(fields={("u", "ok"): 1.0}))
    with pytest.raises(StoreError, match="cannot be stored"):
        st.commit(Batch(fields={("u", "first"): 2.0, ("u", "bad"): {"a": 1}}))
    assert sorted(st.keys()) == [("u", "ok")]
    if kind in PERSISTENT:
        st.close()
        assert sorted(opener(kind, tmp_path)(readonly=True).keys()) == [("u", "ok")]


_SECOND_WRITER = """
import sys
from diffract import StoreLockedError
from diffract.store import open_backend
backend, path, arrays = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    open_backend(backend, path, **({{"arrays": arrays}} if arrays else {{}}))
except StoreLockedError as exc:
    print("LOCKED", exc)
"""


@pytest.mark.parametrize("kind", [k for k in PERSISTENT])
def test_one_writer_many_readers(kind, tmp_path):
    import subprocess
    import sys

    open_ = opener(kind, tmp_path)
    writer = open_()
    backend, path, extra = _where(kind, tmp_path)
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            _SECOND_WRITER.format(),
            backend,
            str(path),
            extra.get("arrays", ""),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "LOCKED" in other.stdout and "another process" in other.stdout, other.stderr[-2000:]
    reader = open_(readonly=True)
    writer.commit(Batch(fields={("u", "f"): 1.0}))
    reader.refresh()
    assert reader.get(("u", "f")) == 1.0
    with pytest.raises(StoreError, match="read-only"):
        reader.commit(Batch(fields={("u", "g"): 1.0}))
    writer.close()
    open_().close()


@pytest.mark.parametrize("kind", [k for k in PERSISTENT])
def test_a_newer_writer_of_this_process_takes_over(kind, tmp_path):
    """A re-run notebook cell ``session = Session()`` opens the store while the previous
    session is still referenced: the newer writer takes the lock over (with a warning), the
    older one can still read but not write, and other processes stay locked out."""
    open_ = opener(kind, tmp_path)
    older = open_()
    older.commit(Batch(fields={("u", "a"): 1.0}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a takeover in this process is silent (issue 29)
        newer = open_()
    assert newer.took_over
    newer.commit(Batch(fields={("u", "b"): 2.0}))
    with pytest.raises(StoreError, match="newer session of this process"):
        older.commit(Batch(fields={("u", "c"): 3.0}))
    older.refresh()
    assert older.get(("u", "b")) == 2.0
    older.close()  # closing the superseded one leaves the newer writer's lock alone
    newer.commit(Batch(fields={("u", "d"): 4.0}))
    newer.close()
    with open_(readonly=True) as st:
        assert sorted(st.keys()) == [("u", "a"), ("u", "b"), ("u", "d")]


@pytest.mark.parametrize("kind", PERSISTENT)
def test_open_path_detects_the_backend(kind, tmp_path):
    st = opener(kind, tmp_path)()
    st.commit(Batch(fields={("u", "f"): 1.0}))
    st.close()
    _, path, _ = _where(kind, tmp_path)
    found = open_path(path)
    assert found.backend == st.backend and found.get(("u", "f")) == 1.0


def test_lru_cache_serves_repeated_array_reads(kind, tmp_path):
    backend, path, extra = _where(kind, tmp_path)
    cache = LRUCache(10_000)
    st = open_backend(backend, path, cache=cache, **extra)
    st.commit(Batch(fields={("u", "esd"): np.arange(100.0), ("v", "esd"): np.arange(50.0)}))
    for _ in range(3):
        np.testing.assert_array_equal(st.get(("u", "esd")), np.arange(100.0))
    if kind == "ram":  # arrays live in memory: nothing to cache
        assert cache.hits == 0
    else:
        assert cache.misses == 1 and cache.hits == 2


@pytest.mark.parametrize("kind", [k for k in BACKENDS if k not in ("zarr-memory", "hybrid-zarr")])
def test_session_end_to_end_on_every_backend(kind, tmp_path, mlp_weights):
    backend, path, _ = _where(kind, tmp_path)
    kwargs = {"backend": backend} | ({"path": path} if path is not None else {})
    s = Session(**kwargs)
    s.models.add(mlp_weights, model_id="m")
    s.compute.apply("stable_rank", "frob_norm", progress=False)
    table = s.results.export_table("stable_rank", "frob_norm", export_format="list")
    s.close()
    assert sum(r["frob_norm"] is not None for r in table) == 3
    if kind in PERSISTENT:
        again = Session(**kwargs)
        report = again.compute.apply("stable_rank", "frob_norm", progress=False)
        assert again.kernel_calls == {} and report.reused == 6
        assert again.results.export_table("stable_rank", "frob_norm", export_format="list") == table


@pytest.mark.parametrize("kind", ["hdf5", "zarr"])
def test_compaction_bounds_the_number_of_files_and_keeps_every_value(kind, tmp_path, rng):
    open_ = opener(kind, tmp_path)
    st = open_()
    arrays = {"w": rng.normal(size=(4, 4))}
    sl = make_slices("m", arrays)
    st.commit(Batch(add_models={"m": {}}, slices=sl, weights={sl[0].uid: arrays["w"]}))
    reader = open_(readonly=True)
    expected = {}
    for i in range(150):
        key = (f"u{i % 40}", f"f{i % 7}")
        value = np.arange(i + 1.0) if i % 3 == 0 else float(i)
        st.commit(Batch(fields={key: value}))
        expected[key] = value
        if i % 20 == 0:
            st.commit(Batch(erase=[key]))
            del expected[key]
    root = tmp_path / "store"
    files = (
        list((root / "segments").glob("*.h5"))
        if kind == "hdf5"
        else list((root / "commits").glob("*.json"))
    )
    assert len(files) <= 70, len(files)
    for store in (st, reader, open_(readonly=True)):
        store.refresh()
        assert set(store.keys()) == set(expected)
        for k, v in expected.items():
            assert same_value(store.get(k), v)
        np.testing.assert_array_equal(store.weights(sl[0].uid), arrays["w"])


def same_value(a, b):
    return np.array_equal(a, b) if isinstance(b, np.ndarray) else a == b
