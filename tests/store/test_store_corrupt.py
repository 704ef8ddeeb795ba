"""Issue 18, points 9, 10 and 12: a truncated SQLite store is refused on open, damaged HDF5
segments raise StoreCorruptError (never a raw TypeError), and a full disk is not damage."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from diffract._errors import StoreCorruptError, StoreError
from diffract.store import Batch, open_backend


def _sqlite_store(path, n=60):
    st = open_backend("sqlite", path)
    st.commit(
        Batch(
            add_models={"m": {}},
            fields={(f"u{i}@m", f"field_{i}"): "x" * 40 + str(i) for i in range(n)},
        )
    )
    st.close()
    return path


@pytest.mark.parametrize("cut", [2246, 4096, 1])
def test_a_truncated_sqlite_store_is_refused_on_open(tmp_path, cut):
    path = _sqlite_store(tmp_path / "s.diffract.sqlite")
    data = path.read_bytes()
    assert len(data) > 3 * 4096
    path.write_bytes(data[:-cut])
    with pytest.raises(StoreCorruptError, match="truncated SQLite store"):
        open_backend("sqlite", path, readonly=True)
    with pytest.raises(StoreCorruptError, match="truncated SQLite store"):
        open_backend("sqlite", path)


def test_a_whole_sqlite_store_still_opens(tmp_path):
    path = _sqlite_store(tmp_path / "s.diffract.sqlite")
    st = open_backend("sqlite", path, readonly=True)
    assert len(list(st.keys())) == 60


FULL = textwrap.dedent(
    """
    import resource, signal, sys
    from diffract.store import open_backend, Batch
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
    try:
        st = open_backend("sqlite", sys.argv[1])
        st.commit(Batch(fields={("u0@m", "g"): 2.0}))
        print("OK")
    except Exception as e:
        print(type(e).__name__, "|", e)
    """
)


def test_a_full_disk_does_not_make_a_healthy_sqlite_store_look_damaged(tmp_path):
    path = _sqlite_store(tmp_path / "s.diffract.sqlite")
    r = subprocess.run(
        [sys.executable, "-c", FULL, str(path)], capture_output=True, text=True, timeout=120
    )
    out = r.stdout.strip()
    assert out, r.stderr
    assert not out.startswith("StoreCorruptError") and "unreadable" not in out, out
    assert "not found damaged" in out or out == "OK", out
    st = open_backend("sqlite", path, readonly=True)
    assert len(list(st.keys())) == 60


def _hdf5_store(path):
    import numpy as np

    st = open_backend("hdf5", path)
    fields = {(f"u{i}@m", "f"): float(i) for i in range(20)}
    fields[("u0@m", "arr")] = np.arange(50.0)
    st.commit(Batch(add_models={"m": {}}, fields=fields))
    st.close()
    return path


FLIP = textwrap.dedent(
    """
    import shutil, sys
    from pathlib import Path
    from diffract._errors import StoreCorruptError
    from diffract.store import open_backend
    src = Path(sys.argv[1])
    seg = sorted((src / "segments").glob("*.h5"))[0]
    data = seg.read_bytes()
    for off in map(int, sys.argv[2:]):
        dst = src.with_name("flip")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        b = bytearray(data)
        b[off] ^= 0xFF
        (dst / "segments" / seg.name).write_bytes(bytes(b))
        try:
            st = open_backend("hdf5", dst, readonly=True)
            for k in st.keys():
                st.get(k)
            print(off, "ok", flush=True)
        except StoreCorruptError:
            print(off, "corrupt", flush=True)
        except Exception as e:
            print(off, "RAW", type(e).__name__, flush=True)
    """
)


def test_flipped_bytes_in_an_hdf5_segment_are_store_corrupt_errors(tmp_path):
    """Offsets found by a sweep whose flips raised raw TypeError / AttributeError /
    RuntimeError / ValueError; each must now be StoreCorruptError (or read fine)."""
    src = _hdf5_store(tmp_path / "s")
    size = next((src / "segments").glob("*.h5")).stat().st_size
    offsets = [o for o in RAW_OFFSETS if o < size]
    r = subprocess.run(
        [sys.executable, "-c", FLIP, str(src), *map(str, offsets)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    raw = [line for line in r.stdout.splitlines() if "RAW" in line]
    assert not raw and r.returncode == 0, (raw, r.stderr[-2000:])


RAW_OFFSETS = [810, 849, 889, 929, 1390, 1418, 1458, 1498, 1806, 1846]


def test_store_error_is_the_base_of_the_full_disk_error():
    assert issubclass(StoreCorruptError, StoreError)
