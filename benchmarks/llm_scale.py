"""LLM scale: a TinyLlama-1.1B-shaped Hugging Face folder, ours vs the pooled float64 floor.

1. Builds a Hugging Face model folder in a scratch directory (deleted afterwards unless
   ``--keep``): ``config.json``, bf16 shards written with ``safetensors.torch.save_file`` and
   ``model.safetensors.index.json``. Random weights N(0, 0.02) (torch seed 0). Shapes:
   ``--shape tinyllama`` (22 layers, hidden 2048, MLP 5632, GQA k/v 256 x 2048, vocab 32000,
   untied ``lm_head``: 156 matrices, 2.2 GB, 3 shards) or ``--shape llama7b`` (32 layers, hidden
   4096, MLP 11008, vocab 32000: 13.5 GB); ``--layers N`` keeps the first N layers.
2. Runs each side in a fresh child process, alternating, so that wall time, CPU time and
   peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, the child's own, imports
   included) are per side:

   * ours: ``Session(path=<scratch store>)`` (default settings: the "local" HDF5 store),
     ``models.add(folder)``, ``compute.apply(*FIELDS, conventions="weightwatcher")`` (the 18
     WeightWatcher columns), ``results.export_metrics(*FIELDS)``; timed end to end from
     before ``Session()`` (after the import).
   * the floor: every matrix read into memory first as float32 (not timed), then the float64
     Gram (``a @ a.T`` on the short side) and ``numpy.linalg.eigvalsh`` of each, two worker
     threads, BLAS limited to one thread (fields_vs_peers' "floor (pool)").
   * WeightWatcher 0.7.7 (``--ww``, off by default; ~50 min on TinyLlama): ``analyze()`` of
     the model built from the folder by ``transformers`` (its default settings).

    python benchmarks/llm_scale.py [--shape tinyllama|llama7b] [--layers N] [--repeats 2]
        [--memory-budget 2GB] [--no-floor] [--per-matrix] [--ww] [--profile]
        [--compare PYTHONPATH] [--dir /tmp] [--folder PATH] [--keep]

``--profile`` runs ours once under cProfile and prints the top functions (cumulative and
own time) instead of the comparison. ``--per-matrix`` first times one random matrix of each
shape (ours' ``matrix_svals`` vs the floor's Gram + ``eigvalsh``, one BLAS thread);
``--compare PYTHONPATH`` adds ours from another source tree (before/after in one run);
``--no-floor`` runs ours only; ``--folder`` reuses a folder built with ``--keep``.
Figures and the exact commands: docs/benchmarks.md, "LLM scale".
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

# the 18 WeightWatcher columns (this folder is sys.path[0] when the script runs)
from fields_vs_peers import FIELDS

SHAPES = {
    "tinyllama": {
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "shards": 3,
    },
    "llama7b": {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32000,
        "shards": 3,
    },
}


def tensor_specs(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor of a Llama checkpoint, in Hugging Face's names."""
    h, m, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = h // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    specs: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (v, h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs += [
            (p + "self_attn.q_proj.weight", (h, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, h)),
            (p + "mlp.gate_proj.weight", (m, h)),
            (p + "mlp.up_proj.weight", (m, h)),
            (p + "mlp.down_proj.weight", (h, m)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    specs += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return specs


def build_folder(folder: Path, cfg: dict) -> int:
    """Write the Hugging Face folder (config, bf16 shards, index); returns its bytes.

    Each shard is generated and written on its own, so the writer holds one shard."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    specs = tensor_specs(cfg)
    total = sum(2 * _numel(s) for _, s in specs)
    n_shards = cfg["shards"]
    per = total / n_shards
    groups: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    acc = 0
    for name, shape in specs:
        if acc >= per * len(groups) and len(groups) < n_shards:
            groups.append([])
        groups[-1].append((name, shape))
        acc += 2 * _numel(shape)
    gen = torch.Generator().manual_seed(0)
    weight_map = {}
    for k, group in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        tensors = {}
        for name, shape in group:
            if len(shape) == 1:
                tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
            else:
                t = torch.randn(shape, generator=gen, dtype=torch.float32)
                tensors[name] = (t * 0.02).to(torch.bfloat16)
                del t
            weight_map[name] = fname
        save_file(tensors, str(folder / fname), metadata={"format": "pt"})
        del tensors
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
    )
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg["num_key_value_heads"],
        "vocab_size": cfg["vocab_size"],
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return total


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


OURS = r"""
import json, resource, sys, time
t_import = time.perf_counter()
from diffract import Session
t_import = time.perf_counter() - t_import
folder, store, fields, budget = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4]
t0, c0 = time.perf_counter(), time.process_time()
kw = {} if budget == "-" else {"memory_budget": budget}
s = Session(path=store, **kw)
t1 = time.perf_counter()
s.models.add(folder, model_id="m")
t2 = time.perf_counter()
rep = s.compute.apply(*fields, progress=False, conventions="weightwatcher")
t3 = time.perf_counter()
assert not rep.failures, rep.failures[:3]
rows = s.results.export_metrics(*fields, export_format="list")
t4 = time.perf_counter()
wall, cpu = t4 - t0, time.process_time() - c0
s.close()
print(json.dumps({
    "wall": wall, "cpu": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "import": t_import, "session": t1 - t0, "add": t2 - t1, "apply": t3 - t2, "export": t4 - t3,
    "rows": len(rows),
}))
"""

FLOOR = r"""
import json, resource, sys, time
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from threadpoolctl import threadpool_limits
from safetensors import safe_open
folder = sys.argv[1]
index = json.load(open(folder + "/model.safetensors.index.json"))["weight_map"]
ws = []
for name, shard in index.items():
    with safe_open(folder + "/" + shard, "pt") as f:
        t = f.get_tensor(name)
        if t.ndim == 2:
            ws.append(t.float().numpy())
