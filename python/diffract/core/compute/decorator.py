"""``diffract.core.compute.decorator``: Diffract's module-level ``kernel`` decorator and
``register_default_kernels``, over our registry."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from diffract._errors import InconsistentWiringError
from diffract.core.compute.execution import (
    KernelApplyLevel,
    KernelExecutionProtocol,
    KernelRestrictions,
)
from diffract.core.compute.registry import KernelRegistry, diffract_kernel
from diffract.kernels.registry import KernelRegistry as _Registry, builtin_kernels, default_registry


def kernel(
    _func: Callable[..., Any] | None = None,
    *,
    registry: Any = None,
    name: str | None = None,
    require_fields: Iterable[str] | None = None,
    produce_fields: Iterable[str] | str | None = None,
    apply_level: KernelApplyLevel | None = KernelApplyLevel.PARAMETER,
    execution_protocol: KernelExecutionProtocol | None = KernelExecutionProtocol.SEQUENTIAL,
    restrictions: KernelRestrictions | None = None,
    info: Any = None,
) -> Any:
    """Decorator: register a function as a kernel, as Diffract's ``@kernel`` does.

    Without ``registry`` it goes to the process-wide registry that every ``Session()``
    without ``registry=`` uses (Diffract's is process-wide too); a kernel of that name is
    replaced. Inputs are the parameters without defaults (or ``require_fields``), options
    those with defaults; ``execution_protocol`` and ``info`` are accepted (every run uses the
    session's executor).

    Args:
        _func: the function, when used bare (``@kernel``).
        registry: the registry (default: the process-wide one).
        name: the kernel's name (default: the function's).
        require_fields: the input field names, over the signature's.
        produce_fields: the field(s) it produces (default: its name).
        apply_level: ``KernelApplyLevel.PARAMETER``, ``IN_MODEL`` or ``CROSS_MODEL``.
        execution_protocol: ``KernelExecutionProtocol.SEQUENTIAL`` or ``PARALLEL``.
        restrictions: ``KernelRestrictions.BINARY`` or None.
        info: Diffract's documentation metadata (not used).

    Returns:
        The function unchanged (or the decorator).

    Raises:
        InconsistentWiringError: ``registry`` is not a kernel registry (Diffract's
            ``InconsistentWiring``).
    """
    target_registry = default_registry() if registry is None else registry
    if not isinstance(target_registry, _Registry):
        raise InconsistentWiringError(
            f"kernel(registry=...) takes a KernelRegistry, got {type(registry).__name__}"
        )
    if execution_protocol is not None:
        KernelExecutionProtocol(execution_protocol)

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        kname = name or func.__name__
        if isinstance(target_registry, KernelRegistry):
            target_registry.register_kernel(
                name=kname,
                require_fields=require_fields,
                produce_fields=produce_fields,
                implementation=func,
                apply_level=apply_level,
                restrictions=restrictions,
            )
            return func
        k = diffract_kernel(func, kname, require_fields, produce_fields, apply_level)
        target_registry.register(k, replace=True)
        return func

    return wrap(_func) if _func is not None else wrap


def register_default_kernels(registry: _Registry | None = None) -> None:
    """Register the built-in kernels into ``registry`` (those it lacks), as Diffract does
    for a fresh registry; without one, nothing to do (the process-wide registry has them).

    Args:
        registry: the registry to fill.
    """
    if registry is None:
        return
    for k in builtin_kernels():
        if not any(x.name == k.name for x in registry.kernels()) and not any(
            registry.has_field(o) for o in k.outputs
        ):
            registry.register(k)


__all__ = ["kernel", "register_default_kernels"]
