"""Issue 26 point 16: Diffract's import paths beyond the session (``diffract.core.compute``,
``diffract.session.resolver``, ``SessionContext``) and ``ParameterType`` as an ``IntFlag``,
each working, not only importable."""

from __future__ import annotations

import enum
import pickle

import numpy as np
import pytest

from diffract import ParameterType, Session


def test_core_compute_names_are_diffracts():
    import diffract.core.compute as compute
    from diffract.session import SessionError

    expected = {
        "CircularDependencyError", "DependencyNotFoundError", "InconsistentWiring",
        "InvalidConfiguration", "KernelApplyLevel", "KernelConfig", "KernelError",
        "KernelExecutionError", "KernelExecutionProtocol", "KernelExecutor", "KernelRegistry",
        "KernelRestrictions", "kernel", "register_default_kernels",
    }  # fmt: skip
    # exactly Diffract 0.3.1's ``__all__`` (its ``*Error`` aliases are in ``.exceptions`` only)
    assert set(compute.__all__) == expected and all(hasattr(compute, n) for n in expected)
    assert not hasattr(compute, "InconsistentWiringError")
    assert not hasattr(compute, "InvalidConfigurationError")
    assert issubclass(compute.KernelExecutionError, compute.KernelError)
    assert issubclass(compute.KernelError, SessionError)
    from diffract.core.compute import exceptions

    assert compute.InconsistentWiring is exceptions.InconsistentWiringError
    assert compute.InvalidConfiguration is exceptions.InvalidConfigurationError
    from diffract.core.compute.config import KernelConfig
    from diffract.core.compute.exceptions import InconsistentWiring, KernelExecutionError
    from diffract.core.compute.execution import KernelExecutor

    assert KernelConfig is compute.KernelConfig and KernelExecutor is compute.KernelExecutor
    assert KernelExecutionError is compute.KernelExecutionError
    assert InconsistentWiring is compute.InconsistentWiring
    with pytest.raises(compute.InconsistentWiring):
        compute.kernel(registry=object())


def test_registry_decorator_and_executor_run_a_custom_kernel():
    from diffract.core.compute import (
        DependencyNotFoundError,
        KernelApplyLevel,
        KernelConfig,
        KernelExecutor,
        KernelRegistry,
        kernel,
        register_default_kernels,
    )

    registry = KernelRegistry()
    assert registry.list_kernels() == []  # empty, as Diffract's
    register_default_kernels(registry)
    assert registry.can_produce_field("frob_norm") and registry.has_kernel("power_law_fit")

    @kernel(registry=registry, produce_fields=("scaled_frob",))
    def scaled(frob_norm, *, factor: float = 2.0):
        return factor * frob_norm

    assert registry.get_kernel_producing_field("scaled_frob") == "scaled"
    assert registry.get_fields_kernel_require("scaled") == ("frob_norm",)
    assert registry.get_kernel_apply_level("scaled") is KernelApplyLevel.PARAMETER
    assert registry.resolve_dependencies("scaled")[-1] == "scaled"
    registry.configure_kernel("scaled", KernelConfig(factor=3.0))
    assert registry.get_kernel_config("scaled") == {"factor": 3.0}
    with pytest.raises(DependencyNotFoundError):
        registry.get_kernel_config("nope")

    s = Session(profile="ram", registry=registry)
    w = np.arange(6.0).reshape(2, 3)
    s.models.add({"w": w}, "m")
    with KernelExecutor(registry) as ex:
        written = ex.execute("scaled", s)
        assert {"scaled_frob", "frob_norm"} <= written
        assert ex.execute("scaled", s) == set()  # once per with block
    (row,) = s.results.export_metrics("scaled_frob", export_format="list")
    assert row["scaled_frob"] == pytest.approx(3.0 * np.linalg.norm(w))
    other = Session(profile="ram", registry=registry)  # a plain apply uses it too
    other.models.add({"w": w}, "m")
    other.compute.apply("scaled_frob", progress=False)
    (row,) = other.results.export_metrics("scaled_frob", export_format="list")
    assert row["scaled_frob"] == pytest.approx(3.0 * np.linalg.norm(w))
    with pytest.raises(TypeError, match="registry is not the session's"):
        KernelExecutor(KernelRegistry()).execute("frob_norm", s)


def test_resolver_and_session_context():
    from diffract.session.resolver import FieldSelector, render_label, resolve
    from diffract.session.session import SessionContext

    sel = resolve("log_norm@models[b,a]@params[x]")
    assert sel == FieldSelector("log_norm", models=("b", "a"), params=("x",))
    assert sel.is_contextual and not resolve("frob_norm").is_contextual
    assert render_label(sel) == "log_norm@models[a,b]@params[x]"
    assert resolve("f@other").models is None
    with pytest.raises(TypeError):
        resolve(3)
    s = Session(profile="ram")
    s.models.add({"w": np.ones((2, 2))}, "m")
    scope = s.filter(model_ids=["m"])
    assert isinstance(scope, SessionContext) and isinstance(
        scope.filter(param_names=["w"]), SessionContext
    )


def test_parameter_type_is_an_int_flag():
    assert isinstance(ParameterType.DENSE, enum.IntFlag)
    assert int(ParameterType.UNKNOWN) == 0 and int(ParameterType.DENSE) == 1
    assert not ParameterType.UNKNOWN and ParameterType.DENSE.name == "DENSE"
    both = ParameterType.DENSE | ParameterType.CONV
    assert both & ParameterType.CONV and not both & ParameterType.BIAS
    custom = ParameterType.from_string("attn_qk")
    assert int(custom) & (int(custom) - 1) == 0 and int(custom) > int(ParameterType.OTHER)
    assert ParameterType("ATTN_QK") is custom and ParameterType(int(custom)) is custom
    assert pickle.loads(pickle.dumps(custom)) is custom
    assert ParameterType.DENSE == "dense" and ParameterType.DENSE.value == "dense"  # ours
    s = Session(profile="ram")
    s.models.add({"w": np.ones((3, 2)), "b": np.ones(3)}, "m")
    assert [sl.name for sl in s.filter(param_types=[ParameterType.DENSE]).models.slices()] == ["w"]
