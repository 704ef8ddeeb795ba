"""The kernel options stored values were computed with, and the warning when an ``apply``
asks for other options but reuses those values (Diffract's rule: stored values are kept
whatever the options).

Each run records, per model, the options of every kernel that wrote values for it, in the
store document of kind :data:`OPTIONS_DOC` (name: the model id; text: JSON
``{field: {option: value}}``, the last run that computed the field for that model wins).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from diffract._vocab.jsonable import to_jsonable
from diffract._vocab.slices import SliceInfo
from diffract.kernels.spec import Kernel
from diffract.run.report import ReusedOptionsWarning
from diffract.store import Store

#: the store document kind holding the options stored values were computed with
OPTIONS_DOC = "field_options"

__all__ = ["OPTIONS_DOC", "ReusedOptionsWarning", "option_records", "reuse_mismatches"]


def _plain(opts: Mapping[str, Any]) -> dict[str, Any]:
    return to_jsonable(dict(opts), where="kernel options", nonfinite="keep", other="str")


def stored_options(store: Store, model_id: str) -> dict[str, list[dict[str, Any]]]:
    """field -> the option sets its stored values of ``model_id`` were computed with (one
    per distinct set; {} when no run recorded them: values stored before the record)."""
    text = store.documents(OPTIONS_DOC).get(model_id)
    record = json.loads(text) if text else {}
    return {f: v if isinstance(v, list) else [v] for f, v in record.items()}


def option_records(
    store: Store,
    kernels: Iterable[Kernel],
    opts_of: Mapping[str, Mapping[str, Any]],
    written: Iterable[tuple[str, str]],
) -> dict[tuple[str, str], str]:
    """The documents to commit after a run: for each model with values written, its record
    updated with the options of the kernels that wrote them (they replace the record of a
    field when every stored value of it was written by the run, else they are added to it).

    Args:
        store: the store (read for the models' slices and their records so far).
        kernels: the kernels of the run.
        opts_of: kernel name -> the options it ran with.
        written: the (owner, field) keys the run wrote.

    Returns:
        ``{(OPTIONS_DOC, model_id): text}``; empty when nothing was written.
    """
    producer = {o: k for k in kernels for o in k.outputs}
    model_of = {s.uid: s.model_id for s in store.slices()}
    models = set(store.models())
    owners_of: dict[str, set[str]] = {}
    for uid, m in model_of.items():
        owners_of.setdefault(m, {m}).add(uid)
    per_model: dict[str, dict[str, set[str]]] = {}
    for owner, f in written:
        model = model_of.get(owner, owner if owner in models else None)
        k = producer.get(f)
        if model is not None and k is not None and k.options:
            per_model.setdefault(model, {}).setdefault(f, set()).add(owner)
    docs = {}
    for model, fields in per_model.items():
        record = stored_options(store, model)
        for f, owners in fields.items():
            opts = _plain(opts_of[producer[f].name])
            stored = {o for o, _ in store.present([(o, f) for o in owners_of.get(model, ())])}
            kept = [] if stored <= owners else [v for v in record.get(f, []) if v != opts]
            record[f] = [*kept, opts]
        docs[(OPTIONS_DOC, model)] = json.dumps(record, sort_keys=True, allow_nan=True)
    return docs


def reuse_mismatches(
    store: Store,
    kernels: Iterable[Kernel],
    opts_of: Mapping[str, Mapping[str, Any]],
    given: Mapping[str, set[str]],
    selected: list[SliceInfo],
) -> list[str]:
    """What a run would reuse though it was given other options: one line per (model,
    kernel, option), for the fields of ``kernels`` with stored values in the selection
    whose record holds another value of an option given to this run.

    Args:
        store: the store.
        kernels: the kernels of the run (the closure of the fields asked for).
        opts_of: kernel name -> the options it runs with now.
        given: kernel name -> the options given to this run (by name, by a convention
            preset, by ``configure`` or ``kernel_options``).
        selected: the selected slices.

    Returns:
        One line per model, kernel and option, such as ``"pl_alpha, pl_ks of model 'm'
        (16 stored values each): computed with fix_fingers=None, asked for
        fix_fingers='clip_xmax'"``.
    """
    by_model: dict[str, list[SliceInfo]] = {}
    for s in selected:
        by_model.setdefault(s.model_id, []).append(s)
    lines = []
    for model, slices in by_model.items():
        record = stored_options(store, model)
        if not record:
            continue
        for k in kernels:
            names = given.get(k.name, set())
            if not names:
                continue
            now = _plain({o: opts_of[k.name][o] for o in names})
            owners = [model] if k.level == "model" else [s.uid for s in slices]
            differ: dict[tuple[str, str, str], list[str]] = {}
            count = 0
            for f in k.outputs:
                variants = record.get(f, [])
                n = len(store.present([(o, f) for o in owners])) if variants else 0
                count = max(count, n)
                for o in sorted(names) if n else ():
                    old = sorted({repr(v[o]) for v in variants if o in v and v[o] != now[o]})
                    if old:
                        differ.setdefault((o, " or ".join(old), repr(now[o])), []).append(f)
            for (o, was, asked), fs in differ.items():
                lines.append(
                    f"{', '.join(fs)} of model {model!r} ({count} stored value"
                    f"{'s' * (count != 1)} each): computed with {o}={was}, asked for {o}={asked}"
                )
    return lines
