"""The local HDF5 store: persistence across processes, bad files, the writer lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from diffract import KernelFailureWarning, Session, StoreCorruptError, StoreError
from diffract.store import Batch, open_store

FIELDS = ("frob_norm", "spectral_norm", "stable_rank", "weights_std")


def run_py(code: str, cwd) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_fresh_process_reopens_and_recomputes_nothing(tmp_path, minilm_path):
    first = run_py(
        f"""
        import json
        from diffract import Session
        with Session(profile="local") as s:
            s.models.add({str(minilm_path)!r}, model_id="minilm")
            s.models.add({{"a.weight": __import__("numpy").arange(12.0).reshape(3, 4)}}, model_id="tiny")
            s.compute.apply(*{FIELDS!r}, progress=False)
            print(json.dumps(s.results.export_table(*{FIELDS!r}, export_format="json")))
        """,
        tmp_path,
    )
    assert (tmp_path / ".diffract" / "diffract-store.json").exists()
    second = run_py(
        f"""
        import json
        from diffract import Session
        with Session(profile="local") as s:
            assert s.models.ids() == ["minilm", "tiny"], s.models.ids()
            report = s.compute.apply(*{FIELDS!r}, progress=False)
            print(json.dumps({{"calls": s.kernel_calls, "computed": report.computed, "reused": report.reused}}))
            print(json.dumps(s.results.export_table(*{FIELDS!r}, export_format="json")))
        """,
        tmp_path,
    )
    stats_line, table = second.strip().splitlines()
    stats = json.loads(stats_line)
    assert stats["calls"] == {} and stats["computed"] == 0 and stats["reused"] > 4 * 30
    assert json.loads(table) == json.loads(first)


def test_every_value_kind_round_trips(tmp_path):
    with open_store("local", tmp_path / "st") as st:
        st.commit(Batch(add_models={"m": {"framework": "numpy"}}))
        values = {
            ("u1", "f"): 1.5,
            ("u1", "i"): 7,
            ("u1", "b"): True,
            ("u1", "s"): "under-trained",
            ("u1", "a"): np.arange(5.0),
            ("u2", "f"): float("nan"),
        }
        st.commit(Batch(fields=values))
    with open_store("local", tmp_path / "st", readonly=True) as st:
        assert (
            st.get(("u1", "f")) == 1.5 and st.get(("u1", "i")) == 7 and st.get(("u1", "b")) is True
        )
        assert st.get(("u1", "s")) == "under-trained"
        np.testing.assert_array_equal(st.get(("u1", "a")), np.arange(5.0))
        assert np.isnan(st.get(("u2", "f")))


def test_a_failed_write_leaves_nothing_half_written(tmp_path):
    with open_store("local", tmp_path / "st") as st:
        st.commit(Batch(fields={("u", "good"): 1.0}))
        with pytest.raises(StoreError, match="cannot be stored"):
            st.commit(Batch(fields={("u", "half"): 2.0, ("u", "bad"): object()}))
        assert not list((tmp_path / "st" / "segments").glob(".tmp-*"))
    with open_store("local", tmp_path / "st", readonly=True) as st:
        assert sorted(st.keys()) == [("u", "good")]


def test_second_writer_gets_a_clear_error_and_readers_still_read(tmp_path, mlp_weights):
    with Session(profile="local", path=tmp_path / "st") as writer:
        writer.models.add(mlp_weights, model_id="m")
        code = f"""
            from diffract import Session, StoreLockedError
            try:
                Session(profile="local", path={str(tmp_path / "st")!r})
            except StoreLockedError as exc:
                print("LOCKED", exc)
            reader = Session(profile="local", path={str(tmp_path / "st")!r}, readonly=True)
            print("READ", reader.models.ids())
            """
        out = run_py(code, tmp_path)
        assert "LOCKED" in out and f"pid {os.getpid()}" in out and "readonly=True" in out
        assert "READ ['m']" in out
    # after the writer closed, a new writer may open it
    with Session(profile="local", path=tmp_path / "st") as again:
        assert again.models.ids() == ["m"]
    with Session(profile="local", path=tmp_path / "st"), warnings.catch_warnings():
        warnings.simplefilter("error")  # same process: takes the lock over, silently
        assert Session(profile="local", path=tmp_path / "st").store.took_over


def test_readonly_session_refuses_writes(tmp_path, mlp_weights):
    with Session(profile="local", path=tmp_path / "st") as s:
        s.models.add(mlp_weights, model_id="m")
    ro = Session(profile="local", path=tmp_path / "st", readonly=True)
    with pytest.raises(StoreError, match="read-only"):
        ro.compute.apply("frob_norm")
    with pytest.raises(StoreError, match="no diffract store"):
        Session(profile="local", path=tmp_path / "missing", readonly=True)


def _stored(tmp_path, mlp_weights):
    path = tmp_path / "st"
    with Session(profile="local", path=path) as s:
        s.models.add(mlp_weights, model_id="m")
        s.compute.apply("frob_norm", progress=False)
    return path


@pytest.mark.parametrize("damage", ["truncate", "random", "foreign-hdf5"])
def test_corrupt_segment_names_the_file(tmp_path, mlp_weights, damage):
    path = _stored(tmp_path, mlp_weights)
    segments = sorted((path / "segments").glob("*.h5"))
    seg = segments[-1]
    if damage == "truncate":
        data = seg.read_bytes()
        seg.write_bytes(data[: len(data) // 3])
    elif damage == "random":
        seg.write_bytes(np.random.default_rng(0).bytes(4096))
    else:
        import h5py

        seg.unlink()
        with h5py.File(seg, "w") as f:
            f["x"] = 1
    with pytest.raises(StoreCorruptError, match=seg.name):
        Session(profile="local", path=path)
    # nothing else was touched: no segment removed or added (an apply commits its values and
    # then the options they were computed with, so the count is not fixed here)
    assert sorted((path / "segments").glob("*.h5")) == segments


def test_foreign_folder_file_and_layout_versions(tmp_path, mlp_weights):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(StoreCorruptError, match="not a diffract store"):
        Session(profile="local", path=foreign)
    assert (foreign / "notes.txt").read_text() == "mine"
    afile = tmp_path / "file.h5"
    afile.write_bytes(b"\x89HDF")
    with pytest.raises(StoreCorruptError, match="is a file, not a diffract store folder"):
        Session(profile="local", path=afile)
    path = _stored(tmp_path, mlp_weights)
    marker = path / "diffract-store.json"
    for version, word in ((99, "newer"), (0, "older")):
        marker.write_text(
            json.dumps({"format": "diffract-store", "layout_version": version, "backend": "hdf5"})
        )
        with pytest.raises(StoreCorruptError, match=f"layout version {version} is {word}"):
            Session(profile="local", path=path)
    marker.write_text("{not json")
    with pytest.raises(StoreCorruptError, match="unreadable store marker"):
        Session(profile="local", path=path)


def test_unknown_profile_lists_valid_ones():
    from diffract import ConfigError

    with pytest.raises(
        ConfigError,
        match=r"valid profiles are \['hdf5', 'hybrid', 'local', 'ram', 'sqlite', 'zarr'\]",
    ):
        Session(profile="s3")


def test_referenced_checkpoint_that_changed_is_a_clear_error(tmp_path, mlp_weights):
    from safetensors.numpy import save_file

    ckpt = tmp_path / "m.safetensors"
    save_file(mlp_weights, str(ckpt))
    with Session(profile="local", path=tmp_path / "st") as s:
        s.models.add(str(ckpt), model_id="m")
        assert s.models.info("m")["weights"] == "referenced"
        np.testing.assert_array_equal(
            s.models.weights("layers.0.weight"), mlp_weights["layers.0.weight"]
        )
        ckpt.unlink()
        with pytest.warns(KernelFailureWarning):
            report = s.compute.apply("frob_norm", progress=False)
        assert (
            report.failures
            and "checkpoint behind m:layers.0.weight is gone" in report.failures[0].error
        )


@pytest.mark.parametrize("backend", ["sqlite", "zarr", "hybrid"])
def test_corrupt_files_of_other_backends_name_the_file(tmp_path, mlp_weights, backend):
    path = tmp_path / ("st.sqlite" if backend == "sqlite" else "st")
    with Session(backend=backend, path=path) as s:
        s.models.add(mlp_weights, model_id="m")
        s.compute.apply("frob_norm", progress=False)
    if backend == "sqlite":
        victim = path
        data = victim.read_bytes()
        victim.write_bytes(b"SQLite format 3\x00" + np.random.default_rng(1).bytes(len(data) - 16))
    elif backend == "zarr":
        victim = sorted((path / "commits").glob("*.json"))[-1]
        victim.write_text('{"seq": 2, "slices": [')
    else:
        victim = path / "meta.sqlite"
        victim.write_bytes(np.random.default_rng(2).bytes(4096))
    with pytest.raises(StoreCorruptError, match=victim.name):
        Session(backend=backend, path=path)


def test_sqlite_store_of_a_newer_layout_is_named(tmp_path, mlp_weights):
    import sqlite3

    path = tmp_path / "st.sqlite"
    with Session(backend="sqlite", path=path) as s:
        s.models.add(mlp_weights, model_id="m")
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='7' WHERE key='layout_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreCorruptError, match="layout version 7 is newer"):
        Session(backend="sqlite", path=path)


def test_a_foreign_sqlite_database_is_refused(tmp_path):
    import sqlite3

    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(StoreCorruptError, match="not a diffract store"):
        Session(backend="sqlite", path=path)


def test_a_rerun_cell_session_takes_over_and_a_dropped_one_lets_go(tmp_path, mlp_weights):
    """``session = Session()`` run twice (the old one still bound while the new one opens)
    works: the newer session writes, the older is told it was superseded; a session nobody
    references (even inside a reference cycle) releases its lock when collected."""
    import gc

    session = Session(profile="local", path=tmp_path / "st")
    session.models.add(mlp_weights, model_id="m")
    old = session
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a takeover in this process is silent (issue 29)
        session = Session(profile="local", path=tmp_path / "st")
    assert session.store.took_over
    session.models.add(mlp_weights, model_id="m2")
    with pytest.raises(StoreError, match="newer session of this process"):
        old.models.add(mlp_weights, model_id="m3")
    assert old.models.ids() == ["m", "m2"]  # it still reads
    del old
    session.self_ref = session  # a cycle: only the collector frees it
    del session
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left to take over: no warning
        with Session(profile="local", path=tmp_path / "st") as again:
            assert again.models.ids() == ["m", "m2"]
