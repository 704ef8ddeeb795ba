"""Segment manifests (docs/concepts/segments.md; issue 18 point 10, issue 17 target 1).

A store opens from its manifests alone (no h5py), every segment file is checked against the
checksum its manifest recorded before h5py opens it, a flipped byte anywhere in a segment or
a manifest is a StoreCorruptError naming the file (in bounded time: the flips run in a child
process under a timeout, since a flip that reaches h5py's parser can spin forever), and a
store written before manifests existed still opens, and is covered after a compaction.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from _store_helpers import make_slices
from diffract._errors import StoreCorruptError
from diffract.store import Batch, open_backend


def _small_store(path):
    """One model (two slices with weights) and fields of every kind, in two segments."""
    rng = np.random.default_rng(0)
    arrays = {"a.weight": rng.normal(size=(6, 4)).astype(np.float32), "a.bias": rng.normal(size=6)}
    sl = make_slices("m", arrays)
    st = open_backend("hdf5", path)
    st.commit(
        Batch(add_models={"m": {"n": 2}}, slices=sl, weights={s.uid: arrays[s.name] for s in sl})
    )
    fields = {}
    for i, s in enumerate(sl):
        fields[(s.uid, "f")] = 0.1 + i
        fields[(s.uid, "i")] = 2**62 + i
        fields[(s.uid, "s")] = f"text {i}"
        fields[(s.uid, "b")] = bool(i)
        fields[(s.uid, "esd")] = rng.normal(size=5 + i)
    st.commit(Batch(fields=fields, documents={("notes", "n1"): "hello"}))
    st.close()
    return path


def _snapshot(st):
    """Every value and weight of ``st`` in a comparable form."""
    out = {}
    for k in sorted(st.keys()):
        v = st.get(k)
        out[repr(k)] = v.tolist() if isinstance(v, np.ndarray) else v
    for s in st.slices():
        out[s.uid] = st.weights(s.uid).tolist()
    out["docs"] = st.documents("notes")
    return out


# The child flips one byte at a time (each in a file of its own: a new path, so nothing read
# before can be mistaken for it), opens the store read-only and reads everything. It prints
# one line per flip; a hang is caught by the parent's timeout and named by the last line.
FLIP = textwrap.dedent(
    """
    import json, os, shutil, sys
    from pathlib import Path
    import numpy as np
    sys.path[:0] = sys.argv[1].split(os.pathsep)
    from test_store_manifest import _snapshot
    from diffract._errors import StoreCorruptError
    from diffract.store import open_backend
    src, target, work = Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    expected = json.loads(sys.argv[5])
    offsets = list(map(int, sys.argv[6:]))
    data = (src / "segments" / target).read_bytes()
    for off in offsets:
        dst = work / f"flip-{off}"
        (dst / "segments").mkdir(parents=True)
        for f in [*src.iterdir(), *(src / "segments").iterdir()]:
            if f.is_file() and f.name != target:
                (dst / f.relative_to(src)).hardlink_to(f)
        b = bytearray(data)
        b[off] ^= 0xFF
        (dst / "segments" / target).write_bytes(bytes(b))
        try:
            st = open_backend("hdf5", dst, readonly=True)
            got = json.loads(json.dumps(_snapshot(st)))
            print(off, "same" if got == expected else "CHANGED", flush=True)
        except StoreCorruptError as e:
            print(off, "corrupt", target in str(e), flush=True)
        except Exception as e:
            print(off, "RAW", type(e).__name__, str(e)[:80], flush=True)
        shutil.rmtree(dst)
    """
)


def _offsets(data: bytes, step: int) -> list[int]:
    """Every ``step``-th byte, plus every byte of the superblock and of each HDF5 global
    heap collection (``GCOL``: where variable-length strings live, the flips that made
    h5py spin) and of each object header region (``OHDR``)."""
    picked = set(range(0, len(data), step)) | set(range(min(128, len(data))))
    for magic, span in ((b"GCOL", 2048), (b"OHDR", 64)):
        at = data.find(magic)
        while at != -1:
            picked |= set(range(at, min(at + span, len(data))))
            at = data.find(magic, at + 1)
    return sorted(picked)


def _flip_all(tmp_path, target: str, step: int) -> list[str]:
    src = _small_store(tmp_path / "store")
    with open_backend("hdf5", src, readonly=True) as st:
        expected = json.loads(json.dumps(_snapshot(st)))
    data = (src / "segments" / target).read_bytes()
    offsets = _offsets(data, step)
    work = tmp_path / "work"
    work.mkdir()
    here = Path(__file__).resolve().parent  # this file, and tests/ for _store_helpers
    tests_dir = os.pathsep.join([str(here), str(here.parent)])
    argv = [sys.executable, "-c", FLIP, tests_dir, str(src), target, str(work)]
    try:
        r = subprocess.run(
            [*argv, json.dumps(expected), *map(str, offsets)],
            capture_output=True,
            text=True,
            timeout=240,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode().splitlines()
        pytest.fail(f"a flip hung: the last finished was {out[-1:] or 'none'}")
    lines = r.stdout.splitlines()
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(lines) == len(offsets), (len(lines), len(offsets))
    return lines


@pytest.mark.parametrize(("target", "step"), [("000000000002.h5", 7), ("000000000001.h5", 11)])
def test_every_flipped_byte_of_a_segment_is_store_corrupt_error(tmp_path, target, step):
    """The checksum catches each flip before h5py parses the file: no hang, no raw error,
    no silently changed value; the error names the segment. Segment 2 holds the fields
    (strings in its global heap), segment 1 the weights."""
    lines = _flip_all(tmp_path, target, step=step)
    bad = [ln for ln in lines if not ln.endswith("corrupt True")]
    assert not bad, bad[:10]


def test_every_flipped_byte_of_a_manifest_is_store_corrupt_error(tmp_path):
    lines = _flip_all(tmp_path, "000000000002.h5.json", step=1)
    bad = [ln for ln in lines if not ln.endswith("corrupt True")]
    assert not bad, bad[:10]


def test_a_flipped_segment_is_refused_at_first_read_and_nothing_else_is_lost(tmp_path):
    src = _small_store(tmp_path / "store")
    seg = src / "segments" / "000000000001.h5"  # the weights
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0x01
    seg.write_bytes(bytes(data))
    st = open_backend("hdf5", src)  # a writer: its open deletes nothing
    uid = st.slices()[0].uid
    assert st.get((uid, "f")) == 0.1  # scalars come from the manifest
    with pytest.raises(StoreCorruptError, match=r"000000000001\.h5: checksum mismatch"):
        st.weights(uid)
    names = sorted(p.name for p in (src / "segments").iterdir())
    assert len(names) == 4  # nothing deleted
    st.compact()  # refers to the weights where they are, with the checksum of their bytes
    st.close()
    with open_backend("hdf5", src, readonly=True) as st:
        assert st.get((uid, "esd")).shape == (5,)
        with pytest.raises(StoreCorruptError, match=r"000000000001\.h5: checksum mismatch"):
            st.weights(uid)


def test_a_truncated_or_replaced_segment_is_refused_at_open(tmp_path):
    src = _small_store(tmp_path / "store")
    seg = src / "segments" / "000000000002.h5"
    seg.write_bytes(seg.read_bytes()[:-10])
    with pytest.raises(StoreCorruptError, match=r"000000000002\.h5: .* its manifest recorded"):
        open_backend("hdf5", src, readonly=True)


OPEN_PROBE = textwrap.dedent(
    """
    import json, sys
    from diffract import Session
    s = Session(profile="local", path=sys.argv[1], readonly=True)
    opened = sorted(m for m in ("h5py", "scipy", "pandas") if m in sys.modules)
    uid = s.store.slices()[0].uid
    v = s.store.get((uid, "i"))
    w = s.store.weights(uid)
    print(json.dumps({"opened": opened, "i": v, "w": float(w.sum()),
                      "after": "h5py" in sys.modules}))
    """
)


def test_a_store_opens_without_h5py_and_imports_it_to_read_an_array(tmp_path):
    src = _small_store(tmp_path / "store")
    with open_backend("hdf5", src, readonly=True) as st:
        uid = st.slices()[0].uid
        w = float(st.weights(uid).sum())
    r = subprocess.run(
        [sys.executable, "-c", OPEN_PROBE, str(src)], capture_output=True, text=True, check=True
    )
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["opened"] == [], got
    assert got["i"] == 2**62 and got["w"] == pytest.approx(w, rel=0, abs=0)
    assert got["after"] is True


def _strip_manifests(path):
    """Make ``path`` look like a store written before manifests existed: no manifests, and
    no ``"manifests"`` entry in its marker."""
    for m in (path / "segments").glob("*.h5.json"):
        m.unlink()
    marker = path / "diffract-store.json"
    info = json.loads(marker.read_text())
    info.pop("manifests", None)
    marker.write_text(json.dumps(info))


def _seal_segment(seg, flip_at):
    """Flip one byte of the segment ``seg`` in place (its size unchanged)."""
    data = bytearray(seg.read_bytes())
    data[flip_at] ^= 0x01
    seg.write_bytes(bytes(data))


def test_a_deleted_manifest_is_refused_not_read_unchecked(tmp_path):
    """Issue 28 point 19: deleting a segment's manifest (then flipping a byte of the segment)
    used to turn its checksum off silently. A store whose marker says its segments have
    manifests (every store this version creates) refuses a segment without one, by name."""
    src = _small_store(tmp_path / "store")
    (src / "segments" / "000000000002.h5.json").unlink()
    for readonly in (True, False):
        with pytest.raises(
            StoreCorruptError, match=r"000000000002\.h5\.json: missing manifest of the segment"
        ):
            open_backend("hdf5", src, readonly=readonly)
    assert json.loads((src / "diffract-store.json").read_text()).get("manifests") == 1


def test_a_deleted_manifest_is_refused_in_a_store_marked_before_the_marker_said_so(tmp_path):
    """A store created before its marker recorded manifests: a segment without one after a
    segment with one is damage; the first writer to find every manifest marks the store,
    and from then on the first segment's manifest is required too."""
    src = _small_store(tmp_path / "store")
    marker = src / "diffract-store.json"
    info = json.loads(marker.read_text())
    info.pop("manifests", None)
    marker.write_text(json.dumps(info))
    (src / "segments" / "000000000002.h5.json").rename(tmp_path / "kept.json")
    with pytest.raises(StoreCorruptError, match=r"segment 000000000001 before it has one"):
        open_backend("hdf5", src, readonly=True)
    (tmp_path / "kept.json").rename(src / "segments" / "000000000002.h5.json")
    open_backend("hdf5", src).close()  # a writer finds every manifest: marks the store
    assert json.loads(marker.read_text()).get("manifests") == 1
    (src / "segments" / "000000000001.h5.json").unlink()
    _seal_segment(src / "segments" / "000000000001.h5", 2000)
    with pytest.raises(StoreCorruptError, match=r"000000000001\.h5\.json: missing manifest"):
        open_backend("hdf5", src, readonly=True)


