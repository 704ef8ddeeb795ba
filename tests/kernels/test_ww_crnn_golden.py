"""The recurrent golden (issue 31): a small CRNN with a 2-layer bidirectional LSTM and a GRU
(tests/golden/crnn.npz, trained and analyzed by ``benchmarks/make_golden_crnn.py``) against
WeightWatcher 0.7.7 (tests/golden/ww_extras_crnn.json). With ``conventions="weightwatcher"``
the analyzed layers are WeightWatcher's exactly (it skips the LSTM and the GRU, from the module
and from the state dict), every analyze() column we share matches, and so does
get_summary()."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from _engine_fields import NA
from diffract import FieldNotComputedError, Session
from test_fields_golden import EXACT_MAP, FLOAT_MAP
from test_ww_conventions import LAYER_FIELDS, RTOL, SUMMARY_MAP, compare_rows

GOLDEN = Path(__file__).parents[1] / "golden"
#: WeightWatcher 0.7.7's clip_xmax sigma on the 9-eigenvalue conv is -1/sqrt(7) (a negative
#: standard error: its clipped refit's sigma on a tail of 9 - 2 points), not a fit's sigma;
#: every other column of that row is compared
SIGMA_QUIRK = {("clip_xmax", "cnn.0.weight")}


@functools.cache
def gold() -> dict:
    return json.loads((GOLDEN / "ww_extras_crnn.json").read_text())


@functools.cache
def weights() -> dict[str, np.ndarray]:
    """Every float tensor of the state dict (BatchNorm running statistics included; the int
    step counter ``num_batches_tracked`` is not a weight)."""
    return {k: v for k, v in np.load(GOLDEN / "crnn.npz").items() if v.dtype.kind == "f"}


def _run(fs, fields, source=None, **options):
    run = fs.run(
        {"crnn": source if source is not None else weights()},
        fields,
        conventions="weightwatcher",
        precision="float64",
        **options,
    )
    return run, run.values["crnn"]


def test_the_golden_has_recurrent_layers_that_weightwatcher_skips():
    w = weights()
    assert any(k.endswith("weight_hh_l1_reverse") for k in w) and "gru.weight_ih_l0" in w
    assert (GOLDEN / "crnn.npz").stat().st_size < 2_000_000
    rows = gold()["default"]["rows"]
    assert gold()["state_dict_layers"] == sorted(rows)
    assert not any("weight_" in name for name in rows)
    # WW's rows come in model order (the state dict's), for tables in its row order
    assert gold()["default"]["row_order"] == [k for k in weights() if k in rows]


@pytest.mark.parametrize("run_name", ["default", "clip_xmax"])
def test_table_skip_set_and_summary_equal_weightwatcher(fs, run_name):
    g = gold()[run_name]
    run, values = _run(fs, [*LAYER_FIELDS, *SUMMARY_MAP.values()], **g["kwargs"])
    matrices = {k for k, v in weights().items() if np.ndim(v) >= 2}
    analyzed = {k for k in matrices if values[k]["pl_alpha"] is not NA}
    assert analyzed == set(g["rows"])  # the skip set exactly
    reasons = {e.name: e.reason for e in run.report.not_applicable_reasons}
    assert set(reasons) == matrices - analyzed
    assert all("layer type 'recurrent'" in reasons[k] for k in matrices - analyzed)
    worst, bad = compare_rows("crnn", values, g["rows"], FLOAT_MAP, EXACT_MAP)
    quirk = [b for b in bad if (run_name, b.split()[0]) in SIGMA_QUIRK and " sigma: " in b]
    assert quirk == ([] if run_name == "default" else [quirk[0]])
    if quirk:
        assert g["rows"]["cnn.0.weight"]["sigma"] == pytest.approx(-(7**-0.5), rel=1e-12)
    bad = [b for b in bad if b not in quirk]
    assert not bad, "\n".join(bad)
    assert max(v for k, v in worst.items() if not (quirk and k == "sigma")) < RTOL
    for key, f in SUMMARY_MAP.items():
        assert values[None][f] == pytest.approx(g["summary"][key], rel=RTOL, abs=1e-12), key


def test_the_torch_module_gives_the_same_skip_set():
    torch = pytest.importorskip("torch")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from make_golden_crnn import crnn

    net = crnn()
    net.load_state_dict({k: torch.from_numpy(v) for k, v in np.load(GOLDEN / "crnn.npz").items()})
    with Session(profile="ram") as s:
        s.models.add(net, model_id="crnn")
        fields = ["pl_alpha", *SUMMARY_MAP.values()]
        s.compute.apply(*fields, conventions="weightwatcher", precision="float64", progress=False)
        analyzed = set()
        for name in (k for k, v in weights().items() if v.ndim >= 2):
            try:
                s.results.get("pl_alpha", name, "crnn")
            except FieldNotComputedError:
                continue
            analyzed.add(name)
        assert analyzed == set(gold()["default"]["rows"])
        for key, f in SUMMARY_MAP.items():
            want = gold()["default"]["summary"][key]
            assert s.results.get(f, "crnn", "crnn") == pytest.approx(want, rel=RTOL), key
