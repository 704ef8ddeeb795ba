"""A store opens from its manifests' heads; slices and values are replayed on first read
(issue 17 target 3; docs/concepts/segments.md "Opening").

What a session reads stays exact: the deferred replay gives what an in-memory store that ran
the same batches holds (adds, replacements, removals, erasures, model and cross owners), a
reader's snapshot survives a writer's compactions, a crafted manifest body (hashes that
match, entries that do not) is a named error on the first read, and manifests of version 1
still read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

import numpy as np
import pytest

from _store_helpers import make_slices
from diffract._errors import StoreCorruptError
from diffract.store import Batch, RamStore, open_backend


def _batches() -> list[Batch]:
    """A history with every kind of replay step: two models with weights and every kind of
    value, a model, a cross and a scoped owner, an erasure, a removal, a replacement with
    other slices, documents."""
    rng = np.random.default_rng(1)

    def model(mid, names):
        arrays = {n: rng.normal(size=(4, 3)).astype(np.float32) for n in names}
        sl = make_slices(mid, arrays)
        return sl, {s.uid: arrays[s.name] for s in sl}

    a, wa = model("a", ["l0.weight", "l1.weight"])
    b, wb = model("b", ["l0.weight", "l1.weight"])
    a2, wa2 = model("a", ["x.weight", "y.weight", "z.weight"])
    fields = {(s.uid, "f"): float(i) + 0.5 for i, s in enumerate(a + b)}
    fields |= {(s.uid, "esd"): rng.normal(size=3 + i) for i, s in enumerate(a + b)}
    fields |= {(s.uid, "n"): 10 + i for i, s in enumerate(a)}
    fields |= {("@a", "total"): 3, ("@b", "total"): 4, ("@a[k1]", "part"): "scoped"}
    fields |= {(f"{a[0].uid}@b", "dist"): 0.25, (f"{b[0].uid}@a", "dist"): 0.75}
    return [
        Batch(add_models={"a": {"added": 1}}, slices=a, weights=wa),
        Batch(add_models={"b": {"added": 2}}, slices=b, weights=wb),
        Batch(fields=fields, documents={("notes", "n1"): "first"}),
        Batch(erase=[(a[1].uid, "f"), ("@b", "total")]),
        Batch(remove_models=["b"]),  # drops b's values and the cross values naming b
        Batch(add_models={"a": {"added": 3}}, slices=a2, weights=wa2),  # replaces a
        Batch(fields={(a2[0].uid, "f"): 9.0, ("@a", "total"): 5, (a2[1].uid, "c"): 1 + 2j}),
        Batch(documents={("notes", "n1"): "second", ("notes", "n2"): "more"}),
        # values naming a model before it exists, then the model: adding it drops them
        Batch(fields={("@c", "total"): 1, (f"{a2[0].uid}@c", "dist"): 2.0, ("@a", "kept"): 1}),
        Batch(add_models={"c": {"added": 4}}),
    ]


def _snapshot(st) -> dict:
    """Everything ``st`` holds, comparable across backends."""
    out: dict = {"models": st.models(), "docs": st.documents("notes")}
    out["slices"] = [(s.model_id, s.name, s.uid, s.shape, s.index) for s in st.slices()]
    out["weights"] = {s.uid: st.weights(s.uid).tolist() for s in st.slices()}
    for k in sorted(st.keys()):
        v = st.get(k)
        out[repr(k)] = v.tolist() if isinstance(v, np.ndarray) else v
    return out


def _write(path, batches) -> None:
    with open_backend("hdf5", path) as st:
        for b in batches:
            st.commit(b)


def _expected(batches) -> dict:
    ram = RamStore()
    for b in batches:
        ram.commit(b)
    return _snapshot(ram)


def test_the_deferred_replay_holds_what_an_in_memory_store_holds(tmp_path):
    batches = _batches()
    _write(tmp_path / "s", batches)
    expected = _expected(batches)
    assert expected["models"] == {"a": {"added": 3}, "c": {"added": 4}}  # the history did it
    assert not any("@b" in k or "@c" in k or "dist" in k for k in expected)
    assert expected[repr(("@a", "kept"))] == 1
    with open_backend("hdf5", tmp_path / "s", readonly=True) as st:
        assert st._state.loaded is False  # the open read the heads only
        assert st.models() == expected["models"] and st.documents("notes") == expected["docs"]
        assert st._state.loaded is False  # models and documents need no body
        assert _snapshot(st) == expected
        assert st._state.loaded is True


def test_a_writer_opens_without_replaying_and_keeps_every_referenced_file(tmp_path):
    """After compactions the writer's garbage collection on open uses the newest
    compaction's list of the files it refers to: nothing is replayed, nothing live goes."""
    batches = _batches()
    path = tmp_path / "s"
    with open_backend("hdf5", path) as st:
        for b in batches[:3]:
            st.commit(b)
        st.compact()
        for b in batches[3:]:
            st.commit(b)
        st.compact()
        st.commit(Batch(documents={("notes", "n3"): "after"}))
    expected = _expected([*batches, Batch(documents={("notes", "n3"): "after"})])
    with open_backend("hdf5", path) as st:  # a writer: its open collects garbage
        assert st._state.loaded is False
    with open_backend("hdf5", path, readonly=True) as st:
        assert _snapshot(st) == expected


