"""``diffract.session.errors``: Diffract's session error names (ours; see :mod:`diffract._errors`)."""

from diffract._errors import (
    IncompatibleStoreError as IncompatibleStoreError,
    InvalidIdentifierError as InvalidIdentifierError,
    KernelNotFoundError as KernelNotFoundError,
    ModelAlreadyExistsError as ModelAlreadyExistsError,
    ModelNotFoundError as ModelNotFoundError,
    ScopeValidationError as ScopeValidationError,
    SessionError as SessionError,
)

__all__ = [
    "IncompatibleStoreError",
    "InvalidIdentifierError",
    "KernelNotFoundError",
    "ModelAlreadyExistsError",
    "ModelNotFoundError",
    "ScopeValidationError",
    "SessionError",
]
