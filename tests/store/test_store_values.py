"""Issue 18, points 8 and 11: every value a store accepts reads back exactly, of the same
kind, on every backend: at write, after a compaction and through ``store copy``; mixed
kinds in one field keep their kinds."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from diffract.store import BACKENDS, Batch, open_backend
from diffract.store._codec import decode, encode
from diffract.store._copy import copy_store

values = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(allow_nan=False).map(np.complex128),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=8),
)
SPECIAL = [
    0,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    True,
    False,
    1.5,
    -0.0,
    math.inf,
    -math.inf,
    np.complex128(1 - 2j),
    "3",
    "",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "\U0010ffff",
]


def _open(kind, tmp, **kw):
    if kind == "ram":
        return open_backend("ram", None)
    path = tmp / (f"s-{uuid.uuid4().hex}" + (".sqlite" if kind == "sqlite" else ""))
    return open_backend(kind, path, **kw)


def _same(a, b):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, float) and a == 0:
        return isinstance(b, float) and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, complex):  # NumPy complex scalars read back as Python complex
        return isinstance(b, complex) and a == b
    return type(a) is type(b) and a == b


def _check(store, fields):
    for key, v in fields.items():
        got = store.get(key)
        assert _same(v, got), (key, v, got)


def _roundtrip(kind, tmp, vals):
    fields = {(f"uid{i}@m", "f"): v for i, v in enumerate(vals)}
    fields.update({(f"uid{i}@m", f"g{i}"): v for i, v in enumerate(vals)})
    st_ = _open(kind, tmp)
    st_.commit(Batch(add_models={"m": {}}, fields=fields))
    _check(st_, fields)
    if kind == "ram":
        return
    again = open_backend(kind, st_.path, readonly=True)
    _check(again, fields)
    if hasattr(st_, "compact"):
        st_.compact()
        _check(open_backend(kind, st_.path, readonly=True), fields)
    for dst_kind in ("hdf5", "sqlite", "zarr"):
        dst = _open(dst_kind, tmp)
        copy_store(open_backend(kind, st_.path, readonly=True), dst)
        _check(dst, fields)
        dst.close()
    st_.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_special_values_round_trip_with_their_kinds(kind, tmp_path):
    _roundtrip(kind, tmp_path, SPECIAL)


@pytest.mark.parametrize("kind", BACKENDS)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(vals=st.lists(values, min_size=1, max_size=6))
def test_any_value_round_trips(kind, tmp_path_factory, vals):
    _roundtrip(kind, tmp_path_factory.mktemp("v"), vals)


@given(v=values)
def test_the_cache_codec_round_trips(v):
    assert _same(v, decode(encode(v)))


def test_numpy_scalars_keep_their_value(tmp_path):
    fields = {
        ("u@m", "a"): np.complex64(1 + 2j),
        ("u@m", "b"): np.int64(2**62 + 1),
        ("u@m", "c"): np.uint64(2**63),
    }
    for kind in BACKENDS:
        st_ = _open(kind, tmp_path)
        st_.commit(Batch(add_models={"m": {}}, fields=fields))
        store = st_ if kind == "ram" else open_backend(kind, st_.path, readonly=True)
        assert store.get(("u@m", "a")) == 1 + 2j
        assert store.get(("u@m", "b")) == 2**62 + 1
        assert store.get(("u@m", "c")) == 2**63
