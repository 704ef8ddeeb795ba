"""Every figure kind reads on JupyterLab's light and dark themes alike: a transparent
background and the neutral grey text of ``NEUTRAL_LAYOUT`` (Plotly's default, #444, is
near-invisible on a dark page: the ESD grid of the report and panels was, at 1.9:1)."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session
from diffract.viz import NEUTRAL_LAYOUT, registry

FIELDS = ("frob_norm", "stable_rank", "pl_alpha", "pl_alpha_sigma", "esd", "pl_esd_xmin")


@pytest.fixture(scope="module")
def session():
    s = Session("ram")
    rng = np.random.default_rng(3)
    base = {f"layers.{i}.weight": rng.normal(size=(48, 32)) for i in range(3)}
    for step in (0, 10):
        w = {k: v + 0.05 * step * rng.normal(size=v.shape) for k, v in base.items()}
        s.models.add(w, f"r-{step}", meta={"track": {"run": "r", "step": step}})
    s.compute.apply(*FIELDS, progress=False)
    yield s
    s.close()


def _params(session, kind: registry.FigureKind) -> tuple[tuple[str, ...] | None, dict]:
    needs = kind.needs()
    fields = {0: None, 1: ("pl_alpha",), 2: ("frob_norm", "stable_rank")}[needs["fields"]]
    params: dict = {}
    if needs["slice"]:
        params["slice"] = session.models.slices()[0].uid
    if needs["models"] == "two":
        params["models"] = ["r-0", "r-10"]
    return fields, params


@pytest.mark.parametrize("name", list(registry.KINDS))
def test_every_kind_reads_on_light_and_dark(session, name):
    fields, params = _params(session, registry.KINDS[name])
    spec = registry.build(session, name, fields, **params)
    layout = spec["layout"]
    assert layout["font"]["color"] == NEUTRAL_LAYOUT["font"]["color"], name
    assert layout["paper_bgcolor"] == layout["plot_bgcolor"] == "rgba(0,0,0,0)", name
    for annotation in layout.get("annotations", []):  # subplot titles: the layout's colour
        assert "color" not in annotation.get("font", {}), (name, annotation)
