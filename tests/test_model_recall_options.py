"""The model keys of Zoology's MQAR models (issue 42): an untied LM head, attention-only blocks,
the position embedding's initialisation and the residual projections' scaling. The defaults keep
GPT-2's model (the language-model runs do not move)."""
import pytest
import torch

import checkpoint
from model import GPT, BertEncoder, ModelConfig, config_dict

SMALL = dict(block_size=16, vocab_size=50, n_layer=2, n_head=2, n_embd=16)


def test_the_defaults_build_the_same_gpt_as_before():
    torch.manual_seed(0)
    a = GPT(ModelConfig(**SMALL))
    torch.manual_seed(0)
    b = GPT(ModelConfig(**SMALL, pos_embedding_init_std=0.02, tie_lm_head=True, mlp=True, scale_residual_init=True))
    assert a.lm_head.weight is a.transformer.wte.weight
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert a.transformer.wpe.weight.std().item() == pytest.approx(0.02, rel=0.2)


def test_untied_head_attention_only_blocks_and_the_inits():
    torch.manual_seed(0)
    m = GPT(ModelConfig(**SMALL, pos_embedding_init_std=1.0, embedding_init_std=1.0, tie_lm_head=False, mlp=False,
                        scale_residual_init=False))
    assert m.lm_head.weight is not m.transformer.wte.weight
    assert m.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.2)
    assert m.transformer.wpe.weight.std().item() == pytest.approx(1.0, rel=0.2)
    assert not any("mlp" in name or "ln_2" in name for name, _ in m.named_parameters())
    c_proj = [p for name, p in m.named_parameters() if name.endswith("c_proj.weight")]
    assert c_proj and all(p.std().item() == pytest.approx(0.02, rel=0.2) for p in c_proj)
    # an attention-only block is x + attn(ln_1(x))
    block, x = m.transformer.h[0], torch.randn(2, 5, 16)
    assert torch.allclose(block(x), x + block.attn(block.ln_1(x)))
    logits, loss = m(torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8)))
    loss.backward()
    assert m.lm_head.weight.grad is not None and m.transformer.wte.weight.grad is not None
    # a checkpoint of it loads back with the same outputs
    state = {"model_args": config_dict(m.config), "model": m.state_dict()}
    again = checkpoint.build_model(state, "lm")
    idx = torch.randint(0, 50, (1, 8))
    assert torch.equal(again.eval()(idx)[0], m.eval()(idx)[0])


@pytest.mark.parametrize("bad, match", [
    (dict(mlp="no"), "mlp must be True or False"),
    (dict(tie_lm_head=0), "tie_lm_head must be True or False"),
    (dict(pos_embedding_init_std=0.0), "pos_embedding_init_std must be > 0"),
    (dict(mlp=False, block="danet", attention="dense"), "attention-only blocks"),
])
def test_bad_values_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{**SMALL, **bad})


def test_the_encoder_refuses_an_untied_head():
    with pytest.raises(ValueError, match="tie_lm_head=False applies to the GPT"):
        BertEncoder(ModelConfig(**SMALL, tie_lm_head=False))
