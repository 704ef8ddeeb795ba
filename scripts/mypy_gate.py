"""mypy over python/diffract, against a committed baseline (``make lint`` runs it).

mypy's configuration is pyproject.toml's ``[tool.mypy]``. Each error is normalised to
``path:code:message`` (no line numbers, so moving code does not break the gate) and compared
with ``scripts/mypy-baseline.txt`` as a multiset (an error reported twice is listed twice):

* an error not in the baseline fails the gate (exit 1) and is printed;
* a baseline entry mypy no longer reports is printed as "fixed, remove from baseline" and also
  fails, so the baseline can only shrink;
* ``--update`` rewrites the baseline with the errors reported now (and exits 0).

Usage::

    .venv/bin/python scripts/mypy_gate.py            # check
    .venv/bin/python scripts/mypy_gate.py --update   # regenerate the baseline
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "scripts" / "mypy-baseline.txt"
HEADER = (
    "# mypy errors accepted for now: path:code:message, one per occurrence, sorted.\n"
    "# Written by `.venv/bin/python scripts/mypy_gate.py --update`; it may only shrink.\n"
)
MYPY_FLAGS = [
    "--no-pretty",
    "--no-error-summary",
    "--show-error-codes",
    "--no-color-output",
    "--show-absolute-path",
]
_LINE = re.compile(
    r"^(?P<path>.+?):(?P<line>\d+)(?::\d+)?: (?P<severity>error|note|warning): "
    r"(?P<message>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$"
)
_LINE_REFS = re.compile(r"\b(on |at )?line \d+")


def normalise(line: str, root: Path = ROOT) -> str | None:
    """One mypy output line as ``path:code:message``, or None for notes and other lines.

    Args:
        line: one line of mypy's output.
        root: paths are made relative to this folder (posix separators).

    Returns:
        The normalised error, or None when the line is not an error.
    """
    m = _LINE.match(line.rstrip())
    if m is None or m["severity"] != "error":
        return None
    path = Path(m["path"]).resolve()
    if path.is_relative_to(root):
        path = path.relative_to(root)
    message = _LINE_REFS.sub(lambda r: f"{r[1] or ''}line N", m["message"])
    return f"{path.as_posix()}:{m['code'] or 'misc'}:{message}"


def run_mypy() -> tuple[int, str]:
    """Run mypy with pyproject.toml's configuration from the repository root.

    Returns:
        mypy's exit status and its combined output.
    """
    done = subprocess.run(
        [sys.executable, "-m", "mypy", *MYPY_FLAGS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def errors_of(output: str) -> Counter[str]:
    """The normalised errors in mypy's output, counted.

    Args:
        output: mypy's output.

    Returns:
        How often each normalised error occurs.
    """
    return Counter(e for e in map(normalise, output.splitlines()) if e is not None)


def read_baseline(path: Path = BASELINE) -> Counter[str]:
    """The baseline's entries, counted (comments and blank lines skipped).

    Args:
        path: the baseline file; a missing file is an empty baseline.

    Returns:
        How often each accepted error occurs.
    """
    if not path.exists():
        return Counter()
    lines = (ln.strip() for ln in path.read_text(encoding="utf-8").splitlines())
    return Counter(ln for ln in lines if ln and not ln.startswith("#"))


def write_baseline(errors: Counter[str], path: Path = BASELINE) -> None:
    """Write ``errors`` as the baseline, one line per occurrence, sorted.

    Args:
        errors: the normalised errors to accept.
        path: the baseline file.
    """
    body = "".join(f"{e}\n" for e in sorted(errors.elements()))
    path.write_text(HEADER + body, encoding="utf-8")


def _show(title: str, entries: Iterable[str]) -> None:
    for entry in entries:
        print(f"{title}: {entry}")


def main(argv: list[str] | None = None) -> int:
    """Check mypy's errors against the baseline, or rewrite it with ``--update``.

    Args:
        argv: command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        0 when mypy reports exactly the baseline (or after ``--update``), 1 when it reports
        new errors or no longer reports some baseline entries, 2 when mypy itself failed.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the baseline")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help="baseline file")
    args = parser.parse_args(argv)

    status, output = run_mypy()
    found = errors_of(output)
    if status not in (0, 1) or (status == 1 and not found):
        print(output, end="")
        print(f"mypy_gate: mypy failed (exit status {status}); see its output above")
        return 2
    if args.update:
        write_baseline(found, args.baseline)
        print(f"mypy_gate: wrote {sum(found.values())} entries to {args.baseline}")
        return 0

    baseline = read_baseline(args.baseline)
    new = sorted((found - baseline).elements())
    fixed = sorted((baseline - found).elements())
    _show("new mypy error", new)
    _show("fixed, remove from baseline", fixed)
    if new:
        print("mypy_gate: where (mypy's own lines):")
        wanted = set(new)
        for line in output.splitlines():
            if normalise(line) in wanted:
                print(f"  {line}")
    if new or fixed:
        print(
            f"mypy_gate: {len(new)} new error(s), {len(fixed)} fixed baseline entr(ies). Fix the "
            "new ones; once only fixed entries remain, run "
            "`.venv/bin/python scripts/mypy_gate.py --update` and commit the baseline."
        )
        return 1
    print(f"mypy_gate: ok ({sum(found.values())} baseline errors, no new ones)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
