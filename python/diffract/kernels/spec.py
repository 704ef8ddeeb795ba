"""Kernel specs and the registry.

A kernel is a plain function. Its signature declares everything:

* required parameters (no default) are its **inputs**: names of fields, or one of the
  special inputs ``weights`` (the slice as a float ndarray) and ``slice_info`` (its
  :class:`~diffract.SliceInfo`); at ``level="model"`` an input receives the list of that
  field's values over the model's slices (and ``slices`` the list of SliceInfo); at
  ``level="cross"`` an input named ``ref_<field>`` receives ``<field>`` of the slice with the
  same name in the reference model (option ``reference``);
* keyword parameters with defaults are its **options**, changeable at run time.

``@kernel(outputs=(...))`` declares the fields it produces. A kernel with one output returns
the value; with several it returns a tuple in ``outputs`` order (or a dict keyed by output).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from diffract._core.arrays import storable_error
from diffract._errors import (
    DependencyCycleError,
    KernelDefinitionError,
    OptionValueError,
    UnknownFieldError,
)

Level = Literal["param", "model", "cross"]
LEVELS: tuple[str, ...] = ("param", "model", "cross")

#: inputs that are not fields: provided by the scheduler
SPECIAL_INPUTS = frozenset({"weights", "slice_info", "slices"})


@dataclass(frozen=True)
class Kernel:
    """A registered kernel: a function plus its declared inputs, outputs and options."""

    name: str
    func: Callable[..., Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    options: Mapping[str, Any]
    level: Level = "param"
    #: outputs kept in memory during a run but not persisted unless asked for by name
    transient: frozenset[str] = frozenset()
    #: slices with fewer dimensions are "not applicable" (skipped, not failures)
    min_ndim: int = 0
    #: the function takes lists (one entry per slice) and returns a list of results
    vectorized: bool = False
    family: str = "custom"
    doc: str = ""
    #: per-output one-line descriptions (for the catalog)
    descriptions: Mapping[str, str] = field(default_factory=dict)

    def field_inputs(self) -> tuple[str, ...]:
        """Inputs that are fields (not special), with any ``ref_`` prefix removed."""
        out = []
        for name in self.inputs:
            base = name[4:] if self.level == "cross" and name.startswith("ref_") else name
            if base not in SPECIAL_INPUTS:
                out.append(base)
        return tuple(dict.fromkeys(out))

    def resolve_options(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The kernel's default options updated with those ``overrides`` it accepts."""
        opts = dict(self.options)
        if overrides:
            opts.update({k: v for k, v in overrides.items() if k in self.options})
        return opts

    def split_outputs(self, result: Any) -> dict[str, Any]:
        """Map a call's return value onto the declared outputs.

        Outputs that are persisted (all but the transient ones) must be values the store
        can hold (see :func:`storable_error`); anything else is a
        :class:`KernelDefinitionError` naming the kernel, the output and the type, which the
        scheduler records as a failure of that slice."""
        out = self._split(result)
        for o, v in out.items():
            if o in self.transient:
                continue  # kept in memory only; checked if it is asked for by name
            problem = storable_error(v)
            if problem is not None:
                raise KernelDefinitionError(self.unstorable_message(o, problem))
        return out

    def unstorable_message(self, output: str, problem: str) -> str:
        """Why the value of ``output`` cannot be stored, naming this kernel."""
        return (
            f"kernel {self.name!r} returned {problem} for field {output!r}, which cannot be "
            "stored; return a number, bool, str or NumPy array of a numeric dtype"
        )

    def _split(self, result: Any) -> dict[str, Any]:
        if len(self.outputs) == 1:
            if isinstance(result, Mapping) and self.outputs[0] in result:
                extra = sorted(str(k) for k in result if k != self.outputs[0])
                if extra:
                    raise KernelDefinitionError(
                        f"kernel {self.name!r} returned a dict with keys {extra} that are not "
                        f"among its outputs {list(self.outputs)}; return the value itself, or "
                        "declare every output in @kernel(outputs=...)"
                    )
                return dict(result)
            return {self.outputs[0]: result}
        if isinstance(result, Mapping):
            missing = [o for o in self.outputs if o not in result]
            if missing:
                raise KernelDefinitionError(
                    f"kernel {self.name!r} returned a dict without outputs {missing}"
                )
            return {o: result[o] for o in self.outputs}
        if isinstance(result, tuple) and len(result) == len(self.outputs):
            return dict(zip(self.outputs, result, strict=True))
        raise KernelDefinitionError(
            f"kernel {self.name!r} declares {len(self.outputs)} outputs {self.outputs} but returned "
            f"{type(result).__name__}; return a tuple in that order or a dict keyed by output"
        )


