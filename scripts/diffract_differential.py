"""Differential suite: the same snippets through the published Diffract and through this project.

The snippets (``tests/diffract_differential/snippets/pNN_*.py``, one file per point of issue 26)
are what a Diffract 0.3.1 user writes, beyond its documented happy paths. Each runs through both
libraries, each in a fresh temporary folder and namespace, all snippets of one library in one
interpreter process (``tests/diffract_differential/runner.py``; the few snippets that change
process-wide state, ``isolate``, in a second one; all four processes at once); the canonical JSON results are
compared (floats with relative/absolute tolerance 1e-6) and each snippet gets a status:

- ``same``: the results are equal;
- ``raises-in-ours-only`` / ``raises-in-Diffract-only``: every difference is one side raising
  where the other returns;
- ``differs``: anything else.

The expected status of every snippet is in ``tests/diffract_differential/expected.py``
(``same`` or ``documented: d-<anchor>``, an anchor of docs/migrating-from-diffract.md);
``tests/diffract_differential/test_differential.py`` asserts them.

Interpreters:

- Diffract: ``$DIFFRACT_PYTHON``, else ``.venv-diffract/bin/python`` (``make diffract-venv``
  builds it from pyenv's Python 3.12 with ``diffract-core[pandas,polars]==0.3.1``).
- PyTorch snippets (``needs=("torch",)``): Diffract 0.3.1 does not import on Python 3.11
  (PEP 695 generics, e.g. ``def build_with_defaults[T](...)``), and PyPI's Python 3.12 torch is
  the multi-GB CUDA build, so these snippets run on Diffract with ``diffract_code``: the same
  code given the model as Diffract's torch extractors would read it (:data:`DERIVED`). The
  report labels them ``derived``. Flax runs live (the venv has the ``flax`` extra).
- ours: this interpreter, with the checkout's ``python/`` first on the path.

Usage::

    .venv/bin/python scripts/diffract_differential.py [-v] [-k SUBSTRING] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "diffract_differential"
RUNNER = SUITE / "runner.py"
DOC = ROOT / "docs" / "migrating-from-diffract.md"
TOL = 1e-6

#: how a snippet's ``diffract_code`` stands for a framework Diffract cannot run here, from
#: Diffract 0.3.1's source (diffract/core/data/nn/extractors/torch.py, handlers/torch_handlers.py)
DERIVED = {
    "torch": (
        "Diffract's torch extractors, from its source: an nn.Module yields one DENSE slice per "
        "nn.Linear, named by module path (named_modules), holding its weight; a state dict "
        "yields the 2-D tensors whose name ends in 'weight' (more than one element); nothing "
        "else. diffract_code passes those same arrays as a NumPy dict."
    ),
}
STATUSES = ("same", "differs", "raises-in-ours-only", "raises-in-Diffract-only")


def load_snippets() -> list[dict[str, Any]]:
    """Every snippet, in file then declaration order, with ``point`` set from its file name."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    folder = str(SUITE / "snippets")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    for path in sorted((SUITE / "snippets").glob("p[0-9][0-9]_*.py")):
        spec = importlib.util.spec_from_file_location(f"_dd_{path.stem}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        point = int(path.stem[1:3])
        for s in module.SNIPPETS:
            if s["id"] in seen:
                raise ValueError(f"duplicate snippet id {s['id']!r} in {path.name}")
            seen.add(s["id"])
            out.append({"point": point, "needs": (), "isolate": False, **s})
    return out


def load_expected() -> dict[str, str]:
    """The expected status of every snippet (``tests/diffract_differential/expected.py``)."""
    spec = importlib.util.spec_from_file_location("_dd_expected", SUITE / "expected.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.EXPECTED)


def diffract_python() -> str | None:
    """The Python of a venv with diffract-core 0.3.1, if there is one."""
    path = os.environ.get("DIFFRACT_PYTHON") or str(ROOT / ".venv-diffract" / "bin" / "python")
    return str(Path(path).absolute()) if Path(path).exists() else None


def _env(ours: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.setdefault("KERAS_BACKEND", "jax")
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONHASHSEED"] = "0"
    if ours:
        env["PYTHONPATH"] = str(ROOT / "python")
    return env


def _batches(snippets: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """One batch for the snippets that change process-wide state (``isolate``: Diffract's kernel
    configuration and registry are global), one for all the others."""
    return [
        b
        for b in ([s for s in snippets if not s["isolate"]], [s for s in snippets if s["isolate"]])
        if b
    ]


def _run_batch(
    python: str, batch: list[dict[str, Any]], ours: bool, folder: str, tag: str
) -> dict[str, Any]:
    src, dst = Path(folder) / f"in-{tag}.json", Path(folder) / f"out-{tag}.json"
    src.write_text(json.dumps([{"id": s["id"], "code": s["code"]} for s in batch]))
    done = subprocess.run(
        [python, str(RUNNER), str(src), str(dst)],
        cwd=folder,
        env=_env(ours),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0 or not dst.exists():
        raise RuntimeError(
            f"{python} failed on the snippets ({'ours' if ours else 'Diffract'}):\n"
            f"{done.stderr[-3000:]}"
        )
    return dict(json.loads(dst.read_text()))


def run_sides(jobs: list[tuple[str, list[dict[str, Any]], bool]]) -> list[dict[str, Any]]:
    """Run each (python, snippets, ours) job, all batches at once; each job's results by id."""
    with (
        tempfile.TemporaryDirectory(prefix="dd-run-") as folder,
        ThreadPoolExecutor(max_workers=4) as pool,
    ):
        futures = [
            [
                pool.submit(_run_batch, python, batch, ours, folder, f"{j}-{i}")
                for i, batch in enumerate(_batches(snippets))
            ]
            for j, (python, snippets, ours) in enumerate(jobs)
        ]
        results = []
        for job in futures:
            merged: dict[str, Any] = {}
            for f in job:
                merged.update(f.result())
            results.append(merged)
    return results


def _short(v: Any) -> str:
    text = json.dumps(v, sort_keys=True)
    return text if len(text) <= 70 else text[:67] + "..."


def compare(ours: Any, theirs: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Differences between two canonical results: (path, ours, theirs); floats within 1e-6."""
    if isinstance(ours, bool) or isinstance(theirs, bool):
        return [] if ours is theirs else [(path, ours, theirs)]
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
        if type(ours) is not type(theirs):
            return [(path, ours, theirs)]
        if ours == theirs or math.isclose(ours, theirs, rel_tol=TOL, abs_tol=TOL):
            return []
        return [(path, ours, theirs)]
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if ("raises" in ours) != ("raises" in theirs):
            return [(path, ours, theirs)]
        diffs = []
        if "raises" in ours:
            # ours is the same error when an ``except`` for Diffract's class catches it: ours
            # subclass Diffract's names and builtins (``is``: every shared class of ours)
            if theirs["raises"] not in ours.get("is", [ours["raises"]]):
                diffs.append((f"{path}.raises", ours["raises"], theirs["raises"]))
            ours = {k: v for k, v in ours.items() if k not in ("raises", "is")}
            theirs = {k: v for k, v in theirs.items() if k not in ("raises", "is")}
        for k in sorted(set(ours) | set(theirs)):
            if k not in ours or k not in theirs:
                diffs.append((f"{path}.{k}", ours.get(k, "<absent>"), theirs.get(k, "<absent>")))
            else:
                diffs += compare(ours[k], theirs[k], f"{path}.{k}")
        return diffs
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return [(path, ours, theirs)]
        diffs = []
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            diffs += compare(a, b, f"{path}[{i}]")
        return diffs
    return [] if ours == theirs else [(path, ours, theirs)]


def _raises(v: Any) -> bool:
    return isinstance(v, dict) and "raises" in v


def status_of(diffs: list[tuple[str, Any, Any]]) -> str:
    """The status that a list of differences amounts to."""
    if not diffs:
        return "same"
    if all(_raises(a) and not _raises(b) for _, a, b in diffs):
        return "raises-in-ours-only"
    if all(_raises(b) and not _raises(a) for _, a, b in diffs):
        return "raises-in-Diffract-only"
    return "differs"


def describe(diffs: list[tuple[str, Any, Any]], limit: int = 3) -> str:
    """One line naming the first differences: ``path: ours X, Diffract Y``."""
    parts = [
        f"{p.lstrip('.') or 'result'}: ours {_short(a)}, Diffract {_short(b)}" for p, a, b in diffs
    ]
    more = f" (+{len(parts) - limit} more)" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def run_all(snippets: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Run every snippet through both libraries; per snippet id its status and details."""
    snippets = load_snippets() if snippets is None else snippets
    plain = diffract_python()
    if plain is None:
        raise RuntimeError(
            "no Python with diffract-core 0.3.1: run `make diffract-venv` (builds .venv-diffract "
            "from pyenv's Python 3.12) or set DIFFRACT_PYTHON"
        )
    theirs_snippets = [{**s, "code": s.get("diffract_code", s["code"])} for s in snippets]
    theirs, ours = run_sides([(plain, theirs_snippets, False), (sys.executable, snippets, True)])
    source = {
        s["id"]: "derived: " + DERIVED[s["needs"][0]] if "diffract_code" in s else "live"
        for s in snippets
    }
    report: dict[str, dict[str, Any]] = {}
    for s in snippets:
        a, b = ours[s["id"]], theirs[s["id"]]
        diffs = compare(a["out"], b["out"])
        report[s["id"]] = {
            "point": s["point"],
            "what": s.get("what", ""),
            "status": status_of(diffs),
            "detail": describe(diffs),
            "ours": a["out"],
            "diffract": b["out"],
            "diffract_source": source[s["id"]],
            "seconds_ours": a.get("seconds"),
            "seconds_diffract": b.get("seconds"),
            "traceback_ours": a.get("traceback"),
            "traceback_diffract": b.get("traceback"),
        }
    return report


def main(argv: list[str] | None = None) -> int:
    """Command line: print one line per snippet, grouped by issue point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="print both results")
    parser.add_argument(
        "-k", action="append", default=[], help="only snippets whose id contains this (repeatable)"
    )
    parser.add_argument("--json", help="also write the full report to this file")
    parser.add_argument(
        "--write-expected",
        action="store_true",
        help="rewrite expected.py: keep each 'same' / 'documented: ...' entry, put the measured "
        "status (and the difference, as a comment) for every other snippet",
    )
    args = parser.parse_args(argv)
    snippets = [s for s in load_snippets() if not args.k or any(k in s["id"] for k in args.k)]
    expected = load_expected()
    start = time.monotonic()
    report = run_all(snippets)
    took = time.monotonic() - start
    counts: dict[str, int] = {}
    point = None
    for sid, r in report.items():
        if r["point"] != point:
            point = r["point"]
            print(f"\n## point {point}")
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        print(f"{r['status']:24s} {sid:44s} expected: {expected.get(sid, '<none>')}")
        if r["status"] != "same":
            print(f"{'':24s}   {r['detail']}")
        if args.verbose:
            print(f"{'':24s}   ours:     {json.dumps(r['ours'], sort_keys=True)[:600]}")
            print(f"{'':24s}   diffract: {json.dumps(r['diffract'], sort_keys=True)[:600]}")
            for side in ("ours", "diffract"):
                if r[f"traceback_{side}"]:
                    print(f"{'':24s}   traceback {side}: {r[f'traceback_{side}'][-400:]}")
    print(
        f"\n{len(report)} snippets in {took:.1f} s: "
        + ", ".join(f"{n} {k}" for k, n in counts.items())
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report, sort_keys=True, indent=1))
    if args.write_expected:
        write_expected(snippets, report, expected)
    return 0


_EXPECTED_HEADER = '''"""The expected status of every differential snippet: the one place to edit them.

Each value is ``"same"`` or ``"documented: d-<anchor>"`` (an anchor of
docs/migrating-from-diffract.md that names the difference). Until a point of issue 26 is
resolved its snippets carry their measured status (``"differs"``, ``"raises-in-ours-only"``,
``"raises-in-Diffract-only"``): test_differential.py checks that they still measure so, and
``test_no_snippet_differs_undocumented`` fails while any remains. The comment after an entry is
the difference measured when it was written (``scripts/diffract_differential.py
--write-expected`` rewrites the entries that are not yet ``same`` / ``documented``).
"""

EXPECTED: dict[str, str] = {
'''


def write_expected(
    snippets: list[dict[str, Any]], report: dict[str, dict[str, Any]], expected: dict[str, str]
) -> None:
    """Rewrite expected.py in snippet order (see ``--write-expected``)."""
    lines, point = [], None
    for s in snippets:
        if s["point"] != point:
            point = s["point"]
            lines.append(f"    # point {point}")
        old = expected.get(s["id"], "")
        final = old == "same" or old.startswith("documented: ")
        status = old if final else report[s["id"]]["status"]
        line = f"    {s['id']!r}: {status!r},".replace("'", '"')
        detail = report[s["id"]]["detail"]
        if not final and status != "same" and detail:
            line += "  # " + (detail if len(detail) <= 160 else detail[:157] + "...")
        lines.append(line)
    (SUITE / "expected.py").write_text(_EXPECTED_HEADER + "\n".join(lines) + "\n}\n")


if __name__ == "__main__":
    sys.exit(main())
