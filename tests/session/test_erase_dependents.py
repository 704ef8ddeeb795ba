"""``erase`` invalidates what was computed from a field: its dependents, and cross values on
either side, only in the scope erased."""

from __future__ import annotations

import pytest

from _engine_kit import apply_quietly
from diffract._errors import (
    FieldNotComputedError,
)


def test_erase_also_erases_dependents(one_model):
    s = one_model

    def model_value():
        rows = s.results.export_table("model_scaled", export_format="list")
        return rows[0]["model_scaled"]

    apply_quietly(s, "model_scaled")
    assert model_value() == 1.0
    erased = s.compute.erase("scaled")
    assert erased == 3
    assert erased.fields == {"scaled": 2, "model_scaled": 1}
    assert erased.dependents == ["model_scaled"]
    apply_quietly(s, "scaled", scale=5.0)
    apply_quietly(s, "model_scaled")
    assert model_value() == 5.0


def test_erase_reaches_cross_values_on_either_side_and_only_the_scope(two_models):
    s = two_models
    apply_quietly(s, "frob_norm", "stable_rank", "model_stable_rank")
    apply_quietly(s, "pl_alpha_drift", reference="a")
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
