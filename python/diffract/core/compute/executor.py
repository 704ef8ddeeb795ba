"""``diffract.core.compute.KernelExecutor``: Diffract's executor, over a session scope."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from diffract._errors import InvalidArgumentError


class KernelExecutor:
    """Produce fields on a scope's parameters, as Diffract's executor does.

    ``parameters`` is a session or a scope (``session.filter(...)``): the run is that
    scope's ``compute.apply``, which uses the options set by
    ``KernelRegistry.configure_kernel``. A field already produced in this ``with`` block is
    not produced again.

    Args:
        registry: the kernel registry; it must be the session's (``Session(registry=...)``),
            or None for the session's own.
        **_kwargs: Diffract's other arguments (process pool, parallel context), not used.
    """

    def __init__(self, registry: Any = None, *args: Any, **_kwargs: Any) -> None:
        self._registry = registry
        self._executed: set[str] = set()

    def __enter__(self) -> KernelExecutor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.clear_execution_state()

    def clear_execution_state(self) -> None:
        """Forget what was executed, so the next ``execute`` runs again."""
        self._executed.clear()

    def execute(self, field_or_kernel_name: str, parameters: Any) -> set[str]:
        """Produce a field (or run a kernel) and what it depends on, on ``parameters``.

        Args:
            field_or_kernel_name: a field or kernel name.
            parameters: a Session or a scope of one.

        Returns:
            The fields written (empty when everything was stored already).

        Raises:
            InvalidArgumentError: ``parameters`` is not a session or scope, or the registry
                is not that session's.
            UnknownFieldError: nothing produces the field (a ``KernelNotFoundError``).
        """
        compute = getattr(parameters, "compute", None)
        session = getattr(parameters, "session", None)
        if compute is None or session is None:
            raise InvalidArgumentError(
                "KernelExecutor.execute takes a Session or a scope (session.filter(...)) as "
                f"parameters, got {type(parameters).__name__}"
            )
        registry = session.registry if self._registry is None else self._registry
        if registry is not session.registry:
            raise InvalidArgumentError(
                "this KernelExecutor's registry is not the session's: open the session with "
                "Session(registry=registry), or make the executor with KernelExecutor(None)"
            )
        if field_or_kernel_name in self._executed:
            return set()
        if any(k.name == field_or_kernel_name for k in registry.kernels()):
            fields = tuple(registry.kernel(field_or_kernel_name).outputs)
        else:
            fields = (field_or_kernel_name,)
        report = compute.apply(*fields, progress=False)  # with the registry's configuration
        self._executed.add(field_or_kernel_name)
        s = report.summary
        return {*s.parameter_fields, *s.in_model_fields, *s.cross_model_fields}


__all__ = ["KernelExecutor"]
