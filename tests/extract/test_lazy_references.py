"""Checkpoint leaves that cannot be referenced lazily: a nested ``.pt`` checkpoint is added by
reference all the same, leaves that cannot be referenced are copied and recorded, and
``copy_weights=False`` names them."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session
from diffract._errors import ExtractionError


@pytest.fixture
def half_lazy(monkeypatch, tmp_path):
    """A checkpoint file whose extraction gives one leaf that is not a LazyArray."""
    from safetensors.numpy import save_file

    import diffract.extract as extract_mod

    rng = np.random.default_rng(5)
    w = {"a.weight": rng.normal(size=(6, 4)), "b.weight": rng.normal(size=(5, 4))}
    path = tmp_path / "m.safetensors"
    save_file({k: v.astype(np.float32) for k, v in w.items()}, str(path))
    real = extract_mod.extract

    def extract(model, filter_spec=None, **options):
        ex = real(model, filter_spec, **options)
        for leaf in ex.leaves:
            if leaf.name == "b.weight":
                leaf.array = leaf.array.load().copy()
        return ex

    monkeypatch.setattr(extract_mod, "extract", extract)
    return path, w


def test_nested_pt_checkpoint_is_added_without_copy_weights(tmp_path):
    import torch

    path = tmp_path / "nested.pt"
    top = torch.randn(8, 4)
    inner = torch.randn(6, 4)
    torch.save({"top.weight": top, "block": {"inner.weight": inner}}, path)
    s = Session(profile="ram")
    slices = s.models.add(str(path), "m")  # was: "copy_weights=False needs a checkpoint file"
    names = {sl.name for sl in slices}
    assert "top.weight" in names
    info = s.models.info("m")
    assert info["weights"] in ("referenced", "mixed")
    for sl in slices:
        assert s.models.weights(sl.uid).shape == sl.shape


def test_leaves_that_cannot_be_referenced_are_copied_and_recorded(half_lazy):
    path, w = half_lazy
    s = Session(profile="ram")
    s.models.add(str(path), "m")
    info = s.models.info("m")
    assert info["weights"] == "mixed" and info["copied_leaves"] == ["b.weight"]
    assert "copied into the store" in info["weights_note"]
    assert "external" in s.models.slice("a.weight").meta
    assert "external" not in s.models.slice("b.weight").meta
    for name in w:
        np.testing.assert_allclose(s.models.weights(name), w[name].astype(np.float32))


def test_copy_weights_false_names_the_leaves_that_cannot_be_referenced(half_lazy):
    path, _ = half_lazy
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"copy_weights=False.*'b\.weight'") as err:
        s.models.add(str(path), "m", copy_weights=False)
    assert "in-memory" not in str(err.value)
    with pytest.raises(ExtractionError, match=r"in-memory models and \.onnx files"):
        s.models.add({"w": np.ones((3, 3))}, "x", copy_weights=False)
