"""The exception tree. Every error names what was wrong and how to fix it."""

from __future__ import annotations


class DiffractError(Exception):
    """Base class of every error raised by diffract."""


class InvalidModelIdError(DiffractError, ValueError):
    """A model_id is empty, not a string, or holds a reserved character."""


class DuplicateModelError(DiffractError, ValueError):
    """A model_id is already stored and ``replace=True`` was not given."""


class UnknownModelError(DiffractError, KeyError):
    """A model_id that is not stored was asked for."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ExtractionError(DiffractError, TypeError):
    """A model object or file could not be turned into weight slices."""


class FilterError(DiffractError, ValueError):
    """A filter is malformed: bad regex, wrong type, unknown key."""


class UnknownFieldError(DiffractError, KeyError):
    """A field name that no registered kernel produces."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownOptionError(DiffractError, TypeError):
    """A kernel option that no kernel in the plan accepts."""


class InvalidArgumentError(DiffractError, TypeError, ValueError):
    """An argument has the wrong type or a value out of its range (a flag that is not a
    bool, field names that are not strings, ``meta`` that is not JSON-ready...)."""


class OptionValueError(InvalidArgumentError):
    """A kernel option was given a value of the wrong type or out of its range."""


class KernelDefinitionError(DiffractError, TypeError):
    """A kernel is declared wrongly (bad signature, clashing outputs)."""


class DependencyCycleError(DiffractError, ValueError):
    """Kernels depend on each other in a cycle."""


class FieldNotComputedError(DiffractError, LookupError):
    """A field was asked for in results but was never applied."""


class StoreError(DiffractError, OSError):
    """A store cannot be opened, read or written."""


class StoreCorruptError(StoreError):
    """A store file is truncated, corrupt, foreign, or of an unknown layout version."""


class StoreLockedError(StoreError):
    """Another process holds the store's writer lock."""


class ConfigError(DiffractError, ValueError):
    """An unknown profile, key or value in the configuration."""


class KernelFailure(DiffractError):
    """A kernel failed on one parameter; recorded, the run goes on."""


RESERVED_MODEL_ID_CHARS = ("@", "[", "]", ",", "/")
