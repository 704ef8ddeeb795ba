"""Bad input gets a clear error up front, naming the problem, and nothing stored is lost.

Covers: complex and other non-numeric weight dtypes (at ``models.add``), safetensors headers
that do not match their data, kernel option values (type, range, NaN; in ``apply`` and
``configure``), run settings (workers, memory_budget, lock_timeout), non-bool flags, and
unclear type errors of the public API (field names, meta, model dict keys, filters).
"""

from __future__ import annotations

import json
import struct
import warnings

import numpy as np
import pytest

from diffract import (
    ConfigError,
    DiffractError,
    ExtractionError,
    FilterChain,
    FilterError,
    KernelFailureWarning,
    Session,
)
from diffract._errors import InvalidArgumentError, OptionValueError


@pytest.fixture
def ram(rng):
    s = Session(profile="ram")
    s.models.add(
        {
            "a": rng.standard_normal((32, 16)),
            "b": rng.standard_normal((20, 10)),
            "bias": rng.standard_normal(5),
        },
        "m",
    )
    return s


@pytest.fixture
def disk(tmp_path, rng):
    """A store on disk holding model "m" with frob_norm computed."""
    s = Session(profile="sqlite", path=tmp_path / "store.sqlite")
    s.models.add({"a": rng.standard_normal((8, 4)), "c": rng.standard_normal((6, 5))}, "m")
    s.compute.apply("frob_norm", progress=False)
    yield s
    s.close()


def _frob(s):
    return s.results.export_table("frob_norm", export_format="dict")["frob_norm"]


# --- A: complex weights -------------------------------------------------------------------


def test_complex_weights_are_refused_at_add():
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"'w'.*complex128"):
        s.models.add({"w": np.array([[1 + 1j, 0], [0, 1j]])}, "c")
    assert s.models.ids() == []


def test_complex_weights_refused_with_filter_true_and_nothing_stored(disk):
    before = _frob(disk)
    with pytest.raises(ExtractionError, match=r"'z'.*complex64"):
        disk.models.add(
            {"ok": np.ones((3, 3), np.float32), "z": np.ones((3, 3), np.complex64)},
            "c",
            filter_spec=True,
        )
    assert disk.models.ids() == ["m"]
    assert _frob(disk) == before


# --- B: safetensors headers against the data --------------------------------------------


def _write_st(path, header: dict, data: bytes):
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return str(path)


def test_safetensors_header_must_match_data(tmp_path):
    s = Session(profile="ram")
    cases = {
        "zero_off": ({"w": {"dtype": "F32", "shape": [8, 4], "data_offsets": [0, 0]}}, b""),
        "lying": (
            {"w": {"dtype": "F32", "shape": [1000000, 1000000], "data_offsets": [0, 16]}},
            b"\0" * 16,
        ),
        "odd": ({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 63]}}, b"\0" * 64),
        "backwards": (
            {"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}},
            b"\0" * 8,
        ),
        "past_end": ({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}, b"\0"),
        # a dtype safetensors does not define (C64, U64, F4... are skipped, not refused)
        "dtype": ({"w": {"dtype": "C128", "shape": [2], "data_offsets": [0, 32]}}, b"\0" * 32),
        "neg": ({"w": {"dtype": "F32", "shape": [-2, -8], "data_offsets": [0, 64]}}, b"\0" * 64),
    }
    for label, (header, data) in cases.items():
        path = _write_st(tmp_path / f"{label}.safetensors", header, data)
        with pytest.raises(ExtractionError) as info:
            s.models.add(path, label)
        msg = str(info.value)
        assert f"{label}.safetensors" in msg and "'w'" in msg, (label, msg)
    assert s.models.ids() == []


def test_safetensors_valid_file_and_zero_element_tensor(tmp_path):
    w = np.arange(32, dtype=np.float32).reshape(8, 4)
    header = {
        "w": {"dtype": "F32", "shape": [8, 4], "data_offsets": [0, 128]},
        "empty": {"dtype": "F32", "shape": [0, 4], "data_offsets": [128, 128]},
    }
    path = _write_st(tmp_path / "ok.safetensors", header, w.tobytes())
    from diffract.extract.safetensors import safetensors_leaves

    leaves = safetensors_leaves(path)
    assert leaves["empty"].load().shape == (0, 4)
    np.testing.assert_array_equal(leaves["w"].load(), w)
    s = Session(profile="ram")
    header = {"w": header["w"]}
    path = _write_st(tmp_path / "ok2.safetensors", header, w.tobytes())
    s.models.add(path, "m")
    np.testing.assert_array_equal(s.models.weights("w"), w)


