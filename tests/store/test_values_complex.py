"""Issue 18, point 11 (remainder): complex values are storable and exportable. A Python
``complex`` scalar passes the store's value rule, complex scalars and arrays (NaN and infinite
parts included) round-trip on every backend (at write, reopened, after a compaction and
through ``store copy``), a kernel returning one stores it, and the JSON exports write
``{"real": ..., "imag": ...}`` (docs/storage.md, "Value kinds")."""

from __future__ import annotations

import json
import math
import uuid
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import diffract
from diffract import Session
from diffract._vocab.arrays import storable_error
from diffract.kernels import default_registry
from diffract.store import BACKENDS, Batch, open_backend
from diffract.store._copy import copy_store

scalars = st.complex_numbers(allow_nan=True, allow_infinity=True)
arrays = st.builds(
    lambda dt, shape, seed: _complex_array(dt, shape, seed),
    st.sampled_from([np.complex64, np.complex128]),
    # 0-d arrays read back as scalars on the disk backends, of every dtype (see the report)
    st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    st.integers(0, 2**32 - 1),
)


def _complex_array(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if a.size:
        a.flat[0] = complex(math.nan, -math.inf)  # special parts in every array
    return a


def _same_part(a: float, b: float) -> bool:
    if math.isnan(a):
        return math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a.real, b.real, equal_nan=True)
            and np.array_equal(a.imag, b.imag, equal_nan=True)
        )
    return isinstance(b, complex) and _same_part(a.real, b.real) and _same_part(a.imag, b.imag)


def _open(kind, tmp):
    if kind == "ram":
        return open_backend("ram", None)
    suffix = ".sqlite" if kind == "sqlite" else ""
    return open_backend(kind, tmp / f"s-{uuid.uuid4().hex}{suffix}")


def _reads(kind, tmp, fields):
    """Each store that must give ``fields`` back: the one written, then (on disk) that store
    reopened, compacted, and copied to each disk backend."""
    written = _open(kind, tmp)
    written.commit(Batch(add_models={"m": {}}, fields=fields))
    yield written
    if kind == "ram":
        return
    yield open_backend(kind, written.path, readonly=True)
    if hasattr(written, "compact"):
        written.compact()
        yield open_backend(kind, written.path, readonly=True)
    for dst_kind in ("hdf5", "sqlite", "zarr"):
        dst = _open(dst_kind, tmp)
        copy_store(open_backend(kind, written.path, readonly=True), dst)
        yield dst
        dst.close()
    written.close()


def _roundtrip(kind, tmp, vals):
    fields = {(f"uid{i}@m", "z"): v for i, v in enumerate(vals)}
    for store in _reads(kind, tmp, fields):
        got = {key: store.get(key) for key in fields}
        bad = {key: (v, got[key]) for key, v in fields.items() if not _same(v, got[key])}
        assert not bad, (kind, type(store).__name__, bad)


def test_a_python_complex_is_storable():
    assert storable_error(1 + 2j) is None
    assert storable_error(complex(math.nan, math.inf)) is None
    assert storable_error(np.ones(3, dtype=np.complex64)) is None
    assert storable_error(object()) == "a value of type object"  # the rule still refuses


@pytest.mark.parametrize("kind", BACKENDS)
def test_special_complex_values_round_trip(kind, tmp_path):
    vals = [
        1 - 2j,
        complex(-0.0, 0.0),
        complex(math.inf, -math.inf),
        complex(math.nan, 1.0),
        np.array([], dtype=np.complex64),
        _complex_array(np.complex128, (2, 3), 0),
    ]
    _roundtrip(kind, tmp_path, vals)


@pytest.mark.parametrize("kind", BACKENDS)
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(vals=st.lists(st.one_of(scalars, arrays), min_size=1, max_size=5))
def test_any_complex_value_round_trips(kind, tmp_path_factory, vals):
    _roundtrip(kind, tmp_path_factory.mktemp("c"), vals)


W = {"a.weight": np.arange(12.0).reshape(4, 3), "b.weight": np.ones((2, 5))}


@pytest.fixture(scope="module")
def session():
    reg = default_registry().copy()

    @diffract.kernel(outputs="top_eig", min_ndim=2, registry=reg)
    def top_eig(weights):
        """A Python complex: the largest eigenvalue of W^T W + i * the row count."""
        return complex(float(np.linalg.norm(weights, 2) ** 2), float(weights.shape[0]))

    @diffract.kernel(outputs="phases", min_ndim=2, registry=reg)
    def phases(weights):
        """A complex array: exp(i * the first row)."""
        return np.exp(1j * weights[0])

    s = Session(profile="ram", registry=reg)
    s.models.add(W, model_id="m")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no failure: both values are stored
        report = s.compute.apply("top_eig", "phases", progress=False)
    assert report.ok and not report.failures
    return s


def test_a_kernel_returning_complex_stores_it(session):
    for name, w in W.items():
        z = session.results.get("top_eig", name)
        assert isinstance(z, complex)
        assert z == pytest.approx(complex(np.linalg.svd(w, compute_uv=False)[0] ** 2, w.shape[0]))
        np.testing.assert_array_equal(session.results.get("phases", name), np.exp(1j * w[0]))


def test_json_exports_write_real_and_imag(session):
    rows = json.loads(session.results.export_table("top_eig", "phases", export_format="json"))
    for r in rows:
        w = W[r["name"]]
        assert set(r["top_eig"]) == {"real", "imag"} and r["top_eig"]["imag"] == w.shape[0]
        got = np.asarray(r["phases"]["real"]) + 1j * np.asarray(r["phases"]["imag"])
        np.testing.assert_allclose(got, np.exp(1j * w[0]), rtol=1e-15)
    d = json.loads(session.results.export_metrics("top_eig", "phases", export_format="json"))
    uid = {s.name: s.uid for s in session.models.slices()}
    entry = d[uid["b.weight"]]["fields"]
    assert entry["top_eig"] == {"real": pytest.approx(10.0), "imag": 2.0}
    assert entry["phases"]["real"] == [math.cos(1.0)] * 5
    assert entry["phases"]["imag"] == [math.sin(1.0)] * 5


def test_table_exports_keep_complex_values(session):
    df = session.results.export_table("top_eig", "phases", export_format="pandas")
    assert df["top_eig"].map(type).tolist() == [complex, complex]
    pl = session.results.export_table("top_eig", "phases", export_format="polars")
    assert pl.height == 2 and pl.columns[-2:] == ["top_eig", "phases"]
