"""``scope.utils``: the slice table, the scope's filter as JSON, the filter-builder widget, and
merging another session's models and fields into this store (:func:`merge`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from diffract._core.owners import owner_model_ids
from diffract._errors import IncompatibleSessionsError, InvalidArgumentError
from diffract.session.records import AGGREGATE_DOC, META_DOC, check_identifier
from diffract.session.results import KEY_COLUMNS, to_format
from diffract.session.scope import Namespace, Selection, frontend
from diffract.store import Batch


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
        from diffract.session.scope import check_flag

        self._session.check_writable()
        merge(self._scope, other_session, fields, check_flag(verify, "verify"), read_budget_bytes)


def _check(source: Selection, target: Selection) -> dict[str, list[Any]]:
    """The source's slices by model, after checking they fit the target's models."""
    store = target.session.store
    by_model: dict[str, list[Any]] = {}
    for s in source.slices():
        by_model.setdefault(s.model_id, []).append(s)
    for m, slices in by_model.items():
        check_identifier(m, "model id")
        if not store.has_model(m):
            continue
        mine = {s.name: s for s in store.slices(m)}
        for s in slices:
            t = mine.get(s.name)
            if t is None or t.shape != s.shape or t.dtype != s.dtype:
                what = "no such parameter" if t is None else f"shape {t.shape} {t.dtype}"
                raise IncompatibleSessionsError(
                    f"cannot merge: model {m!r} is in both sessions, but its parameter "
                    f"{s.name!r} is {s.shape} {s.dtype} in the other session and {what} here; "
                    "rename one model first (models.rename)"
                )
    return by_model


def merge(
    target: Selection,
    source: Any,
    fields: Sequence[str] | None,
    verify: bool,
    read_budget_bytes: int,
) -> None:
    """Copy ``source``'s models (weights included) and fields into ``target``'s store.

    Models are written one at a time (``read_budget_bytes`` is accepted for Diffract's code).

    Raises:
        InvalidArgumentError: ``source`` is not a session or scope, or is this store.
        IncompatibleSessionsError: a model in both whose parameters differ.
    """
    from diffract.session.models import read_weights

    if not isinstance(source, Selection):
        raise InvalidArgumentError(
            f"merge_other_session() takes a Session or a scope, got {type(source).__name__}"
        )
    src_session, dst = source.session, target.session
    if src_session.store is dst.store:
        raise InvalidArgumentError("merge_other_session(): the other session is this session")
    if fields is not None:
        fields = [fields] if isinstance(fields, str) else list(fields)
    src, dst_store = src_session.store, dst.store
    src.refresh()
    dst_store.refresh()
    by_model = _check(source, target)
    slice_models = {s.uid: s.model_id for sl in by_model.values() for s in sl}
    uids = set(slice_models)
    for m, slices in by_model.items():  # one model per write: weights read as they go
        if dst_store.has_model(m):
            continue
        weights = {
            s.uid: read_weights(src, src_session.references, s)
            for s in slices
            if not s.meta.get("external")
        }
        dst_store.commit(
            Batch(add_models={m: dict(src.models()[m])}, slices=slices, weights=weights)
        )
    batch = Batch()
    models = set(by_model)
    for o, f in list(src.keys()):
        if fields is not None and f not in fields:
            continue
        owners = owner_model_ids(o, slice_models)
        if not owners or not owners <= models | set(dst_store.models()):
            continue
        if o in uids or owners & models:
            if verify and dst_store.has((o, f)):
                continue
            batch.fields[(o, f)] = src.get((o, f))
    for kind in (META_DOC, AGGREGATE_DOC):
        for name, text in src.documents(kind).items():
            if kind == META_DOC and name not in uids:
                continue
            if verify and name in dst_store.documents(kind):
                continue
            batch.documents[(kind, name)] = text
    dst_store.commit(batch)
