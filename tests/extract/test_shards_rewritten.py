"""Shards of a referenced checkpoint folder rewritten in place: a clear error naming the shard
(caught by size and time, else by its header), a removed shard fails only its slices, a changed
index is an error, references written before shard stamps stay readable."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from diffract import Session
from diffract._errors import StoreError
from diffract.run.report import KernelFailureWarning


def _apply(scope, *fields, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFailureWarning)
        return scope.compute.apply(*fields, progress=False, **kw)


def _sharded(folder: Path, a: np.ndarray, b: np.ndarray) -> None:
    from safetensors.numpy import save_file

    folder.mkdir(exist_ok=True)
    save_file({"a.weight": a}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({"b.weight": b}, str(folder / "model-00002-of-00002.safetensors"))
    index = {
        "weight_map": {
            "a.weight": "model-00001-of-00002.safetensors",
            "b.weight": "model-00002-of-00002.safetensors",
        }
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def _rewrite_in_place(path: Path, tensors: dict, metadata=None, keep_times=False) -> None:
    """Overwrite ``path`` without replacing the file (so the folder's stat stays as it was)."""
    from safetensors.numpy import save

    st = path.stat()
    data = save(tensors, metadata=metadata)
    with open(path, "r+b") as fh:
        fh.write(data)
        fh.truncate()
    if keep_times:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def shards(tmp_path):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(16, 8)).astype(np.float32)
    b = rng.normal(size=(16, 8)).astype(np.float32)
    folder = tmp_path / "shards"
    _sharded(folder, a, b)
    return folder, a, b


def test_shard_rewritten_in_place_is_a_clear_error_naming_the_shard(shards, tmp_path):
    folder, _, b = shards
    with Session(backend="sqlite", path=tmp_path / "st") as s:
        s.models.add(str(folder), "m")
        ext = s.models.slice("a.weight").meta["external"]
        assert ext["shard"]["file"] == "model-00001-of-00002.safetensors"
        assert ext["shard"]["key"] == "a.weight" and "index" in ext
        assert _apply(s, "frob_norm").ok  # loaders of the old header are now cached
        dir_mtime = folder.stat().st_mtime_ns
        # same shape, longer header: the old offsets would read garbage
        _rewrite_in_place(
            folder / "model-00001-of-00002.safetensors",
            {"a.weight": np.full((16, 8), 3, np.float32)},
            metadata={"note": "x" * 40},
        )
        assert folder.stat().st_mtime_ns == dir_mtime  # the folder itself did not change
        s.compute.erase(*s.results.fields())  # frob_norm's stored inputs too
        report = _apply(s, "frob_norm")
        assert [f.name for f in report.failures] == ["a.weight"]
        err = report.failures[0].error
        assert "changed since it was added" in err and "model-00001-of-00002" in err
        # the other shard did not change: its slice is computed, from the right data
        assert s.results.get("frob_norm", "b.weight") == pytest.approx(np.linalg.norm(b))
        with pytest.raises(StoreError, match=r"changed since it was added.*model-00001"):
            s.models.weights("a.weight")
    # a fresh session (nothing cached) says the same
    with Session(backend="sqlite", path=tmp_path / "st") as s:
        with pytest.raises(StoreError, match="changed since it was added"):
            s.models.weights("a.weight")
        np.testing.assert_array_equal(s.models.weights("b.weight"), b)


def test_shard_rewritten_with_the_same_size_and_time_is_caught_by_its_header(shards):
    folder, a, _ = shards
    s = Session(profile="ram")
    s.models.add(str(folder), "m")
    np.testing.assert_array_equal(s.models.weights("a.weight"), a)
    shard = folder / "model-00001-of-00002.safetensors"
    size = shard.stat().st_size
    # I32 instead of F32: a header of the same length, data of the same size
    _rewrite_in_place(shard, {"a.weight": np.ones((16, 8), np.int32)}, keep_times=True)
    assert shard.stat().st_size == size
    s.references.clear()  # as in a fresh process
    with pytest.raises(StoreError, match=r"changed since it was added.*header differs"):
        s.models.weights("a.weight")


def test_removed_shard_fails_only_its_slices(shards):
    folder, a, _ = shards
    s = Session(profile="ram")
    s.models.add(str(folder), "m")
    (folder / "model-00002-of-00002.safetensors").unlink()
    report = _apply(s, "frob_norm")
    assert [f.name for f in report.failures] == ["b.weight"]
    assert "is gone" in report.failures[0].error and "model-00002" in report.failures[0].error
    assert s.results.get("frob_norm", "a.weight") == pytest.approx(np.linalg.norm(a))


def test_changed_index_is_a_clear_error(shards):
    folder, _, _ = shards
    s = Session(profile="ram")
    s.models.add(str(folder), "m")
    index = folder / "model.safetensors.index.json"
    index.write_text(index.read_text() + "\n")
    with pytest.raises(StoreError, match=r"changed since it was added.*index"):
        s.models.weights("a.weight")


def test_folder_refs_written_before_shard_stamps_stay_readable(shards):
    """An older store records only the folder's stat: it still reads, and its cache does not
    keep loaders of a shard rewritten in place (they would read at the old offsets)."""
    from diffract.extract.references import ReferenceReader

    reader = ReferenceReader()
    folder, a, b = shards
    s = Session(profile="ram")
    s.models.add(str(folder), "m")

    def old(sl):
        ext = {k: v for k, v in sl.meta["external"].items() if k not in ("shard", "index")}
        return replace(sl, meta={**sl.meta, "external": ext})

    sa, sb = old(s.models.slice("a.weight")), old(s.models.slice("b.weight"))
    np.testing.assert_array_equal(reader.read(sa), a)
    np.testing.assert_array_equal(reader.read(sb), b)
    new = np.full((16, 8), 5, np.float32)
    _rewrite_in_place(
        folder / "model-00001-of-00002.safetensors", {"a.weight": new}, metadata={"n": "x" * 30}
    )
    np.testing.assert_array_equal(reader.read(sa), new)
