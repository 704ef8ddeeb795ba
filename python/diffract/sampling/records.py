"""Sparse sampling of replacement candidates (the pure core of :mod:`diffract.sampling`).

Standard library only: no numpy, no torch. The kit connection (candidates from a stored
model, materializing selected candidates, persisting manifests) is in the sampling package's layout, library, sources, materialize and manifests modules.

Vocabulary (also in ``docs/sampling.md``):

* **axis** -- ``"<subblock name>.<config key>"`` (or ``"<subblock name>.no_op"``): one way a
  candidate's block can differ from the teacher's block at the same layer and width.
* **signature** -- the sorted tuple of ``(axis, value)`` pairs of a candidate's changed axes,
  ``value`` read from the candidate itself. Two candidates at different layers that change
  the same axes to the same values share a signature.
* **family** -- what the pairwise limit counts within. Replacement mode: ``(hidden_width,
  (axis_a, axis_b))``, the pair of changed axes. Subblock mode: ``(hidden_width, subblock
  kind, subblock name, teacher subblock config)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields as _dc_fields
from typing import Any

# --- output: records and manifest ---------------------------------------------------------
from diffract.sampling.base import (
    ALL_REASONS,
    EXCLUSION_REASONS,
    MODES,
    REASON_ELIGIBLE,
    SamplingError,
    canonical_json,
    check_place,
    check_str,
    from_mapping,
    json_copy,
    place_dict,
    stable_hash,
)
from diffract.sampling.candidates import SparseSamplingPolicy


@dataclass(frozen=True, kw_only=True)
class SparseSampleRecord:
    """One candidate (replacement mode) or one subblock of a candidate (subblock mode).

    ``sample_id`` is the first 16 hex digits of the sha256 of the record's *content* (see
    docs/sampling.md): equal content, equal id, whatever the candidate id or input order.
    Whole-layer records have ``subblock_kind == subblock_name == "block"`` and
    ``subblock_config is None``. ``changed_axes`` is stored sorted. ``reason`` is
    ``"eligible"`` or one of :data:`EXCLUSION_REASONS`.
    """

    sample_id: str
    candidate_id: str
    layer_idx: int
    hidden_width: int | None
    subblock_kind: str
    subblock_name: str
    changed_axes: tuple[str, ...]
    block_config: dict[str, Any]
    subblock_config: dict[str, Any] | None
    no_op: bool = False
    reason: str = "eligible"

    def __post_init__(self) -> None:
        check_str(self.sample_id, "SparseSampleRecord.sample_id")
        check_place(self, "SparseSampleRecord")
        check_str(self.subblock_kind, "SparseSampleRecord.subblock_kind")
        check_str(self.subblock_name, "SparseSampleRecord.subblock_name")
        if isinstance(self.changed_axes, str):
            raise TypeError("SparseSampleRecord.changed_axes must be a sequence of str")
        axes = tuple(sorted(check_str(a, "axis") for a in self.changed_axes))
        object.__setattr__(self, "changed_axes", axes)
        if not isinstance(self.block_config, Mapping):
            raise TypeError("SparseSampleRecord.block_config must be a mapping")
        object.__setattr__(self, "block_config", json_copy(dict(self.block_config), "block_config"))
        if self.subblock_config is not None:
            if not isinstance(self.subblock_config, Mapping):
                raise TypeError("SparseSampleRecord.subblock_config must be a mapping or None")
            object.__setattr__(
                self, "subblock_config", json_copy(dict(self.subblock_config), "subblock_config")
            )
        if not isinstance(self.no_op, bool):
            raise TypeError(f"SparseSampleRecord.no_op must be a bool, got {self.no_op!r}")
        if self.reason not in ALL_REASONS:
            raise SamplingError(
                f"SparseSampleRecord.reason {self.reason!r} is unknown; use 'eligible' or one "
                f"of {list(EXCLUSION_REASONS)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON-ready data (fresh copies; ``changed_axes`` as a sorted list)."""
        return {
            "sample_id": self.sample_id,
            **place_dict(self),
            "subblock_kind": self.subblock_kind,
            "subblock_name": self.subblock_name,
            "changed_axes": list(self.changed_axes),
            "block_config": json_copy(self.block_config, ""),
            "subblock_config": (
                None if self.subblock_config is None else json_copy(self.subblock_config, "")
            ),
            "no_op": self.no_op,
            "reason": self.reason,
        }

    def __hash__(self) -> int:
        return hash(canonical_json(self.to_dict()))

    def _replace(self, **changes: Any) -> SparseSampleRecord:
        data = self.to_dict()
        data.update(changes)
        return record_from_dict(data)


