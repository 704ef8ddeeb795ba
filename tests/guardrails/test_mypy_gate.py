"""scripts/mypy_gate.py (``make lint``): mypy's errors against the committed baseline, without
line numbers; new errors fail, entries no longer reported fail until ``--update``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
try:
    import mypy_gate
finally:
    sys.path.remove(str(ROOT / "scripts"))

A = 'python/diffract/a.py:12: error: Incompatible return value type (got "int", expected "str")  [return-value]'
B = 'python/diffract/b.py:3:5: error: Name "out" already defined on line 180  [no-redef]'
NOTE = 'python/diffract/a.py:12: note: "list" is invariant'


def test_normalise_drops_line_numbers_and_notes():
    assert mypy_gate.normalise(A) == (
        'python/diffract/a.py:return-value:Incompatible return value type (got "int", '
        'expected "str")'
    )
    assert mypy_gate.normalise(B) == (
        'python/diffract/b.py:no-redef:Name "out" already defined on line N'
    )
    assert mypy_gate.normalise(NOTE) is None
    assert mypy_gate.normalise("Success: no issues found in 3 source files") is None
    moved = A.replace(":12:", ":40:")
    assert mypy_gate.normalise(moved) == mypy_gate.normalise(A)


def test_absolute_paths_are_made_relative_to_the_repository():
    line = f"{ROOT}/python/diffract/a.py:1: error: boom  [misc]"
    assert mypy_gate.normalise(line) == "python/diffract/a.py:misc:boom"


@pytest.fixture
def gate(monkeypatch, tmp_path):
    baseline = tmp_path / "baseline.txt"
    out = {"text": ""}

    def fake_run():
        return (1 if out["text"] else 0), out["text"]

    monkeypatch.setattr(mypy_gate, "run_mypy", fake_run)

    def run(text: str, *args: str) -> int:
        out["text"] = text
        return mypy_gate.main(["--baseline", str(baseline), *args])

    return run, baseline


def test_update_then_check_passes(gate, capsys):
    run, baseline = gate
    assert run(f"{A}\n{A}\n{B}\n{NOTE}\n", "--update") == 0
    lines = [ln for ln in baseline.read_text().splitlines() if not ln.startswith("#")]
    assert len(lines) == 3 and lines == sorted(lines)  # one line per occurrence
    assert run(f"{B}\n{A}\n{A}\n") == 0
    assert "ok (3 baseline errors" in capsys.readouterr().out


def test_a_new_error_fails_and_is_printed(gate, capsys):
    run, _ = gate
    run(f"{A}\n", "--update")
    capsys.readouterr()
    assert run(f"{A}\n{B}\n") == 1
    out = capsys.readouterr().out
    assert "new mypy error: python/diffract/b.py:no-redef:" in out
    assert B in out  # mypy's own line, with its line number, to find it


def test_one_more_occurrence_of_a_baselined_error_fails(gate):
    run, _ = gate
    run(f"{A}\n", "--update")
    assert run(f"{A}\n{A}\n") == 1


def test_a_fixed_entry_fails_until_the_baseline_is_updated(gate, capsys):
    run, baseline = gate
    run(f"{A}\n{B}\n", "--update")
    capsys.readouterr()
    assert run(f"{A}\n") == 1
    assert "fixed, remove from baseline: python/diffract/b.py" in capsys.readouterr().out
    assert run(f"{A}\n", "--update") == 0
    assert run(f"{A}\n") == 0
    assert "b.py" not in baseline.read_text()


def test_mypy_itself_failing_is_not_a_pass(gate, monkeypatch, capsys):
    run, _ = gate
    monkeypatch.setattr(mypy_gate, "run_mypy", lambda: (2, "pyproject.toml: error: bad\n"))
    assert run("") == 2
    assert "mypy failed" in capsys.readouterr().out
