"""The kernel registry: field name -> the kernel producing it, families loaded on first use.

A *family* is a module of kernels named by a string: a short name for a built-in family
(``"fits"`` is :mod:`diffract.kernels.fits`) or a dotted module path. The registry imports a
family's module the first time it is asked about fields or kernels (to run one, inspect its
options, list fields), not when it is created, so opening a session imports no kernel
module. Family modules import their heavy dependencies (SciPy) inside the kernel functions,
so even listing fields stays light.
"""

from __future__ import annotations

import difflib
import importlib
import threading
from collections.abc import Callable, Iterable
from typing import Any, Unpack

from diffract._errors import DependencyCycleError, KernelDefinitionError, UnknownFieldError
from diffract.kernels.spec import Kernel, KernelSpec, define

__all__ = [
    "FAMILIES",
    "KernelRegistry",
    "builtin_kernels",
    "default_registry",
    "family_kernels",
    "kernel",
]

#: the built-in families, in catalog order (modules of :mod:`diffract.kernels`)
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
    "ww",
    "mpfit",
    "diagnostics",
    "hill",
    "diagnosis",
)


def _family_module(family: str) -> str:
    return family if "." in family else f"diffract.kernels.{family}"


def family_kernels(family: str) -> list[Kernel]:
    """The kernels a family module defines (with :func:`~diffract.kernels.spec.define`).

    Args:
        family: a built-in family's name (see :data:`FAMILIES`) or a dotted module path.

    Returns:
        Its kernels in definition order (those imported from elsewhere are left out).
    """
    module = importlib.import_module(_family_module(family))
    found: list[Kernel] = []
    for obj in vars(module).values():
        spec = getattr(obj, "__diffract_kernel__", None)
        if isinstance(spec, Kernel) and getattr(obj, "__module__", None) == module.__name__:
            found.append(spec)
    return found


def builtin_kernels() -> list[Kernel]:
    """Every kernel of the built-in families listed in :data:`FAMILIES`, in order."""
    return [k for family in FAMILIES for k in family_kernels(family)]


