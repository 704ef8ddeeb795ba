"""``save``: files of every slice's ESD figure (and their grid), as HTML, SVG or PNG.

PNG and SVG need kaleido (``pip install kaleido``, in the test extra) and a Chrome or
Chromium it finds (Debian's ``/usr/bin/chromium`` works offline).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diffract._errors import InvalidArgumentError
from diffract.viz._common import to_figure
from diffract.viz.kinds.esd_full import esd_full_spec
from diffract.viz.kinds.esd_grid import esd_grid_spec, esd_slices

if TYPE_CHECKING:
    from diffract.session import Scope

#: the file formats :func:`save` writes
FORMATS = ("html", "svg", "png")


def _file_stem(s: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{s.model_id}__{s.name}").strip("._") or "slice"


def save(
    scope: Scope,
    folder: str | Path,
    *,
    format: str = "html",
    slices: list[str] | None = None,
    grid: bool = True,
) -> list[Path]:
    """Write the ESD figure of every slice of the scope (:func:`diffract.viz.esd_full`) to files.

    One file per slice, ``<model>__<name>.<format>``, and ``esd_grid.<format>`` with them all
    when ``grid``. HTML files load plotly.js from its CDN; SVG and PNG are rendered by kaleido
    (one browser start for all files).

    Args:
        scope: the session or scope whose stored fields are drawn.
        folder: where the files go (created when missing).
        format: ``"html"``, ``"svg"`` or ``"png"``.
        slices: uids (or names) to draw; default: every slice with a stored ESD.
        grid: also write the grid of all of them.

    Returns:
        The paths written, in slice order (the grid last).

    Raises:
        InvalidArgumentError: an unknown ``format``.
        ImportError: SVG or PNG without kaleido installed.
    """
    if format not in FORMATS:
        raise InvalidArgumentError(f"save: unknown format {format!r}; use one of {list(FORMATS)}")
    if format != "html":
        import importlib.util

        if importlib.util.find_spec("kaleido") is None:
            raise ImportError(
                f"save(format={format!r}) needs kaleido (pip install kaleido) and Chrome or "
                "Chromium; format='html' needs neither"
            )
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    chosen = esd_slices(scope, slices)
    figs, paths = [], []
    for s in chosen:
        figs.append(to_figure(esd_full_spec(scope, s.uid)))
        paths.append(out / f"{_file_stem(s)}.{format}")
    if grid and chosen:
        figs.append(to_figure(esd_grid_spec(scope, [s.uid for s in chosen])))
        paths.append(out / f"esd_grid.{format}")
    if format == "html":
        for fig, path in zip(figs, paths, strict=True):
            fig.write_html(path, include_plotlyjs="cdn")
    elif figs:
        import plotly.io as pio

        pio.write_images(figs, paths, format=format)
    return paths