def test_a_readers_snapshot_survives_a_writers_compactions(tmp_path):
    """A reader's deferred bodies were read when it opened: two compactions later (which
    delete the records it listed) it still reads its snapshot, and a refresh shows the
    writer's state."""
    path = tmp_path / "s"
    sl = make_slices("m", {"w": np.ones((2, 2))})
    with open_backend("hdf5", path) as st:
        st.commit(Batch(add_models={"m": {}}, slices=sl))
        st.commit(Batch(fields={(sl[0].uid, "f"): 1.0}))
    reader = open_backend("hdf5", path, readonly=True)
    with open_backend("hdf5", path) as st:
        for i in range(2):
            st.commit(Batch(fields={(sl[0].uid, "f"): 2.0 + i}))
            st.compact()
        st.commit(Batch(fields={(sl[0].uid, "f"): 7.0}))
    listed = sorted(p.name for p in (path / "segments").glob("*.h5"))
    assert "000000000002.h5" not in listed  # the reader's record is gone
    assert reader.get((sl[0].uid, "f")) == 1.0
    reader.refresh()
    assert reader.get((sl[0].uid, "f")) == 7.0
    reader.close()


def _fds_on(file) -> set[str]:
    """This process's descriptors open on ``file`` (deleted or not), by number: the test
    follows the reader's own descriptor, not a count of all of them (another thread of the
    suite, or a lazily closed writer, may open or close one meanwhile)."""
    out = set()
    for fd in os.listdir("/dev/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            if os.readlink(f"/dev/fd/{fd}").removesuffix(" (deleted)") == str(file):
                out.add(fd)
    return out


def test_a_large_body_left_unread_at_the_open_survives_its_deletion(tmp_path):
    """A body beyond the open's first read stays unread until the first read of a value;
    the writer's compactions delete that manifest meanwhile, and the reader still gets the
    bytes of its snapshot (the file was held open), then the writer's state on refresh."""
    path = tmp_path / "s"
    values = {(f"u{i:05d}", "f"): i + 0.5 for i in range(12000)}
    with open_backend("hdf5", path) as st:
        st.commit(Batch(add_models={"m": {}}))
        st.commit(Batch(fields=values))
    manifest = path / "segments" / "000000000002.h5.json"
    assert manifest.stat().st_size > 2 * 64 * 1024  # more than the open reads of it
    before = _fds_on(manifest)
    reader = open_backend("hdf5", path, readonly=True)
    held = _fds_on(manifest) - before
    assert len(held) == 1  # the body's file, held open by the reader
    with open_backend("hdf5", path) as st:
        for i in range(2):
            st.commit(Batch(fields={("u00000", "f"): 10.0 + i}))
            st.compact()
    assert not manifest.exists()
    assert reader.get(("u11999", "f")) == 11999.5 and reader.get(("u00000", "f")) == 0.5
    assert not held & _fds_on(manifest)  # closed once read
    assert len(list(reader.keys())) == 12000
    reader.refresh()
    assert reader.get(("u00000", "f")) == 11.0
    reader.close()


def _rewrite(manifest, edit) -> None:
    """Rewrite a version 2 manifest with ``edit(head, body)`` applied and matching hashes,
    as a crafted file would (the format of docs/concepts/segments.md, built here)."""
    lines = manifest.read_text().split("\n")
    head, body = json.loads(lines[1]), json.loads(lines[2])
    edit(head, body)
    h, b = json.dumps(head), json.dumps(body)

    def sha(t):
        return "sha256:" + hashlib.sha256(t.encode()).hexdigest()

    manifest.write_text(f"diffract-manifest 2 {sha(h)} {sha(b)}\n{h}\n{b}")


def _crafted(tmp_path, edit):
    path = tmp_path / "s"
    _write(path, _batches()[:3])
    _rewrite(path / "segments" / "000000000003.h5.json", edit)
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda h, b: b["arrays"][0].__setitem__(2, "../../outside.h5"), "outside its folder"),
        (lambda h, b: b["values"]["f"][1].pop(), "000000000003.h5.json: unreadable manifest"),
        (lambda h, b: b["values"]["f"][1].__setitem__(0, "x1"), "unknown tagged value"),
        (lambda h, b: b.pop("arrays"), "000000000003.h5.json: unreadable manifest"),
    ],
)
def test_a_crafted_body_is_a_named_error_on_every_read(tmp_path, edit, message):
    path = _crafted(tmp_path, edit)
    with open_backend("hdf5", path, readonly=True) as st:
        assert sorted(st.models()) == ["a", "b"]  # the heads are fine
        for _ in range(2):  # the failing record stays pending: the error repeats
            with pytest.raises(StoreCorruptError, match=message):
                list(st.keys())


