"""Reading sampling manifests back: an empty selection, malformed manifest data and an empty
identity are named errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from diffract import Session


def _manifest():
    from diffract.sampling import Candidate, sample_replacement_candidates

    attn = {"kind": "attention", "name": "attention", "config": {"num_kv_heads": 4, "head_dim": 2}}
    ffn = {"kind": "ffn", "name": "ffn", "config": {"intermediate_size": 16}}
    cands = [
        Candidate(
            candidate_id="L0.teacher", layer_idx=0, hidden_width=8, source="self",
            subblocks=(attn, ffn),
        ),
        Candidate(
            candidate_id="L0.ffn8", layer_idx=0, hidden_width=8, source="p",
            subblocks=(attn, {**ffn, "config": {"intermediate_size": 8}}),
            changed_axes=("ffn.intermediate_size",),
        ),
    ]  # fmt: skip
    return sample_replacement_candidates(cands)


def test_materialize_of_an_empty_selection_returns_nothing():
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from test_sampling_kit import bert_like
    finally:
        sys.path.remove(str(Path(__file__).parent))
    from diffract.sampling import materialize, sample_replacement_candidates

    s = Session(profile="ram")
    s.models.add(bert_like(), model_id="t")
    assert materialize(s, sample_replacement_candidates([]), "t") == {}
    assert materialize(s, [], "t") == {}
    assert s.models.ids() == ["t"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy": {"foo": 1}}, r"policy has unknown key\(s\) \['foo'\]"),
        ({"policy": None}, r"policy must be a mapping"),
        ({"policy": {"seed": "x"}}, r"manifest policy: .*seed must be an int"),
        ({"eligible": None}, r"'eligible' must be a list of records"),
        ({"selected": "abc"}, r"'selected' must be a list of records"),
        ({"excluded": [None]}, r"excluded\[0\]: a record must be a mapping"),
    ],
)
def test_malformed_manifest_data_is_a_sampling_error(change, message):
    from diffract.sampling import SamplingError, manifest_from_dict

    data = {**_manifest().to_dict(include_identity=False), **change}
    with pytest.raises(SamplingError, match=message):
        manifest_from_dict(data)


def test_load_manifest_rejects_an_empty_identity():
    from diffract.sampling import SamplingError, load_manifest, save_manifest

    s = Session(profile="ram")
    m = _manifest()
    ident = save_manifest(s, m)
    with pytest.raises(SamplingError, match=r"identity '' is empty"):
        load_manifest(s, "")
    with pytest.raises(SamplingError, match=r"identity ' ' is empty"):
        load_manifest(s, " ")
    with pytest.raises(TypeError, match=r"identity must be a str"):
        load_manifest(s, None)
    assert load_manifest(s, ident[:8]) == m
