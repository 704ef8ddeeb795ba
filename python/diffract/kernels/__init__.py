"""Kernels: specs (:mod:`~diffract.kernels.spec`), the registry
(:mod:`~diffract.kernels.registry`) and the built-in families, one module each.

Family modules define kernels with :func:`define` (no registration at import); the registry
names them by string in ``FAMILIES`` and imports them on first use. To add a built-in family,
add its module name to ``FAMILIES``.
"""

from __future__ import annotations

from diffract.kernels.registry import (
    FAMILIES as FAMILIES,
    KernelRegistry as KernelRegistry,
    builtin_kernels as builtin_kernels,
    default_registry as default_registry,
    kernel as kernel,
)
from diffract.kernels.spec import (
    Kernel as Kernel,
    OptionRule as OptionRule,
    SliceNotApplicable as SliceNotApplicable,
    define as define,
    make_kernel as make_kernel,
)

__all__ = [
    "FAMILIES",
    "Kernel",
    "KernelRegistry",
    "OptionRule",
    "SliceNotApplicable",
    "builtin_kernels",
    "default_registry",
    "define",
    "kernel",
    "make_kernel",
]
