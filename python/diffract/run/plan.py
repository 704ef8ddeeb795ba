"""What a run has to compute, per level, read from the store without running any kernel.

Reuse is keyed by presence: a value already in the store is never recomputed (erase it to
recompute). The plan says, for each level:

* **param**: per slice, the kernels to run (in dependency order), the stored fields to load
  as their inputs, and how many requested values are reused or not applicable;
* **model**: per model (owner ``@m`` or ``@m[scope]``), the model-level kernels missing;
* **cross**: per pair (a slice and its peer in the reference model, owner ``uid@ref``), the
  cross-model kernels missing.

The cross-model pairing rule lives here once: :func:`cross_pairs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from diffract._errors import UnknownModelError, UnknownOptionError
from diffract._vocab.owners import cross_owner, model_owner
from diffract._vocab.slices import SliceInfo
from diffract.kernels.registry import KernelRegistry
from diffract.kernels.spec import LEVELS, Kernel
from diffract.store import Store

__all__ = [
    "CrossTask",
    "ModelTask",
    "Plan",
    "Planner",
    "SlicePlan",
    "cross_pairs",
    "fields_by_level",
    "make_plan",
    "nothing_to_compare",
]


def cross_pairs(
    slices: Iterable[SliceInfo], reference: str, reference_slices: Iterable[SliceInfo]
) -> list[tuple[SliceInfo, SliceInfo]]:
    """The cross-model pairing rule: each slice of a model other than ``reference`` is paired
    with the slice of the same name in ``reference``; a slice without one is not paired, and
    the reference model is never compared with itself.

    Args:
        slices: the slices of the selection, in order.
        reference: the reference model's id.
        reference_slices: the slices of the reference model (all of them, not only selected).

    Returns:
        ``(slice, peer in the reference)`` pairs, in the order of ``slices``.
    """
    by_name = {s.name: s for s in reference_slices}
    return [(s, by_name[s.name]) for s in slices if s.model_id != reference and s.name in by_name]


def nothing_to_compare(slices: Iterable[SliceInfo], reference: str) -> str:
    """Why a non-empty selection has no cross-model pair against ``reference``."""
    others = sorted({s.model_id for s in slices if s.model_id != reference})
    if not others:
        return (
            f"the selection holds only the reference model {reference!r}, and a "
            "model is not compared with itself; select other models too (or "
            "choose another reference)"
        )
    return (
        f"no slice of {others} has a same-named slice in the reference model "
        f"{reference!r}; cross-model fields pair slices by name"
    )


def fields_by_level(registry: KernelRegistry, fields: Iterable[str]) -> dict[str, list[str]]:
    """``fields`` grouped by the level of their kernel (``"param"``, ``"model"``, ``"cross"``).

    Raises:
        UnknownFieldError: a field no registered kernel produces.
    """
    fields = list(fields)
    return {lvl: [f for f in fields if registry.producer(f).level == lvl] for lvl in LEVELS}


@dataclass(frozen=True)
class SlicePlan:
    """What one slice needs at the parameter level.

    Attributes:
        kernels: the kernels to run, in dependency order (empty: nothing to compute).
        to_load: stored fields read as inputs of those kernels.
        reused: requested values already stored.
        not_applicable: requested values that cannot exist on this slice.
    """

    kernels: list[Kernel]
    to_load: set[str]
    reused: int = 0
    not_applicable: int = 0


@dataclass(frozen=True)
class ModelTask:
    """The model-level kernels missing for one model owner (``@m`` or ``@m[scope]``)."""

    model_id: str
    owner: str
    slices: list[SliceInfo]
    todo: list[Kernel]
    reused: int = 0


@dataclass(frozen=True)
class CrossTask:
    """The cross-model kernels missing for one pair (owner ``uid@ref``). ``mismatched``: the
    two slices differ in dimensions, so nothing missing is applicable."""

    slice: SliceInfo
    ref: SliceInfo
    owner: str
    todo: list[Kernel]
    reused: int = 0
    mismatched: bool = False


@dataclass
class Plan:
    """What a run has to compute (see the module docstring).

    Attributes:
        fields: the fields asked for.
        by_level: those fields per level.
        reference: the reference model of cross-model fields, or None.
        pairs: the cross-model pairs (:func:`cross_pairs`).
        param: slice uid -> its :class:`SlicePlan`, for every slice with something needed.
        work: the slices with kernels to run, by model and position.
        models: the model-level tasks.
        cross: the cross-level tasks.
        notes: what the run cannot do that is not a failure (warned about).
    """

    fields: tuple[str, ...]
    by_level: dict[str, list[str]]
    reference: str | None = None
    pairs: list[tuple[SliceInfo, SliceInfo]] = field(default_factory=list)
    param: dict[str, SlicePlan] = field(default_factory=dict)
    work: list[SliceInfo] = field(default_factory=list)
    models: list[ModelTask] = field(default_factory=list)
    cross: list[CrossTask] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def explicit(self) -> set[str]:
        """The fields asked for, as a set."""
        return set(self.fields)

    def missing(self) -> dict[str, dict[str, list[str]]]:
        """What will be computed, per level: owner key -> the fields it gets (stored
        intermediates included; transient ones only when asked for)."""
        explicit = self.explicit

        def outs(kernels: Iterable[Kernel]) -> list[str]:
            return sorted(
                o for k in kernels for o in k.outputs if o not in k.transient or o in explicit
            )

        return {
            "param": {uid: outs(p.kernels) for uid, p in self.param.items() if p.kernels},
            "model": {t.owner: outs(t.todo) for t in self.models if t.todo},
            "cross": {t.owner: outs(t.todo) for t in self.cross if t.todo and not t.mismatched},
        }


class Planner:
    """Per-slice planning against a store, with the caches a run shares."""

    def __init__(self, store: Store, registry: KernelRegistry) -> None:
        self.store = store
        self.registry = registry
        self._applicable: dict[tuple[str, int], bool] = {}
        self._closures: dict[frozenset[str], list[Kernel]] = {}

    def closure(self, wanted: frozenset[str]) -> list[Kernel]:
        """``registry.closure(wanted)``, once per distinct set of fields in a run."""
        hit = self._closures.get(wanted)
        if hit is None:
            hit = self._closures[wanted] = self.registry.closure(wanted)
        return hit

    def applicable(self, f: str, ndim: int) -> bool:
        """Whether ``f`` can exist on a slice of ``ndim`` dims (min_ndim of the whole chain)."""
        key = (f, ndim)
        hit = self._applicable.get(key)
        if hit is None:
            k = self.registry.producer(f)
            hit = ndim >= k.min_ndim and all(
                self.applicable(d, ndim)
                for d in k.field_inputs()
                if self.registry.producer(d).level == "param"
            )
            self._applicable[key] = hit
        return hit

    def slice_plan(self, s: SliceInfo, wanted: set[str], explicit: set[str]) -> SlicePlan:
        """The kernels to run for ``wanted`` fields of one slice, the fields to load, and
        the counts of requested (``explicit``) values reused and not applicable."""
        store, uid = self.store, s.uid
        known: dict[str, bool] = {}

        def stored(f: str) -> bool:  # one lookup per field (fields_of scans every value)
            hit = known.get(f)
            if hit is None:
                hit = known[f] = store.has((uid, f))
            return hit

        to_run: dict[str, Kernel] = {}
        to_load: set[str] = set()
        ndim = s.effective_ndim
        skipped = {f for f in wanted if not self.applicable(f, ndim)}
        wanted = wanted - skipped

        def need(f: str) -> None:
            if stored(f):
                to_load.add(f)
                return
            k = self.registry.producer(f)
            if k.name in to_run:
                return
            for dep in k.field_inputs():
                need(dep)
            to_run[k.name] = k

        reused = 0
        for f in sorted(wanted):
            if stored(f):
                reused += 1
                continue
            need(f)
        order = [k for k in self.closure(frozenset(wanted)) if k.name in to_run] if wanted else []
        return SlicePlan(order, to_load, reused, sum(1 for f in skipped if f in explicit))

    def param_fields(self, by_level: Mapping[str, list[str]]) -> set[str]:
        """Parameter-level fields a run needs: those asked for, and the stored (non-transient)
        parameter-level inputs of its model and cross kernels."""
        out = set(by_level["param"])
        for lvl in ("model", "cross"):
            for f in by_level[lvl]:
                for k in self.registry.closure([f]):
                    if k.level == "param":
                        out.update(o for o in k.outputs if o not in k.transient)
        return out

    def model_tasks(
        self,
        fields: list[str],
        slices: list[SliceInfo],
        model_slices: Mapping[str, list[SliceInfo]],
        scope_key: str | None,
    ) -> list[ModelTask]:
        """One task per model of ``slices``: its owner (the whole model when every slice of
        it is selected) and the model-level kernels of ``fields`` not all stored there."""
        by_model: dict[str, list[SliceInfo]] = {}
        for s in slices:
            by_model.setdefault(s.model_id, []).append(s)
        kernels = [k for k in self.registry.closure(fields) if k.level == "model"]
        tasks = []
        for model_id, ms in sorted(by_model.items()):
            full = len(ms) == len(model_slices.get(model_id, []))
            owner = model_owner(model_id, None if full else scope_key)
            done = [k for k in kernels if all(self.store.has((owner, o)) for o in k.outputs)]
            tasks.append(
                ModelTask(
                    model_id,
                    owner,
                    sorted(ms, key=lambda s: s.index),
                    [k for k in kernels if k not in done],
                    sum(1 for k in done for o in k.outputs if o in fields),
                )
            )
        return tasks

    def cross_tasks(
        self, fields: list[str], pairs: list[tuple[SliceInfo, SliceInfo]], reference: str
    ) -> list[CrossTask]:
        """One task per pair: the cross-model kernels of ``fields`` not all stored for it."""
        kernels = [k for k in self.registry.closure(fields) if k.level == "cross"]
        tasks = []
        for s, ref in pairs:
            owner = cross_owner(s.uid, reference)
            todo = [k for k in kernels if not all(self.store.has((owner, o)) for o in k.outputs)]
            reused = sum(1 for k in kernels if k not in todo for o in k.outputs if o in fields)
            mismatched = bool(todo) and s.effective_ndim != ref.effective_ndim
            tasks.append(CrossTask(s, ref, owner, todo, reused, mismatched))
        return tasks


def make_plan(
    store: Store,
    registry: KernelRegistry,
    fields: Iterable[str],
    slices: list[SliceInfo],
    *,
    reference: str | None = None,
    scope_key: str | None = None,
    model_slices: Mapping[str, list[SliceInfo]] | None = None,
    planner: Planner | None = None,
) -> Plan:
    """What a run of ``fields`` over ``slices`` has to compute, read from ``store``.

    Args:
        store: where stored values are looked up (only read).
        registry: the kernels.
        fields: the fields asked for.
        slices: the selected slices.
        reference: the reference model of cross-model fields.
        scope_key: the key of the selection (for model owners of partly selected models).
        model_slices: model id -> all its slices; default: ``slices`` grouped by model.
        planner: a :class:`Planner` to share caches with the run.

    Returns:
        The :class:`Plan`.

    Raises:
        UnknownFieldError: a field no registered kernel produces.
        UnknownOptionError: cross-model fields without a reference.
        UnknownModelError: a reference that is not in the store.
    """
    fields = tuple(dict.fromkeys(fields))
    planner = planner or Planner(store, registry)
    by_level = fields_by_level(registry, fields)
    plan = Plan(fields, by_level, reference)
    if by_level["cross"]:
        _pair(plan, store, slices, reference)
    explicit = plan.explicit
    param_fields = planner.param_fields(by_level)
    targets = {s.uid: s for s in slices}
    for _, ref in plan.pairs:
        targets.setdefault(ref.uid, ref)
    for uid, s in targets.items():
        if not param_fields:
            continue
        p = planner.slice_plan(s, set(param_fields), explicit)
        plan.param[uid] = p
        if p.kernels:
            plan.work.append(s)
    plan.work.sort(key=lambda s: (s.model_id, s.index))
    if by_level["model"]:
        if model_slices is None:
            model_slices = {}
            for s in slices:
                model_slices.setdefault(s.model_id, []).append(s)
        plan.models = planner.model_tasks(by_level["model"], slices, model_slices, scope_key)
    if by_level["cross"] and reference:
        plan.cross = planner.cross_tasks(by_level["cross"], plan.pairs, reference)
    return plan


def _pair(plan: Plan, store: Store, slices: list[SliceInfo], reference: str | None) -> None:
    """Check the reference of cross-model fields and pair the slices with it."""
    cross = plan.by_level["cross"]
    if not reference:
        raise UnknownOptionError(
            f"cross-model field(s) {cross} need a reference model: apply(..., reference='<model_id>')"
        )
    if not store.has_model(reference):
        raise UnknownModelError(
            f"reference model {reference!r} is not in the store; stored: {sorted(store.models())}"
        )
    plan.pairs = cross_pairs(slices, reference, store.slices(reference))
    if not plan.pairs and slices:
        why = nothing_to_compare(slices, reference)
        plan.notes.append(f"cross-model field(s) {cross}: nothing computed: {why}")
    elif left := unpaired(slices, reference, plan.pairs):
        shown = ", ".join(f"{s.model_id}:{s.name}" for s in left[:5])
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        plan.notes.append(
            f"cross-model field(s) {cross}: not computed for {len(left)} slice(s) that no "
            f"other model of the selection has a same-named slice for (reference model "
            f"{reference!r}): {shown}{more}"
        )


def unpaired(
    slices: Iterable[SliceInfo], reference: str, pairs: list[tuple[SliceInfo, SliceInfo]]
) -> list[SliceInfo]:
    """The slices of a selection that no cross-model pair holds: a slice of another model
    without a same-named slice in ``reference``, and a selected slice of ``reference`` whose
    name no selected slice of another model has."""
    paired = {s.uid for pair in pairs for s in pair}
    return [s for s in slices if s.uid not in paired]
