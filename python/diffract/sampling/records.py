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

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import fields as _dc_fields
from typing import Any

from diffract._core.jsonable import canonical_json as _canonical_json
from diffract._errors import DiffractError

__all__ = [
    "EXCLUSION_REASONS",
    "MODES",
    "REASON_DUPLICATE",
    "REASON_ELIGIBLE",
    "REASON_MISSING_TEACHER",
    "REASON_NOT_SELECTED",
    "REASON_NO_OP",
    "REASON_OVER_CAP",
    "REASON_PAIRWISE_LIMIT",
    "REASON_TEACHER_ANCHOR",
    "REASON_TOO_MANY_AXES",
    "SOURCE_TEACHER",
    "Candidate",
    "SamplingError",
    "SparseSampleManifest",
    "SparseSampleRecord",
    "SparseSamplingPolicy",
    "SubblockConfig",
    "canonical_json",
    "manifest_from_dict",
    "record_from_dict",
    "stable_hash",
]


class SamplingError(DiffractError, ValueError):
    """A sampling input, policy or manifest is malformed."""


# --- reasons, modes -----------------------------------------------------------------------

REASON_ELIGIBLE = "eligible"
#: the teacher's own block (replacement mode): the reference the others replace
REASON_TEACHER_ANCHOR = "teacher_anchor"
#: the candidate (or subblock) disables a subblock that the teacher has active
REASON_NO_OP = "no_op"
#: same content as a record kept instead (the teacher's, or the smaller candidate_id)
REASON_DUPLICATE = "duplicate"
#: more than two changed axes
REASON_TOO_MANY_AXES = "too_many_axes"
#: no teacher block at the candidate's (hidden_width, layer_idx), or no such subblock in it
REASON_MISSING_TEACHER = "missing_teacher"
#: a two-axis signature beyond ``max_pairwise_per_family`` in its family
REASON_PAIRWISE_LIMIT = "pairwise_limit"
#: eligible, its signature is represented by another record (subblock mode)
REASON_NOT_SELECTED = "not_selected"
#: eligible, but the width's ``replacement_cap`` was used up (replacement mode)
REASON_OVER_CAP = "over_cap"

EXCLUSION_REASONS: tuple[str, ...] = (
    REASON_TEACHER_ANCHOR,
    REASON_MISSING_TEACHER,
    REASON_NO_OP,
    REASON_TOO_MANY_AXES,
    REASON_DUPLICATE,
    REASON_PAIRWISE_LIMIT,
    REASON_NOT_SELECTED,
    REASON_OVER_CAP,
)
_REASONS = frozenset((REASON_ELIGIBLE, *EXCLUSION_REASONS))

MODE_REPLACEMENT = "replacement"
MODE_SUBBLOCK = "subblock"
MODES: tuple[str, ...] = (MODE_REPLACEMENT, MODE_SUBBLOCK)

#: ``Candidate.source`` of the teacher's own block
SOURCE_TEACHER = "self"

#: ``subblock_kind`` / ``subblock_name`` of a whole-layer record (replacement mode)
BLOCK_KIND = "block"

SAMPLE_ID_HEX = 16


# --- canonical JSON and hashes --------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: sorted keys, no whitespace, UTF-8 kept, NaN refused.

    Args:
        value: JSON data.

    Returns:
        The text (:func:`diffract._core.jsonable.canonical_json`).

    Raises:
        SamplingError: the value holds something JSON cannot (NaN included).
    """
    try:
        return _canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise SamplingError(
            f"value is not JSON-ready ({exc}): use dicts with string keys, lists, str, int, "
            "finite float, bool or None"
        ) from None


def stable_hash(value: Any) -> str:
    """sha256 hex digest of ``canonical_json(value)``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _json_copy(value: Any, what: str) -> Any:
    """A deep, JSON-normalized copy (tuples become lists); raises naming ``what``."""
    try:
        return json.loads(canonical_json(value))
    except SamplingError as exc:
        raise SamplingError(f"{what}: {exc}") from None


