"""Built-in kernel families, one module each.

Modules here define kernels with :func:`diffract.kernels.spec.define` (no registration at import);
:func:`builtin_kernels` collects them explicitly. To add a family, add its module name to
``FAMILIES``.
"""

from __future__ import annotations

import importlib

from diffract.kernels.spec import Kernel

FAMILIES: tuple[str, ...] = (
    "basic",
    "stats",
    "spectral",
    "norms",
    "ranks",
    "fits",
    "rmt",
    "model",
    "compare",
)


def builtin_kernels() -> list[Kernel]:
    """Every kernel defined in the family modules listed in ``FAMILIES``, in order."""
    found: list[Kernel] = []
    for family in FAMILIES:
        module = importlib.import_module(f"{__name__}.{family}")
        for obj in vars(module).values():
            spec = getattr(obj, "__diffract_kernel__", None)
            if isinstance(spec, Kernel) and getattr(obj, "__module__", None) == module.__name__:
                found.append(spec)
    return found
