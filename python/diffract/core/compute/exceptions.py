"""``diffract.core.compute.exceptions``: Diffract's kernel errors (ours, by its path)."""

from diffract._errors import (
    CircularDependencyError as CircularDependencyError,
    DependencyNotFoundError as DependencyNotFoundError,
    InconsistentWiring as InconsistentWiring,
    InconsistentWiringError as InconsistentWiringError,
    InvalidConfiguration as InvalidConfiguration,
    InvalidConfigurationError as InvalidConfigurationError,
    KernelError as KernelError,
    KernelExecutionError as KernelExecutionError,
)

__all__ = [
    "CircularDependencyError",
    "DependencyNotFoundError",
    "InconsistentWiring",
    "InconsistentWiringError",
    "InvalidConfiguration",
    "InvalidConfigurationError",
    "KernelError",
    "KernelExecutionError",
]
