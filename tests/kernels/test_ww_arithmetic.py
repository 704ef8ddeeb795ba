"""WeightWatcher 0.7.7's arithmetic under ``conventions="weightwatcher"`` (issue 31 points
2-4), against WeightWatcher itself run in a child process on constructed inputs; by default
ours stays (the exact comparison, our threshold, no conv2d_norm):

* detX: its ``np.prod`` of the tail over- or underflows on large layers (``detx_product``);
* ``intra=True``: it cuts the singular values of a product at 1e-5 (``intra_thresh_on``);
* ``pool=False``: ``weak_rank_loss`` of a kernel-position matrix after its conv2d_norm
  (scaled by sqrt(P / 2)) (``weak_rank_conv2d_norm``)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from _child import json_from_child
from diffract import Session
from diffract.kernels.conventions import CONVENTIONS

torch = pytest.importorskip("torch")

_WW_SCRIPT = r"""
import contextlib, io, json, logging, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
req = json.loads(sys.stdin.read())
with contextlib.redirect_stdout(io.StringIO()):
    import torch
    import weightwatcher as ww
    from weightwatcher.RMT_Util import detX_constraint, rescale_eigenvalues
    logging.disable(logging.CRITICAL)
    out = {"detx": []}
    for evals in req["detx"]:
        x, _ = rescale_eigenvalues(np.sort(np.asarray(evals, dtype=np.float64)))
        out["detx"].append(list(map(int, detX_constraint(x, rescale=False))))
    def net(state):
        m = torch.nn.Sequential(*[eval(spec) for spec in req["modules"]])
        m.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in state.items()})
        return m
    m = net(req["state"])
    for run, kwargs in (("intra", {"intra": True, "sparsify": False}), ("pool", {"pool": False})):
        np.random.seed(0)
        d = ww.WeightWatcher(model=m).analyze(**kwargs)
        out[run] = [{"name": str(r["longname"]), "slice_id": int(r.get("slice_id", 0) or 0),
                     "alpha": float(r["alpha"]), "xmin": float(r["xmin"]),
                     "weak_rank_loss": int(r["weak_rank_loss"]),
                     "layer_type": str(r["layer_type"])} for _, r in d.iterrows()]
