"""The scheduler: reuse by presence, shared intermediates, options, failures, chunks,
progress, cancel, model and cross-model levels, custom kernels."""

from __future__ import annotations

import json
import threading
import warnings

import numpy as np
import pytest

from diffract import (
    DependencyCycleError,
    DuplicateModelError,
    FieldNotComputedError,
    KernelDefinitionError,
    Session,
    UnknownFieldError,
    UnknownOptionError,
)
from diffract.kernels import default_registry, make_kernel
from diffract.run.report import NonFiniteWeightsWarning


@pytest.fixture
def registry():
    """The built-in kernels plus a few test kernels that count their calls."""
    reg = default_registry().copy()
    calls = {"row_sums": 0}

    def row_sums(weights, *, scale=1.0):
        """Sum of each row times ``scale``."""
        calls["row_sums"] += 1
        return weights.sum(axis=1) * scale

    def row_sum_max(row_sums):
        """Largest row sum."""
        return float(np.max(row_sums))

    def mean_frob(frob_norm, slices):
        """Mean Frobenius norm over the model's slices."""
        return float(np.mean(frob_norm))

    def frob_delta(weights, ref_weights, reference=None):
        """||W - W_ref||_F."""
        return float(np.linalg.norm(weights - ref_weights))

    reg.register(make_kernel(row_sums, outputs="row_sums", min_ndim=2))
    reg.register(make_kernel(row_sum_max, outputs="row_sum_max"))
    reg.register(make_kernel(mean_frob, outputs="mean_frob", level="model"))
    reg.register(make_kernel(frob_delta, outputs="frob_delta", level="cross"))
    reg.calls = calls
    return reg


@pytest.fixture
def session(registry, mlp_weights):
    s = Session(profile="ram", registry=registry)
    s.models.add(mlp_weights, model_id="mlp")
    return s


def values(scope, *fields):
    return {
        r["name"]: tuple(r[f] for f in fields)
        for r in scope.results.export_table(*fields, export_format="list")
    }


def test_apply_computes_only_missing_fields(session):
    r1 = session.compute.apply("frob_norm", "stable_rank", progress=False)
    assert r1.computed > 0 and not r1.failures
    calls = dict(session.kernel_calls)
    r2 = session.compute.apply("frob_norm", "stable_rank", progress=False)
    assert session.kernel_calls == calls, "a second apply must run no kernel"
    assert r2.computed == 0 and r2.reused == 6  # 3 matrices x 2 fields
    # a report counts its own run's calls; the session keeps the running total
    assert r1.kernel_calls == calls and r1.kernel_calls["weights_spectrum"] == 3
    assert r2.kernel_calls == {}
    r3 = session.compute.apply("matrix_rank", progress=False)  # from the stored spectrum
    assert r3.kernel_calls == {"matrix_rank": 3, "greater_dim": 3}  # N (transient) again
    assert session.kernel_calls == {
        **calls,
        "matrix_rank": 3,
        "greater_dim": calls.get("greater_dim", 0) + 3,
    }


def test_shared_intermediate_computed_once_per_slice(session):
    producer = session.registry.producer("frob_norm").inputs[0]
    spectrum_kernel = session.registry.producer(producer).name
    session.compute.apply(
        "frob_norm", "spectral_norm", "nuclear_norm", "stable_rank", progress=False
    )
    assert session.kernel_calls[spectrum_kernel] == 3  # one per 2-D slice, not one per field


def test_values_match_numpy_linalg(session, mlp_weights):
    session.compute.apply(
        "frob_norm", "spectral_norm", "nuclear_norm", "stable_rank", progress=False
    )
    got = values(session, "frob_norm", "spectral_norm", "nuclear_norm", "stable_rank")
    for name, w in mlp_weights.items():
        if w.ndim != 2:
            assert got[name] == (None, None, None, None)
            continue
        w64 = w.astype(np.float64)
        fro, spec, nuc = (np.linalg.norm(w64, o) for o in ("fro", 2, "nuc"))
        assert got[name] == pytest.approx((fro, spec, nuc, fro**2 / spec**2), rel=1e-6)


def test_erase_then_apply_recomputes_only_the_erased(session, registry):
    session.compute.apply("row_sums", "row_sum_max", progress=False)
    assert registry.calls["row_sums"] == 3
    n = session.filter(param_names=["layers.0.weight"]).compute.erase("row_sums", "row_sum_max")
    assert n == 2
    session.compute.apply("row_sums", "row_sum_max", progress=False)
    assert registry.calls["row_sums"] == 4


