"""``scope.models``: add, list and remove models; the slices of the scope and their weights.

:func:`add_model` is the one way a model gets into a store (``Models.add`` and sampling's
``materialize`` both use it), so its checks (model id, duplicates, flags, meta) always apply.

A model's parameter overrides and extraction handlers (:func:`apply_overrides`), and
:func:`read_weights` (from the store, or the checkpoint a slice references), live here too.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from diffract._core.arrays import LazyArray
from diffract._core.slices import ParameterType, SliceInfo, make_uid, validate_model_id
from diffract._errors import (
    DuplicateModelError,
    ExtractionError,
    InvalidArgumentError,
    UnknownModelError,
)
from diffract.extract.describe import ModelDescription, describe_source
from diffract.extract.references import ReferenceReader, external_ref, shard_stamps
from diffract.session.scope import Namespace, check_flag, check_meta, names
from diffract.session.summaries import ParameterOverrides
from diffract.store import Batch, Store

_NOT_LAZY = (
    "copy_weights=False needs a checkpoint file read lazily (.safetensors, a "
    "safetensors folder, .npz, .pt/.pth/.bin); in-memory models and .onnx files "
    "(protobuf is read whole) are always copied"
)


def add_model(
    store: Store,
    model: Any,
    model_id: str | None,
    filter_spec: Any = None,
    *,
    replace: bool = False,
    copy_weights: bool | None = None,
    meta: dict[str, Any] | None = None,
    parameter_overrides: Any = None,
    custom_handlers: Any = None,
    extraction: dict[str, Any] | None = None,
) -> list[SliceInfo]:
    """Extract ``model``'s weight slices and commit them to ``store`` under ``model_id``.

    What :meth:`Models.add` does once the session is known to be writable (see there).

    Args:
        store: the store written to.
        model: a model object, a ``{name: array}`` dict or a checkpoint path.
        model_id: the id to store it under.
        filter_spec: which leaves to keep (Equinox-style filter); default: float arrays.
        replace: replace a model stored under that id (its fields are dropped).
        copy_weights: copy every leaf (True), reference the file (False), or decide per leaf.
        meta: JSON-ready provenance kept with the model.
        parameter_overrides: ``{name: ParameterOverrides}`` (see :mod:`.overrides`).
        custom_handlers: Diffract-style parameter handlers (see :mod:`.overrides`).
        extraction: keyword options of :func:`diffract.extract.extract` (``lora``,
            ``lora_scaling``, ``base_model``, ``intra``, ``pool``, ``heads``).

    Returns:
        The slices stored.

    Raises:
        InvalidModelIdError: a bad model id.
        InvalidArgumentError: a flag that is not a bool, or meta that is not JSON data.
        DuplicateModelError: ``model_id`` is stored and ``replace`` is False.
        ExtractionError: no weight slices, or ``copy_weights=False`` cannot be honoured.
    """
    from diffract.extract import extract

    if _auto_id(model_id):
        model_id = None  # Diffract's ``model_id or <generated>``: "" and 0 generate one too
    if model_id is not None:
        validate_model_id(model_id)
    replace = check_flag(replace, "replace")
    copy_weights = check_flag(copy_weights, "copy_weights", allow_none=True)
    meta = check_meta(meta)
    overrides = check_overrides(parameter_overrides)
    store.refresh()
    if model_id is not None:
        _check_free(store, model_id, replace)
    ex = extract(unwrap_model(model), filter_spec, **(extraction or {}))
    if model_id is None:  # from the content as extracted, before overrides rename anything
        model_id = _free_content_id(store, content_model_id(ex), replace)
    extra = apply_handlers(ex, custom_handlers)
    for name, m in apply_overrides(ex, overrides).items():
        extra.setdefault(name, {}).update(m)
    if not ex.leaves:
        reasons = "; ".join(f"{n}: {r}" for n, r in list(ex.skipped.items())[:5])
        raise ExtractionError(
            f"no weight slices in the model given for {model_id!r}"
            + (f" (skipped leaves: {reasons})" if reasons else " (it has no array leaves)")
        )
    plan = _copy_plan(ex, copy_weights)
    slices, weights = _slices_and_weights(ex, model_id, plan)
    for s in slices:
        if s.name in extra:
            s.meta["other_meta"] = check_meta(extra[s.name])
    info = _model_info(ex, plan, len(slices), meta)
    store.commit(Batch(add_models={model_id: info}, slices=slices, weights=weights))
    return slices


def _auto_id(model_id: Any) -> bool:
    """Whether ``model_id`` asks for a generated id: None, or an empty one (``""``, ``0``),
    as Diffract's ``model_id or <generated>`` reads it."""
    return model_id is None or (isinstance(model_id, (str, int)) and not model_id)


