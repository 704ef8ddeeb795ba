"""Issue 18, point 20: an export says what happened to a field without values (failed, not
applicable, not computed, with counts, one failing slice and its message) and exports the
other fields, both in ``export_table`` and in Diffract's ``export_metrics`` (whose contract is
a logged WARNING, never an error, for a field without values: DIFFRACT-API.md §4.4)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

import diffract
from diffract import FieldNotComputedError, KernelFailureWarning, Session
from diffract.kernels import KernelRegistry, SliceNotApplicable, default_registry

W = {
    "a.weight": np.arange(12.0).reshape(4, 3),
    "b.weight": np.arange(20.0).reshape(5, 4) / 7,
    "c.weight": np.ones((6, 2)),
    "a.bias": np.arange(4.0),
}


def _registry() -> KernelRegistry:
    reg = default_registry().copy()

    @diffract.kernel(outputs="always_fails", min_ndim=2, registry=reg)
    def always_fails(weights):
        """Raises on every slice."""
        raise np.linalg.LinAlgError(f"no luck with {weights.shape}")

    @diffract.kernel(outputs="fails_on_b", min_ndim=2, registry=reg)
    def fails_on_b(weights):
        """Raises on the (5, 4) slice only."""
        if weights.shape == (5, 4):
            raise ValueError("b is singular")
        return float(weights.shape[0])

    @diffract.kernel(outputs="too_small", min_ndim=2, registry=reg)
    def too_small(weights):
        """Not applicable on every slice (a size guard, like WeightWatcher's)."""
        raise SliceNotApplicable(f"num_evals {min(weights.shape)} < min_evals 50")

    return reg


@pytest.fixture
def session():
    s = Session(profile="ram", registry=_registry())
    s.models.add(W, model_id="m")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFailureWarning)
        s.compute.apply("frob_norm", "always_fails", "fails_on_b", "too_small", progress=False)
    return s


def _by_name(table: dict) -> dict:
    return {n: {f: table[f][i] for f in table} for i, n in enumerate(table["name"])}


def test_export_table_says_a_field_failed_everywhere_and_exports_the_rest(session):
    with pytest.warns(RuntimeWarning) as got:
        table = session.results.export_table("frob_norm", "always_fails")
    text = " ".join(str(w.message) for w in got)
    # what happened to the field, with counts and one failing slice with its message
    assert "'always_fails' has no value on 4 of the 4 slices read" in text
    assert "failed on 3 (e.g. m:a.weight: LinAlgError: no luck with (4, 3))" in text
    assert "not applicable on 1 (e.g. m:a.bias: a 1-D slice)" in text
    assert "not computed" not in text and "run apply" not in text
    # the other field is exported in full
    rows = _by_name(table)
    assert rows["a.weight"]["frob_norm"] == pytest.approx(np.linalg.norm(W["a.weight"]))
    assert rows["c.weight"]["frob_norm"] == pytest.approx(np.sqrt(12))
    assert all(r["always_fails"] is None for r in rows.values())


def test_export_table_names_a_partial_failure_and_keeps_the_good_values(session):
    with pytest.warns(RuntimeWarning, match=r"failed on 1 \(e\.g\. m:b\.weight: ValueError: b is"):
        rows = session.results.export_table("fails_on_b", export_format="list")
    got = {r["name"]: r["fails_on_b"] for r in rows}
    assert got == {"a.weight": 4.0, "b.weight": None, "c.weight": 6.0, "a.bias": None}


def test_export_table_says_not_applicable_with_the_kernels_reason(session):
    with pytest.warns(RuntimeWarning) as got:
        session.results.export_table("frob_norm", "too_small")
    text = " ".join(str(w.message) for w in got)
    assert "'too_small' has no value on 4 of the 4 slices read: not applicable on 4" in text
    assert "m:a.weight: num_evals 3 < min_evals 50" in text
    assert "failed" not in text


def test_export_table_with_nothing_to_export_raises_what_happened(session):
    with pytest.raises(FieldNotComputedError) as info:
        session.results.export_table("always_fails")
    msg = str(info.value)
    assert "failed on 3" in msg and "LinAlgError: no luck" in msg and "run apply" not in msg
    # a field never computed still says how to compute it (and nothing else is exported)
    with pytest.raises(FieldNotComputedError, match=r"run \.compute\.apply\('stable_rank'\)"):
        session.results.export_table("stable_rank")


def test_export_table_exports_the_rest_next_to_a_field_never_computed(session):
    with pytest.warns(
        RuntimeWarning, match=r"'stable_rank'.*not computed on 3.*apply\('stable_rank'\)"
    ):
        table = session.results.export_table("frob_norm", "stable_rank")
    assert table["frob_norm"].count(None) == 1  # the bias: frob_norm is a 2-D field
    assert set(table["stable_rank"]) == {None}


def test_a_clean_export_does_not_warn(session):
    session.compute.apply("stable_rank", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session.results.export_table("frob_norm")
        # not applicable on the bias only (as expected for a 2-D field): no warning either
        table = session.results.export_table("stable_rank")
    assert table["stable_rank"].count(None) == 1


def test_export_metrics_logs_what_happened_and_never_raises(session, caplog):
    caplog.set_level(logging.WARNING)
    d = session.results.export_metrics("frob_norm", "always_fails", "fails_on_b", "too_small")
    text = caplog.text
    assert "'always_fails' has no value on 4 of the 4 slices read: failed on 3" in text
    assert "LinAlgError: no luck with (4, 3)" in text
    assert "'fails_on_b' has no value on 2 of the 4 slices read: failed on 1" in text
    assert "'too_small' has no value on 4 of the 4 slices read: not applicable on 4" in text
    assert "Compute it with session.compute.apply('always_fails')" not in text
    uid = {s.name: s.uid for s in session.models.slices()}
    assert d[uid["a.weight"]]["fields"] == {
        "frob_norm": pytest.approx(np.linalg.norm(W["a.weight"])),
        "fails_on_b": 4.0,
    }
    assert d[uid["b.weight"]]["fields"] == {
        "frob_norm": pytest.approx(np.linalg.norm(W["b.weight"]))
    }


def test_export_metrics_keeps_diffracts_warning_for_a_field_never_computed(session, caplog):
    caplog.set_level(logging.WARNING)
    rows = session.results.export_metrics("stable_rank", export_format="list")
    # a record per parameter stable_rank applies to, none with it (issue 26, point 2)
    assert rows and all("stable_rank" not in r for r in rows)
    assert "has no computed values in the current scope" in caplog.text
    assert "session.compute.apply('stable_rank')" in caplog.text


def test_export_all_sources_says_what_happened_too(session, caplog):
    caplog.set_level(logging.WARNING)
    d = session.results.export("frob_norm", "always_fails", sources="all")
    assert "'always_fails' has no value on 4 of the 4 slices read: failed on 3" in caplog.text
    assert "has no computed values" not in caplog.text  # not the never-computed advice
    assert sum("frob_norm" in e["fields"] for e in d.values()) == 3
