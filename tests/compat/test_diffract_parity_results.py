"""Diffract 0.3.1's behaviour in scopes and exports (issue 26, points 1, 2, 5, 10, 12, 15, 18).

Each test runs what a Diffract user writes and checks what Diffract 0.3.1 gives for it
(observed with diffract-core 0.3.1), values against numpy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from diffract import Session
from diffract.session import KernelNotFoundError, ModelNotFoundError


def _mk(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {f"layer.{i}.weight": rng.standard_normal((8, 6)).astype(np.float32) for i in range(6)}
    out["head"] = rng.standard_normal((5, 8)).astype(np.float32)
    return out


@pytest.fixture
def three():
    """Three models of 7 two-dimensional parameters each (Diffract's kind of parameter)."""
    s = Session(profile="ram")
    weights = {m: _mk(i) for i, m in enumerate("abc")}
    for m, w in weights.items():
        s.models.add(w, model_id=m)
    return s, weights


# --- point 1: a module path selects its weight slice ------------------------------------------


def test_module_path_selects_the_weight_of_a_torch_module_and_of_a_state_dict():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    s = Session(profile="ram")
    s.models.add(net, model_id="t")
    s.models.add(net.state_dict(), model_id="sd")
    picked = s.filter(param_names=["0"])  # Diffract's name of the first nn.Linear
    assert {(p["model_id"], p["name"]) for p in picked.models.parameters.list()} == {
        ("t", "0.weight"),
        ("sd", "0.weight"),
    }
    picked.compute.apply("frob_norm", progress=False)
    w0 = net[0].weight.detach().double().numpy()
    rows = picked.results.export_metrics("frob_norm", export_format="list")
    assert [r["frob_norm"] for r in rows] == pytest.approx([np.linalg.norm(w0)] * 2, rel=1e-6)
    # the other module too, and names of real slices behave as before
    names = {p["name"] for p in s.filter(param_names=["2", "0.bias"]).models.parameters.list()}
    assert names == {"2.weight", "0.bias"}
    assert {p["name"] for p in s.filter(param_names=["0.weight"]).models.parameters.list()} == {
        "0.weight"
    }
    assert len(s.filter(param_names=["re:0"])) == 0  # regexes match names only
    assert len(s.filter(param_names=["1"])) == 0  # ReLU: no weight
    # the filter stays data: the entry as given
    assert json.loads(picked.filter_chain.to_json()) == [{"param_names": ["0"]}]


def test_a_name_that_is_a_slice_selects_that_slice_only():
    s = Session(profile="ram")
    w = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    s.models.add({"head": w, "head.weight": w + 1, "body.weight": w + 2}, model_id="m")
    assert [p["name"] for p in s.filter(param_names=["head"]).models.parameters.list()] == ["head"]
    assert [p["name"] for p in s.filter(param_names=["body"]).models.parameters.list()] == [
        "body.weight"
    ]


# --- point 2: one record per parameter ----------------------------------------------------------


def test_export_rows_keep_every_parameter_of_the_scope(three):
    s, weights = three
    s.filter(model_ids=["a"], param_names=[r"re:layer\.[0-4]\.weight"]).compute.apply(
        "frob_norm", progress=False
    )
    scope = s.filter(model_ids=["a"])
    rows = scope.results.export_metrics("frob_norm", export_format="list")
    assert len(rows) == 7
    have = {r["parameter_name"]: r["frob_norm"] for r in rows if "frob_norm" in r}
    assert set(have) == {f"layer.{i}.weight" for i in range(5)}
    for n, v in have.items():
        assert v == pytest.approx(np.linalg.norm(weights["a"][n].astype(np.float64)), rel=1e-6)
    df = scope.results.export_metrics("frob_norm", export_format="pandas")
    assert len(df) == 7 and int(df["frob_norm"].isna().sum()) == 2
    pl = scope.results.export_metrics("frob_norm", export_format="polars")
    assert pl.height == 7 and pl["frob_norm"].null_count() == 2
    d = scope.results.export_metrics("frob_norm", export_format="dict")
    assert len(d) == 7 and sum(not e["fields"] for e in d.values()) == 2
    # a field not computed yet: Diffract's 7 rows, no value
    for fmt, n in (("list", 7), ("pandas", 7), ("polars", 7), ("dict", 7)):
        out = scope.results.export_metrics("stable_rank", export_format=fmt)
        assert len(out) == n, fmt
    assert "stable_rank" not in scope.results.export_metrics("stable_rank", export_format="pandas")
    assert len(scope.results.export("frob_norm", export_format="list")) == 7


def test_export_rows_leave_out_slices_a_field_never_applies_to():
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    s = Session(profile="ram")
    s.models.add(net, model_id="t")
    # Diffract has the two weights only; ours also the biases, which frob_norm does not apply to
    rows = s.results.export_metrics("frob_norm", export_format="list")
    assert [r["parameter_name"] for r in rows] == ["0.weight", "2.weight"]
    assert all("frob_norm" not in r for r in rows)
    # weights apply to every parameter; an aggregate asked of export_metrics has every
    # parameter's record, without a value (as in Diffract)
    assert len(s.results.export_metrics("weights", export_format="list")) == 4
    rows = s.results.export_metrics("log_norm", export_format="list")
    assert len(rows) == 4 and all("log_norm" not in r for r in rows)


# --- point 5: aggregates whose context meets the scope ----------------------------------------


def test_aggregates_seen_from_a_scope_are_those_whose_context_meets_it(three):
    s, weights = three
    weights_a = weights["a"]
    s.compute.apply("log_norm", progress=False)
    everything = s.results.export_aggregates("log_norm")
    assert [(r["context_models"], len(r["context_params"])) for r in everything] == [
        (("a",), 7),
        (("b",), 7),
        (("c",), 7),
    ]
    head = s.filter(param_names=["head"]).results.export_aggregates("log_norm")
    assert [r["value"] for r in head] == [r["value"] for r in everything]  # Diffract: 3
    sub = s.filter(model_ids=["a"], param_names=["head", "layer.0.weight"])
    sub.compute.apply("log_norm", progress=False)
    seen = s.filter(model_ids=["a"], param_names=["head"]).results.export_aggregates("log_norm")
    assert [r["context_params"] for r in seen] == [
        ("head", "layer.0.weight"),
        ("head", *(f"layer.{i}.weight" for i in range(6))),
    ]
    # log_norm over the two: the mean of log10 ||W||_F^2 of those two, by numpy
    ref = np.mean(
        [
            np.log10(np.linalg.norm(weights_a[n].astype(np.float64)) ** 2)
            for n in ("head", "layer.0.weight")
        ]
    )
    assert seen[0]["value"] == pytest.approx(ref, rel=1e-6)
    assert s.filter(model_ids=["b"], param_names=["layer.3.weight"]).results.export_aggregates(
        "log_norm"
    ) == [everything[1]]
    assert s.filter(model_ids=["a"], param_names=["layer.5.weight"]).results.export_aggregates(
        "log_norm"
    ) == [everything[0]]
    out = s.filter(model_ids=["a"], param_names=["head"]).results.export("log_norm")
    ((entry),) = out.values()
    assert len([k for k in entry["fields"] if k.startswith("log_norm@")]) == 2


def test_cross_model_aggregates_seen_from_a_scope_of_one_of_the_models(three):
    s, _ = three
    s.filter(model_ids=["a", "b"]).compute.apply("l_overlap", progress=False)
    assert len(s.results.export_aggregates("l_overlap")) == 7
    assert len(s.filter(model_ids=["a"]).results.export_aggregates("l_overlap")) == 7  # Diffract
    assert s.filter(model_ids=["c"]).results.export_aggregates("l_overlap") == []
    (one,) = s.filter(param_names=["head"]).results.export_aggregates("l_overlap")
    assert one["context_models"] == ("a", "b") and one["context_params"] == ("head",)


# --- point 10: the weights field ---------------------------------------------------------------


def test_weights_are_exported_and_cannot_be_erased(three):
    s, weights = three
    scope = s.filter(model_ids=["b"])
    listed = scope.models.parameters.list(verbose=True)
    assert all(p["available_fields"][0] == "weights" for p in listed)
    rows = scope.results.export_metrics("weights", export_format="list")
    assert len(rows) == 7
    for r in rows:
        np.testing.assert_array_equal(r["weights"], weights["b"][r["parameter_name"]])
    d = scope.results.export("weights")
    assert all(isinstance(e["fields"]["weights"], np.ndarray) for e in d.values())
    assert scope.results.export_aggregates("weights") == []
    with pytest.raises(KernelNotFoundError, match=r"models\.erase"):
        scope.results.erase("weights")


# --- point 12: models.erase from a scope -------------------------------------------------------


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return bool(np.array_equal(a, b, equal_nan=True))


def _values(s: Session) -> dict:
    store = s.store
    return {k: store.get(k) for k in store.keys()}


@pytest.mark.parametrize("profile", ["ram", "local", "sqlite"])
def test_model_erase_from_a_scope_erases_the_scope_only(three, profile, tmp_path):
    _, weights = three
    kw = {} if profile == "ram" else {"path": tmp_path / ("s.db" if profile == "sqlite" else "st")}
    s = Session(profile=profile, **kw)
    for m, w in weights.items():
        s.models.add(w, model_id=m)
    s.compute.apply("frob_norm", "log_norm", progress=False)
    s.filter(model_ids=["b"], param_names=["re:layer.*"]).compute.apply("log_norm", progress=False)
    s.filter(model_ids=["a", "b"]).compute.apply("l_overlap", progress=False)
    before = _values(s)
    summary = s.filter(param_names=["head"]).models.erase("b")
    assert summary.models == ("b",) and summary.affected_uids == 1  # Diffract: 1, not 7
    assert s.models.list() == ["a", "b", "c"]
    left = s.filter(model_ids=["b"])
    assert sorted(p["name"] for p in left.models.parameters.list()) == [
        f"layer.{i}.weight" for i in range(6)
    ]
    for r in left.results.export_metrics("weights", "frob_norm", export_format="list"):
        np.testing.assert_array_equal(r["weights"], weights["b"][r["parameter_name"]])
        assert r["frob_norm"] == pytest.approx(
            np.linalg.norm(weights["b"][r["parameter_name"]].astype(np.float64)), rel=1e-6
        )
    aggs = s.results.export_aggregates("log_norm")
    # b's whole-model value used head: gone; the one over its layers stays
    assert [(r["context_models"], len(r["context_params"])) for r in aggs] == [
        (("a",), 7),
        (("b",), 6),
        (("c",), 7),
    ]
    pairs = s.results.export_aggregates("l_overlap")
    assert sorted(r["context_params"][0] for r in pairs) == [f"layer.{i}.weight" for i in range(6)]
    after = _values(s)
    assert all(_same(before[k], v) for k, v in after.items())
    # a model with nothing in the scope is not erased: Diffract's ModelNotFoundError
    with pytest.raises(ModelNotFoundError, match="no parameter in this scope"):
        s.filter(model_ids=["b"]).models.erase("c")
    assert len(s.filter(model_ids=["c"])) == 7
    if profile != "ram":
        s.close()
        with Session(profile=profile, **kw) as again:
            assert len(again.filter(model_ids=["b"])) == 6
            assert _values(again).keys() == after.keys()


def test_model_erase_from_a_scope_is_atomic(three, tmp_path, monkeypatch):
    _, weights = three
    s = Session(profile="local", path=tmp_path / "st")
    for m, w in weights.items():
        s.models.add(w, model_id=m)
    s.compute.apply("frob_norm", progress=False)
    before = _values(s)
    real = s.store.weights
    calls = {"n": 0}

    def failing(uid):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk gone")
        return real(uid)

    monkeypatch.setattr(s.store, "weights", failing)
    with pytest.raises(OSError, match="disk gone"):
        s.filter(param_names=["head"]).models.erase("b")
    monkeypatch.undo()
    assert len(s.filter(model_ids=["b"])) == 7 and _values(s).keys() == before.keys()
    s.close()
    with Session(profile="local", path=tmp_path / "st") as again:
        assert len(again.filter(model_ids=["b"])) == 7 and _values(again).keys() == before.keys()


# --- point 15: unknown param_ids ---------------------------------------------------------------


def test_unknown_param_ids_are_a_key_error(three):
    s, _ = three
    uid = s.models.parameters.list()[0]["uid"]
    with pytest.raises(KeyError, match="nope"):
        s.filter(param_ids=[uid, "nope"])
    with pytest.raises(KeyError, match="nope"):
        s.filter(model_ids=["a"]).filter(param_ids=["nope"])
    assert len(s.filter(param_ids=[uid])) == 1


def test_the_filter_builder_shows_an_unknown_uid_as_its_error(three):
    pytest.importorskip("ipywidgets")
    from diffract.widgets import FilterBuilder

    s, _ = three
    fb = FilterBuilder(s)
    fb.uids = "nope"
    assert "nope" in fb.error and fb.count == 0
    fb.uids = s.models.parameters.list()[0]["uid"]
    assert fb.error == "" and fb.count == 1


# --- point 18: summaries and key order ---------------------------------------------------------


def test_erase_summary_fields_are_the_fields_erased(three):
    s, _ = three
    s.compute.apply("stable_rank", "log_norm", progress=False)
    summary = s.filter(param_names=["head"]).results.erase("frob_norm", erase_dependent_also=True)
    # Diffract: ('frob_norm', 'log_norm', 'log_prod_frob_norm', 'param_norm', 'stable_rank')
    assert {"frob_norm", "log_norm", "stable_rank"} <= set(summary.fields)
    assert list(summary.fields) == sorted(summary.fields) and summary.affected_uids == 3
    everything = s.results.erase(erase_all=True)
    assert everything.fields == tuple(s.registry.fields()) and everything.affected_uids == 21
    assert s.models.erase("c", "a").models == ("c", "a")  # in the order given


def test_list_records_keep_the_order_fields_and_meta_were_stored(three):
    s, _ = three
    uid = s.filter(model_ids=["a"], param_names=["head"]).models.parameters.list()[0]["uid"]
    s.results.ingest_metrics({uid: {"zzz": 1.0}})
    s.results.ingest_metrics({uid: {"aaa": 2.0}})
    s.compute.apply("frob_norm", progress=False)
    s.models.parameters.patch_meta(updates={uid: {"zz": 1, "aa": 2}})
    (row,) = s.filter(param_ids=[uid]).results.export_metrics(
        "aaa", "frob_norm", "zzz", export_format="list"
    )
    assert list(row)[-3:] == ["zzz", "aaa", "frob_norm"]  # Diffract: the order stored
    metas = [k for k in row if k.startswith("meta_")]
    assert metas[-2:] == ["meta_zz", "meta_aa"]
    d = s.filter(param_ids=[uid]).results.export_metrics("aaa", "frob_norm", "zzz")
    assert list(d[uid]["fields"]) == ["zzz", "aaa", "frob_norm"]


def test_rename_moves_aggregates_with_the_model(three):
    # kept ours (documented): Diffract recomputes them on the next apply and then lists each
    # twice; ours moves them, so they are reused and listed once
    s, _ = three
    s.compute.apply("log_norm", progress=False)
    before = {r["context_models"]: r["value"] for r in s.results.export_aggregates("log_norm")}
    s.models.rename("a", "z")
    report = s.compute.apply("log_norm", progress=False)
    assert report.computed == 0
    after = s.results.export_aggregates("log_norm")
    assert [r["context_models"] for r in after] == [("b",), ("c",), ("z",)]
    assert after[-1]["value"] == before[("a",)]