def _free_content_id(store: Store, base: str, replace: bool) -> str:
    """The id of a model added without one: ``base`` (from the content), or, when that is
    stored, the first free ``base-2``, ``base-3``... (adding the same weights again adds
    another model, as in Diffract, with an id that is the same on every run). With
    ``replace``, ``base`` itself (the stored model is replaced)."""
    if replace or not store.has_model(base):
        return base
    n = 2
    while store.has_model(f"{base}-{n}"):
        n += 1
    return f"{base}-{n}"


def _check_free(store: Store, model_id: str, replace: bool) -> None:
    if store.has_model(model_id) and not replace:
        raise DuplicateModelError(
            f"model_id {model_id!r} is already stored; pass replace=True to replace it "
            "(its fields are dropped), or choose another id"
        )


@dataclass(frozen=True)
class _CopyPlan:
    """Which leaves go into the store: all (``copy``), or only ``eager`` ones."""

    copy: bool
    #: leaves of a file that cannot be referenced lazily (not memory-mappable tensors)
    eager: list[str]


def _copy_plan(ex: Any, copy_weights: bool | None) -> _CopyPlan:
    copy = (not ex.file_backed) if copy_weights is None else bool(copy_weights)
    if not copy and not ex.file_backed:
        raise ExtractionError(_NOT_LAZY)
    eager = (
        [] if copy else [leaf.name for leaf in ex.leaves if not isinstance(leaf.array, LazyArray)]
    )
    if eager and copy_weights is False:
        raise ExtractionError(
            f"copy_weights=False: {len(eager)} of the {len(ex.leaves)} weight leaves of "
            f"{ex.source} cannot be referenced in the file (they are not stored as "
            f"tensors that can be read one at a time): {names(eager)}; leave "
            "copy_weights unset to copy just those into the store, or pass "
            "copy_weights=True to copy every leaf"
        )
    return _CopyPlan(copy, eager)


def _slices_and_weights(
    ex: Any, model_id: str, plan: _CopyPlan
) -> tuple[list[SliceInfo], dict[str, Any]]:
    """The slices of an extraction, and the weights to copy (the others are referenced)."""
    referenced = not plan.copy and len(plan.eager) < len(ex.leaves)
    shards = shard_stamps(ex.source) if referenced else None
    slices: list[SliceInfo] = []
    weights: dict[str, Any] = {}
    eager = set(plan.eager)
    for i, leaf in enumerate(ex.leaves):
        uid = make_uid(model_id, leaf.name)
        slice_meta: dict[str, Any] = {"layout": leaf.layout} if leaf.layout != "out_in" else {}
        slice_meta.update(leaf.meta)
        keep = plan.copy or leaf.name in eager
        if not keep:
            slice_meta["external"] = external_ref(ex.source, leaf.name, leaf.array, shards)
        slices.append(
            SliceInfo(model_id, leaf.name, uid, leaf.type, leaf.shape, leaf.dtype, i, slice_meta)
        )
        if keep:
            weights[uid] = leaf.array
    return slices, weights


