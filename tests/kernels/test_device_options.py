"""Device options that cannot work on this machine: one config error before any work, ``auto``
falls back to the CPU, ``svd_device='cuda'`` without a GPU."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from diffract import ConfigError, Session
from diffract.run.report import KernelFailureWarning


def _apply(scope, *fields, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFailureWarning)
        return scope.compute.apply(*fields, progress=False, **kw)


def _model(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return {f"l{i:02d}.weight": rng.normal(size=(6, 4)).astype(np.float32) for i in range(n)}


@pytest.mark.parametrize("device", ["cuda", "torch:cuda", "jax:gpu", "torch:cdua"])
def test_a_device_that_cannot_work_is_one_config_error_before_any_work(device):
    from diffract.kernels.device import available_accelerators

    if available_accelerators() and device != "torch:cdua":
        pytest.skip("this machine has an accelerator")
    s = Session(profile="ram")
    s.models.add(_model(3), "m")
    with pytest.raises(ConfigError, match=rf"device='{device}'.*available"):
        s.compute.apply("stable_rank", device=device, progress=False)
    assert s.kernel_calls == {} and s.results.fields() == []


def test_auto_device_falls_back_to_the_cpu():
    from diffract.kernels.device import available_accelerators, resolve_device

    if available_accelerators():
        pytest.skip("this machine has an accelerator")
    assert resolve_device("auto") == "cpu"
    s = Session(profile="ram")
    s.models.add(_model(3), "m")
    assert _apply(s, "stable_rank", device="auto").ok


def test_svd_device_cuda_without_a_gpu_is_one_config_error():
    from diffract.kernels.device import available_accelerators

    if "torch:cuda" in available_accelerators():
        pytest.skip("this machine has a CUDA GPU")
    s = Session(profile="ram")
    s.models.add(_model(3), "m")
    with pytest.raises(ConfigError, match="svd_device='cuda'"):
        s.compute.apply("weights_lsvs", svd_device="cuda", progress=False)
    assert s.kernel_calls == {}
