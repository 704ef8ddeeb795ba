"""Sampling input: subblock configs, candidates and the sampling policy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# --- input: candidates ----------------------------------------------------------------------
from diffract.sampling.base import (
    SOURCE_TEACHER,
    SamplingError,
    canonical_json,
    check_int,
    check_place,
    check_str,
    from_mapping,
    json_copy,
    place_dict,
)


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
        check_str(self.kind, "SubblockConfig.kind")
        check_str(self.name, "SubblockConfig.name")
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
            self, "config", json_copy(dict(self.config), f"config of subblock {self.name!r}")
        )

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "config", "no_op"}`` (the name is the key in a block config)."""
        return {"kind": self.kind, "config": json_copy(self.config, ""), "no_op": self.no_op}

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
        check_place(self, "Candidate")
        check_str(self.source, "Candidate.source")
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
        axes = tuple(sorted({check_str(a, "axis") for a in self.changed_axes}))
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
            **place_dict(self),
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
        return from_mapping(cls, d, "candidate")

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
        check_int(
            self.max_pairwise_per_family, "SparseSamplingPolicy.max_pairwise_per_family", minimum=0
        )
        check_int(self.replacement_cap, "SparseSamplingPolicy.replacement_cap", minimum=1)
        check_int(self.seed, "SparseSamplingPolicy.seed")

    def to_dict(self) -> dict[str, Any]:
        """The policy as canonical JSON-ready data (part of a manifest's identity)."""
        return {
            "max_pairwise_per_family": self.max_pairwise_per_family,
            "replacement_cap": self.replacement_cap,
            "seed": self.seed,
        }
