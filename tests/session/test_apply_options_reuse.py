"""What ``apply`` says about the values it averages and reuses (issue 31 points 5 and 6):

* a model-level field reports the per-slice failures it averaged over (the conv net's
  ``10.weight`` has no clip_xmax fit: WeightWatcher 0.7.7 gives it alpha = -1,
  tests/golden/ww_extras_convnet.json), with a warning, though only the model field was asked
  for;
* an option given to ``apply`` that differs from the one stored values were computed with
  warns (``ReusedOptionsWarning``: the field, the stored option, the one asked for), the
  values are still reused (Diffract's rule), and ``recompute=True`` computes them again."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from diffract import KernelFailureWarning, ReusedOptionsWarning, Session
from diffract._errors import KernelExecutionError

GOLDEN = Path(__file__).parents[1] / "golden"


def extras(which: str) -> dict:
    """WeightWatcher 0.7.7's runs on the golden model ``which`` (benchmarks/make_golden.py)."""
    return json.loads((GOLDEN / f"ww_extras_{which}.json").read_text())


WW = {"conventions": "weightwatcher", "progress": False}


def _convnet() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDEN / "convnet.npz"))


def _alphas(s, model="c") -> dict[str, float]:
    names = [x.name for x in s.models.slices() if len(x.shape) >= 2]
    out = {}
    for n in names:
        try:
            out[n] = s.results.get("pl_alpha", n, model)
        except Exception:
            continue
    return out


def test_a_model_field_reports_the_slice_failures_it_averaged_over():
    gold = extras("convnet")["clip_xmax"]["rows"]
    failed_ww = {k for k, r in gold.items() if r["alpha"] == -1}
    assert failed_ww == {"10.weight"}
    with Session(profile="ram") as s:
        s.models.add(_convnet(), model_id="c")
        with pytest.warns(KernelFailureWarning, match=r"10\.weight \[pl_alpha\].*model_pl_alpha"):
            report = s.compute.apply("model_pl_alpha", fix_fingers="clip_xmax", **WW)
        assert {(f.name, f.field) for f in report.failures} == {("10.weight", "pl_alpha")}
        assert "left out of model_pl_alpha" in report.failures[0].error
        alphas = _alphas(s)
        assert set(alphas) == set(gold) - failed_ww
        for name, a in alphas.items():  # the slices averaged: WW's clip_xmax alphas
            assert a == pytest.approx(gold[name]["alpha"], rel=1e-6)
        model = s.results.get("model_pl_alpha", "c", "c")
        assert model == pytest.approx(np.mean(list(alphas.values())), rel=1e-12)
    with Session(profile="ram") as s:
        s.models.add(_convnet(), model_id="c")
        with pytest.raises(KernelExecutionError, match=r"10\.weight"):
            s.compute.apply("model_pl_alpha", fix_fingers="clip_xmax", on_failure="raise", **WW)
    with Session(profile="ram") as s:  # no failed slice: no failure
        s.models.add(_convnet(), model_id="c")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not s.compute.apply("model_pl_alpha", **WW).failures


def test_reuse_with_other_options_warns_and_recompute_computes_again(tmp_path):
    gold = extras("convnet")
    path = tmp_path / "store"
    with Session(path=str(path)) as s:
        s.models.add(_convnet(), model_id="c")
        s.compute.apply("pl_alpha", "model_pl_alpha", **WW)
        default = _alphas(s)
    with Session(path=str(path)) as s:  # the options are stored with the values
        with pytest.warns(ReusedOptionsWarning) as caught:
            s.compute.apply("model_pl_alpha", fix_fingers="clip_xmax", **WW)
        text = str(caught[0].message)
        assert "pl_alpha" in text and "of model 'c'" in text
        assert "computed with fix_fingers=None, asked for fix_fingers='clip_xmax'" in text
        assert "recompute=True" in text
        assert _alphas(s) == default  # still reused (Diffract's rule)
        with pytest.warns(KernelFailureWarning):
            s.compute.apply("model_pl_alpha", fix_fingers="clip_xmax", recompute=True, **WW)
        clipped = _alphas(s)
        rows = gold["clip_xmax"]["rows"]
        assert set(clipped) == set(rows) - {"10.weight"}
        for name, a in clipped.items():
            assert a == pytest.approx(rows[name]["alpha"], rel=1e-6)
        assert clipped["2.weight"] != pytest.approx(default["2.weight"], rel=1e-6)  # 17.5 -> 2.47
        assert "10.weight" in default and "10.weight" not in clipped
        assert s.results.get("model_pl_alpha", "c", "c") == pytest.approx(
            np.mean(list(clipped.values())), rel=1e-12
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error", ReusedOptionsWarning)
            # the same options again, and no option given: nothing to warn about
            with pytest.warns(KernelFailureWarning):  # 10.weight's clipped fit, again
                s.compute.apply("pl_alpha", fix_fingers="clip_xmax", **WW)
            s.compute.apply("pl_alpha", progress=False)  # 10.weight's default fit
        with pytest.warns(
            ReusedOptionsWarning, match="fix_fingers='clip_xmax', asked for fix_fingers=None"
        ):
            s.compute.apply("pl_alpha", fix_fingers=None, **WW)


def test_recompute_is_a_flag():
    with Session(profile="ram") as s:
        s.models.add({"w": np.eye(4)}, model_id="m")
        with pytest.raises(Exception, match="recompute"):
            s.compute.apply("frob_norm", recompute="yes", progress=False)
