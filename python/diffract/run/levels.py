"""The three steps of a run, each over what its level of the plan says is missing: parameter
level (chunk by chunk, here or on an executor), model level, cross-model level."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from diffract._vocab.arrays import storable_error
from diffract._vocab.slices import SliceInfo
from diffract.kernels.spec import Kernel
from diffract.run.chunks import (
    LocalChunks,
    RemoteChunks,
    compute_here,
    make_chunks,
    run_chunks,
)
from diffract.run.plan import CrossTask, ModelTask, Plan, Planner
from diffract.run.report import Failure
from diffract.run.state import (
    NOT_APPLICABLE,
    Failed,
    NotApplicable,
    RunState,
    normalise,
    short_error,
)
from diffract.run.weights import as_float_array, canonical_layout
from diffract.store import Batch

#: inputs of cross-model kernels that are not fields
CROSS_SPECIAL = frozenset({"slice_info", "weights", "ref_weights", "ref_slice_info"})


# --- parameter level ----------------------------------------------------------------------
def run_param_level(state: RunState, plan: Plan, executor: Any = None) -> None:
    """Compute the missing parameter-level values, chunk by chunk: in this process (with
    ``state.workers`` threads), or as tasks of ``executor`` (a process pool or Dask), which
    then get chunks sized so that all those in flight together fit the memory budget. This
    process stays the single writer: it reads each chunk's inputs and commits in order."""
    report = state.report
    for p in plan.param.values():
        report.reused += p.reused
        report.not_applicable += p.not_applicable
    work, plans, explicit = plan.work, plan.param, plan.explicit
    if executor is None:
        chunks = make_chunks(work, state.memory_budget)
        run_chunks(state, chunks, LocalChunks(state, plans), plans, explicit)
        return
    if not work:  # nothing to run: no pool to start
        state.emit("start", 0, 0, 0, 0)
        state.emit("done", 0, 0, 0, 0)
        return
    check = getattr(executor, "check_kernels", None)
    if check is not None:  # a kernel worker processes cannot receive: one clear error
        check({k.name: k for s in work for k in plans[s.uid].kernels}.values())
    opened = executor.open(state.workers)
    try:
        per_chunk = max(1, state.memory_budget // opened.slots)
        chunks = make_chunks(work, per_chunk, min_chunks=opened.slots)
    except BaseException:
        opened.close()
        raise
    run_chunks(state, chunks, RemoteChunks(state, plans, opened), plans, explicit)


# --- owner-level kernels (model and cross) ------------------------------------------------
def call_owner_kernel(
    state: RunState,
    k: Kernel,
    args: list[Any],
    owner: str,
    fields: list[str],
    computed: dict[str, Any],
    batch: Batch,
    where: Failure,
) -> str | None:
    """Call a model- or cross-level kernel for one owner; keep its outputs in ``computed``,
    persist the non-transient (or requested) ones, record a failure if it raises (and
    return its message)."""
    try:
        state.count({k.name: 1})
        out = k.split_outputs(k.func(*args, **state.opts(k)))
    except Exception as exc:
        state.record_failure(k, fields, replace(where, error=short_error(exc)))
        return short_error(exc)
    for o, v in out.items():
        computed[o] = v
        if o not in k.transient or o in fields:
            # split_outputs checked the persisted outputs; a transient one asked for by
            # name is checked here
            problem = storable_error(v) if o in k.transient else None
            if problem is not None:
                error = f"KernelDefinitionError: {k.unstorable_message(o, problem)}"
                state.record_failure(k, [o], replace(where, error=error))
                continue
            batch.fields[(owner, o)] = normalise(v)
    return None


def _stored(state: RunState, owner: str) -> dict[str, Any]:
    return {f: state.store.get((owner, f)) for f in state.store.fields_of(owner)}


# --- model level --------------------------------------------------------------------------
def run_model_level(state: RunState, plan: Plan) -> None:
    """Run the missing model-level kernels of each model; models done before a cancel are
    kept (one commit at the end)."""
    fields = plan.by_level["model"]
    batch = Batch()
    for task in plan.models:
        if state.cancelled:  # models done so far are kept
            break
        state.report.reused += task.reused
        computed = _stored(state, task.owner)
        for k in task.todo:
            where = Failure(task.model_id, "", task.owner, "", "")
            try:
                args = _model_args(state, k, task, computed)
            except Exception as exc:
                state.record_failure(k, fields, replace(where, error=short_error(exc)))
                continue
            call_owner_kernel(state, k, args, task.owner, fields, computed, batch, where)
    state.store.commit(batch)
    state.report.computed += sum(1 for (_, o) in batch.fields if o in fields)


def _model_args(state: RunState, k: Kernel, task: ModelTask, computed: dict[str, Any]) -> list:
    """The arguments of a model-level kernel: per-parameter inputs as lists over the slices
    that have all of them stored, model-level inputs from ``computed``."""
    registry, store = state.registry, state.store
    per_param = [i for i in k.inputs if i != "slices" and registry.producer(i).level == "param"]
    use = [s for s in task.slices if all(store.has((s.uid, i)) for i in per_param)]
    args: list[Any] = []
    for inp in k.inputs:
        if inp == "slices":
            args.append(use)
        elif registry.producer(inp).level == "param":
            args.append([store.get((s.uid, inp)) for s in use])
        else:
            args.append(computed[inp])
    if not use and per_param:
        raise ValueError(f"no slice of the model has {per_param} (not applicable or failed)")
    return args


# --- cross-model level --------------------------------------------------------------------
def param_values(
    state: RunState, planner: Planner, s: SliceInfo, needed: set[str]
) -> dict[str, Any]:
    """Per-parameter ``needed`` values of one slice: stored ones loaded, missing ones
    (transient intermediates included) computed in memory. A value that cannot be made
    is a marker (``NOT_APPLICABLE`` or ``Failed``), so each kernel using it can be
    skipped or failed on its own."""
    out: dict[str, Any] = {}
    wanted: set[str] = set()
    for f in needed:
        if planner.applicable(f, s.effective_ndim):
            wanted.add(f)
        else:
            out[f] = NOT_APPLICABLE
    if not wanted:
        return out
    p = planner.slice_plan(s, set(wanted), set(wanted))
    if not p.kernels:
        for f in wanted:
            try:
                out[f] = state.store.get((s.uid, f))
            except Exception as exc:
                out[f] = Failed(short_error(exc))
        return out
    # stored values asked for are counted as reused by the plan, not loaded: load them
    produced = {o for k in p.kernels for o in k.outputs}
    stored = {f for f in wanted if f not in produced and state.store.has((s.uid, f))}
    try:
        vals = compute_here(state, [s], {s.uid: replace(p, to_load=p.to_load | stored)})[s.uid]
    except Exception as exc:  # a stored input that cannot be read
        return {**out, **{f: Failed(short_error(exc)) for f in wanted}}
    for f in wanted:
        out[f] = vals.get(f, Failed(f"{f!r} was not computed"))
    return out


def _param_inputs(state: RunState, k: Kernel) -> list[tuple[str, str, bool]]:
    """(input name, param field, from the reference) for each param-level input of ``k``."""
    res = []
    for i in k.inputs:
        if i in CROSS_SPECIAL:
            continue
        theirs = i.startswith("ref_")
        base = i[4:] if theirs else i
        if state.registry.producer(base).level == "param":
            res.append((i, base, theirs))
    return res


def run_cross_level(state: RunState, planner: Planner, plan: Plan) -> None:
    """Run the missing cross-model kernels of each pair; pairs done before a cancel are
    kept (one commit at the end)."""
    fields = plan.by_level["cross"]
    report = state.report
    batch = Batch()
    inputs_of = {k.name: _param_inputs(state, k) for t in plan.cross for k in t.todo}
    for task in plan.cross:
        if state.cancelled:  # slices done so far are kept
            break
        report.reused += task.reused
        if not task.todo:
            continue
        if task.mismatched:
            report.not_applicable += sum(1 for k in task.todo for o in k.outputs if o in fields)
            continue
        _run_pair(state, planner, task, fields, inputs_of, batch)
    state.store.commit(batch)
    report.computed += sum(1 for (_, o) in batch.fields if o in fields)


def _run_pair(
    state: RunState,
    planner: Planner,
    task: CrossTask,
    fields: list[str],
    inputs_of: dict[str, list[tuple[str, str, bool]]],
    batch: Batch,
) -> None:
    """The missing cross-model kernels of one pair, in dependency order."""
    own_needed = {b for k in task.todo for (_, b, theirs) in inputs_of[k.name] if not theirs}
    ref_needed = {b for k in task.todo for (_, b, theirs) in inputs_of[k.name] if theirs}
    own = param_values(state, planner, task.slice, own_needed) if own_needed else {}
    theirs = param_values(state, planner, task.ref, ref_needed) if ref_needed else {}
    computed = _stored(state, task.owner)
    #: outputs of this pair's cross kernels that could not be made, and why
    unmade: dict[str, Failed | NotApplicable] = {}
    s = task.slice
    for k in task.todo:
        where = Failure(s.model_id, s.name, task.owner, "", "")
        blocked = _blocked(k, task, inputs_of[k.name], own, theirs, computed, unmade)
        if isinstance(blocked, NotApplicable):
            state.report.not_applicable += sum(1 for o in k.outputs if o in fields)
        elif isinstance(blocked, Failed):
            state.record_failure(k, fields, replace(where, error=blocked.message))
        else:
            try:
                args = _cross_args(state, k, task, own, theirs, computed)
            except Exception as exc:
                blocked = Failed(short_error(exc))
                state.record_failure(k, fields, replace(where, error=blocked.message))
            else:
                error = call_owner_kernel(
                    state, k, args, task.owner, fields, computed, batch, where
                )
                blocked = None if error is None else Failed(error)
        if blocked is not None:
            unmade.update(dict.fromkeys(k.outputs, blocked))


def _blocked(
    k: Kernel,
    task: CrossTask,
    param_inputs: list[tuple[str, str, bool]],
    own: dict[str, Any],
    theirs: dict[str, Any],
    computed: dict[str, Any],
    unmade: dict[str, Failed | NotApplicable],
) -> Failed | NotApplicable | None:
    """Why kernel ``k`` cannot run on this pair (an input not applicable or failed), or None.
    Inputs are checked per kernel: a failed input fails only the kernels using it."""
    if task.slice.effective_ndim < k.min_ndim:
        return NOT_APPLICABLE
    for name, base, from_ref in param_inputs:
        v = (theirs if from_ref else own)[base]
        if isinstance(v, NotApplicable):
            return v
        if isinstance(v, Failed):
            side = f" (of the reference {task.ref.model_id}:{task.ref.name})" if from_ref else ""
            return Failed(f"LookupError: input {name!r}{side} failed: {v.message}")
    params = {n for n, _, _ in param_inputs}
    for i in k.inputs:  # outputs of other cross kernels of this pair
        if i in params or i in CROSS_SPECIAL or i in computed:
            continue
        v = unmade.get(i)
        if isinstance(v, NotApplicable):
            return v
        why = v.message if isinstance(v, Failed) else "it was not computed"
        return Failed(f"LookupError: input {i!r} failed: {why}")
    return None


def _cross_args(
    state: RunState,
    k: Kernel,
    task: CrossTask,
    own: dict[str, Any],
    theirs: dict[str, Any],
    computed: dict[str, Any],
) -> list[Any]:
    """The arguments of a cross-model kernel for one pair."""
    s, ref, store = task.slice, task.ref, state.store
    args: list[Any] = []
    for inp in k.inputs:
        if inp == "slice_info":
            args.append(s)
        elif inp == "ref_slice_info":
            args.append(ref)
        elif inp == "weights":
            args.append(canonical_layout(as_float_array(store.weights(s.uid)), s))
        elif inp == "ref_weights":
            args.append(canonical_layout(as_float_array(store.weights(ref.uid)), ref))
        elif inp.startswith("ref_") and inp[4:] in theirs:
            args.append(theirs[inp[4:]])
        elif inp in own:
            args.append(own[inp])
        else:  # an output of another cross kernel
            args.append(computed[inp])
    return args
