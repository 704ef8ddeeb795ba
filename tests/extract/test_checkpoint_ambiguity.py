"""Issue 28, points 15 and 16: a checkpoint where a name means two tensors is a named error
(a tensor in two safetensors shards, with or without an index; an ``.npz`` with two members
of one name), never resolved silently by whichever comes last; a shard that is a symbolic
link loop is a named error, not a raw ``RuntimeError``. Nothing is stored after any of them.
"""

from __future__ import annotations

import io
import json
import os
import warnings
import zipfile

import numpy as np
import pytest

from diffract import ExtractionError, Session

pytest.importorskip("safetensors")
from safetensors.numpy import load_file, save_file


def _shards(folder, rng, index: bool):
    folder.mkdir()
    a = {"w": rng.standard_normal((3, 4)).astype(np.float32)}
    b = {"w": rng.standard_normal((3, 4)).astype(np.float32), "v": np.ones((2, 2), np.float32)}
    save_file(a, str(folder / "a.safetensors"))
    save_file(b, str(folder / "b.safetensors"))
    if index:
        weight_map = {"w": "a.safetensors", "v": "b.safetensors"}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.mark.parametrize("index", [False, True])
def test_a_tensor_in_two_shards_is_a_named_error(tmp_path, rng, index):
    folder = _shards(tmp_path / "ckpt", rng, index)
    # the two copies differ: either choice would be a silent guess
    assert not np.array_equal(
        load_file(str(folder / "a.safetensors"))["w"], load_file(str(folder / "b.safetensors"))["w"]
    )
    s = Session(profile="ram")
    with pytest.raises(ExtractionError) as info:
        s.models.add(str(folder), "m")  # base commit: b's 'w' taken silently
    msg = str(info.value)
    assert (
        "'w'" in msg and "a.safetensors" in msg and "b.safetensors" in msg and "two shards" in msg
    )
    assert s.models.ids() == []


def test_distinct_shards_still_read_with_the_reference_values(tmp_path, rng):
    folder = tmp_path / "ok"
    folder.mkdir()
    save_file({"w": rng.standard_normal((3, 4)).astype(np.float32)}, str(folder / "a.safetensors"))
    save_file({"v": rng.standard_normal((5, 2)).astype(np.float32)}, str(folder / "b.safetensors"))
    s = Session(profile="ram")
    s.models.add(str(folder), "m")
    np.testing.assert_array_equal(
        s.models.weights("w"), load_file(str(folder / "a.safetensors"))["w"]
    )
    np.testing.assert_array_equal(
        s.models.weights("v"), load_file(str(folder / "b.safetensors"))["v"]
    )


def _npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_npz_with_two_members_of_one_name_is_a_named_error(tmp_path):
    path = tmp_path / "dup.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile: "Duplicate name"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("w.npy", _npy(np.ones((2, 2))))
            zf.writestr("w.npy", _npy(np.zeros((3, 3))))
            zf.writestr("v.npy", _npy(np.ones((4, 4))))
    with np.load(path) as ref:  # numpy's reader: one name, the last member's array
        assert sorted(ref.files) == ["v", "w", "w"] and ref["w"].shape == (3, 3)
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"dup\.npz.*two members named 'w\.npy'"):
        s.models.add(str(path), "m")  # base commit: shape (2, 2) declared, (3, 3) read
    assert s.models.ids() == []


def test_symlink_loop_shard_in_an_index_is_a_named_error(tmp_path, rng):
    folder = tmp_path / "loop"
    folder.mkdir()
    save_file({"w": rng.standard_normal((3, 4)).astype(np.float32)}, str(folder / "a.safetensors"))
    os.symlink("b.safetensors", folder / "b.safetensors")  # a link to itself
    weight_map = {"w": "a.safetensors", "v": "b.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"shard 'b\.safetensors' cannot be resolved.*loop"):
        s.models.add(str(folder), "m")  # base commit: RuntimeError("Symlink loop ...")
    assert s.models.ids() == []


def test_symlink_loop_shard_without_an_index_is_a_named_error(tmp_path, rng):
    folder = tmp_path / "loop"
    folder.mkdir()
    save_file({"w": rng.standard_normal((3, 4)).astype(np.float32)}, str(folder / "a.safetensors"))
    os.symlink("b.safetensors", folder / "b.safetensors")
    with pytest.raises(ExtractionError, match=r"b\.safetensors"):
        Session(profile="ram").models.add(str(folder), "m")


@pytest.mark.parametrize("target", ["self.pt", "nowhere.pt"])
def test_checkpoint_path_that_is_a_loop_or_dangling_link_says_so(tmp_path, target):
    link = tmp_path / "self.pt"
    os.symlink(target, link)
    with pytest.raises(ExtractionError, match=r"self\.pt is a symbolic link to nothing"):
        Session(profile="ram").models.add(str(link), "m")
