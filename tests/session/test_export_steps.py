"""Issue 19, point 2: exports order tracked checkpoints by their step (``meta["track"]``),
not by the id's string; models without a step keep the seed's order (ids as strings)."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session

TRACKED = {"ckpt-9": 9, "ckpt-100": 100, "ckpt-10": 10}


def _weights(scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(int(scale))
    return {"l0.weight": scale * rng.standard_normal((6, 4)), "l1.weight": rng.random((3, 6))}


@pytest.fixture
def session():
    s = Session(profile="ram")
    for mid in ("zeta", "alpha"):  # plain ids, added out of order
        s.models.add(_weights(1.0), model_id=mid)
    for mid, step in TRACKED.items():  # by hand, as the tracker stores them
        s.models.add(_weights(step), model_id=mid, meta={"track": {"run": "r", "step": step}})
    s.compute.apply("frob_norm", "model_stable_rank", progress=False)
    return s


STEP_ORDER = ["ckpt-9", "ckpt-10", "ckpt-100", "alpha", "zeta"]


def _models_in_order(model_ids: list[str]) -> list[str]:
    return list(dict.fromkeys(model_ids))


def test_string_order_is_not_the_step_order():
    # the ordering below could only come from the steps
    assert sorted(TRACKED) == ["ckpt-10", "ckpt-100", "ckpt-9"]


def test_export_table_orders_checkpoints_by_step(session):
    rows = session.results.export_table("frob_norm", export_format="list")
    assert _models_in_order([r["model_id"] for r in rows]) == STEP_ORDER
    # each model's slices stay in depth order
    assert [r["name"] for r in rows if r["model_id"] == "ckpt-10"] == ["l0.weight", "l1.weight"]
    by_id = {(r["model_id"], r["name"]): r["frob_norm"] for r in rows}
    assert by_id[("ckpt-100", "l0.weight")] == pytest.approx(
        np.linalg.norm(_weights(100)["l0.weight"])
    )
    models = session.results.export_table("model_stable_rank", export_format="list")
    assert [r["model_id"] for r in models] == STEP_ORDER


def test_export_metrics_orders_checkpoints_by_step(session):
    d = session.results.export_metrics("frob_norm")
    assert _models_in_order([e["metadata"]["model_id"] for e in d.values()]) == STEP_ORDER
    rows = session.results.export_metrics("frob_norm", export_format="list")
    assert _models_in_order([r["model_id"] for r in rows]) == STEP_ORDER
    df = session.results.export_metrics("frob_norm", export_format="pandas")
    assert _models_in_order(list(df["model_id"])) == STEP_ORDER


def test_plain_ids_keep_the_seeds_order():
    s = Session(profile="ram")
    for mid in ("run-2", "run-10", "b"):
        s.models.add(_weights(2.0), model_id=mid)
    s.compute.apply("frob_norm", progress=False)
    rows = s.results.export_table("frob_norm", export_format="list")
    # lexicographic, as the seed documents ("run-10" sorts before "run-2")
    assert _models_in_order([r["model_id"] for r in rows]) == ["b", "run-10", "run-2"]
    d = s.results.export_metrics("frob_norm")
    assert [e["metadata"]["model_id"] for e in d.values()] == [
        sl.model_id for sl in s.models.slices()
    ]
