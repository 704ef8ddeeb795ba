"""Shared by the crash-safety test and its child processes (no pytest import: fast start)."""

from __future__ import annotations

import numpy as np

FIELDS = ("frob_norm", "spectral_norm", "stable_rank", "weights_std", "esd")


def model_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        f"layers.{i}.weight": rng.normal(size=(48 + 4 * i, 32)).astype(np.float32)
        for i in range(16)
    }


def reference_values() -> dict[tuple[str, str], object]:
    from diffract import Session

    s = Session(profile="ram")
    s.models.add(model_weights(), model_id="m")
    s.compute.apply(*FIELDS, progress=False)
    return {k: s.store.get(k) for k in s.store.keys()}


def same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b
