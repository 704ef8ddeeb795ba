"""``Session`` and scopes: the one object the views talk to.

``Session(profile=...)`` opens a store. ``session.filter(...)`` returns a :class:`Scope`
exposing the same namespaces (``models``, ``compute``, ``results``, ``viz``, ``utils``)
limited to the selection; the session itself is the unfiltered scope.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Sequence
from typing import Any, ClassVar

from diffract._core.filters import Filter, FilterChain
from diffract._core.slices import ParameterType
from diffract._errors import StoreError
from diffract.extract.references import ReferenceReader
from diffract.kernels import KernelRegistry, default_registry
from diffract.kernels.spec import Kernel
from diffract.run.report import RunReport
from diffract.session.compute import Compute, check_on_failure
from diffract.session.models import Models
from diffract.session.results import Results
from diffract.session.scope import Accessor, Selection, SessionLike, check_flag
from diffract.session.utils import Utils
from diffract.session.viz import Viz
from diffract.session.weightwatcher import WeightWatcher
from diffract.store import BACKENDS, Store


class MissingConfigWarning(UserWarning):
    """``Session(config_path=...)`` names a file that does not exist: the profile applies
    (Diffract's documented behaviour, where it logs a warning)."""


def _config_file_present(config_path: str | os.PathLike[str]) -> bool:
    """Whether ``config_path`` exists; if not, warn (naming it) and log, as Diffract does.

    Raises:
        ConfigError: ``config_path`` is not a path (a str or an ``os.PathLike``).
    """
    from diffract._errors import ConfigError

    if not isinstance(config_path, (str, os.PathLike)):
        raise ConfigError(
            "config_path must be a path (str or pathlib.Path), got "
            f"{type(config_path).__name__}: {config_path!r}"
        )
    if os.path.exists(config_path):
        return True
    text = (
        f"Configuration file not found: {os.fspath(config_path)!r} (absolute: "
        f"{os.path.abspath(config_path)!r}); the profile applies instead, as in Diffract"
    )
    logging.getLogger("diffract.session").warning(text)
    warnings.warn(text, MissingConfigWarning, stacklevel=3)
    return False


class Scope(Selection):
    """A selection of slices with the session's namespaces limited to it.

    Made by :meth:`Session.filter` (or :meth:`Scope.filter`), not directly.

    Args:
        session: the session it belongs to.
        chain: the filter selecting its slices.
    """

    #: add, list and remove models; the scope's slices and weights
    models = Accessor(Models)
    #: run kernels on the scope
    compute = Accessor(Compute)
    #: stored fields of the scope as tables
    results = Accessor(Results)
    #: static Plotly figures of the scope
    viz = Accessor(Viz)
    #: the slice table, the filter as JSON, the filter builder
    utils = Accessor(Utils)
    #: WeightWatcher's analyze() / get_summary() / describe() tables, with its keywords
    weightwatcher = Accessor(WeightWatcher)
    #: what :meth:`filter` makes (:mod:`diffract.compat` gives its own, with Diffract's names)
    scope_class: ClassVar[type[Scope]]

    def __init__(self, session: SessionLike, chain: FilterChain) -> None:
        super().__init__(session, chain)

    @property
    def session(self) -> Session:
        """The session this scope belongs to (itself for a Session)."""
        return self._session  # type: ignore[return-value]

    def filter(
        self,
        model_ids: Sequence[str] | str | None = None,
        param_names: Sequence[str] | str | None = None,
        param_types: Sequence[ParameterType | str] | ParameterType | str | None = None,
        param_ids: Sequence[str] | str | None = None,
    ) -> Scope:
        """A narrower scope: criteria AND together and with this scope's.

        A filter that matches nothing is an empty scope, not an error.

        Args:
            model_ids: model ids; ``re:`` prefixes a regular expression (full match).
            param_names: slice names; ``re:`` as above. A plain name that is no slice of a
                model but a module path selects that module's weight (``"0"``: ``"0.weight"``).
            param_types: :class:`ParameterType` values or their names.
            param_ids: slice uids.

        Returns:
            The narrower :class:`Scope`.

        Raises:
            FilterError: a bad criterion (a regex that does not compile names the pattern).
            ParameterNotFoundError: a ``param_ids`` entry that is no parameter of this scope
                (a KeyError, as in Diffract).
        """
        f = Filter.make(
            model_ids=model_ids,
            param_names=param_names,
            param_types=param_types,
            param_ids=param_ids,
        )
        return self.scope_class(self._session, self._narrow(f))

    def __enter__(self) -> Scope:
        """``with scope:`` (as Diffract's scopes): the scope itself; its session stays open."""
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return f"<diffract scope {self._chain.to_json()}: {len(self)} slices>"


Scope.scope_class = Scope


class Session(Scope):
    """The entry point: configuration, the store, and the scoped namespaces.

    ``profile="local"`` persists into an HDF5 store under ``./.diffract`` (``path=`` to choose
    another folder); ``profile="ram"`` keeps nothing; ``"sqlite"``, ``"zarr"``, ``"hybrid"``
    choose the other backends. Settings not given come from the environment
    (``DIFFRACT_*``) and the project file (``diffract.toml`` or ``[tool.diffract]``): see
    :mod:`diffract._core.config`. Use it as a context manager (or call :meth:`close`) to
    release the store's writer lock.

    Args:
        profile: "local", "ram", "sqlite", "zarr", "hybrid" or a profile of the project file.
        path: the store's folder.
        backend: the store backend, over the profile's.
        cache: the value cache: "none", "lru" or a Redis URL.
        memory_budget: bytes (or ``"2GB"``) of weights one chunk may hold.
        workers: worker threads or processes of a run.
        readonly: open the store read-only (no writer lock; writes are errors).
        lock_timeout: seconds to wait for another writer's lock.
        executor: where chunks run by default: "threads", "processes", a dask Client or
            a scheduler address.
        config_path: a Diffract configuration file (``.ini``, ``.yaml``/``.yml``,
            ``.json``; see :func:`diffract._core.config.settings_from_file`); it wins over
            ``profile``, and the arguments win over it. A path that does not exist is
            Diffract's case too: a :class:`MissingConfigWarning` names it and the profile
            applies.
        container: a :func:`diffract.containers.create_main_container` container: the
            session opens its ``config_path`` and ``profile`` (then give neither here).
        other_session: a session (or scope) merged into this one once it is open.
        registry: the kernels (default: the built-in registry).
        conventions: a kernel-option preset for every run, e.g. ``"weightwatcher"``
            (WeightWatcher's eigenvalue scale, size guards and layer selection; see
            :mod:`diffract.kernels.ww`); options set by ``configure`` or ``apply`` win.
            Not given: ``DIFFRACT_CONVENTIONS``, then the project file's ``conventions``
            (top level or in the profile).
        on_failure: what ``compute.apply`` does when kernels fail: ``"warn"`` (warn, return
            the report with its ``failures``) or ``"raise"`` (Diffract's: raise a
            ``SessionError``, a ``KernelExecutionError``, once what succeeded is stored).

    Raises:
        ConfigError: an unknown profile or backend, a bad setting, ``path`` with "ram", or a
            ``container`` that is not ``create_main_container``'s (or given with a config).
        InvalidArgumentError: ``readonly`` is not a bool.
        StoreError: the store cannot be opened (damaged, or locked by another writer).
    """

    def __init__(
        self,
        profile: str | None = None,
        config_path: str | os.PathLike[str] | None = None,
        container: Any = None,
        other_session: Scope | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        backend: str | None = None,
        cache: str | None = None,
        memory_budget: int | str | None = None,
        workers: int | None = None,
        readonly: bool = False,
        lock_timeout: float | None = None,
        executor: Any = None,
        registry: KernelRegistry | None = None,
        conventions: str | None = None,
        on_failure: str = "warn",
    ) -> None:
        from diffract._core.config import resolve
        from diffract._errors import ConfigError
        from diffract.store import make_cache, open_backend

        readonly = check_flag(readonly, "readonly")
        #: what compute.apply does when kernels fail ("warn" or "raise"); apply's wins
        self.on_failure = check_on_failure(on_failure)
        if container is not None:
            from diffract.containers import MainContainer

            if not isinstance(container, MainContainer):
                raise ConfigError(
                    "container= takes the container of diffract.containers."
                    "create_main_container(config_path, profile); Diffract's other "
                    "dependency-injection containers are not provided: pass config_path= (the "
                    "same INI/YAML/JSON file) or the settings as arguments"
                )
            if config_path is not None or profile is not None:
                raise ConfigError(
                    "container= carries the configuration file and profile; pass them to "
                    "create_main_container(...) or to Session(...), not to both"
                )
            config_path, profile = container.config_path, container.profile
        given: dict[str, Any] = {
            "path": path,
            "backend": backend,
            "cache": cache,
            "memory_budget": memory_budget,
            "workers": workers,
            "lock_timeout": lock_timeout,
        }
        #: the format exports use when none is given (a config file's [export] section)
        self.default_export_format = "dict"
        if config_path is not None and not _config_file_present(config_path):
            config_path = None  # Diffract's documented fallback: the profile applies
        if config_path is not None:
            from diffract._core.diffract_config import settings_from_file

            file_settings, extras = settings_from_file(config_path, backends=BACKENDS)
            self.default_export_format = extras["default_export_format"]
            given = {k: v if v is not None else file_settings.get(k) for k, v in given.items()}
            given["arrays"] = file_settings.get("arrays")
            given["cache_bytes"] = file_settings.get("cache_bytes")
            if profile is None or file_settings["backend"] != "ram":
                profile = "ram" if file_settings["backend"] == "ram" else "local"
            if profile == "ram":
                given["backend"], given["path"] = None, None
        self.config = resolve(profile=profile, backends=BACKENDS, **given)
        cfg = self.config
        if cfg["backend"] == "ram" and path is not None:
            raise ConfigError(
                "profile 'ram' keeps nothing on disk; drop path= or use profile='local'"
            )
        self.profile = cfg["profile"]
        self.store: Store = open_backend(
            cfg["backend"],
            cfg["path"],
            readonly=readonly,
            lock_timeout=cfg["lock_timeout"],
            cache=make_cache(cfg["cache"], max_bytes=cfg["cache_bytes"]),
            arrays=cfg["arrays"],
        )
        self.readonly = readonly
        self.memory_budget = cfg["memory_budget"]
        self.workers = cfg["workers"]
        #: where chunks run by default: "threads", "processes", a dask Client or address
        self.executor = executor
        self.registry = registry if registry is not None else default_registry()
        #: session-wide kernel options (set by compute.configure), by option name
        self.options: dict[str, Any] = {}
        #: the kernel-option preset of every run (argument, DIFFRACT_CONVENTIONS, the
        #: project file or its profile), or None
        if conventions is None:
            conventions = cfg["conventions"]
        self.conventions: str | None = conventions
        if self.conventions is not None:
            from diffract.kernels.conventions import convention_options

            self.options = convention_options(self.conventions)
        #: options of one kernel (set by compute.configure): kernel -> option -> value
        self.kernel_options: dict[str, dict[str, Any]] = {}
        #: set while compute.apply runs: setting it stops the run (compute.cancel)
        self.cancel_event: threading.Event | None = None
        #: reads the weights slices reference in checkpoint files (keeps the last few files)
        self.references = ReferenceReader()
        self._own_registry = False
        self._binary_kernels: set[str] = set()
        #: kernel name -> number of (slice) calls made by this session
        self.kernel_calls: dict[str, int] = {}
        self.last_report: RunReport | None = None
        super().__init__(self, FilterChain())
        if other_session is not None:
            self.utils.merge_other_session(other_session, verify=False)

    def check_writable(self) -> None:
        """Raise unless this session may write its store.

        Raises:
            StoreError: the session is read-only.
        """
        if self.readonly:
            raise StoreError(
                f"this session opened {self.store.path} read-only; open it with readonly=False to write"
            )

    def copy_settings_from(self, other: Selection) -> None:
        """Take the kernel options (session-wide and per kernel) of ``other``'s session, e.g.
        when a closed session is reopened on the same store.

        Args:
            other: a session (or a scope of one).
        """
        source = other.session
        self.options = source.options
        self.kernel_options = source.kernel_options

    def register_kernel(self, kernel: Kernel, *, binary: bool = False) -> None:
        """Register ``kernel`` with this session only (the registry is copied on the first).

        Args:
            kernel: the kernel (``diffract.kernels.spec.make_kernel``); one of the same name
                is replaced.
            binary: its cross-model fields compare exactly two models (no ``reference``
                needed when the scope holds two).
        """
        if not self._own_registry:
            self.registry = self.registry.copy()
            self._own_registry = True
        self.registry.register(kernel, replace=True)
        if binary:
            self._binary_kernels.add(kernel.name)

    @property
    def binary_kernels(self) -> frozenset[str]:
        """Kernels registered here with ``binary=True`` (see :meth:`register_kernel`)."""
        return frozenset(self._binary_kernels)

    def track(self, run: str, *args: Any, **kwargs: Any) -> Any:
        """A tracker that snapshots a training run's weights every N steps and analyzes them
        in the background.

        Args:
            run: the run's name (its checkpoints' ids start with it).
            *args: the other arguments of :class:`diffract.tracking.Tracker`.
            **kwargs: its keyword arguments (``fields``, ``every``, ...).

        Returns:
            The :class:`diffract.tracking.Tracker`; call ``tracker.step(model, step=i)``.
        """
        from diffract.session.scope import frontend

        return frontend("tracker")(self, run, *args, **kwargs)

    def close(self) -> None:
        """Release the store (and its writer lock)."""
        self.store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.store.path or "memory"
        return f"<diffract Session profile={self.profile!r} store={where!r}: {len(self.models.ids())} models, {len(self)} slices>"


#: Diffract's name of a filtered view of a session (``session.filter(...)``): our Scope
SessionContext = Scope
