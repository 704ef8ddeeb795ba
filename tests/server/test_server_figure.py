"""The figure route ``/diffract/api/figure?kind=...``: Plotly specs built in Python from a store
under the server root (the sidebar renders them), with the other routes' auth and path rules
and clean 4xx replies (pytest-jupyter's jp_fetch)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tornado.httpclient import HTTPClientError

from _ui_helpers import make_store

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"diffract": True}}}


@pytest.fixture
def store(jp_root_dir):
    return make_store(
        jp_root_dir / ".diffract",
        models=("m1", "m2"),
        fields=("frob_norm", "esd", "pl_alpha", "pl_esd_xmin"),
    )


async def figure(jp_fetch, **params):
    r = await jp_fetch("diffract", "api", "figure", params=params)
    return json.loads(r.body)


async def failure(jp_fetch, headers=None, **params):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("diffract", "api", "figure", params=params, headers=headers)
    body = info.value.response.body if info.value.response is not None else b"{}"
    return info.value.code, json.loads(body or b"{}")


def stored(store, field):
    """(model, name, uid, value) of every slice holding ``field``, read with the public API."""
    from diffract import Session

    with Session(path=store, readonly=True) as s:
        uids = {(x.model_id, x.name): x.uid for x in s.models.slices()}
        rows = s.results.export_table(field, export_format="list")
        return [
            (r["model_id"], r["name"], uids[(r["model_id"], r["name"])], r[field])
            for r in rows
            if r[field] is not None
        ]


async def test_layers_figure_is_the_stored_field_with_uids(jp_fetch, store):
    from _ui_helpers import ts_interfaces  # the wire contract, as js/shared/wire.ts says

    reply = await figure(jp_fetch, kind="layers", store=".diffract", field="frob_norm")
    assert reply["kind"] == "layers" and reply["path"] == ".diffract"
    assert set(reply) == ts_interfaces()["FigureReply"]
    fig = reply["figure"]
    assert set(fig) == ts_interfaces()["FigureSpec"] == {"data", "layout"}
    assert [t["name"] for t in fig["data"]] == ["m1", "m2"]
    want = stored(store, "frob_norm")
    for t in fig["data"]:
        rows = [w for w in want if w[0] == t["name"]]
        assert t["y"] == pytest.approx([w[3] for w in rows])
        # each point carries its slice: model, name, type, value, then the uid
        assert [c[1] for c in t["customdata"]] == [w[1] for w in rows]
        assert [c[-1] for c in t["customdata"]] == [w[2] for w in rows]
    one = await figure(jp_fetch, kind="layers", store=".diffract", field="frob_norm", model="m2")
    assert [t["name"] for t in one["figure"]["data"]] == ["m2"]


async def test_esd_figure_histogram_matches_numpy(jp_fetch, store):
    from diffract import Session

    with Session(path=store, readonly=True) as s:
        sl = next(x for x in s.models.slices() if x.model_id == "m1" and x.name.endswith("weight"))
        evals = np.asarray(s.results.get("esd", sl.uid), dtype=float)
        alpha = s.results.get("pl_alpha", sl.uid)
    fig = (await figure(jp_fetch, kind="esd", store=".diffract", uid=sl.uid))["figure"]
    hist = fig["data"][0]
    assert hist["name"] == "ESD"
    # the reference: numpy's histogram over 60 log-spaced bins from the smallest to the largest
    ev = evals[np.isfinite(evals) & (evals > 0)]
    edges = np.logspace(np.log10(ev.min()), np.log10(ev.max()), 61)
    edges[0], edges[-1] = ev.min(), ev.max()
    counts, _ = np.histogram(ev, bins=edges)
    density = counts / (ev.size * np.diff(edges))
    assert hist["y"] == pytest.approx(density[counts > 0].tolist(), rel=1e-9)
    assert hist["x"] == pytest.approx(np.sqrt(edges[:-1] * edges[1:])[counts > 0].tolist())
    assert fig["layout"]["xaxis"]["type"] == "log"
    metas = [t.get("meta") for t in fig["data"]]
    assert "xmin" in metas  # the esd kind is the panel's: fit and xmin line drawn in
    assert f"α={alpha:.3g}" in fig["layout"]["title"]["text"]


async def test_figure_route_refuses_bad_requests_cleanly(jp_fetch, store):
    code, body = await failure(jp_fetch, kind="pie", store=".diffract", field="frob_norm")
    assert code == 400 and "pie" in body["error"] and "layers" in body["error"]
    code, body = await failure(jp_fetch, store=".diffract", field="frob_norm")
    assert code == 400 and "kind" in body["error"]
    code, body = await failure(jp_fetch, kind="layers", field="frob_norm")
    assert code == 400 and "store" in body["error"]
    code, body = await failure(jp_fetch, kind="layers", store=".diffract")
    assert code == 400 and "field" in body["error"]
    code, body = await failure(jp_fetch, kind="layers", store=".diffract", field="no_such_field")
    assert code == 400 and "no_such_field" in body["error"]
    code, body = await failure(jp_fetch, kind="esd", store=".diffract")
    assert code == 400 and "slice" in body["error"]
    code, body = await failure(jp_fetch, kind="esd", store=".diffract", uid="nope")
    assert code == 404 and "nope" in body["error"]
    code, body = await failure(jp_fetch, kind="layers", store="../x", field="frob_norm")
    assert code == 403
    code, body = await failure(jp_fetch, kind="layers", store="notes", field="frob_norm")
    assert code == 404 and body["status"] == 404
    code, _ = await failure(
        jp_fetch, headers={"Authorization": ""}, kind="layers", store=".diffract", field="x"
    )
    assert code == 403
    for _, body in [await failure(jp_fetch, kind="esd", store=".diffract", uid="nope")]:
        assert "Error" not in body["error"] and str(store) not in body["error"]


async def test_diagnosis_figure_through_the_route(jp_fetch, jp_root_dir):
    from diffract import Session
    from diffract.viz import diagnosis_fields

    rng = np.random.default_rng(2)
    with Session(path=jp_root_dir / "diag") as s:
        s.models.add({"a.weight": rng.normal(size=(400, 200))}, model_id="g")
        s.compute.apply(*diagnosis_fields(traps=False), progress=False)
    body = await figure(jp_fetch, kind="diagnosis", store="diag")
    (trace,) = body["figure"]["data"]
    assert trace["type"] == "heatmap" and trace["y"] == ["a.weight"]
    z = dict(zip(trace["x"], trace["z"][0], strict=True))
    assert z["under-trained"] == 1 and z["over-trained"] == 0  # a random matrix
    assert z["outlier"] == 0 and z["trap"] is None  # one layer: no outlier; traps not computed
