"""model.py token_shift: e_t + W_s e_(t-1) on the embedding output before the first block."""
from dataclasses import asdict

import pytest
import torch

import checkpoint
from model import GPT, ModelConfig


def small_config(**kw):
    return ModelConfig(block_size=16, vocab_size=40, n_layer=2, n_head=1, n_embd=8, **kw)


def first_block_input(m, idx):
    seen = {}
    handle = m.transformer.h[0].register_forward_pre_hook(lambda mod, args: seen.setdefault("x", args[0]))
    m(idx)
    handle.remove()
    return seen["x"]


def test_hand_case_identity_shift_adds_the_previous_embedding():
    torch.manual_seed(0)
    m = GPT(small_config(token_shift=True)).eval()
    with torch.no_grad():
        m.transformer.shift.weight.copy_(torch.eye(8))
    idx = torch.tensor([[3, 7, 1, 5]])
    e = m.transformer.wte(idx) + m.transformer.wpe(torch.arange(4))
    expected = e.clone()
    expected[:, 1:] += e[:, :-1]
    torch.testing.assert_close(first_block_input(m, idx), expected)


def test_shift_keeps_the_gpt_causal():
    torch.manual_seed(1)
    m = GPT(small_config(token_shift=True)).eval()
    idx = torch.randint(0, 40, (2, 12))
    changed = idx.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 40
    a, _ = m(idx)
    b, _ = m(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7])
    assert (a[:, 7:] - b[:, 7:]).abs().amax() > 1e-4  # the changed token and the next one see it


def test_off_by_default_adds_one_matrix_when_on():
    plain, shifted = GPT(small_config()), GPT(small_config(token_shift=True))
    assert plain.transformer.shift is None
    assert set(shifted.state_dict()) - set(plain.state_dict()) == {"transformer.shift.weight"}
    assert float(shifted.transformer.shift.weight.detach().std()) == pytest.approx(0.02, rel=0.5)  # N(0, 0.02)


def test_checkpoint_round_trip_restores_the_shift():
    torch.manual_seed(3)
    m = GPT(small_config(token_shift=True))
    state = {"model_args": asdict(m.config), "model": m.state_dict()}
    restored = checkpoint.build_model(state, "lm")
    assert restored.config.token_shift
    torch.testing.assert_close(restored.transformer.shift.weight, m.transformer.shift.weight)


def test_bad_value_says_what_is_allowed():
    with pytest.raises(ValueError, match="token_shift must be True or False"):
        small_config(token_shift="yes")