# --- option values ------------------------------------------------------------------------
#
# An option's accepted values follow from its declared default: a bool default takes bools,
# an int default ints, a float default ints or floats (finite), a str default strings, a None
# default None or a finite number. A simple annotation (``x: str | None = None``) overrides
# that. ``reference`` is read by the scheduler itself: a model id (str) or None. Built-in
# kernels also declare choices and ranges here (their modules are not changed for it).

#: kinds of option values: "bool", "int", "float" (ints accepted), "str", "none"
_KIND_NAMES = {
    "bool": "a bool",
    "int": "an int",
    "float": "a number",
    "str": "a string",
    "none": "None",
}
_ANNOTATION_KINDS = {
    "bool": "bool",
    "int": "int",
    "float": "float",
    "str": "str",
    "None": "none",
    "NoneType": "none",
}
#: options the scheduler reads whatever the kernel: their accepted kinds
SCHEDULER_OPTION_KINDS: dict[str, frozenset[str]] = {"reference": frozenset({"str", "none"})}


@functools.cache
def _builtin_choices() -> dict[str, tuple[str, ...]]:
    choices: dict[str, tuple[str, ...]] = {"svd_device": ("cpu", "cuda", "auto")}
    try:
        from diffract.kernels import _linalg, fits, spectral

        choices["precision"] = tuple(_linalg.PRECISIONS)
        choices["fit_method"] = tuple(fits.FIT_METHODS)
        choices["esd_scale"] = tuple(spectral.ESD_SCALES)
    except (ImportError, AttributeError):  # pragma: no cover - the kernels check them too
        pass
    return choices


#: ranges of built-in numeric options: (low, low_inclusive, high, high_inclusive)
_BUILTIN_RANGES: dict[str, tuple[float | None, bool, float | None, bool]] = {
    "spectrum_threads": (0, True, None, False),
    "seed": (0, True, None, False),
    "fit_evals_thresh": (0, True, None, False),
    "recheck_rtol": (0, False, None, False),
    "rtol": (0, True, None, False),
    "outlier_sigmas": (0, True, None, False),
    "sparsity_atol": (0, True, None, False),
    "weak_rank_tol": (0, True, None, False),
    "p_value_threshold": (0, False, 1, False),
}


def _is_builtin(k: Kernel) -> bool:
    return getattr(k.func, "__module__", "").startswith("diffract.kernels.")


def _annotation_kinds(annotation: Any) -> frozenset[str] | None:
    """Kinds named by a simple annotation (``float``, ``"str | None"``, ``Optional[int]``),
    or None when there is none or it is not that simple."""
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        text = annotation.strip()
        if text.startswith("Optional[") and text.endswith("]"):
            text = text[len("Optional[") : -1] + " | None"
        parts = [p.strip() for p in text.split("|")]
    else:
        args = getattr(annotation, "__args__", None)
        items = list(args) if args else [annotation]
        parts = ["None" if a is type(None) else getattr(a, "__name__", "?") for a in items]
    kinds = [_ANNOTATION_KINDS.get(p) for p in parts]
    if not kinds or any(k is None for k in kinds):
        return None
    return frozenset(k for k in kinds if k is not None)


