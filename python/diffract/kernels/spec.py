"""Kernel specs: what a kernel is, how one is defined, and how its options are checked.

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

The registry (field -> kernel, families loaded on first use) is :mod:`diffract.kernels.registry`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, Unpack

from diffract._errors import (
    KernelDefinitionError,
    OptionValueError,
)
from diffract._vocab.arrays import scalar_kind, storable_error

Level = Literal["param", "model", "cross"]
LEVELS: tuple[str, ...] = ("param", "model", "cross")

#: inputs that are not fields: provided by the scheduler
SPECIAL_INPUTS = frozenset({"weights", "slice_info", "slices"})


class SliceNotApplicable(Exception):
    """Raised by a kernel to say that its fields do not exist on this slice, and why.

    The run records the slice's requested values as *not applicable* (not failures) and
    keeps the message in ``RunReport.not_applicable_reasons``; the kernels depending on them
    are not applicable on that slice too. (WeightWatcher's size guards and layer selection,
    :mod:`diffract.kernels.ww`, use it.)
    """


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
    #: (vectorized only) the results arrive as they are made: the function returns an
    #: iterable in input order (a generator works), so the run calls it once on a chunk's
    #: slices, largest first, and records each slice as its result comes
    streamed: bool = False
    family: str = "custom"
    doc: str = ""
    #: per-output one-line descriptions (for the catalog)
    descriptions: Mapping[str, str] = field(default_factory=dict)
    #: choices and ranges of options, beyond what their defaults' kinds say
    option_rules: Mapping[str, OptionRule] = field(default_factory=dict)

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
# that. ``reference`` is read by the scheduler itself: a model id (str) or None. A kernel
# may also declare choices and ranges (:class:`OptionRule`, ``define(option_rules=...)``).

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


@dataclass(frozen=True)
class OptionRule:
    """What values a kernel option accepts beyond its kind: a set of strings, or a range.

    Declared by the kernel (``define(..., option_rules={"rtol": at_least(0)})``), so the
    registry and option checks import nothing from the kernel families.

    Attributes:
        choices: the strings accepted, or None.
        low: the lower bound of a numeric range, or None.
        low_inclusive: whether ``low`` itself is accepted.
        high: the upper bound, or None.
        high_inclusive: whether ``high`` itself is accepted.
    """

    choices: tuple[str, ...] | None = None
    low: float | None = None
    low_inclusive: bool = True
    high: float | None = None
    high_inclusive: bool = False


def one_of(*values: str) -> OptionRule:
    """An option that takes one of ``values`` (strings)."""
    return OptionRule(choices=tuple(values))


def at_least(low: float) -> OptionRule:
    """A numeric option ``>= low``."""
    return OptionRule(low=low, low_inclusive=True)


def above(low: float) -> OptionRule:
    """A numeric option ``> low``."""
    return OptionRule(low=low, low_inclusive=False)


def between(low: float, high: float) -> OptionRule:
    """A numeric option strictly between ``low`` and ``high``."""
    return OptionRule(low=low, low_inclusive=False, high=high, high_inclusive=False)


def is_builtin(k: Kernel) -> bool:
    """Whether ``k`` is one of the built-in kernels (defined under ``diffract.kernels``)."""
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
    """The kind an option value has for :func:`option_kinds` (None is ``"none"``; a complex
    value, like any other, has none)."""
    if value is None:
        return "none"
    kind = scalar_kind(value)
    return None if kind == "complex" else kind


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
    if kind == "float" and not math.isfinite(float(value)):
        raise OptionValueError(f"{where} must be a finite number, got {value!r}")
    rule = k.option_rules.get(option)
    if rule is None:
        return
    if kind in ("int", "float"):
        _check_range(where, rule, value)
    if kind == "str" and rule.choices is not None and value not in rule.choices:
        raise OptionValueError(f"{where} must be one of {list(rule.choices)}, got {value!r}")


def _check_range(where: str, rule: OptionRule, value: Any) -> None:
    low, low_in, high, high_in = rule.low, rule.low_inclusive, rule.high, rule.high_inclusive
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
    streamed: bool = False,
    family: str = "custom",
    name: str | None = None,
    descriptions: Mapping[str, str] | None = None,
    option_rules: Mapping[str, OptionRule] | None = None,
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
    if streamed and not vectorized:
        raise KernelDefinitionError(f"kernel {kname!r}: streamed=True needs vectorized=True")
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
    rules = dict(option_rules or {})
    if not set(rules) <= set(options):
        raise KernelDefinitionError(
            f"kernel {kname!r}: option_rules name {sorted(set(rules) - set(options))}, "
            f"which are not among its options {sorted(options)}"
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
        streamed=streamed,
        family=family,
        doc=inspect.cleandoc(func.__doc__ or ""),
        descriptions=dict(descriptions or {}),
        option_rules=rules,
    )


class KernelSpec(TypedDict, total=False):
    """The keyword arguments of :func:`define` and :func:`diffract.kernel` (those of
    :func:`make_kernel`): what a kernel produces and how it runs."""

    outputs: str | Iterable[str] | None
    level: Level
    transient: Iterable[str]
    min_ndim: int
    vectorized: bool
    streamed: bool
    family: str
    name: str | None
    descriptions: Mapping[str, str] | None
    option_rules: Mapping[str, OptionRule] | None


def define(func: Callable[..., Any] | None = None, **spec: Unpack[KernelSpec]) -> Any:
    """Decorator: attach a :class:`Kernel` spec to ``func`` as ``func.__diffract_kernel__``
    without registering it (built-in families are collected explicitly, no import side effects).

    Args:
        func: the kernel function (when used as ``@define`` without arguments).
        **spec: the keyword arguments of :func:`make_kernel`.

    Returns:
        The function (or, without ``func``, a decorator).
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__diffract_kernel__ = make_kernel(f, **spec)  # type: ignore[attr-defined]
        return f

    return wrap(func) if func is not None else wrap
