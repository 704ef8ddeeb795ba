"""The segment log's two timing rules that crash and reader tests cannot see.

* Garbage is collected one compaction late: a reader whose listing is from before the newest
  compaction still finds every record it listed after the compaction before it.
* A segment is fsync-ed before it is renamed into place (a power cut after the rename must not
  leave a named segment whose data never reached the disk).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from diffract import Session
from diffract.store import open_path


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {f"layers.{i}.weight": rng.normal(size=(12, 8)).astype(np.float32) for i in range(3)}


def _files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "lock" not in p.name and not p.name.startswith(".tmp")
    }


@pytest.mark.parametrize("backend", ["hdf5", "zarr"])
def test_garbage_is_collected_one_compaction_late(tmp_path, backend):
    path = tmp_path / "store"
    s = Session(backend=backend, path=str(path))
    s.models.add(_weights(), model_id="m")
    s.compute.apply("frob_norm", progress=False)
    s.store.compact()  # C1
    s.compute.apply("weights_std", progress=False)
    s.store.compact()  # C2: supersedes C1 and what came before it
    after_c2 = _files(path)
    s.compute.apply("spectral_norm", progress=False)  # a record after C2
    listed = _files(path)  # what a reader lists now: C2 and the record after it are live
    new_since_c2 = listed - after_c2
    assert new_since_c2, "the apply after C2 wrote no new record file"
    reader = open_path(str(path), readonly=True)
    expected = {k: reader.get(k) for k in reader.keys()}

    s.store.compact()  # C3
    remaining = _files(path)
    # one compaction late: what C3 supersedes (C2 and the record after it) stays until C4
    assert new_since_c2 <= remaining, sorted(new_since_c2 - remaining)
    # ... while what C2 superseded is gone now
    assert not (after_c2 - listed) and (listed - remaining), "C3 collected no garbage"
    for key, value in expected.items():
        np.testing.assert_array_equal(np.asarray(reader.get(key)), np.asarray(value))
    reader.close()
    s.close()


def test_hdf5_segments_are_fsynced_before_the_rename(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = f"fd:{fd}"
        events.append(("fsync", os.path.basename(target)))
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(("replace", os.path.basename(os.fspath(src))))
        real_replace(src, dst)

    s = Session(backend="hdf5", path=str(tmp_path / "store"))
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    s.models.add(_weights(), model_id="m")
    s.compute.apply("frob_norm", progress=False)
    monkeypatch.undo()
    s.close()

    renamed = [i for i, (kind, name) in enumerate(events) if kind == "replace" and ".tmp-" in name]
    assert renamed, f"no segment was renamed into place: {events}"
    for i in renamed:
        name = events[i][1]
        assert ("fsync", name) in events[:i], f"{name} renamed before it was fsync-ed: {events}"