def test_erase_takes_what_was_made_from_a_sibling_output(mlp_weights):
    """``weights_spectrum`` makes ``weights_svals`` and the transient ``kernel_svals`` in one
    call; ``rank_loss`` comes from ``kernel_svals``. Erasing ``weights_svals`` recomputes both,
    so ``rank_loss`` goes too (it would be stale after a recompute with other options)."""
    with Session(profile="ram") as s:
        s.models.add(mlp_weights, "m")
        s.compute.apply("weights_svals", "rank_loss", "spectrum_path", progress=False)
        n = s.compute.erase("weights_svals")
        assert {"rank_loss", "spectrum_path"} <= set(n.dependents)
        assert n.fields["rank_loss"] == n.fields["weights_svals"] > 0
        left = {f for _, f in s.store.keys()}
        assert not left & {"weights_svals", "rank_loss", "spectrum_path"}


def test_options_at_run_time_and_configure(session, registry):
    session.compute.apply("row_sum_max", scale=2.0, progress=False)
    doubled = values(session, "row_sum_max")
    session.compute.erase("row_sums", "row_sum_max")
    session.compute.configure("row_sums", scale=1.0)
    session.compute.apply("row_sum_max", progress=False)
    plain = values(session, "row_sum_max")
    for name, (v,) in plain.items():
        if v is not None:
            assert doubled[name][0] == pytest.approx(2 * v)
    # reuse is keyed by presence: changing an option does not recompute stored values
    before = registry.calls["row_sums"]
    session.compute.apply("row_sum_max", scale=5.0, progress=False)
    assert registry.calls["row_sums"] == before
    with pytest.raises(UnknownOptionError, match=r"unknown option\(s\) \['scal'\]"):
        session.compute.apply("row_sum_max", scal=2.0)
    with pytest.raises(UnknownOptionError, match="has no option"):
        session.compute.configure("row_sums", nope=1)
    with pytest.raises(UnknownOptionError, match="kernel_options names kernel"):
        session.compute.apply("frob_norm", kernel_options={"row_sums": {"scale": 2}})


def test_unknown_field_is_a_clear_error_and_changes_nothing(session):
    session.compute.apply("frob_norm", progress=False)
    before = sorted(session.store.keys())
    with pytest.raises(
        UnknownFieldError, match=r"unknown field 'frob_nrom'.*Did you mean 'frob_norm'"
    ):
        session.compute.apply("frob_norm", "frob_nrom")
    assert sorted(session.store.keys()) == before


def test_export_of_a_field_never_applied_says_to_apply_it(session):
    with pytest.raises(FieldNotComputedError, match=r"run \.compute\.apply\('stable_rank'\)"):
        session.results.export_table("stable_rank")


def test_export_formats(session):
    session.compute.apply("frob_norm", progress=False)
    d = session.results.export_table("frob_norm", export_format="dict")
    assert list(d) == ["model_id", "name", "uid", "type", "frob_norm"] and len(d["name"]) == 6
    rows = session.results.export_table("frob_norm", export_format="list")
    assert [r["name"] for r in rows] == d["name"]
    js = json.loads(session.results.export_table("frob_norm", export_format="json"))
    assert [r["frob_norm"] for r in js] == d["frob_norm"]
    pdf = session.results.export_table("frob_norm", export_format="pandas")
    assert list(pdf.columns) == list(d) and pdf["frob_norm"].notna().sum() == 3
    pl = session.results.export_table("frob_norm", export_format="polars")
    assert pl.columns == list(d) and pl["frob_norm"].drop_nulls().len() == 3
    with pytest.raises(ValueError, match="unknown export_format 'xml'"):
        session.results.export_table("frob_norm", export_format="xml")


