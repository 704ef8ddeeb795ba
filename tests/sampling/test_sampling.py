"""diffract.sampling: the pure core (seed 003 API, policy, records, manifests, samplers)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

try:
    import diffract  # noqa: F401
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from diffract.sampling import (
    EXCLUSION_REASONS,
    Candidate,
    SamplingError,
    SparseSampleManifest,
    SparseSampleRecord,
    SparseSamplingPolicy,
    SubblockConfig,
    manifest_from_dict,
    sample_replacement_candidates,
    sample_subblock_configs,
)
from diffract.sampling.records import _record_sort_key

# --- helpers -------------------------------------------------------------------------------

AXES = ("attention.num_kv_heads", "attention.head_dim", "ffn.intermediate_size")
TEACHER = {"kv": 8, "hd": 32, "ffn": 512}


def block(kv=8, hd=32, ffn=512, attn_noop=False, ffn_noop=False):
    return (
        SubblockConfig(
            kind="attention",
            name="attention",
            config={"num_kv_heads": kv, "head_dim": hd},
            no_op=attn_noop,
        ),
        SubblockConfig(kind="ffn", name="ffn", config={"intermediate_size": ffn}, no_op=ffn_noop),
    )


def teacher(layer, width=64, **kw):
    return Candidate(
        candidate_id=f"w{width}-t{layer}",
        layer_idx=layer,
        hidden_width=width,
        source="self",
        subblocks=block(**kw),
    )


def derived(cid, layer, width=64, teacher_cfg=TEACHER, axes=None, **kw):
    vals = {**teacher_cfg, **{k: v for k, v in kw.items() if k in ("kv", "hd", "ffn")}}
    if axes is None:
        axes = []
        if vals["kv"] != teacher_cfg["kv"]:
            axes.append("attention.num_kv_heads")
        if vals["hd"] != teacher_cfg["hd"]:
            axes.append("attention.head_dim")
        if vals["ffn"] != teacher_cfg["ffn"]:
            axes.append("ffn.intermediate_size")
        if kw.get("attn_noop"):
            axes.append("attention.no_op")
        if kw.get("ffn_noop"):
            axes.append("ffn.no_op")
        axes = axes or ["ffn.intermediate_size"]
    return Candidate(
        candidate_id=cid,
        layer_idx=layer,
        hidden_width=width,
        source="derived",
        subblocks=block(**kw),
        changed_axes=tuple(axes),
    )


def grid_library(n_layers=6, width=64, ffns=(128, 256, 384), kvs=(2, 4)):
    cands = []
    for layer in range(n_layers):
        cands.append(teacher(layer, width))
        for f in ffns:
            cands.append(derived(f"w{width}-f{layer}-{f}", layer, width, ffn=f))
            for k in kvs:
                cands.append(derived(f"w{width}-p{layer}-{f}-{k}", layer, width, ffn=f, kv=k))
        for k in kvs:
            cands.append(derived(f"w{width}-k{layer}-{k}", layer, width, kv=k))
        cands.append(derived(f"w{width}-n{layer}", layer, width, attn_noop=True))
    return cands


def signature(r):
    cfg = r.block_config
    out = []
    for axis in r.changed_axes:
        sub, key = axis.split(".")
        val = cfg[sub]["no_op"] if key == "no_op" else cfg[sub]["config"].get(key)
        out.append((axis, json.dumps(val)))
    return tuple(out)


def check_invariants(m, candidates, mode):
    """Properties every manifest must have."""
    elig = {(r.sample_id, r.candidate_id) for r in m.eligible}
    sel = [(r.sample_id, r.candidate_id) for r in m.selected]
    assert set(sel) <= elig
    assert all(r.reason == "eligible" for r in (*m.eligible, *m.selected))
    assert all(r.reason in EXCLUSION_REASONS for r in m.excluded)
    exc = Counter((r.sample_id, r.candidate_id) for r in m.excluded)
    for key in elig:
        assert (key in sel) + exc[key] == 1
    # every input candidate (or candidate subblock) appears exactly once among selected+excluded
    seen = Counter((r.candidate_id, r.subblock_name) for r in (*m.selected, *m.excluded))
    if mode == "replacement":
        expected = Counter((c.candidate_id, "block") for c in candidates)
    else:
        expected = Counter((c.candidate_id, s.name) for c in candidates for s in c.subblocks)
    assert seen == expected
    for name in ("eligible", "selected", "excluded"):
        recs = getattr(m, name)
        assert list(recs) == sorted(recs, key=_record_sort_key)


# --- the seed's API ------------------------------------------------------------------------


def _params(func):
    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(func).parameters.values()
        if p.name != "self"
    ]


KW = inspect.Parameter.KEYWORD_ONLY
EMPTY = inspect.Parameter.empty


def test_policy_signature_and_defaults():
    assert _params(SparseSamplingPolicy.__init__) == [
        ("max_pairwise_per_family", KW, 4),
        ("replacement_cap", KW, 50),
        ("seed", KW, 42),
    ]
    p = SparseSamplingPolicy()
    assert (p.max_pairwise_per_family, p.replacement_cap, p.seed) == (4, 50, 42)
    assert dataclasses.is_dataclass(p)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.seed = 1


def test_record_signature_and_defaults():
    assert _params(SparseSampleRecord.__init__) == [
        ("sample_id", KW, EMPTY),
        ("candidate_id", KW, EMPTY),
        ("layer_idx", KW, EMPTY),
        ("hidden_width", KW, EMPTY),
        ("subblock_kind", KW, EMPTY),
        ("subblock_name", KW, EMPTY),
        ("changed_axes", KW, EMPTY),
        ("block_config", KW, EMPTY),
        ("subblock_config", KW, EMPTY),
        ("no_op", KW, False),
        ("reason", KW, "eligible"),
    ]
    hints = {f.name: f.type for f in dataclasses.fields(SparseSampleRecord)}
    assert hints == {
        "sample_id": "str",
        "candidate_id": "str",
        "layer_idx": "int",
        "hidden_width": "int | None",
        "subblock_kind": "str",
        "subblock_name": "str",
        "changed_axes": "tuple[str, ...]",
        "block_config": "dict[str, Any]",
        "subblock_config": "dict[str, Any] | None",
        "no_op": "bool",
        "reason": "str",
    }
    assert SparseSampleRecord.__dataclass_params__.frozen
    assert _params(SparseSampleRecord.to_dict) == []


def test_manifest_signature():
    assert _params(SparseSampleManifest.__init__) == [
        ("mode", KW, EMPTY),
        ("policy", KW, EMPTY),
        ("eligible", KW, EMPTY),
        ("selected", KW, EMPTY),
        ("excluded", KW, EMPTY),
    ]
    hints = {f.name: f.type for f in dataclasses.fields(SparseSampleManifest)}
    assert hints == {
        "mode": "str",
        "policy": "SparseSamplingPolicy",
        "eligible": "tuple[SparseSampleRecord, ...]",
        "selected": "tuple[SparseSampleRecord, ...]",
        "excluded": "tuple[SparseSampleRecord, ...]",
    }
    assert SparseSampleManifest.__dataclass_params__.frozen
    assert isinstance(SparseSampleManifest.identity, property)
    assert _params(SparseSampleManifest.to_dict) == [("include_identity", KW, True)]


@pytest.mark.parametrize("func", [sample_replacement_candidates, sample_subblock_configs])
def test_sampler_signatures(func):
    params = list(inspect.signature(func).parameters.values())
    assert [p.name for p in params] == ["candidates", "policy"]
    assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert (params[1].kind, params[1].default) == (KW, None)
    assert inspect.signature(func).return_annotation == "SparseSampleManifest"


def test_seed_docstrings():
    assert sample_replacement_candidates.__doc__.startswith(
        "Select at most replacement_cap layer candidates independently per width."
    )
    assert sample_subblock_configs.__doc__.startswith(
        "Select layer-independent teacher, single-axis, and pairwise subblocks."
    )


def test_import_is_light():
    code = (
        "import sys, diffract; before = set(sys.modules); import diffract.sampling; "
        "new = set(sys.modules) - before; "
        "print(sorted(m for m in new if m.split('.')[0] in ('numpy', 'torch', 'safetensors')))"
    )
    env_path = str(Path(__file__).resolve().parents[2] / "python")
    out = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {env_path!r}); {code}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


# --- policy validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_pairwise_per_family": -1}, SamplingError, "max_pairwise_per_family must be >= 0"),
        ({"replacement_cap": 0}, SamplingError, "replacement_cap must be >= 1"),
        ({"replacement_cap": -5}, SamplingError, "replacement_cap must be >= 1"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"seed": "42"}, TypeError, "seed must be an int"),
        ({"seed": True}, TypeError, "seed must be an int"),
        ({"replacement_cap": 2.0}, TypeError, "replacement_cap must be an int"),
        ({"max_pairwise_per_family": None}, TypeError, "must be an int"),
    ],
)
def test_policy_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        SparseSamplingPolicy(**kwargs)


def test_policy_edges_are_valid():
    SparseSamplingPolicy(max_pairwise_per_family=0, replacement_cap=1, seed=-3)
    assert issubclass(SamplingError, ValueError)
    with pytest.raises(TypeError):
        SparseSamplingPolicy(4, 50, 42)  # keyword-only
    with pytest.raises(TypeError, match="policy must be a SparseSamplingPolicy"):
        sample_replacement_candidates([], policy={"seed": 1})


# --- candidate validation --------------------------------------------------------------------


def test_candidate_validation():
    with pytest.raises(SamplingError, match="declares changed axes"):
        Candidate(
            candidate_id="t",
            layer_idx=0,
            hidden_width=8,
            source="self",
            subblocks=block(),
            changed_axes=("ffn.intermediate_size",),
        )
    with pytest.raises(SamplingError, match="declares no changed axes"):
        Candidate(candidate_id="d", layer_idx=0, hidden_width=8, source="x", subblocks=block())
    with pytest.raises(SamplingError, match=r"'<subblock name>\.<config key>'"):
        derived("d", 0, axes=["mlp.size"])
    with pytest.raises(TypeError, match="wrap it"):
        Candidate(
            candidate_id="d",
            layer_idx=0,
            hidden_width=8,
            source="x",
            subblocks=block(),
            changed_axes="ffn.intermediate_size",
        )
    with pytest.raises(SamplingError, match="repeated subblock names"):
        Candidate(
            candidate_id="d",
            layer_idx=0,
            hidden_width=8,
            source="self",
            subblocks=(block()[0], block()[0]),
        )
    with pytest.raises(SamplingError, match="JSON-ready"):
        SubblockConfig(kind="ffn", name="ffn", config={"x": object()})
    with pytest.raises(SamplingError, match=r"contains '\.'"):
        SubblockConfig(kind="ffn", name="ffn.0")
    with pytest.raises(SamplingError, match="more than once"):
        sample_replacement_candidates([teacher(0), teacher(0)])
    with pytest.raises(SamplingError, match="two teacher blocks"):
        sample_replacement_candidates(
            [teacher(0), dataclasses.replace(teacher(0), candidate_id="other")]
        )
    with pytest.raises(TypeError, match="iterable of Candidate"):
        sample_replacement_candidates(teacher(0).to_dict())


def test_candidate_round_trip_and_mapping_input():
    c = derived("d", 3, ffn=128, kv=2)
    assert Candidate.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    lib = grid_library(3)
    m1 = sample_replacement_candidates(lib)
    m2 = sample_replacement_candidates([c.to_dict() for c in lib])
    assert m1 == m2 and m1.identity == m2.identity


# --- the worked rules ----------------------------------------------------------------------


def test_replacement_reasons_worked_example():
    cands = [
        teacher(0),
        teacher(1),
        derived("ffn-a", 0, ffn=256),
        derived("ffn-a-copy", 0, ffn=256),  # same content as ffn-a
        derived("same-as-teacher", 1, axes=["ffn.intermediate_size"]),
        derived("noop", 0, ffn_noop=True),
        derived("three", 1, kv=2, hd=16, ffn=128),
        derived("orphan", 7, ffn=256),
        derived("pair", 1, kv=2, ffn=128),
    ]
    m = sample_replacement_candidates(cands, policy=SparseSamplingPolicy(replacement_cap=10))
    check_invariants(m, cands, "replacement")
    reasons = {r.candidate_id: r.reason for r in m.excluded}
    assert reasons["w64-t0"] == reasons["w64-t1"] == "teacher_anchor"
    assert reasons["same-as-teacher"] == "duplicate"
    assert {reasons.get("ffn-a"), reasons.get("ffn-a-copy")} == {"duplicate", None}
    assert reasons["noop"] == "no_op"
    assert reasons["three"] == "too_many_axes"
    assert reasons["orphan"] == "missing_teacher"
    assert {r.candidate_id for r in m.selected} == {"pair"} | (
        {"ffn-a", "ffn-a-copy"} - set(reasons)
    )
    rec = next(r for r in m.selected if r.candidate_id == "pair")
    assert rec.changed_axes == ("attention.num_kv_heads", "ffn.intermediate_size")
    assert rec.subblock_kind == rec.subblock_name == "block" and rec.subblock_config is None
    assert rec.block_config["ffn"] == {
        "kind": "ffn",
        "config": {"intermediate_size": 128},
        "no_op": False,
    }


def test_replacement_phases():
    lib = grid_library(n_layers=6)  # 3 ffn sizes, 2 kv counts, 6 pairs, 1 no-op per layer
    policy = SparseSamplingPolicy(replacement_cap=12, max_pairwise_per_family=3)
    m = sample_replacement_candidates(lib, policy=policy)
    check_invariants(m, lib, "replacement")
    assert len(m.selected) == 12
    sel_sigs = Counter(signature(r) for r in m.selected)
    singles = {s for s in sel_sigs if len(s) == 1}
    pairs = {s for s in sel_sigs if len(s) == 2}
    assert len(singles) == 5  # every single-axis signature
    assert len(pairs) == 3  # the pairwise limit of the one family
    # the remaining 4 slots went to more layers of admitted signatures
    assert sum(sel_sigs.values()) - len(sel_sigs) == 4
    # representatives sit on the first layer; the next layers used are middle and last
    layers = Counter(r.layer_idx for r in m.selected)
    assert layers[0] == 8 and set(layers) <= {0, 2, 5}
    reasons = Counter(r.reason for r in m.excluded)
    assert reasons["pairwise_limit"] == 3 * 6
    assert reasons["teacher_anchor"] == reasons["no_op"] == 6
    assert reasons["over_cap"] == len(m.eligible) - 12 - 18


def test_replacement_cap_cuts_single_axis_round_robin():
    lib = grid_library(n_layers=2)
    m = sample_replacement_candidates(lib, policy=SparseSamplingPolicy(replacement_cap=2))
    check_invariants(m, lib, "replacement")
    axes = sorted(r.changed_axes for r in m.selected)
    assert axes == [("attention.num_kv_heads",), ("ffn.intermediate_size",)]


def test_pairwise_zero_and_widths_are_independent():
    lib = grid_library(3, width=64) + grid_library(3, width=128)
    policy = SparseSamplingPolicy(replacement_cap=7, max_pairwise_per_family=0)
    m = sample_replacement_candidates(lib, policy=policy)
    check_invariants(m, lib, "replacement")
    per_width = Counter(r.hidden_width for r in m.selected)
    assert per_width == {64: 7, 128: 7}
    assert all(len(r.changed_axes) == 1 for r in m.selected)


def test_subblock_worked_example():
    cands = [teacher(0), teacher(1), teacher(2, ffn=1024)]
    cands += [derived(f"f{layer}-256", layer, ffn=256) for layer in (0, 1)]
    cands += [derived("f2-256", 2, teacher_cfg={**TEACHER, "ffn": 1024}, ffn=256)]
    cands += [derived(f"k{layer}", layer, kv=2) for layer in (0, 1)]
    cands += [derived("kh", 0, kv=2, hd=16), derived("kh2", 1, kv=4, hd=16)]
    cands += [derived("noop", 1, attn_noop=True)]
    policy = SparseSamplingPolicy(max_pairwise_per_family=1)
    m = sample_subblock_configs(cands, policy=policy)
    check_invariants(m, cands, "subblock")
    sel = {(r.candidate_id, r.subblock_name) for r in m.selected}
    # teacher attention counts once (layers 0-2 identical), teacher ffn once per family
    assert ("w64-t0", "attention") in sel
    assert ("w64-t0", "ffn") in sel and ("w64-t2", "ffn") in sel
    # ffn 256 at layers 0 and 1: same family, counted once; at layer 2 its own family
    assert ("f0-256", "ffn") in sel and ("f2-256", "ffn") in sel
    assert ("k0", "attention") in sel
    # one pairwise attention signature (kv, head_dim) of the two
    pair_sel = [r for r in m.selected if len(r.changed_axes) == 2]
    assert len(pair_sel) == 1
    reasons = {(r.candidate_id, r.subblock_name): r.reason for r in m.excluded}
    assert reasons[("f1-256", "ffn")] == "duplicate"
    assert reasons[("k1", "attention")] == "duplicate"
    assert reasons[("noop", "attention")] == "no_op"
    assert {reasons.get(("kh", "attention")), reasons.get(("kh2", "attention"))} == {
        None,
        "pairwise_limit",
    }
    assert len(m.selected) == 7
    # all three identical teacher attention subblocks share one sample_id
    ids = {
        r.sample_id
        for r in (*m.selected, *m.excluded)
        if r.candidate_id.startswith("w64-t") and r.subblock_name == "attention"
    }
    assert len(ids) == 1


def test_subblock_not_selected_same_signature_other_content():
    # two candidates with the same declared signature but different undeclared content
    a = derived("a", 0, ffn=256)
    b = Candidate(
        candidate_id="b",
        layer_idx=1,
        hidden_width=64,
        source="derived",
        subblocks=(
            block()[0],
            SubblockConfig(
                kind="ffn", name="ffn", config={"intermediate_size": 256, "act": "relu"}
            ),
        ),
        changed_axes=("ffn.intermediate_size",),
    )
    cands = [teacher(0), teacher(1), a, b]
    m = sample_subblock_configs(cands)
    check_invariants(m, cands, "subblock")
    reasons = {(r.candidate_id, r.subblock_name): r.reason for r in m.excluded}
    assert reasons[("b", "ffn")] == "not_selected"


def test_empty_input():
    for func, mode in (
        (sample_replacement_candidates, "replacement"),
        (sample_subblock_configs, "subblock"),
    ):
        m = func([])
        assert m.mode == mode and m.eligible == m.selected == m.excluded == ()
        assert m.to_dict()["identity"] == m.identity


# --- manifest identity and serialisation ------------------------------------------------------


def test_identity_is_hash_of_canonical_dict():
    import hashlib

    m = sample_replacement_candidates(grid_library(3))
    body = m.to_dict(include_identity=False)
    assert "identity" not in body
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert m.identity == hashlib.sha256(text.encode()).hexdigest()
    assert m.to_dict()["identity"] == m.identity
    assert manifest_from_dict(json.loads(json.dumps(m.to_dict()))) == m


def test_identity_changes_iff_content_changes():
    lib = grid_library(3)
    m = sample_replacement_candidates(lib)
    # same content in another order: same identity
    shuffled = SparseSampleManifest(
        mode=m.mode,
        policy=m.policy,
        eligible=m.eligible[::-1],
        selected=m.selected[::-1],
        excluded=m.excluded[::-1],
    )
    assert shuffled.identity == m.identity and shuffled == m
    # any change of content: a different identity
    variants = [
        dataclasses.replace(m, policy=SparseSamplingPolicy(seed=43)),
        dataclasses.replace(m, mode="subblock"),
    ]
    rec = m.excluded[0]
    for change in (
        {"reason": "over_cap" if rec.reason != "over_cap" else "duplicate"},
        {"layer_idx": rec.layer_idx + 1},
        {"changed_axes": ("x.y",)},
        {"no_op": not rec.no_op},
        {"block_config": {**rec.block_config, "extra": 1}},
    ):
        variants.append(dataclasses.replace(m, excluded=(rec._replace(**change), *m.excluded[1:])))
    idents = {v.identity for v in variants}
    assert len(idents) == len(variants) and m.identity not in idents


def test_manifest_consistency_is_checked():
    m = sample_replacement_candidates(grid_library(2))
    budget = [i for i, r in enumerate(m.excluded) if r.reason == "pairwise_limit"]
    assert budget
    with pytest.raises(SamplingError, match="exactly once"):  # an eligible record dropped
        dataclasses.replace(m, excluded=m.excluded[: budget[0]] + m.excluded[budget[0] + 1 :])
    with pytest.raises(SamplingError, match="exactly once"):  # selected and excluded
        dataclasses.replace(m, excluded=(m.selected[0]._replace(reason="over_cap"), *m.excluded))
    with pytest.raises(SamplingError, match="reason 'eligible'"):
        dataclasses.replace(m, excluded=(m.selected[0], *m.excluded))
    with pytest.raises(SamplingError, match="mode"):
        dataclasses.replace(m, mode="other")
    data = m.to_dict()
    data["identity"] = "0" * 64
    with pytest.raises(SamplingError, match="identity mismatch"):
        manifest_from_dict(data)
    with pytest.raises(SamplingError, match="reason"):
        m.selected[0]._replace(reason="nope")


# --- properties (Hypothesis) ----------------------------------------------------------------

derived_spec = st.tuples(
    st.sampled_from([None, 64, 128]),  # width
    st.integers(0, 5),  # layer
    st.sampled_from([1, 2, 4, 8]),  # kv
    st.sampled_from([16, 32]),  # head dim
    st.sampled_from([128, 256, 512]),  # ffn
    st.sampled_from([False, False, False, True]),  # attn no-op
    st.sampled_from([False, False, False, True]),  # ffn no-op
)


@st.composite
def libraries(draw):
    widths = [None, 64, 128]
    cands = []
    teachers = {}
    for w in widths:
        for layer in range(draw(st.integers(0, 5))):
            if draw(st.booleans()) or layer == 0:
                ffn = draw(st.sampled_from([256, 512]))
                teachers[(w, layer)] = {"kv": 8, "hd": 32, "ffn": ffn}
                cands.append(
                    Candidate(
                        candidate_id=f"t-{w}-{layer}",
                        layer_idx=layer,
                        hidden_width=w,
                        source="self",
                        subblocks=block(ffn=ffn),
                    )
                )
    for i, (w, layer, kv, hd, ffn, an, fn) in enumerate(draw(st.lists(derived_spec, max_size=40))):
        tcfg = teachers.get((w, layer), TEACHER)
        cands.append(
            derived(f"d{i:03d}", layer, w, tcfg, kv=kv, hd=hd, ffn=ffn, attn_noop=an, ffn_noop=fn)
        )
    return cands


POLICIES = st.builds(
    SparseSamplingPolicy,
    max_pairwise_per_family=st.integers(0, 3),
    replacement_cap=st.integers(1, 12),
    seed=st.integers(-5, 5),
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(libraries(), POLICIES, st.randoms(use_true_random=False))
def test_replacement_properties(cands, policy, rnd):
    m = sample_replacement_candidates(cands, policy=policy)
    check_invariants(m, cands, "replacement")
    shuffled = list(cands)
    rnd.shuffle(shuffled)
    m2 = sample_replacement_candidates(shuffled, policy=policy)
    assert m2.to_dict() == m.to_dict() and m2.identity == m.identity
    # the cap per width
    for count in Counter(r.hidden_width for r in m.selected).values():
        assert count <= policy.replacement_cap
    # the pairwise limit per family (width, axis pair), counted in distinct signatures
    fam = {}
    for r in m.selected:
        assert len(r.changed_axes) in (1, 2)
        if len(r.changed_axes) == 2:
            fam.setdefault((r.hidden_width, r.changed_axes), set()).add(signature(r))
    assert all(len(s) <= policy.max_pairwise_per_family for s in fam.values())
    # no selected duplicates, no selected no-op of an active teacher subblock
    assert len({r.sample_id for r in m.selected}) == len(m.selected)
    # under the cap nothing eligible is left out for budget reasons
    per_width_eligible = Counter(
        r.hidden_width
        for r in m.eligible
        if not any(x.reason == "pairwise_limit" and x.sample_id == r.sample_id for x in m.excluded)
    )
    for w, n in per_width_eligible.items():
        got = sum(1 for r in m.selected if r.hidden_width == w)
        assert got == min(n, policy.replacement_cap)


@FAST
@given(libraries(), POLICIES, st.randoms(use_true_random=False))
def test_subblock_properties(cands, policy, rnd):
    m = sample_subblock_configs(cands, policy=policy)
    check_invariants(m, cands, "subblock")
    shuffled = list(cands)
    rnd.shuffle(shuffled)
    assert sample_subblock_configs(shuffled, policy=policy).identity == m.identity
    # layer independence: one selected record per content
    assert len({r.sample_id for r in m.selected}) == len(m.selected)
    # per family: at most one teacher subblock, one record per signature, pairwise limit
    per_family = {}
    for r in m.selected:
        t_layer = next(
            c
            for c in cands
            if c.is_teacher and (c.hidden_width, c.layer_idx) == (r.hidden_width, r.layer_idx)
        )
        t_sub = t_layer.subblock(r.subblock_name)
        key = (
            r.hidden_width,
            r.subblock_kind,
            r.subblock_name,
            json.dumps(t_sub.to_dict(), sort_keys=True),
        )
        per_family.setdefault(key, []).append(signature(r))
    for sigs in per_family.values():
        assert len(sigs) == len(set(sigs))
        assert sum(1 for s in sigs if len(s) == 2) <= policy.max_pairwise_per_family
        assert sum(1 for s in sigs if len(s) == 0) == 1


@settings(max_examples=25, deadline=None)
@given(libraries())
def test_seed_only_breaks_ties(cands):
    a = sample_replacement_candidates(cands, policy=SparseSamplingPolicy(seed=1))
    b = sample_replacement_candidates(cands, policy=SparseSamplingPolicy(seed=2))
    # the seed never changes what is eligible, nor how many are selected per width
    assert a.eligible == b.eligible
    assert Counter(r.hidden_width for r in a.selected) == Counter(
        r.hidden_width for r in b.selected
    )
