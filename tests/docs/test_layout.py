"""The map matches the rooms: every package and top-level module of ``python/diffract`` sits in
a layer of the import-linter contracts (pyproject.toml ``[tool.importlinter]``) and is named in
docs/concepts/layout.md, and every repository path the docs name exists.

The packages are read from the tree (a folder with ``__init__.py``, a top-level ``.py``), so a
package that appears or goes away is checked as it is, with no list to keep here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "python" / "diffract"
LAYOUT = ROOT / "docs" / "concepts" / "layout.md"
#: folders of the repository a path in the docs may start with
REPO_DIRS = ("python", "tests", "scripts", "benchmarks", "js", "docs", "notebooks", "ui-tests")


def _modules() -> list[str]:
    """The top-level packages and modules of diffract (``__init__`` itself left out)."""
    out = [p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    out += [p.stem for p in PKG.glob("*.py") if p.stem != "__init__"]
    return sorted(out)


def _layered() -> set[str]:
    """Every module a layers contract of pyproject.toml names (``diffract.x`` -> ``x``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    names: set[str] = set()
    for contract in config["contracts"]:
        if contract["type"] != "layers" or contract.get("containers"):
            continue  # a package's inner layers (its modules) are its own business
        for layer in contract["layers"]:
            for name in re.split(r"[|:]", layer):
                name = name.strip().strip("()")
                assert name.startswith("diffract."), name
                names.add(name.removeprefix("diffract."))
    return names


def test_the_tree_and_the_page_have_packages_to_check():
    assert {"session", "store", "run", "kernels", "_vocab"} <= set(_modules())
    assert {"session", "store", "run", "kernels", "_vocab", "cli"} <= _layout_table()


def test_the_layout_page_names_no_package_that_is_gone():
    gone = sorted(
        m for m in _layout_table() if not (PKG / m).is_dir() and not (PKG / f"{m}.py").is_file()
    )
    assert not gone, f"docs/concepts/layout.md names packages that do not exist: {gone}"


@pytest.mark.parametrize("module", _modules())
def test_every_package_is_in_a_layer_of_the_contracts(module):
    assert module in _layered(), (
        f"diffract.{module} is in no layer of pyproject.toml [tool.importlinter]: add it to "
        "the layer its imports allow, so that a wrong-way import fails the lint"
    )


def _layout_table() -> set[str]:
    """The names in the package column of layout.md's table (``session/`` -> ``session``)."""
    names: set[str] = set()
    for line in LAYOUT.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and not set(cells[1]) <= set("- ") and cells[1] != "package":
            names |= {n.rstrip("/") for n in re.findall(r"`([^`]+)`", cells[1])}
    return names


@pytest.mark.parametrize("module", _modules())
def test_every_package_is_named_in_the_layout_page(module):
    assert module in _layout_table(), (
        f"the table of docs/concepts/layout.md does not name `{module}`: add it to the row of "
        "its layer, with its job"
    )


def test_the_contracts_name_no_module_that_is_gone():
    gone = sorted(
        m for m in _layered() if not (PKG / m).is_dir() and not (PKG / f"{m}.py").is_file()
    )
    assert not gone, f"the contracts name modules that do not exist: {gone}"


def _ignored(paths: list[str]) -> set[str]:
    """Those of ``paths`` git ignores as files or folders (build outputs such as
    python/diffract/static/, local stores such as notebooks/.diffract)."""
    asked = [q for p in paths for q in (p.rstrip("/"), p.rstrip("/") + "/")]
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(asked),
        capture_output=True,
        text=True,
        check=False,
    )
    hits = {q.rstrip("/") for q in done.stdout.split()}
    return {p for p in paths if p.rstrip("/") in hits}


def _named_paths(text: str) -> set[str]:
    """Repository paths a page names in code spans or links: those starting with a folder of
    the repository or a package of diffract (``session/_frontends.py`` means
    ``python/diffract/session/_frontends.py``); globs and placeholders are left out."""
    tops = (*REPO_DIRS, *(m for m in _modules() if (PKG / m).is_dir()))
    out = set()
    for tok in re.findall(r"`([^`\s]+)`", text) + re.findall(r"\]\(([^)\s#]+)", text):
        tok = tok.rstrip(".,:;")
        if "://" in tok or any(c in tok for c in "*<>{}$") or "/" not in tok:
            continue
        if tok.split("/")[0] in tops:
            out.add(tok)
    return out


def _exists(path: str, page: Path) -> bool:
    bases = (ROOT, PKG, page.parent)
    return any((base / path).exists() for base in bases)


def test_every_path_the_docs_name_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    missing = [
        (page.relative_to(ROOT), path)
        for page in pages
        for path in sorted(_named_paths(page.read_text()))
        if not _exists(path, page)
    ]
    ignored = _ignored([path for _, path in missing])  # build outputs, local stores
    stale = [f"{page}: {path}" for page, path in missing if path not in ignored]
    assert not stale, stale