def _check_str(value: Any, what: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}: {value!r}")
    if not allow_empty and not value:
        raise SamplingError(f"{what} must be a non-empty string")
    return value


def _check_int(value: Any, what: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}: {value!r}")
    if minimum is not None and value < minimum:
        raise SamplingError(f"{what} must be >= {minimum}, got {value}")
    return value


def _check_width(value: Any, what: str) -> int | None:
    if value is None:
        return None
    return _check_int(value, what, minimum=1)


# --- input: candidates ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SubblockConfig:
    """One subblock of a candidate block: an attention or FFN (or other) part of a layer.

    ``kind`` says what it is (``"attention"``, ``"ffn"``, ...), ``name`` which one it is in
    the block (unique within a block, no ``"."``), ``config`` its JSON-ready settings
    (e.g. ``{"intermediate_size": 768}``), ``no_op`` whether it is disabled (the block
    skips it: the residual stream passes through).
    """

    kind: str
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    no_op: bool = False

    def __post_init__(self) -> None:
        _check_str(self.kind, "SubblockConfig.kind")
        _check_str(self.name, "SubblockConfig.name")
        if "." in self.name:
            raise SamplingError(
                f"SubblockConfig.name {self.name!r} contains '.'; axes are written "
                "'<subblock name>.<config key>', so names may not contain dots"
            )
        if not isinstance(self.config, Mapping):
            raise TypeError(
                f"SubblockConfig.config must be a mapping, got {type(self.config).__name__}"
            )
        if not isinstance(self.no_op, bool):
            raise TypeError(f"SubblockConfig.no_op must be a bool, got {self.no_op!r}")
        object.__setattr__(
            self, "config", _json_copy(dict(self.config), f"config of subblock {self.name!r}")
        )

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "config", "no_op"}`` (the name is the key in a block config)."""
        return {"kind": self.kind, "config": _json_copy(self.config, ""), "no_op": self.no_op}

    def __hash__(self) -> int:
        return hash((self.name, canonical_json(self.to_dict())))


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One candidate block (the input of the samplers).

    * ``candidate_id`` -- unique among the candidates given to one call;
    * ``layer_idx`` -- the teacher layer this block would replace;
    * ``hidden_width`` -- the model width it works at (``None``: unknown / single width);
      candidates are sampled independently per width;
    * ``source`` -- ``"self"`` for the teacher's own block, anything else (e.g.
      ``"ffn_prune"``) for a derived one;
    * ``subblocks`` -- its subblock configs (unique names);
    * ``changed_axes`` -- the axes in which it differs from the teacher's block at the same
      ``(hidden_width, layer_idx)``, each ``"<subblock name>.<key>"`` naming one of its own
      subblocks (``key`` a config key, or ``no_op``). Empty for the teacher, non-empty for a
      derived candidate. Stored sorted and de-duplicated.
    """

    candidate_id: str
    layer_idx: int
    hidden_width: int | None
    source: str
    subblocks: tuple[SubblockConfig, ...]
    changed_axes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_str(self.candidate_id, "Candidate.candidate_id")
        _check_int(self.layer_idx, "Candidate.layer_idx", minimum=0)
        _check_width(self.hidden_width, "Candidate.hidden_width")
        _check_str(self.source, "Candidate.source")
        subs = tuple(
            s if isinstance(s, SubblockConfig) else SubblockConfig(**s) for s in self.subblocks
        )
        if not subs:
            raise SamplingError(f"candidate {self.candidate_id!r} has no subblocks")
        names = [s.name for s in subs]
        if len(set(names)) != len(names):
            raise SamplingError(
                f"candidate {self.candidate_id!r} has repeated subblock names {sorted(names)}"
            )
        object.__setattr__(self, "subblocks", tuple(sorted(subs, key=lambda s: s.name)))
        if isinstance(self.changed_axes, str):
            raise TypeError(
                f"Candidate.changed_axes must be a sequence of axis names, got the string "
                f"{self.changed_axes!r} (wrap it: ({self.changed_axes!r},))"
            )
        axes = tuple(sorted({_check_str(a, "axis") for a in self.changed_axes}))
        for axis in axes:
            sub, _, key = axis.partition(".")
            if sub not in names or not key:
                raise SamplingError(
                    f"candidate {self.candidate_id!r}: axis {axis!r} must be written "
                    f"'<subblock name>.<config key>' with a subblock name among {sorted(names)}"
                )
        if self.source == SOURCE_TEACHER and axes:
            raise SamplingError(
                f"candidate {self.candidate_id!r} is the teacher's block (source='self') "
                f"but declares changed axes {list(axes)}; a teacher block changes nothing"
            )
        if self.source != SOURCE_TEACHER and not axes:
            raise SamplingError(
                f"derived candidate {self.candidate_id!r} (source={self.source!r}) declares "
                "no changed axes; name the axes it changes relative to the teacher, "
                "or use source='self' for the teacher's own block"
            )
        object.__setattr__(self, "changed_axes", axes)

    @property
    def is_teacher(self) -> bool:
        """Whether this is the teacher's own block (``source == "self"``)."""
        return self.source == SOURCE_TEACHER

    @property
    def block_config(self) -> dict[str, Any]:
        """``{subblock name: {"kind", "config", "no_op"}}``: the block as JSON-ready data."""
        return {s.name: s.to_dict() for s in self.subblocks}

    def subblock(self, name: str) -> SubblockConfig | None:
        """The subblock named ``name`` in this candidate's block config, or None."""
        for s in self.subblocks:
            if s.name == name:
                return s
        return None

    def axis_value(self, axis: str) -> Any:
        """The candidate's value on ``axis`` (``None`` when the config lacks the key)."""
        sub_name, _, key = axis.partition(".")
        sub = self.subblock(sub_name)
        if sub is None:
            return None
        if key == "no_op":
            return sub.no_op
        return sub.config.get(key)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; ``Candidate.from_dict`` reads it back."""
        return {
            "candidate_id": self.candidate_id,
            "layer_idx": self.layer_idx,
            "hidden_width": self.hidden_width,
            "source": self.source,
            "subblocks": [{"name": s.name, **s.to_dict()} for s in self.subblocks],
            "changed_axes": list(self.changed_axes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Candidate:
        """Build from ``to_dict()`` output; ``subblocks`` may also be a name-keyed mapping."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a candidate must be a Candidate or a mapping, got {type(data)}")
        d = dict(data)
        subs = d.get("subblocks", d.pop("block_config", None))
        if isinstance(subs, Mapping):
            subs = [{"name": k, **v} for k, v in subs.items()]
        d["subblocks"] = tuple(
            s if isinstance(s, SubblockConfig) else SubblockConfig(**s) for s in subs or ()
        )
        d["changed_axes"] = tuple(d.get("changed_axes", ()))
        try:
            return cls(**d)
        except TypeError as exc:
            if "unexpected keyword" in str(exc) or "missing" in str(exc):
                raise SamplingError(f"bad candidate mapping: {exc}") from None
            raise

    def __hash__(self) -> int:
        return hash(canonical_json(self.to_dict()))


