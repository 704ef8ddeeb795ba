"""Kernels shared by the scheduler's and the result readers' edge-case tests: kernels returning
values the store cannot hold, model-level and transient outputs (module level: a process pool
imports them by name), and a registry holding them all."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from diffract import KernelFailureWarning, NothingToCompareWarning, Session
from diffract.kernels import default_registry, make_kernel


def bad_none(weights):
    """None on the 4-row slice, a number elsewhere."""
    return None if weights.shape[0] == 4 else 1.0


def bad_extra_keys(weights):
    return {"bad_extra_keys": 1.0, "junk": 2} if weights.shape[0] == 4 else 1.0


def bad_object(weights):
    return object() if weights.shape[0] == 4 else 1.0


def bad_str_array(weights):
    return np.array(["x", "y"]) if weights.shape[0] == 4 else np.ones(2)


def bad_vectorized(weights):
    return [None if w.shape[0] == 4 else 1.0 for w in weights]


def bad_model(frob_norm, slices):
    return None


def ok_model(frob_norm, slices):
    return float(np.mean(frob_norm))


def with_transient(weights):
    return object(), 2.0


def scaled(weights, scale=1.0):
    return float(scale)


def model_scaled(scaled, slices):
    return float(np.mean(scaled))


def two_d(weights):
    return np.arange(6.0).reshape(2, 3)


def arr_nan(weights):
    return np.array([1.0, np.nan, np.inf])


def edge_registry():
    """A copy of the default registry with every kernel of this module."""
    reg = default_registry().copy()
    reg.register(make_kernel(bad_none, outputs="bad_none"))
    reg.register(make_kernel(bad_extra_keys, outputs="bad_extra_keys"))
    reg.register(make_kernel(bad_object, outputs="bad_object"))
    reg.register(make_kernel(bad_str_array, outputs="bad_str_array"))
    reg.register(make_kernel(bad_vectorized, outputs="bad_vectorized", vectorized=True))
    reg.register(make_kernel(bad_model, outputs="bad_model", level="model"))
    reg.register(make_kernel(ok_model, outputs="ok_model", level="model"))
    reg.register(make_kernel(with_transient, outputs=("t_obj", "t_num"), transient=("t_obj",)))
    reg.register(make_kernel(scaled, outputs="scaled"))
    reg.register(make_kernel(model_scaled, outputs="model_scaled", level="model"))
    reg.register(make_kernel(two_d, outputs="two_d"))
    reg.register(make_kernel(arr_nan, outputs="arr_nan"))
    return reg


def apply_quietly(scope, *fields, **kw):
    """``scope.compute.apply`` without progress, its failure and nothing-to-compare warnings
    silenced (the tests check the report and the store)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFailureWarning)
        warnings.simplefilter("ignore", NothingToCompareWarning)
        return scope.compute.apply(*fields, progress=False, **kw)


# --- fixtures of the edge-case tests (tests/conftest.py registers this module as a plugin) ---


@pytest.fixture
def reg():
    """:func:`edge_registry`, fresh per test."""
    return edge_registry()


@pytest.fixture
def one_model(reg, rng):
    """A ram session with one model "a": an 8x6 and a 4x6 slice."""
    s = Session(profile="ram", registry=reg)
    s.models.add({"w": rng.normal(size=(8, 6)), "v": rng.normal(size=(4, 6))}, model_id="a")
    return s


@pytest.fixture
def two_models(reg, rng):
    """A ram session with models "a" and "b", one 8x6 slice each."""
    s = Session(profile="ram", registry=reg)
    s.models.add({"w": rng.normal(size=(8, 6))}, model_id="a")
    s.models.add({"w": rng.normal(size=(8, 6))}, model_id="b")
    return s
