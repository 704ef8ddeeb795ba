"""``diffract.core.compute.execution``: where a kernel applies, how it runs, its restrictions.

Diffract's enums, mapped onto our kernel levels: ``PARAMETER`` is ``"param"``, ``IN_MODEL``
``"model"``, ``CROSS_MODEL`` ``"cross"``.
"""

from __future__ import annotations

import enum

from diffract.core.compute.executor import KernelExecutor as KernelExecutor
from diffract.kernels.registry import BINARY_KERNELS as BINARY_KERNELS


class KernelApplyLevel(enum.Enum):
    """Where a kernel applies: per parameter, per model, or across models."""

    PARAMETER = "param"
    IN_MODEL = "model"
    CROSS_MODEL = "cross"

    @classmethod
    def of(cls, level: str) -> KernelApplyLevel:
        """The member for one of our level names (``"param"``, ``"model"``, ``"cross"``).

        Args:
            level: our level name.

        Returns:
            The member.
        """
        return cls(level)


class KernelExecutionProtocol(enum.Enum):
    """How a kernel's calls run: one after another, or spread over workers."""

    SEQUENTIAL = "sequential"
    PARALLEL = "parallel"


class KernelRestrictions(enum.Flag):
    """Extra rules of a kernel: ``BINARY`` cross-model kernels compare exactly two models."""

    BINARY = enum.auto()


__all__ = [
    "BINARY_KERNELS",
    "KernelApplyLevel",
    "KernelExecutionProtocol",
    "KernelExecutor",
    "KernelRestrictions",
]
