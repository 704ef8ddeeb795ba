"""Planning without kernels: what a run would compute, per level, read from the store alone;
and the cross-model pairing rule."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session, UnknownModelError, UnknownOptionError
from diffract._vocab.owners import cross_owner, model_owner
from diffract.kernels import KernelRegistry, make_kernel
from diffract.run.plan import cross_pairs, make_plan, nothing_to_compare
from diffract.store import Batch


def _never(*args, **kwargs):
    raise AssertionError("planning must not run a kernel")


def _kernel(name, inputs, level="param", **kw):
    """A kernel named ``name`` with positional ``inputs`` whose body fails if called."""
    ns: dict = {"_never": _never}
    exec(f"def {name}({', '.join(inputs)}):\n    return _never()", ns)
    return make_kernel(ns[name], outputs=name, level=level, **kw)


@pytest.fixture
def registry():
    return KernelRegistry(
        [
            _kernel("a", ["weights"]),
            _kernel("b", ["a"]),
            _kernel("mat", ["weights"], min_ndim=2),
            _kernel("tmp", ["weights"], transient=("tmp",)),
            _kernel("uses_tmp", ["tmp"]),
            _kernel("model_b", ["b"], level="model"),
            _kernel("drift", ["b", "ref_b"], level="cross"),
        ]
    )


def _weights(extra: bool = False):
    w = {"l1.weight": np.ones((4, 3)), "l1.bias": np.ones(4), "l2.weight": np.ones((2, 4))}
    if extra:
        w["head.weight"] = np.ones((3, 2))
    return w


@pytest.fixture
def session(registry):
    s = Session(profile="ram", registry=registry)
    s.models.add(_weights(), model_id="base")
    s.models.add(_weights(extra=True), model_id="tuned")
    return s


def _by_name(session, model_id):
    return {sl.name: sl for sl in session.models.slices() if sl.model_id == model_id}


def _plan(session, *fields, slices=None, **kw):
    slices = session.models.slices() if slices is None else slices
    return make_plan(session.store, session.registry, fields, slices, **kw)


def test_param_plan_names_the_kernels_and_the_stored_inputs(session):
    base = _by_name(session, "base")
    w1 = base["l1.weight"]
    session.store.commit(Batch(fields={(w1.uid, "a"): 1.0}))
    plan = _plan(session, "b", slices=list(base.values()))
    p = plan.param[w1.uid]
    assert [k.name for k in p.kernels] == ["b"] and p.to_load == {"a"}
    other = plan.param[base["l2.weight"].uid]
    assert [k.name for k in other.kernels] == ["a", "b"] and other.to_load == set()
    missing = plan.missing()
    assert missing["param"][w1.uid] == ["b"]
    assert missing["param"][base["l2.weight"].uid] == ["a", "b"]
    assert missing["model"] == {} and missing["cross"] == {}


def test_stored_values_are_reused_and_slices_with_nothing_missing_are_not_work(session):
    base = _by_name(session, "base")
    session.store.commit(Batch(fields={(s.uid, "a"): 1.0 for s in base.values()}))
    plan = _plan(session, "a", slices=list(base.values()))
    assert plan.work == [] and plan.missing()["param"] == {}
    assert sum(p.reused for p in plan.param.values()) == 3


def test_fields_that_cannot_exist_on_a_slice_are_not_applicable(session):
    base = _by_name(session, "base")
    plan = _plan(session, "mat", slices=list(base.values()))
    bias = plan.param[base["l1.bias"].uid]
    assert bias.kernels == [] and bias.not_applicable == 1
    assert [s.name for s in plan.work] == ["l1.weight", "l2.weight"]


def test_transient_intermediates_run_but_are_not_listed_as_stored(session):
    base = _by_name(session, "base")
    plan = _plan(session, "uses_tmp", slices=[base["l1.weight"]])
    p = plan.param[base["l1.weight"].uid]
    assert [k.name for k in p.kernels] == ["tmp", "uses_tmp"]
    assert plan.missing()["param"][base["l1.weight"].uid] == ["uses_tmp"]
    asked = _plan(session, "tmp", slices=[base["l1.weight"]])
    assert asked.missing()["param"][base["l1.weight"].uid] == ["tmp"]


def test_model_plan_per_owner_and_its_param_inputs(session):
    slices = session.models.slices()
    plan = _plan(session, "model_b")
    assert {t.owner for t in plan.models} == {model_owner("base"), model_owner("tuned")}
    assert plan.missing()["model"] == {
        model_owner("base"): ["model_b"],
        model_owner("tuned"): ["model_b"],
    }
    # the model kernel's per-parameter inputs are planned at the parameter level
    assert all("b" in fields for fields in plan.missing()["param"].values())
    assert len(plan.missing()["param"]) == len(slices)
    session.store.commit(Batch(fields={(model_owner("base"), "model_b"): 2.0}))
    again = _plan(session, "model_b")
    base_task = next(t for t in again.models if t.model_id == "base")
    assert base_task.todo == [] and base_task.reused == 1
    assert list(again.missing()["model"]) == [model_owner("tuned")]


def test_a_partly_selected_model_is_owned_by_its_scope(session):
    base = _by_name(session, "base")
    model_slices = {"base": list(base.values())}
    part = [base["l1.weight"]]
    plan = _plan(session, "model_b", slices=part, scope_key="k1", model_slices=model_slices)
    assert [t.owner for t in plan.models] == [model_owner("base", "k1")]
    whole = _plan(
        session, "model_b", slices=list(base.values()), scope_key="k1", model_slices=model_slices
    )
    assert [t.owner for t in whole.models] == [model_owner("base")]


def test_cross_pairs_by_name_never_the_reference_with_itself(session):
    base, tuned = _by_name(session, "base"), _by_name(session, "tuned")
    slices = session.models.slices()
    pairs = cross_pairs(slices, "base", base.values())
    assert [(s.model_id, s.name, r.model_id, r.name) for s, r in pairs] == [
        ("tuned", s.name, "base", s.name)
        for s in slices
        if s.model_id == "tuned" and s.name != "head.weight"
    ]
    assert "head.weight" not in {s.name for s, _ in pairs}  # no peer in the reference
    # the other way round: tuned's head has no counterpart to compare with in base either
    back = cross_pairs(slices, "tuned", tuned.values())
    assert {s.model_id for s, _ in back} == {"base"} and len(back) == 3
    assert cross_pairs(list(base.values()), "base", base.values()) == []


def test_nothing_to_compare_says_why():
    class S:
        def __init__(self, model_id):
            self.model_id = model_id

    assert "only the reference model 'base'" in nothing_to_compare([S("base")], "base")
    assert "no slice of ['x'] has a same-named slice" in nothing_to_compare([S("x")], "base")


def test_cross_plan_owners_and_reference_inputs(session):
    base, tuned = _by_name(session, "base"), _by_name(session, "tuned")
    plan = _plan(session, "drift", slices=list(tuned.values()), reference="base")
    owners = {cross_owner(tuned[n].uid, "base") for n in ("l1.weight", "l1.bias", "l2.weight")}
    assert set(plan.missing()["cross"]) == owners
    # the reference slices are planned at the parameter level too (their ``b`` is an input)
    assert {s.uid for s in base.values()} <= set(plan.missing()["param"])
    stored = cross_owner(tuned["l1.weight"].uid, "base")
    session.store.commit(Batch(fields={(stored, "drift"): 0.5}))
    again = _plan(session, "drift", slices=list(tuned.values()), reference="base")
    assert set(again.missing()["cross"]) == owners - {stored}
    assert sum(t.reused for t in again.cross) == 1


def test_cross_plan_of_the_reference_alone_has_a_note(session):
    base = _by_name(session, "base")
    plan = _plan(session, "drift", slices=list(base.values()), reference="base")
    assert plan.pairs == [] and plan.cross == []
    assert len(plan.notes) == 1 and "not compared with itself" in plan.notes[0]


def test_cross_plan_needs_a_stored_reference(session):
    with pytest.raises(UnknownOptionError, match="need a reference model"):
        _plan(session, "drift")
    with pytest.raises(UnknownModelError, match="'nope' is not in the store"):
        _plan(session, "drift", reference="nope")


def test_after_a_run_the_plan_has_nothing_missing(registry):
    def a(weights):
        return float(weights.sum())

    def b(a):
        return a * 2

    reg = KernelRegistry([make_kernel(a, outputs="a"), make_kernel(b, outputs="b")])
    s = Session(profile="ram", registry=reg)
    s.models.add(_weights(), model_id="base")
    before = make_plan(s.store, reg, ["b"], s.models.slices())
    assert len(before.work) == 3
    s.compute.apply("b", progress=False)
    after = make_plan(s.store, reg, ["b"], s.models.slices())
    assert after.work == [] and after.missing()["param"] == {}
    assert sum(p.reused for p in after.param.values()) == 3
