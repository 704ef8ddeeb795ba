"""Fine-tune diff on constructed models: base + rank-r update + noise of known sigma, and a
base + full-rank update. References: the construction itself (ranks, energies, which layers
got an update) and the spiked-model closed form of Benaych-Georges & Nadakuditi (2012)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

import diffract
from diffract.finetune import spectrum

SIGMA = 0.01
# layer -> (m, n, rank of the update, largest signal singular value)
LAYERS = {
    "l0.weight": (256, 384, 4, 3.0),
    "l1.weight": (320, 320, 8, 2.0),
    "l2.weight": (200, 500, 1, 1.0),
    "l3.weight": (256, 256, 16, 1.5),
}


def _orth(rng: np.random.Generator, n: int, r: int) -> np.ndarray:
    return np.linalg.qr(rng.standard_normal((n, r)))[0]


def _models(seed: int = 0):
    """base, tuned, and the known parts: per layer the signal L, the noise N, theta_i."""
    rng = np.random.default_rng(seed)
    base, tuned, known = {}, {}, {}
    for name, (m, n, r, top) in LAYERS.items():
        w = rng.standard_normal((m, n)) / math.sqrt(n)
        theta = np.linspace(top, top / 2, r)
        sig = _orth(rng, m, r) @ np.diag(theta) @ _orth(rng, n, r).T
        noise = SIGMA * rng.standard_normal((m, n))
        base[name], tuned[name] = w, w + sig + noise
        known[name] = (sig, noise, theta)
    # an untouched layer and a bias (1-D: skipped)
    base["l4.weight"] = tuned["l4.weight"] = rng.standard_normal((64, 96))
    base["l0.bias"], tuned["l0.bias"] = np.zeros(256), np.ones(256)
    return base, tuned, known


@pytest.fixture(scope="module")
def lowrank():
    base, tuned, known = _models()
    return diffract.diff(base, tuned), base, known


def test_recovers_rank_and_low_rank_call(lowrank) -> None:
    res, _, _ = lowrank
    t = res.table
    for name, (_, _, r, _) in LAYERS.items():
        assert t.loc[name, "signal_rank"] == r, name
        assert t.loc[name, "update_kind"] == "low-rank", name
        assert bool(t.loc[name, "low_rank"])
        # the noise level comes back from the median (Gavish & Donoho); the spikes push the
        # bulk up a little (4% at 16 spikes of 256), hence 5%
        assert t.loc[name, "noise_sigma"] == pytest.approx(SIGMA, rel=0.05)
    assert t.loc["l4.weight", "update_kind"] == "unchanged"
    assert "l0.bias" in res.skipped
    assert res.summary["low_rank"] == 4 and res.summary["unchanged"] == 1


def test_signal_share_against_known_energies(lowrank) -> None:
    """The share above the MP edge is ||L||^2 / ||L + N||^2 up to the spiked-model bias: an
    outlier of signal theta sits at s^2 = (theta^2 + sigma^2 m)(theta^2 + sigma^2 n) / theta^2
    (Benaych-Georges & Nadakuditi 2012), i.e. each spike also carries sigma^2 (m + n) +
    sigma^4 m n / theta^2 of noise energy. The tolerance is that bias plus 1% (fluctuations)."""
    res, _, known = lowrank
    t = res.table
    for name, (sig, noise, theta) in known.items():
        m, n = sig.shape
        total = float(((sig + noise) ** 2).sum())
        true_share = float((sig**2).sum()) / total
        s2 = (theta**2 + SIGMA**2 * m) * (theta**2 + SIGMA**2 * n) / theta**2
        predicted = float(s2.sum()) / total
        bias = predicted - true_share
        got = t.loc[name, "signal_share"]
        assert got == pytest.approx(predicted, abs=0.01), name
        assert abs(got - true_share) <= bias + 0.01, name
        assert got > true_share - 0.01  # the edge keeps every spike


def test_changed_layers_ranked(lowrank) -> None:
    res, base, known = lowrank
    rel = {
        name: np.linalg.norm(sig + noise) / np.linalg.norm(base[name])
        for name, (sig, noise, _) in known.items()
    }
    expected = sorted(rel, key=rel.get, reverse=True)
    ranked = [r["name"] for r in res.ranked()]
    assert ranked[: len(expected)] == expected
    assert ranked[-1] == "l4.weight"
    assert res.summary["most_changed"] == expected
    for name in expected:
        assert res.table.loc[name, "rel_change"] == pytest.approx(rel[name], rel=1e-9)


def test_norm_ratio_and_overlap(lowrank) -> None:
    res, base, _ = lowrank
    t = res.table
    tuned = _models()[1]
    for name in LAYERS:
        ratio = np.linalg.norm(tuned[name]) / np.linalg.norm(base[name])
        assert t.loc[name, "norm_ratio"] == pytest.approx(ratio, rel=1e-9)
        assert 0.0 <= t.loc[name, "subspace_overlap"] <= 1.0
    assert t.loc["l4.weight", "subspace_overlap"] == pytest.approx(1.0)


def test_full_rank_update_is_full_rank() -> None:
    rng = np.random.default_rng(3)
    m, n = 256, 384
    base = {"a.weight": rng.standard_normal((m, n)) / math.sqrt(n)}
    for s in (np.arange(1, m + 1) ** -0.5, np.linspace(1, 0.01, m), 1 / np.arange(1, m + 1)):
        upd = _orth(rng, m, m) @ np.diag(0.1 * s) @ _orth(rng, n, m).T
        res = diffract.diff(base, {"a.weight": base["a.weight"] + upd})
        row = res.rows[0]
        assert row["update_kind"] == "full-rank" and not row["low_rank"]
    # a dense update of rank 80 (> 10% of 256) without noise: full-rank, rank recovered
    upd = _orth(rng, m, 80) @ _orth(rng, n, 80).T * 0.1
    row = diffract.diff(base, {"a.weight": base["a.weight"] + upd}).rows[0]
    assert row["update_kind"] == "full-rank" and row["signal_rank"] == 80


def test_pure_noise_update_is_noise() -> None:
    """An i.i.d. update: nothing above the edge (its Tracy-Widom margin is 99%: 20 draws)."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((256, 384))
    kinds = [
        diffract.diff({"a": w}, {"a": w + 0.01 * rng.standard_normal(w.shape)}).rows[0]
        for _ in range(20)
    ]
    assert sum(r["update_kind"] == "noise" and r["signal_rank"] == 0 for r in kinds) >= 19


