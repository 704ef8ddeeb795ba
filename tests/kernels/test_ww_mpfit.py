"""WeightWatcher's Marchenko-Pastur fit (``mp_fit=True``) and randomized analysis
(``randomize=True``: rand_num_spikes, num_traps, the randomized ESD's MP fit) against
WeightWatcher 0.7.7 (tests/golden/ww_extras_*.json, run "mp_fit", seeded with
``np.random.seed(0)``): the deterministic columns to 1e-6, the random ones in distribution
(the golden's draw within our seeds' spread, and on the conv net against WeightWatcher's own
randomization over 32 seeds, run in a child process); a planted correlation trap in closed
form."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from _child import json_from_child
from _engine_fields import NA
from diffract.kernels.mpfit import ww_mp_fit
from test_ww_conventions import compare_rows, extras, model_weights, run_ww

MP_FLOAT = {
    "sigma_mp": "mp_fit_sigma",
    "mp_softrank": "mp_fit_soft_rank",
    "bulk_max": "mp_fit_bulk_max",
    "bulk_min": "mp_fit_bulk_min",
    "W_scale": "mp_fit_w_scale",
}
MP_EXACT = {"num_spikes": "mp_fit_num_spikes"}
RAND = {
    "rand_sigma_mp": "rand_mp_fit_sigma",
    "rand_mp_softrank": "rand_mp_fit_soft_rank",
    "rand_bulk_max": "rand_mp_fit_bulk_max",
    "rand_bulk_min": "rand_mp_fit_bulk_min",
    "rand_W_scale": "rand_mp_fit_w_scale",
    "rand_num_spikes": "rand_mp_fit_num_spikes",
    "num_traps": "num_traps",
    "max_rand_eval": "esd_rand_max",
}
#: WeightWatcher fits 4.weight (out 24 < in 32, 2x2 kernel) with its swapped Q = 24/32
MP_QUIRK = {("convnet", "4.weight")}


@pytest.mark.parametrize("which", ["convnet", "minilm"])
def test_mp_fit_equals_weightwatcher(fs, which):
    gold = extras(which)["mp_fit"]
    fields = [*MP_FLOAT.values(), *MP_EXACT.values(), "model_mp_fit_soft_rank", "esd"]
    run, values = run_ww(fs, which, fields)
    assert not run.report.failures, [str(f) for f in run.report.failures]
    rows = {k: r for k, r in gold["rows"].items() if (which, k) not in MP_QUIRK}
    worst, bad = compare_rows(which, values, rows, MP_FLOAT, MP_EXACT)
    assert not bad, "\n".join(bad)
    assert max(worst.values()) < 1e-6
    # the swap quirk's layer: our fit of our ESD at WW's reported (swapped) Q and M is its row
    softs = {k: values[k]["mp_fit_soft_rank"] for k in gold["rows"]}
    for k in (k for w, k in MP_QUIRK if w == which):
        r = gold["rows"][k]
        assert (r["N"], r["M"]) == (24, 32) and values[k]["mp_fit_soft_rank"] != pytest.approx(
            r["mp_softrank"], rel=1e-6
        )  # ours fits the true Q = 32 / 24
        swapped = ww_mp_fit(np.asarray(values[k]["esd"]), r["Q"], r["M"])
        want = [r[c] for c in ("sigma_mp", "num_spikes", "mp_softrank", "bulk_max", "bulk_min")]
        assert list(swapped[:5]) == pytest.approx(want, rel=1e-6)
        assert swapped[5] == pytest.approx(r["W_scale"], rel=1e-6)
        softs[k] = swapped[2]
    # get_summary()'s mp_softrank: the mean of the rows (for the conv net with the swapped fit)
    assert np.mean(list(softs.values())) == pytest.approx(gold["summary"]["mp_softrank"], rel=1e-6)
    if which == "minilm":
        assert values[None]["model_mp_fit_soft_rank"] == pytest.approx(
            gold["summary"]["mp_softrank"], rel=1e-6
        )
        # the issue's example: layer 3's FFN, ours from the entry variance vs the fit
        v = values["encoder.layer.3.intermediate.dense.weight"]
        assert (
            v["mp_fit_num_spikes"]
            == gold["rows"]["encoder.layer.3.intermediate.dense.weight"]["num_spikes"]
        )
    else:  # ours is the mean of our own fits
        mean = np.mean([values[k]["mp_fit_soft_rank"] for k in gold["rows"]])
        assert values[None]["model_mp_fit_soft_rank"] == pytest.approx(mean, rel=1e-12)


def test_mp_fit_is_scale_free(fs):
    w = np.random.default_rng(4).standard_normal((150, 60))
    a = fs.run_fields({"w": w}, [*MP_FLOAT.values(), "esd_ww_ratio"])["w"]
    b = fs.run_fields({"w": w}, list(MP_FLOAT.values()), esd_scale="ww")["w"]
    for f in ("mp_fit_sigma", "mp_fit_soft_rank"):
        assert a[f] == pytest.approx(b[f], rel=1e-9)
    assert a["mp_fit_bulk_max"] * a["esd_ww_ratio"] == pytest.approx(b["mp_fit_bulk_max"])


def test_white_matrix_fits_sigma_one_and_no_spikes():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2000, 500))
    lam = np.linalg.svd(w, compute_uv=False) ** 2
    sigma, spikes, soft, bulk_max, _, _ = ww_mp_fit(lam, 4.0, 500)
    assert sigma == pytest.approx(1.0, abs=0.03)  # mean-1 rescaled white ESD: sigma 1
    assert spikes == 0
    # edge (1 + 1/2)^2 sigma^2 in rescaled units, back in the ESD's: times sum / n
    assert bulk_max == pytest.approx((1.5 * sigma) ** 2 * lam.mean(), rel=1e-12)
    assert soft == pytest.approx(bulk_max / lam.max(), rel=1e-12)


@pytest.mark.parametrize("which", [pytest.param("minilm", marks=pytest.mark.slow), "convnet"])
def test_randomized_columns_agree_in_distribution(fs, which):
    """WeightWatcher permutes with the global NumPy generator, we with a seeded one: for 2-D
    weights the recipe is the same (one uniform permutation of all entries), so per layer
    the trap counts agree and the fitted sigma within 2%. MiniLM (one seed: ~25 s) per
    column, tolerances from the spread of the draws: WW's own two draws of the largest
    randomized eigenvalue (max_rand_eval, and ww_softrank * lambda_max) differ by up to 9%
    per layer, our seeds' rand_distance by up to 19% (pooler.dense), and sums over the 39
    layers by < 0.6% (seeds 0 and 1). The conv net: see the tests below."""
    gold = extras(which)["mp_fit"]["rows"]
    mapping = {**RAND, **RAND_DIST}
    for seed in (0, 1) if which == "convnet" else (0,):  # MiniLM: ~25 s a seed
        run, v = run_ww(fs, which, sorted(set(mapping.values())), seed=seed)
        assert not run.report.failures, [str(f) for f in run.report.failures]

        def col(c, v=v):
            ours = np.array([v[n][mapping[c]] for n in gold], dtype=float)
            return ours, np.array([r[c] for r in gold.values()], dtype=float)

        ours, ww = col("num_traps")
        assert np.array_equal(ours, ww) and np.array_equal(*col("rand_num_spikes"))
        ours, ww = col("rand_sigma_mp")
        fit = np.array([(which, n) not in MP_QUIRK for n in gold])  # 4.weight: WW's swapped Q
        tol = 0.02 if which == "minilm" else 0.25
        assert np.max(np.abs(ours[fit] / ww[fit] - 1)) < tol
        if which == "minilm":
            # per layer: bulk edges as sigma^2; a largest eigenvalue 15%; rand_mp_softrank
            # = rand_bulk_max / max_rand_eval, both; the JS distance 30%
            for c, per_layer in (("rand_bulk_max", 0.03), ("max_rand_eval", 0.15),
                                 ("ww_softrank", 0.15), ("rand_mp_softrank", 0.18),
                                 ("rand_distance", 0.3)):  # fmt: skip
                ours, ww = col(c)
                assert np.max(np.abs(ours / ww - 1)) < per_layer, c
                assert abs(ours.sum() / ww.sum() - 1) < 0.01, c
            ours, ww = col("rand_bulk_min")  # 0 for the square layers (Q = 1), exactly
            square = np.array([r["Q"] == 1 for r in gold.values()])
            assert square.sum() > 10 and np.all(ours[square] == 0) and np.all(ww[square] == 0)
            assert np.max(np.abs(ours[~square] / ww[~square] - 1)) < 0.03
            # ww_maxdist = lambda_max - a largest randomized eigenvalue: that eigenvalue's 15%
            ours, ww = col("ww_maxdist")
            scale = col("max_rand_eval")[1]
            assert np.max(np.abs(ours - ww) / scale) < 0.15
            assert abs(ours.sum() / ww.sum() - 1) < 0.01
            ours, ww = col("rand_W_scale")  # permutation-invariant: exact
            np.testing.assert_allclose(ours, ww, rtol=1e-6)
            assert col("num_traps")[1].sum() == 7  # MiniLM has traps


#: the randomized columns without a seed-free value: WW column -> ours
RAND_DIST = {
    **{c: RAND[c] for c in ("rand_sigma_mp", "rand_mp_softrank", "rand_bulk_max")},
    **{c: RAND[c] for c in ("rand_bulk_min", "max_rand_eval")},
    "ww_softrank": "rand_soft_rank",
    "ww_maxdist": "rand_max_dist",
    "rand_distance": "js_rand_distance",
}
#: the columns WeightWatcher takes from a second randomized ESD of one replica
ONE_REPLICA = {"ww_softrank", "ww_maxdist", "rand_distance"}
#: WeightWatcher pools 5 replicas when n_comp < 100, n_comp = M * rf for Conv2d with its
#: reported M: for 4.weight the swapped M (the N/M swap quirk,
#: test_fields_golden.py::test_ww_nm_swap_quirk_is_documented) gives 32 * 4 = 128, one
#: replica, where the true M gives 24 * 4 = 96, five (ours). There only the one-replica
#: columns are compared in distribution.
REPLICA_QUIRK = {"4.weight"}
SEEDS = 32


@pytest.fixture(scope="module")
def conv_seeded(fs):
    """The conv net's golden rows and our randomized columns per layer, one per seed
    0..SEEDS-1 (about 0.5 s a seed)."""
    gold = extras("convnet")["mp_fit"]["rows"]
    fields = [*RAND.values(), *RAND_DIST.values(), "esd_max", "mp_fit_w_scale", "aspect_ratio"]
    out: dict[str, list] = {n: [] for n in gold}
    for seed in range(SEEDS):
        run, v = run_ww(fs, "convnet", sorted(set(fields)), seed=seed)
        assert not run.report.failures, [str(f) for f in run.report.failures]
        for n in gold:
            out[n].append(v[n])
    return gold, out


def _edge_ratio(q: float) -> float:
    """bulk_min / bulk_max of the MP law at aspect ratio q: ((1 - q^-1/2) / (1 + q^-1/2))^2."""
    r = 1 / math.sqrt(q)
    return ((1 - r) / (1 + r)) ** 2


def test_randomized_deterministic_relations(conv_seeded):
    """What a permutation cannot change, and WeightWatcher's formulas between its randomized
    columns, in the golden and in ours: rand_W_scale = W_scale = sqrt(n / sum lambda) (the
    full randomized spectrum has the same sum: ||W||_F is permutation-invariant);
    rand_bulk_min / rand_bulk_max = the MP edge ratio at Q; rand_mp_softrank =
    rand_bulk_max / max_rand_eval; ww_maxdist = lambda_max (1 - ww_softrank)."""
    for which in ("convnet", "minilm"):
        for n, r in extras(which)["mp_fit"]["rows"].items():
            assert r["rand_W_scale"] == pytest.approx(r["W_scale"], rel=1e-12), n
            edge = r["rand_bulk_max"] * _edge_ratio(r["Q"])
            assert r["rand_bulk_min"] == pytest.approx(edge, rel=1e-9, abs=1e-300), n
            soft = r["rand_bulk_max"] / r["max_rand_eval"]
            assert r["rand_mp_softrank"] == pytest.approx(soft, rel=1e-9), n
            dist = r["lambda_max"] * (1 - r["ww_softrank"])
            assert r["ww_maxdist"] == pytest.approx(dist, rel=1e-9, abs=1e-12), n
    gold, ours = conv_seeded
    for n, r in gold.items():
        for v in ours[n]:
            assert v["rand_mp_fit_w_scale"] == pytest.approx(r["rand_W_scale"], rel=1e-6), n
            assert v["rand_mp_fit_w_scale"] == pytest.approx(v["mp_fit_w_scale"], rel=1e-12)
            edge = v["rand_mp_fit_bulk_max"] * _edge_ratio(v["aspect_ratio"])
            assert v["rand_mp_fit_bulk_min"] == pytest.approx(edge, rel=1e-9), n
            soft = v["rand_mp_fit_bulk_max"] / v["esd_rand_max"]
            assert v["rand_mp_fit_soft_rank"] == pytest.approx(soft, rel=1e-9), n
            dist = v["esd_max"] * (1 - v["rand_soft_rank"])
            assert v["rand_max_dist"] == pytest.approx(dist, rel=1e-9, abs=1e-15), n


_WW_RANDOM_SCRIPT = """
import json, sys, io, contextlib, logging
from types import SimpleNamespace
import numpy as np
req = json.loads(sys.stdin.read())
seeds = req.pop("__seeds__")
with contextlib.redirect_stdout(io.StringIO()):
    import weightwatcher as ww
    from weightwatcher.constants import CHANNELS
    from weightwatcher.weightwatcher import WWLayer
    logging.disable(logging.CRITICAL)
    watcher = ww.WeightWatcher()
    layer = SimpleNamespace(channels=CHANNELS.UNKNOWN, channel_str=str)
    out = {}
    for name, w in req.items():
        w = np.asarray(w, dtype=np.float64)
        if w.ndim == 4:  # WW's kernel-position slices; n_comp = M * rf, its (swapped) M
            mats, n, m, rf = WWLayer.conv2D_Wmats(layer, w)
            n_comp = m * rf
        else:
            mats, n_comp = [w], min(w.shape)
        reps = 5 if n_comp < 100 else 1  # apply_random_esd's replicas
        evals = np.sort(np.concatenate([np.linalg.svd(x, compute_uv=False) ** 2 for x in mats]))
        rows = []
        for seed in range(seeds):
            np.random.seed(seed)
            pool = watcher.random_eigenvalues(mats, n_comp, reps)  # max_rand_eval, MP fit
            one = watcher.random_eigenvalues(mats, n_comp, 1)  # ww_softrank, rand_distance
            rows.append([pool.tolist(), one.tolist()])
        out[name] = {"evals": evals.tolist(), "draws": rows}
