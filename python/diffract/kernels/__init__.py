"""Kernels: specs (:mod:`~diffract.kernels.spec`), the registry
(:mod:`~diffract.kernels.registry`) and the built-in families, one module each.

Family modules define kernels with :func:`define` (no registration at import); the registry
names them by string in ``FAMILIES`` and imports them on first use. To add a built-in family,
add its module name to ``FAMILIES``.
"""

from __future__ import annotations

from diffract.kernels.registry import (
    FAMILIES as FAMILIES,
)
from diffract.kernels.registry import (
    KernelRegistry as KernelRegistry,
)
from diffract.kernels.registry import (
    builtin_kernels as builtin_kernels,
)
from diffract.kernels.registry import (
    default_registry as default_registry,
)
from diffract.kernels.registry import (
    kernel as kernel,
)
from diffract.kernels.spec import (
    Kernel as Kernel,
)
from diffract.kernels.spec import (
    OptionRule as OptionRule,
)
from diffract.kernels.spec import (
    SliceNotApplicable as SliceNotApplicable,
)
from diffract.kernels.spec import (
    define as define,
)
from diffract.kernels.spec import (
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
