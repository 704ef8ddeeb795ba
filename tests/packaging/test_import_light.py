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


LOCAL_PROBE = """
import json, sys
from diffract import Session
s = Session(profile="local")
opened = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
n = len(list(s.store.keys()))
print(json.dumps({{"opened": opened, "values": n}}))
"""


def test_opening_a_local_store_imports_no_heavy_dependency_not_even_h5py(tmp_path):
    """A local (HDF5) store opens from its segment manifests: h5py is imported only when an
    array is first read (docs/concepts/segments.md)."""
    import numpy as np

    from diffract import Session

    with Session(profile="local", path=tmp_path / ".diffract") as s:
        s.models.add({"a.weight": np.eye(4, dtype=np.float32)}, model_id="m")
        s.compute.apply("frob_norm", "num_params", progress=False)
    out = subprocess.run(
        [sys.executable, "-c", LOCAL_PROBE.format(heavy=set(HEAVY))],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["values"] >= 2, got
    assert got["opened"] == [], f"Session(profile='local') imported {got['opened']}"
