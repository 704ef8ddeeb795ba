"""diffract: inspect and track neural-network weights.

``import diffract`` is light: no NumPy, framework, h5py, Plotly or widget module until used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffract._core.filters import Filter as Filter, FilterChain as FilterChain
from diffract._core.slices import ParameterType as ParameterType, SliceInfo as SliceInfo
from diffract._core.tree import (
    combine as combine,
    filter as filter,  # mirrors equinox.filter
    is_array as is_array,
    is_inexact_array as is_inexact_array,
    partition as partition,
)
from diffract._errors import (
    ConfigError as ConfigError,
    DependencyCycleError as DependencyCycleError,
    DiffractError as DiffractError,
    DuplicateModelError as DuplicateModelError,
    ExtractionError as ExtractionError,
    FieldNotComputedError as FieldNotComputedError,
    FilterError as FilterError,
    InvalidArgumentError as InvalidArgumentError,
    InvalidModelIdError as InvalidModelIdError,
    KernelDefinitionError as KernelDefinitionError,
    OptionValueError as OptionValueError,
    StoreCorruptError as StoreCorruptError,
    StoreError as StoreError,
    StoreLockedError as StoreLockedError,
    UnknownFieldError as UnknownFieldError,
    UnknownModelError as UnknownModelError,
    UnknownOptionError as UnknownOptionError,
)

if TYPE_CHECKING:
    from diffract._core.arrays import LazyArray as LazyArray
    from diffract._core.config import list_profiles as list_profiles
    from diffract.compat import (
        Scope as Scope,
        Session as Session,
        upgrade_metadata_index as upgrade_metadata_index,
    )
    from diffract.edit import svd_sharpness as svd_sharpness, svd_smoothing as svd_smoothing
    from diffract.extract import ModelTree as ModelTree, register_extractor as register_extractor
    from diffract.finetune import DiffResult as DiffResult, diff as diff
    from diffract.kernels.registry import kernel as kernel
    from diffract.kernels.spec import Kernel as Kernel
    from diffract.run.report import (
        Failure as Failure,
        KernelFailureWarning as KernelFailureWarning,
        NonFiniteWeightsWarning as NonFiniteWeightsWarning,
        NothingToCompareWarning as NothingToCompareWarning,
        ProgressEvent as ProgressEvent,
        ReusedOptionsWarning as ReusedOptionsWarning,
        RunReport as RunReport,
    )
    from diffract.session.results import MissingValuesWarning as MissingValuesWarning
    from diffract.session.summaries import ParameterOverrides as ParameterOverrides


__all__ = [  # the public names; dir(diffract) lists these (plus dunders and entry points)
    "ConfigError",
    "DependencyCycleError",
    "DiffResult",
    "DiffractError",
    "DuplicateModelError",
    "ExtractionError",
    "Failure",
    "FieldNotComputedError",
    "Filter",
    "FilterChain",
    "FilterError",
    "InvalidArgumentError",
    "InvalidModelIdError",
    "Kernel",
    "KernelDefinitionError",
    "KernelFailureWarning",
    "LazyArray",
    "MissingValuesWarning",
    "ModelTree",
    "NonFiniteWeightsWarning",
    "NothingToCompareWarning",
    "OptionValueError",
    "ParameterOverrides",
    "ParameterType",
    "ProgressEvent",
    "ReusedOptionsWarning",
    "RunReport",
    "Scope",
    "Session",
    "SliceInfo",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "UnknownFieldError",
    "UnknownModelError",
    "UnknownOptionError",
    "combine",
    "diff",
    "fields",
    "filter",
    "is_array",
    "is_inexact_array",
    "kernel",
    "list_profiles",
    "partition",
    "register_extractor",
    "svd_sharpness",
    "svd_smoothing",
    "upgrade_metadata_index",
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("diffract-lab")
    except PackageNotFoundError:  # a source tree that is not installed
        import json
        from pathlib import Path

        pkg = Path(__file__).resolve().parents[2] / "package.json"
        return json.loads(pkg.read_text())["version"] if pkg.exists() else "0+unknown"


_LAZY = {  # name -> module: loaded on first use, so `import diffract` stays light
    "Session": "diffract.compat",  # ours with Diffract's names (diffract.session.session: ours)
    "Scope": "diffract.compat",
    "RunReport": "diffract.run.report",
    "ProgressEvent": "diffract.run.report",
    "Failure": "diffract.run.report",
    "KernelFailureWarning": "diffract.run.report",
    "NonFiniteWeightsWarning": "diffract.run.report",
    "NothingToCompareWarning": "diffract.run.report",
    "ReusedOptionsWarning": "diffract.run.report",
    "MissingValuesWarning": "diffract.session.results",
    "ModelTree": "diffract.extract",
    "register_extractor": "diffract.extract",
    "LazyArray": "diffract._core.arrays",
    "Kernel": "diffract.kernels.spec",
    "kernel": "diffract.kernels.registry",
    "ParameterOverrides": "diffract.session.summaries",  # Diffract's names
    "list_profiles": "diffract._core.config",
    "upgrade_metadata_index": "diffract.compat",
    "svd_smoothing": "diffract.edit",  # model editing (WeightWatcher's SVDSmoothing)
    "svd_sharpness": "diffract.edit",
    "diff": "diffract.finetune",  # fine-tune diff: base vs tuned, per layer
    "DiffResult": "diffract.finetune",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    if name == "viz":  # Diffract's ``diffract.viz``, loaded on first use
        import importlib

        return importlib.import_module("diffract.viz")
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'diffract' has no attribute {name!r}")


def fields() -> list[str]:
    """Every field name a registered kernel can compute.

    Returns:
        The field names of the default kernel registry (built-in and user kernels), sorted.
    """
    from diffract.kernels.registry import default_registry

    return default_registry().fields()


#: what ``dir(diffract)`` lists besides ``__all__``: the entry points Jupyter and IPython look
#: up by name, and the module's dunders (``__version__`` included)
_ENTRY_POINTS = (
    "_jupyter_labextension_paths",
    "_jupyter_server_extension_points",
    "_load_jupyter_server_extension",
    "load_ipython_extension",
)


def __dir__() -> list[str]:
    dunders = {n for n in globals() if n.startswith("__") and n.endswith("__")}
    return sorted({*__all__, *_ENTRY_POINTS, *dunders, "__version__"})


# --- Jupyter entry points (small and lazy: the server and IPython import what they use) ----


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "diffract-lab"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "diffract.server"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from diffract.server import _load_jupyter_server_extension as load

    load(server_app)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext diffract``: registers the ``%diffract`` magic.

    Args:
        ipython: the IPython shell loading the extension.
    """
    from diffract.magics import load_ipython_extension as load

    load(ipython)
