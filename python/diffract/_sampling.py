"""Sparse sampling of replacement candidates (the pure core of :mod:`diffract.sampling`).

Standard library only: no numpy, no torch. The kit connection (candidates from a stored
model, materializing selected candidates, persisting manifests) is in ``_sampling_kit``.

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
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import fields as _dc_fields
from typing import Any

from ._errors import DiffractError

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
    "sample_replacement_candidates",
    "sample_subblock_configs",
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

_SAMPLE_ID_HEX = 16


# --- canonical JSON and hashes --------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: sorted keys, no whitespace, UTF-8 kept, NaN refused."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
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


def _as_candidates(candidates: Iterable[Candidate | Mapping[str, Any]]) -> list[Candidate]:
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


def _width_key(width: int | None) -> tuple[int, int]:
    return (0, 0) if width is None else (1, width)


def _record_sort_key(r: SparseSampleRecord) -> tuple[Any, ...]:
    return (
        _width_key(r.hidden_width),
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


# --- deterministic orders -------------------------------------------------------------------


def _tie(seed: int, *parts: Any) -> str:
    """The seeded tie-break key of an item: sha256 of canonical ``[seed, *parts]``."""
    return stable_hash([seed, *parts])


def _spread_order(positions: Sequence[float], tiebreak: Callable[[int], str]) -> list[int]:
    """Indices of ``positions`` (sorted ascending) in spread order.

    First, middle (index ``(n - 1) // 2``) and last come first; then repeatedly the position
    farthest from every one taken so far (farthest-point order), ties broken by
    ``tiebreak(index)``.
    """
    n = len(positions)
    if n == 0:
        return []
    order: list[int] = []
    for i in (0, (n - 1) // 2, n - 1):
        if i not in order:
            order.append(i)
    rest = [i for i in range(n) if i not in order]
    dist = {i: min(abs(positions[i] - positions[j]) for j in order) for i in rest}
    while rest:
        best = max(rest, key=lambda i: (dist[i], _neg(tiebreak(i))))
        order.append(best)
        rest.remove(best)
        for i in rest:
            dist[i] = min(dist[i], abs(positions[i] - positions[best]))
    return order


def _neg(key: str) -> tuple[int, ...]:
    """Invert a string's order so that ``max`` picks the smallest tiebreak key."""
    return tuple(-ord(c) for c in key)


def _value_key(value: Any) -> tuple[Any, ...]:
    """A total order on JSON values: None, bool, numbers, strings, then the rest."""
    if value is None:
        return (0, 0, "")
    if isinstance(value, bool):
        return (1, int(value), "")
    if isinstance(value, (int, float)) and math.isfinite(value):
        return (2, value, "")
    if isinstance(value, str):
        return (3, 0, value)
    return (4, 0, canonical_json(value))


def _round_robin(queues: Sequence[Sequence[Any]]) -> Iterator[Any]:
    """One from each queue in turn until all are empty."""
    i = 0
    while True:
        any_left = False
        for q in queues:
            if i < len(q):
                any_left = True
                yield q[i]
        if not any_left:
            return
        i += 1


# --- the samplers ---------------------------------------------------------------------------


Signature = tuple[tuple[str, str], ...]


@dataclass
class _Item:
    """One record being decided, with its keys."""

    record: SparseSampleRecord
    candidate: Candidate
    signature: Signature
    sig_values: tuple[Any, ...]
    content: str
    tie: str
    reason: str = REASON_ELIGIBLE


def _signature(candidate: Candidate, axes: Sequence[str]) -> tuple[Signature, tuple[Any, ...]]:
    values = tuple(candidate.axis_value(a) for a in axes)
    sig = tuple((a, canonical_json(v)) for a, v in zip(axes, values, strict=True))
    return sig, values


def _teachers(group: Sequence[Candidate]) -> dict[int, Candidate]:
    teachers: dict[int, Candidate] = {}
    for c in group:
        if not c.is_teacher:
            continue
        other = teachers.get(c.layer_idx)
        if other is not None:
            raise SamplingError(
                f"two teacher blocks (source='self') for hidden_width={c.hidden_width} "
                f"layer_idx={c.layer_idx}: {other.candidate_id!r} and {c.candidate_id!r}; "
                "give each (width, layer) exactly one teacher block"
            )
        teachers[c.layer_idx] = c
    return teachers


def _group_by_width(cands: Sequence[Candidate]) -> list[list[Candidate]]:
    groups: dict[int | None, list[Candidate]] = {}
    for c in cands:
        groups.setdefault(c.hidden_width, []).append(c)
    return [groups[w] for w in sorted(groups, key=_width_key)]


def _disables_active(candidate: Candidate, teacher: Candidate, names: Iterable[str]) -> bool:
    for name in names:
        sub, t_sub = candidate.subblock(name), teacher.subblock(name)
        if sub is not None and t_sub is not None and sub.no_op and not t_sub.no_op:
            return True
    return False


def _dedupe(items: list[_Item], seen: dict[str, _Item], prefer: Callable[[_Item], Any]) -> None:
    """Mark as duplicate every eligible item whose content was seen; ``prefer`` orders winners."""
    for it in sorted((i for i in items if i.reason == REASON_ELIGIBLE), key=prefer):
        if it.content in seen:
            it.reason = REASON_DUPLICATE
        else:
            seen[it.content] = it


def _ordered_signatures(
    sigs: dict[Signature, list[_Item]], seed: int, scope: Any
) -> dict[tuple[str, ...], list[Signature]]:
    """Signatures grouped by their axes; within a group, in value spread order."""
    by_axes: dict[tuple[str, ...], list[Signature]] = {}
    for sig in sigs:
        by_axes.setdefault(tuple(a for a, _ in sig), []).append(sig)
    out = {}
    for axes in sorted(by_axes):
        group = sorted(
            by_axes[axes],
            key=lambda s: (tuple(_value_key(v) for v in sigs[s][0].sig_values), s),
        )
        order = _spread_order(
            list(range(len(group))),
            lambda i, group=group: _tie(seed, "signature", scope, group[i]),
        )
        out[axes] = [group[i] for i in order]
    return out


def _manifest(mode: str, policy: SparseSamplingPolicy, items: list[_Item]) -> SparseSampleManifest:
    eligible, selected, excluded = [], [], []
    for it in items:
        if it.reason == "selected":
            eligible.append(it.record)
            selected.append(it.record)
        elif it.reason in (REASON_PAIRWISE_LIMIT, REASON_NOT_SELECTED, REASON_OVER_CAP):
            eligible.append(it.record)
            excluded.append(it.record._replace(reason=it.reason))
        else:
            if it.reason == REASON_ELIGIBLE:  # pragma: no cover - every item is decided
                raise AssertionError(f"undecided record {it.record.candidate_id!r}")
            excluded.append(it.record._replace(reason=it.reason))
    return SparseSampleManifest(
        mode=mode,
        policy=policy,
        eligible=tuple(eligible),
        selected=tuple(selected),
        excluded=tuple(excluded),
    )


def sample_replacement_candidates(
    candidates: Iterable[Candidate | Mapping[str, Any]],
    *,
    policy: SparseSamplingPolicy | None = None,
) -> SparseSampleManifest:
    """Select at most replacement_cap layer candidates independently per width.

    ``candidates`` are :class:`Candidate` (or their ``to_dict()`` mappings), teacher blocks
    (``source="self"``) included. For each hidden width, separately:

    1. **Eligibility**, checked in this order: teacher blocks are anchors
       (``teacher_anchor``); a candidate without a teacher block at its layer is
       ``missing_teacher``; one that disables a subblock the teacher has active is
       ``no_op``; one with more than two changed axes is ``too_many_axes``; one whose
       content (width, layer, block config) equals the teacher's or another candidate's is
       ``duplicate`` (of equal candidates the one with the smallest ``candidate_id`` is kept).
    2. **Layer order**: the width's layers in spread order -- first, middle, last, then
       farthest-point (ties by ``seed``). A signature's candidates are ranked by it.
    3. **Single-axis signatures**: grouped by axis (axes sorted), values in spread order,
       round-robin across axes; each gets one representative (its best-ranked candidate)
       while the budget (``replacement_cap``) lasts.
    4. **Two-axis signatures**: family = the pair of axes. In each family the first
       ``max_pairwise_per_family`` signatures (value spread order) are allowed, the rest are
       ``pairwise_limit``; allowed ones get a representative, round-robin across families,
       while the budget lasts.
    5. **More layers**: the remaining budget goes, round-robin across the admitted
       signatures (in admission order), to each one's next candidate in layer order.

    Everything eligible and not selected is ``over_cap`` (or ``pairwise_limit``).
    """
    policy = _check_policy(policy)
    cands = _as_candidates(candidates)
    items: list[_Item] = []
    for group in _group_by_width(cands):
        items.extend(_replacement_width(group, policy))
    return _manifest(MODE_REPLACEMENT, policy, items)


def _check_policy(policy: SparseSamplingPolicy | None) -> SparseSamplingPolicy:
    if policy is None:
        return SparseSamplingPolicy()
    if not isinstance(policy, SparseSamplingPolicy):
        raise TypeError(
            f"policy must be a SparseSamplingPolicy or None, got {type(policy).__name__}"
        )
    return policy


def _replacement_width(group: list[Candidate], policy: SparseSamplingPolicy) -> list[_Item]:
    seed = policy.seed
    width = group[0].hidden_width
    teachers = _teachers(group)
    items: list[_Item] = []
    for c in group:
        content = {
            "mode": MODE_REPLACEMENT,
            "hidden_width": c.hidden_width,
            "layer_idx": c.layer_idx,
            "block_config": c.block_config,
        }
        sample_id = stable_hash(content)[:_SAMPLE_ID_HEX]
        record = SparseSampleRecord(
            sample_id=sample_id,
            candidate_id=c.candidate_id,
            layer_idx=c.layer_idx,
            hidden_width=c.hidden_width,
            subblock_kind=BLOCK_KIND,
            subblock_name=BLOCK_KIND,
            changed_axes=c.changed_axes,
            block_config=c.block_config,
            subblock_config=None,
            no_op=any(s.no_op for s in c.subblocks),
        )
        sig, values = _signature(c, c.changed_axes)
        it = _Item(
            record, c, sig, values, canonical_json(content), _tie(seed, sample_id, c.candidate_id)
        )
        teacher = teachers.get(c.layer_idx)
        if c.is_teacher:
            it.reason = REASON_TEACHER_ANCHOR
        elif teacher is None:
            it.reason = REASON_MISSING_TEACHER
        elif _disables_active(c, teacher, (s.name for s in c.subblocks)):
            it.reason = REASON_NO_OP
        elif len(c.changed_axes) > 2:
            it.reason = REASON_TOO_MANY_AXES
        items.append(it)

    seen = {it.content: it for it in items if it.candidate.is_teacher}
    _dedupe(items, seen, lambda it: it.candidate.candidate_id)

    layers = sorted({c.layer_idx for c in group})
    order = _spread_order(layers, lambda i: _tie(seed, "layer", width, layers[i]))
    layer_rank = {layers[i]: r for r, i in enumerate(order)}

    sigs: dict[Signature, list[_Item]] = {}
    for it in items:
        if it.reason == REASON_ELIGIBLE:
            sigs.setdefault(it.signature, []).append(it)
    for lst in sigs.values():
        lst.sort(
            key=lambda it: (layer_rank[it.candidate.layer_idx], it.tie, it.candidate.candidate_id)
        )

    budget = policy.replacement_cap
    admitted: list[Signature] = []
    by_axes = _ordered_signatures(sigs, seed, ["replacement", width])

    def admit(queue: Iterable[Signature]) -> None:
        nonlocal budget
        for sig in queue:
            if budget <= 0:
                return
            sigs[sig][0].reason = "selected"
            admitted.append(sig)
            budget -= 1

    singles = [lst for axes, lst in by_axes.items() if len(axes) == 1]
    admit(_round_robin(singles))
    pairs = []
    for axes, lst in by_axes.items():
        if len(axes) != 2:
            continue
        allowed, over = lst[: policy.max_pairwise_per_family], lst[policy.max_pairwise_per_family :]
        pairs.append(allowed)
        for sig in over:
            for it in sigs[sig]:
                it.reason = REASON_PAIRWISE_LIMIT
    admit(_round_robin(pairs))

    more = [[it for it in sigs[sig] if it.reason == REASON_ELIGIBLE] for sig in admitted]
    for it in _round_robin(more):
        if budget <= 0:
            break
        it.reason = "selected"
        budget -= 1
    for it in items:
        if it.reason == REASON_ELIGIBLE:
            it.reason = REASON_OVER_CAP
    return items


def sample_subblock_configs(
    candidates: Iterable[Candidate | Mapping[str, Any]],
    *,
    policy: SparseSamplingPolicy | None = None,
) -> SparseSampleManifest:
    """Select layer-independent teacher, single-axis, and pairwise subblocks.

    Every subblock of every candidate becomes a record whose ``changed_axes`` are the
    candidate's axes on that subblock. Its family is ``(hidden_width, subblock kind,
    subblock name, teacher subblock config)``, the teacher's subblock of the same name at
    the same (width, layer). Its content -- (width, kind, name, subblock config, no_op,
    teacher subblock config), no layer -- gives its ``sample_id``; identical subblocks at
    different layers therefore count once.

    Eligibility, in order: no teacher block at the layer, or no subblock of that name in it,
    ``missing_teacher``; a subblock disabled where the teacher's is active ``no_op``; more
    than two changed axes ``too_many_axes``; content already kept ``duplicate`` (teacher
    subblocks win, then the smaller layer, then the smaller ``candidate_id``).

    Selection, per family: the teacher's subblock; one record per single-axis signature;
    the first ``max_pairwise_per_family`` two-axis signatures, taken round-robin across axis
    pairs (sorted), values in spread order (the rest ``pairwise_limit``). A signature's
    representative is its record with the smallest (layer, candidate_id); the other records of a
    chosen signature are ``not_selected``. ``replacement_cap`` does not apply here.
    """
    policy = _check_policy(policy)
    cands = _as_candidates(candidates)
    items: list[_Item] = []
    for group in _group_by_width(cands):
        items.extend(_subblock_width(group, policy))
    return _manifest(MODE_SUBBLOCK, policy, items)


def _subblock_width(group: list[Candidate], policy: SparseSamplingPolicy) -> list[_Item]:
    seed = policy.seed
    teachers = _teachers(group)
    items: list[_Item] = []
    family_of: dict[int, tuple[Any, ...]] = {}
    for c in group:
        teacher = teachers.get(c.layer_idx)
        for sub in c.subblocks:
            t_sub = teacher.subblock(sub.name) if teacher is not None else None
            t_data = None if t_sub is None else {"name": t_sub.name, **t_sub.to_dict()}
            axes = tuple(a for a in c.changed_axes if a.partition(".")[0] == sub.name)
            content = {
                "mode": MODE_SUBBLOCK,
                "hidden_width": c.hidden_width,
                "subblock_kind": sub.kind,
                "subblock_name": sub.name,
                "subblock_config": sub.config,
                "no_op": sub.no_op,
                "teacher_subblock": t_data,
            }
            sample_id = stable_hash(content)[:_SAMPLE_ID_HEX]
            record = SparseSampleRecord(
                sample_id=sample_id,
                candidate_id=c.candidate_id,
                layer_idx=c.layer_idx,
                hidden_width=c.hidden_width,
                subblock_kind=sub.kind,
                subblock_name=sub.name,
                changed_axes=axes,
                block_config=c.block_config,
                subblock_config=sub.config,
                no_op=sub.no_op,
            )
            sig, values = _signature(c, axes)
            it = _Item(
                record,
                c,
                sig,
                values,
                canonical_json(content),
                _tie(seed, sample_id, c.candidate_id),
            )
            if t_sub is None:
                it.reason = REASON_MISSING_TEACHER
            elif sub.no_op and not t_sub.no_op:
                it.reason = REASON_NO_OP
            elif len(axes) > 2:
                it.reason = REASON_TOO_MANY_AXES
            family_of[id(it)] = (sub.kind, sub.name, canonical_json(t_data))
            items.append(it)

    def prefer(it: _Item) -> tuple[Any, ...]:
        return (not it.candidate.is_teacher, it.candidate.layer_idx, it.candidate.candidate_id)

    _dedupe(items, {}, prefer)

    families: dict[tuple[Any, ...], list[_Item]] = {}
    for it in items:
        if it.reason == REASON_ELIGIBLE:
            families.setdefault(family_of[id(it)], []).append(it)
    width = group[0].hidden_width
    for fam in sorted(families):
        sigs: dict[Signature, list[_Item]] = {}
        for it in sorted(families[fam], key=prefer):
            sigs.setdefault(it.signature, []).append(it)
        teacher_items = sigs.pop((), [])
        if teacher_items:
            teacher_items[0].reason = "selected"
        by_axes = _ordered_signatures(sigs, seed, ["subblock", width, *fam])
        chosen = [s for axes, lst in by_axes.items() if len(axes) == 1 for s in lst]
        pair_lists = [lst for axes, lst in by_axes.items() if len(axes) == 2]
        pair_order = list(_round_robin(pair_lists))
        chosen += pair_order[: policy.max_pairwise_per_family]
        for sig in pair_order[policy.max_pairwise_per_family :]:
            for it in sigs[sig]:
                it.reason = REASON_PAIRWISE_LIMIT
        for sig in chosen:
            sigs[sig][0].reason = "selected"
    for it in items:
        if it.reason == REASON_ELIGIBLE:
            it.reason = REASON_NOT_SELECTED
    return items
