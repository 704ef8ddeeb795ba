"""``scope.utils``: the slice table, the scope's filter as JSON, the filter-builder widget."""

from __future__ import annotations

from collections.abc import Sequence
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
        rows = [s.to_row() for s in self._scope.slices()]
        return to_format(rows, [*KEY_COLUMNS, "shape", "dtype"], export_format)

    def filter_json(self) -> str:
        """The scope's filter as canonical JSON (what the filter-builder widget edits).

        Returns:
            The JSON text.
        """
        return self._scope.filter_chain.to_json()

    def filter_builder(self) -> Any:
        """An interactive filter builder over this scope (needs the widgets extra).

        Returns:
            A :class:`diffract.widgets.FilterBuilder`.

        Raises:
            ImportError: the widgets extra is not installed.
        """
        return frontend("filter_builder")(self._scope)

    def merge_other_session(
        self,
        other_session: Any,
        fields: Sequence[str] | None = None,
        *,
        verify: bool = True,
        read_budget_bytes: int = 512 * 1024 * 1024,
    ) -> None:
        """Copy another session's (or scope's) models, weights and fields into this store.

        Args:
            other_session: a Session (its whole store) or a scope (its selection).
            fields: copy only these fields (default: all); the weights always come along.
            verify: skip values this store already holds (False overwrites them).
            read_budget_bytes: accepted for Diffract's code (models are copied one at a time).

        Raises:
            StoreError: this session is read-only.
            InvalidArgumentError: not a session or scope, or this very session.
            IncompatibleSessionsError: a model in both whose parameters differ; nothing is merged.
            InvalidIdentifierError: a model id outside Diffract's alphabet.
        """
        from diffract.session.checks import check_flag
        from diffract.session.merge import merge

        self._session.check_writable()
        merge(self._scope, other_session, fields, check_flag(verify, "verify"), read_budget_bytes)
