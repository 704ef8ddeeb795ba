"""A tiny stand-in scheduler for the field-library tests: runs kernels straight from the
registry on in-memory numpy dicts (the engine's Session does the same, with storage)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

try:
    import diffract  # noqa: F401
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from diffract._core.slices import SliceInfo, infer_type, make_uid
from diffract.kernels import default_registry


class NA:
    """Marker: the field does not apply to this slice."""

    def __repr__(self) -> str:
        return "NA"


NOT_APPLICABLE = NA()


def _info(model_id, name, arr, index):
    return SliceInfo(
        model_id=model_id,
        name=name,
        uid=make_uid(model_id, name),
        type=infer_type(name, tuple(arr.shape)),
        shape=tuple(arr.shape),
        dtype=str(arr.dtype),
        index=index,
    )


def _prep(arr):
    a = np.asarray(arr)
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float32)
    return a


def run_models(models, fields, reference=None, registry=None, **options):
    """models: {model_id: {slice_name: ndarray}}. Returns (per_slice, per_model):
    per_slice[model_id][slice][field] = value | Exception | NOT_APPLICABLE,
    per_model[model_id][field] = value | Exception."""
    reg = registry or default_registry()
    if reference is not None:
        options["reference"] = reference
    plan = reg.closure(fields)
    weights = {m: {n: _prep(a) for n, a in d.items()} for m, d in models.items()}
    infos = {
        m: {n: _info(m, n, a, i) for i, (n, a) in enumerate(d.items())} for m, d in weights.items()
    }
    vals = {m: {n: {} for n in d} for m, d in weights.items()}
    mvals = {m: {} for m in weights}
    for k in plan:
        opts = k.resolve_options(options)
        for m in weights:
            if k.level == "model":
                args = []
                for inp in k.inputs:
                    if inp == "slices":
                        args.append([infos[m][n] for n in weights[m]])
                    else:
                        col = []
                        for n in weights[m]:
                            v = vals[m][n].get(inp, mvals[m].get(inp))
                            col.append(None if isinstance(v, (Exception, NA)) else v)
                        args.append(col)
                try:
                    res = k.split_outputs(k.func(*args, **opts))
                except Exception as err:
                    res = {o: err for o in k.outputs}
                mvals[m].update(res)
                continue
            pending = []
            for n, w in weights[m].items():
                slot = vals[m][n]
                if w.ndim < k.min_ndim:
                    slot.update({o: NOT_APPLICABLE for o in k.outputs})
                    continue
                args, bad = [], None
                for inp in k.inputs:
                    if inp == "weights":
                        v = w
                    elif inp == "slice_info":
                        v = infos[m][n]
                    elif k.level == "cross" and inp.startswith("ref_"):
                        if reference is None:
                            raise ValueError(f"field needs option reference= for {k.name}")
                        ref_slot = vals[reference].get(n)
                        if ref_slot is None:
                            v = NOT_APPLICABLE
                        else:
                            src = inp[4:]
                            v = (
                                weights[reference][n]
                                if src == "weights"
                                else ref_slot.get(src, NOT_APPLICABLE)
                            )
                    else:
                        v = slot.get(inp, mvals[m].get(inp, NOT_APPLICABLE))
                    if isinstance(v, (Exception, NA)):
                        bad = v
                        break
                    args.append(v)
                if bad is not None:
                    slot.update({o: bad for o in k.outputs})
                    continue
                pending.append((n, args))
            if not pending:
                continue
            if k.vectorized:
                cols = [list(c) for c in zip(*[a for _, a in pending], strict=False)]
                try:
                    out = k.func(*cols, **opts)
                except Exception as err:
                    out = [err] * len(pending)
                for (n, _), r in zip(pending, out, strict=False):
                    if isinstance(r, Exception):
                        vals[m][n].update({o: r for o in k.outputs})
                    else:
                        vals[m][n].update(k.split_outputs(r))
            else:
                for n, args in pending:
                    try:
                        res = k.split_outputs(k.func(*args, **opts))
                    except Exception as err:
                        res = {o: err for o in k.outputs}
                    vals[m][n].update(res)
    return vals, mvals


def run_fields(weights, fields, **options):
    """One model: {slice_name: ndarray} -> {slice_name: {field: value}} (model-level fields
    appear under the key None)."""
    per_slice, per_model = run_models({"m": weights}, fields, **options)
    out = dict(per_slice["m"])
    out[None] = per_model["m"]
    return out


def field(w, name, **options):
    """The value of one field for a single matrix; re-raises a per-slice failure."""
    v = run_fields({"w": w}, [name], **options)["w"][name]
    if isinstance(v, Exception):
        raise v
    return v