def record_from_dict(data: Mapping[str, Any]) -> SparseSampleRecord:
    """Read a :class:`SparseSampleRecord` back from its ``to_dict()``."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a record must be a mapping, got {type(data).__name__}")
    d = dict(data)
    d["changed_axes"] = tuple(d.get("changed_axes", ()))
    return from_mapping(SparseSampleRecord, d, "record")


def width_key(width: int | None) -> tuple[int, int]:
    return (0, 0) if width is None else (1, width)


def _record_sort_key(r: SparseSampleRecord) -> tuple[Any, ...]:
    return (
        width_key(r.hidden_width),
        r.layer_idx,
        r.subblock_kind,
        r.subblock_name,
        r.sample_id,
        r.candidate_id,
        r.reason,
        canonical_json(r.to_dict()),
    )


def _sorted_records(records: Iterable[SparseSampleRecord], what: str) -> tuple:
    out = []
    for r in records:
        if not isinstance(r, SparseSampleRecord):
            raise TypeError(f"SparseSampleManifest.{what} must hold SparseSampleRecord, got {r!r}")
        out.append(r)
    return tuple(sorted(out, key=_record_sort_key))


@dataclass(frozen=True, kw_only=True)
class SparseSampleManifest:
    """The outcome of one sampling call.

    * ``mode`` -- ``"replacement"`` or ``"subblock"``;
    * ``eligible`` -- the records that passed the eligibility rules (reason ``"eligible"``);
    * ``selected`` -- the eligible records chosen (reason ``"eligible"``);
    * ``excluded`` -- every other record with the reason: ineligible ones (teacher anchor,
      missing teacher, no-op, too many axes, duplicate) and eligible ones not chosen
      (pairwise limit, not selected, over the cap).

    Each tuple is sorted by (width, layer, subblock kind, subblock name, sample_id,
    candidate_id, reason). Each eligible record is in exactly one of ``selected`` and
    ``excluded`` (matched by ``(sample_id, candidate_id)``); construction checks this.
    """

    mode: str
    policy: SparseSamplingPolicy
    eligible: tuple[SparseSampleRecord, ...]
    selected: tuple[SparseSampleRecord, ...]
    excluded: tuple[SparseSampleRecord, ...]

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SamplingError(f"SparseSampleManifest.mode {self.mode!r} must be one of {MODES}")
        if not isinstance(self.policy, SparseSamplingPolicy):
            raise TypeError("SparseSampleManifest.policy must be a SparseSamplingPolicy")
        for name in ("eligible", "selected", "excluded"):
            object.__setattr__(self, name, _sorted_records(getattr(self, name), name))
        self._check_consistent()

    def _check_consistent(self) -> None:
        def key(r: SparseSampleRecord) -> tuple[str, str]:
            return (r.sample_id, r.candidate_id)

        eligible = {key(r) for r in self.eligible}
        if len(eligible) != len(self.eligible):
            raise SamplingError("SparseSampleManifest.eligible holds a record twice")
        for r in (*self.eligible, *self.selected):
            if r.reason != REASON_ELIGIBLE:
                raise SamplingError(
                    f"record {r.candidate_id!r} in eligible/selected has reason {r.reason!r}; "
                    "eligible and selected records have reason 'eligible'"
                )
        selected = [key(r) for r in self.selected]
        if len(set(selected)) != len(selected):
            raise SamplingError("SparseSampleManifest.selected holds a record twice")
        for k in selected:
            if k not in eligible:
                raise SamplingError(f"selected record {k} is not in eligible")
        excluded_keys: dict[tuple[str, str], int] = {}
        for r in self.excluded:
            if r.reason == REASON_ELIGIBLE:
                raise SamplingError(
                    f"excluded record {r.candidate_id!r} has reason 'eligible'; give the reason "
                    f"it was left out (one of {list(EXCLUSION_REASONS)})"
                )
            excluded_keys[key(r)] = excluded_keys.get(key(r), 0) + 1
        chosen = set(selected)
        for k in eligible:
            n = excluded_keys.get(k, 0) + (k in chosen)
            if n != 1:
                raise SamplingError(
                    f"eligible record {k} must be selected or excluded exactly once (found {n})"
                )

    def to_dict(self, *, include_identity: bool = True) -> dict[str, Any]:
        """Canonical JSON-ready data; with ``identity`` unless ``include_identity=False``."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "policy": self.policy.to_dict(),
            "eligible": [r.to_dict() for r in self.eligible],
            "selected": [r.to_dict() for r in self.selected],
            "excluded": [r.to_dict() for r in self.excluded],
        }
        if include_identity:
            out["identity"] = self.identity
        return out

    @property
    def identity(self) -> str:
        """sha256 hex of the canonical JSON of ``to_dict(include_identity=False)``."""
        return stable_hash(self.to_dict(include_identity=False))

    def __hash__(self) -> int:
        return hash(self.identity)


