"""Cross-model fields over models whose names do not all pair: the unpaired slices are named.

Diffract 0.3.1 logs that it skips such a name, then its ``apply`` fails (``SessionError``);
ours computes every pair and says which slices were left out (docs/migrating-from-diffract.md,
``#d-cross-unpaired``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from diffract import NothingToCompareWarning, Session


def _session(extra_in_a: bool) -> Session:
    g = np.random.default_rng(3)
    session = Session(profile="ram")
    names = ["layer.0.weight", "head"]
    a = {n: g.normal(size=(8, 6)) for n in names}
    if extra_in_a:
        a["layer.2.weight"] = g.normal(size=(6, 4))
    session.models.add(a, model_id="a")
    session.models.add({n: g.normal(size=(8, 6)) for n in names}, model_id="b")
    return session


def test_a_name_held_by_one_model_only_is_named_and_the_pairs_are_computed() -> None:
    session = _session(extra_in_a=True)
    with pytest.warns(NothingToCompareWarning, match=r"1 slice\(s\).*a:layer\.2\.weight"):
        report = session.compute.apply("l_agreement")
    assert report.ok and len(report.notes) == 1 and "layer.2.weight" in report.notes[0]
    recs = session.results.export_aggregates("l_agreement", export_format="list")
    assert sorted(tuple(r["context_params"]) for r in recs) == [("head",), ("layer.0.weight",)]
    assert all(sorted(r["context_models"]) == ["a", "b"] for r in recs)


def test_models_whose_names_all_pair_get_no_note() -> None:
    session = _session(extra_in_a=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NothingToCompareWarning)
        report = session.compute.apply("l_agreement")
    assert report.notes == []
    assert len(session.results.export_aggregates("l_agreement", export_format="list")) == 2


def test_a_slice_of_another_model_without_a_peer_in_the_reference_is_named() -> None:
    session = _session(extra_in_a=True)
    session.models.add({"head": np.ones((8, 6)), "only_c": np.eye(5)}, model_id="c")
    with pytest.warns(NothingToCompareWarning) as caught:
        report = session.filter(model_ids=["b", "c"]).compute.apply(
            "delta_frob_norm", reference="a"
        )
    text = " ".join(str(w.message) for w in caught)
    assert "c:only_c" in text and "b:head" not in text
    assert report.ok
