"""Tests of Cosine RelPE's frequency option ``relpe_freqs`` (model.py): "paper" = Eq. 6 of
"DenseAttention" (Sec. 3.2), theta_i = 10000^(-2i/D) over single head dims i = 0..D-1 (the default,
unchanged); "authors" = theta_i = 10000^(-i/D), as in the authors' code
(andrewargatkiny/dense-attention, src/positional_embeddings.py, TrigRelPEBase)."""
import math

import pytest
import torch

import attention.dense  # noqa: F401  (registers "dense")
import train
from model import GPT, BertEncoder, ModelConfig, config_dict, cosine_relpe, fixed_on_resume, run_key_defaults


def eq6_table_before_the_option(T, D, dtype=torch.float32):
    """The computation model.cosine_relpe did before relpe_freqs existed, step by step."""
    i = torch.arange(D, dtype=torch.float64)
    theta = 10000.0 ** (-2.0 * i / D)
    m = torch.arange(T, dtype=torch.float64)
    return torch.cos(m[:, None] * theta[None, :]).to(dtype)


def near_constant_dims(table, threshold=0.99):
    """Head dims whose factor cos(m theta_i) stays above ``threshold`` at every position of the table."""
    return int((table > threshold).all(dim=0).sum())


@pytest.mark.parametrize("freqs, exponent", [("paper", lambda i, D: -2 * i / D), ("authors", lambda i, D: -i / D)])
def test_frequencies_follow_the_formula(freqs, exponent):
    T, D = 300, 16
    table = cosine_relpe(T, D, dtype=torch.float64, freqs=freqs)
    assert table.shape == (T, D) and table.dtype == torch.float64
    expected = torch.tensor([[math.cos(m * 10000.0 ** exponent(i, D)) for i in range(D)] for m in range(T)],
                            dtype=torch.float64)
    torch.testing.assert_close(table, expected, rtol=0, atol=1e-12)
    assert torch.all(table[0] == 1)


def test_authors_frequencies_are_the_paper_ones_at_twice_the_width():
    # 10000^(-i/D) = 10000^(-2i/(2D)): the authors' table for D dims is the paper's for 2D dims, first half
    T, D = 200, 12
    torch.testing.assert_close(cosine_relpe(T, D, dtype=torch.float64, freqs="authors"),
                               cosine_relpe(T, 2 * D, dtype=torch.float64)[:, :D], rtol=0, atol=1e-12)
    assert not torch.allclose(cosine_relpe(T, D, freqs="authors"), cosine_relpe(T, D))


def test_default_is_eq6_bit_for_bit():
    for T, D in ((1, 4), (77, 8), (512, 128), (4096, 64)):
        before = eq6_table_before_the_option(T, D)
        assert torch.equal(cosine_relpe(T, D), before)
        assert torch.equal(cosine_relpe(T, D, freqs="paper"), before)
    assert ModelConfig().relpe_freqs == "paper" and run_key_defaults()[0]["relpe_freqs"] == "paper"


def test_near_constant_dims_paper_71_of_128_authors_far_fewer():
    """The issue's count: head dim 128, positions m < 512, cos(m theta_i) > 0.99 throughout."""
    paper = near_constant_dims(cosine_relpe(512, 128, dtype=torch.float64, freqs="paper"))
    authors = near_constant_dims(cosine_relpe(512, 128, dtype=torch.float64, freqs="authors"))
    assert paper == 71
    assert authors == 14
    # by hand: theta_i <= acos(0.99) / 511 is the condition; count those i for both formulas
    bound = math.acos(0.99) / 511
    assert paper == sum(10000.0 ** (-2 * i / 128) < bound for i in range(128))
    assert authors == sum(10000.0 ** (-i / 128) < bound for i in range(128))


def model_pair(cls, **kw):
    base = dict(block_size=64, vocab_size=50, n_layer=3, n_head=2, n_embd=16, pos_emb="cosine_relpe", bias=False)
    out = []
    for freqs in (None, "paper", "authors"):
        torch.manual_seed(0)
        extra = {} if freqs is None else dict(relpe_freqs=freqs)
        out.append(cls(ModelConfig(**base, **kw, **extra)).eval())
    return out


@pytest.mark.parametrize("cls, kw", [
    (BertEncoder, dict(block="danet", attention="dense", layer_scheme="LSG", window=8)),
    (GPT, dict(block="danet", attention="dense")),
    (GPT, dict()),  # transformer block: Cosine RelPE on q and k
])
def test_models_use_the_chosen_frequencies(cls, kw):
    default, paper, authors = model_pair(cls, **kw)
    idx = torch.randint(0, 50, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = [m(idx) for m in (default, paper, authors)]
    out = [o[0] if isinstance(o, tuple) else o for o in out]
    assert torch.equal(out[0], out[1])  # same seed, default = "paper": bit-identical
    assert not torch.allclose(out[0], out[2])  # same weights, other frequencies: another function
    D = 16 // 2
    assert torch.equal(default.transformer.position_table(40, idx.device, torch.float32),
                       eq6_table_before_the_option(40, D))
    assert torch.equal(authors.transformer.position_table(40, idx.device, torch.float32),
                       cosine_relpe(40, D, freqs="authors"))


def test_table_cache_follows_the_config():
    model = BertEncoder(ModelConfig(block_size=32, vocab_size=50, n_layer=1, n_head=2, n_embd=16,
                                    pos_emb="cosine_relpe")).eval()
    paper = model.transformer.position_table(20, torch.device("cpu"), torch.float32)
    model.config.relpe_freqs = "authors"
    authors = model.transformer.position_table(20, torch.device("cpu"), torch.float32)
    assert torch.equal(authors, cosine_relpe(20, 8, freqs="authors")) and not torch.equal(paper, authors)


def test_bad_value_is_a_clear_error():
    with pytest.raises(ValueError, match=r"relpe_freqs must be one of paper, authors.*'rope'"):
        ModelConfig(relpe_freqs="rope")
    with pytest.raises(ValueError, match=r"freqs must be one of paper, authors; got 'eq6'"):
        cosine_relpe(4, 4, freqs="eq6")


def test_old_checkpoints_get_the_paper_default():
    args = config_dict(ModelConfig(block_size=16, vocab_size=50, n_layer=1, n_head=2, n_embd=8,
                                   pos_emb="cosine_relpe"))
    del args["relpe_freqs"]  # model_args saved before the option existed
    assert ModelConfig(**args).relpe_freqs == "paper"


def test_the_key_is_a_model_key_of_every_task():
    assert train.DEFAULTS["relpe_freqs"] == "paper" and "relpe_freqs" in fixed_on_resume()
    assert "authors" in train.HELP["relpe_freqs"]
