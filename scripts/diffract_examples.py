"""Run the published Diffract's documented examples, unchanged, against this project.

The examples are the ```python blocks of Diffract's README, its guide's quickstart and recipes
and its configuration reference (69 blocks at v0.3.1). They are read from a checkout of
Diffract's documentation (not vendored here), e.g. an unpacked copy of its repository::

    KERAS_BACKEND=jax .venv/bin/python scripts/diffract_examples.py /path/to/diffract [-v]

Each page runs in a namespace of its own, block after block, in a fresh working folder, with
what a user of that page has at hand: models bound to the names the examples use
(``model``, ``torch_model``, ``model1`` ... small PyTorch, NumPy, ONNX, Flax and Keras models),
a ``session`` holding a few models with ``frob_norm`` and ``stable_rank`` computed (rebound for
every block that does not build its own session), and the files the examples name
(configuration files, plot configurations, a theme, an existing Diffract store). Prints one
line per block and the count; exits 1 below ``--target`` (default 62).

``--compare PYTHON`` runs the same blocks through the published Diffract too (``PYTHON`` of a
venv with diffract-core 0.3.1: ``make diffract-venv``, then ``.venv-diffract/bin/pip install
onnx pyarrow "diffract-core[viz,zarr]==0.3.1"``) and lists every block that runs there but fails here (the
acceptance of issue 26: there must be none); it exits 1 if there is one. Diffract's venv has no
PyTorch, ONNX or Keras (Diffract 0.3.1 needs Python >= 3.12, whose PyPI torch is the CUDA
build): there the PyTorch models are replaced by what Diffract's torch extractors read from
them (one slice per ``nn.Linear``, named by module path, holding its weight; a state dict's 2-D
``*weight`` tensors), and blocks that need ONNX or Keras cannot run (reported as such).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

PAGES = (
    "README.md",
    "docs/guide/quickstart.md",
    "docs/guide/recipes/exports.md",
    "docs/guide/recipes/filtering.md",
    "docs/guide/recipes/index.md",
    "docs/guide/recipes/kernels_and_compute.md",
    "docs/guide/recipes/merging.md",
    "docs/guide/recipes/storage_and_cache.md",
    "docs/guide/recipes/visualization.md",
    "docs/guide/recipes/zarr_storage.md",
    "docs/reference/configuration.md",
)


def _ini(storage: str, cache: str = '"none"') -> str:
    """A configuration file both libraries read: Diffract's sections, values quoted as in its
    own profiles (Diffract reads an unquoted ``none`` as None and then cannot build, and needs
    every section its profiles have: without ``[nn.extractor]`` its ``models.add`` fails)."""
    return (
        f'{storage}\n\n[metadata]\nbackend = "sqlite"\n\n[metadata.sqlite]\npath = ":memory:"\n\n'
        f"[cache]\nbackend = {cache}\n\n[parallel.thread_pool]\nmax_workers = 2\n\n"
        "[parallel.process_pool]\nmax_workers = 2\n\n"
        "[nn.extractor]\nskip_not_implemented_types = true\n\n"
        '[export]\ndefault_export_format = "dict"\n'
    )


#: files the examples read, as a user of these pages would have them (our own contents)
FIXTURES = {
    "config1.ini": _ini('[storage]\nbackend = "ram"'),
    "config2.ini": _ini('[storage]\nbackend = "ram"'),
    "my_config.ini": _ini(
        '[storage]\nbackend = "sqlite"\n\n[storage.sqlite]\npath = "${DIFFRACT_HOME}/store.db"',
        cache='"simple"\n\n[cache.simple]\nmax_memory_mb = 128',
    ),
    "prod.ini": _ini('[storage]\nbackend = "hdf5"\n\n[storage.hdf5]\npath = ".diffract/prod.h5"'),
    "examples/configs/boxplot_stable_rank.yaml": (
        "plot:\n  _target_: diffract.viz.plots.base.UpdateFigure\n  plot:\n"
        "    _target_: diffract.viz.plots.boxplot.BoxPlot\n    y: stable_rank\n    x: model_id\n"
        "config:\n  layout:\n    width: 800\n    height: 400\n"
    ),
    "plots/my_plot.yaml": (
        "plot:\n  _target_: diffract.viz.plots.ScatterPlot\n  x: frob_norm\n  y: stable_rank\n"
        "  group_by: model_id\n"
    ),
    "themes/publication.yaml": "font_family: Arial\nwidth: 700\nheight: 400\nshow_x_grid: false\nshow_y_grid: false\n",
    ".diffract/sqlite/metadata_index.db": "",
}
FIXTURES["configs/boxplot_stable_rank.yaml"] = FIXTURES["examples/configs/boxplot_stable_rank.yaml"]


def blocks(root: Path) -> list[tuple[str, str]]:
    """(page, code) of every ```python block, in page order."""
    out = []
    for page in PAGES:
        p = root / page
        if p.exists():
            out += [(page, m) for m in re.findall(r"```python\n(.*?)```", p.read_text(), re.S)]
    return out


def _derived_torch_models() -> dict[str, Any]:
    """Without PyTorch (Diffract's venv): what Diffract's torch extractors read from the models
    of :func:`_torch_models`, as NumPy dicts (its source: one DENSE slice per ``nn.Linear``,
    named by module path, holding the weight; a state dict's 2-D ``*weight`` tensors)."""
    import numpy as np

    rng = np.random.default_rng(0)

    def w(*shape: int) -> Any:
        return rng.normal(size=shape).astype(np.float32)

    net = {}
    for i in range(2):
        net[f"model.layers.{i}.attn.q_proj"] = w(16, 16)
        net[f"model.layers.{i}.attn.k_proj"] = w(16, 16)
        net[f"model.layers.{i}.mlp.fc1"] = w(32, 16)
    out: dict[str, Any] = {"model": net}
    for name in ("torch_model", "my_model", "model1", "model2"):
        out[name] = {"0": w(24, 12), "2": w(8, 24)}
    out["torch_state_dict"] = {"0.weight": w(24, 12), "2.weight": w(8, 24)}
    return out


def _torch_models() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return _derived_torch_models()

    torch.manual_seed(0)

    class Attn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = torch.nn.Linear(16, 16)
            self.k_proj = torch.nn.Linear(16, 16)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = Attn()
            self.mlp = torch.nn.Module()
            self.mlp.fc1 = torch.nn.Linear(16, 32)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.Module()
            self.model.layers = torch.nn.ModuleList([Block(), Block()])

    net = Net()

    def mlp() -> Any:
        return torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8))

    return {
        "model": net,
        "torch_model": mlp(),
        "my_model": mlp(),
        "model1": mlp(),
        "model2": mlp(),
        "torch_state_dict": mlp().state_dict(),
    }


def _other_models() -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    out: dict[str, Any] = {
        "numpy_weights": {"w1": rng.normal(size=(8, 6)).astype(np.float32)},
        "large_array": rng.normal(size=(64, 32)).astype(np.float32),
    }
    w = rng.normal(size=(4, 6)).astype(np.float32)
    with contextlib.suppress(ImportError):  # absent from Diffract's venv
        from onnx import TensorProto, helper, numpy_helper

        graph = helper.make_graph(
            [helper.make_node("Gemm", ["x", "fc.weight"], ["y"], transB=1)],
            "net",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
            initializer=[numpy_helper.from_array(w, name="fc.weight")],
        )
        out["onnx_model"] = helper.make_model(graph)
    with contextlib.suppress(ImportError):
        import jax
        import jax.numpy as jnp
        from flax import linen as nn

        class MLP(nn.Module):  # a model with layers, as a README reader has
            @nn.compact
            def __call__(self, x: Any) -> Any:
                return nn.Dense(2)(nn.relu(nn.Dense(5)(x)))

        mlp = MLP()
        out["flax_model"] = mlp.bind(mlp.init(jax.random.PRNGKey(0), jnp.zeros((1, 3))))
    with contextlib.suppress(ImportError):  # absent from Diffract's venv
        import keras

        out["tf_model"] = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
    return out


def _session(objects: dict[str, Any]) -> Any:
    """The session a reader of these pages has: a few models, two fields computed."""
    import inspect

    import numpy as np

    from diffract import ParameterOverrides, Session

    s = Session(profile="ram")
    derived = isinstance(objects["model"], dict)  # Diffract's names: module paths
    suffix = "" if derived else ".weight"
    overrides = {
        f"model.layers.{i}.attn.{p}{suffix}": ParameterOverrides(
            other_meta={"layer_id": i, "head_id": h}
        )
        for i in range(2)
        for h, p in enumerate(("q_proj", "k_proj"))
    }
    s.models.add(objects["model"], model_id="gpt2-small", parameter_overrides=overrides)
    rng = np.random.default_rng(1)
    if derived:
        base = {"0.weight": rng.normal(size=(24, 12)), "2.weight": rng.normal(size=(8, 24))}
    else:
        import torch

        torch.manual_seed(1)
        seq = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8))
        base = seq.state_dict()
    for i, m in enumerate(
        [
            "checkpoint_1000",
            "checkpoint_2000",
            "step_1000",
            "step_2000",
            "step_3000",
            "model_a",
            "model_b",
        ]
    ):
        if derived:
            sd = {
                k: (v + 0.01 * i * rng.normal(size=v.shape)).astype(np.float32)
                for k, v in base.items()
            }
        else:
            import torch

            sd = {k: v + 0.01 * i * torch.randn_like(v) for k, v in base.items()}
        s.models.add(sd, model_id=m)
    quiet = (
        {"progress": False} if "progress" in inspect.signature(s.compute.apply).parameters else {}
    )
    s.compute.apply("frob_norm", "stable_rank", **quiet)
    return s


def run(root: Path, verbose: bool) -> tuple[int, int, list[str], list[dict[str, str]]]:
    """Run every block; (passed, total, failure lines, per block its page and status)."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    with contextlib.suppress(ImportError):
        import plotly.io as pio

        pio.renderers.default = "json"  # fig.show() prints instead of opening a browser
    objects = {**_torch_models(), **_other_models()}
    passed, failures, all_blocks = 0, [], blocks(root)
    statuses: list[dict[str, str]] = []
    pages: dict[str, dict[str, Any]] = {}
    cwd = os.getcwd()
    for n, (page, code) in enumerate(all_blocks, 1):
        ns = pages.get(page)
        if ns is None:
            folder = Path(tempfile.mkdtemp(prefix="diffract-ex-"))
            os.chdir(folder)
            os.environ["DIFFRACT_HOME"] = str(folder)
            for rel, text in FIXTURES.items():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_text(text)
            ns = pages[page] = {
                "__name__": "__example__",
                **objects,
                "_dir": folder,
                "_session": _session(objects),
            }
        os.chdir(ns["_dir"])
        if "Session(" not in code:
            ns["session"] = ns["_session"]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(code, f"{page} block {n}", "exec"), ns)
            passed += 1
            status = "ok"
        except Exception as exc:  # each failure is reported, the run goes on
            status = (
                f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            )
            failures.append(f"{n:2d} {page}: {status}")
            if verbose:
                traceback.print_exc()
        print(f"{n:2d} {page:45s} {status}")
        statuses.append(
            {"page": page, "status": status, "first_line": code.strip().split("\n")[0][:80]}
        )
    os.chdir(cwd)
    return passed, len(all_blocks), failures, statuses


def compare(root: Path, diffract_python: str) -> int:
    """Run the blocks through Diffract (``diffract_python``) and here; list each block that runs
    there but fails here. 1 if there is one."""
    with tempfile.TemporaryDirectory(prefix="diffract-ex-cmp-") as folder:
        out = Path(folder) / "diffract.json"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run(
            [
                diffract_python,
                str(Path(__file__).resolve()),
                str(root),
                "--json",
                str(out),
                "--target",
                "0",
            ],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if not out.exists():
            print(done.stdout[-2000:], done.stderr[-3000:])
            return 2
        theirs = json.loads(out.read_text())
    with contextlib.redirect_stdout(io.StringIO()):
        _, _, _, ours = run(root, verbose=False)
    regressions = 0
    print(f"{'#':>2} {'page':40s} {'Diffract 0.3.1':28s} here")
    for n, (a, b) in enumerate(zip(theirs, ours, strict=True), 1):
        mark = ""
        if a["status"] == "ok" and b["status"] != "ok":
            regressions += 1
            mark = "  <-- runs on Diffract, fails here"
        print(f"{n:2d} {a['page']:40s} {a['status'][:28]:28s} {b['status'][:80]}{mark}")
    ok_there = sum(a["status"] == "ok" for a in theirs)
    ok_both = sum(
        a["status"] == "ok" and b["status"] == "ok" for a, b in zip(theirs, ours, strict=True)
    )
    print(
        f"{len(ours)} blocks: {ok_there} run on Diffract 0.3.1, {sum(b['status'] == 'ok' for b in ours)} here; "
        f"{ok_both} of the {ok_there} run here too; {regressions} run on Diffract but fail here"
    )
    return 1 if regressions else 0


def main(argv: list[str] | None = None) -> int:
    """Command line: the Diffract checkout, ``-v`` for tracebacks, ``--target``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "root", type=Path, help="a checkout of Diffract's repository (README.md, docs/)"
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--target", type=int, default=62)
    ap.add_argument("--json", type=Path, help="write each block's page and status to this file")
    ap.add_argument(
        "--compare",
        metavar="PYTHON",
        help="the Python of a venv with diffract-core 0.3.1: run the blocks there too and list "
        "those that run there but fail here",
    )
    args = ap.parse_args(argv)
    if args.compare:
        return compare(args.root.resolve(), args.compare)
    passed, total, _, statuses = run(args.root, args.verbose)
    if args.json:
        args.json.write_text(json.dumps(statuses, indent=1))
    print(f"{passed} of {total} examples run")
    return 0 if passed >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