print(json.dumps(out))
"""


def _weightwatcher_draws(seeds: int) -> dict:
    """WeightWatcher 0.7.7's own randomized ESDs of the conv net (its conv2D_Wmats and
    random_eigenvalues, called as its apply_random_esd does) for ``seeds`` seeds of
    np.random, in a child process: per layer its ESD and, per seed, the pooled replicas'
    randomized ESD and the one-replica one."""
    rows = extras("convnet")["mp_fit"]["rows"]
    weights = {"__seeds__": seeds, **{n: model_weights("convnet")[n].tolist() for n in rows}}
    return json_from_child(_WW_RANDOM_SCRIPT, weights)


#: the scale-free randomized columns the recipe test compares (WW's names)
SCALE_FREE = ("rand_sigma_mp", "rand_mp_softrank", "max_rand_eval/lambda_max", "ww_softrank",
              "rand_distance")  # fmt: skip


def _scale_free_ww(evals, pool, one, q, m) -> list[float]:
    """:data:`SCALE_FREE` of one WeightWatcher draw: the MP fit of the pool (the fit is
    checked against WW's to 1e-6 above), and its Jensen-Shannon rand_distance formula."""
    sigma, _, soft, *_ = ww_mp_fit(pool, q, m)
    mid = (evals / evals.sum() + one / one.sum()) / 2
    js = math.sqrt((stats.entropy(evals, mid) + stats.entropy(one, mid)) / 2)
    return [sigma, soft, pool.max() / evals.max(), one.max() / evals.max(), js]


def _scale_free_ours(v) -> list[float]:
    return [v["rand_mp_fit_sigma"], v["rand_mp_fit_soft_rank"], v["esd_rand_max"] / v["esd_max"],
            v["rand_soft_rank"], v["js_rand_distance"]]  # fmt: skip


def test_randomized_conv_net_follows_weightwatchers_recipe(conv_seeded):
    """Ours over SEEDS seeds against WeightWatcher's own randomization of the same weights
    over SEEDS seeds of np.random (each kernel-position matrix shuffled alone; 5 replicas
    pooled when its n_comp = M * rf < 100, else 1): per layer and scale-free column the
    means agree within 4 standard errors of their difference and a two-sample KS test does
    not reject at 1e-3. (Calibration, 32 seeds: WW's recipe emulated with our options gives
    |z| <= 1.4 and KS p >= 0.27; 5 replicas where WW pools 1, as 2.weight with
    M = 16 < 100 but n_comp = 144, gives z up to 5.7 and p <= 1e-4.)"""
    gold, ours = conv_seeded
    theirs = _weightwatcher_draws(SEEDS)
    bad = []
    for n, r in gold.items():
        evals = np.asarray(theirs[n]["evals"])
        b = np.array([_scale_free_ww(evals, np.asarray(p), np.asarray(o), r["Q"], r["M"])
                      for p, o in theirs[n]["draws"]])  # fmt: skip
        a = np.array([_scale_free_ours(v) for v in ours[n]])
        se = np.sqrt(a.var(axis=0, ddof=1) / len(a) + b.var(axis=0, ddof=1) / len(b))
        for j, col in enumerate(SCALE_FREE):
            if n in REPLICA_QUIRK and col not in ONE_REPLICA:
                continue
            z = (a[:, j].mean() - b[:, j].mean()) / se[j]
            p = stats.ks_2samp(a[:, j], b[:, j]).pvalue
            if not (abs(z) < 4 and p > 1e-3):
                bad.append(f"{n} {col}: ours {a[:, j].mean():.4g} +- {a[:, j].std():.2g}, "
                           f"WW {b[:, j].mean():.4g} +- {b[:, j].std():.2g} (z {z:+.1f}, KS p {p:.1g})")  # fmt: skip
    assert not bad, "\n".join(bad)


def test_randomized_conv_net_golden_within_our_spread(conv_seeded):
    """The golden's one WeightWatcher draw (np.random.seed(0)) of each randomized column,
    in ESD units too, lies within 4 standard deviations of our SEEDS seeded values
    (rand_W_scale is exact: test_randomized_deterministic_relations)."""
    gold, ours = conv_seeded
    bad = []
    for n, r in gold.items():
        for col, f in RAND_DIST.items():
            if n in REPLICA_QUIRK and col not in ONE_REPLICA:
                continue
            a = np.array([v[f] for v in ours[n]], dtype=float)
            if not abs(r[col] - a.mean()) < 4 * a.std(ddof=1):
                bad.append(f"{n} {col}: WW {r[col]:.4g} ours {a.mean():.4g} +- {a.std(ddof=1):.2g}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_planted_correlation_traps(fs, k):
    """A white 400 x 200 matrix with k planted entries of size 60 (60^2 = 3600 against a
    white bulk edge of (sqrt(400) + sqrt(200))^2 = 1166 in s^2 units): permuting the entries
    keeps them, so the randomized ESD has exactly k spikes, each near the rank-one
    (Benaych-Georges & Nadakuditi) value (v^2 + N)(v^2 + M) / v^2 = 4222."""
    rng = np.random.default_rng(10 + k)
    w = rng.standard_normal((400, 200))
    rows = rng.choice(400, size=k, replace=False)
    cols = rng.choice(200, size=k, replace=False)
    w[rows, cols] = 60.0
    v = fs.run_fields({"w": w}, ["num_traps", "esd_rand", "rand_mp_fit_sigma"], esd_scale="none")
    g = v["w"]
    assert g["num_traps"] == k
    top = np.sort(g["esd_rand"])[::-1]
    if k:
        np.testing.assert_allclose(top[:k], (3600 + 400) * (3600 + 200) / 3600, rtol=0.05)
    assert top[k] < 1166 * 1.15  # the rest is bulk
    assert g["rand_mp_fit_sigma"] is not NA