def test_exact_lora_update_float32() -> None:
    """A LoRA update with no noise but the float32 rounding of the weights: rank r exactly."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((128, 192)).astype(np.float32)
    b, a = rng.standard_normal((128, 6)), rng.standard_normal((6, 192))
    tuned = (w + 0.05 * b @ a).astype(np.float32)
    row = diffract.diff({"x": w}, {"x": tuned}).rows[0]
    assert row["signal_rank"] == 6 and row["update_kind"] == "low-rank"
    assert row["signal_share"] > 0.999


def test_mp_median_matches_gavish_donoho() -> None:
    """omega(beta) = lambda*(beta) / sqrt(mu_beta) (Gavish & Donoho 2014, eq. (11)); their
    table gives omega(1) = 2.858 and mu_1 = 0.6528; and the median of simulated noise."""
    assert spectrum.mp_median(1.0) == pytest.approx(0.6528, abs=1e-3)
    for beta in (0.25, 0.5, 1.0):
        lam = math.sqrt(
            2 * (beta + 1) + 8 * beta / ((beta + 1) + math.sqrt(beta**2 + 14 * beta + 1))
        )
        omega = 0.56 * beta**3 - 0.95 * beta**2 + 1.82 * beta + 1.43  # their fit, within 0.002
        assert lam / math.sqrt(spectrum.mp_median(beta)) == pytest.approx(omega, abs=0.005)
    rng = np.random.default_rng(6)
    z = rng.standard_normal((300, 600))
    s = np.linalg.svd(z, compute_uv=False)
    assert np.median(s**2 / 600) == pytest.approx(spectrum.mp_median(0.5), rel=0.02)


def test_cli_diff_writes_html_with_figure_data(tmp_path, capsys) -> None:
    from diffract.cli import main

    base, tuned, _ = _models()
    pb, pt = tmp_path / "base.npz", tmp_path / "tuned.npz"
    np.savez(pb, **base)
    np.savez(pt, **tuned)
    out = tmp_path / "diff.html"
    assert main(["diff", str(pb), str(pt), "-o", str(out)]) == 0
    text = out.read_text()
    assert "<script src=" not in text and len(text) > 1_000_000  # offline: Plotly inline
    specs = [
        json.loads(m.replace("<\\/", "</"))
        for m in re.findall(r"var f=(\{.*?\});Plotly\.newPlot", text)
    ]
    assert specs, "no figure in the report"
    names = {
        x for spec in specs for tr in spec["data"] for x in tr.get("x", []) if isinstance(x, str)
    }
    assert set(LAYERS) <= names
    ys = {
        tr["name"]: dict(zip(tr["x"], tr["y"], strict=True))
        for spec in specs
        for tr in spec["data"]
        if tr.get("name") == "relative change"
    }
    res = diffract.diff(base, tuned)
    for name in LAYERS:
        assert ys["relative change"][name] == pytest.approx(res.table.loc[name, "rel_change"])
    assert "low-rank" in text and "l1.weight" in text
    capsys.readouterr()
    assert main(["diff", str(pb), str(pt), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in data["rows"]}
    assert {n: by_name[n]["signal_rank"] for n in LAYERS} == {n: v[2] for n, v in LAYERS.items()}
    assert data["summary"]["low_rank"] == 4 and "l0.bias" in data["skipped"]


def test_session_results_diff_and_panel(tmp_path) -> None:
    base, tuned, _ = _models()
    s = diffract.Session(profile="ram")
    s.models.add(base, "base")
    s.models.add(tuned, "tuned")
    res = s.results.diff("base", "tuned")
    assert res.table.loc["l1.weight", "signal_rank"] == 8
    from diffract.viz import registry

    spec = registry.build(s, "diff", models=["base", "tuned"])
    bars = next(tr for tr in spec["data"] if tr.get("name") == "relative change")
    got = dict(zip(bars["x"], bars["y"], strict=True))
    assert got["l1.weight"] == pytest.approx(res.table.loc["l1.weight", "rel_change"])


def test_diff_panel_kind_in_field_panel_and_session_viz() -> None:
    """The ``diff`` kind as a notebook panel and as ``session.viz.diff``: the same bars."""
    from diffract.widgets import FieldPanel

    base, tuned, _ = _models()
    s = diffract.Session(profile="ram")
    s.models.add(base, "base")
    s.models.add(tuned, "tuned")
    res = s.results.diff("base", "tuned")
    p = FieldPanel(s, kind="diff", models=["base", "tuned"], live=False)
    bars = p.figure.data[0]
    assert bars.name == "relative change" and p.models == ["base", "tuned"]
    got = dict(zip(bars.x, bars.y, strict=True))
    for name in LAYERS:
        assert got[name] == pytest.approx(res.table.loc[name, "rel_change"])
    assert "fine-tune diff" in p.status.value
    fig = s.viz.diff(models=["base", "tuned"])
    assert list(fig.data[0].x) == list(bars.x)


def test_peft_adapter_folder_onto_base(tmp_path) -> None:
    """A PEFT adapter folder alone: its update scaling * B @ A (alpha / r = 2) is added onto
    the base's weight; the layer is low-rank with the adapter's rank, and the relative change
    is ||2 B A|| / ||W||."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(7)
    w1, w2 = rng.standard_normal((64, 96)), rng.standard_normal((32, 64))
    base = {"l1.weight": w1.astype(np.float32), "l2.weight": w2.astype(np.float32)}
    a = rng.standard_normal((4, 96)).astype(np.float32)
    b = rng.standard_normal((64, 4)).astype(np.float32)
    folder = tmp_path / "adapter"
    folder.mkdir()
    save_file(
        {"base_model.model.l1.lora_A.weight": a, "base_model.model.l1.lora_B.weight": b},
        str(folder / "adapter_model.safetensors"),
    )
    (folder / "adapter_config.json").write_text(
        json.dumps({"r": 4, "lora_alpha": 8, "peft_type": "LORA", "target_modules": ["l1"]})
    )
    res = diffract.diff(base, str(folder))
    row = res.table.loc["l1.weight"]
    upd = 2.0 * b.astype(np.float64) @ a.astype(np.float64)
    assert row["signal_rank"] == 4 and row["update_kind"] == "low-rank"
    assert row["rel_change"] == pytest.approx(
        np.linalg.norm(upd) / np.linalg.norm(base["l1.weight"].astype(np.float64)), rel=1e-9
    )
    assert res.summary["lora_rank"] == 4