def test_a_store_without_manifests_opens_and_a_compaction_covers_it(tmp_path):
    """Stores written before manifests are replayed through h5py; their first compaction
    writes a manifest that records the checksum of every older file it refers to."""
    src = _small_store(tmp_path / "store")
    with open_backend("hdf5", src, readonly=True) as st:
        expected = _snapshot(st)
    _strip_manifests(src)
    st = open_backend("hdf5", src)
    assert _snapshot(st) == expected
    st.compact()
    st.close()
    manifests = sorted(p.name for p in (src / "segments").glob("*.json"))
    assert manifests == ["000000000003-c.h5.json"]
    with open_backend("hdf5", src, readonly=True) as st:
        assert _snapshot(st) == expected
    # the weights stay in the old segment, now checked against the compaction's checksum
    seg = src / "segments" / "000000000001.h5"
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0x01
    seg.write_bytes(bytes(data))
    st = open_backend("hdf5", src, readonly=True)
    with pytest.raises(StoreCorruptError, match=r"000000000001\.h5: checksum mismatch"):
        st.weights(st.slices()[0].uid)


def test_a_manifest_left_without_its_segment_is_removed_by_the_next_writer(tmp_path):
    """A crash between the manifest's rename and the segment's leaves the manifest alone:
    the batch was not committed, and the next writer deletes it."""
    src = _small_store(tmp_path / "store")
    seg = src / "segments"
    (seg / "000000000003.h5.json").write_bytes((seg / "000000000002.h5.json").read_bytes())
    with open_backend("hdf5", src, readonly=True) as st:
        assert len(list(st.keys())) == 10
    open_backend("hdf5", src).close()
    assert not (seg / "000000000003.h5.json").exists()
    assert (seg / "000000000002.h5.json").exists()


