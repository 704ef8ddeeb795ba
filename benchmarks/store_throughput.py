"""Write and read throughput of every store backend on the same workload.

Workload: W weight matrices (copied into the store), then field values for each slice
written chunk by chunk as an ``apply`` does (S scalar fields + one array field of A floats
per slice, one batch per chunk of C slices), then a fresh process-like reopen that reads
every scalar and every array, twice (the second time through an LRU cache).

    python benchmarks/store_throughput.py [--slices 2000] [--chunk 50]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from diffract import ParameterType, SliceInfo
from diffract._vocab.slices import make_uid
from diffract.store import Batch, LRUCache, open_backend

BACKENDS = ["hdf5", "sqlite", "zarr", "hybrid", "ram"]


def workload(n_slices: int, n_scalars: int, array_len: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    slices = [
        SliceInfo(
            "m",
            f"layers.{i}.weight",
            make_uid("m", f"layers.{i}.weight"),
            ParameterType.DENSE,
            (64, 64),
            "float32",
            i,
        )
        for i in range(n_slices)
    ]
    weights = {s.uid: rng.normal(size=(64, 64)).astype(np.float32) for s in slices}
    fields = {}
    for s in slices:
        for j in range(n_scalars):
            fields[(s.uid, f"f{j}")] = float(rng.normal())
        fields[(s.uid, "esd")] = rng.random(array_len)
    return slices, weights, fields


def run(backend: str, root: Path, slices, weights, fields, chunk: int) -> dict[str, float]:
    path = (
        None
        if backend == "ram"
        else root / (f"{backend}.sqlite" if backend == "sqlite" else backend)
    )
    out: dict[str, float] = {}
    st = open_backend(backend, path)
    t0 = time.perf_counter()
    st.commit(Batch(add_models={"m": {}}, slices=slices, weights=weights))
    out["weights_MBps"] = sum(w.nbytes for w in weights.values()) / 1e6 / (time.perf_counter() - t0)
    by_owner: dict[str, dict] = {}
    for k, v in fields.items():
        by_owner.setdefault(k[0], {})[k] = v
    owners = list(by_owner)
    t0 = time.perf_counter()
    for i in range(0, len(owners), chunk):
        batch = {}
        for o in owners[i : i + chunk]:
            batch.update(by_owner[o])
        st.commit(Batch(fields=batch))
    dt = time.perf_counter() - t0
    out["write_values_per_s"] = len(fields) / dt
    out["write_batches_per_s"] = (len(owners) + chunk - 1) // chunk / dt
    if backend != "ram":
        st.close()
        t0 = time.perf_counter()
        st = open_backend(backend, path, readonly=True)
        out["open_s"] = time.perf_counter() - t0
    keys = list(st.keys())
    scalars = [k for k in keys if k[1] != "esd"]
    arrays = [k for k in keys if k[1] == "esd"]
    t0 = time.perf_counter()
    for k in scalars:
        st.get(k)
    out["read_scalars_per_s"] = len(scalars) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for k in arrays:
        st.get(k)
    out["read_arrays_per_s"] = len(arrays) / (time.perf_counter() - t0)
    st.cache = LRUCache(512 * 1024**2)
    for k in arrays:
        st.get(k)
    t0 = time.perf_counter()
    for k in arrays:
        st.get(k)
    out["read_arrays_lru_per_s"] = len(arrays) / (time.perf_counter() - t0)
    st.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, default=2000)
    ap.add_argument("--scalars", type=int, default=10)
    ap.add_argument("--array-len", type=int, default=384)
    ap.add_argument("--chunk", type=int, default=50)
    args = ap.parse_args()
    slices, weights, fields = workload(args.slices, args.scalars, args.array_len)
    print(
        f"workload: {args.slices} slices of 64x64 float32, {args.scalars} scalar fields + one {args.array_len}-float array each, batches of {args.chunk} slices"
    )
    root = Path(tempfile.mkdtemp(prefix="diffract-bench-"))
    rows = {}
    try:
        for b in BACKENDS:
            rows[b] = run(b, root, slices, weights, fields, args.chunk)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    cols = [
        "weights_MBps",
        "write_values_per_s",
        "write_batches_per_s",
        "open_s",
        "read_scalars_per_s",
        "read_arrays_per_s",
        "read_arrays_lru_per_s",
    ]
    print("| backend | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for b, r in rows.items():
        print(
            f"| {b} | "
            + " | ".join(
                f"{r[c]:,.0f}" if c in r and r[c] >= 100 else (f"{r[c]:.3g}" if c in r else "-")
                for c in cols
            )
            + " |"
        )
    base = rows["hdf5"]
    print("\nratios to hdf5 (higher is faster):")
    for b, r in rows.items():
        print(
            f"  {b:7s} write {r['write_values_per_s'] / base['write_values_per_s']:.2f}x  read scalars {r['read_scalars_per_s'] / base['read_scalars_per_s']:.2f}x  read arrays {r['read_arrays_per_s'] / base['read_arrays_per_s']:.2f}x"
        )


if __name__ == "__main__":
    main()
