"""Reads that name a reference model: exports with an unknown or removed reference, the advice
for a cross field not computed, a scope holding only the reference, ``results.get`` of cross
and model-level values and its errors."""

from __future__ import annotations

import pytest

from _engine_kit import apply_quietly
from diffract import NothingToCompareWarning
from diffract._errors import (
    FieldNotComputedError,
    InvalidArgumentError,
    UnknownModelError,
)


def test_export_with_an_unknown_or_removed_reference(two_models):
    s = two_models
    apply_quietly(s, "delta_frob_norm", reference="a")
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
    apply_quietly(s, "delta_frob_norm", reference="a")
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
    apply_quietly(s, "frob_norm", "delta_frob_norm", "model_stable_rank", reference="a")
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
