"""session.filter(...): exact names and re: regex, AND across kinds, chaining, JSON round trip."""

from __future__ import annotations

import json

import pytest

from diffract import FilterChain, FilterError, ParameterType, Session


@pytest.fixture
def session(rng):
    s = Session(profile="ram")
    for mid in ("gpt2-small", "gpt2-medium"):
        s.models.add(
            {
                "h.0.attn.c_attn.weight": rng.normal(size=(8, 24)),
                "h.0.attn.c_proj.weight": rng.normal(size=(8, 8)),
                "h.0.mlp.c_fc.weight": rng.normal(size=(8, 32)),
                "h.1.attn.c_attn.weight": rng.normal(size=(8, 24)),
                "h.1.mlp.proj": rng.normal(size=(32, 8)),
                "h.1.ln_1.weight": rng.normal(size=8),
                "wte.weight": rng.normal(size=(50, 8)),
            },
            model_id=mid,
        )
    return s


def names(scope):
    return sorted({s.name for s in scope.models.slices()})


def test_exact_and_regex_names(session):
    assert names(session.filter(param_names=["h.0.mlp.c_fc.weight"])) == ["h.0.mlp.c_fc.weight"]
    assert names(session.filter(param_names=["re:.*attn.*weight"])) == [
        "h.0.attn.c_attn.weight",
        "h.0.attn.c_proj.weight",
        "h.1.attn.c_attn.weight",
    ]
    assert names(session.filter(param_names=["re:.*proj$"])) == ["h.1.mlp.proj"]
    # full match: "attn" alone does not match a longer name
    assert names(session.filter(param_names=["re:attn"])) == []
    assert names(session.filter(param_names=["re:h\\.[0-0]\\..*"])) == [
        "h.0.attn.c_attn.weight",
        "h.0.attn.c_proj.weight",
        "h.0.mlp.c_fc.weight",
    ]


def test_model_ids_exact_and_regex(session):
    assert session.filter(model_ids=["gpt2-small"]).models.ids() == ["gpt2-small"]
    assert session.filter(model_ids=["re:gpt2-.*"]).models.ids() == ["gpt2-medium", "gpt2-small"]
    assert {s.model_id for s in session.filter(model_ids=["gpt2-small"]).models.slices()} == {
        "gpt2-small"
    }


def test_types_builtin_and_custom(session):
    dense = session.filter(param_types=[ParameterType.DENSE])
    assert "wte.weight" not in names(dense) and "h.1.ln_1.weight" not in names(dense)
    assert names(session.filter(param_types=["embedding"])) == ["wte.weight"]
    assert names(session.filter(param_types=[ParameterType.from_string("attention")])) == []


def test_uids(session):
    uids = [s.uid for s in session.models.slices()[:2]]
    assert [s.uid for s in session.filter(param_ids=uids).models.slices()] == uids
    # an unknown uid is a KeyError naming it, as in Diffract (issue 26, point 15)
    with pytest.raises(KeyError, match="abc123"):
        session.filter(param_ids=["abc123", "def456"])


def test_and_combination_and_chaining(session):
    both = session.filter(model_ids=["gpt2-small"], param_names=["re:.*attn.*"])
    assert {(s.model_id, s.name) for s in both.models.slices()} == {
        ("gpt2-small", "h.0.attn.c_attn.weight"),
        ("gpt2-small", "h.0.attn.c_proj.weight"),
        ("gpt2-small", "h.1.attn.c_attn.weight"),
    }
    chained = session.filter(model_ids=["gpt2-small"]).filter(param_names=["re:.*attn.*"])
    assert [s.uid for s in chained.models.slices()] == [s.uid for s in both.models.slices()]
    narrower = chained.filter(param_names=["re:h\\.1\\..*"])
    assert names(narrower) == ["h.1.attn.c_attn.weight"]


def test_empty_scope_is_not_an_error(session):
    empty = session.filter(model_ids=["nope"])
    assert len(empty) == 0 and empty.models.ids() == []
    report = empty.compute.apply("frob_norm", progress=False)
    assert report.computed == 0


def test_bad_regex_names_the_pattern(session):
    with pytest.raises(
        FilterError, match=r"invalid regular expression '\(unclosed' in param_names"
    ):
        session.filter(param_names=["re:(unclosed"])
    with pytest.raises(FilterError, match="model_ids"):
        session.filter(model_ids=["re:[z-a]"])


def test_wrong_types_are_clear_errors(session):
    with pytest.raises(FilterError, match="param_names entries must be strings"):
        session.filter(param_names=[3])
    with pytest.raises(FilterError, match="invalid parameter type name"):
        session.filter(param_types=["not a type"])
    with pytest.raises(FilterError, match="unknown filter key"):
        FilterChain.from_json('{"names": ["x"]}')


def test_filters_are_data_json_round_trip(session):
    scope = session.filter(model_ids=["gpt2-small"], param_types=[ParameterType.DENSE]).filter(
        param_names=["re:.*attn.*"]
    )
    text = scope.utils.filter_json()
    assert json.loads(text) == [
        {"model_ids": ["gpt2-small"], "param_types": ["dense"]},
        {"param_names": ["re:.*attn.*"]},
    ]
    chain = FilterChain.from_json(text)
    assert chain == scope.filter_chain
    assert chain.select(session.models.slices()) == scope.models.slices()