def test_nan_and_inf_weights_are_stored_as_nan_and_the_run_goes_on(registry, mlp_weights):
    """Issue 26 point 6 (changed from recorded failures): Diffract stores NaN for a slice
    whose weights hold NaN or Inf, so the row stays in exports; the run notes and warns."""
    s = Session(profile="ram", registry=registry)
    bad = dict(mlp_weights)
    bad["layers.1.weight"] = bad["layers.1.weight"].copy()
    bad["layers.1.weight"][0, 0] = np.nan
    bad["layers.2.weight"] = bad["layers.2.weight"].copy()
    bad["layers.2.weight"][1, 1] = np.inf
    s.models.add(bad, model_id="bad")
    with pytest.warns(NonFiniteWeightsWarning, match="2 slice") as rec:
        report = s.compute.apply("frob_norm", progress=False)
    assert not report.failures and report.ok
    assert [(e.name, e.reason) for e in report.non_finite] == [
        ("layers.1.weight", "weights contain 1 NaN and 0 Inf value(s) of 192"),
        ("layers.2.weight", "weights contain 0 NaN and 1 Inf value(s) of 48"),
    ]
    assert "layers.2.weight" in str(rec[0].message)
    got = values(s, "frob_norm")
    assert got["layers.0.weight"][0] == pytest.approx(
        np.linalg.norm(mlp_weights["layers.0.weight"].astype(np.float64)), rel=1e-6
    )
    assert np.isnan(got["layers.1.weight"][0]) and np.isnan(got["layers.2.weight"][0])
    rows = s.results.export_metrics("frob_norm", export_format="list")
    assert {"layers.1.weight", "layers.2.weight"} <= {r["parameter_name"] for r in rows}


def test_chunks_under_a_memory_budget_give_the_same_values(registry, mlp_weights):
    one = Session(profile="ram", registry=registry)
    one.models.add(mlp_weights, model_id="m")
    one.compute.apply("stable_rank", progress=False)
    many = Session(profile="ram", registry=registry, memory_budget=1)
    many.models.add(mlp_weights, model_id="m")
    events = []
    report = many.compute.apply("stable_rank", progress=events.append)
    assert report.chunks == 3  # one slice per chunk: each is larger than the budget
    assert values(one, "stable_rank") == values(many, "stable_rank")
    chunk_events = [e for e in events if e.stage == "chunk"]
    assert [e.chunks_done for e in chunk_events] == [1, 2, 3]
    assert all(e.chunks_total == 3 for e in chunk_events)
    assert events[0].stage == "start" and events[-1].stage == "done"
    assert any(e.stage == "kernel" and e.field and e.param for e in events)


def test_cancel_stops_after_the_current_chunk_and_keeps_finished_work(registry, mlp_weights):
    s = Session(profile="ram", registry=registry, memory_budget=1)
    s.models.add(mlp_weights, model_id="m")
    cancel = threading.Event()

    def on_event(ev):
        if ev.stage == "chunk" and ev.chunks_done == 1:
            cancel.set()

    report = s.compute.apply("frob_norm", progress=on_event, cancel=cancel)
    assert report.cancelled and report.chunks == 1
    stored = [v for (v,) in values(s, "frob_norm").values() if v is not None]
    assert len(stored) == 1
    rest = s.compute.apply("frob_norm", progress=False)
    assert rest.reused == 1 and rest.chunks == 2


def test_workers_give_the_same_values(registry, mlp_weights):
    a = Session(profile="ram", registry=registry)
    b = Session(profile="ram", registry=registry, workers=2)
    for s in (a, b):
        s.models.add(mlp_weights, model_id="m")
        s.compute.apply("stable_rank", "frob_norm", progress=False)
    assert values(a, "stable_rank", "frob_norm") == values(b, "stable_rank", "frob_norm")


def test_workers_run_slices_in_worker_threads_at_the_same_time(registry, mlp_weights):
    """workers=2 runs two parts of a chunk's slices at once, in worker threads: the first two
    kernel calls wait for each other at a barrier (one thread alone would break it)."""
    seen = []
    lock = threading.Lock()
    barrier = threading.Barrier(2, timeout=20)

    def where(weights):
        """Records the thread it runs in."""
        with lock:
            seen.append((threading.get_ident(), threading.current_thread().name))
            meet = len(seen) <= 2
        if meet:
            barrier.wait()
        return float(weights.size)

    registry.register(make_kernel(where, outputs="where"))
    s = Session(profile="ram", registry=registry, workers=2)
    s.models.add(mlp_weights, model_id="m")
    report = s.compute.apply("where", progress=False)
    assert report.ok and report.computed == len(mlp_weights) == len(seen)
    threads = {ident for ident, _ in seen}
    assert len(threads) == 2 and threading.get_ident() not in threads, seen
    assert not barrier.broken


