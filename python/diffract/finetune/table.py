"""The fine-tune diff: per layer, what changed between a base model and a fine-tuned one
(full or LoRA), and a summary of the model.

For each pair of same-named weight matrices W_b (base) and W_t (tuned), with the update
D = W_t - W_b (a convolution kernel taken as a matrix of its output channels by the rest):

- ``rel_change`` ``||D||_F / ||W_b||_F`` and ``norm_ratio`` ``||W_t||_F / ||W_b||_F``;
- ``effective_rank`` and ``stable_rank`` of D (:mod:`diffract.finetune.rank`);
- ``noise_sigma``, ``mp_edge``, ``signal_rank`` (singular values of D above the edge),
  ``signal_share`` (their share of ``||D||_F^2``) and ``bulk_ks`` (:mod:`diffract.finetune.spectrum`);
- ``update_kind`` (unchanged, low-rank, full-rank, noise) and ``low_rank``;
- ``overlap_left`` / ``overlap_right`` / ``subspace_overlap`` (their mean): the top-k singular
  subspaces of W_b and W_t (:mod:`diffract.finetune.overlap`);
- ``change_rank``: 1 for the layer with the largest relative change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diffract._errors import ExtractionError, InvalidArgumentError
from diffract.extract import Extracted, extract, natural_key
from diffract.extract.lora import as_numpy
from diffract.finetune import overlap, rank, spectrum

#: a layer whose relative change is at most this is unchanged
MIN_CHANGE = 1e-6

#: the per-layer columns, in table order
COLUMNS = (
    "name",
    "shape",
    "rel_change",
    "norm_ratio",
    "update_norm",
    "effective_rank",
    "stable_rank",
    "signal_rank",
    "noise_sigma",
    "mp_edge",
    "signal_share",
    "bulk_ks",
    "update_kind",
    "low_rank",
    "overlap_left",
    "overlap_right",
    "subspace_overlap",
    "change_rank",
)


def _as_matrix(w: np.ndarray, layout: str) -> np.ndarray:
    """A weight as a matrix: (out, in * k...) for ``out_in``, (k... * in, out) for ``in_out``."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim == 2:
        return w
    return w.reshape(w.shape[0], -1) if layout != "in_out" else w.reshape(-1, w.shape[-1])


def layer_diff(
    base: np.ndarray,
    tuned: np.ndarray,
    *,
    k: int = overlap.TOP_K,
    min_change: float = MIN_CHANGE,
    low_rank_fraction: float = rank.LOW_RANK_FRACTION,
    bulk_ks_max: float = rank.BULK_KS_MAX,
    precision: float | None = None,
) -> dict[str, Any]:
    """The diff fields of one weight matrix (see the module docstring).

    Args:
        base: W_b, a matrix (2-D).
        tuned: W_t, the same shape.
        k: top singular vectors compared by the overlap.
        min_change: a relative change at most this is ``unchanged``.
        low_rank_fraction: the low-rank rule's largest signal rank, as a share of min(m, n).
        bulk_ks_max: the low-rank rule's largest KS distance of the bulk to the MP law.
        precision: the machine epsilon the weights were stored with (their rounding is not
            an update direction: :func:`diffract.finetune.rank.numerical_zero`); default:
            the coarser of the two arrays' dtypes.

    Returns:
        The fields, by name (``name``, ``shape`` and ``change_rank`` are left to the caller).
    """
    if precision is None:
        precision = rank.dtype_eps(np.asarray(base).dtype, np.asarray(tuned).dtype)
    wb = np.asarray(base, dtype=np.float64)
    wt = np.asarray(tuned, dtype=np.float64)
    if wb.shape != wt.shape or wb.ndim != 2:
        raise InvalidArgumentError(f"need two matrices of one shape, got {wb.shape}, {wt.shape}")
    d = wt - wb
    shape = (int(d.shape[0]), int(d.shape[1]))
    nb, nt, nd = (float(np.linalg.norm(x)) for x in (wb, wt, d))
    s = np.linalg.svd(d, compute_uv=False)
    zero = rank.numerical_zero(s, shape, precision, max(nb, nt) / math.sqrt(d.size))
    sigma, spikes = 0.0, s > zero
    if nd > 0:  # Gavish & Donoho's median estimate, then once more without the spikes
        sigma = spectrum.noise_sigma(s, shape)
        edge = max(spectrum.mp_edge(sigma, shape), zero)
        sigma = spectrum.noise_sigma(s, shape, spikes=int((s > edge).sum()))
    edge = max(spectrum.mp_edge(sigma, shape), zero)
    spikes = s > edge
    energy = float((s * s).sum())
    share = float((s[spikes] ** 2).sum() / energy) if energy > 0 else float("nan")
    bulk = s[~spikes]
    bulk = bulk[bulk > zero]
    n_spikes = int(spikes.sum())
    ks = spectrum.bulk_ks(bulk, sigma, shape, n_spikes) if len(bulk) > len(s) // 2 else float("nan")
    rel = nd / nb if nb > 0 else (math.inf if nd > 0 else 0.0)
    signal_rank = int(spikes.sum())
    kind = rank.update_kind(
        changed=rel > min_change,
        signal_rank=signal_rank,
        min_dim=min(shape),
        bulk_ks=ks,
        signal_share=share if energy > 0 else 0.0,
        low_rank_fraction=low_rank_fraction,
        bulk_ks_max=bulk_ks_max,
    )
    ub, vtb = overlap.top_singular_vectors(wb, k)
    ut, vtt = overlap.top_singular_vectors(wt, k)
    left, right = overlap.top_subspace_overlap(ub, vtb, ut, vtt, k)
    return {
        "rel_change": rel,
        "norm_ratio": nt / nb if nb > 0 else float("nan"),
        "update_norm": nd,
        "effective_rank": rank.effective_rank(s),
        "stable_rank": rank.stable_rank(s),
        "signal_rank": signal_rank,
        "noise_sigma": sigma,
        "mp_edge": edge,
        "signal_share": share,
        "bulk_ks": ks,
        "update_kind": kind,
        "low_rank": kind == "low-rank",
        "overlap_left": left,
        "overlap_right": right,
        "subspace_overlap": (left + right) / 2,
    }


