import os

import pytest
import torch

from model import GPT, BertEncoder, ModelConfig


def hf_logits(path, idx):
    from transformers import GPT2LMHeadModel
    hf = GPT2LMHeadModel.from_pretrained(path).eval()
    with torch.no_grad():
        return hf(idx).logits


def test_loads_shared_tiny_hf_gpt2():
    path = os.environ["GPT2_TINY_HF_DIR"]
    if not os.path.exists(os.path.join(path, "config.json")):
        pytest.skip(f"no tiny HF GPT-2 at {path}")
    idx = torch.randint(0, 50257, (2, 17), generator=torch.Generator().manual_seed(0))
    ours = GPT.from_hf(path).eval()
    with torch.no_grad():
        logits, _ = ours(idx)
    torch.testing.assert_close(logits, hf_logits(path, idx), rtol=0, atol=1e-5)


def test_loads_random_hf_gpt2(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=101, n_positions=32, n_embd=24, n_layer=2, n_head=3))
    hf.save_pretrained(tmp_path)
    idx = torch.randint(0, 101, (3, 32), generator=torch.Generator().manual_seed(1))
    ours = GPT.from_hf(str(tmp_path)).eval()
    assert ours.config.n_head == 3 and ours.config.block_size == 32
    with torch.no_grad():
        logits, _ = ours(idx)
    torch.testing.assert_close(logits, hf_logits(str(tmp_path), idx), rtol=0, atol=1e-5)
    # the swapped-in reference attention gives the same logits
    ours.set_attention("softmax_reference")
    with torch.no_grad():
        logits_ref, _ = ours(idx)
    torch.testing.assert_close(logits_ref, logits, rtol=0, atol=1e-5)


def small_config(**kw):
    return ModelConfig(**{**dict(block_size=16, vocab_size=50, n_layer=2, n_head=2, n_embd=16), **kw})


def test_gpt_loss_and_tied_head():
    model = GPT(small_config())
    idx = torch.randint(0, 50, (2, 16))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 16, 50)
    assert model.lm_head.weight is model.transformer.wte.weight
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits.view(-1, 50), idx.view(-1)))
    loss.backward()


def test_gpt_is_causal():
    model = GPT(small_config()).eval()
    idx = torch.randint(0, 50, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % 50
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_sequence_longer_than_block_size():
    with pytest.raises(ValueError, match="sequence length 17 exceeds the model's block_size 16"):
        GPT(small_config())(torch.zeros(1, 17, dtype=torch.long))


def test_attention_from_config():
    model = GPT(small_config(attention="softmax_reference"))
    assert all(type(m).__name__ == "SoftmaxReference" for m in model.attention_modules())
    with pytest.raises(ValueError, match="registered"):
        GPT(small_config(attention="nope"))


def test_bert_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    model = BertEncoder(small_config(n_classes=3, pooling="mean")).eval()
    idx = torch.randint(0, 50, (1, 10))
    padded = torch.cat([idx, torch.zeros(1, 6, dtype=torch.long)], 1)
    mask = torch.arange(16)[None] < 10
    with torch.no_grad():
        h = model(idx)
        h_pad = model(padded, mask)
        torch.testing.assert_close(h_pad[:, :10], h, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model.classify(padded, mask), model.classify(idx), rtol=1e-5, atol=1e-5)
    assert model.mlm_logits(h).shape == (1, 10, 50)


def test_bert_is_bidirectional_and_two_tower():
    model = BertEncoder(small_config(n_classes=2, two_tower=True)).eval()
    idx = torch.randint(0, 50, (2, 8))
    changed = idx.clone()
    changed[:, -1] = (idx[:, -1] + 1) % 50
    with torch.no_grad():
        assert not torch.allclose(model(idx)[:, 0], model(changed)[:, 0])
        assert model.classify(idx, idx2=changed).shape == (2, 2)
    with pytest.raises(ValueError, match="idx2"):
        model.classify(idx)
