"""Values the store cannot hold: a kernel returning one fails that slice only (with a reason
naming what it got), in threads and process pools, at the model level too; transient outputs
are checked only when asked for."""

from __future__ import annotations

import pytest

from _engine_kit import apply_quietly


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
    report = apply_quietly(s, "frob_norm", "stable_rank", field)
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
    report = apply_quietly(s, "frob_norm", "bad_none", executor="processes", workers=2)
    assert [(f.name, f.field) for f in report.failures] == [("v", "bad_none")]
    assert "'bad_none'" in report.failures[0].error and "None" in report.failures[0].error
    d = s.results.export_table("frob_norm", "bad_none", export_format="dict")
    assert all(v > 0 for v in d["frob_norm"])
    assert sorted(d["bad_none"], key=lambda v: v is None) == [1.0, None]


def test_unstorable_model_level_output_keeps_the_rest(one_model):
    s = one_model
    report = apply_quietly(s, "frob_norm", "ok_model", "bad_model")
    assert [(f.model_id, f.field) for f in report.failures] == [("a", "bad_model")]
    assert "'bad_model'" in report.failures[0].error and "None" in report.failures[0].error
    assert s.results.get("ok_model", "a") > 0
    assert s.results.fields().count("frob_norm") == 1


def test_transient_output_is_checked_only_when_asked_for(one_model):
    s = one_model
    assert apply_quietly(s, "t_num").ok  # the unstorable transient stays in memory
    report = apply_quietly(s, "t_obj")
    assert {f.field for f in report.failures} == {"t_obj"}
    assert "'with_transient'" in report.failures[0].error
    assert s.results.get("t_num", "w") == 2.0
