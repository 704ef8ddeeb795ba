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
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
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

#: files the examples read, as a user of these pages would have them (our own contents)
FIXTURES = {
    "config1.ini": "[storage]\nbackend = ram\n\n[export]\ndefault_export_format = dict\n",
    "config2.ini": "[storage]\nbackend = ram\n\n[cache]\nbackend = none\n",
    "my_config.ini": (
        "[storage]\nbackend = sqlite\n\n[storage.sqlite]\npath = ${DIFFRACT_HOME}/store.db\n\n"
        "[cache]\nbackend = simple\n\n[cache.simple]\nmax_memory_mb = 128\n\n"
        "[parallel.thread_pool]\nmax_workers = 2\n"
    ),
    "prod.ini": "[storage]\nbackend = hdf5\n\n[storage.hdf5]\npath = .diffract/prod.h5\n",
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


def _torch_models() -> dict[str, Any]:
    import torch

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
    from onnx import TensorProto, helper, numpy_helper

    w = rng.normal(size=(4, 6)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "fc.weight"], ["y"], transB=1)],
        "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[numpy_helper.from_array(w, name="fc.weight")],
    )
    out["onnx_model"] = helper.make_model(graph)
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    dense = nn.Dense(5)
    out["flax_model"] = dense.bind(dense.init(jax.random.PRNGKey(0), jnp.zeros((1, 3))))
    import keras

    out["tf_model"] = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
    return out


def _session(objects: dict[str, Any]) -> Any:
    """The session a reader of these pages has: a few models, two fields computed."""
    import torch

    from diffract import ParameterOverrides, Session

    s = Session(profile="ram")
    overrides = {
        f"model.layers.{i}.attn.{p}.weight": ParameterOverrides(
            other_meta={"layer_id": i, "head_id": h}
        )
        for i in range(2)
        for h, p in enumerate(("q_proj", "k_proj"))
    }
    s.models.add(objects["model"], model_id="gpt2-small", parameter_overrides=overrides)
    torch.manual_seed(1)
    base = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8))
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
        sd = {k: v + 0.01 * i * torch.randn_like(v) for k, v in base.state_dict().items()}
        s.models.add(sd, model_id=m)
    s.compute.apply("frob_norm", "stable_rank", progress=False)
    return s


def run(root: Path, verbose: bool) -> tuple[int, int, list[str]]:
    """Run every block; (passed, total, failure lines)."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import plotly.io as pio

    pio.renderers.default = "json"  # fig.show() prints instead of opening a browser
    objects = {**_torch_models(), **_other_models()}
    passed, failures, all_blocks = 0, [], blocks(root)
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
    os.chdir(cwd)
    return passed, len(all_blocks), failures


def main(argv: list[str] | None = None) -> int:
    """Command line: the Diffract checkout, ``-v`` for tracebacks, ``--target``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "root", type=Path, help="a checkout of Diffract's repository (README.md, docs/)"
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--target", type=int, default=62)
    args = ap.parse_args(argv)
    passed, total, _ = run(args.root, args.verbose)
    print(f"{passed} of {total} examples run")
    return 0 if passed >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