class KernelRegistry:
    """Maps field names to the kernel producing them; checks the graph for cycles.

    Args:
        kernels: kernels to register now.
        families: families (names or module paths) to load on first use; their kernels are
            registered before any kernel registered later.
    """

    def __init__(self, kernels: Iterable[Kernel] = (), *, families: Iterable[str] = ()) -> None:
        self._kernels: dict[str, Kernel] = {}
        self._producer: dict[str, str] = {}
        self._pending: list[str] = list(families)
        self._lock = threading.RLock()
        for k in kernels:
            self.register(k)

    # --- families --------------------------------------------------------------------------
    def add_family(self, family: str) -> None:
        """Register the kernels of ``family`` when the registry is next used.

        Args:
            family: a built-in family's name or a dotted module path.
        """
        with self._lock:
            self._pending.append(family)

    def pending_families(self) -> tuple[str, ...]:
        """Families named but not imported yet."""
        return tuple(self._pending)

    def _load(self) -> None:
        """Import the pending families and register their kernels (once)."""
        if not self._pending:
            return
        with self._lock:
            while self._pending:
                # an ImportError leaves the family pending; it leaves the list only once
                # its kernels are in, so no thread sees a half-loaded registry
                self._add_family(list(family_kernels(self._pending[0])))
                self._pending.pop(0)

    def _add_family(self, kernels: list[Kernel]) -> None:
        """Register a family's kernels with one cycle check for them all (a check after each
        kernel made loading the built-in families quadratic: ~25 ms of a process's first
        apply). Should anything fail, the registry is put back and they are added one by
        one, each checked, so the error raised and what stays registered are as before."""
        kernels_before, producers_before = dict(self._kernels), dict(self._producer)
        try:
            for k in kernels:
                self._add(k, replace=False, check=False)
            self.check_acyclic()
        except Exception:
            self._kernels, self._producer = kernels_before, producers_before
            for k in kernels:
                self._add(k, replace=False)

    # --- registration ----------------------------------------------------------------------
    def copy(self) -> KernelRegistry:
        """An independent registry with the same kernels (families loaded first)."""
        self._load()
        new = KernelRegistry()
        new._kernels = dict(self._kernels)
        new._producer = dict(self._producer)
        return new

    def register(self, k: Kernel, *, replace: bool = False) -> Kernel:
        """Add a kernel. Re-registering a field is an error unless ``replace=True``.

        Args:
            k: the kernel.
            replace: whether it may take over a kernel name or fields already registered.

        Returns:
            The kernel.

        Raises:
            KernelDefinitionError: its name or a field is taken and ``replace`` is False.
            DependencyCycleError: it would close a cycle (it is not registered then).
        """
        self._load()
        with self._lock:
            return self._add(k, replace=replace)

    def _add(self, k: Kernel, *, replace: bool, check: bool = True) -> Kernel:
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
                    self._remove(prev)
        self._kernels[k.name] = k
        for o in k.outputs:
            self._producer[o] = k.name
        if not check:
            return k
        try:
            self.check_acyclic()
        except DependencyCycleError:
            self._remove(k.name)
            raise
        return k

    def unregister(self, name: str) -> None:
        """Remove the kernel named ``name`` (a KeyError if there is none)."""
        self._load()
        self._remove(name)

    def _remove(self, name: str) -> None:
        k = self._kernels.pop(name)
        for o in k.outputs:
            if self._producer.get(o) == name:
                del self._producer[o]

    # --- look-up ---------------------------------------------------------------------------
    def kernel(self, name: str) -> Kernel:
        """The kernel registered under ``name`` (a kernel name or one of its fields)."""
        self._load()
        if name in self._kernels:
            return self._kernels[name]
        return self.producer(name)

    def producer(self, field_name: str) -> Kernel:
        """The kernel producing ``field_name``.

        Raises:
            UnknownFieldError: no registered kernel produces it (the message names close
                matches).
        """
        self._load()
        try:
            return self._kernels[self._producer[field_name]]
        except KeyError:
            raise UnknownFieldError(self.unknown_field_message(field_name)) from None

    def unknown_field_message(self, field_name: str) -> str:
        """Why ``field_name`` is unknown, with close matches and how to find fields."""
        self._load()
        close = difflib.get_close_matches(field_name, list(self._producer), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        return (
            f"unknown field {field_name!r}: no registered kernel produces it.{hint} "
            "List fields with diffract.fields() or register a kernel with @diffract.kernel."
        )

    def has_field(self, field_name: str) -> bool:
        """Whether a registered kernel produces ``field_name``."""
        self._load()
        return field_name in self._producer

    def fields(self) -> list[str]:
        """Every field a registered kernel produces, sorted."""
        self._load()
        return sorted(self._producer)

    def kernels(self) -> list[Kernel]:
        """Every registered kernel, in registration order."""
        self._load()
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
        """Kernels needed for ``fields``, in dependency order (inputs before users).

        Raises:
            UnknownFieldError: a field (or an input of a kernel needed) has no producer.
        """
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
#: cross-model kernels that compare exactly the two models of a scope (Diffract's
#: ``KernelRestrictions.BINARY``): ``compute.apply`` takes the pair's first id as reference
BINARY_KERNELS = frozenset({"l_overlap", "r_overlap"})

_DEFAULT_LOCK = threading.Lock()


def default_registry() -> KernelRegistry:
    """The process-wide registry: the built-in families (loaded on first use) plus the
    kernels the user registered."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = KernelRegistry(families=FAMILIES)
    return _DEFAULT


def kernel(
    func: Callable[..., Any] | None = None,
    *,
    registry: KernelRegistry | None = None,
    replace: bool = False,
    **spec: Unpack[KernelSpec],
) -> Any:
    """Decorator: declare a kernel from a function's signature and register it.

    Args:
        func: the kernel function (when used as ``@kernel`` without arguments).
        registry: where to register it; default: :func:`default_registry`.
        replace: whether it may take over a kernel or fields already registered.
        **spec: what the kernel produces and how it runs (the keys of ``KernelSpec``):
            ``outputs`` the field(s) it produces (default: the function's name);
            ``level`` ``"param"``, ``"model"`` or ``"cross"``; ``transient`` outputs kept in
            memory during a run, stored only when asked for; ``min_ndim`` slices with fewer
            dimensions are not applicable; ``vectorized`` the function takes lists (one entry
            per slice) and returns a list; ``streamed`` (with ``vectorized``) it returns an
            iterable (a generator works) whose results come as they are made, in input
            order: one call per chunk, slices largest first, each recorded as its result
            comes; ``family`` a label for the catalog; ``name`` the
            kernel's name (default: the function's name); ``descriptions`` one-line
            descriptions per output; ``option_rules`` choices and ranges of options.

    Returns:
        The function, with its spec as ``func.__diffract_kernel__``.

    >>> import diffract
    >>> @diffract.kernel(outputs="row_count", min_ndim=2)
    ... def row_count(weights):
    ...     return weights.shape[0]
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        define(f, **spec)
        (registry or default_registry()).register(f.__diffract_kernel__, replace=replace)
        return f

    return wrap(func) if func is not None else wrap
