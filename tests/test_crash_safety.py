"""Stores survive SIGKILL at random moments of a real ``apply``, and readers in other
processes never fail or see partial values while a writer works.

Each trial starts a writer process that adds a model (once), then loops: apply a set of
fields chunk by chunk, erase them, apply again. After every committed chunk it prints the
store's keys. The parent kills it with SIGKILL at a random moment, reopens the store, and
checks that every key reported before the kill is present and that every stored value
equals the reference computed in memory (no half-written field).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from diffract import Session

FIELDS = ("frob_norm", "spectral_norm", "stable_rank", "weights_std", "esd")
BACKENDS = ["hdf5", "sqlite", "zarr", "hybrid"]
TRIALS = 30


def model_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {f"layers.{i}.weight": rng.normal(size=(48 + 4 * i, 32)).astype(np.float32) for i in range(16)}


WRITER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_crash_safety import FIELDS, model_weights
    from diffract import Session

    s = Session(backend={backend!r}, path={path!r}, memory_budget=1, lock_timeout=10)
    if "m" not in s.models.ids():
        s.models.add(model_weights(), model_id="m")

    def report(ev=None):
        if ev is None or ev.stage == "chunk":
            keys = sorted("|".join(k) for k in s.store.keys())
            print("KEYS " + json.dumps(keys), flush=True)

    print("READY", flush=True)
    report()
    while True:
        s.compute.apply(*FIELDS, progress=report)
        s.compute.erase(*FIELDS)
        report()
    """
)


def reference_values() -> dict[tuple[str, str], object]:
    s = Session(profile="ram")
    s.models.add(model_weights(), model_id="m")
    s.compute.apply(*FIELDS, progress=False)
    return {k: s.store.get(k) for k in s.store.keys()}


def same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


def _store_path(backend: str, tmp_path) -> str:
    return str(tmp_path / ("store.sqlite" if backend == "sqlite" else "store"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_at_random_moments_loses_nothing(backend, tmp_path):
    ref = reference_values()
    path = _store_path(backend, tmp_path)
    rng = np.random.default_rng(12345)
    tests_dir = os.path.dirname(__file__)
    code = WRITER.format(tests=tests_dir, backend=backend, path=path)
    losses = wrong = checked = 0
    for trial in range(TRIALS):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        reported: list[str] = []
        lines: list[str] = []
        ready = threading.Event()

        def pump(proc=proc, lines=lines, ready=ready):
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("READY"):
                    ready.set()

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        assert ready.wait(60), f"writer did not start: {proc.stderr.read() if proc.poll() is not None else ''}"
        time.sleep(float(rng.uniform(0.0, 1.2)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t.join(5)
        for line in lines:
            if line.startswith("KEYS ") and line.endswith("\n"):
                reported = json.loads(line[5:])
        s = Session(backend=backend, path=path, readonly=True)
        stored = {k: s.store.get(k) for k in s.store.keys()}
        for key in reported:
            owner, fld = key.split("|")
            checked += 1
            if (owner, fld) not in stored:
                losses += 1
        for k, v in stored.items():
            if not same(v, ref[k]):
                wrong += 1
        s.close()
    print(f"\n[crash-safety] backend={backend}: {TRIALS} SIGKILL trials, {checked} reported values checked, {losses} lost, {wrong} wrong")
    assert losses == 0 and wrong == 0
    assert checked > 0


READER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_crash_safety import reference_values, same
    from diffract import Session

    ref = reference_values()
    deadline = time.monotonic() + {seconds}
    reads = errors = partial = snapshots = 0
    first_error = None
    s = None
    while time.monotonic() < deadline:
        try:
            if s is None:
                s = Session(backend={backend!r}, path={path!r}, readonly=True)
            s.store.refresh()
            for k in list(s.store.keys()):
                v = s.store.get(k)
                reads += 1
                if not same(v, ref[k]):
                    partial += 1
            snapshots += 1
        except Exception as exc:
            if "no diffract store" in str(exc):
                time.sleep(0.01)
                continue
            errors += 1
            first_error = first_error or repr(exc)
    print(json.dumps({{"reads": reads, "errors": errors, "partial": partial, "snapshots": snapshots, "first_error": first_error}}))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_writer_two_readers_for_ten_seconds(backend, tmp_path):
    path = _store_path(backend, tmp_path)
    tests_dir = os.path.dirname(__file__)
    writer = subprocess.Popen([sys.executable, "-c", WRITER.format(tests=tests_dir, backend=backend, path=path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    readers = [
        subprocess.Popen([sys.executable, "-c", READER.format(tests=tests_dir, backend=backend, path=path, seconds=10)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        results = []
        for r in readers:
            out, err = r.communicate(timeout=120)
            assert r.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        writer.kill()
        writer.wait()
    print(f"\n[concurrency] backend={backend}: readers {results}")
    for res in results:
        assert res["errors"] == 0, res["first_error"]
        assert res["partial"] == 0
        assert res["reads"] > 100 and res["snapshots"] > 10
