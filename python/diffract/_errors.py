"""The exception tree. Every error names what was wrong and how to fix it."""

from __future__ import annotations


class DiffractError(Exception):
    """Base class of every error raised by diffract."""


# --- the published Diffract's names ------------------------------------------------------
#
# Diffract (``diffract-core``) documents ``SessionError`` and six subclasses, importable from
# ``diffract.session``. They sit in this tree so that an ``except`` written for either library
# catches what the other name is raised as: our own, more specific errors subclass them.


class SessionError(DiffractError):
    """Diffract's base of the session errors; every error a session call raises is one."""


class ModelAlreadyExistsError(SessionError, ValueError):
    """A model id is already stored (Diffract's name; ours: :class:`DuplicateModelError`)."""


class ModelNotFoundError(SessionError, KeyError):
    """A model id that is not stored (Diffract's name; ours: :class:`UnknownModelError`)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class KernelNotFoundError(SessionError, KeyError):
    """No kernel produces a field (Diffract's name; ours: :class:`UnknownFieldError`)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ScopeValidationError(SessionError, ValueError):
    """The scope does not fit the fields asked for (a pair field with other than two models)."""


class InvalidIdentifierError(SessionError, ValueError):
    """A model id, parameter name or field name holds a character it may not."""


class IncompatibleStoreError(SessionError, OSError):
    """A store of a layout version (or a library) this version cannot open."""


class KernelError(SessionError):
    """Diffract's base of the kernel registry errors."""


class InvalidConfigurationError(KernelError, ValueError):
    """A kernel configuration key the kernel does not take (Diffract's name)."""


class DependencyNotFoundError(KernelError, KeyError):
    """A kernel needs a field that nothing produces (Diffract's name)."""


class CircularDependencyError(KernelError, ValueError):
    """Kernels depend on each other in a cycle (Diffract's name)."""


class InvalidModelIdError(InvalidIdentifierError):
    """A model_id is empty, not a string, or holds a reserved character."""


class DuplicateModelError(ModelAlreadyExistsError):
    """A model_id is already stored and ``replace=True`` was not given."""


class UnknownModelError(ModelNotFoundError):
    """A model_id that is not stored was asked for."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ExtractionError(SessionError, TypeError):
    """A model object or file could not be turned into weight slices."""


class FilterError(SessionError, ValueError):
    """A filter is malformed: bad regex, wrong type, unknown key."""


class UnknownFieldError(KernelNotFoundError):
    """A field name that no registered kernel produces."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownOptionError(InvalidConfigurationError, TypeError):
    """A kernel option that no kernel in the plan accepts."""


class InvalidArgumentError(SessionError, TypeError, ValueError):
    """An argument has the wrong type or a value out of its range (a flag that is not a
    bool, field names that are not strings, ``meta`` that is not JSON-ready...)."""


class OptionValueError(InvalidArgumentError):
    """A kernel option was given a value of the wrong type or out of its range."""


class KernelDefinitionError(KernelError, TypeError):
    """A kernel is declared wrongly (bad signature, clashing outputs)."""


class DependencyCycleError(CircularDependencyError):
    """Kernels depend on each other in a cycle."""


class FieldNotComputedError(SessionError, LookupError):
    """A field was asked for in results but was never applied."""


class StoreError(SessionError, OSError):
    """A store cannot be opened, read or written."""


class StoreCorruptError(StoreError, IncompatibleStoreError):
    """A store file is truncated, corrupt, foreign, or of an unknown layout version."""


class StoreLockedError(StoreError):
    """Another process holds the store's writer lock."""


class ConfigError(SessionError, ValueError):
    """An unknown profile, key or value in the configuration."""


class KernelFailure(SessionError):
    """A kernel failed on one parameter; recorded, the run goes on."""


class KernelExecutionError(KernelFailure, KernelError):
    """Kernels failed during ``apply(..., on_failure="raise")`` (Diffract's ``apply`` raises a
    ``SessionError`` when a kernel fails). Raised after the values that succeeded were
    stored; ``report`` is the run's :class:`~diffract.run.report.RunReport`."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        #: the run's RunReport: ``failures`` lists each (slice, field) that failed
        self.report = report


class InconsistentWiringError(KernelError):
    """Diffract's error for a ``kernel`` decorator without a registry to register into."""


class FieldNameError(InvalidArgumentError, KernelNotFoundError):
    """A field name that is not a string (``apply(["x"])``): a bad argument, and, as in
    Diffract, a ``KernelNotFoundError`` (no kernel produces it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


RESERVED_MODEL_ID_CHARS = ("@", "[", "]", ",", "/")


class ParameterNotFoundError(SessionError, KeyError):
    """A parameter name or uid that is not in the model or store (overrides, patches)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class IncompatibleSessionsError(SessionError, ValueError):
    """Two sessions whose stores cannot be merged (same parameter, different shapes)."""


#: Diffract's aliases of two kernel errors
InvalidConfiguration = InvalidConfigurationError
InconsistentWiring = InconsistentWiringError
