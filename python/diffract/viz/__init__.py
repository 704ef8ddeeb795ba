"""Static Plotly figures from stored fields: ``session.viz.NAME(...)`` / ``scope.viz.NAME(...)``.

Every figure is built in two steps: a *spec* (plain dicts: traces and layout, read from the
scope's tables, never from a live model) and a ``plotly.graph_objects.Figure`` made from it.
The live panels of :mod:`diffract.widgets`, the HTML report and the server's figure route
use the same specs, so a panel and its static twin show the same thing. ``fig.write_html(...)``
saves one.

Figures:

``layers(field)``
    The field across depth (one line or bar group per model).
``heatmap(field)``
    Layer x model (or x checkpoint, when the models are checkpoints of one network).
``esd(slice)``
    The eigenvalue spectrum of one slice on log-log axes with its power-law fit.
``scatter(x, y)``
    Two per-parameter fields against each other, one colour per model.
``esd_full(slice)``, ``esd_grid()``, ``save(folder)``
    The ESD with xmin line, MP bulk and randomized ESD; a grid of them; files of every
    figure.
``compare(field, models=(a, b), mode=...)``, ``evolution(field, run=...)``
    Two models slice by slice (difference or ratio); a tracked run across its steps.
``figure("diagnosis")``, ``diagnosis_lines()``, ``diagnosis_rows()``
    Which layers the diagnosis rules flag (``diag_*`` fields), as a figure, text or rows.
``figure(kind, ...)``
    Any kind of :mod:`diffract.viz.registry` by name.

The package: one module per figure kind in :mod:`diffract.viz.kinds`, the table of kinds in
:mod:`diffract.viz.registry`, helpers shared by the kinds in ``_common``. The published
Diffract's figure API lives in the submodules ``api`` (``box``, ``violin``, ``draw`` with
YAML, ...), ``plots``, ``data`` and ``styling`` (themes; see docs/migrating-from-diffract.md).
"""

from __future__ import annotations

from typing import Any

from diffract.viz._common import (
    HOVER as HOVER,
    NEUTRAL_LAYOUT as NEUTRAL_LAYOUT,
    exponent_ticks as exponent_ticks,
    field_rows as field_rows,
    find_slice as find_slice,
)
from diffract.viz.figures import (
    compare as compare,
    esd as esd,
    esd_full as esd_full,
    esd_grid as esd_grid,
    evolution as evolution,
    figure as figure,
    heatmap as heatmap,
    layers as layers,
    scatter as scatter,
)
from diffract.viz.files import FORMATS as FORMATS, save as save
from diffract.viz.kinds.compare import (
    MODES as MODES,
    common_slices as common_slices,
    compare_models as compare_models,
    compare_spec as compare_spec,
)
from diffract.viz.kinds.diagnosis import (
    DIAGNOSIS_FIELDS as DIAGNOSIS_FIELDS,
    diagnosis_fields as diagnosis_fields,
    diagnosis_lines as diagnosis_lines,
    diagnosis_rows as diagnosis_rows,
    diagnosis_spec as diagnosis_spec,
)
from diffract.viz.kinds.esd import esd_spec as esd_spec
from diffract.viz.kinds.esd_full import esd_full_spec as esd_full_spec
from diffract.viz.kinds.esd_grid import esd_grid_spec as esd_grid_spec
from diffract.viz.kinds.evolution import (
    evolution_spec as evolution_spec,
    pick_run as pick_run,
    tracked_runs as tracked_runs,
)
from diffract.viz.kinds.heatmap import heatmap_spec as heatmap_spec
from diffract.viz.kinds.layers import layers_spec as layers_spec
from diffract.viz.kinds.scatter import scatter_spec as scatter_spec
from diffract.viz.table import TABLE_COLUMNS as TABLE_COLUMNS, table_rows as table_rows

#: the figures ``session.viz.<name>`` binds (the rest are specs and helpers)
__all__ = [
    "compare",
    "esd",
    "esd_full",
    "esd_grid",
    "evolution",
    "heatmap",
    "layers",
    "save",
    "scatter",
]

#: Diffract's names read from ``diffract.viz`` itself -> the submodule defining them, imported
#: when first read (they import numpy and PyYAML, which ``import diffract.viz`` does not need)
_DIFFRACT_NAMES = {
    **dict.fromkeys(
        ("DEFAULT_THEME", "DARK_THEME", "MINIMAL_THEME", "Theme", "apply_theme", "load_theme"),
        "diffract.viz.styling",
    ),
    **dict.fromkeys(("render", "render_from_config"), "diffract.viz.api"),
}


def __getattr__(name: str) -> Any:
    if name in _DIFFRACT_NAMES:
        import importlib

        return getattr(importlib.import_module(_DIFFRACT_NAMES[name]), name)
    raise AttributeError(f"module 'diffract.viz' has no attribute {name!r}")
