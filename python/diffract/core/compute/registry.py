"""``diffract.core.compute.registry``: Diffract's ``KernelRegistry``, ours with its method
names (``list_kernels``, ``can_produce_field``, ``register_kernel``, ``configure_kernel``...)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from diffract._errors import DependencyNotFoundError, InvalidConfigurationError
from diffract.core.compute.config import KernelConfig
from diffract.core.compute.execution import (
    BINARY_KERNELS,
    KernelApplyLevel,
    KernelExecutionProtocol,
    KernelRestrictions,
)
from diffract.kernels.registry import KernelRegistry as _Registry
from diffract.kernels.spec import Kernel, make_kernel


def with_inputs(func: Callable[..., Any], inputs: Sequence[str]) -> Callable[..., Any]:
    """``func`` called with its positional inputs renamed to ``inputs`` (``require_fields``).

    Raises:
        InvalidConfigurationError: ``inputs`` does not name one field per input.
    """
    sig = inspect.signature(func)
    positional = [p for p in sig.parameters.values() if p.default is p.empty]
    if len(positional) != len(inputs):
        raise InvalidConfigurationError(
            f"kernel {func.__name__!r}: require_fields names {len(inputs)} field(s) but the "
            f"function takes {len(positional)} input(s)"
        )
    options = [p for p in sig.parameters.values() if p.default is not p.empty]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in inputs]
    wrapper.__signature__ = sig.replace(parameters=[*params, *options])  # type: ignore[attr-defined]
    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper


def diffract_kernel(
    func: Callable[..., Any],
    name: str,
    require_fields: Iterable[str] | None,
    produce_fields: Iterable[str] | str | None,
    apply_level: KernelApplyLevel | None,
) -> Kernel:
    """Our kernel of ``func`` from Diffract's registration keywords (what
    ``register_kernel``, ``@kernel`` and ``session.compute.kernel`` share): inputs renamed
    to ``require_fields`` when given, ``apply_level`` None meaning per parameter.

    Raises:
        InvalidConfigurationError: ``require_fields`` does not name one field per input.
        KernelDefinitionError: a signature that cannot be a kernel.
    """
    target = with_inputs(func, list(require_fields)) if require_fields else func
    level = KernelApplyLevel(apply_level or KernelApplyLevel.PARAMETER).value
    return make_kernel(target, outputs=produce_fields, level=level, name=name)  # type: ignore[arg-type]


class KernelRegistry(_Registry):
    """Our kernel registry with Diffract's API on top.

    ``KernelRegistry()`` is empty, as Diffract's is (``register_default_kernels(registry)``
    adds the built-in ones); a session takes one as ``Session(registry=...)``. Each kernel's
    configuration is kept here (``configure_kernel``) and used by every run of a session
    with this registry (options the session configures, or a run passes, win).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: kernel name -> options configured through ``configure_kernel``
        self.configured: dict[str, dict[str, Any]] = {}
        #: kernels registered with ``KernelRestrictions.BINARY``
        self.binary: set[str] = set()

    def copy(self) -> KernelRegistry:
        """An independent registry with the same kernels and configuration."""
        new = KernelRegistry()
        base = super().copy()
        new._kernels, new._producer = base._kernels, base._producer
        new.configured = {k: dict(v) for k, v in self.configured.items()}
        new.binary = set(self.binary)
        return new

    def _meta(self, name: str) -> Any:
        """The kernel named ``name`` (Diffract: ``DependencyNotFoundError`` if none)."""
        if not self.has_kernel(name):
            raise DependencyNotFoundError(f"Kernel '{name}' not found in registry")
        return self.kernel(name)

    def register_kernel(
        self,
        *,
        name: str,
        require_fields: Iterable[str] | None = None,
        produce_fields: Iterable[str] | str | None = None,
        implementation: Callable[..., Any],
        apply_level: KernelApplyLevel | None = KernelApplyLevel.PARAMETER,
        execution_protocol: KernelExecutionProtocol | None = None,
        restrictions: KernelRestrictions | None = None,
        config: KernelConfig | dict[str, Any] | None = None,
        info: Any = None,
    ) -> None:
        """Register ``implementation`` as kernel ``name`` (Diffract's keywords; a kernel of
        that name is replaced). Inputs are the signature's parameters without defaults (or
        ``require_fields``), options those with defaults (``config`` overrides them).

        Raises:
            KernelDefinitionError: a signature that cannot be a kernel.
        """
        k = diffract_kernel(implementation, name, require_fields, produce_fields, apply_level)
        self.register(k, replace=True)
        if config:
            self.configure_kernel(
                name, config if isinstance(config, KernelConfig) else KernelConfig(**config)
            )
        if restrictions is not None and KernelRestrictions.BINARY in restrictions:
            self.binary.add(name)

    def configure_kernel(self, name: str, conf: KernelConfig) -> None:
        """Set option values of kernel ``name`` (kept here, used by runs with this registry).

        Raises:
            DependencyNotFoundError: no kernel ``name``.
            InvalidConfigurationError: an option the kernel does not take.
        """
        k = self._meta(name)
        values = conf.as_dict() if isinstance(conf, KernelConfig) else dict(conf)
        bad = sorted(set(values) - set(k.options))
        if bad:
            raise InvalidConfigurationError(f"Invalid kernel configuration parameters: {bad}")
        self.configured.setdefault(name, {}).update(values)

    def list_kernels(self, verbose: bool = False) -> list[str]:
        """The kernel names, sorted (``verbose``: with inputs, outputs and level)."""
        ks = sorted(self.kernels(), key=lambda k: k.name)
        if not verbose:
            return [k.name for k in ks]
        return [
            f"{k.name} ({', '.join(k.field_inputs())} -> {', '.join(k.outputs)}): "
            f"KernelApplyLevel.{KernelApplyLevel(k.level).name}"
            for k in ks
        ]

    def list_fields_can_produce(self, verbose: bool = False) -> list[str]:
        """The field names, sorted (``verbose``: ``"<field> <- <kernel>"``)."""
        fields = sorted(self.fields())
        return [f"{f} <- {self.producer(f).name}" for f in fields] if verbose else fields

    def has_kernel(self, name: str) -> bool:
        """Whether a kernel is named ``name``."""
        return any(k.name == name for k in self.kernels())

    def can_produce_field(self, name: str) -> bool:
        """Whether a kernel produces field ``name``."""
        return isinstance(name, str) and self.has_field(name)

    def get_kernel_apply_level(self, name: str) -> KernelApplyLevel:
        """Where kernel ``name`` applies."""
        return KernelApplyLevel(self._meta(name).level)

    def get_kernel_execution_protocol(self, name: str) -> KernelExecutionProtocol:
        """How kernel ``name`` runs: every run here uses the session's executor."""
        self._meta(name)
        return KernelExecutionProtocol.SEQUENTIAL

    def get_kernel_restrictions(self, name: str) -> KernelRestrictions | None:
        """``KernelRestrictions.BINARY`` for a pair kernel, else None."""
        self._meta(name)
        return KernelRestrictions.BINARY if name in BINARY_KERNELS | self.binary else None

    def get_fields_kernel_require(self, name: str) -> tuple[str, ...]:
        """The fields kernel ``name`` reads."""
        return tuple(self._meta(name).field_inputs())

    def get_fields_kernel_produce(self, name: str) -> tuple[str, ...]:
        """The fields kernel ``name`` writes."""
        return tuple(self._meta(name).outputs)

    def get_kernel_config(self, name: str) -> dict[str, Any]:
        """Kernel ``name``'s option values: its defaults, then what was configured."""
        return {**self._meta(name).options, **self.configured.get(name, {})}

    def get_kernel_implementation(self, name: str) -> Callable[..., Any]:
        """Kernel ``name``'s function."""
        return self._meta(name).func

    def get_kernel_producing_field(self, field_name: str) -> str:
        """The name of the kernel producing ``field_name``.

        Raises:
            UnknownFieldError: no kernel produces it (a ``KernelNotFoundError``).
        """
        return self.producer(field_name).name

    def resolve_dependencies(self, field_or_kernel_name: str) -> tuple[str, ...]:
        """The kernels to run, in order, to produce a field (or run a kernel)."""
        if self.has_kernel(field_or_kernel_name):
            outputs = self.kernel(field_or_kernel_name).outputs
        else:
            outputs = (field_or_kernel_name,)
        return tuple(k.name for k in self.closure(outputs))

    def resolve_produced_fields(self, field_or_kernel_name: str) -> set[str]:
        """Every field made when producing ``field_or_kernel_name`` (its dependencies' too)."""
        names = self.resolve_dependencies(field_or_kernel_name)
        return {o for n in names for o in self.kernel(n).outputs}


__all__ = ["KernelRegistry", "diffract_kernel", "with_inputs"]
