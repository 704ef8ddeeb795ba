"""Edge cases of the runtime: referenced shards rewritten in place, Cancel inside a chunk
(threads and process pools), kernels a process pool cannot receive, device options that
cannot work on this machine, and checkpoint leaves that cannot be referenced lazily."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import types
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from diffract import ConfigError, Session
from diffract._errors import ExtractionError, StoreError
from diffract.kernels import default_registry, make_kernel
from diffract.run.chunks import run_kernels
from diffract.run.report import KernelFailureWarning

# --- kernels (module level: a process pool imports them by name) ---------------------------

#: slow kernels touch a file in this folder when they finish a slice (process pool tests)
MARKER_ENV = "DIFFRACT_TEST_RUNTIME_MARKERS"
SLOW = 0.25


def slow_sum(weights):
    time.sleep(SLOW)
    folder = os.environ.get(MARKER_ENV)
    if folder:
        Path(folder, f"{os.getpid()}-{time.monotonic_ns()}").touch()
    return float(np.asarray(weights, dtype=np.float64).sum())


def _apply(scope, *fields, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFailureWarning)
        return scope.compute.apply(*fields, progress=False, **kw)


def _model(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return {f"l{i:02d}.weight": rng.normal(size=(6, 4)).astype(np.float32) for i in range(n)}


def _sums(s, field):
    """name -> stored value of ``field`` (None where it is not stored)."""
    out = {}
    for sl in s.models.slices():
        try:
            out[sl.name] = s.results.get(field, sl.uid)
        except Exception:
            out[sl.name] = None
    return out


# --- 1. shards of a referenced folder rewritten in place -----------------------------------


def _sharded(folder: Path, a: np.ndarray, b: np.ndarray) -> None:
    from safetensors.numpy import save_file

    folder.mkdir(exist_ok=True)
    save_file({"a.weight": a}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({"b.weight": b}, str(folder / "model-00002-of-00002.safetensors"))
    index = {
        "weight_map": {
            "a.weight": "model-00001-of-00002.safetensors",
            "b.weight": "model-00002-of-00002.safetensors",
        }
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def _rewrite_in_place(path: Path, tensors: dict, metadata=None, keep_times=False) -> None:
    """Overwrite ``path`` without replacing the file (so the folder's stat stays as it was)."""
    from safetensors.numpy import save

    st = path.stat()
    data = save(tensors, metadata=metadata)
    with open(path, "r+b") as fh:
        fh.write(data)
        fh.truncate()
    if keep_times:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def shards(tmp_path):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(16, 8)).astype(np.float32)
    b = rng.normal(size=(16, 8)).astype(np.float32)
    folder = tmp_path / "shards"
    _sharded(folder, a, b)
    return folder, a, b


def test_shard_rewritten_in_place_is_a_clear_error_naming_the_shard(shards, tmp_path):
    folder, _, b = shards
    with Session(backend="sqlite", path=tmp_path / "st") as s:
        s.models.add(str(folder), "m")
        ext = s.models.slice("a.weight").meta["external"]
        assert ext["shard"]["file"] == "model-00001-of-00002.safetensors"
        assert ext["shard"]["key"] == "a.weight" and "index" in ext
        assert _apply(s, "frob_norm").ok  # loaders of the old header are now cached
        dir_mtime = folder.stat().st_mtime_ns
        # same shape, longer header: the old offsets would read garbage
        _rewrite_in_place(
            folder / "model-00001-of-00002.safetensors",
            {"a.weight": np.full((16, 8), 3, np.float32)},
            metadata={"note": "x" * 40},
        )
        assert folder.stat().st_mtime_ns == dir_mtime  # the folder itself did not change
        s.compute.erase(*s.results.fields())  # frob_norm's stored inputs too
        report = _apply(s, "frob_norm")
        assert [f.name for f in report.failures] == ["a.weight"]
        err = report.failures[0].error
        assert "changed since it was added" in err and "model-00001-of-00002" in err
        # the other shard did not change: its slice is computed, from the right data
        assert s.results.get("frob_norm", "b.weight") == pytest.approx(np.linalg.norm(b))
        with pytest.raises(StoreError, match=r"changed since it was added.*model-00001"):
            s.models.weights("a.weight")
    # a fresh session (nothing cached) says the same
    with Session(backend="sqlite", path=tmp_path / "st") as s:
        with pytest.raises(StoreError, match="changed since it was added"):
            s.models.weights("a.weight")
        np.testing.assert_array_equal(s.models.weights("b.weight"), b)


