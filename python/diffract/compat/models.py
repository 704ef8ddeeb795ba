"""Diffract's ``models``: ``rename``, ``erase`` (by ids or all), ``parameters``; over our
:class:`diffract.session.models.Models` (``list`` is an alias of ``ids``: :mod:`diffract.compat.aliases`)."""

from __future__ import annotations

import builtins
import json
from functools import partial as partial_
from typing import Any

from diffract._core.arrays import LazyArray
from diffract._core.owners import cross_owner, model_owner, parse_owner
from diffract._core.slices import SliceInfo, make_uid, validate_model_id
from diffract._errors import ParameterNotFoundError, SessionError, UnknownModelError
from diffract.compat.aliases import with_aliases
from diffract.session.models import Models as OurModels
from diffract.session.records import CONTEXT_DOC, META_DOC, check_identifier, other_meta
from diffract.session.scope import Namespace, check_flag, check_meta
from diffract.session.summaries import EraseSummary
from diffract.store import Batch


class Parameters(Namespace):
    """``models.parameters``: the parameters of the scope and their metadata."""

    def list(self, *, verbose: bool = False) -> builtins.list[dict[str, Any]]:
        """One dict per parameter of the scope.

        Args:
            verbose: also ``available_fields`` (stored field names, ``weights`` included) and
                ``other_meta``.

        Returns:
            Dicts with ``uid``, ``name``, ``model_id``, ``parameter_type``.
        """
        verbose = check_flag(verbose, "verbose")
        store = self._store
        store.refresh()
        patched = store.documents(META_DOC)
        fields: dict[str, builtins.list[str]] = {}
        if verbose:
            for o, f in store.keys():
                fields.setdefault(o, []).append(f)
        out = []
        for s in self._scope.slices():
            d: dict[str, Any] = {
                "uid": s.uid,
                "name": s.name,
                "model_id": s.model_id,
                "parameter_type": s.type.name,
            }
            if verbose:
                d["available_fields"] = ["weights", *sorted(fields.get(s.uid, []))]
                d["other_meta"] = other_meta(s, patched)
            out.append(d)
        return out

    def patch_meta(self, *, updates: dict[str, dict[str, Any]], force: bool = False) -> None:
        """Merge ``updates = {uid: {key: value}}`` into the parameters' ``other_meta``.

        Args:
            updates: new metadata by parameter uid (looked up in the whole store).
            force: overwrite keys already set.

        Raises:
            ParameterNotFoundError: an unknown uid.
            SessionError: a value that is not a dict, or an existing key without ``force``.
            InvalidArgumentError: a value that is not JSON data.
        """
        self._session.check_writable()
        force = check_flag(force, "force")
        if not isinstance(updates, dict):
            raise SessionError(
                f"updates must be a dict {{uid: {{key: value}}}}, got {type(updates).__name__}"
            )
        if not updates:
            return
        store = self._store
        store.refresh()
        by_uid = {s.uid: s for s in store.slices()}
        patched = store.documents(META_DOC)
        docs: dict[tuple[str, str], str] = {}
        for uid, meta in updates.items():
            s = by_uid.get(uid)
            if s is None:
                raise ParameterNotFoundError(f"no parameter with uid {uid!r} is stored")
            if not isinstance(meta, dict):
                raise SessionError(f"updates[{uid!r}] must be a dict, got {type(meta).__name__}")
            current = other_meta(s, patched)
            clash = sorted(k for k in meta if k in current)
            if clash and not force:
                raise SessionError(
                    f"parameter {uid!r} already has metadata {clash}; pass force=True to overwrite"
                )
            mine = json.loads(patched.get(uid) or "{}")
            mine.update(check_meta(meta))
            docs[(META_DOC, uid)] = json.dumps(mine)  # in the order given, as Diffract keeps them
        store.commit(Batch(documents=docs))


