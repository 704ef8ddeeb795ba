"""The field catalog: docs/fields.md is generated and current, every field is documented,
named in a test, and computes on a small two-model example."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _engine_fields import NA, Failed
from diffract.kernels import builtin_kernels, default_registry

ROOT = Path(__file__).resolve().parents[2]


def test_docs_fields_md_is_current():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_field_catalog.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr + " (run scripts/gen_field_catalog.py)"


def test_at_least_80_distinct_fields():
    fields = [o for k in builtin_kernels() for o in k.outputs]
    assert len(fields) == len(set(fields)) >= 80


def test_every_kernel_documents_a_formula():
    for k in builtin_kernels():
        assert len(k.doc) > 20, k.name
        for opt in k.options:
            if opt != "reference":
                assert opt in k.doc, f"{k.name}: option {opt!r} not described in its docstring"


def test_every_field_is_named_in_a_test():
    text = "".join(
        p.read_text()
        for p in [
            *(ROOT / "tests").rglob("test_fields_*.py"),
            *(ROOT / "tests").rglob("test_ww_*.py"),
        ]
        if p.name != Path(__file__).name
    )
    missing = [
        f
        for f in default_registry().fields()
        if any(f in k.outputs for k in builtin_kernels()) and not re.search(rf"[\"']{f}[\"']", text)
    ]
    assert not missing, missing


def test_every_field_computes(fs):
    rng = np.random.default_rng(0)
    base = {
        "dense": (rng.standard_normal((80, 40)) @ np.diag(np.linspace(0.2, 3, 40) ** 2)).astype(
            np.float32
        ),
        "conv": rng.standard_normal((12, 8, 3, 3)).astype(np.float32),
        "bias": rng.standard_normal(12).astype(np.float32),
    }
    tuned = {
        k: v + np.float32(0.05) * rng.standard_normal(v.shape).astype(np.float32)
        for k, v in base.items()
    }
    fields = [o for k in builtin_kernels() for o in k.outputs]
    per = fs.run({"base": base, "tuned": tuned}, fields, reference="base").values
    for name in ("dense", "conv"):
        for f in fields:
            if default_registry().producer(f).level == "model":
                continue
            v = per["tuned"][name][f]
            assert not isinstance(v, Failed) and v is not NA, f"{name}.{f}: {v!r}"
    for f, v in per["tuned"][None].items():
        assert not isinstance(v, Failed) and v is not NA, f"{f}: {v!r}"
    assert per["tuned"]["bias"]["pl_alpha"] is NA


@pytest.mark.parametrize("module", ["fits", "spectral", "rmt"])
def test_importing_changes_no_global_state(module):
    code = (
        "import logging, warnings, scipy.linalg, scipy.stats, scipy.integrate, scipy.optimize, "
        "scipy.special; before = (logging.root.level, list(logging.root.handlers), "
        "list(warnings.filters)); import importlib, sys; sys.path.insert(0, {!r}); "
        "importlib.import_module('diffract.kernels.{}'); "
        "assert before == (logging.root.level, list(logging.root.handlers), list(warnings.filters))"
    ).format(str(ROOT / "python"), module)
    subprocess.run([sys.executable, "-c", code], check=True)
