"""Record Diffract 0.3.1's values of the fields it shares with us, on fixed matrices.

Run with the Python that has ``diffract-core==0.3.1`` installed (not this repo's package):

    /path/to/py312-venv/bin/python scripts/golden_diffract_fields.py

It writes ``tests/golden/diffract_fields.npz`` (the input matrices of two models) and
``tests/golden/diffract_fields.json`` (Diffract's values: per parameter, per model, and
across the pair), which ``tests/kernels/test_fields_diffract_golden.py`` compares with ours.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden"

#: parameter-level fields compared (the heavy-tailed fits are left to their own goldens)
PARAM_FIELDS = [
    "greater_dim",
    "lower_dim",
    "aspect_ratio",
    "weights_std",
    "weights_svals",
    "max_weights_sval",
    "min_weights_sval",
    "esd",
    "esd_max",
    "esd_min",
    "weights_rand",
    "weights_rand_svals",
    "max_weights_rand_sval",
    "min_weights_rand_sval",
    "esd_rand",
    "esd_rand_max",
    "esd_rand_min",
    "frob_norm",
    "l2_norm",
    "nuclear_norm",
    "hard_rank",
    "stable_rank",
    "effective_rank",
    "mp_esd_max",
    "mp_esd_min",
    "mp_bulk_std",
    "mp_sval_max",
    "mp_ks",
    "mp_num_spikes",
    "mp_concentration",
    "mp_presence",
    "mp_soft_rank",
    "tw_esd_bound",
    "tw_num_spikes",
    "w1_rand_distance",
]
MODEL_FIELDS = [
    "param_norm",
    "log_norm",
    "log_spectral_norm",
    "log_prod_frob_norm",
    "log_prod_spectral_norm",
]
CROSS_FIELDS = [
    "l_overlap",
    "r_overlap",
    "l_agreement",
    "r_agreement",
    "max_l_agreement",
    "max_r_agreement",
    "avg_l_agreement",
    "avg_r_agreement",
    "avg_max_l_agreement",
    "avg_max_r_agreement",
]

#: the parameters whose overlap matrices are recorded
OVERLAP_KEPT = ("lowrank", "spiked")


def matrices() -> dict[str, np.ndarray]:
    """Model ``m1``: square Gaussian, a spiked 64 x 32, wide, low rank plus noise, a 48 x 48
    with one singular value at 1e-3 (hard_rank 47, numpy's rank 48), a heavy spike that
    makes the randomized ESD leave the MP edge (the bulk re-estimated)."""
    rng = np.random.default_rng(0)
    spiked = rng.standard_normal((64, 32)) * 0.1
    spiked[:, 0] *= 30
    u = rng.standard_normal((40, 3))
    low = u @ rng.standard_normal((3, 25)) + 0.01 * rng.standard_normal((40, 25))
    q1 = np.linalg.qr(rng.standard_normal((48, 48)))[0]
    q2 = np.linalg.qr(rng.standard_normal((48, 48)))[0]
    small = (q1 * np.array([*np.linspace(1.0, 2.0, 47), 1e-3])) @ q2.T
    outlier = rng.standard_normal((50, 20))
    outlier[3, 4] = 80.0
    return {
        "gauss": rng.standard_normal((48, 48)),
        "spiked": spiked,
        "wide": rng.standard_normal((30, 50)),
        "lowrank": low,
        "small_sval": small,
        "outlier": outlier,
    }


def _plain(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    import diffract
    from diffract import Session

    m1 = matrices()
    rng = np.random.default_rng(1)
    m2 = {k: v + 0.3 * float(np.std(v)) * rng.standard_normal(v.shape) for k, v in m1.items()}
    np.savez(GOLDEN / "diffract_fields.npz", **{f"m1/{k}": v for k, v in m1.items()},
             **{f"m2/{k}": v for k, v in m2.items()})  # fmt: skip
    s = Session()
    s.models.add(m1, model_id="m1")
    s.models.add(m2, model_id="m2")
    one = s.filter(model_ids=["m1"])
    params: dict[str, dict] = {}
    for f in PARAM_FIELDS:
        one.compute.apply(f)
        for rec in one.results.export_metrics(f, export_format="dict").values():
            params.setdefault(rec["metadata"]["name"], {})[f] = rec["fields"][f]
    models: dict[str, dict] = {}
    for f in MODEL_FIELDS:
        s.compute.apply(f)
        for rec in s.results.export_aggregates(f, export_format="list"):
            models.setdefault(rec["context_models"][0], {})[f] = rec["value"]
    cross: dict[str, dict] = {}
    for f in CROSS_FIELDS:
        s.compute.apply(f)
        for rec in s.results.export_aggregates(f, export_format="list"):
            assert list(rec["context_models"]) == ["m1", "m2"], rec["context_models"]
            name = rec["context_params"][0]
            if f.endswith("_overlap") and name not in OVERLAP_KEPT:
                continue  # k x k matrices: two are enough, the file stays small
            cross.setdefault(name, {})[f] = rec["value"]
    out = {
        "diffract_version": diffract.__version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "param": params,
        "model": models,
        "cross": cross,
    }
    (GOLDEN / "diffract_fields.json").write_text(
        json.dumps(_plain(out), separators=(",", ":")) + "\n"
    )


if __name__ == "__main__":
    main()
