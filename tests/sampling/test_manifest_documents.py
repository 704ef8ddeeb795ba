"""Issue 28 points 11 and 16: a malformed sampling manifest document, or a segment manifest
whose model meta nests thousands deep, is a named error whose reason reaches the sidebar
(422), never a raw JSONDecodeError / KeyError / AttributeError / RecursionError or a 500."""

from __future__ import annotations

import hashlib
import json

import pytest
from tornado.httpclient import HTTPClientError

from diffract._errors import StoreCorruptError
from diffract.sampling import DOCUMENT_KIND, SamplingError, list_manifests, load_manifest
from diffract.store import Batch, open_backend

pytest_plugins = ("pytest_jupyter.jupyter_server",)

GOOD = {
    "format": "diffract.sampling.manifest/1",
    "label": "l",
    "teacher_id": None,
    "models": {},
    "manifest": {"mode": "m", "policy": {}, "eligible": [], "selected": [], "excluded": []},
}


def _doc(**changes):
    doc = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        if k.startswith("manifest_"):
            doc["manifest"][k[len("manifest_") :]] = v
        else:
            doc[k] = v
    return json.dumps(doc)


DEEP = 100_000
#: (document text, what the error names)
MALFORMED = {
    "not-json": ("{not json", "not JSON"),
    "a-list": ("[1, 2]", "a JSON list, not an object"),
    "no-manifest": (json.dumps({"format": GOOD["format"]}), "'manifest' entry is not an object"),
    "mode-missing": (_doc(manifest_mode=None), "'mode' must be a string"),
    "eligible-int": (_doc(manifest_eligible=3), "manifest 'eligible' must be a list"),
    "models-list": (_doc(models=[1, [2]]), "'models' must be an object"),
    "label-dict": (_doc(label={"a": 1}), "'label' must be a string or null"),
    "deep": ('{"a": ' + "[" * DEEP + "]" * DEEP + "}", "nested deeper than 64 levels"),
    "deep-label": (_doc(label=json.loads("[" * 500 + "]" * 500)), "nested deeper than 64"),
}


def _store_with(path, name, text):
    with open_backend("hdf5", path) as st:
        st.commit(Batch(documents={(DOCUMENT_KIND, name): text}))
    return path


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_document_is_a_named_error(tmp_path, name):
    text, reason = MALFORMED[name]
    path = _store_with(tmp_path / "s", name, text)
    with open_backend("hdf5", path, readonly=True) as st:
        with pytest.raises(SamplingError, match=rf"sampling manifest '{name}': .*{reason}") as info:
            list_manifests(st)
        assert isinstance(info.value, StoreCorruptError)
        with pytest.raises(SamplingError, match=rf"sampling manifest '{name}'"):
            load_manifest(st, name)


def test_a_well_formed_document_still_lists(tmp_path):
    path = _store_with(tmp_path / "s", "ok", _doc())
    with open_backend("hdf5", path, readonly=True) as st:
        (row,) = list_manifests(st)
    assert row["identity"] == "ok" and row["label"] == "l" and row["n_selected"] == 0


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"diffract": True}}}


async def _failure(jp_fetch, path):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("diffract", "api", "store", params={"path": path})
    return info.value.code, json.loads(info.value.response.body)["error"]


@pytest.mark.parametrize("name", ["not-json", "mode-missing", "deep"])
async def test_the_server_answers_422_with_the_reason(jp_fetch, jp_root_dir, name):
    text, reason = MALFORMED[name]
    _store_with(jp_root_dir / "s" / ".diffract", name, text)
    code, error = await _failure(jp_fetch, "s/.diffract")
    assert code == 422, error
    assert f"sampling manifest '{name}'" in error and reason in error, error


async def test_deeply_nested_model_meta_in_a_segment_manifest_is_422_with_the_reason(
    jp_fetch, jp_root_dir
):
    """Point 16: the meta of a model in a resealed segment manifest, nested 100000 deep."""
    path = jp_root_dir / "n" / ".diffract"
    with open_backend("hdf5", path) as st:
        st.commit(Batch(add_models={"m": {"a": 1}}))
    m = path / "segments" / "000000000001.h5.json"
    lines = m.read_text().split("\n")
    head, body = json.loads(lines[1]), json.loads(lines[2])
    head["models"]["m"] = '{"meta": ' + "[" * DEEP + "]" * DEEP + "}"
    h, b = json.dumps(head), json.dumps(body)

    def sha(t):
        return "sha256:" + hashlib.sha256(t.encode()).hexdigest()

    m.write_text(f"diffract-manifest 2 {sha(h)} {sha(b)}\n{h}\n{b}")
    with pytest.raises(StoreCorruptError, match="unreadable manifest: a JSON value nested too"):
        open_backend("hdf5", path, readonly=True)
    code, error = await _failure(jp_fetch, "n/.diffract")
    assert code == 422, error
    assert "000000000001.h5.json: unreadable manifest: a JSON value nested too deeply" in error
