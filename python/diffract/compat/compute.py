"""Diffract's ``compute``: kernel listing, ``configure_kernel`` and the ``kernel`` decorator,
over our :class:`diffract.session.compute.Compute`.

Kernels registered here and kernel configuration belong to the session (Diffract's are
process-wide): the session gets a registry of its own on its first custom kernel
(:meth:`diffract.session.session.Session.register_kernel`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from diffract._errors import OptionValueError
from diffract._vocab.slices import SliceInfo
from diffract.core.compute.config import KernelConfig
from diffract.core.compute.execution import (
    BINARY_KERNELS,
    KernelApplyLevel,
    KernelExecutionProtocol,
    KernelRestrictions,
)
from diffract.core.compute.registry import diffract_kernel
from diffract.session.compute import Compute as OurCompute
from diffract.session.records import record_contexts

#: Diffract's ``fit_method`` values of the power-law fits, as ours: its "powerlaw" (the
#: ``powerlaw`` package's Clauset fit) is our "clauset"; "auto" and "diffract" our default
_FIT_METHODS = {"powerlaw": "clauset", "auto": "ww", "diffract": "ww"}
#: the fits whose ``fit_method`` Diffract documents but which have one method here: its
#: values are accepted and change nothing (docs/migrating-from-diffract.md#d-fit-method-one)
_ONE_METHOD_FITS = frozenset({"truncated_power_law_fit", "exponential_fit"})
#: Diffract's SVD kernels take ``allow_cuda``; ours ``svd_device`` ("auto" uses a GPU when
#: there is one, as ``allow_cuda=True`` does; "cpu" never)
_CUDA_KERNELS = frozenset({"weights_svd", "weights_rand_svd"})

_log = logging.getLogger("diffract.session.compute")  # Diffract users' logger name


def _diffract_options(kernel: str, config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``configure_kernel``'s options as ours, and Diffract's options taken in their place.

    Raises:
        OptionValueError: ``allow_cuda`` that is not a bool, or a ``fit_method`` of a
            one-method fit that is not one of Diffract's values.
    """
    ours = dict(config)
    theirs: dict[str, Any] = {}
    if kernel == "power_law_fit" and ours.get("fit_method") in _FIT_METHODS:
        ours["fit_method"] = _FIT_METHODS[ours["fit_method"]]
    if kernel in _ONE_METHOD_FITS and "fit_method" in ours:
        value = ours.pop("fit_method")
        if not isinstance(value, str) or value not in _FIT_METHODS:
            raise OptionValueError(
                f"kernel {kernel!r}: fit_method must be one of Diffract's "
                f"{sorted(_FIT_METHODS)}, got {value!r}"
            )
        theirs["fit_method"] = value
        _log.info(
            "%s has one fit method here; fit_method=%r is accepted and changes nothing",
            kernel,
            value,
        )
    if kernel in _CUDA_KERNELS and "allow_cuda" in ours:
        value = ours.pop("allow_cuda")
        if not isinstance(value, (bool, np.bool_)):
            raise OptionValueError(
                f"kernel {kernel!r}: allow_cuda must be a bool, got "
                f"{type(value).__name__}: {value!r}"
            )
        theirs["allow_cuda"] = bool(value)
        ours.setdefault("svd_device", "auto" if value else "cpu")
    return ours, theirs


def _level_name(k: Any) -> str:
    return f"KernelApplyLevel.{KernelApplyLevel.of(k.level).name}"


