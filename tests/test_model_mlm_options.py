"""Tests of the fidelity options of issue 25 (model.py): ``embedding_maxnorm`` (MaxNorm of the
embedding output before the first block, as the authors' DANet BERT configs) and
``relpe_local_positions`` (Cosine RelPE positions counted from each window's start in local and
shifted-local DANet layers, as the authors' code), each against a hand case; their validation, task
keys, old checkpoints, and the round trip through train.py and checkpoint.load."""
import math
import os

import pytest
import torch

import attention.dense  # noqa: F401  (registers "dense")
import checkpoint
import train
from configurator import ConfigError
from model import (BertEncoder, GPT, ModelConfig, config_dict, cosine_relpe,
                   fixed_on_resume, max_norm, relpe_positions, run_key_defaults)

OPTIONS = ("embedding_maxnorm", "relpe_local_positions")


# ---------------------------------------------------------------------------------------------
# embedding_maxnorm


def block_arguments(model, idx, position):
    """Argument ``position`` of every block's forward (forward pre-hooks), one per block."""
    seen = []
    hooks = [b.register_forward_pre_hook(lambda m, args: seen.append(args[position])) for b in model.transformer.h]
    with torch.no_grad():
        model(idx)
    for h in hooks:
        h.remove()
    return seen


def block_inputs(model, idx):
    """The hidden states entering each block."""
    return block_arguments(model, idx, 0)


@pytest.mark.parametrize("block", ["transformer", "danet"])
def test_embedding_maxnorm_by_hand(block):
    extra = dict(attention="dense", n_head=1) if block == "danet" else dict(n_head=2)
    config = ModelConfig(block_size=8, vocab_size=5, n_layer=1, n_embd=4, pos_emb="learned", block=block,
                         embedding_maxnorm=True, bias=False, **extra)
    model = BertEncoder(config).eval()
    with torch.no_grad():
        model.transformer.wte.weight.copy_(torch.tensor([[0.0, 0, 0, 0], [2, -4, 1, 0], [0.5, 0.5, 0.5, 0.5],
                                                         [1, 2, 3, 4], [-1, 0, 0, 0]]))
        model.transformer.wpe.weight.zero_()
        model.transformer.wpe.weight[1] = torch.tensor([0.0, 0, 0, -6])
    x = block_inputs(model, torch.tensor([[1, 1, 2, 0]]))[0][0]
    eps = 1e-3  # maxnorm_eps, the authors' MaxNormActivation default
    expected = torch.tensor([[2 / (4 + eps), -4 / (4 + eps), 1 / (4 + eps), 0],  # position 0: wte[1]
                             [2 / (6 + eps), -4 / (6 + eps), 1 / (6 + eps), -6 / (6 + eps)],  # wte[1] + wpe[1]
                             [0.5 / (0.5 + eps)] * 4,
                             [0.0] * 4])  # a zero vector stays zero
    torch.testing.assert_close(x, expected, rtol=0, atol=1e-7)
    assert x.abs().max() < 1


def test_embedding_maxnorm_uses_maxnorm_eps_and_is_off_by_default():
    base = dict(block_size=8, vocab_size=20, n_layer=1, n_head=2, n_embd=8, pos_emb="sinusoidal")
    torch.manual_seed(0)
    off = GPT(ModelConfig(**base)).eval()
    torch.manual_seed(0)
    on = GPT(ModelConfig(**base, embedding_maxnorm=True, maxnorm_eps=0.5)).eval()
    idx = torch.randint(0, 20, (2, 6), generator=torch.Generator().manual_seed(1))
    raw = block_inputs(off, idx)[0]
    torch.testing.assert_close(raw, off.transformer.wte(idx) + off.transformer.position_table(6, idx.device,
                                                                                             torch.float32))
    torch.testing.assert_close(block_inputs(on, idx)[0], raw / (raw.abs().amax(-1, keepdim=True) + 0.5))
    assert ModelConfig().embedding_maxnorm is False


# ---------------------------------------------------------------------------------------------
# relpe_local_positions


def test_relpe_positions_by_hand():
    assert relpe_positions(12, 0).tolist() == list(range(12))  # global layer
    assert relpe_positions(12, 4).tolist() == [0, 1, 2, 3] * 3  # local: from each window's start
    assert relpe_positions(12, 4, shift=True).tolist() == [2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1]  # padded w/2 in front
    assert relpe_positions(10, 4).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]  # a last, shorter window
    assert relpe_positions(3, 4).tolist() == [0, 1, 2]  # T <= w: one window (their forward_global)
    assert relpe_positions(2, 4, shift=True).tolist() == [0, 1]  # T <= w/2: their shifted layer runs global
    assert relpe_positions(3, 4, shift=True).tolist() == [2, 3, 0]