print(json.dumps(out))
"""

MODULES = [
    "torch.nn.Conv2d(16, 32, 3)",
    "torch.nn.Conv2d(32, 24, 3)",
    "torch.nn.Linear(24, 40)",
    "torch.nn.Linear(40, 30)",
]


def _decaying(rng, shape, decades):
    """A matrix with singular values geometric from 1 down to 10^-decades."""
    u, _ = np.linalg.qr(rng.standard_normal((shape[0], shape[0])))
    v, _ = np.linalg.qr(rng.standard_normal((shape[1], shape[1])))
    k = min(shape)
    return (u[:, :k] * np.geomspace(1.0, 10.0**-decades, k)) @ v[:, :k].T


@functools.cache
def net_state() -> dict[str, np.ndarray]:
    """The weights of MODULES, each kernel position (and dense matrix) with singular values
    spread over 4 decades: products and positions with eigenvalues near the cuts."""
    rng = np.random.default_rng(7)
    state = {}
    for i, spec in enumerate(MODULES):
        if "Conv2d" in spec:
            cin, cout = map(int, spec.split("(")[1].split(",")[:2])
            w = np.stack([_decaying(rng, (cout, cin), 4) for _ in range(9)], axis=-1).reshape(
                cout, cin, 3, 3
            )
        else:
            cin, cout = map(int, spec.split("(")[1].rstrip(")").split(","))
            w = _decaying(rng, (cout, cin), 4)
        state[f"{i}.weight"] = w.astype(np.float32)
        state[f"{i}.bias"] = np.zeros(cout, dtype=np.float32)
    return state


def _detx_inputs() -> list[list[float]]:
    rng = np.random.default_rng(0)
    return [
        np.exp(rng.normal(0, sd, n)).tolist() for sd, n in ((1.0, 4608), (2.0, 4608), (0.5, 300))
    ]


@functools.cache
def weightwatcher() -> dict:
    """WeightWatcher 0.7.7 on the inputs, in a child process."""
    req = {
        "detx": _detx_inputs(),
        "modules": MODULES,
        "state": {k: v.tolist() for k, v in net_state().items()},
    }
    return json_from_child(_WW_SCRIPT, req)


def _model():
    m = torch.nn.Sequential(*[eval(spec) for spec in MODULES])
    m.load_state_dict({k: torch.from_numpy(v) for k, v in net_state().items()})
    return m


def test_the_convention_sets_the_three_options():
    ww, ours = CONVENTIONS["weightwatcher"], CONVENTIONS["diffract"]
    assert (ww["detx_product"], ww["intra_thresh_on"], ww["weak_rank_conv2d_norm"]) == (
        "ww", "svals", True,
    )  # fmt: skip
    assert (ours["detx_product"], ours["intra_thresh_on"], ours["weak_rank_conv2d_norm"]) == (
        "log_sum", "evals", False,
    )  # fmt: skip


def test_detx_equals_weightwatchers_products():
    gold = weightwatcher()["detx"]
    with Session(profile="ram") as s:
        for i, evals in enumerate(_detx_inputs()):
            # a diagonal matrix whose ESD (esd_scale="ww": s^2) is these eigenvalues
            s.models.add({"w": np.diag(np.sqrt(evals))}, model_id=f"m{i}")
        fields = ("detx_num_spikes", "detx_rescaled_val")
        s.compute.apply(*fields, conventions="weightwatcher", precision="float64", progress=False)
        ww_num = [s.results.get("detx_num_spikes", "w", f"m{i}") for i in range(3)]
        s.compute.erase("detx_num_spikes", "detx_rescaled_val")
        s.compute.apply(*fields, precision="float64", progress=False)
        ours = [s.results.get("detx_num_spikes", "w", f"m{i}") for i in range(3)]
    assert ww_num == [num for num, _ in gold]
    # the products overflow (inf: counted as not below 1) on the two large spectra, so
    # WeightWatcher's count is not the exact one there; the small one agrees
    exact = []
    for evals in _detx_inputs():
        lam = np.sort(evals)
        x = lam * (lam.size / lam.sum())
        tail = np.cumsum(np.log(x)[::-1])[::-1]
        exact.append(int(lam.size - np.flatnonzero(tail[1:] < 0)[-1] - 1))
    assert ours == exact
    assert ours[0] != ww_num[0] and ours[1] != ww_num[1] and ours[2] == ww_num[2]


def _intra_values(conventions):
    with Session(profile="ram") as s:
        s.models.add(_model(), "n", intra=True)
        kw = {"conventions": conventions} if conventions else {"min_evals": 8}
        report = s.compute.apply(
            "pl_alpha", "pl_esd_xmin", progress=False, precision="float64", **kw
        )
        assert not report.failures, [str(f) for f in report.failures]
        names = [x.name for x in s.models.slices() if x.name.startswith("intra:")]
        return {
            n: (s.results.get("pl_alpha", n, "n"), s.results.get("pl_esd_xmin", n, "n"))
            for n in names
        }


def test_intra_cut_on_singular_values():
    rows = {r["name"]: r for r in weightwatcher()["intra"]}
    ww_vals = _intra_values("weightwatcher")
    default = _intra_values(None)
    assert len(ww_vals) == len(rows) == 3
    differs = 0
    for name, (alpha, _xmin) in ww_vals.items():
        row = rows[name.split(":")[2].removesuffix(".weight")]  # WW names a pair by its second
        # WW's ESD of a product is s, not s^2: alpha_WW = 2 alpha - 1
        # (tests/test_extract_derived_ww.py); its cut is s > 1e-5 (s / sqrt(2) after a conv).
        # WW multiplies the float32 weights in float32 (sgemm), ours in float64: alpha
        # agrees to 1e-8..1e-6 depending on the CPU's BLAS kernel (1.0e-6 on SkylakeX),
        # while the default cut moves it by 3-21%: 1e-5 tells the two apart
        assert row["alpha"] == pytest.approx(2 * alpha - 1, rel=1e-5), name
        differs += default[name][0] != pytest.approx(alpha, rel=1e-5)
    assert differs == 3  # the default cut (on s^2) leaves out singular values WW fits


def test_pool_false_weak_rank_loss_after_conv2d_norm():
    rows = weightwatcher()["pool"]
    gold = {}
    for r in rows:
        layer = r["name"]
        key = (
            f"{layer}.weight:{r['slice_id']}" if r["layer_type"] == "conv2d" else f"{layer}.weight"
        )
        gold[key] = r["weak_rank_loss"]

    def run(**kw):
        with Session(profile="ram") as s:
            s.models.add(_model(), "n", pool=False)
            s.compute.apply("weak_rank_loss", progress=False, precision="float64", **kw)
            return {k: s.results.get("weak_rank_loss", k, "n") for k in gold}

    ww_vals = run(conventions="weightwatcher")
    ours = run()
    assert ww_vals == gold
    assert sum(ours[k] != gold[k] for k in gold) >= 3  # positions in (1e-6 / 4.5, 1e-6)
