"""Untrusted checkpoints and input (issue 18, points 14-19): refused with a named error.

Crafted files are refused at ``models.add`` (before any tensor is read or any memory is
allocated), special files are never opened, malformed shard indexes and odd names raise
``ExtractionError`` / ``InvalidIdentifierError`` rather than raw exceptions, and a
catastrophic ``re:`` pattern is answered at once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from diffract import ExtractionError, Session
from diffract._errors import InvalidIdentifierError, InvalidModelIdError


@pytest.fixture
def session():
    s = Session(profile="ram")
    yield s
    s.close()


def _add(session: Session, path: Path) -> None:
    session.models.add(str(path), "m")


# --- 14: a .pt whose data record is shorter than its tensor ---------------------------------


def _short_record_pt(tmp_path: Path) -> Path:
    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(10, 10), "b": torch.ones(3)}, good)
    bad = tmp_path / "short.pt"
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name.endswith("data/0"):  # the 10x10 tensor's 400 bytes cut to 48
                data = data[:48]
            zout.writestr(name, data)
    return bad


def test_pt_with_short_data_record_is_refused(session, tmp_path):
    bad = _short_record_pt(tmp_path)
    with pytest.raises(RuntimeError):  # torch itself refuses it without mmap
        torch.load(bad, weights_only=True)
    with pytest.raises(ExtractionError, match="data record holds 48"):
        _add(session, bad)
    session.models.add(str(tmp_path / "good.pt"), "ok")  # the intact file still loads
    np.testing.assert_array_equal(session.models.weights("w", "ok"), np.ones((10, 10)))


# --- 15: .npz headers against member sizes --------------------------------------------------


def _npy_bytes(shape: tuple[int, ...], data: bytes, descr: str = "<f4") -> bytes:
    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + data


def test_npz_header_larger_than_member_is_refused(session, tmp_path):
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("w.npy", _npy_bytes((100000, 100000), bytes(48)))
    with pytest.raises(ExtractionError, match=r"claims shape \[100000, 100000\]"):
        _add(session, path)


def test_npz_non_npy_member_is_refused(session, tmp_path):
    path = tmp_path / "odd.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("w.npy", _npy_bytes((2, 2), bytes(16)))
        zf.writestr("notes.txt", b"hello")
    with pytest.raises(ExtractionError, match=r"not a \.npy array"):
        _add(session, path)


def test_valid_npz_still_loads(session, tmp_path):
    path = tmp_path / "ok.npz"
    np.savez(path, w=np.ones((4, 3), np.float32), b=np.zeros(3))
    session.models.add(str(path), "ok")
    np.testing.assert_array_equal(session.models.weights("w", "ok"), np.ones((4, 3)))


# --- 16, 18: safetensors files the reference reader refuses ---------------------------------


def _st(path: Path, header: dict | bytes, data: bytes) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


_F32x4 = np.ones(4, np.float32).tobytes()


def _t(dtype: str, shape: list[int], start: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


SAFETENSORS_CASES = {
    "overlap": ({"a": _t("F32", [2], 0, 8), "b": _t("F32", [2], 4, 12)}, _F32x4, "overlaps"),
    "gap": ({"a": _t("F32", [2], 0, 8), "b": _t("F32", [1], 12, 16)}, _F32x4, "gap"),
    "trailing": ({"a": _t("F32", [2], 0, 8)}, _F32x4, "cover 8 of"),
    "unaligned": ({"a": _t("U8", [1], 0, 1), "b": _t("F32", [2], 1, 9)}, bytes(9), "aligned"),
    "metadata_list": ({"__metadata__": [1], "a": _t("F32", [4], 0, 16)}, _F32x4, "__metadata__"),
    "metadata_int": ({"__metadata__": {"k": 1}, "a": _t("F32", [4], 0, 16)}, _F32x4, "strings"),
    "duplicate": (
        b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},'
        b'"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
        _F32x4,
        "names 'a' twice",
    ),
    "deep": (b"[" * 100_000 + b"]" * 100_000, _F32x4, "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(SAFETENSORS_CASES))
def test_safetensors_the_reference_reader_refuses(session, tmp_path, case):
    header, data, message = SAFETENSORS_CASES[case]
    path = _st(tmp_path / f"{case}.safetensors", header, data)
    with pytest.raises(ExtractionError, match=message):
        _add(session, path)
    if case != "unaligned":  # older safetensors releases accept misaligned offsets
        from safetensors.numpy import load_file

        with pytest.raises(Exception):  # noqa: B017 (SafetensorError, the reference)
            load_file(str(path))


def test_valid_safetensors_still_loads(session, tmp_path):
    path = _st(
        tmp_path / "ok.safetensors",
        {"__metadata__": {"format": "np"}, "a": _t("F32", [2], 0, 8), "b": _t("F32", [2], 8, 16)},
        _F32x4,
    )
    session.models.add(str(path), "ok")
    np.testing.assert_array_equal(session.models.weights("b", "ok"), np.ones(2))


# --- 17: FIFOs never block models.add -------------------------------------------------------


def _add_with_deadline(session: Session, path: Path, fifos: list[Path]) -> BaseException | None:
    """Run ``models.add(path)`` in a thread; fail if it blocks, unblocking it afterwards."""
    box: list[BaseException | None] = []

    def run() -> None:
        try:
            session.models.add(str(path), "m")
            box.append(None)
        except BaseException as exc:
            box.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(15)
    blocked = worker.is_alive()
    if blocked:  # free the reader blocked in open(): a writer opens and closes each FIFO
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(15)
    assert not blocked, f"models.add({path.name}) blocked on a FIFO"
    return box[0]


@pytest.mark.parametrize("name", ["model.safetensors", "model.npz", "model.pt", "model.onnx"])
def test_fifo_checkpoint_is_refused_without_blocking(session, tmp_path, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    exc = _add_with_deadline(session, fifo, [fifo])
    assert isinstance(exc, ExtractionError) and "FIFO" in str(exc), exc


@pytest.mark.parametrize("with_index", [True, False])
def test_fifo_shard_is_refused_without_blocking(session, tmp_path, with_index):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    _st(folder / "a.safetensors", {"x": _t("F32", [4], 0, 16)}, _F32x4)
    os.mkfifo(folder / "b.safetensors")
    fifos = [folder / "b.safetensors"]
    if with_index:
        index = {"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    exc = _add_with_deadline(session, folder, fifos)
    assert isinstance(exc, ExtractionError) and "FIFO" in str(exc), exc


def test_fifo_shard_index_is_refused_without_blocking(session, tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    _st(folder / "a.safetensors", {"x": _t("F32", [4], 0, 16)}, _F32x4)
    os.mkfifo(folder / "model.safetensors.index.json")
    exc = _add_with_deadline(session, folder, [folder / "model.safetensors.index.json"])
    assert isinstance(exc, ExtractionError) and "FIFO" in str(exc), exc


# --- 18: malformed shard indexes, odd members and tensors, odd names ------------------------


def _shard_folder(tmp_path: Path, index: bytes) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    _st(folder / "a.safetensors", {"x": _t("F32", [4], 0, 16)}, _F32x4)
    (folder / "model.safetensors.index.json").write_bytes(index)
    return folder


@pytest.mark.parametrize(
    "index",
    [
        b'{"weight_map": ["a.safetensors"]}',
        b'{"weight_map": {"x": 3}}',
        b'{"weight_map": {"x": "\\udcff.safetensors"}}',
        b'{"weight_map": {"x": "\xff\xfe.safetensors"}}',
        b'{"weight_map": {"x": "sub"}}',
    ],
    ids=["list", "numeric", "surrogate", "not-utf8", "folder"],
)
def test_malformed_shard_index_is_a_named_error(session, tmp_path, index):
    folder = _shard_folder(tmp_path, index)
    (folder / "sub").mkdir()
    with pytest.raises(ExtractionError):
        _add(session, folder)


def test_sparse_torch_tensor_is_a_named_error(session, tmp_path):
    path = tmp_path / "sparse.pt"
    idx = torch.tensor([[0, 1], [1, 0]])
    torch.save({"w": torch.sparse_coo_tensor(idx, torch.ones(2), (2, 2))}, path)
    with pytest.raises(ExtractionError, match="sparse"):
        _add(session, path)


def test_lone_surrogate_in_model_id_is_a_named_error(session):
    with pytest.raises(InvalidModelIdError, match="surrogate"):
        session.models.add({"w": np.ones((3, 3))}, "m\ud800")


def test_lone_surrogate_in_parameter_name_is_a_named_error(session):
    with pytest.raises(InvalidIdentifierError, match="surrogate"):
        session.models.add({"w\udc80": np.ones((3, 3))}, "m")
    assert "m" not in session.models.ids()


# --- 19: a catastrophic re: pattern is bounded ----------------------------------------------

_REGEX_PROBE = """
import time
from diffract import Session
s = Session(profile="ram")
s.models.add({"a" * 40 + "b": __import__("numpy").ones((3, 3))}, "m")
t = time.perf_counter()
for pattern in ["re:(a+)+$", "re:(\\\\w|\\\\w\\\\w)+(?=c)"]:
    try:
        n = len(s.filter(param_names=pattern).models.slices())
    except Exception as exc:
        n = type(exc).__name__
    print(pattern, n)
print("took", time.perf_counter() - t)
"""


def test_catastrophic_regex_is_bounded():
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _REGEX_PROBE], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a re: filter with nested repetition ran for over 60 s")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "re:(a+)+$ 0"  # RE2: no match, at once
    assert lines[1].endswith((" 0", "FilterError")), lines[1]
    assert float(lines[2].split()[1]) < 10


@pytest.mark.parametrize(
    "pattern",
    [r"(a+)+$", r"[\w.]+", r"\d+\.weight", r"layer\Z", r"(a)\1", r"a(?=b)b", r"(?i)ÉTÉ", r".*"],
)
def test_bounded_regex_matches_as_python_re(pattern):
    """Whichever engine runs a pattern, it matches exactly what Python's ``re`` matches."""
    import re

    from diffract._vocab.filters import compile_pattern

    compiled = compile_pattern("re:" + pattern, "param_names")
    for text in ["aaa", "été.x_1", "12.weight", "layer", "aa", "ab", "ÉTÉ", "m\ud800", ""]:
        assert compiled.fullmatch(text) == (re.fullmatch(pattern, text) is not None), text