def test_a_crafted_head_is_refused_at_open(tmp_path):
    path = _crafted(tmp_path, lambda h, b: h.__setitem__("models", ["not", "a", "dict"]))
    with pytest.raises(StoreCorruptError, match=r"000000000003\.h5\.json: unreadable manifest"):
        open_backend("hdf5", path, readonly=True)


def test_a_changed_body_is_a_named_error_on_first_read(tmp_path):
    path = tmp_path / "s"
    _write(path, _batches()[:3])
    m = path / "segments" / "000000000003.h5.json"
    text = m.read_text()
    m.write_text(text.replace('"f0.5"', '"f0.6"'))  # the body's hash no longer matches
    with open_backend("hdf5", path, readonly=True) as st:
        assert sorted(st.models()) == ["a", "b"]
        with pytest.raises(StoreCorruptError, match=r"000000000003\.h5\.json: checksum mismatch"):
            st.slices()


def test_manifests_of_version_1_still_read(tmp_path):
    """Version 1: one JSON object under one hash, slices as JSON texts."""
    batches = _batches()
    path = tmp_path / "s"
    _write(path, batches)
    for m in sorted((path / "segments").glob("*.h5.json")):
        lines = m.read_text().split("\n")
        obj = {**json.loads(lines[1]), **json.loads(lines[2])}
        cols = obj["slices"]
        obj["slices"] = [
            json.dumps(dict(zip(cols, row, strict=True)), sort_keys=True)
            for row in zip(*cols.values(), strict=True)
        ]
        text = json.dumps(obj, sort_keys=True)
        m.write_text(
            f"diffract-manifest 1 sha256:{hashlib.sha256(text.encode()).hexdigest()}\n{text}"
        )
    with open_backend("hdf5", path, readonly=True) as st:
        assert _snapshot(st) == _expected(batches)
