"""Hand-made mutation check of the kernels and the store's segment log (``make mutation``).

Each mutant is one search-string / replacement pair in one source file. The package
(``python/diffract``), ``tests/`` and ``pyproject.toml`` are copied to a temporary folder once
(a snapshot: edits made in the checkout meanwhile cannot mix into a run); for each mutant the
copy's file is rewritten, the tests that should notice run in the copy (``PYTHONPATH`` puts
its package ahead of the editable install) under a timeout, and the file is restored. A small pytest plugin checks,
in the test process itself, that the mutated module is imported from the copy and holds the
replacement, so a "killed" can never come from testing the wrong code. The working tree is
never written.

A mutant is *killed* when its tests fail (or time out), *survived* when they pass. Before the
mutants, every test subset runs once on the unmutated copy and must pass. The score is
killed / total; below ``--min-score`` (90%) the script exits 1. A target text that is not
found exactly once is an error: update the mutant to the code as it is now.

Usage::

    python scripts/mutation_check.py              # every mutant
    python scripts/mutation_check.py --list       # names and targets
    python scripts/mutation_check.py --only hard-rank-rejects-rtol
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "diffract"

KERNEL_TESTS = ("tests/kernels/test_fields_closed_form.py",)
GOLDEN_CONVNET = ("tests/kernels/test_fields_golden.py", "-k", "convnet")
STORE_TESTS = (
    "tests/store/test_store.py",
    "tests/store/test_store_conformance.py",
    "tests/store/test_store_damage.py",
    "tests/store/test_store_log.py",
)


@dataclass(frozen=True)
class Mutant:
    """One mutation: replace ``find`` (present exactly once) by ``replace`` in ``path``.

    Args:
        name: a short id (``--only``).
        path: the file, relative to ``python/diffract``.
        find: the original text.
        replace: the mutated text.
        tests: pytest arguments selecting the tests that should kill it.
        why: what the mutation breaks.
    """

    name: str
    path: str
    find: str
    replace: str
    tests: tuple[str, ...]
    why: str

    @property
    def module(self) -> str:
        """The dotted module name of ``path``."""
        return "diffract." + self.path.removesuffix(".py").replace("/", ".")


MUTANTS: tuple[Mutant, ...] = (
    # --- kernels -------------------------------------------------------------------------------
    Mutant(
        "hard-rank-rejects-rtol",
        "kernels/ranks.py",
        "    return _rank(weights_svals, greater_dim, rtol)\n",
        "    if rtol is not None:\n"
        "        raise ValueError(f'rtol={rtol!r} is not accepted')\n"
        "    return _rank(weights_svals, greater_dim, rtol)\n",
        ("tests/session/test_bad_input.py",),
        "hard_rank fails whenever its rtol option is set (the mutation of issue 20)",
    ),
    Mutant(
        "hard-rank-ignores-rtol",
        "kernels/ranks.py",
        "    return _rank(weights_svals, greater_dim, rtol)\n",
        "    return _rank(weights_svals, greater_dim, None)\n",
        KERNEL_TESTS,
        "hard_rank accepts rtol but uses the default tolerance",
    ),
    Mutant(
        "rank-tolerance-inclusive",
        "kernels/ranks.py",
        "    return int(np.count_nonzero(s > tol))",
        "    return int(np.count_nonzero(s >= tol))",
        KERNEL_TESTS,
        "a singular value equal to the tolerance counts towards the rank",
    ),
    Mutant(
        "pl-scan-tail-size-off-by-one",
        "kernels/_linalg.py",
        "    suffix = np.cumsum(lx[::-1])[::-1]  # sum_{j>=i} lx_j\n"
        "    idx = np.arange(n - 1)\n"
        "    m = (n - idx).astype(np.float64)",
        "    suffix = np.cumsum(lx[::-1])[::-1]  # sum_{j>=i} lx_j\n"
        "    idx = np.arange(n - 1)\n"
        "    m = (n - idx - 1).astype(np.float64)",
        (*KERNEL_TESTS, "-k", "power_law or scan or small_sample"),
        "the power-law xmin scan counts one tail point too few",
    ),
    Mutant(
        "pl-xmin-next-candidate",
        "kernels/fits.py",
        'alpha, d, sigma, xmin = r["alphas"][i], r["Ds"][i], r["sigmas"][i], x[i]',
        'alpha, d, sigma, xmin = r["alphas"][i], r["Ds"][i], r["sigmas"][i], x[i + 1]',
        GOLDEN_CONVNET,
        "the fit reports the xmin after the chosen candidate",
    ),
    Mutant(
        "frob-norm-without-sqrt",
        "kernels/norms.py",
        "    return float(np.sqrt(np.dot(s, s)))",
        "    return float(np.dot(s, s))",
        KERNEL_TESTS,
        "frob_norm is the squared Frobenius norm",
    ),
    Mutant(
        "stable-rank-unsquared",
        "kernels/norms.py",
        "    return float(frob_norm**2 / spectral_norm**2)",
        "    return float(frob_norm / spectral_norm)",
        KERNEL_TESTS,
        "stable_rank is ||W||_F / ||W||_2, not its square",
    ),
    Mutant(
        "kurtosis-not-excess",
        "kernels/stats.py",
        "    return float(np.mean(d**4) / m2**2 - 3.0)",
        "    return float(np.mean(d**4) / m2**2)",
        ("tests/kernels/test_fields_stats.py",),
        "weights_kurtosis is Pearson's, not the excess kurtosis",
    ),
    Mutant(
        "overlap-signed",
        "kernels/compare.py",
        "    return np.abs(np.swapaxes(u, -1, -2) @ ref_u)",
        "    return np.swapaxes(u, -1, -2) @ ref_u",
        ("tests/kernels/test_fields_compare.py",),
        "singular-vector overlaps keep the sign (which is arbitrary)",
    ),
    Mutant(
        "esd-scale-n-minus-one",
        "kernels/spectral.py",
        "        return 1.0 / float(greater_dim)",
        "        return 1.0 / float(greater_dim - 1)",
        KERNEL_TESTS,
        "the default ESD scale divides by N - 1",
    ),
    Mutant(
        "mp-lower-edge",
        "kernels/rmt.py",
        "float(scale2 * (1 - r) ** 2)",
        "float(scale2 * (1 - r * r))",
        (*KERNEL_TESTS, "-k", "marchenko"),
        "the Marchenko-Pastur lower edge is (1 - 1/Q), not (1 - 1/sqrt(Q))^2",
    ),
    # --- the store's segment log -------------------------------------------------------------
    Mutant(
        "log-gap-of-one-unnoticed",
        "store/log.py",
        "        if int(n[:12]) != expected:\n",
        "        if int(n[:12]) > expected + 1:\n",
        STORE_TESTS,
        "a single missing record is not reported as damage",
    ),
    Mutant(
        "log-numbering-skips",
        "store/log.py",
        "        return _seq(names[-1]) + 1 if names else 1",
        "        return _seq(names[-1]) + 2 if names else 1",
        STORE_TESTS,
        "each commit skips a sequence number",
    ),
    Mutant(
        "log-rebuild-drops-last-record",
        "store/log.py",
        "                    for name in names:\n                        self._read_record(name, state)",
        "                    for name in names[:-1]:\n"
        "                        self._read_record(name, state)",
        STORE_TESTS,
        "a replay after a compaction leaves out the newest record",
    ),
    Mutant(
        "log-gc-deletes-last-batch",
        "store/log.py",
        "            if seq > last or (seq < cutoff and seq not in referenced):",
        "            if seq >= last or (seq < cutoff and seq not in referenced):",
        STORE_TESTS,
        "garbage collection deletes the data of the last committed batch",
    ),
    Mutant(
        "log-gc-one-compaction-early",
        "store/log.py",
        "        cutoff = _seq(compactions[-2]) if len(compactions) >= 2 else 0",
        "        cutoff = _seq(compactions[-1]) if len(compactions) >= 1 else 0",
        STORE_TESTS,
        "what the newest compaction supersedes is deleted at once (readers lose files)",
    ),
    Mutant(
        "hdf5-compaction-drops-last-value",
        "store/_hdf5.py",
        "    for key, v in state.values.items():\n        if not isinstance(v, ArrayRef):",
        "    for key, v in list(state.values.items())[:-1]:\n"
        "        if not isinstance(v, ArrayRef):",
        STORE_TESTS,
        "a compaction leaves out the last stored value",
    ),
    Mutant(
        "hdf5-rename-before-fsync",
        "store/_hdf5.py",
        '            with open(tmp, "rb+") as fh:\n'
        "                os.fsync(fh.fileno())\n"
        "            os.replace(tmp, final)\n",
        "            os.replace(tmp, final)\n"
        '            with open(final, "rb+") as fh:\n'
        "                os.fsync(fh.fileno())\n",
        STORE_TESTS,
        "a segment is renamed into place before its data is fsync-ed",
    ),
)

#: the pytest plugin loaded into each test run (``-p mutation_guard``)
GUARD = """
import importlib, os
from pathlib import Path