def option_kinds(k: Kernel, option: str) -> frozenset[str] | None:
    """The kinds of values ``option`` of kernel ``k`` accepts; None: not checked."""
    if option in SCHEDULER_OPTION_KINDS:
        return SCHEDULER_OPTION_KINDS[option]
    try:
        param = inspect.signature(k.func).parameters.get(option)
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        param = None
    if param is not None:
        kinds = _annotation_kinds(param.annotation)
        if kinds is not None:  # the default itself is always accepted
            own = _value_kind(k.options.get(option))
            return kinds | {own} if own is not None else kinds
    kind = _value_kind(k.options.get(option))
    if kind == "none":  # a None default: None or a number
        return frozenset({"none", "float"})
    # other defaults (tuples, objects): None, the kernel checks its own values
    return frozenset({kind}) if kind is not None else None


def _value_kind(value: Any) -> str | None:
    if value is None:
        return "none"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "str"
    return None


def check_option_value(k: Kernel, option: str, value: Any) -> None:
    """Raise :class:`OptionValueError` (naming the kernel, the option and what it expects)
    when ``value`` does not fit ``option`` of kernel ``k``."""
    kinds = option_kinds(k, option)
    if kinds is None:
        return
    where = f"option {option!r} of kernel {k.name!r}"
    kind = _value_kind(value)
    ok = kind in kinds or (kind == "int" and "float" in kinds)
    if not ok:
        order = [n for n in ("bool", "int", "float", "str", "none") if n in kinds]
        expected = " or ".join(_KIND_NAMES[n] for n in order)
        raise OptionValueError(f"{where} must be {expected}, got {type(value).__name__}: {value!r}")
    if kind in ("int", "float"):
        if kind == "float" and not math.isfinite(float(value)):
            raise OptionValueError(f"{where} must be a finite number, got {value!r}")
        if _is_builtin(k) and option in _BUILTIN_RANGES:
            _check_range(where, option, value)
    if kind == "str" and _is_builtin(k):
        choices = _builtin_choices().get(option)
        if choices is not None and value not in choices:
            raise OptionValueError(f"{where} must be one of {list(choices)}, got {value!r}")


def _check_range(where: str, option: str, value: Any) -> None:
    low, low_in, high, high_in = _BUILTIN_RANGES[option]
    v = float(value)
    bad_low = low is not None and (v < low or (v == low and not low_in))
    bad_high = high is not None and (v > high or (v == high and not high_in))
    if bad_low or bad_high:
        lo = "" if low is None else f"{'>=' if low_in else '>'} {low}"
        hi = "" if high is None else f"{'<=' if high_in else '<'} {high}"
        rng = " and ".join(p for p in (lo, hi) if p)
        raise OptionValueError(f"{where} must be {rng}, got {value!r}")


