"""What ``models.add`` does for Diffract's arguments: overrides, custom handlers, content ids.

* ``parameter_overrides={original name: ParameterOverrides(name=, ptype=, other_meta=)}``
  renames, retypes or annotates extracted parameters (names the model lacks are left
  out with a warning naming them, as Diffract ignores them);
* ``custom_handlers``: objects with ``can_handle(array, name)``, ``process(array, name)``,
  ``parameter_type`` and optionally ``get_additional_metadata(array, name)``, as Diffract's
  ``ParameterHandler``; the first that can handle a leaf decides its type and array;
* a model added without ``model_id`` gets one derived from its content (never a clock).
"""

from __future__ import annotations

import hashlib
import logging
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from diffract._core.arrays import LazyArray
from diffract._core.slices import ParameterType
from diffract._errors import InvalidArgumentError
from diffract.session.summaries import ParameterOverrides


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
