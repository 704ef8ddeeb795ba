"""Front ends the session hands work to, named by string and imported on first use.

These are the only references from the session layer to the layers above it (``viz`` and
``widgets``). The session sits below them (the import-linter layer contract in
``pyproject.toml``) and must work where the widget dependencies (anywidget, traitlets,
plotly) are not installed, so it never imports them: each hook below is a
``"module:attribute"`` string resolved with :mod:`importlib` only when it is called for,
by ``session.viz.<figure>(...)``, ``session.track(...)``, ``compute.apply(progress=None)`` in a notebook,
``compute.apply_async(...)`` or ``utils.filter_builder()``.
"""

from __future__ import annotations

import importlib
from typing import Any

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
