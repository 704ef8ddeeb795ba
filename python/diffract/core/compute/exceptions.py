"""``diffract.core.compute.exceptions``: Diffract's kernel errors (ours, by its path)."""

from diffract._errors import (
    CircularDependencyError as CircularDependencyError,
    DependencyNotFoundError as DependencyNotFoundError,
    InvalidConfiguration as InvalidConfiguration,
    InvalidConfigurationError as InvalidConfigurationError,
    KernelError as KernelError,
    KernelFailure as KernelExecutionError,
)

__all__ = [
    "CircularDependencyError",
    "DependencyNotFoundError",
    "InvalidConfiguration",
    "InvalidConfigurationError",
    "KernelError",
    "KernelExecutionError",
]
