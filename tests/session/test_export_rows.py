"""Export rows and formats: list rows carry every column in order, parameter and cross fields
keep the reference rows, JSON writes non-finite array values as null, polars keeps 2-D fields."""

from __future__ import annotations

import json

import numpy as np

from _engine_kit import apply_quietly
from diffract.session.results import to_format


def test_list_rows_carry_every_column_in_order(two_models):
    s = two_models
    apply_quietly(s, "frob_norm", "model_stable_rank")
    rows = s.results.export_table("frob_norm", "model_stable_rank", export_format="list")
    cols = list(s.results.export_table("frob_norm", "model_stable_rank", export_format="pandas"))
    assert len(rows) == 4
    for r in rows:
        assert list(r) == cols
    model_rows = [r for r in rows if r["type"] == "model"]
    assert [r["frob_norm"] for r in model_rows] == [None, None]
    assert all(r["model_stable_rank"] is None for r in rows if r["type"] != "model")


def test_param_and_cross_fields_keep_the_reference_rows(two_models):
    s = two_models
    apply_quietly(s, "frob_norm", "delta_frob_norm", "model_stable_rank", reference="a")
    alone = s.results.export_table("frob_norm", reference="a", export_format="list")
    mixed = s.results.export_table(
        "frob_norm", "delta_frob_norm", "model_stable_rank", reference="a", export_format="list"
    )
    slice_rows = [r for r in mixed if r["type"] != "model"]
    assert [r["model_id"] for r in slice_rows] == [r["model_id"] for r in alone] == ["a", "b"]
    by_model = {r["model_id"]: r for r in slice_rows}
    assert by_model["a"]["delta_frob_norm"] is None
    assert by_model["a"]["frob_norm"] == alone[0]["frob_norm"]
    assert by_model["b"]["delta_frob_norm"] > 0
    assert all(r["reference"] == "a" for r in slice_rows)
    model_rows = [r for r in mixed if r["type"] == "model"]
    assert len(model_rows) == 2 and all(r["reference"] is None for r in model_rows)
    # cross fields alone: the reference model has no row
    cross = s.results.export_table("delta_frob_norm", reference="a", export_format="list")
    assert [r["model_id"] for r in cross] == ["b"]


def test_json_turns_non_finite_values_in_arrays_into_null(one_model):
    s = one_model
    apply_quietly(s, "arr_nan")
    out = json.loads(s.results.export_table("arr_nan", export_format="json"))
    assert [r["arr_nan"] for r in out] == [[1.0, None, None]] * 2
    text = to_format([{"x": np.float32("nan"), "y": np.array([[np.inf, 2.0]])}], ["x", "y"], "json")
    assert json.loads(text) == [{"x": None, "y": [[None, 2.0]]}]


def test_polars_keeps_the_shape_of_2d_fields(one_model):
    import polars as pl

    s = one_model
    apply_quietly(s, "two_d")
    df = s.results.export_table("two_d", export_format="polars")
    want = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert df["two_d"].to_list() == [want, want]
    assert json.loads(s.results.export_table("two_d", export_format="json"))[0]["two_d"] == want
    assert isinstance(df.schema["two_d"], pl.List)
