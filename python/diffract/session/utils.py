"""``scope.utils``: the slice table, the scope's filter as JSON, the filter-builder widget."""

from __future__ import annotations

from typing import Any

from diffract.session._frontends import frontend
from diffract.session.export import KEY_COLUMNS, to_format
from diffract.session.selection import Namespace


class Utils(Namespace):
    """Helpers: the slice table, the filter as JSON, the filter-builder widget."""

    def slices_table(self, export_format: str = "list") -> Any:
        """Every slice of the scope with its shape and dtype.

        Args:
            export_format: "list" (rows), "dict" (columns), "json", "pandas" or "polars".

        Returns:
            The table in ``export_format``.

        Raises:
            ValueError: an unknown format.
        """
        rows = [s.to_row() for s in self._scope._slices()]
        return to_format(rows, [*KEY_COLUMNS, "shape", "dtype"], export_format)

    def filter_json(self) -> str:
        """The scope's filter as canonical JSON (what the filter-builder widget edits).

        Returns:
            The JSON text.
        """
        return self._scope._chain.to_json()

    def filter_builder(self) -> Any:
        """An interactive filter builder over this scope (needs the widgets extra).

        Returns:
            A :class:`diffract.widgets.FilterBuilder`.

        Raises:
            ImportError: the widgets extra is not installed.
        """
        return frontend("filter_builder")(self._scope)