def as_candidates(candidates: Iterable[Candidate | Mapping[str, Any]]) -> list[Candidate]:
    if isinstance(candidates, (str, bytes, Mapping)):
        raise TypeError(
            "candidates must be an iterable of Candidate (or candidate mappings), "
            f"got a single {type(candidates).__name__}"
        )
    out = [c if isinstance(c, Candidate) else Candidate.from_dict(c) for c in candidates]
    seen: set[str] = set()
    for c in out:
        if c.candidate_id in seen:
            raise SamplingError(
                f"candidate_id {c.candidate_id!r} appears more than once; "
                "candidate ids must be unique within one call"
            )
        seen.add(c.candidate_id)
    return sorted(out, key=lambda c: c.candidate_id)


# --- policy ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SparseSamplingPolicy:
    """How many candidates to keep.

    * ``max_pairwise_per_family`` (>= 0) -- at most this many distinct two-axis signatures
      per family are selected (0: none);
    * ``replacement_cap`` (>= 1) -- at most this many whole-layer candidates per hidden
      width (replacement mode only);
    * ``seed`` -- breaks the ties that the documented orderings leave.
    """

    max_pairwise_per_family: int = 4
    replacement_cap: int = 50
    seed: int = 42

    def __post_init__(self) -> None:
        _check_int(
            self.max_pairwise_per_family, "SparseSamplingPolicy.max_pairwise_per_family", minimum=0
        )
        _check_int(self.replacement_cap, "SparseSamplingPolicy.replacement_cap", minimum=1)
        _check_int(self.seed, "SparseSamplingPolicy.seed")

    def to_dict(self) -> dict[str, Any]:
        """The policy as canonical JSON-ready data (part of a manifest's identity)."""
        return {
            "max_pairwise_per_family": self.max_pairwise_per_family,
            "replacement_cap": self.replacement_cap,
            "seed": self.seed,
        }