def check_options(
    kernels: Iterable[Kernel],
    options: Mapping[str, Any],
    kernel_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Check option values: each of ``options`` against every kernel of ``kernels`` that
    has it, each of ``kernel_options[name]`` against that kernel."""
    kernels = list(kernels)
    for option, value in options.items():
        for k in kernels:
            if option in k.options:
                check_option_value(k, option, value)
    if kernel_options:
        by_name = {k.name: k for k in kernels}
        for kname, opts in kernel_options.items():
            k = by_name.get(kname)
            if k is None:
                continue
            for option, value in opts.items():
                if option in k.options:
                    check_option_value(k, option, value)


def _signature_spec(func: Callable[..., Any]) -> tuple[tuple[str, ...], dict[str, Any]]:
    inputs: list[str] = []
    options: dict[str, Any] = {}
    for p in inspect.signature(func).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise KernelDefinitionError(
                f"kernel {func.__name__!r}: *args/**kwargs are not allowed; name every input and option"
            )
        if p.default is p.empty:
            if p.kind is p.KEYWORD_ONLY:
                raise KernelDefinitionError(
                    f"kernel {func.__name__!r}: keyword-only parameter {p.name!r} needs a default "
                    "(options have defaults; inputs are positional)"
                )
            inputs.append(p.name)
        else:
            options[p.name] = p.default
    return tuple(inputs), options


def make_kernel(
    func: Callable[..., Any],
    *,
    outputs: str | Iterable[str] | None = None,
    level: Level = "param",
    transient: Iterable[str] = (),
    min_ndim: int = 0,
    vectorized: bool = False,
    family: str = "custom",
    name: str | None = None,
    descriptions: Mapping[str, str] | None = None,
) -> Kernel:
    """Build a :class:`Kernel` from a function (see the module docstring for the rules)."""
    if level not in LEVELS:
        raise KernelDefinitionError(f"level must be one of {LEVELS}, got {level!r}")
    kname = name or func.__name__
    if outputs is None:
        outs: tuple[str, ...] = (kname,)
    elif isinstance(outputs, str):
        outs = (outputs,)
    else:
        outs = tuple(outputs)
    if not outs or len(set(outs)) != len(outs):
        raise KernelDefinitionError(f"kernel {kname!r}: outputs must be distinct names, got {outs}")
    for o in outs:
        if not o.isidentifier():
            raise KernelDefinitionError(f"kernel {kname!r}: output {o!r} is not an identifier")
    inputs, options = _signature_spec(func)
    if level == "param" and "slices" in inputs:
        raise KernelDefinitionError(f"kernel {kname!r}: 'slices' is only an input at model level")
    clash = set(inputs) & set(outs)
    if clash:
        raise KernelDefinitionError(f"kernel {kname!r}: {sorted(clash)} is both input and output")
    trans = frozenset(transient)
    if not trans <= set(outs):
        raise KernelDefinitionError(
            f"kernel {kname!r}: transient {sorted(trans - set(outs))} not outputs"
        )
    return Kernel(
        name=kname,
        func=func,
        inputs=inputs,
        outputs=outs,
        options=options,
        level=level,
        transient=trans,
        min_ndim=min_ndim,
        vectorized=vectorized,
        family=family,
        doc=inspect.cleandoc(func.__doc__ or ""),
        descriptions=dict(descriptions or {}),
    )


class KernelRegistry:
    """Maps field names to the kernel producing them; checks the graph for cycles."""

    def __init__(self, kernels: Iterable[Kernel] = ()) -> None:
        self._kernels: dict[str, Kernel] = {}
        self._producer: dict[str, str] = {}
        for k in kernels:
            self.register(k)

    def copy(self) -> KernelRegistry:
        new = KernelRegistry()
        new._kernels = dict(self._kernels)
        new._producer = dict(self._producer)
        return new

    def register(self, k: Kernel, *, replace: bool = False) -> Kernel:
        """Add a kernel. Re-registering a field is an error unless ``replace=True``."""
        if not replace:
            if k.name in self._kernels:
                raise KernelDefinitionError(
                    f"a kernel named {k.name!r} is already registered; pass replace=True to override it"
                )
            taken = [o for o in k.outputs if o in self._producer]
            if taken:
                raise KernelDefinitionError(
                    f"kernel {k.name!r}: field(s) {taken} already produced by kernel "
                    f"{self._producer[taken[0]]!r}; pass replace=True to override"
                )
        else:
            old = self._kernels.pop(k.name, None)
            if old is not None:
                for o in old.outputs:
                    self._producer.pop(o, None)
            for o in k.outputs:
                prev = self._producer.get(o)
                if prev is not None and prev != k.name:
                    self.unregister(prev)
        self._kernels[k.name] = k
        for o in k.outputs:
            self._producer[o] = k.name
        try:
            self.check_acyclic()
        except DependencyCycleError:
            self.unregister(k.name)
            raise
        return k

    def unregister(self, name: str) -> None:
        k = self._kernels.pop(name)
        for o in k.outputs:
            if self._producer.get(o) == name:
                del self._producer[o]

    def kernel(self, name: str) -> Kernel:
        """The kernel registered under ``name`` (a kernel name or one of its fields)."""
        if name in self._kernels:
            return self._kernels[name]
        return self.producer(name)

    def producer(self, field_name: str) -> Kernel:
        try:
            return self._kernels[self._producer[field_name]]
        except KeyError:
            raise UnknownFieldError(self.unknown_field_message(field_name)) from None

    def unknown_field_message(self, field_name: str) -> str:
        import difflib

        close = difflib.get_close_matches(field_name, list(self._producer), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        return (
            f"unknown field {field_name!r}: no registered kernel produces it.{hint} "
            "List fields with diffract.fields() or register a kernel with @diffract.kernel."
        )

    def has_field(self, field_name: str) -> bool:
        return field_name in self._producer

    def fields(self) -> list[str]:
        return sorted(self._producer)

    def kernels(self) -> list[Kernel]:
        return list(self._kernels.values())

    def check_acyclic(self) -> None:
        """Raise :class:`DependencyCycleError` naming the cycle, if there is one."""
        state: dict[str, int] = {}
        stack: list[str] = []

        def visit(kname: str) -> None:
            state[kname] = 1
            stack.append(kname)
            for dep in self._kernels[kname].field_inputs():
                prod = self._producer.get(dep)
                if prod is None:
                    continue
                if state.get(prod) == 1:
                    cyc = [*stack[stack.index(prod) :], prod]
                    raise DependencyCycleError(
                        "kernels depend on each other in a cycle: " + " -> ".join(cyc)
                    )
                if state.get(prod) is None:
                    visit(prod)
            stack.pop()
            state[kname] = 2

        for kname in list(self._kernels):
            if kname not in state:
                visit(kname)

    def closure(self, fields: Iterable[str]) -> list[Kernel]:
        """Kernels needed for ``fields``, in dependency order (inputs before users)."""
        order: list[Kernel] = []
        seen: set[str] = set()

        def visit(f: str) -> None:
            k = self.producer(f)
            if k.name in seen:
                return
            seen.add(k.name)
            for dep in k.field_inputs():
                visit(dep)
            order.append(k)

        for f in fields:
            visit(f)
        return order


_DEFAULT: KernelRegistry | None = None


def default_registry() -> KernelRegistry:
    """The process-wide registry: the built-in kernels plus those the user registered."""
    global _DEFAULT
    if _DEFAULT is None:
        from diffract.kernels import builtin_kernels

        _DEFAULT = KernelRegistry(builtin_kernels())
    return _DEFAULT


def define(
    func: Callable[..., Any] | None = None,
    *,
    outputs: str | Iterable[str] | None = None,
    level: Level = "param",
    transient: Iterable[str] = (),
    min_ndim: int = 0,
    vectorized: bool = False,
    family: str = "custom",
    name: str | None = None,
    descriptions: Mapping[str, str] | None = None,
):
    """Decorator: attach a :class:`Kernel` spec to ``func`` as ``func.__diffract_kernel__``
    without registering it (built-in families are collected explicitly, no import side effects).
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__diffract_kernel__ = make_kernel(  # type: ignore[attr-defined]
            f,
            outputs=outputs,
            level=level,
            transient=transient,
            min_ndim=min_ndim,
            vectorized=vectorized,
            family=family,
            name=name,
            descriptions=descriptions,
        )
        return f

    return wrap(func) if func is not None else wrap


def kernel(
    func: Callable[..., Any] | None = None,
    *,
    outputs: str | Iterable[str] | None = None,
    level: Level = "param",
    transient: Iterable[str] = (),
    min_ndim: int = 0,
    vectorized: bool = False,
    family: str = "custom",
    name: str | None = None,
    descriptions: Mapping[str, str] | None = None,
    registry: KernelRegistry | None = None,
    replace: bool = False,
):
    """Decorator: declare a kernel from a function's signature and register it.

    >>> import diffract
    >>> @diffract.kernel(outputs="row_count", min_ndim=2)
    ... def row_count(weights):
    ...     return weights.shape[0]
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        define(
            f,
            outputs=outputs,
            level=level,
            transient=transient,
            min_ndim=min_ndim,
            vectorized=vectorized,
            family=family,
            name=name,
            descriptions=descriptions,
        )
        (registry or default_registry()).register(f.__diffract_kernel__, replace=replace)
        return f

    return wrap(func) if func is not None else wrap
