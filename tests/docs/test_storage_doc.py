"""The HDF5 layout in docs/storage.md is enough to read a store with h5py alone."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from diffract import Session

DOC = Path(__file__).resolve().parents[2] / "docs" / "storage.md"


def test_h5py_recipe_reads_every_scalar_field(in_tmp, mlp_weights):
    with Session() as s:
        s.models.add(mlp_weights, model_id="m")
        for i in range(40):  # enough batches to trigger a compaction
            s.filter(param_names=[f"layers.{i % 3}.weight"]).compute.apply(
                "frob_norm", "stable_rank", progress=False
            )
            if i % 4 == 0:
                s.compute.erase("stable_rank")
        s.compute.apply("frob_norm", "stable_rank", "weights_std", progress=False)
        expected = {k: s.store.get(k) for k in s.store.keys()}
    assert any(p.name.endswith("-c.h5") for p in (in_tmp / ".diffract" / "segments").iterdir())
    recipe = re.search(r"```python\n(import h5py.*?)```", DOC.read_text(), re.S).group(1)
    ns: dict = {}
    exec(recipe, ns)
    got = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in ns["values"].items()}
    scalars = {k: v for k, v in expected.items() if not isinstance(v, np.ndarray)}
    assert set(got) == set(scalars)
    for k, v in scalars.items():
        assert got[k] == v
