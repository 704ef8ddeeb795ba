"""Fields under Diffract's names mean what Diffract 0.3.1's mean: its values on six matrices
(two models), recorded by ``scripts/golden_diffract_fields.py`` in a Python 3.12 venv with
``diffract-core==0.3.1``, against ours on the same matrices (relative 1e-6).

The matrices cover the cases where the definitions part ways: a singular value at 1e-3 of
the largest (hard_rank 47 in Diffract, numpy's rank 48), randomized spectra leaving the MP
edge (the bulk re-estimated from them), a spike and an outlier entry; the permutation of the
weights is Diffract's draw at its seed 42."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from diffract import Session

GOLDEN = Path(__file__).parents[1] / "golden"
RTOL = 1e-6


@pytest.fixture(scope="module")
def golden():
    return json.loads((GOLDEN / "diffract_fields.json").read_text())


@pytest.fixture(scope="module")
def session():
    with np.load(GOLDEN / "diffract_fields.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    s = Session(profile="ram")
    for model in ("m1", "m2"):
        s.models.add(
            {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith(model + "/")},
            model_id=model,
        )
    yield s  # default options: what a Diffract user gets


def _close(name, field, ours, theirs):
    if isinstance(theirs, list):
        a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
        assert a.shape == b.shape, (name, field, a.shape, b.shape)
        # eigenvalues near zero (a rank-3 matrix) agree to the largest's rounding
        np.testing.assert_allclose(
            a, b, rtol=RTOL, atol=1e-12 * float(np.max(np.abs(b))), err_msg=f"{name} {field}"
        )
    elif isinstance(theirs, int) and not isinstance(theirs, bool):
        assert ours == theirs and type(ours) is int, (name, field, ours, theirs)
    else:
        assert isinstance(ours, float), (name, field, type(ours))
        assert math.isclose(ours, theirs, rel_tol=RTOL, abs_tol=1e-12), (name, field, ours, theirs)


def test_parameter_fields_match_diffract(golden, session):
    one = session.filter(model_ids=["m1"])
    fields = sorted({f for row in golden["param"].values() for f in row})
    one.compute.apply(*fields, progress=False)
    got = {
        rec["metadata"]["name"]: rec["fields"]
        for rec in one.results.export_metrics(*fields, export_format="dict").values()
    }
    assert set(got) == set(golden["param"])
    for name, row in golden["param"].items():
        for field, theirs in row.items():
            _close(name, field, got[name][field], theirs)


def test_the_cases_that_parted_ways(golden):
    """The golden holds the cases this test suite exists for (a guard on the inputs)."""
    p = golden["param"]
    assert p["small_sval"]["hard_rank"] == 47  # numpy's matrix_rank is 48
    # the randomized ESD left the edge: the bulk std is no longer the entries' std
    assert p["spiked"]["mp_bulk_std"] != p["spiked"]["weights_std"]
    assert p["gauss"]["mp_presence"] == 1.0 and isinstance(p["gauss"]["mp_num_spikes"], float)
    assert p["gauss"]["weights_svals"] == sorted(p["gauss"]["weights_svals"])  # ascending


def test_model_fields_match_diffract(golden, session):
    fields = sorted({f for row in golden["model"].values() for f in row})
    session.compute.apply(*fields, progress=False)
    for field in fields:
        recs = session.results.export_aggregates(field, export_format="list")
        got = {tuple(r["context_models"]): r["value"] for r in recs}
        for model, row in golden["model"].items():
            _close(model, field, got[(model,)], row[field])


def test_cross_model_fields_match_diffract(golden, session):
    fields = sorted({f for row in golden["cross"].values() for f in row})
    session.compute.apply(*fields, progress=False)
    for field in fields:
        recs = session.results.export_aggregates(field, export_format="list")
        got = {r["context_params"][0]: r["value"] for r in recs}
        assert set(got) == set(golden["cross"]), field
        for name, row in golden["cross"].items():
            if field in row:  # the overlap matrices are recorded for two parameters
                _close(name, field, got[name], row[field])
    assert sum("l_overlap" in row for row in golden["cross"].values()) == 2


def test_shape_kernels_are_listed_under_diffracts_names(session):
    """Diffract's kernels ``greater_dim`` and ``lower_dim`` (one field each) exist by those
    names: listed, configurable, and producing their field."""
    kernels = session.compute.list_available_kernels()
    assert {"greater_dim", "lower_dim", "hard_rank", "weights_rand"} <= set(kernels)
    for name in ("greater_dim", "lower_dim"):
        assert session.registry.kernel(name).outputs == (name,)
    assert session.registry.kernel("matrix_rank").outputs == ("matrix_rank",)