def test_shard_rewritten_with_the_same_size_and_time_is_caught_by_its_header(shards):
    folder, a, _ = shards
    s = Session(profile="ram")
    s.models.add(str(folder), "m")
    np.testing.assert_array_equal(s.models.weights("a.weight"), a)
    shard = folder / "model-00001-of-00002.safetensors"
    size = shard.stat().st_size
    # I32 instead of F32: a header of the same length, data of the same size
    _rewrite_in_place(shard, {"a.weight": np.ones((16, 8), np.int32)}, keep_times=True)
    assert shard.stat().st_size == size
    s._references.clear()  # as in a fresh process
    with pytest.raises(StoreError, match=r"changed since it was added.*header differs"):
        s.models.weights("a.weight")


def test_removed_shard_fails_only_its_slices(shards):
    folder, a, _ = shards
    s = Session(profile="ram")
    s.models.add(str(folder), "m")
    (folder / "model-00002-of-00002.safetensors").unlink()
    report = _apply(s, "frob_norm")
    assert [f.name for f in report.failures] == ["b.weight"]
    assert "is gone" in report.failures[0].error and "model-00002" in report.failures[0].error
    assert s.results.get("frob_norm", "a.weight") == pytest.approx(np.linalg.norm(a))


def test_changed_index_is_a_clear_error(shards):
    folder, _, _ = shards
    s = Session(profile="ram")
    s.models.add(str(folder), "m")
    index = folder / "model.safetensors.index.json"
    index.write_text(index.read_text() + "\n")
    with pytest.raises(StoreError, match=r"changed since it was added.*index"):
        s.models.weights("a.weight")


def test_folder_refs_written_before_shard_stamps_stay_readable(shards):
    """An older store records only the folder's stat: it still reads, and its cache does not
    keep loaders of a shard rewritten in place (they would read at the old offsets)."""
    from diffract.extract.references import ReferenceReader

    reader = ReferenceReader()
    folder, a, b = shards
    s = Session(profile="ram")
    s.models.add(str(folder), "m")

    def old(sl):
        ext = {k: v for k, v in sl.meta["external"].items() if k not in ("shard", "index")}
        return replace(sl, meta={**sl.meta, "external": ext})

    sa, sb = old(s.models.slice("a.weight")), old(s.models.slice("b.weight"))
    np.testing.assert_array_equal(reader.read(sa), a)
    np.testing.assert_array_equal(reader.read(sb), b)
    new = np.full((16, 8), 5, np.float32)
    _rewrite_in_place(
        folder / "model-00001-of-00002.safetensors", {"a.weight": new}, metadata={"n": "x" * 30}
    )
    np.testing.assert_array_equal(reader.read(sa), new)


# --- 2. Cancel inside a chunk --------------------------------------------------------------


def _counting_registry(cancel_after, event, delay=0.02, transient_a=False):
    """``a_val`` (per slice, sets ``event`` on its ``cancel_after``-th call) and ``b_val``
    computed from it."""
    calls = {"a": 0}
    lock = threading.Lock()

    def a_val(weights):
        time.sleep(delay)
        with lock:
            calls["a"] += 1
            if calls["a"] == cancel_after:
                event.set()
        return float(np.asarray(weights, dtype=np.float64).sum())

    def b_val(a_val):
        return 2.0 * a_val

    reg = default_registry().copy()
    reg.register(make_kernel(a_val, outputs="a_val", transient=("a_val",) if transient_a else ()))
    reg.register(make_kernel(b_val, outputs="b_val"))
    return reg, calls


