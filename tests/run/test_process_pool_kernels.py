"""Kernels a process pool cannot receive (a lambda, a kernel of an interactive ``__main__``) are
a config error; a kernel defined in ``python -c`` runs."""

from __future__ import annotations

import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

from diffract import ConfigError, Session
from diffract.kernels import default_registry, make_kernel
from diffract.run.report import KernelFailureWarning


def _apply(scope, *fields, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFailureWarning)
        return scope.compute.apply(*fields, progress=False, **kw)


def _model(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return {f"l{i:02d}.weight": rng.normal(size=(6, 4)).astype(np.float32) for i in range(n)}


def test_processes_refuse_a_lambda_kernel_with_a_config_error():
    reg = default_registry().copy()
    reg.register(make_kernel(lambda weights: 1.0, outputs="lam", name="lam"))
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(2), "m")
    with pytest.raises(ConfigError, match=r"kernel 'lam'.*cannot be sent.*executor='threads'"):
        _apply(s, "lam", executor="processes", workers=2)
    assert _apply(s, "lam").ok  # threads run it


def test_processes_refuse_a_kernel_of_an_interactive_main(monkeypatch):
    fake_main = types.ModuleType("__main__")  # like python -c or a notebook: no file, no spec

    def nb_kernel(weights):
        return 1.0

    nb_kernel.__module__ = "__main__"
    nb_kernel.__qualname__ = "nb_kernel"
    fake_main.nb_kernel = nb_kernel
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    reg = default_registry().copy()
    reg.register(make_kernel(nb_kernel, outputs="nb"))
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(2), "m")
    with pytest.raises(ConfigError, match=r"'nb_kernel'.*__main__ of an interactive session"):
        _apply(s, "nb", executor="processes", workers=2)


def test_processes_with_a_kernel_defined_in_python_c(tmp_path):
    code = (
        "import numpy as np, diffract\n"
        "from diffract import Session\n"
        "@diffract.kernel(outputs='my_max', replace=True)\n"
        "def my_max(weights):\n"
        "    return float(np.abs(weights).max())\n"
        "s = Session(profile='ram')\n"
        "s.models.add({'w': np.ones((4, 4), np.float32)}, 'm')\n"
        "try:\n"
        "    s.compute.apply('my_max', executor='processes', workers=2, progress=False)\n"
        "except Exception as e:\n"
        "    print('ERR', type(e).__name__, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert "ERR ConfigError" in out.stdout, out.stdout + out.stderr
    assert "my_max" in out.stdout and "BrokenProcessPool" not in out.stdout + out.stderr
