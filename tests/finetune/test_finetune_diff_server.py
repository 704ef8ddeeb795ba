"""The ``diff`` kind through the server's figure route (``?kind=diff&model=a&model=b``)."""

from __future__ import annotations

import json

import pytest

from _ui_helpers import make_store

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"diffract": True}}}


async def test_diff_figure_route(jp_fetch, jp_root_dir):
    from diffract import Session
    from diffract.finetune import diff_stored

    make_store(jp_root_dir / ".diffract", models=("m1", "m2"), fields=())
    params = [("kind", "diff"), ("store", ".diffract"), ("model", "m1"), ("model", "m2")]
    r = await jp_fetch("diffract", "api", "figure", params=params)
    spec = json.loads(r.body)
    spec = spec.get("figure", spec)
    bars = next(t for t in spec["data"] if t.get("name") == "relative change")
    with Session(path=jp_root_dir / ".diffract", readonly=True) as s:
        res = diff_stored(s, "m1", "m2")
    assert bars["x"] == [row["name"] for row in res.rows]
    assert bars["y"] == pytest.approx([row["rel_change"] for row in res.rows])
