"""``diffract.core.compute``: the kernel levels, protocols, restrictions and errors, by
Diffract's import path."""

from diffract._errors import CircularDependencyError as CircularDependencyError
from diffract._errors import DependencyNotFoundError as DependencyNotFoundError
from diffract._errors import InvalidConfiguration as InvalidConfiguration
from diffract._errors import InvalidConfigurationError as InvalidConfigurationError
from diffract._errors import KernelError as KernelError
from diffract.core.compute.execution import KernelApplyLevel as KernelApplyLevel
from diffract.core.compute.execution import KernelExecutionProtocol as KernelExecutionProtocol
from diffract.core.compute.execution import KernelRestrictions as KernelRestrictions

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