ws.sort(key=lambda w: -w.size)
def bare(w):
    a = w.astype(np.float64)
    g = a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a
    return np.linalg.eigvalsh(g)
t0, c0 = time.perf_counter(), time.process_time()
with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(max_workers=2) as ex:
    n = len(list(ex.map(bare, ws)))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"wall": wall, "cpu": cpu, "rows": n,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

WW = r"""
import json, resource, sys, time
import torch, transformers, weightwatcher as ww
folder = sys.argv[1]
t0, c0 = time.perf_counter(), time.process_time()
model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.bfloat16)
df = ww.WeightWatcher(model=model).analyze()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"wall": wall, "cpu": cpu, "rows": len(df),
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

PROFILE = r"""
import cProfile, pstats, sys
from diffract import Session
folder, store, fields = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
def go():
    s = Session(path=store)
    s.models.add(folder, model_id="m")
    s.compute.apply(*fields, progress=False, conventions="weightwatcher")
    s.results.export_metrics(*fields, export_format="list")
    s.close()
cProfile.run("go()", "/tmp/llm_scale.prof")
st = pstats.Stats("/tmp/llm_scale.prof")
st.sort_stats("cumulative").print_stats(45)
st.sort_stats("tottime").print_stats(30)
"""


PER_MATRIX = r"""
import json, sys, time
import numpy as np
from threadpoolctl import threadpool_limits
from diffract.kernels._linalg import matrix_svals
shapes = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
out = {}
with threadpool_limits(limits=1, user_api="blas"):
    for shape in shapes:
        w = (rng.standard_normal(shape, dtype=np.float32) * 0.02)
        t0, c0 = time.perf_counter(), time.process_time()
        matrix_svals(w)
        ours = (time.perf_counter() - t0, time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        a = w.astype(np.float64)
        np.linalg.eigvalsh(a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a)
        floor = (time.perf_counter() - t0, time.process_time() - c0)
        out["x".join(map(str, shape))] = {"ours": ours, "floor": floor}
print(json.dumps(out))
"""


def _child(code: str, *args: str, env: dict | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"child failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tinyllama")
    ap.add_argument("--layers", type=int, default=None, help="keep the first N layers")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--memory-budget", default=None, help='e.g. "2GB" (default: the default)')
    ap.add_argument("--no-floor", action="store_true", help="ours only (e.g. the 7B shape)")
    ap.add_argument("--ww", action="store_true", help="also WeightWatcher (~50 min)")
    ap.add_argument("--profile", action="store_true", help="ours once under cProfile")
    ap.add_argument("--per-matrix", action="store_true", help="also time one matrix of each shape")
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--folder", default=None, help="an existing folder (not built, kept)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument(
        "--compare",
        default=None,
        metavar="PYTHONPATH",
        help="also run ours from another source tree (e.g. a checkout of the previous commit)",
    )
    args = ap.parse_args()

    cfg = dict(SHAPES[args.shape])
    if args.layers is not None:
        cfg["num_hidden_layers"] = args.layers
    scratch = Path(tempfile.mkdtemp(prefix="llm_scale_", dir=args.dir))
    env = dict(os.environ)
    try:
        if args.folder:
            folder = Path(args.folder)
            size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
        else:
            folder = scratch / "model"
            t = time.perf_counter()
            size = build_folder(folder, cfg)
            print(f"built {folder}: {size / 1e9:.2f} GB in {time.perf_counter() - t:.0f} s")
        n_mat = sum(1 for _, s in tensor_specs(cfg) if len(s) == 2)
        print(
            f"shape {args.shape}, {cfg['num_hidden_layers']} layers: {n_mat} matrices, "
            f"{size / 1e9:.2f} GB bf16; load average {os.getloadavg()[0]:.2f}"
        )
        fields = ",".join(FIELDS)
        if args.profile:
            store = scratch / "store_prof"
            out = subprocess.run(
                [sys.executable, "-c", PROFILE, str(folder), str(store), fields], check=False
            )
            sys.exit(out.returncode)
        if args.per_matrix:
            shapes = sorted({s for _, s in tensor_specs(cfg) if len(s) == 2})
            res = _child(PER_MATRIX, json.dumps(shapes), env=env)
            print(
                "one matrix, one BLAS thread (ours: matrix_svals; floor: float64 Gram + eigvalsh):"
            )
            for k, v in res.items():
                (ow, oc), (fw, fc) = v["ours"], v["floor"]
                print(
                    f"  {k:12s} ours {ow:6.2f} s wall ({oc:6.2f} CPU)  floor {fw:6.2f} s ({fc:6.2f} CPU)"
                )
        budget = args.memory_budget or "-"
        sides = {"ours": None} if args.no_floor else {"ours": None, "floor": None}
        if args.compare:
            sides["ours (compare)"] = None
        if args.ww:
            sides["weightwatcher"] = None
        runs: dict[str, list[dict]] = {k: [] for k in sides}
        for r in range(args.repeats):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                if side.startswith("ours"):
                    store = scratch / f"store_{r}"
                    side_env = env if side == "ours" else {**env, "PYTHONPATH": args.compare}
                    res = _child(OURS, str(folder), str(store), fields, budget, env=side_env)
                    shutil.rmtree(store, ignore_errors=True)
                elif side == "floor":
                    res = _child(FLOOR, str(folder), env=env)
                else:
                    if r > 0:
                        continue
                    res = _child(WW, str(folder), env=env)
                res["load"] = os.getloadavg()[0]
                runs[side].append(res)
                print(f"  run {r} {side:14s} " + json.dumps({k: _r(v) for k, v in res.items()}))
        print(f"\nbest of {args.repeats} (load average at the end {os.getloadavg()[0]:.2f})")
        best = {k: min(v, key=lambda x: x["wall"]) for k, v in runs.items() if v}
        for k, b in best.items():
            print(
                f"  {k:14s} wall {b['wall']:8.1f} s  cpu {b['cpu']:8.1f} s  "
                f"peak RSS {b['rss_mb']:7.0f} MB  ({b['rows']} matrices)"
            )
        if "floor" in best:
            o, f = best["ours"], best["floor"]
            print(
                f"  ours / floor   wall {o['wall'] / f['wall']:.2f}x  cpu {o['cpu'] / f['cpu']:.2f}x"
                "  (target <= 1.15; peak RSS target <= 1200 MB)"
            )
            pairs = [
                a["wall"] / b["wall"] for a, b in zip(runs["ours"], runs["floor"], strict=False)
            ]
            print("  per-repeat ratios " + ", ".join(f"{x:.2f}x" for x in pairs))
        o = best["ours"]
        if "ours (compare)" in best:
            c = best["ours (compare)"]
            print(
                f"  ours / ours (compare) wall {o['wall'] / c['wall']:.2f}x  cpu {o['cpu'] / c['cpu']:.2f}x"
            )
        print(
            f"  ours stages: session {o['session']:.2f} s, add {o['add']:.2f} s, apply "
            f"{o['apply']:.1f} s, export {o['export']:.2f} s; {o['wall'] / n_mat:.2f} s per matrix"
        )
    finally:
        if args.keep and not args.folder:
            print(f"kept {scratch}")
        else:  # with --folder the scratch folder holds only the stores
            shutil.rmtree(scratch, ignore_errors=True)


def _r(v):
    return round(v, 3) if isinstance(v, float) else v


if __name__ == "__main__":
    main()
