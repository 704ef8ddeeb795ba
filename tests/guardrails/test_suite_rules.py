"""Rules of the test suite itself: a skipped test fails the run unless tests/conftest.py lists
it in ALLOWED_SKIPS (with a reason), and that list names only tests that exist."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parents[1]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_")
    }


def test_allowed_skips_are_not_stale():
    assert conftest.ALLOWED_SKIPS, "no allowed skips: drop the list's entries' test instead"
    for nodeid, reason in conftest.ALLOWED_SKIPS.items():
        path, _, name = nodeid.partition("::")
        assert path.startswith("tests/") and name, nodeid
        file = TESTS.parent / path
        assert file.is_file(), f"ALLOWED_SKIPS names a missing file: {nodeid}"
        assert name in _test_names(file), f"ALLOWED_SKIPS names a missing test: {nodeid}"
        assert len(reason.split()) >= 5, f"give the reason for skipping {nodeid}"
        assert "pytest.skip(" in file.read_text(), f"{path} has no skip any more: {nodeid}"


def _run(tmp_path: Path, body: str, name: str = "test_x.py") -> subprocess.CompletedProcess:
    tests = tmp_path / "tests"
    tests.mkdir()
    for helper in ("conftest.py", "_engine_kit.py"):  # the root conftest loads _engine_kit
        shutil.copy(TESTS / helper, tests / helper)
    (tests / name).parent.mkdir(parents=True, exist_ok=True)
    (tests / name).write_text("import pytest\n\n" + body)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unlisted_skip_fails_the_run(tmp_path):
    out = _run(tmp_path, "def test_a():\n    pytest.skip('no reason')\n\ndef test_b():\n    pass\n")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "not in ALLOWED_SKIPS" in out.stdout and "tests/test_x.py::test_a" in out.stdout
    assert "1 passed, 1 skipped" in out.stdout


def test_a_module_skipped_at_import_fails_the_run(tmp_path):
    out = _run(tmp_path, "pytest.importorskip('no_such_module_here')\n\ndef test_a():\n    pass\n")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "tests/test_x.py: " in out.stdout and "no_such_module_here" in out.stdout


def test_a_listed_skip_does_not_fail_the_run(tmp_path):
    nodeid = next(iter(conftest.ALLOWED_SKIPS))
    path, _, name = nodeid.partition("::")
    out = _run(
        tmp_path,
        f"def {name}():\n    pytest.skip('on this machine')\n",
        name=Path(path).relative_to("tests").as_posix(),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 skipped" in out.stdout and "not in ALLOWED_SKIPS" not in out.stdout


def test_no_two_test_files_share_a_name():
    """pytest imports a test file by its name alone (no ``__init__.py`` in the folders), so two
    files of one name in different folders would fail the collection of the second."""
    names: dict[str, list[str]] = {}
    for p in TESTS.rglob("*.py"):
        names.setdefault(p.name, []).append(p.relative_to(TESTS).as_posix())
    shared = {k: v for k, v in names.items() if len(v) > 1 and k != "conftest.py"}
    assert not shared, shared
