"""The wire contract, Python side: the JSON the server extension answers and the rows the
filter builder syncs. Mirrored by ``js/shared/wire.ts`` (a test checks the two agree)."""

from __future__ import annotations

from typing import TypedDict


class PreviewRow(TypedDict):
    """One matched slice in the filter builder's preview table."""

    model_id: str
    name: str
    type: str
    shape: str
    uid: str


class VersionReply(TypedDict):
    """``GET /diffract/api/version``."""

    version: str
    api: int
    package: str


class StoreEntry(TypedDict):
    """One store found under the server root (``GET /diffract/api/stores``)."""

    path: str
    name: str
    segments: int
    updated: float
    stamp: str


class ModelEntry(TypedDict):
    """One model of a store (``GET /diffract/api/store``)."""

    model_id: str
    slices: int
    fields: list[str]
    framework: str | None
    added: float | None
    #: when its fields last changed, at the latest (``diffract.store.reader.ChangeClock``)
    changed: float | None
    #: a tracked checkpoint's run and step (``diffract._vocab.steps``), else None
    track: TrackEntry | None


class TrackEntry(TypedDict):
    """A tracked checkpoint's place on its run's step axis."""

    run: str
    step: int


class ManifestEntry(TypedDict):
    """A sampling manifest saved in a store (``GET /diffract/api/store``)."""

    identity: str
    label: str | None
    teacher_id: str | None
    mode: str
    n_eligible: int
    n_selected: int
    n_excluded: int
    models: list[str]


class FieldPoint(TypedDict):
    """One slice's value of a field (``GET /diffract/api/field``)."""

    name: str
    uid: str
    type: str
    index: int
    value: float | int | str | bool | None


#: interface name in wire.ts -> TypedDict here
MIRRORED = {
    "PreviewRow": PreviewRow,
    "VersionReply": VersionReply,
    "StoreEntry": StoreEntry,
    "ModelEntry": ModelEntry,
    "TrackEntry": TrackEntry,
    "ManifestEntry": ManifestEntry,
    "FieldPoint": FieldPoint,
}