def test_cancel_stops_a_one_chunk_run_after_the_slice_in_progress():
    cancel = threading.Event()
    reg, calls = _counting_registry(3, cancel, delay=0.1)
    s = Session(profile="ram", registry=reg)
    w = _model(12)
    s.models.add(w, "m")
    report = _apply(s, "a_val", cancel=cancel)
    assert report.cancelled and report.chunks == 1
    assert report.computed == 3 and report.skipped == 9
    assert calls["a"] == 3  # the kernel ran on no slice after the one in progress
    assert "9 value(s) skipped" in str(report)
    got = {k: v for k, v in _sums(s, "a_val").items() if v is not None}
    assert got == {n: pytest.approx(float(w[n].astype(np.float64).sum())) for n in sorted(w)[:3]}
    # a second run computes only the rest
    again = _apply(s, "a_val")
    assert again.ok and again.reused == 3 and again.computed == 9


def test_cancel_between_kernels_stores_only_complete_values():
    cancel = threading.Event()
    reg, _ = _counting_registry(12, cancel)  # set by the last a_val call: b_val never runs
    s = Session(profile="ram", registry=reg)
    w = _model(12)
    s.models.add(w, "m")
    report = _apply(s, "a_val", "b_val", cancel=cancel)
    assert report.cancelled and report.computed == 12 and report.skipped == 12
    assert all(v is not None for v in _sums(s, "a_val").values())
    assert all(v is None for v in _sums(s, "b_val").values())
    again = _apply(s, "a_val", "b_val")
    assert again.ok and again.computed == 12 and again.reused == 12
    b = _sums(s, "b_val")
    assert b == {n: pytest.approx(2 * float(w[n].astype(np.float64).sum())) for n in w}


def test_cancel_with_a_transient_intermediate_stores_nothing_half_made():
    cancel = threading.Event()
    reg, _ = _counting_registry(4, cancel, transient_a=True)
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(12), "m")
    report = _apply(s, "b_val", cancel=cancel)
    assert report.cancelled and report.computed == 0 and report.skipped == 12
    assert s.results.fields() == []


def test_cancel_with_thread_workers():
    cancel = threading.Event()
    reg, calls = _counting_registry(3, cancel, delay=0.1)
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(12), "m")
    report = _apply(s, "a_val", cancel=cancel, workers=2)
    assert report.cancelled
    assert 3 <= report.computed <= 4 and report.computed + report.skipped == 12
    assert report.computed == calls["a"]


def test_cancel_set_before_the_run_computes_nothing():
    cancel = threading.Event()
    cancel.set()
    reg, calls = _counting_registry(99, threading.Event())
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(5), "m")
    report = _apply(s, "a_val", "b_val", cancel=cancel)
    assert report.cancelled and report.computed == 0 and report.skipped == 10
    assert calls["a"] == 0


def test_run_kernels_stops_when_asked_and_leaves_the_rest_out():
    reg, _ = _counting_registry(99, threading.Event(), delay=0)
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(4), "m")
    chunk = s.models.slices()
    kernels = [reg.kernel("a_val"), reg.kernel("b_val")]
    values = {sl.uid: {"weights": np.ones((6, 4))} for sl in chunk}
    plan_of = {sl.uid: {"a_val", "b_val"} for sl in chunk}
    opts_of = {"a_val": {}, "b_val": {}}
    asked = iter([False, False, True])  # before a_val, before slice 0, before slice 1
    calls = run_kernels(chunk, kernels, plan_of, values, opts_of, cancelled=lambda: next(asked))
    assert calls == {"a_val": 1}
    assert values[chunk[0].uid]["a_val"] == 24.0
    assert all("a_val" not in values[sl.uid] for sl in chunk[1:])
    assert all("b_val" not in v for v in values.values())


