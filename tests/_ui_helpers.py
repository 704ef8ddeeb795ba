"""Small stores for the widget, viz, server and magics tests."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np


def mlp(seed: int = 0, layers: int = 4, width: int = 24) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    d_in = 12
    for i in range(layers):
        out[f"layers.{i}.weight"] = rng.normal(size=(width, d_in)).astype(np.float32)
        out[f"layers.{i}.bias"] = rng.normal(size=width).astype(np.float32)
        d_in = width
    return out


def make_store(path: Path, models=("m1", "m2"), fields=("frob_norm",)):
    """A persisted store with ``models`` (small MLPs) and ``fields`` computed; closed."""
    from diffract import Session

    with Session(path=path) as s:
        for i, m in enumerate(models):
            s.models.add(mlp(i), m)
        if fields:
            s.compute.apply(*fields, progress=False)
    return path


#: the widgets' wire contract on the TypeScript side
WIRE_TS = Path(__file__).resolve().parents[1] / "js" / "shared" / "wire.ts"


def ts_interfaces() -> dict[str, set[str]]:
    """Each interface of js/shared/wire.ts -> its keys (an ``extends`` adds its parent's)."""
    text = WIRE_TS.read_text()
    out = {}
    for m in re.finditer(
        r"export interface (\w+)(?:<[^>]*>)?(?: extends (\w+))? \{(.*?)\n\}", text, re.S
    ):
        name, parent, body = m.groups()
        keys = set(re.findall(r"^\s+(\w+)\??:", body, re.M))
        out[name] = keys | out.get(parent, set()) if parent else keys
    return out