# --- output: records and manifest ---------------------------------------------------------


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
        _check_str(self.sample_id, "SparseSampleRecord.sample_id")
        _check_str(self.candidate_id, "SparseSampleRecord.candidate_id")
        _check_int(self.layer_idx, "SparseSampleRecord.layer_idx", minimum=0)
        _check_width(self.hidden_width, "SparseSampleRecord.hidden_width")
        _check_str(self.subblock_kind, "SparseSampleRecord.subblock_kind")
        _check_str(self.subblock_name, "SparseSampleRecord.subblock_name")
        if isinstance(self.changed_axes, str):
            raise TypeError("SparseSampleRecord.changed_axes must be a sequence of str")
        axes = tuple(sorted(_check_str(a, "axis") for a in self.changed_axes))
        object.__setattr__(self, "changed_axes", axes)
        if not isinstance(self.block_config, Mapping):
            raise TypeError("SparseSampleRecord.block_config must be a mapping")
        object.__setattr__(
            self, "block_config", _json_copy(dict(self.block_config), "block_config")
        )
        if self.subblock_config is not None:
            if not isinstance(self.subblock_config, Mapping):
                raise TypeError("SparseSampleRecord.subblock_config must be a mapping or None")
            object.__setattr__(
                self, "subblock_config", _json_copy(dict(self.subblock_config), "subblock_config")
            )
        if not isinstance(self.no_op, bool):
            raise TypeError(f"SparseSampleRecord.no_op must be a bool, got {self.no_op!r}")
        if self.reason not in _REASONS:
            raise SamplingError(
                f"SparseSampleRecord.reason {self.reason!r} is unknown; use 'eligible' or one "
                f"of {list(EXCLUSION_REASONS)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON-ready data (fresh copies; ``changed_axes`` as a sorted list)."""
        return {
            "sample_id": self.sample_id,
            "candidate_id": self.candidate_id,
            "layer_idx": self.layer_idx,
            "hidden_width": self.hidden_width,
            "subblock_kind": self.subblock_kind,
            "subblock_name": self.subblock_name,
            "changed_axes": list(self.changed_axes),
            "block_config": _json_copy(self.block_config, ""),
            "subblock_config": (
                None if self.subblock_config is None else _json_copy(self.subblock_config, "")
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
    try:
        return SparseSampleRecord(**d)
    except TypeError as exc:
        if "unexpected keyword" in str(exc) or "missing" in str(exc):
            raise SamplingError(f"bad record mapping: {exc}") from None
        raise


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
