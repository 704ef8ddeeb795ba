"""diffract.filter / partition / combine behave like equinox's, on real Equinox modules and
on plain pytrees, with JAX's registry and with the built-in one (no JAX imported)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import diffract


class Block(eqx.Module):
    linear: eqx.nn.Linear
    norm: eqx.nn.LayerNorm
    act: callable
    scale: float
    steps: jax.Array


def make_model():
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    return [
        Block(eqx.nn.Linear(4, 3, key=k1), eqx.nn.LayerNorm(3), jax.nn.relu, 0.5, jnp.arange(3)),
        eqx.nn.MLP(3, 2, 8, 2, key=k2),
        {"emb": eqx.nn.Embedding(10, 4, key=k3), "tag": "static"},
    ]


def same(a, b) -> bool:
    la, ta = jtu.tree_flatten(a, is_leaf=lambda x: x is None)
    lb, tb = jtu.tree_flatten(b, is_leaf=lambda x: x is None)
    if ta != tb or len(la) != len(lb):
        return False
    for x, y in zip(la, lb, strict=True):
        if diffract.is_array(x) or diffract.is_array(y):
            if not (diffract.is_array(x) and diffract.is_array(y)) or not np.array_equal(
                np.asarray(x), np.asarray(y)
            ):
                return False
        elif x is not y and x != y:
            return False
    return True


SPECS = [
    eqx.is_array,
    eqx.is_inexact_array,
    lambda x: not eqx.is_array(x),
    True,
    False,
    [True, False, eqx.is_inexact_array],
    [eqx.is_array, True, {"emb": False, "tag": True}],
]


@pytest.mark.parametrize("spec_index", range(len(SPECS)))
@pytest.mark.parametrize("inverse", [False, True])
def test_filter_matches_equinox(spec_index, inverse):
    model = make_model()
    spec = SPECS[spec_index]
    ours_spec = spec
    if spec is eqx.is_array:
        ours_spec = diffract.is_array
    elif spec is eqx.is_inexact_array:
        ours_spec = diffract.is_inexact_array
    expected = eqx.filter(model, spec, inverse=inverse)
    got = diffract.filter(model, ours_spec, inverse=inverse)
    assert same(got, expected)


@pytest.mark.parametrize("spec_index", range(len(SPECS)))
def test_partition_and_combine_match_equinox(spec_index):
    model = make_model()
    spec = SPECS[spec_index]
    e_left, e_right = eqx.partition(model, spec)
    d_left, d_right = diffract.partition(model, spec)
    assert same(d_left, e_left)
    assert same(d_right, e_right)
    assert same(diffract.combine(d_left, d_right), eqx.combine(e_left, e_right))
    assert same(diffract.combine(d_left, d_right), model)


def test_replace_and_is_leaf_match_equinox():
    model = make_model()
    sentinel = object()
    assert same(
        diffract.filter(model, eqx.is_inexact_array, replace=sentinel),
        eqx.filter(model, eqx.is_inexact_array, replace=sentinel),
    )
    is_linear = lambda x: isinstance(x, eqx.nn.Linear)  # noqa: E731
    spec = lambda x: isinstance(x, eqx.nn.Linear)  # noqa: E731
    assert same(
        diffract.filter(model, spec, is_leaf=is_linear), eqx.filter(model, spec, is_leaf=is_linear)
    )
    l1, r1 = diffract.partition(model, spec, is_leaf=is_linear, replace=sentinel)
    l2, r2 = eqx.partition(model, spec, is_leaf=is_linear, replace=sentinel)
    assert same(l1, l2) and same(r1, r2)


def test_is_array_predicates_agree_with_equinox_on_jax_and_numpy():
    leaves = [
        jnp.ones(3),
        jnp.arange(3),
        np.ones(2),
        np.arange(2),
        np.float32(1.0),
        1.0,
        "x",
        None,
        jnp.ones(2, jnp.bfloat16),
    ]
    for leaf in leaves:
        assert diffract.is_array(leaf) == eqx.is_array(leaf), leaf
        assert diffract.is_inexact_array(leaf) == eqx.is_inexact_array(leaf), leaf


def test_bad_filter_spec_names_the_problem():
    with pytest.raises(ValueError, match="booleans and callables"):
        diffract.filter({"a": np.ones(2)}, {"a": 3})


def test_builtin_backend_without_jax_gives_equinox_results():
    """In a process that never imports JAX, the built-in registry gives the same trees."""
    code = textwrap.dedent(
        """
        import sys, json, collections
        import numpy as np
        import diffract
        assert "jax" not in sys.modules
        Pair = collections.namedtuple("Pair", "w b")
        tree = {"enc": [Pair(np.ones((2, 2)), np.zeros(2)), (np.arange(3), "tag")], "head": {"k": np.ones(3), "n": None}, "lr": 0.1}
        f = diffract.filter(tree, diffract.is_inexact_array)
        l, r = diffract.partition(tree, {"enc": [True, diffract.is_array], "head": False, "lr": True})
        c = diffract.combine(l, r)
        def show(t):
            if isinstance(t, dict): return {k: show(v) for k, v in t.items()}
            if isinstance(t, (list, tuple)): return [type(t).__name__] + [show(v) for v in t]
            if isinstance(t, np.ndarray): return t.tolist()
            return t
        print(json.dumps([show(f), show(l), show(r), show(c)]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    import collections
    import json

    Pair = collections.namedtuple("Pair", "w b")
    tree = {
        "enc": [Pair(np.ones((2, 2)), np.zeros(2)), (np.arange(3), "tag")],
        "head": {"k": np.ones(3), "n": None},
        "lr": 0.1,
    }
    f = eqx.filter(tree, eqx.is_inexact_array)
    left, right = eqx.partition(tree, {"enc": [True, eqx.is_array], "head": False, "lr": True})
    c = eqx.combine(left, right)

    def show(t):
        if isinstance(t, dict):
            return {k: show(v) for k, v in t.items()}
        if isinstance(t, (list, tuple)):
            return [type(t).__name__] + [show(v) for v in t]
        if isinstance(t, np.ndarray):
            return t.tolist()
        return t

    assert json.loads(out) == json.loads(json.dumps([show(f), show(left), show(right), show(c)]))