def manifest_from_dict(data: Mapping[str, Any]) -> SparseSampleManifest:
    """Read a manifest back from ``to_dict()``; a present ``identity`` must match.

    Malformed content (a missing key, a policy that is not a mapping of the policy's
    fields, record lists that are not lists of record mappings) is a :class:`SamplingError`
    naming the part."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a manifest must be a mapping, got {type(data).__name__}")
    missing = [k for k in ("mode", "policy", "eligible", "selected", "excluded") if k not in data]
    if missing:
        raise SamplingError(f"manifest data lacks the key(s) {missing}")
    policy = data["policy"]
    known = [f.name for f in _dc_fields(SparseSamplingPolicy)]
    if not isinstance(policy, Mapping):
        raise SamplingError(
            f"manifest policy must be a mapping with keys {known}, got "
            f"{type(policy).__name__}: {policy!r}"
        )
    unknown = sorted(set(policy) - set(known), key=str)
    if unknown:
        raise SamplingError(f"manifest policy has unknown key(s) {unknown}; valid keys are {known}")
    try:
        policy_obj = SparseSamplingPolicy(**policy)
    except TypeError as exc:
        raise SamplingError(f"manifest policy: {exc}") from None
    lists: dict[str, tuple[SparseSampleRecord, ...]] = {}
    for key in ("eligible", "selected", "excluded"):
        items = data[key]
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise SamplingError(
                f"manifest {key!r} must be a list of records, got {type(items).__name__}: {items!r}"
            )
        recs = []
        for i, r in enumerate(items):
            try:
                recs.append(record_from_dict(r))
            except (TypeError, SamplingError) as exc:
                raise SamplingError(f"manifest {key}[{i}]: {exc}") from None
        lists[key] = tuple(recs)
    manifest = SparseSampleManifest(mode=data["mode"], policy=policy_obj, **lists)
    expected = data.get("identity")
    if expected is not None and expected != manifest.identity:
        raise SamplingError(
            f"manifest identity mismatch: stored {expected!r}, content hashes to "
            f"{manifest.identity!r} (the data was edited or corrupted)"
        )
    return manifest
