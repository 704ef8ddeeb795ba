"""Leaves that are not analyzed are skipped with a reason, not a refusal of the whole model.

Issue 28, point 14: a safetensors tensor of a dtype the reference reader knows but that is not
analyzed (U64, C64, F4, F6, F8_E8M0...) or with a zero-size dimension. Issue 26, point 14: in
a dict of NumPy arrays, a complex, empty or masked array (Diffract 0.3.1 skips each and reads
the rest; a masked array's mask must never be ignored). Kept values are compared with the
reference readers (``safetensors.safe_open``, NumPy); an explicit ``filter_spec`` that keeps
such a leaf is still refused with a named error.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from diffract import ExtractionError, Session

safetensors = pytest.importorskip("safetensors")


def _write_st(path, tensors: list[tuple[str, str, list[int], bytes]]) -> str:
    """A safetensors file of (name, dtype, shape, raw bytes), packed in the given order."""
    header, at = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors))
    return str(path)


@pytest.fixture
def mixed_file(tmp_path, rng):
    w = rng.standard_normal((6, 4)).astype(np.float32)
    big = np.array([2**64 - 1, 3], dtype="<u8")
    z = (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype("<c8")
    path = _write_st(
        tmp_path / "mixed.safetensors",
        [
            ("w", "F32", [6, 4], w.tobytes()),
            ("big", "U64", [2], big.tobytes()),
            ("z", "C64", [3], z.tobytes()),
            ("empty", "F32", [0, 4], b""),
            ("fp4", "F4", [2, 3], b"\x12\x34\x56"),
            ("e8m0", "F8_E8M0", [2], b"\x7f\x80"),
            ("fp6", "F6_E2M3", [4], b"\x01\x02\x03"),
        ],
    )
    return path, w, big, z


def test_the_reference_reader_accepts_the_mixed_file(mixed_file):
    from safetensors import safe_open

    path, w, big, _ = mixed_file
    with safe_open(path, "numpy") as f:
        assert sorted(f.keys()) == ["big", "e8m0", "empty", "fp4", "fp6", "w", "z"]
        np.testing.assert_array_equal(f.get_tensor("w"), w)
        np.testing.assert_array_equal(f.get_tensor("big"), big)


def test_unanalyzed_safetensors_tensors_are_skipped_with_a_reason(mixed_file):
    from safetensors import safe_open

    path, *_ = mixed_file
    s = Session(profile="ram")
    s.models.add(path, "m")  # base commit: the whole file refused for 'big' (U64)
    assert [p["name"] for p in s.models.parameters.list()] == ["w"]
    with safe_open(path, "numpy") as f:
        np.testing.assert_array_equal(s.models.weights("w"), f.get_tensor("w"))
    skipped = s.models.info("m")["skipped"]
    assert sorted(skipped) == ["big", "e8m0", "empty", "fp4", "fp6", "z"]
    assert "uint64" in skipped["big"]
    assert "complex64" in skipped["z"] and "imaginary" in skipped["z"]
    assert "empty" in skipped["empty"] and "(0, 4)" in skipped["empty"]
    for name, dtype in [("fp4", "F4"), ("e8m0", "F8_E8M0"), ("fp6", "F6_E2M3")]:
        assert f"dtype {dtype}" in skipped[name] and "not analyzed" in skipped[name]


def test_filter_true_keeps_unsigned_tensors_with_the_reference_values(mixed_file):
    from safetensors import safe_open

    from diffract.extract import extract

    path, *_ = mixed_file
    ex = extract(path, filter_spec=lambda leaf: leaf.dtype in ("uint64", "float32") and leaf.size)
    got = {leaf.name: leaf.array.load() for leaf in ex.leaves}
    with safe_open(path, "numpy") as f:
        for name in ("w", "big"):
            np.testing.assert_array_equal(got[name], f.get_tensor(name))
            assert got[name].dtype == f.get_tensor(name).dtype


def test_filter_true_still_refuses_a_complex_tensor(tmp_path):
    z = np.ones(3, "<c8")
    path = _write_st(
        tmp_path / "c.safetensors", [("z", "C64", [3], z.tobytes()), ("w", "F32", [2], b"\0" * 8)]
    )
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"'z'.*complex64"):
        s.models.add(path, "m", filter_spec=True)
    assert s.models.ids() == []


def test_sub_byte_tensor_not_ending_on_a_byte_is_refused_as_the_reference_refuses(tmp_path):
    from safetensors import safe_open

    path = _write_st(
        tmp_path / "odd.safetensors",
        [("w", "F32", [2], b"\0" * 8), ("fp6", "F6_E2M3", [3], b"\0\0\0")],  # 18 bits
    )
    with pytest.raises(Exception, match="byte boundary"), safe_open(path, "numpy"):
        pass
    with pytest.raises(ExtractionError, match=r"odd\.safetensors.*'fp6'.*byte boundary"):
        Session(profile="ram").models.add(path, "m")


def test_an_undefined_dtype_is_still_refused(tmp_path):
    path = _write_st(tmp_path / "bad.safetensors", [("w", "F12", [2], b"\0" * 4)])
    with pytest.raises(ExtractionError, match=r"bad\.safetensors.*'w'.*unknown dtype 'F12'"):
        Session(profile="ram").models.add(path, "m")


# --- NumPy dicts (issue 26, point 14) -------------------------------------------------------


def _frob(s, name):
    t = s.results.export_table("frob_norm", export_format="dict")
    return dict(zip(t["name"], t["frob_norm"], strict=True))[name]


def test_masked_array_is_skipped_never_read_without_its_mask(rng):
    data = rng.standard_normal((5, 5))
    masked = np.ma.masked_array(data, mask=np.eye(5, dtype=bool))
    ok = rng.standard_normal((4, 3))
    s = Session(profile="ram")
    s.models.add({"w": masked, "ok": ok}, "m")  # base commit: w kept with its mask ignored
    assert [p["name"] for p in s.models.parameters.list()] == ["ok"]
    reason = s.models.info("m")["skipped"]["w"]
    assert "masked array" in reason and "filled" in reason
    s.compute.apply("frob_norm", progress=False)
    assert _frob(s, "ok") == pytest.approx(np.linalg.norm(ok), rel=1e-6)


def test_a_model_of_masked_arrays_only_is_an_error_naming_the_mask():
    masked = np.ma.masked_array(np.ones((3, 3)), mask=np.eye(3, dtype=bool))
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"no weight slices.*w: a masked array"):
        s.models.add({"w": masked}, "m")
    assert s.models.ids() == []


def test_masked_array_kept_by_filter_spec_is_refused():
    masked = np.ma.masked_array(np.ones((3, 3)), mask=np.eye(3, dtype=bool))
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"'w' is kept by filter_spec but is a masked"):
        s.models.add({"w": masked, "ok": np.ones((2, 2))}, "m", filter_spec=True)
    assert s.models.ids() == []


def test_filled_masked_array_is_read_with_the_chosen_values():
    data = np.arange(16.0).reshape(4, 4)
    masked = np.ma.masked_array(data, mask=np.eye(4, dtype=bool))
    s = Session(profile="ram")
    s.models.add({"w": masked.filled(0.0)}, "m")
    s.compute.apply("frob_norm", progress=False)
    assert _frob(s, "w") == pytest.approx(np.linalg.norm(np.where(np.eye(4), 0.0, data)))


@pytest.mark.parametrize(
    "bad, reason",
    [
        (np.ones((3, 3), np.complex64), "complex64"),
        (np.ones((3, 3), np.complex128) * 1j, "complex128"),
        (np.ones((0, 3)), "empty (shape (0, 3))"),
        (np.ones((4, 0, 2), np.float32), "empty (shape (4, 0, 2))"),
    ],
)
def test_complex_or_empty_array_is_skipped_and_the_rest_added(rng, bad, reason):
    ok = rng.standard_normal((6, 5))
    s = Session(profile="ram")
    s.models.add({"bad": bad, "ok": ok}, "m")  # base commit: the whole add refused
    assert [p["name"] for p in s.models.parameters.list()] == ["ok"]
    assert reason in s.models.info("m")["skipped"]["bad"]
    np.testing.assert_array_equal(s.models.weights("ok"), ok)
    s.compute.apply("frob_norm", progress=False)
    assert _frob(s, "ok") == pytest.approx(np.linalg.norm(ok), rel=1e-6)


def test_torch_state_dict_complex_and_empty_tensors_are_skipped_too():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, 4, generator=g)
    sd = {
        "w": w,
        "c": torch.randn(3, 3, dtype=torch.complex64, generator=g),
        "e": torch.empty(0, 4),
    }
    s = Session(profile="ram")
    s.models.add(sd, "m")
    assert [p["name"] for p in s.models.parameters.list()] == ["w"]
    assert sorted(s.models.info("m")["skipped"]) == ["c", "e"]
    np.testing.assert_array_equal(s.models.weights("w"), w.numpy())