@with_aliases("models")
class Models(OurModels):
    """``session.models`` with Diffract's methods too (``list``, ``rename``, ``erase``,
    ``parameters``)."""

    @property
    def parameters(self) -> Parameters:
        """The parameters of this scope: ``list(verbose=)``, ``patch_meta(updates=, force=)``."""
        return Parameters(self._scope)

    def erase(self, *model_ids: str, erase_all: bool = False) -> EraseSummary:
        """Remove the scope's parameters of models, and every value computed from them.

        From the session (or a scope holding every parameter of a model) the whole model
        goes. From a narrower scope only its parameters of the model go, as in Diffract:
        ``filter(param_names=["head"]).models.erase("b")`` removes ``b``'s ``head``; the
        values computed from it go too (its own, the model-level values of ``b`` whose
        parameters included it, the cross-model values of pairs of that name with ``b``),
        the rest of ``b`` stays. Everything is one atomic write: the erase happens whole or
        not at all (the rest of a partly erased model is written again in it).

        Args:
            *model_ids: models with a parameter in this scope.
            erase_all: erase the parameters of every model of this scope.

        Returns:
            An :class:`EraseSummary`: the models named (in the order given) and how many
            parameters were removed.

        Raises:
            ValueError: neither or both of ids and ``erase_all``.
            UnknownModelError: a model that is not stored, or has no parameter in this scope.
        """
        self._session.check_writable()
        erase_all = check_flag(erase_all, "erase_all")
        if bool(model_ids) == erase_all:
            raise ValueError("erase() takes model ids or erase_all=True (not both, not neither)")
        ids = self._scope.model_ids() if erase_all else builtins.list(dict.fromkeys(model_ids))
        for m in ids:
            self.require_stored(m)
        store = self._store
        scope = self._scope
        gone: dict[str, builtins.list[SliceInfo]] = {}
        for m in ids:
            mine = scope.filter_chain.select(store.slices(m))
            if not mine:
                raise UnknownModelError(
                    f"model {m!r} has no parameter in this scope (filter {scope.filter_chain.to_json()}); "
                    f"erase it from the session: session.models.erase({m!r})"
                )
            gone[m] = mine
        whole = [m for m in ids if len(gone[m]) == len(store.slices(m))]
        partial = {m: gone[m] for m in ids if m not in whole}
        batch = _erase_batch(store, whole, partial)
        if not batch.is_empty():
            store.commit(batch)
        return EraseSummary(models=tuple(ids), affected_uids=sum(len(v) for v in gone.values()))

    def rename(self, model_id: str, new_model_id: str) -> None:
        """Store a model under a new id, with its weights and every value computed on it.

        Parameter uids derive from the model id, so they change with it (Diffract keeps them).

        Args:
            model_id: a stored model.
            new_model_id: its new id.

        Raises:
            UnknownModelError: ``model_id`` is not stored.
            DuplicateModelError: ``new_model_id`` is taken.
            InvalidModelIdError: a bad new id.
        """
        from diffract._errors import DuplicateModelError
        from diffract.session.models import read_weights

        session = self._session
        session.check_writable()
        validate_model_id(new_model_id)
        check_identifier(new_model_id, "model id")
        self.require_stored(model_id)
        store = self._store
        if store.has_model(new_model_id):
            raise DuplicateModelError(f"model_id {new_model_id!r} is already stored")
        old = store.slices(model_id)
        new_uid = {s.uid: make_uid(new_model_id, s.name) for s in old}
        slices, weights = [], {}
        for s in old:
            slices.append(_renamed(s, new_model_id, new_uid[s.uid]))
            if not s.meta.get("external"):
                weights[new_uid[s.uid]] = read_weights(store, session.references, s)
        fields = {}
        for o, f in builtins.list(store.keys()):
            moved = _moved_owner(o, model_id, new_model_id, new_uid)
            if moved is not None:
                fields[(moved, f)] = store.get((o, f))
        docs = {
            (META_DOC, new_uid[u]): t for u, t in store.documents(META_DOC).items() if u in new_uid
        }
        info = dict(store.models()[model_id])
        store.commit(
            Batch(
                add_models={new_model_id: info},
                slices=slices,
                weights=weights,
                fields=fields,
                documents=docs,
            )
        )
        store.commit(Batch(remove_models=[model_id]))


def _erase_batch(
    store: Any, whole: builtins.list[str], partial: dict[str, builtins.list[SliceInfo]]
) -> Batch:
    """One write removing the models ``whole`` and the slices ``partial[m]`` of others.

    A partly erased model is written again without those slices (same id, same uids): its
    other slices, their weights (read one at a time while writing), its metadata, and the
    values not computed from an erased slice.
    """
    batch = Batch(remove_models=builtins.list(whole))
    if not partial:
        return batch
    removed = set(whole)
    erased_uids = {s.uid for ss in partial.values() for s in ss}
    erased = {(s.model_id, s.name) for ss in partial.values() for s in ss}
    contexts = store.documents(CONTEXT_DOC)
    by_uid = {s.uid: s for s in store.slices()}
    for m in partial:
        batch.add_models[m] = dict(store.models()[m])
        for s in store.slices(m):
            if s.uid in erased_uids:
                continue
            batch.slices.append(s)
            if not s.meta.get("external"):
                batch.weights[s.uid] = LazyArray(
                    tuple(s.shape), s.dtype, partial_(store.weights, s.uid), f"{m}:{s.name}"
                )
    for o, f in builtins.list(store.keys()):
        p = parse_owner(o)
        if p.level == "param":
            s = by_uid.get(o)
            if s is None or s.model_id not in partial or o in erased_uids:
                continue
        elif p.level == "model":
            m = p.model_id or ""
            if m not in partial or p.scope is None:
                continue  # another model's, or the whole model's (computed with the erased)
            names = json.loads(contexts.get(o, "null"))
            if names is None or any((m, n) in erased for n in names):
                continue
        else:
            s = by_uid.get(p.uid or "")
            ref = p.model_id or ""
            if s is None or (s.model_id not in partial and ref not in partial):
                continue  # no model of the pair is written again
            if s.model_id in removed or ref in removed:
                continue
            if (s.model_id, s.name) in erased or (ref, s.name) in erased:
                continue
        batch.fields[(o, f)] = store.get((o, f))
    return batch


def _renamed(s: SliceInfo, model_id: str, uid: str) -> SliceInfo:
    return SliceInfo(model_id, s.name, uid, s.type, s.shape, s.dtype, s.index, dict(s.meta))


def _moved_owner(owner: str, old: str, new: str, new_uid: dict[str, str]) -> str | None:
    """The owner key a value of model ``old`` has once the model is ``new``; None if not its."""
    o = parse_owner(owner)
    if o.level == "model":
        return model_owner(new, o.scope) if o.model_id == old else None
    if o.level == "param":
        return new_uid.get(owner)
    uid = new_uid.get(o.uid or "", o.uid or "")
    ref = new if o.model_id == old else (o.model_id or "")
    if uid == o.uid and ref == o.model_id:
        return None
    return cross_owner(uid, ref)
