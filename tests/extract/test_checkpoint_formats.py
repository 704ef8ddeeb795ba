"""The one table of checkpoint formats (``diffract.extract._files.FORMATS``): what
``models.add`` reads, what its errors list, the CLI's default model ids and the paths the
``%diffract add`` magic recognises all follow it."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from diffract import ExtractionError, Session
from diffract.cli import default_model_id
from diffract.extract import checkpoint_suffixes
from diffract.extract._files import FORMATS, format_of


def test_each_suffix_names_one_format_in_any_case():
    suffixes = checkpoint_suffixes()
    assert suffixes == tuple(s for f in FORMATS for s in f.suffixes)
    assert len(set(suffixes)) == len(suffixes)
    assert {".safetensors", ".npz", ".pt", ".pth", ".bin", ".onnx", ".gguf"} == set(suffixes)
    for f in FORMATS:
        for s in f.suffixes:
            assert format_of(f"dir/model{s.upper()}") is f
    assert format_of("model.h5") is None and format_of("model") is None


def test_an_unknown_suffix_is_refused_with_every_known_one(tmp_path):
    path = tmp_path / "weights.h5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n")
    with pytest.raises(ExtractionError, match=r"unsupported checkpoint suffix '\.h5'") as err:
        Session(profile="ram").models.add(str(path), model_id="m")
    for s in checkpoint_suffixes():
        assert s in str(err.value)


def test_every_format_reads_through_its_table_entry(tmp_path):
    w = {"layers.0.weight": np.arange(12.0, dtype=np.float32).reshape(3, 4)}
    save_file(w, str(tmp_path / "a.SafeTensors"))  # any case
    np.savez(tmp_path / "a.npz", **w)
    s = Session(profile="ram")
    for name in ("a.SafeTensors", "a.npz"):
        s.models.add(str(tmp_path / name), model_id=name.replace(".", "-"))
        np.testing.assert_array_equal(
            s.models.weights("layers.0.weight", model_id=name.replace(".", "-")),
            w["layers.0.weight"],
        )


def test_default_model_ids_drop_each_known_suffix_only(tmp_path):
    for s in checkpoint_suffixes():
        assert default_model_id(tmp_path / f"step-7{s}") == "step-7"
    assert default_model_id(tmp_path / "step-7.h5") == "step-7.h5"


def test_the_add_magic_takes_a_bare_checkpoint_name_as_a_path(fresh_shell):
    from IPython.core.error import UsageError

    fresh_shell.run_line_magic("diffract", "open --profile ram")
    for s in checkpoint_suffixes():
        with pytest.raises(UsageError, match=rf"'missing{s}'.*not found"):
            fresh_shell.run_line_magic("diffract", f"add missing{s} --id m")
    with pytest.raises(UsageError, match=r"cannot evaluate 'missing\.h5'"):  # not a checkpoint
        fresh_shell.run_line_magic("diffract", "add missing.h5 --id m")
