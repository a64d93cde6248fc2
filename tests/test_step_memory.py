"""step_memory.py: the lower bound of a training step's memory, counted on fake tensors, and the
one-line refusal of a step that cannot fit (issue 58 item 7)."""
import random
from contextlib import nullcontext

import numpy as np
import pytest
import torch

import configurator
import step_memory
import train
from configurator import ConfigError
from tasks import lm

B, T, H, LAYERS = 2, 64, 2, 2


def setting(*args):
    cfg = configurator.parse(train.DEFAULTS, [f"--n_layer={LAYERS}", f"--n_head={H}", "--n_embd=16",
                                              f"--block_size={T}", f"--batch_size={B}", *args])
    tokens = (np.arange(4000) % 500).astype(np.uint16)
    data = {"train": tokens, "val": tokens}
    torch.manual_seed(0)
    return cfg, data, lm.build_model(cfg, data), lm.get_batch(data, "train", cfg, 0, "cpu")


def test_the_count_follows_the_code_that_runs():
    cfg, data, model, batch = setting()
    fused = step_memory.estimate(lm, cfg, data, model, batch, nullcontext())
    # the log-softmax of the (B T, vocabulary) logits is saved, at its size
    assert fused["largest"][1] == (B * T, lm.VOCAB_SIZE) and fused["largest"][0] == B * T * lm.VOCAB_SIZE * 4
    assert fused["note"] is None and fused["batch"] == 2 * B * T * 8
    params = sum(p.numel() for p in model.parameters())
    assert fused["optimizer"] == 2 * 4 * params and fused["weights"] >= 4 * params
    assert fused["total"] == fused["weights"] + fused["optimizer"] + fused["batch"] + fused["activations"]
    # the reference softmax forms the (T, T) weights in every layer; the fused kernel does not
    cfg, data, model, batch = setting("--attention=softmax_reference")
    explicit = step_memory.estimate(lm, cfg, data, model, batch, nullcontext())
    assert explicit["activations"] - fused["activations"] >= LAYERS * B * H * T * T * 4


def test_the_count_changes_no_generator_state():
    cfg, data, model, batch = setting("--dropout=0.1")
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    step_memory.saved_activations(lm, cfg, data, batch, nullcontext())
    assert torch.equal(torch.get_rng_state(), states[0]) and np.array_equal(np.random.get_state()[1], states[1])
    assert random.getstate() == states[2]


def test_code_that_needs_values_is_counted_until_then(monkeypatch):
    cfg, data, model, batch = setting()

    def loss(model, batch):
        hidden = model.transformer(batch["idx"])
        if hidden.sum() > 0:  # a branch on a value: fake tensors have none
            return hidden.sum(), {}
        return -hidden.sum(), {}

    monkeypatch.setattr(lm, "loss", loss)
    saved = step_memory.saved_activations(lm, cfg, data, batch, nullcontext())
    assert saved["partial"] is not None and saved["bytes"] > 0  # the layers before the branch


def test_a_step_that_cannot_fit_is_refused_in_one_line(monkeypatch):
    cfg, data, model, batch = setting()
    need = step_memory.estimate(lm, cfg, data, model, batch, nullcontext())["total"]
    monkeypatch.setattr(step_memory, "available", lambda device: (need + 1, "this machine has a little"))
    assert step_memory.check(lm, cfg, data, model, batch, nullcontext())["total"] == need
    monkeypatch.setattr(step_memory, "available", lambda device: (need - 1, "this machine has a little"))
    with pytest.raises(ConfigError) as e:
        step_memory.check(lm, cfg, data, model, batch, nullcontext())
    message = str(e.value)
    assert "\n" not in message and f"batch_size={B}, block_size={T} needs at least" in message
    assert f"({B * T}, {lm.VOCAB_SIZE}) float32" in message and "but this machine has a little" in message
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # CPU DDP processes share the machine
    monkeypatch.setattr(step_memory, "available", lambda device: (need + 1, "this machine has a little"))
    with pytest.raises(ConfigError, match="for each of 2 processes"):
        step_memory.check(lm, cfg, data, model, batch, nullcontext())


def test_what_the_cpu_has():
    room, where = step_memory.available("cpu")
    assert room > 0 and "this machine has" in where
    assert step_memory.available("mps") == (None, None)
    assert step_memory._size(80_486_400_000) == "80.5 GB" and step_memory._size(6_400_000) == "6.4 MB"
