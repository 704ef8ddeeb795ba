"""No module imports another module's private name (issue 27): a name with a leading
underscore is its module's own business. Private *modules* (``diffract._core``,
``extract/_files.py``) are the package's, and may be imported inside it; the names in them
that siblings use are public (no underscore)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "diffract"

#: names whose underscore is a protocol's, not ours: Jupyter Server looks the hook up by name
PROTOCOL_NAMES = {"_load_jupyter_server_extension"}


def _is_module(package_dir: Path, name: str) -> bool:
    return (package_dir / f"{name}.py").exists() or (package_dir / name).is_dir()


def private_imports(root: Path = PACKAGE) -> list[str]:
    """``file:line: from module import _name`` for every import of another module's private
    name under ``root`` (submodules and protocol names left out)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                target = path.parent
                for _ in range(node.level - 1):
                    target = target.parent
                target = target.joinpath(*(node.module or "").split(".")) if node.module else target
            elif node.module and node.module.split(".")[0] == "diffract":
                target = root.parent.joinpath(*node.module.split("."))
            else:
                continue
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or name.startswith("__") or name in PROTOCOL_NAMES:
                    continue
                if _is_module(target, name):
                    continue
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {node.module} {name}")
    return found


def test_no_module_imports_a_private_name_of_another():
    assert private_imports() == []


def test_the_check_finds_a_private_import(tmp_path):
    pkg = tmp_path / "diffract"
    (pkg / "kernels").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels" / "__init__.py").write_text("")
    (pkg / "kernels" / "fits.py").write_text("def _fit():\n    pass\n")
    (pkg / "kernels" / "_linalg.py").write_text("")
    (pkg / "edit.py").write_text(
        "from diffract.kernels.fits import _fit\nfrom diffract.kernels import _linalg\n"
    )
    (pkg / "kernels" / "use.py").write_text("from .fits import _fit\n")
    assert private_imports(pkg) == [
        "diffract/edit.py:1: diffract.kernels.fits _fit",
        "diffract/kernels/use.py:1: fits _fit",
    ]
