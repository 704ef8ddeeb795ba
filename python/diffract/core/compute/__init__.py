"""``diffract.core.compute``: the kernel levels, protocols, restrictions and errors, by
Diffract's import path."""

from diffract._errors import (
    CircularDependencyError as CircularDependencyError,
    DependencyNotFoundError as DependencyNotFoundError,
    InvalidConfiguration as InvalidConfiguration,
    InvalidConfigurationError as InvalidConfigurationError,
    KernelError as KernelError,
)
from diffract.core.compute.execution import (
    KernelApplyLevel as KernelApplyLevel,
    KernelExecutionProtocol as KernelExecutionProtocol,
    KernelRestrictions as KernelRestrictions,
)

__all__ = [
    "CircularDependencyError",
    "DependencyNotFoundError",
    "InvalidConfiguration",
    "InvalidConfigurationError",
    "KernelApplyLevel",
    "KernelError",
    "KernelExecutionProtocol",
    "KernelRestrictions",
]
