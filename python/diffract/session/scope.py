"""What a scope selects: slices of the store matched by a filter chain, and their owner keys.

:class:`Selection` is the base of :class:`diffract.session.Scope`; the namespaces
(``models``, ``compute``, ``results``, ``viz``, ``utils``) are accessor classes that read the
selection through it. :class:`SessionLike` names what they use of the session.

Also what the namespaces share: the argument checks (``check_flag``, ``check_field_names``,
...) and :func:`frontend`, the table of the views the session names without importing them.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar, overload

import numpy as np

from diffract._core.filters import Filter, FilterChain
from diffract._core.jsonable import to_jsonable
from diffract._core.owners import is_cross_owner, model_owner, parse_owner
from diffract._core.slices import SliceInfo
from diffract._errors import FieldNameError, InvalidArgumentError, ParameterNotFoundError
from diffract.extract.references import ReferenceReader
from diffract.kernels.registry import KernelRegistry
from diffract.kernels.spec import Kernel
from diffract.run.report import RunReport
from diffract.store import Store


class SessionLike(Protocol):
    """The session's state the namespaces read and write."""

    store: Store
    registry: KernelRegistry
    readonly: bool
    memory_budget: int
    workers: int
    executor: Any
    kernel_calls: dict[str, int]
    last_report: RunReport | None
    options: dict[str, Any]
    kernel_options: dict[str, dict[str, Any]]
    cancel_event: threading.Event | None
    references: ReferenceReader

    @property
    def binary_kernels(self) -> frozenset[str]: ...

    def check_writable(self) -> None: ...

    def register_kernel(self, kernel: Kernel, *, binary: bool = False) -> None: ...


class Selection:
    """The slices of a session's store that a filter chain matches.

    Args:
        session: the session whose store is read.
        chain: the filter (an empty chain selects everything).
    """

    def __init__(self, session: SessionLike, chain: FilterChain) -> None:
        self._session = session
        self._chain = chain

    @property
    def session(self) -> SessionLike:
        """The session this selection belongs to (itself for a Session)."""
        return self._session

    @property
    def filter_chain(self) -> FilterChain:
        """The filter of this scope, as data."""
        return self._chain

    def slices(self) -> list[SliceInfo]:
        """The slices of the store this selection holds (re-read from the store).

        Returns:
            The slices, model by model in the store's order.
        """
        store = self._session.store
        store.refresh()
        if self._chain.is_empty:
            out: list[SliceInfo] = store.slices()
            return out
        out = []
        for m in store.models():
            if self._chain.matches_model(m):
                out.extend(self._chain.select(store.slices(m)))
        return out

    def _narrow(self, f: Filter) -> FilterChain:
        """This scope's chain with ``f`` added, once its ``param_ids`` are checked.

        A uid that is stored but outside this scope is not an error: the AND of the two
        selects nothing of it.

        Raises:
            ParameterNotFoundError: a ``param_ids`` entry that is no stored parameter (a
                ``KeyError``, as Diffract's).
        """
        if f.param_ids:
            store = self._session.store
            store.refresh()
            known = {s.uid for s in store.slices()}
            unknown = [u for u in f.param_ids if u not in known]
            if unknown:
                raise ParameterNotFoundError(
                    f"param_ids {unknown} are not stored parameters; list the uids with "
                    ".models.parameters.list() (a uid changes with its model's id)"
                )
        return self._chain.and_(f)

    def model_ids(self) -> list[str]:
        """The stored models with a slice in the selection (all of them when unfiltered).

        Returns:
            The model ids, in the store's order.
        """
        store = self._session.store
        store.refresh()
        chain = self._chain
        return [
            m
            for m in store.models()
            if chain.matches_model(m) and (chain.is_empty or self._has_slices(m))
        ]

    def _has_slices(self, model_id: str) -> bool:
        return bool(self._chain.select(self._session.store.slices(model_id)))

    def model_owner(self, model_id: str) -> str:
        """The owner key of a model's model-level fields computed on this selection.

        Args:
            model_id: a model of the selection.

        Returns:
            ``@m`` where the selection holds every slice of ``model_id``, else ``@m[scope]``.
        """
        all_slices = self._session.store.slices(model_id)
        mine = self._chain.select(all_slices)
        if self._chain.is_empty or len(mine) == len(all_slices):
            return model_owner(model_id)
        return model_owner(model_id, self._chain.key())

    def owners(self) -> list[str]:
        """The owner keys of the selection.

        Returns:
            Its slices' uids, its models' keys and the stored cross pairs of its slices.
        """
        slices = self.slices()
        owners = [s.uid for s in slices]
        uids = set(owners)
        models = {s.model_id for s in slices}
        owners += [self.model_owner(m) for m in sorted(models)]
        owners += [
            o
            for (o, _) in self._session.store.keys()
            if is_cross_owner(o) and parse_owner(o).uid in uids
        ]
        return list(dict.fromkeys(owners))

    def find_slice(self, uid_or_name: str, model_id: str | None = None) -> SliceInfo:
        """The slice of this selection with a uid or a name.

        Args:
            uid_or_name: a slice's uid or name.
            model_id: the model, where several have a slice of that name.

        Returns:
            The slice.

        Raises:
            KeyError: no such slice, or a name in several models without ``model_id``.
        """
        slices = self.slices()
        for s in slices:
            if s.uid == uid_or_name:
                return s
        matches = [
            s
            for s in slices
            if s.name == uid_or_name and (model_id is None or s.model_id == model_id)
        ]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise KeyError(
                f"no slice with uid or name {uid_or_name!r}"
                + (f" in model {model_id!r}" if model_id else "")
                + " in this scope"
            )
        raise KeyError(
            f"name {uid_or_name!r} is in several models {[s.model_id for s in matches]}; pass model_id="
        )

    def __len__(self) -> int:
        return len(self.slices())