def _model_info(ex: Any, plan: _CopyPlan, n_slices: int, meta: dict[str, Any]) -> dict[str, Any]:
    """What ``models.info(id)`` reports: provenance, how weights are kept, meta."""
    eager, n = plan.eager, len(ex.leaves)
    info: dict[str, Any] = {
        "framework": ex.framework,
        "source": ex.source,
        "added": time.time(),
        "n_slices": n_slices,
        "skipped": ex.skipped,
        "weights": "copied" if plan.copy or len(eager) == n else "referenced",
        "meta": meta,
    }
    if eager:
        if len(eager) < n:
            info["weights"] = "mixed"
        info["copied_leaves"] = eager
        info["weights_note"] = (
            f"{len(eager)} of {n} leaves of {ex.source} cannot be referenced "
            "lazily in the file and were copied into the store"
            + ("; the others are referenced" if len(eager) < n else "")
        )
    return info


class Models(Namespace):
    """Add, list and remove models; list the slices of the scope."""

    def add(
        self,
        model: Any,
        model_id: str | None = None,
        filter_spec: Any = None,
        *,
        replace: bool = False,
        copy_weights: bool | None = None,
        meta: dict[str, Any] | None = None,
        parameter_overrides: dict[str, Any] | None = None,
        custom_handlers: Any = None,
        lora: str = "update",
        lora_scaling: str = "peft",
        base_model: Any = None,
        intra: bool = False,
        pool: bool = True,
        heads: Any = None,
    ) -> list[SliceInfo]:
        """Extract ``model``'s weight slices and store them under ``model_id``.

        Checkpoint files are referenced, not copied, unless ``copy_weights=True``; with
        ``copy_weights`` unset, leaves of a file that cannot be referenced lazily (tensors
        nested in a ``.pt`` checkpoint, say) are copied, and ``models.info(id)`` says which
        (``"weights": "mixed"``, ``"copied_leaves"``). A referenced checkpoint (each shard of
        a sharded folder) is stamped with its size and time: reading it after it changed is
        an error that says so.

        Args:
            model: a model object (PyTorch, Flax, Equinox, Keras, ONNX), a ``{name: array}``
                dict, or a checkpoint path (file or safetensors folder).
            model_id: the id to store it under (none of ``@ [ ] , /``); None (or ``""``,
                ``0``, as in Diffract) derives one from the content (``model-<10 hex>``:
                the same model gets the same id; adding it again, a new model
                ``model-<10 hex>-2``, then ``-3``...).
            filter_spec: an Equinox-style filter (predicate, bool, or prefix tree of them)
                choosing the leaves to keep; default: floating arrays with ndim >= 1.
            replace: replace a model stored under that id (which also drops its fields).
            copy_weights: True copies every leaf into the store, False references the
                checkpoint file, None (default) references what can be read lazily.
            meta: JSON-ready provenance kept with the model (``models.info(id)["meta"]``).
            parameter_overrides: ``{original name: ParameterOverrides(name=, ptype=,
                other_meta=)}`` (Diffract's); names the model does not have are left out,
                with an ``UnusedOverridesWarning`` naming them (Diffract ignores them).
            custom_handlers: Diffract-style parameter handlers, tried before ours.
            lora: LoRA / PEFT adapters as the update ``<layer>.lora`` = B @ A ("update",
                default) or merged, ``<layer>.weight`` = W + B @ A ("merged", needs the
                base weights); slice meta ``"lora"`` has the rank and scaling.
            lora_scaling: "peft" (default: alpha / r, rsLoRA alpha / sqrt(r), from the
                module or ``adapter_config.json``) or "none" (plain B @ A, as
                WeightWatcher's ``analyze(peft=True)``).
            base_model: a base model (object, checkpoint path, or the id of a model in
                this store): every slice becomes W - W_base, paired by name (unpaired ones
                are skipped with the reason; slice meta ``"delta"``).
            intra: also store ``intra:<a>:<b>`` = W_b W_a / (||W_a|| ||W_b||) for
                consecutive chained dense slices (WeightWatcher's ``intra=True``).
            pool: False also stores ``<conv>:<p>``, the out x in matrix of each kernel
                position p of every convolution (WeightWatcher's ``pool=False``).
            heads: also store per-head attention slices ``<block>.head<h>.q/.o``,
                ``<block>.kv_head<g>.k/.v`` and circuits ``<block>.head<h>.qk/.ov``
                (:mod:`diffract.extract.heads`): True (the model's config), a
                ``HeadConfig``, or a config (``PretrainedConfig``, dict, config.json path).

        Returns:
            The slices stored, in extraction order.

        Raises:
            StoreError: the session is read-only.
            InvalidModelIdError: a bad model id.
            InvalidArgumentError: a flag that is not a bool, or meta that is not JSON data.
            DuplicateModelError: the id is stored and ``replace`` is False.
            ExtractionError: the model has no weight slices, ``copy_weights=False``
                cannot be honoured, a bad LoRA pair or option, or a ``base_model`` with no
                same-named slice or another shape for one (naming the slice).
        """
        self._session.check_writable()
        if (
            isinstance(filter_spec, dict)
            and filter_spec
            and all(isinstance(v, ParameterOverrides) for v in filter_spec.values())
        ):  # Diffract's third positional argument
            filter_spec, parameter_overrides = None, filter_spec
        return add_model(
            self._store,
            model,
            model_id,
            filter_spec,
            replace=replace,
            copy_weights=copy_weights,
            meta=meta,
            parameter_overrides=parameter_overrides,
            custom_handlers=custom_handlers,
            extraction={
                "lora": lora,
                "lora_scaling": lora_scaling,
                "base_model": self._stored_base(base_model),
                "intra": check_flag(intra, "intra"),
                "pool": check_flag(pool, "pool"),
                "heads": heads,
            },
        )

    def _stored_base(self, base_model: Any) -> Any:
        """A ``base_model`` naming a stored model (and no file): that model's slices as an
        :class:`~diffract.extract.Extracted`; anything else as given."""
        if not isinstance(base_model, str) or os.path.exists(base_model):
            return base_model
        self._store.refresh()
        if not self._store.has_model(base_model):
            return base_model  # extract() says why it cannot read it
        from diffract.extract import Extracted, ExtractedLeaf

        leaves = [
            ExtractedLeaf(
                s.name,
                read_weights(self._store, self._session.references, s),
                tuple(s.shape),
                s.dtype,
                s.type,
                s.meta.get("layout", "out_in"),
            )
            for s in self._store.slices(base_model)
        ]
        return Extracted(leaves, {}, "store", f"stored model {base_model!r}", False)

    def remove(self, model_id: str) -> None:
        """Remove a model, its slices and every field computed on it.

        Args:
            model_id: the model to remove.

        Raises:
            StoreError: the session is read-only.
            UnknownModelError: no such model is stored.
        """
        self._session.check_writable()
        self.require_stored(model_id)
        self._store.commit(Batch(remove_models=[model_id]))

    def require_stored(self, model_id: str) -> None:
        """Raise unless ``model_id`` is stored (in the store, whatever this scope selects).

        Args:
            model_id: a model id.

        Raises:
            UnknownModelError: no such model is stored (the message lists those that are).
        """
        self._store.refresh()
        if not self._store.has_model(model_id):
            raise UnknownModelError(
                f"no model {model_id!r} in the store; stored models: {sorted(self._store.models())}"
            )

    def ids(self) -> list[str]:
        """Model ids in this scope.

        Returns:
            The ids, sorted as strings (zero-pad numeric suffixes to keep them in order).
        """
        return self._scope.model_ids()

    def info(self, model_id: str) -> dict[str, Any]:
        """What was recorded when the model was added.

        Args:
            model_id: a stored model.

        Returns:
            Its framework, source, time added, slice count, skipped leaves, how its weights
            are kept (``"weights"``) and ``"meta"``.

        Raises:
            UnknownModelError: no such model is stored.
        """
        self.require_stored(model_id)
        info: dict[str, Any] = self._store.models()[model_id]
        return info

    def describe(
        self, source: str | os.PathLike[str], revision: str | None = None
    ) -> ModelDescription:
        """What a checkpoint holds, from its headers only: nothing is added or computed, and
        no tensor data is read (``diffract describe`` on the command line).

        Args:
            source: a ``.safetensors`` file or folder, a ``.gguf`` file, or a
                Hugging Face repo id in the local cache (``"org/name"``, ``"org/name@rev"``).
            revision: the repo id's branch, tag or commit (default ``main``).

        Returns:
            Its tensors (names, shapes, dtypes, bytes, types, layers, what an analysis would
            do with each and why), config, and counts per type, layer and status
            (``print(d)``, ``d.to_dict()``).

        Raises:
            ExtractionError: a missing source (a repo id not in the cache says where it
                looked), a format not described from headers, or a corrupt header.
        """
        return describe_source(source, revision)

    def slices(self) -> list[SliceInfo]:
        """The slices of this scope.

        Returns:
            The slices, ordered by model id then depth.
        """
        return self._scope.slices()

    def slice(self, uid_or_name: str, model_id: str | None = None) -> SliceInfo:
        """One slice of this scope.

        Args:
            uid_or_name: the slice's uid, or its name.
            model_id: the model, where the name occurs in several.

        Returns:
            The slice.

        Raises:
            KeyError: no such slice in this scope, or a name in several models.
        """
        return self._scope.find_slice(uid_or_name, model_id)

    def weights(self, uid_or_name: str, model_id: str | None = None) -> np.ndarray:
        """The stored weights of one slice (read from its checkpoint where referenced).

        Args:
            uid_or_name: the slice's uid, or its name.
            model_id: the model, where the name occurs in several.

        Returns:
            The weights as a NumPy array.

        Raises:
            KeyError: no such slice in this scope.
            StoreError: its checkpoint is gone or changed since the model was added.
        """
        s = self._scope.find_slice(uid_or_name, model_id)
        return read_weights(self._store, self._session.references, s)

    def __len__(self) -> int:
        return len(self.ids())

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids())

    def __contains__(self, model_id: object) -> bool:
        return model_id in self.ids()

    def __repr__(self) -> str:
        return f"<models: {self.ids()}>"