def test_safetensors_bf16_still_accepted(tmp_path):
    bits = (np.arange(8, dtype=np.float32).view(np.uint32) >> 16).astype("<u2")
    header = {"w": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [0, 16]}}
    path = _write_st(tmp_path / "bf.safetensors", header, bits.tobytes())
    s = Session(profile="ram")
    (info,) = s.models.add(path, "m")
    assert info.dtype == "bfloat16"
    np.testing.assert_array_equal(s.models.weights("w"), np.arange(8.0).reshape(2, 4))


# --- C: kernel option values ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "option", "value", "words"),
    [
        ("pl_alpha", "fit_evals_thresh", [1], "number"),
        ("pl_ks", "fit_evals_thresh", "abc", "number"),
        ("expon_lambda", "fit_evals_thresh", float("nan"), "finite"),
        ("matrix_rank", "rtol", "x", "number or None"),
        ("hard_rank", "rtol", "x", "a number"),
        ("pl_warning", "over_trained_alpha", "two", "number"),
        ("esd_max", "spectrum_threads", "many", "int"),
        ("esd_max", "spectrum_threads", -3, ">= 0"),
        ("esd_max", "spectrum_threads", True, "int"),
        ("esd_max", "spectrum_threads", 2.5, "int"),
        ("pl_alpha", "fit_method", 3, "string"),
        ("pl_alpha", "fit_method", "nope", "one of"),
        ("spectral_norm", "precision", "float16", "one of"),
        ("esd", "esd_scale", "bogus", "one of"),
        ("relative_change", "reference", 5, "string or None"),
    ],
)
def test_bad_option_values_raise_before_any_work(ram, field, option, value, words):
    ram.compute.apply("frob_norm", progress=False)
    before = _frob(ram)
    fields_before = ram.results.fields()
    with pytest.raises(OptionValueError) as info:
        ram.compute.apply(field, **{option: value}, progress=False)
    msg = str(info.value)
    assert repr(option) in msg and "kernel" in msg and words in msg, msg
    assert isinstance(info.value, (TypeError, ValueError)) and isinstance(info.value, DiffractError)
    assert ram.results.fields() == fields_before  # nothing computed or stored
    assert _frob(ram) == before


def test_good_option_values_still_accepted(ram):
    ok = [
        ("hard_rank", {"rtol": 0.01}),
        ("hard_rank", {"rtol": np.float32(0.01)}),
        ("matrix_rank", {"rtol": None}),
        ("pl_alpha", {"fit_evals_thresh": 0}),  # int where float expected
        ("pl_alpha", {"fit_evals_thresh": np.float64(1e-6), "fit_method": "clauset"}),
        ("esd_max", {"spectrum_threads": np.int64(1)}),
    ]
    for field, opts in ok:
        ram.compute.erase(field)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = ram.compute.apply(field, **opts, progress=False)
        # accepted means the kernel ran with it: no failure, a value for each matrix
        assert report.failures == [], (field, opts, report.failures)
        assert not [w for w in caught if issubclass(w.category, KernelFailureWarning)]
        assert report.computed >= 2, (field, opts, report)
        for name in ("a", "b"):
            value = ram.results.get(field, name)
            assert value is not None and np.all(np.isfinite(value)), (field, opts, name, value)


def test_kernel_options_values_are_checked(ram):
    with pytest.raises(OptionValueError, match=r"kernel_options must be a dict"):
        ram.compute.apply("frob_norm", kernel_options=[1], progress=False)
    with pytest.raises(OptionValueError, match=r"kernel_options\['frob_norm'\] must be a dict"):
        ram.compute.apply("frob_norm", kernel_options={"frob_norm": 5}, progress=False)
    with pytest.raises(OptionValueError, match=r"'rtol' of kernel 'hard_rank'"):
        ram.compute.apply("hard_rank", kernel_options={"hard_rank": {"rtol": "x"}}, progress=False)
    assert ram.results.fields() == []