@dataclass
class DiffResult:
    """A fine-tune diff: one row per weight matrix, the layers left out, and a summary.

    Attributes:
        rows: one dict per layer (keys :data:`COLUMNS`), in the models' layer order.
        skipped: layer name -> why it is not in the table.
        base: what the base was (a path or description).
        tuned: what the tuned model was.
        options: the thresholds the rows were computed with.
    """

    rows: list[dict[str, Any]]
    skipped: dict[str, str] = field(default_factory=dict)
    base: str = "base"
    tuned: str = "tuned"
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def table(self) -> Any:
        """The rows as a pandas DataFrame indexed by layer name."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(COLUMNS)).set_index("name")

    def ranked(self) -> list[dict[str, Any]]:
        """The rows from the most to the least changed (by ``rel_change``)."""
        return sorted(self.rows, key=lambda r: r["change_rank"])

    @property
    def summary(self) -> dict[str, Any]:
        """The model in numbers: layers, changed, low-rank / full-rank / noise counts, the
        overall relative change and signal share (energy-weighted), the most changed layers."""
        rows = self.rows
        kinds = {k: sum(r["update_kind"] == k for r in rows) for k in rank.KINDS}
        nd2 = sum(r["update_norm"] ** 2 for r in rows)
        nb2 = sum((r["update_norm"] / r["rel_change"]) ** 2 for r in rows if r["rel_change"] > 0)
        sig = sum(r["signal_share"] * r["update_norm"] ** 2 for r in rows if r["update_norm"] > 0)
        low = [r["signal_rank"] for r in rows if r["low_rank"]]
        return {
            "layers": len(rows),
            "changed": len(rows) - kinds["unchanged"],
            **{k.replace("-", "_"): v for k, v in kinds.items()},
            "rel_change": math.sqrt(nd2 / nb2) if nb2 > 0 else 0.0,
            "signal_share": sig / nd2 if nd2 > 0 else float("nan"),
            "lora_rank": int(np.median(low)) if low else None,
            "most_changed": [
                r["name"] for r in self.ranked()[:5] if r["update_kind"] != "unchanged"
            ],
            "skipped": len(self.skipped),
        }

    def text(self) -> str:
        """The summary in a few sentences (the CLI prints it; the HTML report opens with it)."""
        s = self.summary
        lines = [
            f"{s['changed']} of {s['layers']} layers changed (overall ||dW||/||W|| = "
            f"{s['rel_change']:.3g}); {s['low_rank']} low-rank, {s['full_rank']} full-rank, "
            f"{s['noise']} noise-like, {s['unchanged']} unchanged.",
        ]
        if s["changed"]:
            lines.append(
                f"{100 * s['signal_share']:.1f}% of the update's energy is above the "
                "Marchenko-Pastur edge of a random matrix of its layer's shape (signal); the rest lies within that noise bulk."
            )
        if s["lora_rank"] is not None:
            lines.append(f"Low-rank layers have a median signal rank of {s['lora_rank']}.")
        if s["most_changed"]:
            lines.append("Most changed: " + ", ".join(s["most_changed"]) + ".")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready after :func:`diffract._vocab.jsonable.to_jsonable`)."""
        return {
            "base": self.base,
            "tuned": self.tuned,
            "options": dict(self.options),
            "summary": self.summary,
            "rows": [dict(r) for r in self.rows],
            "skipped": dict(self.skipped),
        }


