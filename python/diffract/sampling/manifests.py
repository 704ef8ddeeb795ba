"""Persisting sampling manifests in a store (or a Session's store) and exporting them
as JSON files."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from diffract._errors import StoreCorruptError
from diffract.sampling.base import SamplingError, canonical_json
from diffract.sampling.records import SparseSampleManifest, SparseSampleRecord, manifest_from_dict

#: the document kind manifests are saved under in a store
DOCUMENT_KIND = "sampling_manifest"
_FORMAT = "diffract.sampling.manifest/1"
#: how deeply a saved document may nest (a manifest written here nests under 10 levels;
#: a crafted one nested thousands deep would exhaust Python's recursion)
MAX_NESTING = 64


class ManifestDocumentError(SamplingError, StoreCorruptError):
    """A sampling manifest saved in a store is malformed (damaged, or crafted): not JSON,
    nested too deeply, or missing or mistyping an entry. The message names the document
    and the entry. A :class:`~diffract.store.StoreCorruptError` too: the sidebar's API
    answers 422 naming it."""


def _store_of(target: Any) -> Any:
    store = getattr(target, "store", target)
    if not (hasattr(store, "commit") and hasattr(store, "documents")):
        raise TypeError(
            "manifests are saved in a diffract Store (or a Session's store); "
            f"got {type(target).__name__}. To write a file, use export_manifest(manifest, path)"
        )
    return store


def save_manifest(
    target: Any,
    manifest: SparseSampleManifest,
    *,
    label: str | None = None,
    teacher_id: str | None = None,
    models: Mapping[str, SparseSampleRecord] | None = None,
) -> str:
    """Save ``manifest`` in the store of ``target`` (a Session or Store) as a document of
    kind ``"sampling_manifest"`` named by its identity; returns the identity. ``models``
    (what :func:`materialize` returned) records which model holds which sample."""
    from diffract.store import Batch

    store = _store_of(target)
    doc = {
        "format": _FORMAT,
        "label": label,
        "teacher_id": teacher_id,
        "models": {m: r.sample_id for m, r in sorted((models or {}).items())},
        "manifest": manifest.to_dict(),
    }
    store.commit(Batch(documents={(DOCUMENT_KIND, manifest.identity): canonical_json(doc)}))
    return manifest.identity


def _nesting(obj: Any) -> int:
    """How deeply ``obj`` (parsed JSON) nests, counted without recursion and stopping past
    :data:`MAX_NESTING`."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            deepest = max(deepest, d)
            if deepest > MAX_NESTING:
                break
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return deepest


def _read_doc(text: str, name: str = "") -> dict[str, Any]:
    """The saved document ``name``, parsed and checked as far as every reader relies on it.

    Raises:
        ManifestDocumentError: it is not JSON, nests deeper than :data:`MAX_NESTING`, is
            not an object of this format, or its ``manifest`` is not an object.
    """
    where = f"sampling manifest {name[:80]!r}"
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ManifestDocumentError(
            f"{where}: nested deeper than {MAX_NESTING} levels; the document is damaged or crafted"
        ) from None
    except (TypeError, ValueError) as exc:  # JSONDecodeError, bad UTF-8
        raise ManifestDocumentError(f"{where}: not JSON; the document is damaged: {exc}") from None
    if _nesting(doc) > MAX_NESTING:
        raise ManifestDocumentError(
            f"{where}: nested deeper than {MAX_NESTING} levels; the document is damaged or crafted"
        )
    if not isinstance(doc, dict):
        raise ManifestDocumentError(f"{where}: a JSON {type(doc).__name__}, not an object")
    if doc.get("format") != _FORMAT:
        raise ManifestDocumentError(
            f"{where}: not a sampling manifest document: format {str(doc.get('format'))[:40]!r}"
        )
    if not isinstance(doc.get("manifest"), dict):
        raise ManifestDocumentError(f"{where}: its 'manifest' entry is not an object")
    return doc


def _summary_row(ident: str, doc: dict[str, Any]) -> dict[str, Any]:
    """The summary row of the saved document ``ident`` (see :func:`list_manifests`).

    Raises:
        ManifestDocumentError: an entry is missing or of the wrong type (named).
    """
    m = doc["manifest"]

    def text(where: dict[str, Any], key: str, optional: bool = False) -> str | None:
        v = where.get(key)
        if isinstance(v, str) or (optional and v is None):
            return v
        raise ManifestDocumentError(
            f"sampling manifest {ident[:80]!r}: {key!r} must be a string"
            f"{' or null' if optional else ''}, got {type(v).__name__}"
        )

    def count(key: str) -> int:
        v = m.get(key)
        if not isinstance(v, list):
            raise ManifestDocumentError(
                f"sampling manifest {ident[:80]!r}: manifest {key!r} must be a list, got "
                f"{type(v).__name__}"
            )
        return len(v)

    models = doc.get("models", {})
    if not isinstance(models, dict):
        raise ManifestDocumentError(
            f"sampling manifest {ident[:80]!r}: 'models' must be an object, got "
            f"{type(models).__name__}"
        )
    if "policy" not in m:
        raise ManifestDocumentError(f"sampling manifest {ident[:80]!r}: no manifest 'policy'")
    return {
        "identity": ident,
        "label": text(doc, "label", optional=True),
        "teacher_id": text(doc, "teacher_id", optional=True),
        "mode": text(m, "mode"),
        "policy": m["policy"],
        "n_eligible": count("eligible"),
        "n_selected": count("selected"),
        "n_excluded": count("excluded"),
        "models": sorted(models),
    }


def load_manifest(target: Any, identity: str) -> SparseSampleManifest:
    """The manifest saved under ``identity`` (a unique, non-empty prefix is enough)."""
    if not isinstance(identity, str):
        raise TypeError(
            f"identity must be a str (a manifest identity or a unique prefix of one), got "
            f"{type(identity).__name__}: {identity!r}"
        )
    if not identity.strip():
        raise SamplingError(
            f"identity {identity!r} is empty: give a saved manifest's identity or a unique "
            "prefix of one (list_manifests() lists them)"
        )
    docs = _store_of(target).documents(DOCUMENT_KIND)
    hits = [k for k in docs if k.startswith(identity)]
    if len(hits) != 1:
        raise SamplingError(
            f"{'no' if not hits else 'more than one'} saved manifest matches {identity!r}; "
            f"saved: {sorted(docs)}"
        )
    doc = _read_doc(docs[hits[0]], hits[0])
    try:
        return manifest_from_dict(doc["manifest"])
    except SamplingError as exc:
        raise ManifestDocumentError(f"sampling manifest {hits[0][:80]!r}: {exc}") from None
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ManifestDocumentError(
            f"sampling manifest {hits[0][:80]!r}: malformed entry: {type(exc).__name__}: {exc}"
        ) from None


def list_manifests(target: Any) -> list[dict[str, Any]]:
    """One summary row per saved manifest (for tables, the sidebar and panels): identity,
    label, teacher_id, mode, policy, counts, and the materialized model ids.

    Raises:
        ManifestDocumentError: a saved document is malformed (the message names it and the
            entry).
    """
    return [
        _summary_row(ident, _read_doc(text, ident))
        for ident, text in sorted(_store_of(target).documents(DOCUMENT_KIND).items())
    ]


def export_manifest(manifest: SparseSampleManifest, path: str | os.PathLike[str]) -> Path:
    """Write ``manifest.to_dict()`` as JSON (sorted keys, indented) to ``path``."""
    p = Path(path)
    p.write_text(
        json.dumps(manifest.to_dict(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    )
    return p