def content_model_id(ex: Any) -> str:
    """An id derived from the extracted names, shapes, dtypes and weights: ``model-<10 hex>``.

    Weights read lazily from a file are identified by the file and their names instead of
    their bytes (reading them all only to name the model would defeat referencing).
    """
    h = hashlib.blake2b(digest_size=5)
    h.update(str(ex.source if ex.file_backed else "").encode())
    for leaf in ex.leaves:
        h.update(f"{leaf.name}\x00{leaf.shape}\x00{leaf.dtype}\x00".encode())
        if not isinstance(leaf.array, LazyArray):
            h.update(np.ascontiguousarray(np.asarray(leaf.array)).view(np.uint8).data)
    return f"model-{h.hexdigest()}"


def unwrap_model(model: Any) -> Any:
    """A bound Flax Linen module as its parameters (what our Flax extractor reads)."""
    if (
        type(model).__module__.startswith("flax.linen")
        and getattr(model, "scope", None) is not None
    ):
        return dict(model.variables["params"])
    return model


def check_overrides(overrides: Any) -> dict[str, ParameterOverrides]:
    """``parameter_overrides`` as a dict of :class:`ParameterOverrides` (dicts accepted)."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise InvalidArgumentError(
            "parameter_overrides must be a dict {parameter name: ParameterOverrides(...)}, "
            f"got {type(overrides).__name__}"
        )
    out = {}
    for name, ov in overrides.items():
        if isinstance(ov, Mapping):
            ov = ParameterOverrides(**ov)
        if not isinstance(ov, ParameterOverrides):
            raise InvalidArgumentError(
                f"parameter_overrides[{name!r}] must be a ParameterOverrides, got {type(ov).__name__}"
            )
        out[name] = ov
    return out


class UnusedOverridesWarning(UserWarning):
    """``parameter_overrides`` named parameters the model does not have: they were left
    out (Diffract ignores them too)."""


def _warn_unused(unknown: list[str], names: set[str]) -> None:
    """Warn (and log) that the overrides for ``unknown`` match no parameter of the model."""
    close = {n: f"{n}.weight" for n in unknown if f"{n}.weight" in names}
    hint = (
        "; a PyTorch module path names its weight here as <module>.weight: "
        + ", ".join(f"{n!r} -> {w!r}" for n, w in close.items())
        if close
        else ""
    )
    text = (
        f"parameter_overrides for {unknown}, which the model does not have, were not "
        f"used{hint}; its parameters include {sorted(names)[:8]}"
    )
    logging.getLogger("diffract.session.models").warning(text)
    warnings.warn(text, UnusedOverridesWarning, stacklevel=5)


def apply_overrides(ex: Any, overrides: dict[str, ParameterOverrides]) -> dict[str, dict[str, Any]]:
    """Rename and retype the leaves of ``ex`` in place; their extra metadata by new name.

    Overrides for names the model does not have are left out, as Diffract leaves them, with
    an :class:`UnusedOverridesWarning` (also logged) that names them.

    Raises:
        InvalidArgumentError: two parameters would get the same name.
    """
    names = {leaf.name for leaf in ex.leaves}
    unknown = sorted(set(overrides) - names)
    if unknown:
        _warn_unused(unknown, names)
    meta: dict[str, dict[str, Any]] = {}
    for leaf in ex.leaves:
        ov = overrides.get(leaf.name)
        if ov is None:
            continue
        extra: dict[str, Any] = dict(ov.other_meta or {})
        if ov.name is not None and ov.name != leaf.name:
            extra["original_name"] = leaf.name
            leaf.name = ov.name
        if ov.ptype is not None:
            extra["original_ptype"] = leaf.type.name
            leaf.type = ParameterType.from_string(
                ov.ptype.value if isinstance(ov.ptype, ParameterType) else str(ov.ptype)
            )
        meta[leaf.name] = extra
    renamed = [leaf.name for leaf in ex.leaves]
    dupes = sorted({n for n in renamed if renamed.count(n) > 1})
    if dupes:
        raise InvalidArgumentError(
            f"parameter_overrides give several parameters the name(s) {dupes}"
        )
    return meta


def apply_handlers(ex: Any, handlers: Iterable[Any] | None) -> dict[str, dict[str, Any]]:
    """Let custom handlers claim leaves of ``ex``: type, processed array, extra metadata."""
    meta: dict[str, dict[str, Any]] = {}
    hs = list(handlers or [])
    for h in hs:
        if not (hasattr(h, "can_handle") and hasattr(h, "process")):
            raise InvalidArgumentError(
                "a custom handler needs can_handle(array, name), process(array, name) and "
                f"parameter_type, got {type(h).__name__}"
            )
    for leaf in ex.leaves:
        for h in hs:
            arr = np.asarray(leaf.array)
            if not h.can_handle(arr, leaf.name):
                continue
            out = np.asarray(h.process(arr, leaf.name))
            leaf.array, leaf.shape, leaf.dtype = out, tuple(out.shape), str(out.dtype)
            pt = h.parameter_type
            leaf.type = ParameterType.from_string(
                pt.value if isinstance(pt, ParameterType) else str(getattr(pt, "name", pt))
            )
            extra = getattr(h, "get_additional_metadata", None)
            meta[leaf.name] = dict(extra(arr, leaf.name) or {}) if extra else {}
            break
    return meta


def read_weights(store: Store, references: ReferenceReader, s: SliceInfo) -> np.ndarray:
    """The weights of slice ``s``: from the store, or from the checkpoint it references.

    Raises:
        StoreError: a referenced checkpoint is gone or changed since the model was added.
    """
    if s.meta.get("external"):
        return references.read(s)
    stored: np.ndarray = store.weights(s.uid)
    return stored
