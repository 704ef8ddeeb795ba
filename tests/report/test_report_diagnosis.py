"""The HTML report opens with the diagnosis; the ``diagnosis`` figure kind through the
registry (as panels and the server route get it)."""

from __future__ import annotations

import numpy as np

from diffract import Session
from diffract.cli import main
from diffract.viz import diagnosis_fields, registry


def _weights():
    rng = np.random.default_rng(5)
    lam = (1.0 - rng.uniform(size=60)) ** (-1.0 / 0.5)
    u, _ = np.linalg.qr(rng.normal(size=(200, 60)))
    v, _ = np.linalg.qr(rng.normal(size=(60, 60)))
    return {
        "heavy.weight": ((u * np.sqrt(lam)) @ v.T).astype(np.float32),
        "gauss.weight": rng.normal(size=(200, 60)).astype(np.float32),
    }


def test_report_starts_with_the_diagnosis(in_tmp):
    np.savez("m.npz", **_weights())
    assert main(["report", "m.npz", "-o", "r.html"]) == 0
    text = (in_tmp / "r.html").read_text()
    assert text.index("<h2>Diagnosis</h2>") < text.index("<h2>Per-layer table")
    assert "<b>over-trained</b> (alpha " in text
    assert 'id="figure-diagnosis"' in text


def test_diagnosis_kind_marks_each_rule():
    session = Session(profile="ram")
    session.models.add(_weights(), model_id="m")
    assert registry.build(session, "diagnosis")["data"] == []  # nothing stored yet
    session.compute.apply(*diagnosis_fields(traps=False))
    spec = registry.build(session, "diagnosis")
    (trace,) = spec["data"]
    assert trace["x"][:2] == ["over-trained", "under-trained"]
    z = dict(zip(trace["y"], trace["z"], strict=True))
    assert z["heavy.weight"][0] == 1 and z["gauss.weight"][0] == 0
    assert z["gauss.weight"][1] == 1
    assert z["heavy.weight"][trace["x"].index("trap")] is None  # not computed
    text = dict(zip(trace["y"], trace["text"], strict=True))
    assert text["heavy.weight"][0].startswith("alpha ")
    # layer names are drawn whole: the left margin grows to them (they were cut at 60 px)
    assert spec["layout"]["yaxis"]["automargin"] is True


def test_diagnosis_panel_and_errorbars_panel():
    from diffract.widgets import FieldPanel

    session = Session(profile="ram")
    session.models.add(_weights(), model_id="m")
    session.compute.apply(*diagnosis_fields(traps=False), "pl_alpha_sigma")
    panel = FieldPanel(session, kind="diagnosis")
    assert panel.figure.data[0].type == "heatmap"
    assert set(panel.figure.data[0].y) == {"heavy.weight", "gauss.weight"}
    bars = FieldPanel(session, "pl_alpha", kind="alpha_errorbars")
    sig = session.results.export_table("pl_alpha_sigma", export_format="list")
    assert sorted(bars.figure.data[0].error_y.array) == sorted(r["pl_alpha_sigma"] for r in sig)


def test_alpha_line_panels_get_error_bars():
    session = Session(profile="ram")
    session.models.add(_weights(), model_id="m")
    session.compute.apply("pl_alpha", "frob_norm")  # the fit stores pl_alpha_sigma with it
    (line,) = registry.build(session, "line", "pl_alpha")["data"]
    tails = {
        r["uid"]: r["pl_num_spikes"]
        for r in session.results.export_table("pl_num_spikes", export_format="list")
    }
    # the bars are the standard error (alpha - 1) / sqrt(n_tail) (Clauset et al. 2009, eq. 3.2)
    expected = [
        (y - 1) / np.sqrt(tails[c[4]]) for y, c in zip(line["y"], line["customdata"], strict=True)
    ]
    np.testing.assert_allclose(line["error_y"]["array"], expected, rtol=1e-12)
    (frob,) = registry.build(session, "line", "frob_norm")["data"]
    assert "error_y" not in frob  # no frob_norm_sigma field
