"""The published package metadata (issue 18, point 21): open version ranges for frameworks.

The exact torch wheel this project tests with is pinned only for its own installs, in
``constraints.txt`` (``make`` passes it to pip with ``-c``); the wheel's metadata must let a
user's pip resolve diffract-lab next to the torch they already have.
"""

from __future__ import annotations

import email
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PINNED = ("torch",)


def _exact_pins(requirements: list[str]) -> list[str]:
    """The requirements on :data:`PINNED` packages with an ``==`` / ``===`` specifier."""
    out = []
    for line in requirements:
        req = Requirement(line)
        if req.name.lower() in PINNED and any(s.operator in ("==", "===") for s in req.specifier):
            out.append(line)
    return out


def test_pyproject_keeps_open_ranges_for_torch():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        lines += extra
    assert _exact_pins(lines) == []
    assert any(Requirement(r).name == "torch" for r in project["optional-dependencies"]["torch"])


def test_built_wheel_metadata_has_no_torch_pin(tmp_path):
    """The METADATA file the wheel ships, as hatchling (the build backend) writes it."""
    import hatchling.build as build  # the test extra installs the build backend

    dist_info = build.prepare_metadata_for_build_wheel(str(tmp_path))
    metadata = email.message_from_string((tmp_path / dist_info / "METADATA").read_text())
    requires = metadata.get_all("Requires-Dist") or []
    assert any(Requirement(r).name == "torch" for r in requires), requires
    assert _exact_pins(requires) == []


def test_project_installs_pin_torch_through_constraints():
    constraints = (ROOT / "constraints.txt").read_text().splitlines()
    pins = [Requirement(line) for line in constraints if line.strip() and line[0] != "#"]
    assert [str(r.specifier) for r in pins if r.name == "torch"] == ["==2.13.0"]
    makefile = (ROOT / "Makefile").read_text()
    assert '$(PIP) install -q -c constraints.txt -e ".[test]"' in makefile
