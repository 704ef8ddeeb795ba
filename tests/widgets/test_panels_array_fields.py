"""A live line, bar or heatmap panel of an array field says it needs a scalar field."""

from __future__ import annotations

import numpy as np

from diffract import Session


def _mlp(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "layers.0.weight": rng.normal(size=(12, 8)).astype(np.float32),
        "layers.0.bias": rng.normal(size=12).astype(np.float32),
        "layers.1.weight": rng.normal(size=(6, 12)).astype(np.float32),
        "layers.1.bias": rng.normal(size=6).astype(np.float32),
    }


def test_line_panel_of_an_array_field_says_it_needs_a_scalar_field():
    from diffract.widgets import FieldPanel

    s = Session(profile="ram")
    s.models.add(_mlp(), model_id="m1")
    before = FieldPanel(s, "esd", live=False)
    assert "nothing stored yet" in before.status.value
    s.compute.apply("esd", progress=False)
    for kind in ("line", "bar", "heatmap"):
        p = FieldPanel(s, "esd", kind=kind, live=False)
        status = p.status.value
        assert "nothing stored yet" not in status
        assert f"a {kind} panel needs a scalar field" in status and "kind='esd'" in status
        assert "array per slice" in p.snapshot_html()
    before.refresh()
    assert "array per slice" in before.status.value
