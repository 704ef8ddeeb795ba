"""``diffract analyze`` prints the diagnosis block; ``%diffract diagnose`` the same lines."""

from __future__ import annotations

import numpy as np

from diffract.cli import main


def _checkpoint(path):
    rng = np.random.default_rng(5)
    lam = (1.0 - rng.uniform(size=60)) ** (-1.0 / 0.5)  # ESD exponent 1.5: over-trained
    u, _ = np.linalg.qr(rng.normal(size=(200, 60)))
    v, _ = np.linalg.qr(rng.normal(size=(60, 60)))
    np.savez(
        path,
        **{
            "heavy.weight": ((u * np.sqrt(lam)) @ v.T).astype(np.float32),
            "gauss.weight": rng.normal(size=(200, 60)).astype(np.float32),
        },
    )


def test_analyze_prints_the_diagnosis(in_tmp, capsys):
    _checkpoint("m.npz")
    assert main(["analyze", "m.npz", "--quiet"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("diagnosis of m: ") :].splitlines()
    assert block[0].startswith("diagnosis of m: 2 of 2 layers flagged (over-trained 1, ")
    heavy = next(ln for ln in block if ln.strip().startswith("heavy.weight:"))
    assert "over-trained (alpha " in heavy and " < 2)" in heavy
    gauss = next(ln for ln in block if ln.strip().startswith("gauss.weight:"))
    assert "under-trained (alpha " in gauss and "over-trained" not in gauss


def test_analyze_diagnosis_flags(in_tmp, capsys):
    _checkpoint("m.npz")
    assert main(["analyze", "m.npz", "--quiet", "--no-diagnosis"]) == 0
    assert "diagnosis" not in capsys.readouterr().out
    assert main(["analyze", "m.npz", "--quiet", "--fields", "frob_norm"]) == 0
    assert "diagnosis" not in capsys.readouterr().out  # --fields: only those
    assert main(["analyze", "m.npz", "--quiet", "--fields", "frob_norm", "--diagnose"]) == 0
    assert "diagnosis of m: 2 of 2 layers flagged" in capsys.readouterr().out


def test_magic_diagnose(in_tmp, capsys):
    from IPython.testing.globalipapp import get_ipython

    from diffract import Session

    ip = get_ipython()
    ip.extension_manager.load_extension("diffract")
    _checkpoint("m.npz")
    session = Session(profile="ram")
    ip.user_ns["session"] = session
    session.models.add("m.npz", model_id="m")
    ip.run_line_magic("diffract", "diagnose --models m")
    out = capsys.readouterr().out
    assert "diagnosis of m: 2 of 2 layers flagged" in out
    assert session.results.export_table("diag_over_trained", export_format="list")
