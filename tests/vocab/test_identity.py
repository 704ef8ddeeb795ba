"""Slice identity: model_id rules, stable uids, ParameterType; version single-sourced."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest

import diffract
from diffract import InvalidModelIdError, ParameterType, Session

ROOT = Path(__file__).resolve().parents[2]


def test_version_single_sourced_from_package_json():
    pkg = json.loads((ROOT / "package.json").read_text())["version"]
    assert diffract.__version__ == pkg
    assert version("diffract-lab") == pkg


def test_import_is_light():
    code = (
        "import sys, diffract; heavy = ['torch', 'jax', 'flax', 'equinox', 'h5py', 'plotly', 'ipywidgets', "
        "'anywidget', 'pandas', 'polars', 'onnx', 'keras', 'tensorflow', 'scipy']; "
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("ch", ["@", "[", "]", ",", "/"])
def test_reserved_characters_refused_with_the_character_named(ch):
    s = Session(profile="ram")
    with pytest.raises(InvalidModelIdError, match="reserved character " + re.escape(repr(ch))):
        s.models.add({"w": np.ones((2, 2))}, model_id=f"run{ch}1")
    assert s.models.ids() == []


@pytest.mark.parametrize("bad", ["   ", 3])  # "" generates an id, as in Diffract (issue 26)
def test_empty_or_non_string_model_id_refused(bad):
    s = Session(profile="ram")
    with pytest.raises(InvalidModelIdError):
        s.models.add({"w": np.ones((2, 2))}, model_id=bad)


def test_no_model_id_gives_an_id_from_the_content():
    """As in Diffract, ``model_id=None`` generates the id (from the content, never a clock)."""
    a, b = Session(profile="ram"), Session(profile="ram")
    [sa] = a.models.add({"w": np.ones((2, 2))}, model_id=None)
    [sb] = b.models.add({"w": np.ones((2, 2))}, model_id=None)
    [sc] = b.models.add({"w": np.zeros((2, 2))}, model_id=None)
    assert sa.model_id == sb.model_id != sc.model_id
    assert a.models.ids() == [sa.model_id]


def test_uid_stable_across_sessions_and_re_adds(mlp_weights):
    a = Session(profile="ram").models.add(mlp_weights, model_id="m")
    s = Session(profile="ram")
    b = s.models.add(mlp_weights, model_id="m")
    c = s.models.add(mlp_weights, model_id="m", replace=True)
    assert [x.uid for x in a] == [x.uid for x in b] == [x.uid for x in c]
    other = Session(profile="ram").models.add(mlp_weights, model_id="m2")
    assert not {x.uid for x in a} & {x.uid for x in other}


def test_parameter_type_interned_and_custom():
    assert ParameterType.from_string("dense") is ParameterType.DENSE
    assert ParameterType.from_string("Attention") is ParameterType.from_string("attention")
    assert ParameterType.from_string("attention").is_custom
    assert ParameterType.DENSE == "dense"
    assert repr(ParameterType.from_string("attention")) == "ParameterType.from_string('attention')"
    with pytest.raises(ValueError, match="invalid parameter type name"):
        ParameterType.from_string("no spaces")
    with pytest.raises(TypeError):
        ParameterType.from_string(3)
