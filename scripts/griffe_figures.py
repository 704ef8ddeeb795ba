"""A Griffe extension for the API docs: the figure functions of ``diffract.viz.figures`` are
made at import from their spec builders (``layers = _figure_of(layers_spec, ...)``, so the
arguments are documented once), which static analysis reads as plain attributes. This
extension replaces each of them by what dynamic analysis sees: a function with the builder's
signature and the docstring made from it.
"""

from __future__ import annotations

import sys
from typing import Any

import griffe

MODULE = "diffract.viz.figures"
MAKER = "_figure_of("


class FiguresFromSpecs(griffe.Extension):
    """Document ``NAME = _figure_of(...)`` in :data:`MODULE` as the function it makes."""

    def __init__(self) -> None:
        self._inspected: griffe.Module | None = None

    def on_attribute_instance(self, *, attr: griffe.Attribute, **kwargs: Any) -> None:
        if attr.module.path != MODULE or not str(attr.value or "").startswith(MAKER):
            return
        if self._inspected is None:
            # the whole sys.path: by default griffe imports with the module's own folder only
            self._inspected = griffe.inspect(
                MODULE, filepath=attr.filepath, import_paths=sys.path, docstring_parser="google"
            )
        attr.parent.set_member(attr.name, self._inspected[attr.name])