def test_peft_module_merged() -> None:
    """A PyTorch module with LoRA factors (PEFT's layout) is compared merged: W + B @ A."""
    torch = pytest.importorskip("torch")

    class Lora(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base_layer = torch.nn.Linear(96, 64, bias=False)
            self.lora_A = torch.nn.ModuleDict({"default": torch.nn.Linear(96, 3, bias=False)})
            self.lora_B = torch.nn.ModuleDict({"default": torch.nn.Linear(3, 64, bias=False)})

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = Lora()

    torch.manual_seed(0)
    net = Net()
    w = net.l1.base_layer.weight.detach().numpy().astype(np.float64)
    res = diffract.diff({"l1.weight": w}, net)
    row = res.table.loc["l1.weight"]
    a = net.l1.lora_A["default"].weight.detach().numpy().astype(np.float64)
    b = net.l1.lora_B["default"].weight.detach().numpy().astype(np.float64)
    assert row["signal_rank"] == 3 and row["low_rank"]
    assert row["update_norm"] == pytest.approx(np.linalg.norm(b @ a), rel=1e-5)


def test_subspace_overlap_closed_form_and_lanczos_path() -> None:
    """span(e1, e2) against span(cos t e1 + sin t e3, e2): principal angles t and 0, so the
    mean squared cosine is (cos^2 t + 1) / 2; the Lanczos top-k equals the full SVD's."""
    from diffract.finetune import overlap

    t = 0.7
    a = np.eye(5)[:, :2]
    b = np.stack([np.cos(t) * np.eye(5)[0] + np.sin(t) * np.eye(5)[2], np.eye(5)[1]], axis=1)
    assert overlap.subspace_overlap(a, b) == pytest.approx((math.cos(t) ** 2 + 1) / 2)
    rng = np.random.default_rng(8)
    w = rng.standard_normal((600, 900)) + np.outer(rng.standard_normal(600), np.ones(900)) / 10
    u, vt = overlap.top_singular_vectors(w, 10)  # svds: min(shape) > 256, 4k < 600
    uf, _, vtf = np.linalg.svd(w, full_matrices=False)
    assert overlap.subspace_overlap(u, uf[:, :10]) == pytest.approx(1.0, abs=1e-8)
    assert overlap.subspace_overlap(vt.T, vtf[:10].T) == pytest.approx(1.0, abs=1e-8)
