"""Bounded memory on a checkpoint larger than the budget, and the parallel speed-up.

1. Writes a synthetic safetensors checkpoint of >= 8 GB (fp32, transformer-shaped: token
   embedding, per layer q/k/v/o (H x H) and up/down (H x 4H), deterministic seed), streaming
   tensor by tensor so the writer itself stays small.
2. Analyzes the spectral field set on it in a child process with
   ``Session(memory_budget="2GB")`` (weights referenced, read tensor by tensor from a memory
   map) while sampling the child's resident set size every 20 ms; reports the peak, the time
   and the tensor count.
3. Measures the parallel executors on the first layers: workers=1 vs workers=2 (threads)
   vs executor="processes" with 2 workers, side by side on the same slices.

    python benchmarks/scale_8gb.py [--hidden 1536] [--layers 72] [--dir /tmp] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SPECTRAL_FIELDS = (
    "esd",
    "pl_alpha",
    "pl_ks",
    "pl_esd_xmin",
    "stable_rank",
    "spectral_norm",
    "frob_norm",
    "effective_rank",
    "mp_num_spikes",
)


def tensor_specs(hidden: int, layers: int, vocab: int) -> list[tuple[str, tuple[int, int]]]:
    specs = [("embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            specs.append((f"layers.{i}.self_attn.{proj}.weight", (hidden, hidden)))
        specs.append((f"layers.{i}.mlp.up_proj.weight", (4 * hidden, hidden)))
        specs.append((f"layers.{i}.mlp.down_proj.weight", (hidden, 4 * hidden)))
    return specs


def write_checkpoint(path: Path, specs, seed: int = 0) -> int:
    """Stream a safetensors file: header, then each tensor generated in row blocks."""
    header, offset = {}, 0
    for name, shape in specs:
        n = shape[0] * shape[1] * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)))
        fh.write(head)
        for _, (rows, cols) in specs:
            scale = 1.0 / np.sqrt(cols)
            for start in range(0, rows, 4096):
                block = rng.standard_t(5, size=(min(4096, rows - start), cols)).astype(np.float32)
                block *= scale
                fh.write(block.tobytes())
    return offset + 8 + len(head)


CHILD = """
import json, sys, time
from diffract import Session
path, store, budget, fields = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
t0 = time.perf_counter()
with Session(path=store, memory_budget=budget) as s:
    slices = s.models.add(path, model_id="synthetic")
    t1 = time.perf_counter()
    report = s.compute.apply(*fields, progress=False)
    t2 = time.perf_counter()
    print(json.dumps({"tensors": len(slices), "add_s": t1 - t0, "apply_s": t2 - t1, "chunks": report.chunks,
                      "failures": len(report.failures), "computed": report.computed}))
"""


def run_child(args: list[str]) -> tuple[dict, float]:
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"analysis failed:\n{err}")
    return json.loads(out.strip().splitlines()[-1]), peak / 1024**3


def parallel_speedup(path: Path, layers: int, device: str | None = None) -> dict[str, float]:
    """The spectral field set on the first ``layers`` layers, four ways, same slices."""
    from diffract import Session

    names = [f"re:layers\\.({'|'.join(str(i) for i in range(layers))})\\..*"]
    runs = (
        ("serial (1 thread)", {"workers": 1, "spectrum_threads": 1}),
        ("default (kernel pool)", {}),
        ("workers=2 threads", {"workers": 2, "spectrum_threads": 1}),
        ("processes x2", {"workers": 2, "executor": "processes", "spectrum_threads": 1}),
    ) + ((f"device {device}", {"device": device}),) * bool(device)
    out = {}
    for label, kw in runs:
        s = Session(profile="ram")
        s.models.add(str(path), model_id="m")
        scope = s.filter(param_names=names)
        t0 = time.perf_counter()
        scope.compute.apply(*SPECTRAL_FIELDS, progress=False, **kw)
        out[label] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1536)
    ap.add_argument("--layers", type=int, default=72)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--budget", default="2GB")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--speedup-layers", type=int, default=4)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument(
        "--device", default=None, help="also time the spectra on this accelerator (e.g. torch:cuda)"
    )
    ap.add_argument(
        "--only-speedup",
        action="store_true",
        help="skip the 8 GB run: a small checkpoint for the executor comparison",
    )
    args = ap.parse_args()
    if args.only_speedup:
        args.layers = args.speedup_layers
    work = Path(tempfile.mkdtemp(prefix="diffract-8gb-", dir=args.dir))
    ckpt = work / "synthetic.safetensors"
    try:
        specs = tensor_specs(args.hidden, args.layers, args.vocab)
        t0 = time.perf_counter()
        size = write_checkpoint(ckpt, specs)
        print(
            f"wrote {ckpt} : {size / 1e9:.2f} GB ({size / 1024**3:.2f} GiB), {len(specs)} fp32 tensors, hidden {args.hidden}, {args.layers} layers, in {time.perf_counter() - t0:.0f} s"
        )
        os.sync()
        if not args.only_speedup:
            res, peak = run_child(
                [str(ckpt), str(work / "store"), args.budget, ",".join(SPECTRAL_FIELDS)]
            )
            print(
                f"analysis with memory_budget={args.budget}: {res['tensors']} tensors, {res['chunks']} chunks, "
                f"{res['computed']} values, {res['failures']} failures"
            )
            print(
                f"  add {res['add_s']:.1f} s, apply {res['apply_s']:.0f} s; peak RSS {peak:.2f} GiB "
                f"(budget {args.budget}, limit 2.5 GB)"
            )
        speed = parallel_speedup(ckpt, args.speedup_layers, args.device)
        base = speed["serial (1 thread)"]
        print(
            f"parallel executors on the first {args.speedup_layers} layers ({6 * args.speedup_layers} matrices), {os.cpu_count()} cores:"
        )
        for label, t in speed.items():
            print(f"  {label:22s} {t:6.1f} s   speed-up {base / t:.2f}x")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