def test_configure_checks_values_and_keeps_nothing_bad(ram):
    with pytest.raises(OptionValueError, match=r"'fit_method'.*string"):
        ram.compute.configure(fit_method=3)
    with pytest.raises(OptionValueError, match=r"'fit_method'.*one of"):
        ram.compute.configure("pl_alpha", fit_method="nope")
    with pytest.raises(OptionValueError, match=r"'rtol' of kernel 'hard_rank'"):
        ram.compute.configure("hard_rank", rtol="x")
    assert ram.options == {} and ram.kernel_options == {}
    # later runs are not broken by a rejected configure
    assert ram.compute.configure(fit_method="clauset") == {"fit_method": "clauset"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = ram.compute.apply("pl_alpha", progress=False)
    assert report.failures == [] and report.computed >= 2


def test_custom_kernel_option_kinds_follow_default_and_annotation():
    from diffract.kernels import KernelRegistry, default_registry, make_kernel

    def scaled(weights, scale=1.0, flag=False, label: str | None = None):
        return float(np.abs(weights).sum() * scale)

    reg = default_registry().copy()
    reg.register(make_kernel(scaled))
    s = Session(profile="ram", registry=reg)
    assert isinstance(reg, KernelRegistry)
    s.models.add({"w": np.ones((3, 3))}, "m")
    for bad, words in (
        ({"scale": "2"}, "'scale' of kernel 'scaled' must be a number"),
        ({"scale": True}, "'scale'"),
        ({"flag": "no"}, "'flag' of kernel 'scaled' must be a bool"),
        ({"flag": 1}, "'flag'"),
        ({"label": 3}, "'label' of kernel 'scaled' must be a string or None"),
    ):
        with pytest.raises(OptionValueError, match=words):
            s.compute.apply("scaled", **bad, progress=False)
    s.compute.apply("scaled", scale=2, flag=np.bool_(True), label="x", progress=False)
    assert s.results.get("scaled", "w") == 18.0


# --- C/D: run settings -------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, -2, "4", True, 2.5])
def test_bad_workers_in_apply(ram, workers):
    with pytest.raises(ConfigError, match="workers must be an int >= 1"):
        ram.compute.apply("frob_norm", workers=workers, progress=False)
    assert ram.results.fields() == []


@pytest.mark.parametrize("budget", [float("nan"), float("inf"), 0, -5, True, "abc"])
def test_bad_memory_budget_in_apply(ram, budget):
    with pytest.raises(ConfigError, match="memory_budget"):
        ram.compute.apply("frob_norm", memory_budget=budget, progress=False)
    assert ram.results.fields() == []


@pytest.mark.parametrize("budget", [float("nan"), float("inf"), -1])
def test_bad_memory_budget_in_session(budget):
    with pytest.raises(ConfigError, match="memory_budget"):
        Session(profile="ram", memory_budget=budget)


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, True, "soon"])
def test_bad_lock_timeout(tmp_path, timeout):
    with pytest.raises(ConfigError, match="lock_timeout"):
        Session(profile="local", path=tmp_path / "s", lock_timeout=timeout)
    with pytest.raises(ConfigError, match="lock_timeout"):
        Session(profile="ram", lock_timeout=timeout)


def test_good_settings_still_accepted(tmp_path):
    s = Session(profile="ram", memory_budget="1GB", workers=2, lock_timeout=0.5)
    assert s.memory_budget == 1024**3 and s.workers == 2
    from diffract._core.config import resolve

    cfg = resolve(cwd=tmp_path, env={"DIFFRACT_WORKERS": "3", "DIFFRACT_LOCK_TIMEOUT": "2"})
    assert cfg["workers"] == 3 and cfg["lock_timeout"] == 2.0


# --- E: non-numeric leaves kept by filter_spec ----------------------------------------------


