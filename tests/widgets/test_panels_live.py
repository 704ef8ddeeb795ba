"""FieldPanel follows a store that a writer changes, with no user call (issue 29, points 1-3):
an evolution panel built as docs/tracking.md shows gains a column per committed step of a
tracker; its empty state says it waits for the tracker; its static copy (Plotly JSON and HTML,
shown where the widget's model is gone) is updated to the final state, in the executed
``.ipynb`` and in ``nbconvert --to html``; and its synced traits mirror the TS state."""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

from diffract import Session
from diffract.widgets import FieldPanel

LAYERS = [f"l{i}.weight" for i in range(3)]


def _weights(step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    return {n: rng.normal(size=(30, 12)) * (1 + step) for n in LAYERS}


def _wait(cond, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.mark.parametrize("where", ["disk", "ram"])
def test_evolution_panel_follows_a_tracker_with_no_refresh_call(tmp_path, where):
    s = Session(path=tmp_path / "store") if where == "disk" else Session("ram")
    tracker = s.track("demo", ["frob_norm"], policy="block", block_timeout=120)
    # built as docs/tracking.md shows, before the first step: no refresh(), no callback
    panel = FieldPanel(tracker.scope, "frob_norm", kind="evolution", run="demo", poll=0.1)
    status = panel.status.value
    assert panel.n_values() == 0 and "session.compute.apply" not in status
    assert "waiting for the tracker's first committed step of run demo" in status
    seen = []
    for step in range(4):
        tracker.step(_weights(step), step=step)
        assert tracker.flush(30)
        assert _wait(lambda n=step + 1: panel.n_values() == 3 * n), (step, panel.n_values())
        seen.append(list(panel.figure.layout.xaxis.ticktext))
    tracker.close()
    assert seen == [[str(k) for k in range(n)] for n in range(1, 5)]  # one column per step
    hm = panel.figure.data[0]
    assert list(hm.y) == LAYERS
    # the values are the stored ones, and the Frobenius norms of the weights (numpy)
    for i, name in enumerate(LAYERS):
        for j in range(4):
            want = np.linalg.norm(_weights(j)[name])
            assert hm.z[i][j] == pytest.approx(want, rel=1e-6)
    assert "waiting" not in panel.status.value and "12 values" in panel.status.value
    # the synced state (what a view draws) holds the same heatmap
    assert json.loads(panel.figure_json)["data"][0]["z"] == [list(r) for r in hm.z]
    panel.stop()
    s.close()


def test_follow_costs_nothing_when_the_store_is_still(tmp_path):
    with Session(path=tmp_path / "store") as s:
        s.models.add(_weights(0), "m")
        s.compute.apply("frob_norm", progress=False)
        panel = FieldPanel(s, "frob_norm", poll=0.05)
        time.sleep(0.5)
        assert panel.updates == panel.rebuilds == 0  # looked ~10 times, rebuilt nothing
        assert panel.check_store() is False
        panel.stop()


def test_panel_without_follow_says_how_to_refresh():
    with Session("ram") as s:
        s.models.add(_weights(0), "m")
        p = FieldPanel(s, "frob_norm", poll=None)
        assert "session.compute.apply('frob_norm')" in p.status.value
        assert "panel.refresh()" in p.status.value


def test_panel_traits_mirror_the_ts_state():
    from _ui_helpers import ts_interfaces

    synced = {n for n, t in FieldPanel.class_traits(sync=True).items() if not n.startswith("_")}
    synced -= {"layout", "tabbable", "tooltip", "comm", "keys", "log"}
    assert synced == ts_interfaces()["PanelState"]


NOTEBOOK = [
    "import numpy as np\nfrom diffract import Session\nfrom diffract.widgets import FieldPanel\n"
    "s = Session(path='store')\n"
    "def w(step):\n    rng = np.random.default_rng(step)\n"
    "    return {f'l{i}.weight': rng.normal(size=(30, 12)) * (1 + step) for i in range(3)}",
    "tracker = s.track('demo', ['frob_norm'], policy='block', block_timeout=120)\n"
    "panel = FieldPanel(tracker.scope, 'frob_norm', kind='evolution', run='demo')\npanel",
    "for step in range(4):\n    tracker.step(w(step), step=step)\nprint(tracker.close())",
    "import time\ntime.sleep(1.5)\nprint(panel.n_values())",
]


def _figures_in_html(text: str) -> list[dict]:
    return [
        json.loads(m.replace("<\\/", "</")) for m in re.findall(r"var fig=(\{.*?\});var n=0", text)
    ]


def test_static_copy_is_the_final_figure_in_ipynb_and_nbconvert_html(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in NOTEBOOK]
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    assert nb.cells[3].outputs[0]["text"].strip() == "12"  # the kernel's panel: 4 steps x 3
    with Session(path=tmp_path / "store", readonly=True) as s:
        rows = s.results.export_table("frob_norm", export_format="list")
        stored = {
            (s.models.info(r["model_id"])["meta"]["track"]["step"], r["name"]): r["frob_norm"]
            for r in rows
        }
    want = [[stored[(step, name)] for step in range(4)] for name in LAYERS]
    assert len(stored) == 12
    # the .ipynb: the widget's output, then its static copy updated to the final state
    outs = nb.cells[1].outputs
    assert "application/vnd.jupyter.widget-view+json" in outs[0]["data"]
    static = outs[1]["data"]
    fig = static["application/vnd.plotly.v1+json"]
    assert fig["data"][0]["type"] == "heatmap" and fig["data"][0]["z"] == want
    assert fig["layout"]["xaxis"]["ticktext"] == ["0", "1", "2", "3"]
    assert (
        "waiting for" not in static["text/html"] and "nothing stored yet" not in static["text/html"]
    )
    assert "12 values" in static["text/html"]
    # nbconvert's HTML: the same figure, drawn by the plotly.js it carries (offline)
    html, _ = HTMLExporter().from_notebook_node(nb)
    (drawn,) = _figures_in_html(html)
    assert drawn["data"][0]["z"] == want
    # plotly.js inline, not fetched from a CDN
    assert "window.Plotly" in html and not re.search(r"<script[^>]+src=[^>]*plotly", html)
    shown = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", html, flags=re.S)  # the page's text
    assert "12 values" in shown and "frob_norm · run demo" in shown
    for stale in ("waiting for", "nothing stored yet", "model not found", "running"):
        assert stale not in shown, stale


def test_views_get_plotly_once_from_the_kernel(monkeypatch):
    """A panel's module is small; its views ask the kernel for Plotly (one message per page)."""
    from diffract.widgets import STATIC

    with Session("ram") as s:
        s.models.add(_weights(0), "m")
        p = FieldPanel(s, "frob_norm", poll=None)
        assert len(p._esm) < 100_000  # the panel's module, without Plotly
        sent = []
        monkeypatch.setattr(p, "send", lambda content, buffers=None: sent.append(content))
        p._on_view_msg(p, {"type": "plotly-js"}, [])
        p._on_view_msg(p, {"type": "something else"}, [])
        (reply,) = sent
        assert reply["type"] == "plotly-js"
        assert reply["source"] == (STATIC / "plotly.js").read_text(encoding="utf-8")
        assert 'name:"heatmap"' in reply["source"]  # the cartesian bundle: heatmaps too