class Namespace:
    """Base of the scope namespaces: the scope they act on, its session and store.

    Args:
        scope: the scope (or session) the namespace belongs to.
    """

    def __init__(self, scope: Selection) -> None:
        self._scope = scope

    @property
    def _session(self) -> SessionLike:
        return self._scope.session

    @property
    def _store(self) -> Store:
        return self._scope.session.store


N = TypeVar("N", bound=Namespace)


class Accessor(Generic[N]):
    """A namespace attribute of a scope (``scope.models``), made on first access and kept.

    As xarray's accessors: ``Scope.models = Accessor(Models)``; reading it on the class gives
    the namespace class (so documentation tools find its methods).
    """

    def __init__(self, cls: type[N]) -> None:
        self._cls = cls
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type) -> type[N]: ...
    @overload
    def __get__(self, obj: Selection, owner: type) -> N: ...
    def __get__(self, obj: Selection | None, owner: type) -> type[N] | N:
        if obj is None:
            return self._cls
        ns = self._cls(obj)
        obj.__dict__[self._name] = ns  # later reads find it on the instance
        return ns


@overload
def check_flag(value: Any, name: str, *, allow_none: Literal[False] = False) -> bool: ...
@overload
def check_flag(value: Any, name: str, *, allow_none: bool) -> bool | None: ...
def check_flag(value: Any, name: str, *, allow_none: bool = False) -> bool | None:
    """``value`` as a bool flag: ``replace="no"`` is not False.

    Args:
        value: what was passed.
        name: the argument's name, for the error.
        allow_none: whether None is accepted (and returned as None).

    Returns:
        ``value`` as a Python bool, or None.

    Raises:
        InvalidArgumentError: anything but a bool, a ``numpy.bool_`` (or None where allowed).
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    expected = "True, False or None" if allow_none else "True or False"
    raise InvalidArgumentError(f"{name} must be {expected}, got {type(value).__name__}: {value!r}")


def check_field_names(fields: Sequence[Any], where: str) -> None:
    """Field names must be strings given as separate arguments: ``f('a', 'b')``.

    Raises:
        FieldNameError: a field is not a string (a list of them says how to spread it); an
            ``InvalidArgumentError`` and, as Diffract's, a ``KernelNotFoundError``.
    """
    for f in fields:
        if isinstance(f, str):
            continue
        if isinstance(f, (list, tuple)):
            raise FieldNameError(
                f"{where} takes field names as separate arguments, got a {type(f).__name__}: "
                f"{f!r}; write {where.split('(')[0]}(*{f!r})"
            )
        raise FieldNameError(f"{where}: field names must be strings, got {type(f).__name__}: {f!r}")


def check_meta(meta: Any) -> dict[str, Any]:
    """A model's ``meta`` as plain JSON data (NumPy scalars and arrays converted).

    Raises:
        InvalidArgumentError: not a dict, a key that is not a string, or a value JSON cannot
            hold; the message names where in ``meta``.
    """
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise InvalidArgumentError(
            f"meta must be a dict of JSON-ready values, got {type(meta).__name__}: {meta!r}"
        )
    out: dict[str, Any] = to_jsonable(meta, where="meta", nonfinite="keep")
    return out


def check_reference(reference: Any) -> None:
    """``reference`` must be None or a model id.

    Raises:
        InvalidArgumentError: it is something else.
    """
    if reference is not None and not isinstance(reference, str):
        raise InvalidArgumentError(
            f"reference must be a model_id (a string), got {type(reference).__name__}: {reference!r}"
        )


def names(items: Sequence[str], n: int = 5) -> str:
    """The first ``n`` of ``items`` quoted, then how many more."""
    shown = ", ".join(repr(x) for x in items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


#: hook name -> "module:attribute" (the attribute ``""`` means the module itself)
FRONTENDS: dict[str, str] = {
    "figures": "diffract.viz:",  # session.viz.<name>: the figure builders of diffract.viz
    "diffract_figures": "diffract.viz.api:",  # session.viz.box(...) etc.: Diffract's plots
    "notebook_progress": "diffract.widgets:notebook_progress",  # apply() in a notebook
    "run_with_progress": "diffract.widgets:run_with_progress",  # compute.apply_async()
    "filter_builder": "diffract.widgets:FilterBuilder",  # utils.filter_builder()
    "tracker": "diffract.tracking:Tracker",  # session.track(...): a training-run tracker
    "finetune_diff": "diffract.finetune:diff_stored",  # results.diff(base, tuned)
}


def frontend(name: str) -> Any:
    """The object a front-end hook names, imported now.

    Args:
        name: a key of :data:`FRONTENDS`.

    Returns:
        The module or attribute it names.

    Raises:
        ImportError: its module (or a dependency of it, e.g. the widgets extra) is missing.
    """
    module, _, attribute = FRONTENDS[name].partition(":")
    mod = importlib.import_module(module)
    return getattr(mod, attribute) if attribute else mod
