"""Sparse sampling: the deterministic selection of replacement candidates and subblock configs.

Standard library only. The records these functions return are in :mod:`diffract.sampling.records`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diffract.sampling.base import (
    BLOCK_KIND,
    MODE_REPLACEMENT,
    MODE_SUBBLOCK,
    REASON_DUPLICATE,
    REASON_ELIGIBLE,
    REASON_MISSING_TEACHER,
    REASON_NO_OP,
    REASON_NOT_SELECTED,
    REASON_OVER_CAP,
    REASON_PAIRWISE_LIMIT,
    REASON_TEACHER_ANCHOR,
    REASON_TOO_MANY_AXES,
    SAMPLE_ID_HEX,
    SamplingError,
    canonical_json,
    stable_hash,
)
from diffract.sampling.candidates import (
    Candidate,
    SparseSamplingPolicy,
    SubblockConfig,
    as_candidates,
)
from diffract.sampling.records import SparseSampleManifest, SparseSampleRecord, width_key

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
    return [groups[w] for w in sorted(groups, key=width_key)]


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


def _sample(
    mode: str,
    candidates: Iterable[Candidate | Mapping[str, Any]],
    policy: SparseSamplingPolicy | None,
    per_width: Callable[[list[Candidate], SparseSamplingPolicy], list[_Item]],
) -> SparseSampleManifest:
    """The manifest of a mode: ``per_width`` decides the candidates of each hidden width."""
    policy = _check_policy(policy)
    items: list[_Item] = []
    for group in _group_by_width(as_candidates(candidates)):
        items.extend(per_width(group, policy))
    return _manifest(mode, policy, items)


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
    return _sample(MODE_REPLACEMENT, candidates, policy, _replacement_width)


def _check_policy(policy: SparseSamplingPolicy | None) -> SparseSamplingPolicy:
    if policy is None:
        return SparseSamplingPolicy()
    if not isinstance(policy, SparseSamplingPolicy):
        raise TypeError(
            f"policy must be a SparseSamplingPolicy or None, got {type(policy).__name__}"
        )
    return policy


def _new_item(
    c: Candidate,
    content: dict[str, Any],
    axes: tuple[str, ...],
    seed: int,
    *,
    kind: str,
    name: str,
    config: dict[str, Any] | None,
    no_op: bool,
) -> _Item:
    """The undecided item of a record of ``c`` (its subblock ``kind``/``name``, or the whole
    block): its ``sample_id`` hashes ``content``, its signature is ``c``'s values on ``axes``."""
    sample_id = stable_hash(content)[:SAMPLE_ID_HEX]
    record = SparseSampleRecord(
        sample_id=sample_id,
        candidate_id=c.candidate_id,
        layer_idx=c.layer_idx,
        hidden_width=c.hidden_width,
        subblock_kind=kind,
        subblock_name=name,
        changed_axes=axes,
        block_config=c.block_config,
        subblock_config=config,
        no_op=no_op,
    )
    sig, values = _signature(c, axes)
    return _Item(
        record, c, sig, values, canonical_json(content), _tie(seed, sample_id, c.candidate_id)
    )