def test_cancel_with_a_process_pool_stops_the_running_chunks(tmp_path, monkeypatch):
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv(MARKER_ENV, str(markers))
    reg = default_registry().copy()
    reg.register(make_kernel(slow_sum, outputs="slow_sum"))
    s = Session(profile="ram", registry=reg)
    w = _model(16)  # two chunks of 8 slices, 2 s each
    s.models.add(w, "m")
    cancel = threading.Event()
    done_at_cancel = []

    def watch():  # cancel once a worker has finished its first slice
        deadline = time.monotonic() + 60
        while not any(markers.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.01)
        done_at_cancel.append(len(list(markers.iterdir())))
        cancel.set()

    threading.Thread(target=watch, daemon=True).start()
    report = _apply(s, "slow_sum", cancel=cancel, executor="processes", workers=2)
    assert report.cancelled
    # slices the workers finished after the cancel: at most the one in progress in each of
    # the 2 workers (and one each started while the cancel was being set), not whole chunks
    done_after = len(list(markers.iterdir())) - done_at_cancel[0]
    assert done_after <= 2 * 2, (done_at_cancel, done_after)
    assert 1 <= report.computed < 16 and report.computed + report.skipped == 16
    got = {k: v for k, v in _sums(s, "slow_sum").items() if v is not None}
    assert len(got) == report.computed
    for name, v in got.items():
        assert v == pytest.approx(float(w[name].astype(np.float64).sum()))


# --- 3. kernels a process pool cannot receive ----------------------------------------------


def test_processes_refuse_a_lambda_kernel_with_a_config_error():
    reg = default_registry().copy()
    reg.register(make_kernel(lambda weights: 1.0, outputs="lam", name="lam"))
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(2), "m")
    with pytest.raises(ConfigError, match=r"kernel 'lam'.*cannot be sent.*executor='threads'"):
        _apply(s, "lam", executor="processes", workers=2)
    assert _apply(s, "lam").ok  # threads run it


def test_processes_refuse_a_kernel_of_an_interactive_main(monkeypatch):
    fake_main = types.ModuleType("__main__")  # like python -c or a notebook: no file, no spec

    def nb_kernel(weights):
        return 1.0

    nb_kernel.__module__ = "__main__"
    nb_kernel.__qualname__ = "nb_kernel"
    fake_main.nb_kernel = nb_kernel
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    reg = default_registry().copy()
    reg.register(make_kernel(nb_kernel, outputs="nb"))
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(2), "m")
    with pytest.raises(ConfigError, match=r"'nb_kernel'.*__main__ of an interactive session"):
        _apply(s, "nb", executor="processes", workers=2)