@pytest.mark.parametrize(
    ("leaf", "dtype_words"),
    [
        (np.array([[1, 2], [3, 4]], dtype=object), "object"),
        (np.array([["a", "b"]]), "<U1"),
        (np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[D]"), "datetime64[D]"),
        (np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")]), "dtype"),
    ],
)
@pytest.mark.parametrize("profile", ["ram", "local", "sqlite", "zarr"])
def test_non_numeric_leaves_refused_on_every_backend(tmp_path, rng, profile, leaf, dtype_words):
    kw = {} if profile == "ram" else {"path": tmp_path / "store"}
    with Session(profile=profile, **kw) as s:
        s.models.add({"w": rng.standard_normal((4, 3))}, "keep")
        with pytest.raises(ExtractionError) as info:
            s.models.add({"good": np.ones((2, 2)), "bad": leaf}, "x", filter_spec=True)
        assert "'bad'" in str(info.value) and dtype_words in str(info.value)
        assert s.models.ids() == ["keep"]
        assert len(s.models.slices()) == 1


def test_numeric_dtypes_still_accepted_with_filter_true():
    s = Session(profile="ram")
    got = s.models.add(
        {
            "i": np.ones((3, 3), np.int32),
            "u": np.ones((3, 3), np.uint8),
            "b": np.ones((3, 3), bool),
            "h": np.ones((3, 3), np.float16),
        },
        "m",
        filter_spec=True,
    )
    assert sorted(x.dtype for x in got) == ["bool", "float16", "int32", "uint8"]


# --- F: non-bool flags --------------------------------------------------------------------


def test_replace_must_be_a_bool_and_nothing_is_lost(disk):
    before = _frob(disk)
    for bad in ("no", 0, 1, None, "False"):
        with pytest.raises(InvalidArgumentError, match="replace") as info:
            disk.models.add({"a": np.ones((2, 2))}, "m", replace=bad)
        assert isinstance(info.value, TypeError)
    assert _frob(disk) == before
    assert "frob_norm" in disk.results.fields()
    # numpy.bool_ is a bool
    disk.models.add({"a": np.ones((2, 2))}, "m2", replace=np.bool_(False))


def test_readonly_and_copy_weights_must_be_bools(tmp_path):
    with pytest.raises(InvalidArgumentError, match="readonly"):
        Session(profile="ram", readonly="no")
    assert Session(profile="ram", readonly=np.bool_(False)).readonly is False
    s = Session(profile="ram")
    with pytest.raises(InvalidArgumentError, match="copy_weights"):
        s.models.add({"a": np.ones((2, 2))}, "m", copy_weights="yes")
    assert s.models.ids() == []


def test_progress_must_be_bool_none_or_callable(ram):
    with pytest.raises(InvalidArgumentError, match="progress"):
        ram.compute.apply("frob_norm", progress="yes")
    assert ram.results.fields() == []


# --- G: clearer type errors ---------------------------------------------------------------


def test_export_metrics_field_names(disk):
    with pytest.raises(InvalidArgumentError, match=r"field names must be strings, got int: 3"):
        disk.results.export_table(3)
    with pytest.raises(InvalidArgumentError, match="separate arguments"):
        disk.results.export_table(["frob_norm"])
    with pytest.raises(InvalidArgumentError, match="reference"):
        disk.results.export_table("frob_norm", reference=5)
    assert len(_frob(disk)) == 2


def test_erase_field_names_and_nothing_erased(disk):
    before = _frob(disk)
    with pytest.raises(InvalidArgumentError, match=r"erase.*got int: 3"):
        disk.compute.erase(3)
    with pytest.raises(InvalidArgumentError, match="separate arguments"):
        disk.compute.erase(["frob_norm"])
    assert _frob(disk) == before


def test_apply_field_names(ram):
    with pytest.raises(InvalidArgumentError, match="got int: 3"):
        ram.compute.apply(3, progress=False)
    with pytest.raises(InvalidArgumentError, match="separate arguments"):
        ram.compute.apply(["frob_norm"], progress=False)


def test_session_path_type():
    with pytest.raises(ConfigError, match="path"):
        Session(path=5)


def test_meta_must_be_json_ready(disk):
    for bad, words in (
        ([1, 2], "meta must be a dict"),
        ("abc", "meta must be a dict"),
        ({"f": object()}, r"meta\['f'\] is not JSON-serializable"),
        ({"when": np.datetime64("2020-01-01")}, r"meta\['when'\]"),
        ({"nested": {"x": {1, 2}}}, r"meta\['nested'\]\['x'\]"),
        ({3: "x"}, "keys must be strings"),
    ):
        with pytest.raises(InvalidArgumentError, match=words):
            disk.models.add({"a": np.ones((2, 2))}, "x", meta=bad)
    assert disk.models.ids() == ["m"]
    disk.models.add({"a": np.ones((2, 2))}, "x", meta={"step": np.int64(3), "lr": (1e-3, 2)})
    assert disk.models.info("x")["meta"] == {"step": 3, "lr": [0.001, 2]}


def test_meta_same_in_ram():
    s = Session(profile="ram")
    s.models.add({"a": np.ones((2, 2))}, "x", meta={"step": np.int64(3)})
    assert s.models.info("x")["meta"] == {"step": 3}
    assert type(s.models.info("x")["meta"]["step"]) is int


def test_model_dict_keys_must_be_strings():
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"parameter names must be strings.*key 1"):
        s.models.add({1: np.ones((2, 2)), (2, 3): np.ones((2, 2))}, "k")
    with pytest.raises(ExtractionError, match=r"parameter names must be strings.*\(2, 3\)"):
        s.models.add({"a": {(2, 3): np.ones((2, 2))}}, "k")
    assert s.models.ids() == []


def test_filter_criteria_types(ram):
    with pytest.raises(FilterError, match="param_names must be a list of strings, got bytes"):
        ram.filter(param_names=b"abc")
    with pytest.raises(FilterError, match="model_ids must be a list of strings, got dict"):
        ram.filter(model_ids={"m": 1})
    assert len(ram.filter(param_names={"a"})) == 1


def test_filter_chain_from_bad_json():
    with pytest.raises(FilterError, match="not valid JSON"):
        FilterChain.from_json("{bad")
    with pytest.raises(FilterError, match="object or a list of objects"):
        FilterChain.from_json("5")
    assert FilterChain.from_json(b"[]").is_empty
    chain = FilterChain.from_json('{"param_names": ["a"]}')
    assert FilterChain.from_json(chain.to_json()) == chain
