"""linformer (Wang et al. 2020): the batched path against Eq. 7 head by head in float64 for each
sharing, the identity-projection limit (softmax), shorter sequences (the first T columns of E and
F), padding masked before the projection, the causal error, the model context (block_size,
n_head), parameter errors, and a few MLM training steps through train.py."""
import functools
import itertools
import os

import pytest
import torch

import attention
import model as model_lib
import attention.linformer as linformer_module
from attention.linformer import Linformer
from attention.testing import padding_mask, random_qkv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T, N, H = 10, 16, 3  # sequence length, block_size, heads


qkv = functools.partial(random_qkv, B=2, H=H, T=T, D=6, Dv=4)
padding = functools.partial(padding_mask, B=2, T=T)  # DEFAULT_PADS: right (4, 1) last, left (0, 3) first


def build(proj_len=5, block_size=N, **kw):
    layer = attention.build("linformer", {"block_size": block_size, "n_head": H, "head_dim": 6, "layer_idx": 0},
                            proj_len=proj_len, **kw)
    return layer.double()


@pytest.mark.parametrize("sharing,pad", list(itertools.product(["headwise", "kv", "none"], [None, "right", "left"])))
def test_fast_matches_eq7_reference_float64(sharing, pad, monkeypatch):
    monkeypatch.setattr(linformer_module, "QUERY_BLOCK", 4)  # three blocks of queries
    q, k, v = qkv()
    mask = padding(pad)
    torch.manual_seed(0)
    fast = build(sharing=sharing)
    ref = build(sharing=sharing, implementation="reference")
    ref.load_state_dict(fast.state_dict())
    out = fast(q, k, v, causal=False, attention_mask=mask)
    assert out.shape == v.shape and out.dtype == torch.float64
    torch.testing.assert_close(out, ref(q, k, v, causal=False, attention_mask=mask), rtol=1e-12, atol=1e-13)


def test_identity_projections_give_softmax():
    # k = n = T and E = F = I: Eq. 7 is softmax attention
    q, k, v = qkv()
    for sharing in ("headwise", "kv", "none"):
        layer = build(proj_len=T, block_size=T, sharing=sharing)
        with torch.no_grad():
            for p in layer.parameters():
                p.copy_(torch.eye(T, dtype=p.dtype).expand_as(p))
        torch.testing.assert_close(layer(q, k, v, causal=False),
                                   attention.build("softmax_reference")(q, k, v, causal=False), rtol=1e-12, atol=1e-13)


def test_shorter_sequences_use_the_first_columns():
    q, k, v = qkv()
    long = build(sharing="none")
    short = build(block_size=T, sharing="none")
    with torch.no_grad():
        short.E.copy_(long.E[..., :T])
        short.F.copy_(long.F[..., :T])
    torch.testing.assert_close(long(q, k, v, causal=False), short(q, k, v, causal=False), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("sharing", ["headwise", "kv", "none"])
def test_padding_is_masked_before_projecting(sharing):
    """Known failure elsewhere: padded keys and values mixed into E K and F V. Here the real
    queries' outputs do not depend on what padded positions hold, and a right-padded sequence
    gives what its unpadded prefix gives."""
    q, k, v = qkv()
    mask = padding("right")
    layer = build(sharing=sharing)
    out = layer(q, k, v, causal=False, attention_mask=mask)
    pad = ~mask[:, None, :, None]
    out2 = layer(q, k.masked_fill(pad, 30.0), v.masked_fill(pad, -1e4), causal=False, attention_mask=mask)
    torch.testing.assert_close(out2, out, rtol=1e-12, atol=1e-12)
    unmasked = layer(q, k.masked_fill(pad, 30.0), v.masked_fill(pad, -1e4), causal=False)
    assert (unmasked - out).abs().max() > 1  # what projecting the padding does
    n_real = int(mask[0].sum())
    alone = layer(q[:1, :, :n_real], k[:1, :, :n_real], v[:1, :, :n_real], causal=False)
    torch.testing.assert_close(out[:1, :, :n_real], alone, rtol=1e-12, atol=1e-13)


def test_gradients_reach_the_projections():
    q, k, v = qkv()
    for sharing, names in (("headwise", {"E", "F"}), ("kv", {"E"}), ("none", {"E", "F"})):
        layer = build(sharing=sharing)
        layer(q, k, v, causal=False, attention_mask=padding("right")).square().sum().backward()
        assert {n for n, p in layer.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0} == names
        assert layer.E.grad[..., T:].abs().sum() == 0  # columns past the sequence are unused


def test_model_context_sets_the_shapes():
    config = model_lib.ModelConfig(block_size=32, vocab_size=20, n_layer=2, n_head=4, n_embd=16,
                                   attention="linformer", attention_params={"proj_len": 8, "sharing": "none"})
    bert = model_lib.BertEncoder(config)
    layers = bert.attention_modules()
    assert all(m.E.shape == (4, 8, 32) and m.F.shape == (4, 8, 32) for m in layers)
    assert not torch.equal(layers[0].E, layers[1].E)
    idx = torch.randint(0, 20, (2, 20))
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[1, 15:] = False
    assert bert(idx, attention_mask=mask).shape == (2, 20, 16)
    keys = set(bert.state_dict())
    assert {"transformer.h.0.attn.mechanism.E", "transformer.h.0.attn.mechanism.F"} <= keys


def test_causal_is_an_error():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="linformer is not causal"):
        build()(q, k, v, causal=True)


def test_trains_as_an_encoder_through_train_py(tmp_path, wikitext2_dir):
    if not os.path.exists(os.environ.get("BERT_VOCAB_FILE", "")):
        pytest.skip("BERT vocabulary not found (BERT_VOCAB_FILE)")
    import train
    train.main([os.path.join(ROOT, "configs", "mlm", "wikitext2_bert_mini.py"),
                os.path.join(ROOT, "configs", "attention", "linformer.py"), "--max_iters=3", "--num_threads=1",
                "--n_layer=2", "--n_embd=32", "--n_head=2", "--block_size=128", "--batch_size=2", "--eval_iters=1",
                f"--out_dir={tmp_path}"])
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert ckpt["model"]["transformer.h.1.attn.mechanism.E"].shape == (256, 128)


@pytest.mark.parametrize("bad,match", [
    (dict(proj_len=0), "proj_len"), (dict(proj_len=1.5), "proj_len"), (dict(sharing="layerwise"), "sharing"),
    (dict(implementation="triton"), "implementation"),
])
def test_bad_parameters(bad, match):
    with pytest.raises(ValueError, match=match):
        build(**{"proj_len": 5, **bad})


def test_missing_context_and_bad_inputs():
    with pytest.raises(ValueError, match="needs the model's block_size"):
        attention.build("linformer")
    with pytest.raises(ValueError, match="needs n_head"):
        attention.build("linformer", {"block_size": 8}, sharing="none")
    with pytest.raises(ValueError, match="block_size"):
        attention.build("linformer", {"block_size": 0})
    q, k, v = qkv(T=N + 1)
    with pytest.raises(ValueError, match="exceeds block_size 16"):
        build()(q, k, v, causal=False)
    q, k, v = qkv(H=2)
    with pytest.raises(ValueError, match="n_head=3"):
        build(sharing="none")(q, k, v, causal=False)
    assert isinstance(build(), Linformer)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dtype_preserved(dtype):
    q, k, v = qkv(dtype=dtype)
    layer = build().float()
    assert layer(q, k, v, causal=False, attention_mask=padding("left")).dtype == dtype
