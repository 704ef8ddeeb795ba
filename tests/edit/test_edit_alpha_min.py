"""``svd_smoothing(method="alpha_min")``: WeightWatcher 0.7.7's ``SVDSmoothing(method=
"alpha_min")`` keeps each layer's power-law tail (its ``num_pl_spikes`` components); ours
equals its smoothed conv net (WeightWatcher run in a child process, so that its import cannot
change this process's logging) and keeps exactly ``pl_num_spikes`` components of a matrix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import diffract

GOLDEN = Path(__file__).parents[1] / "golden"
ROOT = Path(__file__).resolve().parents[2]

_WW_SCRIPT = """
import sys, io, contextlib, logging
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import numpy as np, torch
from make_golden import convnet
with contextlib.redirect_stdout(io.StringIO()):
    import weightwatcher as ww
    logging.disable(logging.CRITICAL)
    net = convnet()
    sd = dict(np.load(sys.argv[1] + "/tests/golden/convnet.npz"))
    net.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
    new = ww.WeightWatcher().SVDSmoothing(model=net, method="alpha_min")
np.savez(sys.argv[2], **{k: v.detach().numpy() for k, v in new.state_dict().items()})
"""


def test_alpha_min_equals_weightwatchers_smoothing(tmp_path):
    out = tmp_path / "ww.npz"
    proc = subprocess.run(
        [sys.executable, "-c", _WW_SCRIPT, str(ROOT), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = dict(np.load(out))
    original = dict(np.load(GOLDEN / "convnet.npz"))
    ours = diffract.svd_smoothing(original, method="alpha_min")
    changed = 0
    for k, w in original.items():
        if w.ndim < 2:
            np.testing.assert_array_equal(ours[k], w)
            continue
        np.testing.assert_allclose(
            ours[k], theirs[k], rtol=0, atol=5e-5 * np.abs(w).max()
        )  # float32 SVDs
        changed += not np.allclose(ours[k], w, atol=1e-4 * np.abs(w).max())
    assert changed >= 3  # the tails are short: most layers lose components


def test_alpha_min_keeps_the_power_law_tail(fs):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((300, 120)) @ np.diag(rng.pareto(2.0, 120) + 1.0)
    spikes = fs.run_fields({"w": w}, ["pl_num_spikes"], esd_scale="ww")["w"]["pl_num_spikes"]
    assert 0 < spikes < 120
    s = np.linalg.svd(diffract.svd_smoothing({"w": w}, method="alpha_min")["w"], compute_uv=False)
    assert np.count_nonzero(s > 1e-8 * s[0]) == spikes
    np.testing.assert_allclose(s[:spikes], np.linalg.svd(w, compute_uv=False)[:spikes])


def test_unknown_method_lists_alpha_min():
    with pytest.raises(diffract.InvalidArgumentError, match="alpha_min"):
        diffract.svd_smoothing({"w": np.eye(4)}, method="lambda_min")