def test_a_compaction_reads_back_the_same_through_h5py_alone(tmp_path):
    """A compaction's HDF5 file holds what its manifest says (slices as one dataset of
    layout 2): without the manifests, the store replays to the same content."""
    src = _small_store(tmp_path / "store")
    st = open_backend("hdf5", src)
    st.commit(Batch(fields={("@m", "total"): 3}))
    st.compact()
    expected = _snapshot(st)
    st.close()
    _strip_manifests(src)
    with open_backend("hdf5", src, readonly=True) as st:
        assert _snapshot(st) == expected
        assert st.get(("@m", "total")) == 3


def test_a_compaction_copies_stragglers_and_refers_to_batches_and_compactions(tmp_path):
    """Arrays of a segment with few live arrays are copied (the segment can go); a batch of
    many arrays, and arrays already in a compaction, are referenced where they are."""
    st = open_backend("hdf5", tmp_path / "store")
    many = {(f"u{i}", "esd"): np.arange(i + 1.0) for i in range(st.KEEP_ARRAYS)}
    st.commit(Batch(add_models={"m": {}}, fields=many))  # segment 1: a whole batch of arrays
    st.commit(Batch(fields={("v", "esd"): np.ones(3)}))  # segment 2: a straggler
    st.compact()  # 3-c
    st.commit(Batch(fields={("w", "esd"): np.zeros(2)}))  # segment 4
    st.compact()  # 5-c

    def homes(name):
        # the manifest's third line is its body (the second, its head: docs/concepts/segments.md)
        body = json.loads((tmp_path / "store" / "segments" / name).read_text().split("\n")[2])
        return {(o, f): file for o, f, file, _ in body["arrays"]}

    first = homes("000000000003-c.h5.json")
    assert first[("v", "esd")] == "" and first[("u0", "esd")] == "000000000001.h5"
    second = homes("000000000005-c.h5.json")
    assert second[("v", "esd")] == "000000000003-c.h5"  # stays in the first compaction
    assert second[("w", "esd")] == "" and second[("u1", "esd")] == "000000000001.h5"
    st.close()
    with open_backend("hdf5", tmp_path / "store", readonly=True) as st:
        assert st.get(("v", "esd")).tolist() == [1.0, 1.0, 1.0]
        assert st.get(("w", "esd")).tolist() == [0.0, 0.0]
        assert st.get(("u3", "esd")).tolist() == [0.0, 1.0, 2.0, 3.0]
