"""Every public name has a docstring: the package, its public modules, and the Session and
Scope namespaces (what the API reference in docs/api is generated from)."""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

MODULES = [
    "diffract",
    "diffract.sampling",
    "diffract.widgets",
    "diffract.viz",
    "diffract.filters",
    "diffract.session.export",
]


def _doc(obj) -> str:
    return (inspect.getdoc(obj) or "").strip()


def _public(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    out = []
    for name in names:
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            continue
        # names re-exported from elsewhere are checked where they are defined
        home = getattr(value, "__module__", module.__name__) or module.__name__
        if callable(value) and not home.startswith("diffract"):
            continue
        public_home = not home.split(".")[-1].startswith("_")
        if module.__name__ != "diffract" and public_home and home != module.__name__:
            continue
        out.append(name)
    return out


def _own_members(cls) -> list[tuple[str, object]]:
    out = []
    for klass in cls.__mro__:
        if not klass.__module__.startswith("diffract"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in dict(out):
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if inspect.isfunction(value) or isinstance(value, property):
                out.append((name, value))
    return out


def missing_docstrings() -> list[str]:
    missing = []
    for modname in MODULES:
        module = importlib.import_module(modname)
        if not _doc(module):
            missing.append(modname)
        for name in _public(module):
            value = getattr(module, name)
            if not (callable(value) or isinstance(value, type)):
                continue  # constants are documented by the module
            if not _doc(value):
                missing.append(f"{modname}.{name}")
            if isinstance(value, type):
                for member, fn in _own_members(value):
                    if not _doc(fn):
                        missing.append(f"{modname}.{name}.{member}")
    from diffract.session import Compute, Models, Results, Scope, Session, Utils, Viz

    for cls in (Session, Scope, Models, Compute, Results, Viz, Utils):
        if not _doc(cls):
            missing.append(f"diffract.session.{cls.__name__}")
        for member, fn in _own_members(cls):
            if not _doc(fn):
                missing.append(f"diffract.session.{cls.__name__}.{member}")
    return sorted(set(missing))


def test_every_public_name_has_a_docstring():
    pytest.importorskip("anywidget")
    missing = missing_docstrings()
    assert not missing, "public names without a docstring:\n  " + "\n  ".join(missing)


if __name__ == "__main__":
    print("\n".join(missing_docstrings()))
