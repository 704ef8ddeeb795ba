"""WeightWatcher's randomization recipe (``apply_random_esd`` / ``random_eigenvalues``, 0.7.7),
set by ``conventions="weightwatcher"`` (``rand_shuffle="kernel"``, ``rand_replicas="ww"``):
each kernel-position matrix shuffled on its own, 5 replicas pooled (``esd_rand_pool``,
the randomized MP fit's input) when fewer than 100 singular values are kept in all (its
num_components: M, M * rf for Conv2d, a LoRA update's r), each replica keeping what the ESD
keeps (a LoRA update's top r). Checked against NumPy on the
same seeded permutations; the default (one permutation, one replica) is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diffract import Session
from diffract.kernels.spectral import replica_count


def _svals(w: np.ndarray) -> np.ndarray:
    return np.linalg.svd(w, compute_uv=False)


def test_default_pool_is_the_one_replica(fs):
    w = np.random.default_rng(1).standard_normal((30, 12))
    r = fs.run_fields({"w": w}, ["esd_rand", "esd_rand_pool", "esd_rand_max", "weights_rand"])
    g = r["w"]
    np.testing.assert_array_equal(g["esd_rand_pool"], g["esd_rand"])
    assert g["esd_rand_max"] == g["esd_rand"][-1]
    # the default seed is Diffract's 42, the draw its shuffled index
    index = np.arange(w.size)
    np.random.default_rng(42).shuffle(index)
    want = np.sort(_svals(w.ravel()[index].reshape(w.shape)) ** 2)
    np.testing.assert_allclose(g["esd_rand"], want / 30, rtol=1e-5)


def test_replicas_are_seeded_permutations(fs):
    """Replica k >= 1 is the permutation of default_rng((seed, k)); the pool is all of them."""
    w = np.random.default_rng(2).standard_normal((30, 12))
    g = fs.run_fields(
        {"w": w},
        ["esd_rand", "esd_rand_pool", "weights_rand_pool_svals"],
        rand_replicas=3,
        seed=4,
        esd_scale="none",
        precision="float64",
    )["w"]
    reps = [np.random.default_rng(4).permutation(w.ravel())]
    reps += [np.random.default_rng((4, k)).permutation(w.ravel()) for k in (1, 2)]
    want = np.sort(np.concatenate([_svals(p.reshape(w.shape)) ** 2 for p in reps]))
    assert g["esd_rand_pool"].shape == (36,)
    np.testing.assert_allclose(g["esd_rand_pool"], want, rtol=1e-10)
    np.testing.assert_allclose(g["esd_rand"], np.sort(_svals(reps[0].reshape(w.shape)) ** 2))
    assert np.all(np.diff(g["weights_rand_pool_svals"]) <= 0)  # descending


def test_ww_replica_rule():
    assert replica_count("ww", 99) == 5 and replica_count("ww", 100) == 1
    assert replica_count(1, 8) == 1 and replica_count(3, 500) == 3
    with pytest.raises(ValueError, match="rand_replicas"):
        replica_count(0, 8)


def test_convention_pools_five_replicas_below_100_components(fs):
    rng = np.random.default_rng(3)
    small, large = rng.standard_normal((40, 20)), rng.standard_normal((150, 120))
    conv_small, conv_large = rng.standard_normal((8, 3, 3, 3)), rng.standard_normal((32, 16, 3, 3))
    g = fs.run_fields(
        {"a.weight": small, "b.weight": large, "c.weight": conv_small, "d.weight": conv_large},
        ["esd_rand", "esd_rand_pool", "num_traps"],
        conventions="weightwatcher",
    )
    assert g["c.weight"]["esd_rand_pool"].size == 5 * 3 * 9  # M * rf = 27 < 100: 5
    assert g["d.weight"]["esd_rand_pool"].size == 16 * 9  # M * rf = 144 (M = 16): one
    assert g["a.weight"]["esd_rand_pool"].size == 5 * 20  # M = 20 < 100: 5 replicas
    assert g["a.weight"]["esd_rand"].size == 20  # the distances' one replica
    assert g["b.weight"]["esd_rand_pool"].size == 120  # M = 120: one
    np.testing.assert_array_equal(g["b.weight"]["esd_rand_pool"], g["b.weight"]["esd_rand"])
    assert g["a.weight"]["num_traps"] == 0  # white noise has no traps


def test_kernel_shuffle_keeps_each_position(fs):
    """rand_shuffle="kernel": the entries of each kernel-position matrix are permuted among
    themselves (WeightWatcher's); "all" mixes them across positions."""
    base = np.random.default_rng(5).random((6, 4, 2, 2))
    w = base + 10.0 * np.arange(4).reshape(1, 1, 2, 2)  # position p holds values in [10p, 10p+1)
    kernel = fs.field(w, "weights_rand", rand_shuffle="kernel", seed=2)
    mixed = fs.field(w, "weights_rand", seed=2)
    for i in range(2):
        for j in range(2):
            np.testing.assert_array_equal(
                np.sort(kernel[:, :, i, j], None), np.sort(w[:, :, i, j], None)
            )
    assert not np.array_equal(kernel, w)
    assert np.any(np.floor(mixed / 10) != np.floor(w / 10))  # entries moved between positions
    np.testing.assert_array_equal(np.sort(mixed, None), np.sort(w, None))


class _Adapted(torch.nn.Module):
    """A 40 x 30 layer with a rank-3 LoRA pair (hand-made factors, scaling 1)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.layer = torch.nn.Module()
        self.layer.weight = torch.nn.Parameter(torch.randn(40, 30, generator=g))
        self.layer.lora_A = torch.nn.Module()
        self.layer.lora_A.weight = torch.nn.Parameter(torch.randn(3, 30, generator=g))
        self.layer.lora_B = torch.nn.Module()
        self.layer.lora_B.weight = torch.nn.Parameter(torch.randn(40, 3, generator=g))


def test_lora_update_keeps_top_r_of_each_replica():
    """A rank-3 update under the convention: every replica of its permuted product keeps the
    top r = 3 singular values (WeightWatcher's num_components), 5 replicas (3 < 100)."""
    m = _Adapted()
    with Session(profile="ram") as s:
        s.models.add(m, "m")
        s.compute.apply(
            "esd_rand",
            "esd_rand_pool",
            "esd",
            "js_rand_distance",
            progress=False,
            conventions="weightwatcher",
            precision="float64",
            layer_selection="peft",
            seed=1,
        )
        pool = s.results.get("esd_rand_pool", "layer.lora", "m")
        one = s.results.get("esd_rand", "layer.lora", "m")
        esd = s.results.get("esd", "layer.lora", "m")
        js = s.results.get("js_rand_distance", "layer.lora", "m")
        w = s.models.weights("layer.lora", "m")
    reps = [np.random.default_rng(1).permutation(w.ravel())]
    reps += [np.random.default_rng((1, k)).permutation(w.ravel()) for k in range(1, 5)]
    tops = [_svals(p.reshape(w.shape))[:3] ** 2 for p in reps]
    np.testing.assert_allclose(pool, np.sort(np.concatenate(tops)), rtol=1e-10)
    np.testing.assert_allclose(one, np.sort(tops[0]), rtol=1e-10)
    # rand_distance: WeightWatcher's own function; the top r of the update and of its
    # permutation have other sums, where its mixture (p + q) / 2 is formed before normalizing
    from weightwatcher.RMT_Util import jensen_shannon_distance

    assert abs(np.sum(esd) / np.sum(one) - 1) > 0.1
    assert js == pytest.approx(float(jensen_shannon_distance(esd, one)), rel=1e-12)
