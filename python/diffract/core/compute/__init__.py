"""``diffract.core.compute``: Diffract's compute import paths (levels, registry, executor,
``kernel`` decorator, configuration and errors), ours underneath.

The names are exactly Diffract 0.3.1's: its ``*Error`` spellings of ``InconsistentWiring`` and
``InvalidConfiguration`` live in :mod:`diffract.core.compute.exceptions` only, as there."""

from diffract._errors import (
    CircularDependencyError as CircularDependencyError,
    DependencyNotFoundError as DependencyNotFoundError,
    InconsistentWiring as InconsistentWiring,
    InvalidConfiguration as InvalidConfiguration,
    KernelError as KernelError,
    KernelExecutionError as KernelExecutionError,
)
from diffract.core.compute.config import KernelConfig as KernelConfig
from diffract.core.compute.decorator import (
    kernel as kernel,
    register_default_kernels as register_default_kernels,
)
from diffract.core.compute.execution import (
    KernelApplyLevel as KernelApplyLevel,
    KernelExecutionProtocol as KernelExecutionProtocol,
    KernelRestrictions as KernelRestrictions,
)
from diffract.core.compute.executor import KernelExecutor as KernelExecutor
from diffract.core.compute.registry import KernelRegistry as KernelRegistry

__all__ = [
    "CircularDependencyError",
    "DependencyNotFoundError",
    "InconsistentWiring",
    "InvalidConfiguration",
    "KernelApplyLevel",
    "KernelConfig",
    "KernelError",
    "KernelExecutionError",
    "KernelExecutionProtocol",
    "KernelExecutor",
    "KernelRegistry",
    "KernelRestrictions",
    "kernel",
    "register_default_kernels",
]