def test_model_level_aggregate_over_the_scope(session, mlp_weights):
    session.compute.apply("mean_frob", progress=False)
    rows = session.results.export_table("mean_frob", export_format="list")
    assert rows == [
        {
            "model_id": "mlp",
            "name": "",
            "uid": "@mlp",
            "type": "model",
            "mean_frob": pytest.approx(
                np.mean(
                    [
                        np.linalg.norm(w.astype(np.float64))
                        for w in mlp_weights.values()
                        if w.ndim == 2
                    ]
                ),
                rel=1e-6,
            ),
        }
    ]
    part = session.filter(param_names=["layers.0.weight"])
    part.compute.apply("mean_frob", progress=False)
    (row,) = part.results.export_table("mean_frob", export_format="list")
    assert row["uid"].startswith("@mlp[") and row["mean_frob"] == pytest.approx(
        np.linalg.norm(mlp_weights["layers.0.weight"].astype(np.float64)), rel=1e-6
    )


def test_cross_model_field_against_a_reference(session, mlp_weights):
    moved = {k: v + 1.0 for k, v in mlp_weights.items()}
    session.models.add(moved, model_id="mlp-step-0001")
    with pytest.raises(UnknownOptionError, match="need a reference model"):
        session.compute.apply("frob_delta")
    session.compute.apply("frob_delta", reference="mlp", progress=False)
    rows = session.filter(model_ids=["mlp-step-0001"]).results.export_table(
        "frob_delta", export_format="list", reference="mlp"
    )
    for r in rows:
        w = mlp_weights[r["name"]]
        assert r["reference"] == "mlp"
        assert r["frob_delta"] == pytest.approx(np.sqrt(w.size), rel=1e-5)


def test_duplicate_model_id_and_replace(session, mlp_weights):
    session.compute.apply("frob_norm", progress=False)
    with pytest.raises(DuplicateModelError, match="already stored; pass replace=True"):
        session.models.add(mlp_weights, model_id="mlp")
    assert (
        session.results.export_table("frob_norm", export_format="dict")["frob_norm"][1] is not None
    )
    session.models.add({k: 2 * v for k, v in mlp_weights.items()}, model_id="mlp", replace=True)
    with pytest.raises(FieldNotComputedError):
        session.results.export_table("frob_norm")
    session.compute.apply("frob_norm", progress=False)
    got = values(session, "frob_norm")
    assert got["layers.0.weight"][0] == pytest.approx(
        2 * np.linalg.norm(mlp_weights["layers.0.weight"].astype(np.float64)), rel=1e-6
    )


def test_remove_model_drops_its_fields(session):
    session.compute.apply("frob_norm", progress=False)
    session.models.remove("mlp")
    assert session.models.ids() == [] and list(session.store.keys()) == []


def test_dependency_cycle_is_named():
    reg = default_registry().copy()

    def a_field(b_field):
        return b_field

    def b_field(a_field):
        return a_field

    reg.register(make_kernel(a_field))
    with pytest.raises(DependencyCycleError, match="a_field -> b_field -> a_field"):
        reg.register(make_kernel(b_field))
    assert not reg.has_field("b_field")


def test_kernel_declaration_errors():
    def star(*weights):
        return 1

    with pytest.raises(KernelDefinitionError, match=r"\*args/\*\*kwargs"):
        make_kernel(star)

    def kwonly(weights, *, opt):
        return 1

    with pytest.raises(KernelDefinitionError, match="needs a default"):
        make_kernel(kwonly)
    reg = default_registry().copy()

    def frob_norm(weights):
        return 1.0

    with pytest.raises(KernelDefinitionError, match="already"):
        reg.register(make_kernel(frob_norm))


def test_user_kernel_with_the_public_decorator(mlp_weights):
    import diffract
    from diffract.kernels import KernelRegistry

    reg = KernelRegistry()

    @diffract.kernel(outputs="n_rows", min_ndim=2, registry=reg)
    def n_rows(weights):
        """Number of rows."""
        return weights.shape[0]

    s = Session(profile="ram", registry=reg)
    s.models.add(mlp_weights, model_id="m")
    s.compute.apply("n_rows", progress=False)
    assert {
        r["name"]: r["n_rows"] for r in s.results.export_table("n_rows", export_format="list")
    } == {k: (v.shape[0] if v.ndim == 2 else None) for k, v in mlp_weights.items()}


def test_no_warning_on_a_clean_run(session):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session.compute.apply("stable_rank", progress=False)
