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

from _crash_helpers import reference_values, same
from diffract import Session
from diffract.store import BACKENDS as REGISTERED

BACKENDS = [b for b in REGISTERED if b != "ram"]  # the persistent ones
TRIALS = 30

WRITER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from _crash_helpers import FIELDS, model_weights
    from diffract import Session

    s = Session(backend={backend!r}, path={path!r}, memory_budget=1, lock_timeout=10)
    if "m" not in s.models.ids():
        s.models.add(model_weights(), model_id="m")

    def report(ev=None):
        if ev is None or ev.stage == "chunk":
            keys = sorted("|".join(k) for k in s.store.keys())
            print("KEYS " + json.dumps(keys), flush=True)

    # kernel families load on first use: run them once in RAM before the kill window opens,
    # so the kills land in store writes, not in imports
    warm = Session(profile="ram")
    warm.models.add(model_weights(), model_id="m")
    warm.compute.apply(*FIELDS, progress=False)

    print("READY", flush=True)
    report()
    while True:
        s.compute.apply(*FIELDS, progress=report)
        print("ERASING", flush=True)  # from here the fields may go: no claim until KEYS
        s.compute.erase(*FIELDS)
        report()
    """
)


def _store_path(backend: str, tmp_path) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return str(tmp_path / ("store.sqlite" if backend == "sqlite" else "store"))


def _trials(backend: str, path: str, n: int, seed: int, ref: dict) -> tuple[int, int, int]:
    """Run ``n`` kill trials on one store; return (values checked, lost, wrong)."""
    rng = np.random.default_rng(seed)
    code = WRITER.format(
        tests=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        backend=backend,
        path=path,
    )
    losses = wrong = checked = 0
    for _ in range(n):
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        lines: list[str] = []
        ready = threading.Event()

        def pump(proc=proc, lines=lines, ready=ready):
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("READY"):
                    ready.set()

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        if not ready.wait(60):
            proc.kill()
            raise AssertionError(f"writer did not start: {proc.stderr.read()}")
        time.sleep(float(rng.uniform(0.0, 1.0)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t.join(5)
        reported: list[str] = []
        for line in lines:
            if line.startswith("KEYS ") and line.endswith("\n"):
                reported = json.loads(line[5:])
            elif line.startswith("ERASING"):
                reported = []
        s = Session(backend=backend, path=path, readonly=True)
        stored = {k: s.store.get(k) for k in s.store.keys()}
        for key in reported:
            checked += 1
            if tuple(key.split("|")) not in stored:
                losses += 1
        wrong += sum(not same(v, ref[k]) for k, v in stored.items())
        s.close()
    return checked, losses, wrong


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_at_random_moments_loses_nothing(backend, tmp_path):
    """30 kills per backend: two stores, 15 kills each, run side by side."""
    from concurrent.futures import ThreadPoolExecutor

    ref = reference_values()
    paths = [_store_path(backend, tmp_path / f"run{i}") for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(lambda i: _trials(backend, paths[i], TRIALS // 2, 12345 + i, ref), range(2))
        )
    checked = sum(r[0] for r in results)
    losses = sum(r[1] for r in results)
    wrong = sum(r[2] for r in results)
    print(
        f"\n[crash-safety] backend={backend}: {TRIALS} SIGKILL trials, {checked} reported values checked, {losses} lost, {wrong} wrong"
    )
    assert losses == 0 and wrong == 0
    assert checked > 0


READER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    sys.path.insert(0, {tests!r})
    from _crash_helpers import reference_values, same
    from diffract import Session

    ref = reference_values()
    give_up = time.monotonic() + 120  # the writer may be slow to start on a busy machine
    deadline = None  # {seconds} s of reading from the moment the store is there
    reads = errors = partial = snapshots = changes = 0
    first_error = None
    s = None
    last = None
    while time.monotonic() < (deadline or give_up):
        try:
            if s is None:
                s = Session(backend={backend!r}, path={path!r}, readonly=True)
                deadline = time.monotonic() + {seconds}
            s.store.refresh()
            keys = list(s.store.keys())
            for k in keys:
                v = s.store.get(k)
                reads += 1
                if not same(v, ref[k]):
                    partial += 1
            snapshots += 1
            if last is not None and set(keys) != last:
                changes += 1  # the writer committed (or erased) between two of our reads
            last = set(keys)
        except Exception as exc:
            if "no diffract store" in str(exc):
                time.sleep(0.01)
                continue
            errors += 1
            first_error = first_error or repr(exc)
    print(json.dumps({{"reads": reads, "errors": errors, "partial": partial, "snapshots": snapshots, "changes": changes, "first_error": first_error}}))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_writer_two_readers_for_ten_seconds(backend, tmp_path):
    path = _store_path(backend, tmp_path)
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(tests=tests_dir, backend=backend, path=path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    readers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                READER.format(tests=tests_dir, backend=backend, path=path, seconds=10),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        results = []
        for r in readers:
            out, err = r.communicate(timeout=240)
            assert r.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        # the writer was still at work when both readers had finished reading...
        assert writer.poll() is None, writer.stderr.read()
    finally:
        writer.kill()
        writer.wait()
    print(f"\n[concurrency] backend={backend}: readers {results}")
    for res in results:
        assert res["errors"] == 0, res["first_error"]
        assert res["partial"] == 0
        assert res["reads"] > 100 and res["snapshots"] > 10
        # ...and each reader saw its commits land between its own reads (an idle writer, or
        # readers that read one frozen snapshot, would show no change)
        assert res["changes"] >= 2, res
