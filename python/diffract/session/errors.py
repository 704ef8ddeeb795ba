"""``diffract.session.errors``: Diffract's session error names (ours; see :mod:`diffract._errors`)."""

from diffract._errors import IncompatibleStoreError as IncompatibleStoreError
from diffract._errors import InvalidIdentifierError as InvalidIdentifierError
from diffract._errors import KernelNotFoundError as KernelNotFoundError
from diffract._errors import ModelAlreadyExistsError as ModelAlreadyExistsError
from diffract._errors import ModelNotFoundError as ModelNotFoundError
from diffract._errors import ScopeValidationError as ScopeValidationError
from diffract._errors import SessionError as SessionError

__all__ = [
    "IncompatibleStoreError",
    "InvalidIdentifierError",
    "KernelNotFoundError",
    "ModelAlreadyExistsError",
    "ModelNotFoundError",
    "ScopeValidationError",
    "SessionError",
]
