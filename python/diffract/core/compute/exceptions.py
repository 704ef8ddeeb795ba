"""``diffract.core.compute.exceptions``: Diffract's kernel errors (ours, by its path)."""

from diffract._errors import CircularDependencyError as CircularDependencyError
from diffract._errors import DependencyNotFoundError as DependencyNotFoundError
from diffract._errors import InvalidConfiguration as InvalidConfiguration
from diffract._errors import InvalidConfigurationError as InvalidConfigurationError
from diffract._errors import KernelError as KernelError
from diffract._errors import KernelFailure as KernelExecutionError

__all__ = [
    "CircularDependencyError",
    "DependencyNotFoundError",
    "InvalidConfiguration",
    "InvalidConfigurationError",
    "KernelError",
    "KernelExecutionError",
]
