"""The derived slices against WeightWatcher 0.7.7 on the trained conv net
(tests/golden/ww_derived_convnet.json, ``benchmarks/make_golden.py --derived``):

* ``pool=False``: WeightWatcher's ``analyze(pool=False)`` rows are our ``<conv>:<p>`` slices
  (and the dense layers) with ``conventions="weightwatcher"``: the skip set exactly, and every
  column to 1e-6 once WeightWatcher's ``conv2d_norm`` of a kernel-position matrix is applied
  (it scales the matrix by sqrt(P / 2), P kernel positions: eigenvalue columns times P / 2,
  singular values times sqrt(P / 2), the log columns plus log10 (P / 2), the alpha-weighted
  ones plus alpha log10 (P / 2)); N, M and Q of ``4.weight``'s slices are WeightWatcher's
  swapped report (the quirk of tests/kernels/test_fields_golden.py), and its ``rf`` is the layer's P
  (ours: 1 for the 2-D slice; P is its meta ``kernel_position.count``).
* ``intra=True`` (WeightWatcher's ``sparsify=False``: its default multiplies a random 0/1
  matrix in): its four pairs (two conv -> conv, conv -> dense, dense -> dense). WeightWatcher fits the power law to
  the singular values s of X, not to s^2: its lambda_max and xmin are our s_max and
  sqrt(xmin), its alpha is 2 pl_alpha - 1 and its sigma 2 pl_alpha_sigma (a power law in s is
  one in s^2; the KS distance, hence xmin and D, are the same)."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from diffract import Session
from test_fields_golden import EXACT_MAP, FLOAT_MAP
from test_ww_conventions import LAYER_FIELDS, RTOL

GOLDEN = Path(__file__).parents[1] / "golden"
#: columns that scale with the eigenvalues, with the singular values, or are log10 of them
EIGEN = {"xmin", "xmax", "lambda_max", "spectral_norm", "norm"}
SVALS = {"sv_max", "sv_min"}
LOGS = {"log_norm", "log_spectral_norm"}
ALPHA_LOGS = {"alpha_weighted", "log_alpha_norm"}


@functools.cache
def golden() -> dict:
    return json.loads((GOLDEN / "ww_derived_convnet.json").read_text())


def _net():
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    from make_golden import convnet

    net = convnet()
    sd = dict(np.load(GOLDEN / "convnet.npz"))
    net.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    return net


def _run(fields, **add):
    with Session(profile="ram") as s:
        s.models.add(_net(), "n", **add)
        report = s.compute.apply(
            *fields, progress=False, conventions="weightwatcher", precision="float64"
        )
        assert not report.failures, [str(f) for f in report.failures]
        slices = {x.name: x for x in s.models.slices()}
        skipped = {e.name for e in report.not_applicable_reasons}
        values = {
            name: {f: s.results.get(f, name, "n") for f in fields}
            for name in slices
            if name not in skipped and len(slices[name].shape) >= 2
        }
    return slices, skipped, values


def _ww_view(col, v, c, alpha):
    """Our value of ``col`` in WeightWatcher's pool=False scale (matrix times sqrt(c))."""
    if col in EIGEN:
        return v * c
    if col in SVALS:
        return v * math.sqrt(c)
    if col in LOGS:
        return v + math.log10(c)
    if col in ALPHA_LOGS:
        return v + alpha * math.log10(c)
    return v


def test_pool_false_equals_weightwatcher():
    gold = golden()["pool_false"]["rows"]
    slices, skipped, values = _run(LAYER_FIELDS, pool=False)
    positions = {n for n, x in slices.items() if "kernel_position" in x.meta}
    assert len(positions) == 9 + 9 + 4
    analyzed = {n for n in values if n in positions or slices[n].type.value == "dense"}
    assert analyzed == set(gold)  # 0.weight's 16 x 3 positions: num_evals 3 < min_evals 8
    assert {f"0.weight:{p}" for p in range(9)} <= skipped
    bad, worst = [], 0.0
    for name, row in gold.items():
        pos = slices[name].meta.get("kernel_position")
        c = pos["count"] / 2 if pos else 1.0
        got = values[name]
        for col, f in {**FLOAT_MAP, **EXACT_MAP}.items():
            if name.startswith("4.weight:") and col in ("N", "M", "Q"):
                continue  # WeightWatcher's N/M swap quirk
            if col == "rf" and pos:  # WeightWatcher's rf is its layer's, P
                assert got[f] == 1 and row[col] == pos["count"], name
                continue
            v = _ww_view(col, got[f], c, got["pl_alpha"])
            if col in EXACT_MAP:
                if v != row[col]:
                    bad.append(f"{name} {col}: WW {row[col]!r} ours {v!r}")
                continue
            worst = max(worst, abs(v - row[col]) / max(abs(row[col]), 1e-300))
            if not math.isclose(v, row[col], rel_tol=RTOL, abs_tol=1e-12):
                bad.append(f"{name} {col}: WW {row[col]!r} ours {v!r}")
    assert not bad, "\n".join(bad)
    assert worst < RTOL


def test_intra_pairs_equal_weightwatcher():
    """Every pair WeightWatcher makes (conv -> conv through the first kernel positions,
    conv -> dense, dense -> dense), column by column through the fixed relations: its ESD
    is s, not s^2 (alpha = 2 pl_alpha - 1, sigma = 2 pl_alpha_sigma, xmin = sqrt(pl_esd_xmin));
    a pair ending on a convolution has that layer's conv2d_norm (s / sqrt(2)); it keeps the
    top num_components of the second layer (24 of 32 for 4 -> 8: the rest are zero)."""
    gold = golden()["intra"]["rows"]
    fields = ["pl_alpha", "pl_alpha_sigma", "pl_ks", "pl_esd_xmin", "pl_num_spikes",
              "max_weights_sval", "matrix_rank", "num_evals", "greater_dim", "lower_dim"]  # fmt: skip
    slices, _, values = _run(fields, intra=True)
    assert {n for n in slices if n.startswith("intra:")} == set(gold)  # the pairs exactly
    assert len(gold) == 4
    for name, row in gold.items():
        got = values[name]
        second = name.split(":")[2]
        c = math.sqrt(0.5) if second in ("2.weight", "4.weight") else 1.0  # conv2d_norm
        assert row["alpha"] == pytest.approx(2 * got["pl_alpha"] - 1, rel=RTOL), name
        if row["num_pl_spikes"] < 4:  # a 3-value tail: WW's sigma is (0 - 1) / sqrt(n)
            assert row["sigma"] == pytest.approx(-1 / math.sqrt(row["num_pl_spikes"]), rel=RTOL)
        else:
            assert row["sigma"] == pytest.approx(2 * got["pl_alpha_sigma"], rel=RTOL), name
        assert row["D"] == pytest.approx(got["pl_ks"], rel=RTOL), name
        assert row["xmin"] == pytest.approx(c * math.sqrt(got["pl_esd_xmin"]), rel=RTOL), name
        assert row["lambda_max"] == pytest.approx(c * got["max_weights_sval"], rel=RTOL), name
        for col, f in (("num_pl_spikes", "pl_num_spikes"), ("matrix_rank", "matrix_rank"),
                       ("N", "greater_dim"), ("M", "lower_dim")):  # fmt: skip
            assert row[col] == got[f], (name, col)
        kept = got["matrix_rank"] if name == "intra:4.weight:8.weight" else got["num_evals"]
        assert row["num_evals"] == kept, name
    assert values["intra:4.weight:8.weight"]["num_evals"] == 32  # 8 zero singular values
