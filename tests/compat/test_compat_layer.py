"""Issue 27: Diffract's names live in ``diffract.compat``, one layer above our session.

Our namespaces have one name per operation; ``diffract.Session`` (what users import) is the
compat session, whose namespaces subclass ours and add Diffract's names; the synonyms that do
exactly what ours do are declared once (``compat/aliases.py``).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import diffract
import diffract.compat as compat
from diffract.compat.aliases import ALIASES, SYNONYMS
from diffract.session import (
    compute as our_compute,
    models as our_models,
    results as our_results,
    session as our_session,
)

OURS = {
    "models": our_models.Models,
    "compute": our_compute.Compute,
    "results": our_results.Results,
}
#: Diffract's names per namespace (DIFFRACT-API.md section 2) that are not ours
DIFFRACT_ONLY = {
    "models": ["list", "erase", "rename", "parameters"],
    "compute": ["list_available_kernels", "list_available_metrics", "configure_kernel", "kernel"],
    "results": [
        "export_metrics",
        "export_aggregates",
        "export",
        "ingest_metrics",
        "ingest_aggregates",
        "erase",
    ],
}


def _two_models() -> diffract.Session:
    s = diffract.Session(profile="ram")
    rng = np.random.default_rng(0)
    s.models.add({"w": rng.standard_normal((6, 4)), "v": rng.standard_normal((5, 3))}, "b")
    s.models.add({"w": rng.standard_normal((6, 4))}, "a")
    return s


@pytest.mark.parametrize("namespace", sorted(DIFFRACT_ONLY))
def test_our_namespaces_have_none_of_diffracts_names(namespace):
    ours, theirs = OURS[namespace], getattr(compat, namespace.capitalize())
    assert issubclass(theirs, ours)
    for name in DIFFRACT_ONLY[namespace]:
        assert not hasattr(ours, name), f"our {namespace} has Diffract's {name!r}"
        assert hasattr(theirs, name), f"compat {namespace} lacks Diffract's {name!r}"


def test_every_synonym_names_an_operation_of_ours():
    for namespace, table in {**ALIASES, **SYNONYMS}.items():
        for theirs, ours in table.items():
            owner, _, method = ours.rpartition(".")
            cls = OURS[owner or namespace]
            assert callable(getattr(cls, method)), (namespace, theirs, ours)
            assert hasattr(getattr(compat, namespace.capitalize()), theirs)
    # an alias is the same function, not a copy
    for theirs, ours in ALIASES["models"].items():
        assert getattr(compat.Models, theirs) is getattr(our_models.Models, ours)


def test_users_session_is_the_compat_one_all_the_way_down():
    s = _two_models()
    assert type(s) is compat.Session and isinstance(s, our_session.Session)
    assert diffract.Session is compat.Session
    assert type(s.models) is compat.Models and type(s.results) is compat.Results
    scope = s.filter(model_ids=["b"]).filter(param_names=["w"])
    assert type(scope) is compat.Scope and isinstance(scope, our_session.SessionContext)
    assert type(scope.compute) is compat.Compute
    # the alias answers what ours does: sorted ids as strings
    assert s.models.list() == s.models.ids() == ["a", "b"]
    assert scope.models.list() == ["b"]


def test_public_scope_methods_agree_with_the_store():
    s = _two_models()
    scope = s.filter(model_ids=["b"], param_names=["w"])
    assert [(x.model_id, x.name) for x in scope.slices()] == [("b", "w")]
    assert scope.model_ids() == ["b"]
    assert scope.find_slice("w").uid == s.find_slice("w", model_id="b").uid
    with pytest.raises(KeyError):
        s.find_slice("w")  # in two models: model_id= needed
    # b is partly selected: its model-level owner carries the scope's key
    assert scope.model_owner("b").startswith("@b[")
    assert s.model_owner("b") == "@b"
    assert set(scope.owners()) == {scope.slices()[0].uid, scope.model_owner("b")}


def test_copy_settings_from_takes_the_kernel_options():
    s = _two_models()
    s.compute.configure("power_law_fit", xmin_max=0.5)
    s.compute.configure(None, conventions="weightwatcher")
    other = diffract.Session(profile="ram")
    assert other.kernel_options == {}
    other.copy_settings_from(s.filter(model_ids=["a"]))  # a scope names its session
    assert other.kernel_options == {"power_law_fit": {"xmin_max": 0.5}}
    assert other.options == s.options and other.options


def test_register_kernel_is_the_sessions_own():
    from diffract.kernels import default_registry
    from diffract.kernels.spec import make_kernel

    s = _two_models()

    def doubled_frob(weights):
        return 2.0 * float(np.linalg.norm(weights))

    s.register_kernel(make_kernel(doubled_frob, name="doubled_frob"), binary=False)
    assert s.registry.has_field("doubled_frob")
    assert not default_registry().has_field("doubled_frob")
    assert s.binary_kernels == frozenset()
    s.compute.apply("doubled_frob", progress=False)
    w = s.models.weights("w", model_id="a")
    assert s.results.get("doubled_frob", "w", "a") == pytest.approx(2 * np.linalg.norm(w))


def test_our_session_module_does_not_load_compat():
    probe = (
        "import sys, diffract.session.session as s, diffract.session.compute; "
        "print(sorted(m for m in sys.modules if m.startswith('diffract.compat')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