def _replacement_item(c: Candidate, seed: int, teachers: dict[int, Candidate]) -> _Item:
    """The record of one whole-layer candidate, with the reason it is not eligible (if any)."""
    content = {
        "mode": MODE_REPLACEMENT,
        "hidden_width": c.hidden_width,
        "layer_idx": c.layer_idx,
        "block_config": c.block_config,
    }
    it = _new_item(
        c,
        content,
        c.changed_axes,
        seed,
        kind=BLOCK_KIND,
        name=BLOCK_KIND,
        config=None,
        no_op=any(s.no_op for s in c.subblocks),
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
    return it


def _eligible_by_signature(
    items: list[_Item], group: list[Candidate], seed: int, width: int | None
) -> dict[Signature, list[_Item]]:
    """Eligible items grouped by signature, each group in the seeded layer-spread order."""
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
    return sigs


def _admit_replacements(
    items: list[_Item],
    sigs: dict[Signature, list[_Item]],
    policy: SparseSamplingPolicy,
    width: int | None,
) -> None:
    """Select within the cap: single-axis signatures first, then pairs (at most
    ``max_pairwise_per_family`` per pair of axes), then more layers of admitted signatures;
    every eligible item left over is marked over the cap."""
    budget = policy.replacement_cap
    admitted: list[Signature] = []
    by_axes = _ordered_signatures(sigs, policy.seed, ["replacement", width])

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


def _replacement_width(group: list[Candidate], policy: SparseSamplingPolicy) -> list[_Item]:
    """The items of one hidden width in replacement mode, each with its reason."""
    teachers = _teachers(group)
    items = [_replacement_item(c, policy.seed, teachers) for c in group]
    seen = {it.content: it for it in items if it.candidate.is_teacher}
    _dedupe(items, seen, lambda it: it.candidate.candidate_id)
    sigs = _eligible_by_signature(items, group, policy.seed, group[0].hidden_width)
    _admit_replacements(items, sigs, policy, group[0].hidden_width)
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
    return _sample(MODE_SUBBLOCK, candidates, policy, _subblock_width)


def _subblock_item(
    c: Candidate, sub: SubblockConfig, teacher: Candidate | None, seed: int
) -> tuple[_Item, tuple[Any, ...]]:
    """The record of one subblock of a candidate, with the reason it is not eligible (if any),
    and the family it is counted in."""
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
    it = _new_item(
        c, content, axes, seed, kind=sub.kind, name=sub.name, config=sub.config, no_op=sub.no_op
    )
    if t_sub is None:
        it.reason = REASON_MISSING_TEACHER
    elif sub.no_op and not t_sub.no_op:
        it.reason = REASON_NO_OP
    elif len(axes) > 2:
        it.reason = REASON_TOO_MANY_AXES
    return it, (sub.kind, sub.name, canonical_json(t_data))


def _subblock_prefer(it: _Item) -> tuple[Any, ...]:
    return (not it.candidate.is_teacher, it.candidate.layer_idx, it.candidate.candidate_id)


def _select_in_family(
    fam: tuple[Any, ...], members: list[_Item], policy: SparseSamplingPolicy, width: int | None
) -> None:
    """Select the teacher's config, every single-axis signature and at most
    ``max_pairwise_per_family`` pairs of one family; mark the pairs over that limit."""
    sigs: dict[Signature, list[_Item]] = {}
    for it in sorted(members, key=_subblock_prefer):
        sigs.setdefault(it.signature, []).append(it)
    teacher_items = sigs.pop((), [])
    if teacher_items:
        teacher_items[0].reason = "selected"
    by_axes = _ordered_signatures(sigs, policy.seed, ["subblock", width, *fam])
    chosen = [s for axes, lst in by_axes.items() if len(axes) == 1 for s in lst]
    pair_lists = [lst for axes, lst in by_axes.items() if len(axes) == 2]
    pair_order = list(_round_robin(pair_lists))
    chosen += pair_order[: policy.max_pairwise_per_family]
    for sig in pair_order[policy.max_pairwise_per_family :]:
        for it in sigs[sig]:
            it.reason = REASON_PAIRWISE_LIMIT
    for sig in chosen:
        sigs[sig][0].reason = "selected"


def _subblock_width(group: list[Candidate], policy: SparseSamplingPolicy) -> list[_Item]:
    """The items of one hidden width in subblock mode, each with its reason."""
    teachers = _teachers(group)
    items: list[_Item] = []
    family_of: dict[int, tuple[Any, ...]] = {}
    for c in group:
        for sub in c.subblocks:
            it, family = _subblock_item(c, sub, teachers.get(c.layer_idx), policy.seed)
            family_of[id(it)] = family
            items.append(it)
    _dedupe(items, {}, _subblock_prefer)
    families: dict[tuple[Any, ...], list[_Item]] = {}
    for it in items:
        if it.reason == REASON_ELIGIBLE:
            families.setdefault(family_of[id(it)], []).append(it)
    for fam in sorted(families):
        _select_in_family(fam, families[fam], policy, group[0].hidden_width)
    for it in items:
        if it.reason == REASON_ELIGIBLE:
            it.reason = REASON_NOT_SELECTED
    return items
