"""Issue 28, point 1: a PyTorch checkpoint whose data records are compressed (what re-zipping
it with any zip tool gives) is read as ``torch.load`` reads it, never through the memory map
(which would hold the compressed bytes), whether its weights are copied or referenced; a
record claiming more bytes than its compressed data can expand to is a named error."""

from __future__ import annotations

import struct
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from diffract import ExtractionError, Session  # noqa: E402


def _state_dict() -> dict:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 9, generator=g, dtype=torch.float64)
    return {
        "ones": torch.ones(10, 10),
        "w": torch.randn(12, 7, generator=g),
        "half": torch.randn(5, 8, generator=g).to(torch.bfloat16),
        "base": base,
        "rows": base[2:5],  # a view: same storage, an offset into it
        "t": base.t(),  # the same storage, other strides
        "ids": torch.arange(20).reshape(4, 5),
    }


def _rezip(src, dst, method) -> None:
    """``src`` copied member by member into ``dst`` with ``method`` (as a zip tool does)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", method) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))


def _reference(path) -> dict[str, np.ndarray]:
    loaded = torch.load(path, weights_only=True)  # no mmap: decompresses every record
    return {
        k: v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy() for k, v in loaded.items()
    }


@pytest.fixture
def rezipped(tmp_path):
    plain = tmp_path / "plain.pt"
    torch.save(_state_dict(), plain)
    path = tmp_path / "rezipped.pt"
    _rezip(plain, path, zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as zf:
        data = [i for i in zf.infolist() if "/data/" in i.filename]
    assert data and all(i.compress_type == zipfile.ZIP_DEFLATED for i in data)
    return path


@pytest.mark.parametrize("copy_weights", [None, True])
def test_rezipped_checkpoint_reads_the_values_torch_load_reads(rezipped, copy_weights):
    want = _reference(rezipped)
    s = Session(profile="ram")
    s.models.add(str(rezipped), "m", copy_weights=copy_weights)
    floats = [k for k in want if k != "ids"]
    assert sorted(p["name"] for p in s.models.parameters.list()) == sorted(floats)
    for name in floats:
        np.testing.assert_array_equal(s.models.weights(name), want[name], err_msg=name)
    s.compute.apply("frob_norm", progress=False)
    got = s.results.export_table("frob_norm", export_format="dict")
    frob = dict(zip(got["name"], got["frob_norm"], strict=True))
    assert frob["ones"] == pytest.approx(10.0, rel=1e-12)  # base commit: 1.2e36
    for name in floats:
        assert frob[name] == pytest.approx(np.linalg.norm(want[name].astype(np.float64)), rel=1e-6)


def test_rezipped_checkpoint_keeps_integer_tensors_exact(rezipped):
    from diffract.extract import extract

    want = _reference(rezipped)
    ex = extract(str(rezipped), filter_spec=True)
    got = {leaf.name: leaf.array.load() for leaf in ex.leaves}
    np.testing.assert_array_equal(got["ids"], want["ids"])
    np.testing.assert_array_equal(got["t"], want["t"])


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_a_method_torch_cannot_read_is_a_named_error(tmp_path, method):
    plain = tmp_path / "plain.pt"
    torch.save({"w": torch.ones(4, 4)}, plain)
    path = tmp_path / "other.pt"
    _rezip(plain, path, method)
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"other\.pt"):
        s.models.add(str(path), "m")
    assert s.models.ids() == []


def _set_claimed_size(path, member_suffix: str, size: int) -> None:
    """Make the zip say ``member``'s uncompressed size is ``size`` (local and central headers)."""
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(member_suffix))
    name = info.filename.encode()
    local = info.header_offset
    assert raw[local : local + 4] == b"PK\x03\x04"
    struct.pack_into("<I", raw, local + 22, size)
    at = raw.find(b"PK\x01\x02", 0)
    while at != -1:
        n = struct.unpack_from("<H", raw, at + 28)[0]
        if raw[at + 46 : at + 46 + n] == name:
            struct.pack_into("<I", raw, at + 24, size)
            break
        at = raw.find(b"PK\x01\x02", at + 4)
    else:
        raise AssertionError("central directory entry not found")
    path.write_bytes(bytes(raw))


def test_a_compressed_record_claiming_more_than_it_can_hold_is_refused(tmp_path):
    g = torch.Generator().manual_seed(1)
    state = {"w": torch.zeros(256, 256), "pad": torch.randn(400_000, generator=g)}
    plain = tmp_path / "plain.pt"
    torch.save(state, plain)
    path = tmp_path / "bomb.pt"
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():  # only w's record compressed (256 KiB of zeros: ~300 bytes)
            method = (
                zipfile.ZIP_DEFLATED if info.filename.endswith("/data/0") else zipfile.ZIP_STORED
            )
            zout.writestr(info.filename, zin.read(info), compress_type=method)
    _set_claimed_size(path, "/data/0", 4 * 262_144)  # still inside the file, over 1100x
    s = Session(profile="ram")
    with pytest.raises(
        ExtractionError, match=r"bomb\.pt.*claims 1048576 bytes from \d+ compressed"
    ):
        s.models.add(str(path), "m")
    assert s.models.ids() == []
