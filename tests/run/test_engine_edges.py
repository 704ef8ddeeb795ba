"""Edge cases of the scheduler and the result readers: kernels returning values the store
cannot hold, cross-model fields requested together or with failed inputs, export rows and
formats, missing references, and erase invalidating what was computed from a field."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from diffract import KernelFailureWarning, NothingToCompareWarning, Session
from diffract._errors import (
    FieldNotComputedError,
    InvalidArgumentError,
    UnknownModelError,
)
from diffract.kernels import default_registry, make_kernel
from diffract.session.export import to_format

# --- kernels (module level: a process pool imports them by name) ---------------------------


def bad_none(weights):
    """None on the 4-row slice, a number elsewhere."""
    return None if weights.shape[0] == 4 else 1.0


def bad_extra_keys(weights):
    return {"bad_extra_keys": 1.0, "junk": 2} if weights.shape[0] == 4 else 1.0


def bad_object(weights):
    return object() if weights.shape[0] == 4 else 1.0


def bad_str_array(weights):
    return np.array(["x", "y"]) if weights.shape[0] == 4 else np.ones(2)


def bad_vectorized(weights):
    return [None if w.shape[0] == 4 else 1.0 for w in weights]


def bad_model(frob_norm, slices):
    return None


def ok_model(frob_norm, slices):
    return float(np.mean(frob_norm))


def with_transient(weights):
    return object(), 2.0


def scaled(weights, scale=1.0):
    return float(scale)


def model_scaled(scaled, slices):
    return float(np.mean(scaled))


def two_d(weights):
    return np.arange(6.0).reshape(2, 3)


def arr_nan(weights):
    return np.array([1.0, np.nan, np.inf])


def _registry():
    reg = default_registry().copy()
    reg.register(make_kernel(bad_none, outputs="bad_none"))
    reg.register(make_kernel(bad_extra_keys, outputs="bad_extra_keys"))
    reg.register(make_kernel(bad_object, outputs="bad_object"))
    reg.register(make_kernel(bad_str_array, outputs="bad_str_array"))
    reg.register(make_kernel(bad_vectorized, outputs="bad_vectorized", vectorized=True))
    reg.register(make_kernel(bad_model, outputs="bad_model", level="model"))
    reg.register(make_kernel(ok_model, outputs="ok_model", level="model"))
    reg.register(make_kernel(with_transient, outputs=("t_obj", "t_num"), transient=("t_obj",)))
    reg.register(make_kernel(scaled, outputs="scaled"))
    reg.register(make_kernel(model_scaled, outputs="model_scaled", level="model"))
    reg.register(make_kernel(two_d, outputs="two_d"))
    reg.register(make_kernel(arr_nan, outputs="arr_nan"))
    return reg


@pytest.fixture
def reg():
    return _registry()


@pytest.fixture
def one_model(reg, rng):
    s = Session(profile="ram", registry=reg)
    s.models.add({"w": rng.normal(size=(8, 6)), "v": rng.normal(size=(4, 6))}, model_id="a")
    return s


@pytest.fixture
def two_models(reg, rng):
    s = Session(profile="ram", registry=reg)
    s.models.add({"w": rng.normal(size=(8, 6))}, model_id="a")
    s.models.add({"w": rng.normal(size=(8, 6))}, model_id="b")
    return s


def _apply(scope, *fields, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFailureWarning)
        warnings.simplefilter("ignore", NothingToCompareWarning)
        return scope.compute.apply(*fields, progress=False, **kw)


# --- 1. values the store cannot hold -------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "what"),
    [
        ("bad_none", "None"),
        ("bad_extra_keys", "['junk']"),
        ("bad_object", "object"),
        ("bad_str_array", "dtype <U1"),
        ("bad_vectorized", "None"),
    ],
)
def test_unstorable_output_is_a_per_slice_failure(one_model, field, what):
    s = one_model
    report = _apply(s, "frob_norm", "stable_rank", field)
    assert [(f.name, f.field) for f in report.failures] == [("v", field)]
    err = report.failures[0].error
    assert repr(field) in err and what in err
    # everything else of the chunk is stored, on both slices
    rows = s.results.export_table("frob_norm", "stable_rank", field, export_format="list")
    by_name = {r["name"]: r for r in rows}
    assert all(by_name[n]["frob_norm"] > 0 for n in ("v", "w"))
    assert all(by_name[n]["stable_rank"] > 0 for n in ("v", "w"))
    assert by_name["v"][field] is None
    assert by_name["w"][field] is not None


def test_unstorable_output_with_a_process_pool(one_model):
    s = one_model
    report = _apply(s, "frob_norm", "bad_none", executor="processes", workers=2)
    assert [(f.name, f.field) for f in report.failures] == [("v", "bad_none")]
    assert "'bad_none'" in report.failures[0].error and "None" in report.failures[0].error
    d = s.results.export_table("frob_norm", "bad_none", export_format="dict")
    assert all(v > 0 for v in d["frob_norm"])
    assert sorted(d["bad_none"], key=lambda v: v is None) == [1.0, None]


def test_unstorable_model_level_output_keeps_the_rest(one_model):
    s = one_model
    report = _apply(s, "frob_norm", "ok_model", "bad_model")
    assert [(f.model_id, f.field) for f in report.failures] == [("a", "bad_model")]
    assert "'bad_model'" in report.failures[0].error and "None" in report.failures[0].error
    assert s.results.get("ok_model", "a") > 0
    assert s.results.fields().count("frob_norm") == 1


def test_transient_output_is_checked_only_when_asked_for(one_model):
    s = one_model
    assert _apply(s, "t_num").ok  # the unstorable transient stays in memory
    report = _apply(s, "t_obj")
    assert {f.field for f in report.failures} == {"t_obj"}
    assert "'with_transient'" in report.failures[0].error
    assert s.results.get("t_num", "w") == 2.0


# --- 2, 3. cross-model fields --------------------------------------------------------------


@pytest.mark.parametrize("other", ["pl_alpha_drift", "spectral_norm_drift"])
def test_cross_fields_requested_together(reg, rng, other):
    a, b = rng.normal(size=(8, 6)), rng.normal(size=(8, 6))
    together = Session(profile="ram", registry=reg)
    alone = Session(profile="ram", registry=reg)
    for s in (together, alone):
        s.models.add({"w": a}, model_id="a")
        s.models.add({"w": b}, model_id="b")
    report = _apply(together, other, "l_agreement", reference="a")
    assert report.ok, report.failures
    assert _apply(alone, other, reference="a").ok
    assert _apply(alone, "l_agreement", reference="a").ok
    for f in (other, "l_agreement"):
        got = together.results.get(f, "w", "b", reference="a")
        want = alone.results.get(f, "w", "b", reference="a")
        np.testing.assert_allclose(got, want)


def test_failed_input_fails_only_the_cross_kernels_using_it(reg):
    s = Session(profile="ram", registry=reg)
    s.models.add({"z": np.zeros((3, 3))}, model_id="a")
    s.models.add({"z": np.ones((3, 3))}, model_id="b")
    report = _apply(s, "delta_frob_norm", "pl_alpha_drift", reference="a")
    assert [f.field for f in report.failures] == ["pl_alpha_drift"]
    assert "'pl_alpha'" in report.failures[0].error
    assert s.results.get("delta_frob_norm", "z", "b", reference="a") == pytest.approx(3.0)


# --- 4, 5, 6, 9. exports -------------------------------------------------------------------


def test_list_rows_carry_every_column_in_order(two_models):
    s = two_models
    _apply(s, "frob_norm", "model_stable_rank")
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
    _apply(s, "frob_norm", "delta_frob_norm", "model_stable_rank", reference="a")
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
    _apply(s, "arr_nan")
    out = json.loads(s.results.export_table("arr_nan", export_format="json"))
    assert [r["arr_nan"] for r in out] == [[1.0, None, None]] * 2
    text = to_format([{"x": np.float32("nan"), "y": np.array([[np.inf, 2.0]])}], ["x", "y"], "json")
    assert json.loads(text) == [{"x": None, "y": [[None, 2.0]]}]


def test_polars_keeps_the_shape_of_2d_fields(one_model):
    import polars as pl

    s = one_model
    _apply(s, "two_d")
    df = s.results.export_table("two_d", export_format="polars")
    want = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert df["two_d"].to_list() == [want, want]
    assert json.loads(s.results.export_table("two_d", export_format="json"))[0]["two_d"] == want
    assert isinstance(df.schema["two_d"], pl.List)


# --- 7. references -------------------------------------------------------------------------


def test_export_with_an_unknown_or_removed_reference(two_models):
    s = two_models
    _apply(s, "delta_frob_norm", reference="a")
    with pytest.raises(UnknownModelError, match="'nope'"):
        s.results.export_table("delta_frob_norm", reference="nope")
    s.models.remove("a")
    with pytest.raises(UnknownModelError, match="reference model 'a'"):
        s.results.export_table("delta_frob_norm", reference="a")


def test_not_computed_cross_field_advice_names_the_reference(two_models):
    s = two_models
    with pytest.raises(FieldNotComputedError, match=r"reference='a'") as info:
        s.results.export_table("delta_frob_norm", reference="a")
    # the advice works as written
    assert "apply('delta_frob_norm', reference='a')" in str(info.value)
    _apply(s, "delta_frob_norm", reference="a")
    assert s.results.export_table("delta_frob_norm", reference="a")["delta_frob_norm"][0] > 0


def test_scope_with_only_the_reference_model(two_models):
    s = two_models
    only_ref = s.filter(model_ids="a")
    with pytest.warns(NothingToCompareWarning, match="only the reference model 'a'"):
        report = only_ref.compute.apply("delta_frob_norm", reference="a", progress=False)
    assert report.computed == 0
    assert report.notes and "only the reference model" in report.notes[0]
    assert "only the reference model" in str(report)
    with pytest.raises(FieldNotComputedError, match="only the reference model") as info:
        only_ref.results.export_table("delta_frob_norm", reference="a")
    assert "compute.apply" not in str(info.value)


def test_get_reads_cross_and_model_level_values(two_models):
    s = two_models
    _apply(s, "frob_norm", "delta_frob_norm", "model_stable_rank", reference="a")
    cross = s.results.export_table("delta_frob_norm", reference="a")["delta_frob_norm"][0]
    assert s.results.get("delta_frob_norm", "w", "b", reference="a") == cross
    model = s.results.export_table("model_stable_rank", export_format="list")
    want = {r["model_id"]: r["model_stable_rank"] for r in model}
    assert s.results.get("model_stable_rank", "b") == want["b"]
    assert s.results.get("model_stable_rank", "@a") == want["a"]
    assert s.results.get("model_stable_rank", "w", "a") == want["a"]
    # the seed form still works
    assert s.results.get("frob_norm", "w", "b") > 0
    assert s.results.get("frob_norm", "w", model_id="b") > 0


def test_get_cross_field_errors(two_models):
    s = two_models
    with pytest.raises(InvalidArgumentError, match="reference="):
        s.results.get("delta_frob_norm", "w", "b")
    with pytest.raises(UnknownModelError, match="'nope'"):
        s.results.get("delta_frob_norm", "w", "b", reference="nope")
    with pytest.raises(FieldNotComputedError, match=r"apply\('delta_frob_norm', reference='a'\)"):
        s.results.get("delta_frob_norm", "w", "b", reference="a")
    with pytest.raises(FieldNotComputedError, match="reference model 'a'"):
        s.results.get("delta_frob_norm", "w", "a", reference="a")
    with pytest.raises(FieldNotComputedError, match=r"model 'b'.*apply\('model_stable_rank'\)"):
        s.results.get("model_stable_rank", "b")


# --- 8. erase ------------------------------------------------------------------------------


def test_erase_also_erases_dependents(one_model):
    s = one_model

    def model_value():
        rows = s.results.export_table("model_scaled", export_format="list")
        return rows[0]["model_scaled"]

    _apply(s, "model_scaled")
    assert model_value() == 1.0
    erased = s.compute.erase("scaled")
    assert erased == 3
    assert erased.fields == {"scaled": 2, "model_scaled": 1}
    assert erased.dependents == ["model_scaled"]
    _apply(s, "scaled", scale=5.0)
    _apply(s, "model_scaled")
    assert model_value() == 5.0


def test_erase_reaches_cross_values_on_either_side_and_only_the_scope(two_models):
    s = two_models
    _apply(s, "frob_norm", "stable_rank", "model_stable_rank")
    _apply(s, "pl_alpha_drift", reference="a")
    # erasing the reference's input makes b's drift against it stale
    erased = s.filter(model_ids="a").compute.erase("pl_alpha")
    assert "pl_alpha_drift" in erased.dependents
    with pytest.raises(FieldNotComputedError):
        s.results.get("pl_alpha_drift", "w", "b", reference="a")
    assert s.results.get("pl_alpha", "w", "b") > 0  # b's own values stay
    # a model-level value goes with its inputs, in that model only
    s.filter(model_ids="b").compute.erase("stable_rank")
    with pytest.raises(FieldNotComputedError):
        s.results.get("model_stable_rank", "b")
    assert s.results.get("model_stable_rank", "a") > 0
    assert s.results.get("frob_norm", "w", "b") > 0
