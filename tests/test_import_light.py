"""Opening a session imports no heavy dependency: kernel families load on first use and
import SciPy inside their kernels."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("scipy", "h5py", "plotly", "pandas", "torch", "jax")

PROBE = """
import json, sys
from diffract import Session
Session(profile="ram")
opened = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
families = sorted(m for m in sys.modules if m.startswith("diffract.kernels."))
import diffract
n = len(diffract.fields())
listed = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(json.dumps({{"opened": opened, "families": families, "fields": n, "listed": listed}}))
"""


def _probe() -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=set(HEAVY))],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_session_imports_no_heavy_dependency_and_no_kernel_family():
    got = _probe()
    assert got["opened"] == [], f"Session(profile='ram') imported {got['opened']}"
    # only the spec and the registry: the families are imported when first needed
    assert got["families"] == ["diffract.kernels.registry", "diffract.kernels.spec"]


def test_listing_fields_loads_the_families_but_not_scipy():
    got = _probe()
    assert got["fields"] > 100
    assert got["listed"] == [], f"diffract.fields() imported {got['listed']}"
