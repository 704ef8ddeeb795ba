"""Identifiers that could be read as syntax (issue 28 point 10, issue 26 point 17): model ids
starting with the filters' regex prefix ``re:``, and parameter names holding the characters
of contextual keys (``field@models[a,b]@params[x]``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from diffract import InvalidModelIdError, Session
from diffract._vocab.filters import REGEX_PREFIX
from diffract._vocab.owners import contextual_field, contextual_key, parse_contextual_key
from diffract._vocab.slices import FILTER_REGEX_PREFIX


def _w(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(8, 6))


# --- model ids and the regex prefix (issue 28, point 10) ------------------------------------


def test_the_refused_prefix_is_the_filters_regex_prefix():
    assert FILTER_REGEX_PREFIX == REGEX_PREFIX == "re:"


@pytest.mark.parametrize("bad", ["re:a.*", "re:abc", "re:"])
def test_a_model_id_starting_with_re_is_refused(bad):
    """``filter(model_ids=["re:a.*"])`` reads the id as a regex: it erased model ``abc``'s
    values. Such an id is refused where it would be created, naming the rule."""
    s = Session(profile="ram")
    s.models.add({"w": _w(0)}, model_id="abc")
    with pytest.raises(InvalidModelIdError, match=r"starts with 're:'.*regular expression"):
        s.models.add({"w": _w(1)}, model_id=bad)
    with pytest.raises(InvalidModelIdError, match=r"starts with 're:'"):
        s.models.rename("abc", bad)
    assert s.models.ids() == ["abc"]


def test_ids_holding_re_elsewhere_are_still_ids():
    s = Session(profile="ram")
    for mid in ("are:1", "RE-1", "re-1", "pre:re:x"):
        s.models.add({"w": _w(0)}, model_id=mid)
    assert s.models.ids() == sorted(["are:1", "RE-1", "re-1", "pre:re:x"])
    assert s.filter(model_ids=["re-1"]).models.ids() == ["re-1"]


# --- parameter names in contextual keys (issue 26, point 17) ---------------------------------


def _aggregate_keys(names: list[str], scope_names: list[str]) -> set[str]:
    """The contextual keys ``export`` writes for ``log_norm`` over a scope of those names."""
    s = Session(profile="ram")
    s.models.add({n: _w(i) for i, n in enumerate(names)}, model_id="m")
    scope = s.filter(param_names=scope_names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scope.compute.apply("log_norm")
        out = scope.results.export("log_norm", export_format="dict")
    return {k for entry in out.values() for k in entry["fields"] if k.startswith("log_norm@")}


@pytest.mark.parametrize("ch", ["/", "@", ",", "[", "]"])
def test_a_name_with_a_key_character_gets_a_key_of_its_own(ch):
    """``filter(param_names=["x,y"])`` and ``filter(param_names=["x", "y"])`` wrote the same
    key ``log_norm@models[m]@params[x,y]``; each key now names one context, and reads back."""
    name = f"x{ch}y"
    [one] = _aggregate_keys([name, "x", "y"], [name])
    [two] = _aggregate_keys([name, "x", "y"], ["x", "y"])
    assert one != two
    assert parse_contextual_key(one) == ("log_norm", ("m",), (name,))
    assert parse_contextual_key(two) == ("log_norm", ("m",), ("x", "y"))
    assert contextual_field(one) == "log_norm"


def test_names_without_key_characters_keep_diffracts_keys():
    """Diffract's grammar, unchanged for its alphabet (what a Diffract user's code reads)."""
    [key] = _aggregate_keys(["layer.0.weight", "head", "x"], ["layer.0.weight", "head"])
    assert key == "log_norm@models[m]@params[head,layer.0.weight]"
    assert contextual_key("f", ["b", "a"], []) == "f@models[a,b]"
    assert contextual_key("f", [], []) == "f"


@pytest.mark.parametrize(
    "names",
    [
        ["a,b"],
        ["a", "b"],
        ["/model/layer.0/MatMul", "w[0]", "x@y"],
        ["%2C", "a%b", "%", "%%2C,", "%252C"],
        ["]", "[", "@", ",", "/", "%"],
        ["é,ü", "名前[1]"],
    ],
)
def test_contextual_keys_round_trip(names):
    """Every member (and the field) reads back as written, ``%`` included (the escape)."""
    for field in ("log_norm", "f@x[1]", "50%"):
        key = contextual_key(field, ["m2", "m1"], names)
        assert parse_contextual_key(key) == (field, ("m1", "m2"), tuple(sorted(names)))
        assert contextual_field(key) == field
        assert key.count("@") == 2 and key.count("[") == key.count("]") == 2


def test_distinct_contexts_never_share_a_key():
    contexts = [["a,b"], ["a", "b"], ["a%2Cb"], ["a%252Cb"], ["a%", "2Cb"], ["a%2C", "b"]]
    keys = [contextual_key("f", ["m"], c) for c in contexts]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("bad", ["f@models[m", "f@params[a]@models[m]", "f@other[x]", "f@"])
def test_a_malformed_contextual_key_is_named(bad):
    with pytest.raises(ValueError, match="not a contextual key"):
        parse_contextual_key(bad)