class Compute(OurCompute):
    """``session.compute`` with Diffract's methods too (``list_available_kernels``,
    ``list_available_metrics``, ``configure_kernel``, ``kernel``)."""

    def _selected(self, selected: Sequence[SliceInfo], fields: Sequence[str]) -> None:
        """Keep the parameter names of a partial selection's model-level values, which
        Diffract's ``export_aggregates`` shows to every scope meeting them."""
        record_contexts(self._scope, selected, fields)

    def list_available_kernels(self, verbose: bool = False) -> list[str]:
        """The kernel names, sorted.

        Args:
            verbose: describe each as ``"<kernel> (<inputs>; <k>=<v>, ...): KernelApplyLevel.<LEVEL>"``.

        Returns:
            The names (or descriptions).
        """
        kernels = sorted(self._session.registry.kernels(), key=lambda k: k.name)
        if not verbose:
            return [k.name for k in kernels]
        out = []
        for k in kernels:
            opts = ", ".join(f"{n}={v}" for n, v in k.options.items() if n != "reference")
            line = f"{k.name} ({', '.join(k.field_inputs())}; {opts}): {_level_name(k)}"
            if k.level == "cross" and k.name in self._binary():
                line += ",KernelRestrictions.BINARY"
            out.append(line)
        return out

    def _binary(self) -> set[str]:
        """Kernels whose fields need exactly two models (their own or a dependency's)."""
        registry = self._session.registry
        binary = (
            set(BINARY_KERNELS)
            | self._scope.session.binary_kernels
            | getattr(registry, "binary", set())
        )
        return {
            k.name
            for k in registry.kernels()
            if k.level == "cross" and any(c.name in binary for c in registry.closure(k.outputs))
        }

    def list_available_metrics(self, verbose: bool = False) -> list[str]:
        """The field names the kernels produce, sorted.

        Args:
            verbose: ``"<field> <- <kernel>"`` instead.

        Returns:
            The names (or descriptions).
        """
        registry = self._session.registry
        fields = sorted(registry.fields())
        if not verbose:
            return fields
        return [f"{f} <- {registry.producer(f).name}" for f in fields]

    def configure_kernel(self, kernel_name: str, **config: Any) -> KernelConfig:
        """Set options of one kernel for this session's later runs (Diffract's name).

        Stored values are kept: erase them to recompute with the new options. Diffract's
        documented options are taken: ``fit_method`` ``"auto"``/``"diffract"`` (our
        ``"ww"``) and ``"powerlaw"`` (our ``"clauset"``); on ``truncated_power_law_fit`` and
        ``exponential_fit``, which have one method here, any of them (no effect);
        ``allow_cuda`` on ``weights_svd``/``weights_rand_svd`` (our ``svd_device``
        ``"auto"``/``"cpu"``).

        Args:
            kernel_name: a kernel (or a field it produces).
            **config: option values.

        Returns:
            A :class:`~diffract.core.compute.KernelConfig` (a dict with Diffract's
            ``as_dict()``) of the values passed, as Diffract's (``compute.configure(kernel)``
            gives the options now configured, in our values).

        Raises:
            UnknownFieldError: no such kernel (a ``KernelNotFoundError``).
            UnknownOptionError: an option the kernel does not take (an
                ``InvalidConfigurationError``).
        """
        k = self._session.registry.kernel(kernel_name)
        ours, _ = _diffract_options(k.name, config)
        if ours:
            self.configure(kernel_name, **ours)
        return KernelConfig(**config)

    def kernel(
        self,
        _func: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        require_fields: Iterable[str] | None = None,
        produce_fields: str | Iterable[str] | None = None,
        apply_level: KernelApplyLevel = KernelApplyLevel.PARAMETER,
        execution_protocol: KernelExecutionProtocol = KernelExecutionProtocol.SEQUENTIAL,
        restrictions: KernelRestrictions | None = None,
    ) -> Any:
        """Decorator: register a kernel with this session (Diffract's arguments).

        Inputs are the parameters without defaults (or ``require_fields``), options those
        with defaults. ``execution_protocol`` and ``restrictions`` are accepted: every run
        here uses the session's executor, and every cross-model field compares two models.

        Args:
            _func: the function, when used bare (``@session.compute.kernel``).
            name: the kernel's name (default: the function's).
            require_fields: the input field names, over the signature's.
            produce_fields: the field(s) it produces (default: its name).
            apply_level: ``KernelApplyLevel.PARAMETER``, ``IN_MODEL`` or ``CROSS_MODEL``.
            execution_protocol: ``KernelExecutionProtocol.SEQUENTIAL`` or ``PARALLEL``.
            restrictions: ``KernelRestrictions.BINARY`` or None.

        Returns:
            The function unchanged (or the decorator).
        """
        level = KernelApplyLevel(apply_level)  # checked here, as Diffract does
        KernelExecutionProtocol(execution_protocol)

        def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
            kname = name or func.__name__
            k = diffract_kernel(func, kname, require_fields, produce_fields, level)
            binary = restrictions is not None and KernelRestrictions.BINARY in restrictions
            self._scope.session.register_kernel(k, binary=binary)
            return func

        return wrap(_func) if _func is not None else wrap