def test_processes_with_a_kernel_defined_in_python_c(tmp_path):
    code = (
        "import numpy as np, diffract\n"
        "from diffract import Session\n"
        "@diffract.kernel(outputs='my_max', replace=True)\n"
        "def my_max(weights):\n"
        "    return float(np.abs(weights).max())\n"
        "s = Session(profile='ram')\n"
        "s.models.add({'w': np.ones((4, 4), np.float32)}, 'm')\n"
        "try:\n"
        "    s.compute.apply('my_max', executor='processes', workers=2, progress=False)\n"
        "except Exception as e:\n"
        "    print('ERR', type(e).__name__, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert "ERR ConfigError" in out.stdout, out.stdout + out.stderr
    assert "my_max" in out.stdout and "BrokenProcessPool" not in out.stdout + out.stderr


# --- 4. devices that cannot work here --------------------------------------------------------


@pytest.mark.parametrize("device", ["cuda", "torch:cuda", "jax:gpu", "torch:cdua"])
def test_a_device_that_cannot_work_is_one_config_error_before_any_work(device):
    from diffract.kernels.device import available_accelerators

    if available_accelerators() and device != "torch:cdua":
        pytest.skip("this machine has an accelerator")
    s = Session(profile="ram")
    s.models.add(_model(3), "m")
    with pytest.raises(ConfigError, match=rf"device='{device}'.*available"):
        s.compute.apply("stable_rank", device=device, progress=False)
    assert s.kernel_calls == {} and s.results.fields() == []


def test_auto_device_falls_back_to_the_cpu():
    from diffract.kernels.device import available_accelerators, resolve_device

    if available_accelerators():
        pytest.skip("this machine has an accelerator")
    assert resolve_device("auto") == "cpu"
    s = Session(profile="ram")
    s.models.add(_model(3), "m")
    assert _apply(s, "stable_rank", device="auto").ok


def test_svd_device_cuda_without_a_gpu_is_one_config_error():
    from diffract.kernels.device import available_accelerators

    if "torch:cuda" in available_accelerators():
        pytest.skip("this machine has a CUDA GPU")
    s = Session(profile="ram")
    s.models.add(_model(3), "m")
    with pytest.raises(ConfigError, match="svd_device='cuda'"):
        s.compute.apply("weights_lsvs", svd_device="cuda", progress=False)
    assert s.kernel_calls == {}


# --- 5. leaves of a file that cannot be referenced lazily ----------------------------------


def test_nested_pt_checkpoint_is_added_without_copy_weights(tmp_path):
    import torch

    path = tmp_path / "nested.pt"
    top = torch.randn(8, 4)
    inner = torch.randn(6, 4)
    torch.save({"top.weight": top, "block": {"inner.weight": inner}}, path)
    s = Session(profile="ram")
    slices = s.models.add(str(path), "m")  # was: "copy_weights=False needs a checkpoint file"
    names = {sl.name for sl in slices}
    assert "top.weight" in names
    info = s.models.info("m")
    assert info["weights"] in ("referenced", "mixed")
    for sl in slices:
        assert s.models.weights(sl.uid).shape == sl.shape


@pytest.fixture
def half_lazy(monkeypatch, tmp_path):
    """A checkpoint file whose extraction gives one leaf that is not a LazyArray."""
    from safetensors.numpy import save_file

    import diffract.extract as extract_mod

    rng = np.random.default_rng(5)
    w = {"a.weight": rng.normal(size=(6, 4)), "b.weight": rng.normal(size=(5, 4))}
    path = tmp_path / "m.safetensors"
    save_file({k: v.astype(np.float32) for k, v in w.items()}, str(path))
    real = extract_mod.extract

    def extract(model, filter_spec=None, **options):
        ex = real(model, filter_spec, **options)
        for leaf in ex.leaves:
            if leaf.name == "b.weight":
                leaf.array = leaf.array.load().copy()
        return ex

    monkeypatch.setattr(extract_mod, "extract", extract)
    return path, w


def test_leaves_that_cannot_be_referenced_are_copied_and_recorded(half_lazy):
    path, w = half_lazy
    s = Session(profile="ram")
    s.models.add(str(path), "m")
    info = s.models.info("m")
    assert info["weights"] == "mixed" and info["copied_leaves"] == ["b.weight"]
    assert "copied into the store" in info["weights_note"]
    assert "external" in s.models.slice("a.weight").meta
    assert "external" not in s.models.slice("b.weight").meta
    for name in w:
        np.testing.assert_allclose(s.models.weights(name), w[name].astype(np.float32))


def test_copy_weights_false_names_the_leaves_that_cannot_be_referenced(half_lazy):
    path, _ = half_lazy
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"copy_weights=False.*'b\.weight'") as err:
        s.models.add(str(path), "m", copy_weights=False)
    assert "in-memory" not in str(err.value)
    with pytest.raises(ExtractionError, match=r"in-memory models and \.onnx files"):
        s.models.add({"w": np.ones((3, 3))}, "x", copy_weights=False)
