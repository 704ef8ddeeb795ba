"""Loading a kernel family registers its kernels with one cycle check for the whole family
(issue 31, first-apply cost); a family that closes a cycle or takes a field raises what
registering its kernels one by one raises, and leaves registered what that leaves."""

from __future__ import annotations

import sys
import types

import pytest

from diffract import DependencyCycleError, KernelDefinitionError
from diffract.kernels.registry import KernelRegistry, builtin_kernels
from diffract.kernels.spec import define


def _family(monkeypatch, name, *funcs):
    module = types.ModuleType(name)
    for f in funcs:
        f.__module__ = name
        setattr(module, f.__name__, define(f))
    monkeypatch.setitem(sys.modules, name, module)
    return name


def test_builtin_families_load_acyclic_and_complete():
    reg = KernelRegistry(families=("basic", "spectral", "fits", "ranks"))
    names = {k.name for k in reg.kernels()}
    want = {k.name for k in builtin_kernels() if k.family in ("basic", "decompositions")}
    assert want and want <= names
    reg.check_acyclic()


def test_a_family_closing_a_cycle_raises_as_one_by_one(monkeypatch):
    def c_one(c_two):
        return c_two

    def c_two(c_one):
        return c_one

    def c_free(weights):
        return 1.0

    fam = _family(monkeypatch, "famtest.cycle", c_free, c_one, c_two)
    reg = KernelRegistry(families=(fam,))
    with pytest.raises(DependencyCycleError, match="c_one -> c_two -> c_one"):
        reg.kernels()
    # as registering one by one: the kernels before the one closing the cycle stay (read
    # without a public look-up, which would load the pending family again and raise again)
    assert set(reg._kernels) == {"c_free", "c_one"}
    assert reg.pending_families() == (fam,)  # the family stays pending


def test_a_family_taking_a_field_raises_as_one_by_one(monkeypatch):
    def d_first(weights):
        return 1.0

    def frob_norm(weights):
        return 2.0

    fam = _family(monkeypatch, "famtest.dup", d_first, frob_norm)
    reg = KernelRegistry(families=("norms", fam))
    with pytest.raises(KernelDefinitionError, match="frob_norm"):
        reg.kernels()
    assert "d_first" in reg._kernels and reg.pending_families() == (fam,)
