"""Persisting sampling manifests in a store (or a Session's store) and exporting them
as JSON files."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from diffract.sampling.base import SamplingError, canonical_json
from diffract.sampling.records import SparseSampleManifest, SparseSampleRecord, manifest_from_dict

#: the document kind manifests are saved under in a store
DOCUMENT_KIND = "sampling_manifest"
_FORMAT = "diffract.sampling.manifest/1"


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


def _read_doc(text: str) -> dict[str, Any]:
    doc = json.loads(text)
    if doc.get("format") != _FORMAT:
        raise SamplingError(f"not a sampling manifest document (format {doc.get('format')!r})")
    return doc


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
    return manifest_from_dict(_read_doc(docs[hits[0]])["manifest"])


def list_manifests(target: Any) -> list[dict[str, Any]]:
    """One summary row per saved manifest (for tables, the sidebar and panels): identity,
    label, teacher_id, mode, policy, counts, and the materialized model ids."""
    rows = []
    for ident, text in sorted(_store_of(target).documents(DOCUMENT_KIND).items()):
        doc = _read_doc(text)
        m = doc["manifest"]
        rows.append(
            {
                "identity": ident,
                "label": doc.get("label"),
                "teacher_id": doc.get("teacher_id"),
                "mode": m["mode"],
                "policy": m["policy"],
                "n_eligible": len(m["eligible"]),
                "n_selected": len(m["selected"]),
                "n_excluded": len(m["excluded"]),
                "models": sorted(doc.get("models", {})),
            }
        )
    return rows


def export_manifest(manifest: SparseSampleManifest, path: str | os.PathLike[str]) -> Path:
    """Write ``manifest.to_dict()`` as JSON (sorted keys, indented) to ``path``."""
    p = Path(path)
    p.write_text(
        json.dumps(manifest.to_dict(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    )
    return p
