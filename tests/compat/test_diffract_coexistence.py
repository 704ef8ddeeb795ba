"""Issue 14, point 7: a ``.diffract/`` folder that already holds a Diffract store (its
``sqlite/`` or ``hybrid/`` subfolders, log files) is not refused; our store lives beside it and
neither library's files are touched (DIFFRACT-API.md §7)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from diffract import Session
from diffract._errors import StoreCorruptError


def _diffract_store(root: Path) -> dict[str, str]:
    """The files Diffract's local and hybrid profiles leave, with real SQLite databases."""
    d = root / ".diffract"
    for sub in ("sqlite", "hybrid"):
        (d / sub / "sqlite_blobs").mkdir(parents=True)
        for name in ("sqlite_storage.db", "metadata_index.db"):
            con = sqlite3.connect(d / sub / name)
            con.execute("CREATE TABLE storage (k TEXT, v BLOB)")
            con.execute("INSERT INTO storage VALUES ('x', 'y')")
            con.commit()
            con.close()
    (d / "hybrid" / "hdf5_storage.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    (d / "sqlite.log").write_text("INFO diffract\n")
    (d / "hybrid.log.1").write_text("INFO diffract\n")
    return _digest(d)


def _digest(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
        and p.relative_to(d).parts[0] in ("sqlite", "hybrid", "sqlite.log", "hybrid.log.1")
    }


def _mlp():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_our_local_store_lives_beside_a_diffract_store(in_tmp, no_diffract_env):
    before = _diffract_store(in_tmp)
    with Session(profile="local") as s:
        s.models.add(_mlp(), model_id="m")
        s.compute.apply("frob_norm", progress=False)
    assert (in_tmp / ".diffract" / "diffract-store.json").exists()
    with Session(profile="local") as again:  # reopened: ours, with its values
        rows = again.results.export_metrics("frob_norm", export_format="list")
        assert [r["parameter_name"] for r in rows] == ["0.weight", "2.weight"]
    assert _digest(in_tmp / ".diffract") == before  # Diffract's files untouched


def test_a_diffract_config_file_points_beside_its_files(in_tmp, no_diffract_env):
    before = _diffract_store(in_tmp)
    (in_tmp / "sqlite.ini").write_text(
        "[storage]\nbackend = sqlite\n\n[storage.sqlite]\npath = .diffract/sqlite/sqlite_storage.db\n"
    )
    with Session(config_path="sqlite.ini") as s:
        s.models.add(_mlp(), model_id="m")
        where = Path(s.store.path)
    assert where == in_tmp / ".diffract.sqlite"  # our sqlite profile's folder, not Diffract's
    assert _digest(in_tmp / ".diffract") == before


def test_other_foreign_content_is_still_refused(in_tmp, no_diffract_env):
    _diffract_store(in_tmp)
    (in_tmp / ".diffract" / "notes.txt").write_text("mine")
    with pytest.raises(StoreCorruptError, match="foreign folder"):
        Session(profile="local")
