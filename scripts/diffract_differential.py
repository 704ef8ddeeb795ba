"""Run the same Diffract API calls through the published Diffract and through this project,
and compare the shapes of what they return (dict nesting, record keys, columns, types).

Diffract needs Python 3.12: make a venv with it first, e.g.::

    $(pyenv root)/versions/3.12*/bin/python -m venv /tmp/dvenv
    /tmp/dvenv/bin/pip install "diffract-core[pandas,polars,viz]==0.3.1"
    KERAS_BACKEND=jax .venv/bin/python scripts/diffract_differential.py /tmp/dvenv/bin/python

Each interpreter runs :data:`PROBE` in a fresh folder and prints a JSON description of every
result; the two descriptions are compared key by key. Differences listed in :data:`KNOWN`
(documented in docs/migrating-from-diffract.md) are reported but do not fail the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = r"""
import json, logging, sys
import numpy as np
logging.disable(logging.CRITICAL)
from diffract import Session

def shape(v):
    if isinstance(v, dict):
        return {str(k): shape(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [type(v).__name__, [shape(x) for x in v[:2]]]
    if hasattr(v, "columns"):
        return ["frame", [str(c) for c in v.columns], len(v)]
    if isinstance(v, np.ndarray):
        return ["ndarray", list(v.shape)]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return type(v).__name__ if not isinstance(v, str) or len(v) > 20 else type(v).__name__
    return type(v).__name__

rng = np.random.default_rng(0)
w = {"a.weight": rng.normal(size=(8, 6)).astype(np.float32),
     "b.weight": rng.normal(size=(6, 4)).astype(np.float32)}
out = {}
s = Session(profile="ram")
with s:
    s.models.add(w, model_id="m1")
    s.models.add({"a.weight": rng.normal(size=(8, 6)).astype(np.float32)}, model_id="m2")
    s.compute.apply("frob_norm", "log_norm")
    for fmt in ("dict", "list", "pandas", "polars"):
        r = s.results.export_metrics("frob_norm", export_format=fmt)
        if fmt == "dict":
            r = {"<uid>": next(iter(r.values())), "n": len(r)}
        out["export_metrics/" + fmt] = shape(r)
    out["export_aggregates/list"] = shape(s.results.export_aggregates("log_norm", export_format="list"))
    out["export_aggregates/pandas"] = shape(s.results.export_aggregates("log_norm", export_format="pandas"))
    rows = s.results.export("log_norm", "frob_norm", export_format="list")
    out["export/list keys"] = [k if "@" not in k else k.split("@")[0] + "@..." for k in rows[0]]
    out["parameters.list"] = shape(s.models.parameters.list())
    out["parameters.list verbose keys"] = list(s.models.parameters.list(verbose=True)[0])
    out["list_available_kernels[0]"] = s.compute.list_available_kernels(verbose=True)[0]
    out["list_available_metrics[0]"] = s.compute.list_available_metrics(verbose=True)[0]
    out["results.erase"] = sorted(vars(s.results.erase("frob_norm")))
    out["models.erase"] = sorted(vars(s.models.erase("m2")))
    out["models.list"] = s.models.list()
print(json.dumps(out))
"""

#: differences documented on the migration page: (key, reason)
KNOWN = {
    "export_metrics/dict": "other_meta keys: ours 'dtype', Diffract 'numpy_dtype' and 'original_model_id'",
    "export_metrics/list": "meta_dtype vs meta_numpy_dtype, meta_original_model_id",
    "export_metrics/pandas": "meta_dtype vs meta_numpy_dtype, meta_original_model_id",
    "export_metrics/polars": "meta_dtype vs meta_numpy_dtype, meta_original_model_id",
    "export/list keys": "meta_dtype vs meta_numpy_dtype, meta_original_model_id",
    "list_available_kernels[0]": "our kernel inventory differs",
}


def describe(python: str) -> dict[str, object]:
    """The probe's JSON output under ``python``, run in a fresh folder."""
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [python, "-c", PROBE], cwd=folder, capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        raise SystemExit(f"{python} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Command line: the Python of a venv with ``diffract-core`` 0.3.1."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).exists():
        print(__doc__)
        return 2
    theirs, ours = describe(args[0]), describe(sys.executable)
    failed = 0
    for key in theirs:
        same = theirs[key] == ours.get(key)
        tag = "same" if same else ("known" if key in KNOWN else "DIFFERENT")
        failed += tag == "DIFFERENT"
        print(f"{tag:9s} {key}")
        if not same:
            print(f"          diffract: {json.dumps(theirs[key])[:300]}")
            print(f"          ours:     {json.dumps(ours.get(key))[:300]}")
            if key in KNOWN:
                print(f"          ({KNOWN[key]})")
    print(
        f"{len(theirs) - failed} of {len(theirs)} results have Diffract's shape (or a documented difference)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