def authors_local_factors(table, T, w, shift):
    """The authors' apply_local_relpe: the first w rows of the table repeated per window; the
    shifted layer pads w/2 in front and behind first (forward_shifted_local), T a multiple of w."""
    if not shift:
        return table[:w].repeat(T // w, 1)
    padded = table[:w].repeat(T // w + 1, 1)
    return padded[w // 2: w // 2 + T]


def danet(T_block=64, **kw):
    return BertEncoder(ModelConfig(**{**dict(block_size=T_block, vocab_size=30, n_layer=3, n_head=2, n_embd=16,
                                             block="danet", attention="dense", pos_emb="cosine_relpe",
                                             layer_scheme="LSG", window=8, bias=False), **kw})).eval()


def factors_per_block(model, idx):
    """The Cosine RelPE factors each block receives (its third argument)."""
    return block_arguments(model, idx, 2)


@pytest.mark.parametrize("freqs", ["paper", "authors"])
def test_local_layers_get_window_local_factors(freqs):
    T, w, D = 32, 8, 8
    model = danet(relpe_local_positions=True, relpe_freqs=freqs)
    idx = torch.randint(1, 30, (1, T), generator=torch.Generator().manual_seed(0))
    table = cosine_relpe(T, D, freqs=freqs)
    got = factors_per_block(model, idx)
    assert [b.kind for b in model.transformer.h] == ["L", "S", "G"]
    torch.testing.assert_close(got[0], authors_local_factors(table, T, w, False), rtol=0, atol=0)
    torch.testing.assert_close(got[1], authors_local_factors(table, T, w, True), rtol=0, atol=0)
    torch.testing.assert_close(got[2], table, rtol=0, atol=0)  # the global layer keeps 0..T-1
    # by hand for one entry: token 13 in the L layer is at position 5 of its window
    i = 3
    theta = 10000.0 ** (-(2 if freqs == "paper" else 1) * i / D)
    assert got[0][13, i].item() == pytest.approx(math.cos(5 * theta), abs=1e-7)
    assert got[1][13, i].item() == pytest.approx(math.cos(1 * theta), abs=1e-7)  # (13 + 4) mod 8


def test_without_the_option_every_layer_gets_global_positions():
    model = danet()
    idx = torch.randint(1, 30, (1, 24), generator=torch.Generator().manual_seed(0))
    for factors in factors_per_block(model, idx):
        assert torch.equal(factors, cosine_relpe(24, 8))
    assert ModelConfig().relpe_local_positions is False


def test_local_positions_make_a_local_layer_translation_invariant_across_windows():
    """One L layer, window 8, the same 8 tokens twice: with window-local positions both windows
    compute the same outputs; with global positions they do not."""
    tokens = torch.randint(1, 30, (1, 8), generator=torch.Generator().manual_seed(2)).repeat(1, 2)
    outs = {}
    for local in (False, True):
        torch.manual_seed(0)
        model = danet(n_layer=1, layer_scheme="L", relpe_local_positions=local)
        with torch.no_grad():
            outs[local] = model(tokens)[0]
    torch.testing.assert_close(outs[True][:8], outs[True][8:], rtol=0, atol=1e-6)
    assert not torch.allclose(outs[False][:8], outs[False][8:], atol=1e-4)


def test_short_sequences_and_the_table_cache():
    model = danet(relpe_local_positions=True)
    for T in (3, 5, 8, 20):  # shorter than the window, between w/2 and w, one window, windows + remainder
        idx = torch.randint(1, 30, (1, T), generator=torch.Generator().manual_seed(T))
        got = factors_per_block(model, idx)
        longest = cosine_relpe(max(T, 8), 8)
        assert torch.equal(got[0], longest[relpe_positions(T, 8)])
        assert torch.equal(got[1], longest[relpe_positions(T, 8, shift=True)])
        assert torch.equal(got[2], cosine_relpe(T, 8))
        assert torch.equal(model.transformer.position_table(T, idx.device, torch.float32), cosine_relpe(T, 8))


# ---------------------------------------------------------------------------------------------
# validation, task keys, old checkpoints


@pytest.mark.parametrize("kw, message", [
    (dict(embedding_maxnorm=1), r"embedding_maxnorm must be True or False; got 1"),
    (dict(relpe_local_positions="yes"), r"relpe_local_positions must be True or False"),
    (dict(relpe_local_positions=True, pos_emb="learned"), r"needs pos_emb='cosine_relpe' and block='danet'"),
    (dict(relpe_local_positions=True, block="transformer", attention="softmax", layer_scheme="G", window=0),
     r"needs pos_emb='cosine_relpe' and block='danet'"),
    (dict(relpe_local_positions=True, layer_scheme="G"), r"needs local layers \(L or S in layer_scheme\)"),
])
def test_bad_values_are_clear_errors(kw, message):
    base = dict(block_size=16, vocab_size=30, n_layer=1, n_head=1, n_embd=8, block="danet", attention="dense",
                pos_emb="cosine_relpe", layer_scheme="LS", window=4)
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{**base, **kw})


def test_the_keys_are_model_keys_off_by_default():
    for key in OPTIONS:
        assert train.DEFAULTS[key] is False and key in fixed_on_resume() and key in train.HELP
        assert run_key_defaults()[0][key] is False and getattr(ModelConfig(), key) is False


def test_old_checkpoints_load_with_the_options_off():
    args = config_dict(ModelConfig(block_size=16, vocab_size=30, n_layer=1, n_head=1, n_embd=8))
    for key in OPTIONS:
        del args[key]  # model_args saved before the options existed
    config = ModelConfig(**args)
    assert not config.embedding_maxnorm and not config.relpe_local_positions


# ---------------------------------------------------------------------------------------------
# the round trip: train.py saves the options, checkpoint.load restores them


@pytest.fixture(scope="module")
def run_with_options(tmp_path_factory, wikitext2_dir):
    if not os.path.exists(os.environ.get("BERT_VOCAB_FILE", "")):
        pytest.skip("BERT vocabulary not found (BERT_VOCAB_FILE)")

    out = tmp_path_factory.mktemp("mlm_options")
    train.main(["--task=mlm", f"--out_dir={out}", "--num_threads=1", "--n_layer=3", "--n_embd=32", "--n_head=1",
                "--batch_size=2", "--block_size=32", "--max_iters=2", "--eval_interval=2", "--eval_iters=1",
                "--log_interval=1", "--block=danet", "--attention=dense", "--pos_emb=cosine_relpe",
                "--layer_scheme=LSG", "--window=8", "--relpe_local_positions=True", "--embedding_maxnorm=True",
                "--relpe_freqs=authors", "--mlm_bias_init=log_unigram"])
    return out


def test_model_load_restores_the_options(run_with_options):
    model, run_config, meta = checkpoint.load(run_with_options)
    assert meta["task"] == "mlm" and isinstance(model, BertEncoder)
    c = model.config
    assert (c.embedding_maxnorm, c.relpe_local_positions, c.relpe_freqs) == (True, True, "authors")
    assert run_config["mlm_bias_init"] == "log_unigram"
    # the options change the function: the same weights without them compute something else
    idx = torch.randint(1000, 2000, (1, 32), generator=torch.Generator().manual_seed(0))
    plain = BertEncoder(ModelConfig(**{**config_dict(c), "embedding_maxnorm": False,
                                       "relpe_local_positions": False})).eval()
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert not torch.allclose(model(idx), plain(idx), atol=1e-4)
        again, _, _ = checkpoint.load(run_with_options)
        assert torch.equal(model(idx), again(idx))


def test_a_resumed_run_keeps_the_options(run_with_options):

    with pytest.raises(ConfigError, match="embedding_maxnorm=False differs from the checkpoint's True"):
        train.main([f"--out_dir={run_with_options}", "--init_from=resume", "--embedding_maxnorm=False",
                    "--max_iters=3", "--num_threads=1"])
    with pytest.raises(ConfigError, match="mlm_bias_init='zero' differs from the checkpoint's 'log_unigram'"):
        train.main([f"--out_dir={run_with_options}", "--init_from=resume", "--mlm_bias_init=zero",
                    "--max_iters=3", "--num_threads=1"])


def test_max_norm_is_the_authors_activation():
    x = torch.tensor([[3.0, -1.0], [0.0, 0.0]])
    torch.testing.assert_close(max_norm(x, 1e-3), torch.tensor([[3 / 3.001, -1 / 3.001], [0.0, 0.0]]))