#: (name, base array, tuned array, layout, machine epsilon of the stored weights or None)
Pair = tuple[str, Any, Any, str, float | None]


def diff_pairs(
    pairs: Iterable[Pair],
    *,
    base: str = "base",
    tuned: str = "tuned",
    skipped: dict[str, str] | None = None,
    k: int = overlap.TOP_K,
    min_change: float = MIN_CHANGE,
    low_rank_fraction: float = rank.LOW_RANK_FRACTION,
    bulk_ks_max: float = rank.BULK_KS_MAX,
) -> DiffResult:
    """The diff of matched layers ``(name, base array, tuned array, layout, eps)`` (eps: the
    stored weights' machine epsilon, None: from the arrays' dtypes): matrices and convolution
    kernels are compared; 1-D slices (biases, norms) are listed as skipped."""
    opts = {
        "k": k,
        "min_change": min_change,
        "low_rank_fraction": low_rank_fraction,
        "bulk_ks_max": bulk_ks_max,
    }
    rows: list[dict[str, Any]] = []
    skip = skipped if skipped is not None else {}  # a lazy ``pairs`` may add to it
    for name, wb, wt, layout, eps in pairs:
        a, b = np.asarray(wb), np.asarray(wt)
        if a.ndim < 2:
            skip[name] = "not a matrix (1-D): no spectrum"
            continue
        if a.shape != b.shape:
            skip[name] = f"shapes differ: base {a.shape}, tuned {b.shape}"
            continue
        if eps is None:
            eps = rank.dtype_eps(a.dtype, b.dtype)
        fields = layer_diff(
            _as_matrix(a, layout),
            _as_matrix(b, layout),
            k=k,
            min_change=min_change,
            low_rank_fraction=low_rank_fraction,
            bulk_ks_max=bulk_ks_max,
            precision=eps,
        )
        rows.append({"name": name, "shape": "x".join(map(str, a.shape)), **fields})
    order = sorted(
        range(len(rows)), key=lambda i: (-rows[i]["rel_change"], natural_key(rows[i]["name"]))
    )
    for pos, i in enumerate(order, 1):
        rows[i]["change_rank"] = pos
    return DiffResult(rows, skip, base, tuned, opts)


def _extracted(model: Any, lora: str, filter_spec: Any) -> Extracted:
    if isinstance(model, Extracted):
        return model
    return extract(model, filter_spec, lora=lora)


def _tuned(model: Any, lora: str, filter_spec: Any) -> Extracted:
    """The tuned model's leaves; a PEFT adapter alone (no base weights to merge into) is read
    as its updates ``<layer>.lora``, which :func:`diff` adds onto the base."""
    try:
        return _extracted(model, lora, filter_spec)
    except ExtractionError as exc:
        if lora != "merged" or "has no base weight" not in str(exc):
            raise
    return extract(model, filter_spec, lora="update")


def _partner(leaf: Any, by_name: dict[str, Any]) -> str | None:
    """The base leaf name a tuned leaf is compared with (None: why is set by the caller). A
    LoRA update ``<layer>.lora`` goes with the base's ``<layer>.weight``."""
    if "lora" in leaf.meta and leaf.meta["lora"].get("mode") == "update":
        if not leaf.name.endswith(".lora"):
            return None
        return leaf.name.removesuffix(".lora") + ".weight"
    return leaf.name


def _load(leaf: Any, other: Any) -> tuple[np.ndarray, np.ndarray] | str:
    """``(W_b, W_t)`` read now (one layer in memory at a time), or why they do not pair. A LoRA
    update is added onto the base weight: W_t = W_b + update."""
    update = "lora" in leaf.meta and leaf.meta["lora"].get("mode") == "update"
    wb = as_numpy(other.array, np.float64)
    wt = as_numpy(leaf.array, np.float64)
    if not update:
        if other.layout != leaf.layout and wb.ndim == 2:
            wb = wb.T
        return wb, wt
    if wt.shape != wb.shape and wt.T.shape == wb.shape:
        wt = wt.T  # fan_in_fan_out: the update is (out, in), the base (in, out)
    if wt.shape != wb.shape:
        return f"LoRA update of shape {wt.shape}, base weight {wb.shape}"
    return wb, wb + wt