import pytest


def pytest_sessionstart(session):
    root = os.environ["MUTATION_ROOT"]
    marker = Path(os.environ["MUTATION_MARKER"])
    mod = importlib.import_module(os.environ["MUTATION_MODULE"])
    expect = os.environ.get("MUTATION_EXPECT_FILE")
    problem = None
    if not str(Path(mod.__file__).resolve()).startswith(root):
        problem = f"{mod.__name__} imported from {mod.__file__}, not from the copy {root}"
    elif expect and Path(expect).read_text() not in Path(mod.__file__).read_text():
        problem = f"{mod.__file__} does not hold the mutation"
    marker.write_text(problem or "ok")
    if problem:
        pytest.exit(problem, returncode=3)
"""


def _check_targets(mutants: tuple[Mutant, ...]) -> None:
    for m in mutants:
        n = (PACKAGE / m.path).read_text().count(m.find)
        if n != 1:
            sys.exit(
                f"mutant {m.name}: its target text occurs {n} times in python/diffract/{m.path} "
                "(expected once); update the mutant to the code as it is now"
            )


def _pytest(work: Path, module: str, args: tuple[str, ...], timeout: float, expect: str | None):
    """Run pytest on ``args`` against the copy; returns (returncode or None on timeout, tail)."""
    marker = work / "marker"
    marker.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(work / "python"), str(work / "guard")]),
        PYTHONDONTWRITEBYTECODE="1",
        KERAS_BACKEND="jax",
        JAX_PLATFORMS="cpu",
        MUTATION_ROOT=str((work / "python").resolve()),
        MUTATION_MARKER=str(marker),
        MUTATION_MODULE=module,
    )
    env.pop("MUTATION_EXPECT_FILE", None)
    if expect is not None:
        (work / "expect").write_text(expect)
        env["MUTATION_EXPECT_FILE"] = str(work / "expect")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "--rootdir", str(work)]
    cmd += ["-p", "no:cacheprovider", "-p", "mutation_guard", *args]
    try:
        proc = subprocess.run(
            cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        rc, tail = None, "timed out"
    else:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
        rc, tail = proc.returncode, (failed or lines or [""])[0 if failed else -1]
    guard = marker.read_text() if marker.exists() else "the guard plugin did not run"
    if guard != "ok" and rc is not None:
        sys.exit(f"not testing the copy ({' '.join(args)}): {guard}")
    if rc not in (None, 0, 1, 2):  # 1: tests failed, 2: collection broke (both: killed)
        sys.exit(f"pytest {' '.join(args)} exited {rc} ({tail}): fix the mutant's test selection")
    return rc, tail


def main(argv: list[str] | None = None) -> int:
    """Run the mutants; print one line each and the score.

    Args:
        argv: command-line arguments (``--only``, ``--list``, ``--timeout``, ``--min-score``,
            ``--no-baseline``).

    Returns:
        0 when the score reaches ``--min-score``, else 1.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="mutant names to run")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per test run")
    ap.add_argument("--min-score", type=float, default=0.9)
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated runs")
    opts = ap.parse_args(argv)
    mutants = tuple(m for m in MUTANTS if not opts.only or m.name in opts.only)
    if opts.only and len(mutants) != len(set(opts.only)):
        known = sorted(m.name for m in MUTANTS)
        sys.exit(f"unknown mutant(s) in {opts.only}; known: {known}")
    if opts.list:
        for m in mutants:
            print(f"{m.name:36} {m.path:22} {m.why}")
        return 0
    _check_targets(mutants)
    with tempfile.TemporaryDirectory(prefix="diffract-mutants-") as tmp:
        work = Path(tmp)
        skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
        shutil.copytree(PACKAGE, work / "python" / "diffract", ignore=skip)
        shutil.copytree(ROOT / "tests", work / "tests", ignore=skip)
        shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")
        (work / "guard").mkdir()
        (work / "guard" / "mutation_guard.py").write_text(GUARD)
        if not opts.no_baseline:
            for args in dict.fromkeys(m.tests for m in mutants):
                rc, tail = _pytest(work, "diffract", args, opts.timeout, None)
                if rc != 0:
                    sys.exit(f"baseline: {' '.join(args)} does not pass unmutated ({tail})")
                print(f"baseline ok: {' '.join(args)}", flush=True)
        killed = 0
        survivors = []
        for m in mutants:
            target = work / "python" / "diffract" / m.path
            original = target.read_text()
            target.write_text(original.replace(m.find, m.replace, 1))
            t0 = time.perf_counter()
            try:
                rc, tail = _pytest(work, m.module, m.tests, opts.timeout, m.replace)
            finally:
                target.write_text(original)
            status = "killed" if rc != 0 else "SURVIVED"
            if rc is None:
                status = "killed (timeout)"
            killed += rc != 0
            if rc == 0:
                survivors.append(m)
            took = time.perf_counter() - t0
            print(f"{status:16} {m.name:36} {took:6.1f}s  {tail}", flush=True)
    score = killed / len(mutants) if mutants else 1.0
    print(f"\nmutation score: {killed}/{len(mutants)} killed = {score:.0%}")
    for m in survivors:
        print(f"  survived: {m.name} ({m.path}): {m.why}; tests: {' '.join(m.tests)}")
    return 0 if score >= opts.min_score else 1


if __name__ == "__main__":
    sys.exit(main())
