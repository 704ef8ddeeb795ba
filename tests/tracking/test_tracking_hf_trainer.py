"""``tracker.hf_callback()``: a tiny GPT-2 trained a few steps by Hugging Face's ``Trainer``.

Each stored step's weights are compared with copies taken by a second callback at the same
step end, and a field with numpy on them; a PEFT LoRA model's stored slices with the scaled
``B @ A`` computed by hand from the adapter's parameters at that step.
"""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session
from diffract.tracking import checkpoint_id, hf_callback

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

STEPS, EVERY = 6, 2


class _Tokens(torch.utils.data.Dataset):
    """Random token ids; the labels are the inputs (a causal LM loss)."""

    def __init__(self, n: int = 16, length: int = 8) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    return transformers.GPT2LMHeadModel(cfg)


class _Recorder(transformers.TrainerCallback):
    """Copies of chosen parameters at each optimizer step's end (and at train begin)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.seen: dict[int, dict[str, np.ndarray]] = {}

    def _record(self, state, model) -> None:
        params = dict(model.named_parameters())
        self.seen[state.global_step] = {
            n: params[n].detach().cpu().numpy().astype(np.float64) for n in self.names
        }

    def on_train_begin(self, args, state, control, model=None, **kwargs) -> None:
        self._record(state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs) -> None:
        self._record(state, model)


def _frob(session, model_id: str) -> dict[str, float]:
    """The stored ``frob_norm`` of each slice of one checkpoint."""
    table = session.results.export_table("frob_norm", export_format="pandas")
    rows = table[table.model_id == model_id]
    return dict(zip(rows["name"], rows["frob_norm"], strict=True))


def _train(model, callbacks, tmp_path, **options) -> None:
    options = {"max_steps": STEPS, **options}
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        learning_rate=1e-2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        **options,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=_Tokens(), callbacks=callbacks
    )
    trainer.train()


def test_hf_callback_stores_every_nth_optimizer_step_with_its_weights(tmp_path):
    model = _gpt2()
    names = ["transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_fc.weight"]
    rec = _Recorder(names)
    s = Session(profile="ram")
    with s.track("gpt2", ["frob_norm"], every=EVERY, max_pending=10) as tr:
        cb = tr.hf_callback()
        assert isinstance(cb, transformers.TrainerCallback)
        _train(model, [cb, rec], tmp_path)
        # flushed at train end: everything offered is stored and analyzed
        assert tr.status.pending == 0 and not tr.status.in_flight
    # step 0 (the initial weights, offered at train begin) and the multiples of every
    assert tr.steps() == [0, 2, 4, 6] and not tr.status.failures
    assert sorted(rec.seen) == list(range(STEPS + 1))
    assert not np.allclose(rec.seen[0][names[0]], rec.seen[6][names[0]])  # it did train
    for step in tr.steps():
        mid = checkpoint_id("gpt2", step)
        by_name = _frob(s, mid)
        for name in names:
            stored = np.asarray(s.models.weights(name, model_id=mid), np.float64)
            # a GPT-2 Conv1D weight is stored (in, out), as models.add keeps it
            np.testing.assert_array_equal(stored, rec.seen[step][name])
            want = np.linalg.norm(rec.seen[step][name], "fro")
            np.testing.assert_allclose(by_name[name], want, rtol=1e-6)


def test_hf_callback_step_is_an_optimizer_update_under_gradient_accumulation(tmp_path):
    model = _gpt2()
    name = "transformer.h.0.mlp.c_proj.weight"
    rec = _Recorder([name])
    s = Session(profile="ram")
    with s.track("accum", [], every=2, max_pending=10) as tr:
        _train(model, [tr.hf_callback(), rec], tmp_path, max_steps=4, gradient_accumulation_steps=3)
    # 4 updates of 3 micro-batches each: the steps count updates, not micro-batches
    assert tr.steps() == [0, 2, 4] and sorted(rec.seen) == [0, 1, 2, 3, 4]
    for step in tr.steps():
        got = s.models.weights(name, model_id=checkpoint_id("accum", step))
        np.testing.assert_array_equal(np.asarray(got, np.float64), rec.seen[step][name])


def test_hf_callback_offers_nothing_off_the_main_process(tmp_path):
    s = Session(profile="ram")
    with s.track("rank1", [], every=1) as tr:
        cb = hf_callback(tr)
        state = transformers.TrainerState()
        state.is_world_process_zero, state.global_step = False, 3
        cb.on_step_end(None, state, None, model=_gpt2())
        cb.on_train_end(None, state, None, model=None)
        assert tr.status.snapshots == 0
    assert tr.steps() == []


def test_hf_callback_merged_must_be_a_bool():
    from diffract import InvalidArgumentError

    s = Session(profile="ram")
    with s.track("bad", []) as tr, pytest.raises(InvalidArgumentError, match="merged"):
        tr.hf_callback(merged="yes")


#: a PEFT layer's base weight and its LoRA factors, as named in the PEFT model
_FACTORS = ("base_layer.weight", "lora_A.default.weight", "lora_B.default.weight")


def _peft_gpt2():
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=2, lora_alpha=6, target_modules=["c_attn"], fan_in_fan_out=True)
    return peft.get_peft_model(_gpt2(), cfg)


def test_hf_callback_tracks_a_peft_model_as_its_scaled_lora_updates(tmp_path):
    model = _peft_gpt2()
    layers = [f"base_model.model.transformer.h.{i}.attn.c_attn" for i in range(2)]
    names = [f"{layer}.lora_{ab}.default.weight" for layer in layers for ab in "AB"]
    rec = _Recorder(names)
    s = Session(profile="ram")
    with s.track("lora", ["frob_norm"], every=EVERY, max_pending=10) as tr:
        _train(model, [tr.hf_callback(), rec], tmp_path)
    assert tr.steps() == [0, 2, 4, 6] and not tr.status.failures
    scaling = 6 / 2  # lora_alpha / r
    # B is initialised to zero: the update is nonzero only once training moved it
    assert not rec.seen[0][names[1]].any() and rec.seen[6][names[1]].any()
    for step in (2, 4, 6):
        mid = checkpoint_id("lora", step)
        slices = {x.name: x for x in s.filter(model_ids=[mid]).models.slices()}
        by_name = _frob(s, mid)
        for i, layer in enumerate(layers):
            name = f"transformer.h.{i}.attn.c_attn.lora"
            assert name in slices and slices[name].meta["lora"]["rank"] == 2
            assert slices[name].meta["lora"]["scaling"] == scaling
            a = rec.seen[step][f"{layer}.lora_A.default.weight"]  # (r, in)
            b = rec.seen[step][f"{layer}.lora_B.default.weight"]  # (out, r)
            want = scaling * (b @ a)
            assert np.abs(want).max() > 0
            got = np.asarray(s.models.weights(name, model_id=mid), np.float64)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
            assert np.linalg.matrix_rank(got) == 2
            np.testing.assert_allclose(by_name[name], np.linalg.norm(want, "fro"), rtol=1e-6)


def test_hf_callback_merged_stores_a_peft_model_merged_weights(tmp_path):
    model = _peft_gpt2()
    layers = [f"base_model.model.transformer.h.{i}.attn.c_attn" for i in range(2)]
    names = [f"{layer}.{leaf}" for layer in layers for leaf in _FACTORS]
    rec = _Recorder(names)
    s = Session(profile="ram")
    with s.track("merged", [], every=3, max_pending=10) as tr:
        _train(model, [tr.hf_callback(merged=True), rec], tmp_path)
    assert tr.steps() == [0, 3, 6] and not tr.status.failures
    for step in (3, 6):
        mid = checkpoint_id("merged", step)
        slices = {x.name: x for x in s.filter(model_ids=[mid]).models.slices()}
        assert not any(n.endswith(".lora") for n in slices)  # merged in, not beside
        for i, layer in enumerate(layers):
            name = f"transformer.h.{i}.attn.c_attn.weight"
            assert slices[name].meta["lora"]["mode"] == "merged"
            w, a, b = (rec.seen[step][f"{layer}.{leaf}"] for leaf in _FACTORS)
            # GPT-2's Conv1D stores W as (in, out): PEFT's fan_in_fan_out merge adds (B @ A)^T
            want = w + 3.0 * (b @ a).T
            got = np.asarray(s.models.weights(name, model_id=mid), np.float64)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            assert not np.allclose(got, w, atol=1e-6)  # the update is really in it