def diff(
    base: Any,
    tuned: Any,
    *,
    filter_spec: Any = None,
    lora: str = "merged",
    k: int = overlap.TOP_K,
    min_change: float = MIN_CHANGE,
    low_rank_fraction: float = rank.LOW_RANK_FRACTION,
    bulk_ks_max: float = rank.BULK_KS_MAX,
) -> DiffResult:
    """Compare a fine-tuned model with its base, layer by layer.

    Args:
        base: the base model (a model object, state dict, checkpoint path or folder, or an
            :class:`~diffract.extract.Extracted`).
        tuned: the fine-tuned model, the same ways; a PEFT (LoRA) model is compared with its
            adapters merged (``lora="merged"``: W + scaling B @ A), a PEFT adapter folder
            alone by adding its updates onto the base's weights.
        filter_spec: which leaves to compare (as :func:`diffract.extract.extract`).
        lora: how LoRA adapters are read (``"merged"``, default; ``"update"`` names them
            ``<layer>.lora`` and leaves them unmatched).
        k: top singular vectors compared by the subspace overlap.
        min_change: a relative change at most this is ``unchanged``.
        low_rank_fraction: largest signal rank of a low-rank update, as a share of min(m, n).
        bulk_ks_max: largest KS distance of a low-rank update's bulk to the MP law.

    Returns:
        A :class:`DiffResult`: ``.table`` (a DataFrame), ``.summary``, ``.text()``.

    Raises:
        ExtractionError: a model cannot be read.
        InvalidArgumentError: no layer of the tuned model is in the base.
    """
    eb, et = _extracted(base, lora, filter_spec), _tuned(tuned, lora, filter_spec)
    by_name = {leaf.name: leaf for leaf in eb.leaves}
    matched, skipped = [], {}
    for leaf in et.leaves:
        name = _partner(leaf, by_name)
        if name is None:
            skipped[leaf.name] = "a second LoRA adapter of its layer: compare one at a time"
        elif name not in by_name:
            skipped[leaf.name] = "not in the base model" + (
                f" (no {name!r} to add the update to)" if name != leaf.name else ""
            )
        else:
            matched.append((leaf, by_name[name]))
    if not matched:
        raise InvalidArgumentError(
            "diff: no layer of the tuned model has a same-named layer in the base model"
        )

    def pairs() -> Iterator[Pair]:
        for leaf, other in matched:
            got = _load(leaf, other)
            if isinstance(got, str):
                skipped[leaf.name] = got
                continue
            eps = rank.dtype_eps(other.dtype, leaf.dtype)
            yield other.name, got[0], got[1], other.layout, eps

    return diff_pairs(
        pairs(),
        base=str(eb.source or eb.framework),
        tuned=str(et.source or et.framework),
        skipped=skipped,
        k=k,
        min_change=min_change,
        low_rank_fraction=low_rank_fraction,
        bulk_ks_max=bulk_ks_max,
    )


def diff_stored(scope: Any, base_id: str, tuned_id: str, **options: Any) -> DiffResult:
    """:func:`diff` of two models stored in a session (``session.results.diff(base, tuned)``):
    their slices are paired by name and read from the store.

    Args:
        scope: a session or scope (its ``models`` namespace reads the weights).
        base_id: the base model's id.
        tuned_id: the fine-tuned model's id.
        **options: as :func:`diff` (``k``, ``min_change``, ``low_rank_fraction``,
            ``bulk_ks_max``).
    """
    for mid in (base_id, tuned_id):
        if mid not in scope.models:
            raise InvalidArgumentError(f"diff: no model {mid!r} in this scope")
    slices = scope.models.slices()
    base = {s.name: s for s in slices if s.model_id == base_id}
    tuned = [s for s in slices if s.model_id == tuned_id]
    matched, skipped = [], {}
    for s in tuned:
        if s.name in base:
            matched.append((base[s.name], s))
        else:
            skipped[s.name] = "not in the base model"
    if not matched:
        raise InvalidArgumentError(
            f"diff: no slice of {tuned_id!r} has a same-named one in {base_id!r}"
        )

    def pairs() -> Iterator[Pair]:  # one layer in memory at a time
        for b, s in matched:
            wb, wt = scope.models.weights(b.uid), scope.models.weights(s.uid)
            eps = rank.dtype_eps(b.dtype, s.dtype)
            yield s.name, wb, wt, s.meta.get("layout", "out_in"), eps

    return diff_pairs(pairs(), base=base_id, tuned=tuned_id, skipped=skipped, **options)
