"""diffract: inspect and track neural-network weights.

``import diffract`` is light: NumPy only. Frameworks, h5py, Plotly and widgets load when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import (
    ConfigError as ConfigError,
)
from ._errors import (
    DependencyCycleError as DependencyCycleError,
)
from ._errors import (
    DiffractError as DiffractError,
)
from ._errors import (
    DuplicateModelError as DuplicateModelError,
)
from ._errors import (
    ExtractionError as ExtractionError,
)
from ._errors import (
    FieldNotComputedError as FieldNotComputedError,
)
from ._errors import (
    FilterError as FilterError,
)
from ._errors import (
    InvalidArgumentError as InvalidArgumentError,
)
from ._errors import (
    InvalidModelIdError as InvalidModelIdError,
)
from ._errors import (
    KernelDefinitionError as KernelDefinitionError,
)
from ._errors import (
    OptionValueError as OptionValueError,
)
from ._errors import (
    StoreCorruptError as StoreCorruptError,
)
from ._errors import (
    StoreError as StoreError,
)
from ._errors import (
    StoreLockedError as StoreLockedError,
)
from ._errors import (
    UnknownFieldError as UnknownFieldError,
)
from ._errors import (
    UnknownModelError as UnknownModelError,
)
from ._errors import (
    UnknownOptionError as UnknownOptionError,
)
from ._kernel import Kernel as Kernel
from ._kernel import kernel as kernel
from ._params import ParameterType as ParameterType
from ._params import SliceInfo as SliceInfo
from ._tree import (
    combine as combine,
)
from ._tree import (
    filter as filter,  # mirrors equinox.filter
)
from ._tree import (
    is_array as is_array,
)
from ._tree import (
    is_inexact_array as is_inexact_array,
)
from ._tree import (
    partition as partition,
)
from .filters import Filter as Filter
from .filters import FilterChain as FilterChain

if TYPE_CHECKING:
    from ._lazy import LazyArray as LazyArray
    from ._run import (
        Failure as Failure,
    )
    from ._run import (
        KernelFailureWarning as KernelFailureWarning,
    )
    from ._run import (
        NothingToCompareWarning as NothingToCompareWarning,
    )
    from ._run import (
        ProgressEvent as ProgressEvent,
    )
    from ._run import (
        RunReport as RunReport,
    )
    from .extract import ModelTree as ModelTree
    from .extract import register_extractor as register_extractor
    from .session import Scope as Scope
    from .session import Session as Session


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("diffract-lab")
    except PackageNotFoundError:  # a source tree that is not installed
        import json
        from pathlib import Path

        pkg = Path(__file__).resolve().parents[2] / "package.json"
        return json.loads(pkg.read_text())["version"] if pkg.exists() else "0+unknown"


_LAZY = {
    "Session": ("session", "Session"),
    "Scope": ("session", "Scope"),
    "RunReport": ("_run", "RunReport"),
    "ProgressEvent": ("_run", "ProgressEvent"),
    "Failure": ("_run", "Failure"),
    "KernelFailureWarning": ("_run", "KernelFailureWarning"),
    "NothingToCompareWarning": ("_run", "NothingToCompareWarning"),
    "ModelTree": ("extract", "ModelTree"),
    "register_extractor": ("extract", "register_extractor"),
    "LazyArray": ("_lazy", "LazyArray"),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'diffract' has no attribute {name!r}")


def fields() -> list[str]:
    """Every field name a registered kernel can compute."""
    from ._kernel import default_registry

    return default_registry().fields()


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})


# --- Jupyter entry points (small and lazy: the server and IPython import what they use) ----


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "diffract-lab"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "diffract.server"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from .server import _load_jupyter_server_extension as load

    load(server_app)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext diffract``: registers the ``%diffract`` magic."""
    from .magics import load_ipython_extension as load

    load(ipython)
