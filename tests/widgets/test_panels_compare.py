"""``FieldPanel(kind="compare")`` and ``session.viz.compare``: model b against model a per slice
(matched by name), as a difference or a ratio; values checked against numpy's Frobenius norms
of the weights themselves, and the errors for a missing model or no common slice."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import InvalidArgumentError, Session, UnknownModelError
from diffract.widgets import FieldPanel


def _weights(seed: int, names: list[str]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=(24, 16)).astype(np.float32) for n in names}


NAMES = ["enc.0.weight", "enc.1.weight", "enc.2.weight"]


@pytest.fixture
def session():
    s = Session("ram")
    base = _weights(0, NAMES)
    # "tuned" has enc.1 and enc.2 scaled, no enc.0, and an extra head
    tuned = {"enc.1.weight": base["enc.1.weight"] * 2.0, "enc.2.weight": base["enc.2.weight"] * 0.5}
    tuned["head.weight"] = _weights(1, ["head.weight"])["head.weight"]
    s.models.add(base, "base")
    s.models.add(tuned, "tuned")
    s.models.add(_weights(2, ["other.weight"]), "other")
    s.compute.apply("frob_norm", progress=False)
    s.weights = {"base": base, "tuned": tuned}
    yield s
    s.close()


def _norm(w: np.ndarray) -> float:
    return float(np.linalg.norm(w.astype(np.float64)))


@pytest.mark.parametrize("mode", ["difference", "ratio"])
def test_compare_values_per_common_slice(session, mode):
    p = FieldPanel(
        session, "frob_norm", kind="compare", models=["base", "tuned"], mode=mode, live=False
    )
    (trace,) = p.figure.data
    base, tuned = session.weights["base"], session.weights["tuned"]
    want = []
    for n in ("enc.1.weight", "enc.2.weight"):  # common names, base's depth order
        a, b = _norm(base[n]), _norm(tuned[n])
        want.append(b - a if mode == "difference" else b / a)
    np.testing.assert_allclose(trace.y, want, rtol=1e-5)
    if mode == "ratio":  # the weights were scaled by 2 and 0.5 exactly
        np.testing.assert_allclose(trace.y, [2.0, 0.5], rtol=1e-6)
    assert list(trace.x) == [0, 1]  # positions among the common slices (enc.1, enc.2)
    assert [c[0] for c in trace.customdata] == ["enc.1.weight", "enc.2.weight"]
    baseline = p.figure.layout.shapes[0]
    assert baseline.y0 == baseline.y1 == (0.0 if mode == "difference" else 1.0)
    assert "tuned" in p.status.value and "base" in p.status.value


def test_compare_matches_the_exported_table(session):
    fig = session.viz.compare("frob_norm", models=["base", "tuned"])
    rows = session.results.export_table("frob_norm", export_format="list")
    v = {(r["model_id"], r["name"]): r["frob_norm"] for r in rows}
    assert list(fig.data[0].y) == [
        v[("tuned", n)] - v[("base", n)] for n in ("enc.1.weight", "enc.2.weight")
    ]


def test_compare_updates_when_a_value_lands(session):
    session.filter(model_ids="tuned", param_names="enc.2.weight").compute.erase("frob_norm")
    p = FieldPanel(session, "frob_norm", kind="compare", models=["base", "tuned"], live=False)
    assert list(p.figure.data[0].x) == [0]
    session.compute.apply("frob_norm", progress=False)
    assert p.refresh() is True
    assert list(p.figure.data[0].x) == [0, 1]


def test_compare_defaults_to_the_scopes_two_models(session):
    scope = session.filter(model_ids=["base", "tuned"])
    p = FieldPanel(scope, "frob_norm", kind="compare", live=False)
    assert p.models == ["base", "tuned"] and len(p.figure.data[0].y) == 2


def test_compare_errors(session):
    with pytest.raises(UnknownModelError, match="no model 'nope'"):
        FieldPanel(session, "frob_norm", kind="compare", models=["base", "nope"])
    with pytest.raises(InvalidArgumentError, match="share no slice name"):
        FieldPanel(session, "frob_norm", kind="compare", models=["base", "other"])
    with pytest.raises(InvalidArgumentError, match="two different models"):
        FieldPanel(session, "frob_norm", kind="compare", models=["base"])
    with pytest.raises(InvalidArgumentError, match=r"models=\[a, b\].*3 models"):
        FieldPanel(session, "frob_norm", kind="compare")
    with pytest.raises(ValueError, match="mode must be one of"):
        FieldPanel(session, "frob_norm", kind="compare", models=["base", "tuned"], mode="log")
    with pytest.raises(InvalidArgumentError, match="mode must be one of"):
        session.viz.compare("frob_norm", models=["base", "tuned"], mode="sum")
