"""Run differential snippets in this interpreter and write their canonical results as JSON.

Run by ``scripts/diffract_differential.py`` once per library: under the Diffract venv (where
``import diffract`` is the published ``diffract-core``) and under ours. Needs only the standard
library and numpy, so it runs unchanged in both. Usage::

    python runner.py snippets.json results.json

``snippets.json`` is a list of ``{"id": ..., "code": ...}``. Every snippet runs in a fresh
temporary working folder and a fresh namespace holding the helpers below; what it puts in
``out`` (a dict) is its result. An exception escaping the snippet is recorded as
``{"raises": <name>, "is": [<names>]}`` under ``out["__raised__"]`` beside what was recorded
before it (``raised``: the most specific class name both libraries share, and all of them).

Helpers in a snippet's namespace:

- ``out``: the result dict; ``rng``: ``numpy.random.default_rng(0)``; ``np``.
- ``catch(fn, *args, names=(), **kw)``: ``fn(*args, **kw)``'s value, or ``{"raises": <name>}``
  (plus ``"names": {s: s in message}`` for each ``s`` in ``names``) if it raises.
- ``warned(fn, *args, **kw)``: ``{"value": ..., "warned": bool}``: whether the call logged a
  WARNING (or worse) or issued a Python warning; an exception is recorded as by ``catch``.
- ``rows(records)``: list records sorted by model and name, uid keys dropped (uids are random
  in Diffract) and ``meta_*`` keys dropped (``meta=True`` keeps them); ``key_order(keys)``: keys
  with each run of ``meta_*`` keys shown once; ``frame(df)``: a pandas/polars frame as
  ``{"columns": [...], "rows": [...]}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import json
import logging
import math
import os
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any

import numpy as np

#: error names both libraries share (Diffract's public errors, then Python's): an exception is
#: recorded by the most specific of its classes whose name is here, so that ours (which
#: subclass Diffract's) compare by what an ``except`` written for Diffract would catch
SHARED_ERRORS = (
    "ModelAlreadyExistsError",
    "ModelNotFoundError",
    "KernelNotFoundError",
    "ScopeValidationError",
    "InvalidIdentifierError",
    "IncompatibleStoreError",
    "InvalidConfigurationError",
    "DependencyNotFoundError",
    "CircularDependencyError",
    "InconsistentWiringError",
    "KernelExecutionError",
    "KernelError",
    "SessionError",
    "ModuleNotFoundError",
    "ImportError",
    "AttributeError",
    "KeyError",
    "IndexError",
    "TypeError",
    "ValueError",
    "LookupError",
    "RuntimeError",
    "NotImplementedError",
    "FileNotFoundError",
    "OSError",
)

UID_KEYS = ("parameter_uid", "uid")


def error_name(exc: BaseException) -> str:
    """The most specific class of ``exc`` whose name both libraries share, else its own name."""
    names = [c.__name__ for c in type(exc).__mro__]
    for name in names:
        if name in SHARED_ERRORS:
            return name
    return type(exc).__name__


def error_names(exc: BaseException) -> list[str]:
    """Every class of ``exc`` whose name both libraries share, most specific first: what an
    ``except`` clause written for either library catches it as."""
    return [c.__name__ for c in type(exc).__mro__ if c.__name__ in SHARED_ERRORS]


def raised(exc: BaseException, names: tuple[str, ...] = ()) -> dict[str, Any]:
    """The canonical record of an exception: ``raises`` (:func:`error_name`), ``is``
    (:func:`error_names`; the comparison accepts ours when Diffract's ``raises`` is among
    them) and, for each of ``names``, whether the message holds it."""
    rec: dict[str, Any] = {"raises": error_name(exc), "is": error_names(exc)}
    if names:
        text = str(exc)
        rec["names"] = {s: s in text for s in names}
    return rec


def canon(v: Any, depth: int = 0) -> Any:
    """A JSON-able form of ``v`` that compares equal across the two libraries when ``v`` does."""
    if depth > 40:
        return "<deep>"
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, enum.Enum):
        return f"<{type(v).__name__}.{v.name}>"
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(v, (complex, np.complexfloating)):
        return {"complex": [canon(v.real), canon(v.imag)]}
    if isinstance(v, np.ma.MaskedArray):
        return {"masked": canon(np.ma.getdata(v)), "mask": canon(np.ma.getmaskarray(v))}
    if isinstance(v, np.ndarray):
        if v.dtype == object:
            return [canon(x, depth + 1) for x in v.tolist()]
        return canon(v.tolist(), depth + 1)
    if isinstance(v, dict):
        return {str(k): canon(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [canon(x, depth + 1) for x in v]
    if isinstance(v, (set, frozenset)):
        items = [canon(x, depth + 1) for x in v]
        return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))
    if hasattr(v, "columns") and hasattr(v, "shape"):
        return frame(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {
            "<dataclass>": type(v).__name__,
            **{f.name: canon(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v)},
        }
    return f"<{type(v).__name__}>"


def _sort_key(rec: dict[str, Any]) -> str:
    keys = ("model_id", "parameter_name", "name", "field", "context_models", "context_params")
    return json.dumps([canon(rec.get(k)) for k in keys], sort_keys=True)


def rows(records: Any, drop: tuple[str, ...] = UID_KEYS, meta: bool = False) -> Any:
    """List records without uid keys (and ``meta_*`` keys unless ``meta``), sorted by model and
    name (key order kept). The ``meta_*`` keys differ as the migration page documents (dtype key,
    ``original_model_id``); snippets about them pass ``meta=True``."""
    if not isinstance(records, list):
        return canon(records)
    out = []
    for r in records:
        if isinstance(r, dict):
            out.append(
                {
                    k: canon(x)
                    for k, x in r.items()
                    if k not in drop and (meta or not str(k).startswith("meta_"))
                }
            )
        else:
            out.append(canon(r))
    return sorted(out, key=lambda r: _sort_key(r) if isinstance(r, dict) else json.dumps(r))


def key_order(keys: Any) -> list[str]:
    """Keys in order, each run of ``meta_*`` keys shown once as ``meta_*``."""
    out: list[str] = []
    for k in keys:
        k = str(k)
        if k.startswith("meta_"):
            if not out or out[-1] != "meta_*":
                out.append("meta_*")
        else:
            out.append(k)
    return out


def frame(df: Any) -> dict[str, Any]:
    """A pandas / polars frame as its columns (in order) and its rows (uids dropped, sorted)."""
    columns = key_order(df.columns)
    records = df.to_dicts() if hasattr(df, "to_dicts") else df.to_dict(orient="records")
    return {"columns": columns, "rows": rows(records)}


def by_name(export: Any) -> Any:
    """A ``dict``-format metric export keyed by ``model_id/name`` instead of the random uid."""
    if not isinstance(export, dict):
        return canon(export)
    out = {}
    for entry in export.values():
        meta = entry.get("metadata", {}) if isinstance(entry, dict) else {}
        key = f"{meta.get('model_id')}/{meta.get('name')}"
        out[key] = canon(entry)
    return out


def catch(fn: Any, *args: Any, names: tuple[str, ...] = (), **kw: Any) -> Any:
    """``fn(*args, **kw)``, or the canonical record of what it raised."""
    try:
        return fn(*args, **kw)
    except Exception as exc:
        return raised(exc, tuple(names))


class _Spy(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.hits += 1


def warned(fn: Any, *args: Any, **kw: Any) -> dict[str, Any]:
    """``{"value": fn(...), "warned": bool}``: whether a WARNING was logged or warned."""
    spy = _Spy()
    original = logging.Logger.callHandlers

    def call_handlers(self: logging.Logger, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            spy.emit(record)
        original(self, record)

    logging.Logger.callHandlers = call_handlers  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = catch(fn, *args, **kw)
    finally:
        logging.Logger.callHandlers = original  # type: ignore[method-assign]
    return {"value": value, "warned": bool(spy.hits or caught)}


def run_one(code: str) -> dict[str, Any]:
    """Run one snippet in a fresh folder and namespace; its canonical ``out``."""
    out: dict[str, Any] = {}
    namespace: dict[str, Any] = {
        "__name__": "__snippet__",
        "np": np,
        "rng": np.random.default_rng(0),
        "out": out,
        "catch": catch,
        "warned": warned,
        "rows": rows,
        "frame": frame,
        "by_name": by_name,
        "key_order": key_order,
    }
    here = os.getcwd()
    sink = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="dd-") as folder:
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(sink), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(compile(code, "<snippet>", "exec"), namespace)
        except Exception as exc:
            out["__raised__"] = raised(exc)
            out["__traceback__"] = traceback.format_exc(limit=-4)[-1500:]
        finally:
            os.chdir(here)
            for v in list(namespace.values()):
                close = getattr(v, "close", None)
                if type(v).__name__ == "Session" and callable(close):
                    with contextlib.suppress(Exception):
                        close()
    tb = out.pop("__traceback__", None)
    result = {"out": canon(out)}
    if tb:
        result["traceback"] = tb
    return result


def main(argv: list[str]) -> int:
    """Run every snippet of ``argv[0]`` and write the results to ``argv[1]``."""
    with open(argv[0], encoding="utf-8") as fh:
        snippets = json.loads(fh.read())
    logging.disable(logging.NOTSET)
    results = {}
    for snippet in snippets:
        start = time.perf_counter()
        results[snippet["id"]] = run_one(snippet["code"])
        results[snippet["id"]]["seconds"] = round(time.perf_counter() - start, 3)
    with open(argv[1], "w", encoding="utf-8") as fh:
        json.dump(results, fh, sort_keys=True, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
