import pytest
import torch

from model import GPT, BertEncoder, Classifier, ModelConfig


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
    model = BertEncoder(small_config(pooling="mean")).eval()
    clf = Classifier(small_config(n_classes=3, pooling="mean")).eval()
    idx = torch.randint(0, 50, (1, 10))
    padded = torch.cat([idx, torch.zeros(1, 6, dtype=torch.long)], 1)
    mask = torch.arange(16)[None] < 10
    with torch.no_grad():
        h = model(idx)
        h_pad = model(padded, mask)
        torch.testing.assert_close(h_pad[:, :10], h, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(clf(padded, mask), clf(idx), rtol=1e-5, atol=1e-5)
    assert model.mlm_logits(h).shape == (1, 10, 50)


def test_bert_is_bidirectional_and_two_tower():
    model = Classifier(small_config(n_classes=2, two_tower=True)).eval()
    idx = torch.randint(0, 50, (2, 8))
    changed = idx.clone()
    changed[:, -1] = (idx[:, -1] + 1) % 50
    with torch.no_grad():
        assert not torch.allclose(model.transformer(idx)[:, 0], model.transformer(changed)[:, 0])
        assert model(idx, idx2=changed).shape == (2, 2)
    with pytest.raises(ValueError, match="idx2"):
        model(idx)
    with pytest.raises(ValueError, match="n_classes > 0"):
        Classifier(small_config())


@pytest.fixture
def context_probe():
    """A registered softmax that records the model context it was built with (removed afterwards)."""
    import attention
    from attention.softmax import Softmax

    @attention.register("_probe_ctx_softmax")
    class Probe(Softmax):
        def __init__(self, exclude_self=False, layer_idx=None, block_size=None):
            super().__init__(exclude_self=exclude_self)
            self.layer_idx, self.block_size = layer_idx, block_size

    yield "_probe_ctx_softmax"
    attention._REGISTRY.pop("_probe_ctx_softmax", None)


def test_each_block_gets_its_context(context_probe):
    model = GPT(small_config(n_layer=3, attention=context_probe))
    assert [(m.layer_idx, m.block_size) for m in model.attention_modules()] == [(0, 16), (1, 16), (2, 16)]
    bert = BertEncoder(small_config(n_layer=2))
    bert.set_attention(context_probe, {"exclude_self": True})
    assert [(m.layer_idx, m.block_size, m.exclude_self) for m in bert.attention_modules()] == [(0, 16, True), (1, 16, True)]
    assert bert.config.attention == context_probe and bert.config.attention_params == {"exclude_self": True}


def test_context_names_rejected_as_attention_params(context_probe):
    with pytest.raises(ValueError, match="model supplies"):
        GPT(small_config(attention=context_probe, attention_params={"layer_idx": 1}))
    with pytest.raises(ValueError, match="model supplies"):
        GPT(small_config()).set_attention("softmax", {"block_size": 8})


def test_exclude_self_zeroes_position_zero_after_c_proj():
    torch.manual_seed(0)
    model = GPT(small_config(attention="softmax", attention_params={"exclude_self": True})).eval()
    for block in model.transformer.h:
        torch.nn.init.normal_(block.attn.c_proj.bias)  # a bias would show at position 0 if added
    idx = torch.randint(0, 50, (2, 16))
    x = torch.randn(2, 16, 16)
    with torch.no_grad():
        attn = model.transformer.h[0].attn
        y = attn(x)
        assert torch.all(y[:, 0] == 0) and torch.all(y[:, 1:].abs().sum(-1) > 0)
        # position 1 reads only position 0: exactly c_proj(v_0)
        v0 = attn.c_attn(x)[:, 0, 32:]
        torch.testing.assert_close(y[:, 1], attn.c_proj(v0))
        # by hand: every attention block adds 0 at position 0, so its logits come from the MLPs alone
        h = model.transformer.wte(idx[:, :1]) + model.transformer.wpe.weight[:1]
        for block in model.transformer.h:
            h = h + block.mlp(block.ln_2(h))
        expected = model.lm_head(model.transformer.ln_f(h))
        logits, _ = model(idx)
    torch.testing.assert_close(logits[:, :1], expected)


def test_non_causal_exclude_self_keeps_bias():
    model = BertEncoder(small_config(attention="softmax", attention_params={"exclude_self": True})).eval()
    attn = model.transformer.h[0].attn
    torch.nn.init.normal_(attn.c_proj.bias)
    with torch.no_grad():
        y = attn(torch.randn(1, 1, 16))  # one token, no allowed key: mechanism gives 0, c_proj adds its bias
    torch.testing.assert_close(y[0, 0], attn.c_proj.bias.detach())


def test_attention_mask_keyword_everywhere():
    torch.manual_seed(0)
    idx = torch.randint(0, 50, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 6:] = False
    gpt = GPT(small_config()).eval()
    bert = Classifier(small_config(n_classes=2, two_tower=True, pooling="mean")).eval()
    with torch.no_grad():
        logits, _ = gpt(idx, attention_mask=mask)
        torch.testing.assert_close(logits[1, :6], gpt(idx[1:, :6])[0][0], rtol=1e-5, atol=1e-5)
        hidden = bert.transformer(idx, attention_mask=mask)
        torch.testing.assert_close(bert.pool(hidden, attention_mask=mask)[1], hidden[1, :6].mean(0))
        a = bert(idx, attention_mask=mask, idx2=idx, attention_mask2=mask)
        b = bert(idx[1:, :6], idx2=idx[1:, :6])
        torch.testing.assert_close(a[1:], b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,why", [("reformer", "depends on later tokens"), ("informer", "depends on later tokens"),
                                      ("linformer", "has no causal form")])
def test_causal_model_refuses_an_attention_that_is_not_exactly_causal(name, why):
    """The GPT refuses it at construction and on a swap; the bidirectional models take it."""
    import attention

    assert why in attention.causal_refusal(name)
    with pytest.raises(ValueError, match=f"attention='{name}' .*{why}.*a causal model"):
        GPT(small_config(attention=name))
    gpt = GPT(small_config())
    with pytest.raises(ValueError, match=f"attention='{name}' .*{why}"):
        gpt.set_attention(name)
    assert gpt.config.attention == "softmax"  # a refused swap changes nothing
    bert = BertEncoder(small_config())
    bert.set_attention(name)
    assert bert.config.attention == name


def test_causal_refusal_is_none_for_the_exactly_causal_ones():
    import attention

    exact = [n for n in attention.registered() if attention.causal_support(n) == "exact"]
    assert {"softmax", "linear", "performer", "longformer", "bigbird", "tree"} <= set(exact)
    assert all(attention.causal_refusal(n) is None for n in exact)
    with pytest.raises(ValueError, match="unknown attention 'bogus'"):
        attention.causal_refusal("bogus")
