"""Disk-full runs: every backend writes into a small tmpfs until the disk is full.

Each run mounts a tmpfs of a few MiB, and a writer process commits batches (scalars, arrays
of random lengths, now and then a slice's weights) until a commit fails. The run then checks
that the writer process lived (no SIGSEGV: HDF5 used to crash in ``File.flush``), that the
failure was an ``OSError`` named as a full disk (``errno.ENOSPC``, "no space left on device
while writing <store>", no HDF5 internals), gives the space back (the tmpfs is remounted
larger), and opens the store in a new process: every committed batch must be there, value for
value, nothing of the failed one, and the store must take a new commit and show it to a reader.

Run as root (tmpfs mounts); other users run it in a user namespace (``unshare -rm``), which
the script enters by itself. ``--runs 20`` per backend is the acceptance check of issue 28;
``tests/store/test_store_disk_full.py`` runs it with a small count.

    python scripts/disk_full_runs.py --runs 20
    python scripts/disk_full_runs.py --runs 2 --backends hdf5,sqlite --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BACKENDS = ("hdf5", "sqlite", "zarr", "hybrid")
#: a writer stops here if the disk never fills (a run that did not test anything fails)
MAX_COMMITS = 20000
#: what a named disk-full error starts with
NAMED = "no space left on device while writing "
#: text of the HDF5 library's error stack, which a named error must not carry
INTERNALS = ("file write failed", "h5py", "HDF5", "errno =", "Can't ")


def _store_path(mount: Path, backend: str) -> Path:
    return mount / ("store.sqlite" if backend == "sqlite" else "store")


def batch(seed: int, k: int) -> Any:
    """Batch ``k`` (from 1) of run ``seed``: the same on every call, so the verifier can
    rebuild what the writer committed."""
    import numpy as np

    from diffract import ParameterType, SliceInfo
    from diffract.store import Batch

    rng = np.random.default_rng([seed, k])
    longest = (200, 2000, 6000)[seed % 3]
    fields: dict[tuple[str, str], Any] = {}
    for j in range(int(rng.integers(1, 4))):
        fields[(f"u{k}@m", f"a{j}")] = rng.normal(size=int(rng.integers(10, longest)))
    for j in range(int(rng.integers(1, 6))):
        fields[(f"u{k}@m", f"s{j}")] = float(rng.normal())
    b = Batch(fields=fields)
    if k == 1:
        b.add_models["m"] = {"run": seed}
    if k % 5 == 0:
        shape = (int(rng.integers(4, 64)), int(rng.integers(4, 64)))
        uid = f"w{k}"
        b.slices.append(
            SliceInfo(
                model_id="m",
                name=f"layer{k}.weight",
                uid=uid,
                type=ParameterType.DENSE,
                shape=shape,
                dtype="float64",
                index=k,
            )
        )
        b.weights[uid] = rng.normal(size=shape)
    return b


# --- the two child processes ------------------------------------------------------------------


def child_write(backend: str, path: str, seed: int) -> None:
    """Commit batches until one fails; print what happened as one JSON line."""
    from diffract.store import open_backend

    st = open_backend(backend, path)
    out: dict[str, Any] = {"committed": 0, "error": None}
    for k in range(1, MAX_COMMITS + 1):
        try:
            st.commit(batch(seed, k))
        except Exception as exc:
            out.update(
                committed=k - 1,
                error=type(exc).__name__,
                errno=getattr(exc, "errno", None),
                message=str(exc),
                is_oserror=isinstance(exc, OSError),
            )
            break
        out["committed"] = k
    try:
        st.close()
    except Exception as exc:  # reported, not fatal: the run checks the store afterwards
        out["close_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out), flush=True)
    # a normal exit: the interpreter's shutdown (h5py's and HDF5's) is part of the check


def child_verify(backend: str, path: str, seed: int, committed: int) -> None:
    """Open the store (a writer: it recovers), check every committed batch value for value
    and nothing else, commit one more batch and read it back in a reader."""
    import numpy as np

    from diffract.store import Batch, open_backend

    problems: list[str] = []
    st = open_backend(backend, path)
    expected: dict[tuple[str, str], Any] = {}
    weights: dict[str, Any] = {}
    for k in range(1, committed + 1):
        b = batch(seed, k)
        expected.update(b.fields)
        weights.update(b.weights)
    keys = set(st.keys())
    if keys != set(expected):
        problems.append(
            f"{len(keys)} values stored, {len(expected)} committed "
            f"(missing {len(set(expected) - keys)}, extra {len(keys - set(expected))})"
        )
    for key, v in expected.items():
        if key in keys and not np.array_equal(np.asarray(st.get(key)), np.asarray(v)):
            problems.append(f"value {key} differs")
    for uid, w in weights.items():
        if not np.array_equal(st.weights(uid), w):
            problems.append(f"weights {uid} differ")
    st.commit(Batch(fields={("after@m", "x"): 42.0}))
    st.close()
    reader = open_backend(backend, path, readonly=True)
    if reader.get(("after@m", "x")) != 42.0:
        problems.append("a commit after the space returned is not read back")
    reader.close()
    print(json.dumps({"ok": not problems, "values": len(expected), "problems": problems[:5]}))


# --- one run ----------------------------------------------------------------------------------


def _run_child(args: list[str], timeout: float) -> tuple[int, dict[str, Any] | None, str]:
    env = dict(os.environ, KERAS_BACKEND=os.environ.get("KERAS_BACKEND", "jax"))
    r = subprocess.run(
        [sys.executable, __file__, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    return r.returncode, (json.loads(lines[-1]) if lines else None), r.stderr[-2000:]


def one_run(backend: str, seed: int, workdir: Path, size_kib: int) -> dict[str, Any]:
    """One disk-full run of ``backend`` (see the module docstring); returns its record."""
    mount = workdir / f"{backend}-{seed}"
    mount.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mount)], check=True
    )
    rec: dict[str, Any] = {"backend": backend, "seed": seed}
    try:
        path = str(_store_path(mount, backend))
        rc, out, err = _run_child(["--child", "write", backend, path, str(seed)], 300)
        rec.update(write_rc=rc, write=out)
        if rc != 0:
            rec["write_stderr"] = err
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        committed = out["committed"] if out else 0
        if os.path.exists(path):
            rc, ver, err = _run_child(
                ["--child", "verify", backend, path, str(seed), str(committed)], 300
            )
            rec.update(verify_rc=rc, verify=ver)
            if rc != 0:
                rec["verify_stderr"] = err
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        shutil.rmtree(mount, ignore_errors=True)
    return rec


def judge(rec: dict[str, Any]) -> dict[str, bool]:
    """What a run showed: it crashed; its failure was a named disk-full error; the store
    reopened with every committed value (and took a new commit)."""
    out = rec.get("write") or {}
    msg = out.get("message") or ""
    ver = rec.get("verify") or {}
    return {
        "crashed": rec["write_rc"] != 0,
        "filled": out.get("error") is not None,
        "named": bool(
            out.get("is_oserror")
            and out.get("errno") == 28
            and msg.startswith(NAMED)
            and not any(t in msg for t in INTERNALS)
        ),
        "reopened": rec.get("verify_rc") == 0 and bool(ver),
        "intact": bool(ver.get("ok")),
    }


def run_all(backends: list[str], runs: int, *, verbose: bool = True) -> dict[str, Any]:
    """``runs`` disk-full runs per backend; returns the counts per backend, the records of
    the runs that went wrong and of all runs."""
    workdir = Path(tempfile.mkdtemp(prefix="diffract-disk-full-"))
    counts: dict[str, dict[str, int]] = {}
    bad: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    try:
        for backend in backends:
            c = counts[backend] = dict.fromkeys(
                ("runs", "crashed", "filled", "named", "reopened", "intact", "commits"), 0
            )
            for seed in range(runs):
                t0 = time.perf_counter()
                rec = one_run(backend, seed, workdir, 1536 + 128 * (seed % 5))
                verdict = judge(rec)
                records.append({**rec, "verdict": verdict})
                c["runs"] += 1
                c["commits"] += (rec.get("write") or {}).get("committed", 0)
                for k, v in verdict.items():
                    c[k] += int(v)
                if verdict["crashed"] or not all(
                    verdict[k] for k in ("filled", "named", "reopened", "intact")
                ):
                    bad.append({**rec, "verdict": verdict})
                if verbose:
                    print(
                        f"{backend:7s} run {seed:2d}: {json.dumps(verdict)} "
                        f"({time.perf_counter() - t0:.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"counts": counts, "bad": bad, "records": records}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="runs per backend (default 20)")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        kind, backend, path, seed, *rest = a.child
        if kind == "write":
            child_write(backend, path, int(seed))
        else:
            child_verify(backend, path, int(seed), int(rest[0]))
        return 0
    if os.geteuid() != 0:  # tmpfs mounts need root: a user namespace gives it
        os.execvp("unshare", ["unshare", "-rm", sys.executable, __file__, *(argv or sys.argv[1:])])
    result = run_all(a.backends.split(","), a.runs, verbose=not a.json)
    if a.json:
        print(json.dumps(result))
    else:
        print(
            f"{'backend':8s} {'runs':>5s} {'crashed':>8s} {'filled':>7s} {'named':>6s} "
            f"{'reopened':>9s} {'intact':>7s} {'commits':>8s}"
        )
        for backend, c in result["counts"].items():
            print(
                f"{backend:8s} {c['runs']:5d} {c['crashed']:8d} {c['filled']:7d} "
                f"{c['named']:6d} {c['reopened']:9d} {c['intact']:7d} {c['commits']:8d}"
            )
        for rec in result["bad"]:
            print(json.dumps(rec)[:2000])
    return 1 if result["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
