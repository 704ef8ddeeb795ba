"""A checkpoint added by a relative path is recorded by its absolute path: its weights still
read after the working directory changes (a later cwd, a Dask worker started elsewhere)."""

from __future__ import annotations

import os

import numpy as np
from safetensors.numpy import save_file

from diffract import Session


def test_relative_checkpoint_path_survives_a_cwd_change(tmp_path, monkeypatch):
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    (tmp_path / "ckpt").mkdir()
    save_file({"a.weight": w}, str(tmp_path / "ckpt" / "m.safetensors"))
    monkeypatch.chdir(tmp_path)
    s = Session(profile="local", path=str(tmp_path / "store"))
    s.models.add(os.path.join("ckpt", "m.safetensors"), "m", copy_weights=False)
    recorded = s.models.slice("a.weight").meta["external"]["path"]
    assert os.path.isabs(recorded) and recorded == str(tmp_path / "ckpt" / "m.safetensors")
    s.close()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with Session(profile="local", path=str(tmp_path / "store"), readonly=True) as ro:
        np.testing.assert_array_equal(ro.models.weights("a.weight"), w)
