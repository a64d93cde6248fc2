"""Tests of the DANet block, MaxNorm, Cosine RelPE, pos_emb (incl. the sinusoidal table), the token embedding's
initialisation, layer_scheme and the FFN rescaling in model.py."""
import math
import os

import pytest
import torch

import attention.dense  # noqa: F401  (registers "dense")
from model import (GPT, BertEncoder, DANetBlock, ModelConfig, config_dict, cosine_relpe, max_norm,
                   sinusoidal_positions)


def danet_config(**kw):
    base = dict(block_size=32, vocab_size=50, n_layer=3, n_head=2, n_embd=8, block="danet", attention="dense",
                pos_emb="cosine_relpe")
    return ModelConfig(**{**base, **kw})


def randomize(model, seed=0):
    """Larger random weights than the (tiny) DANet initialisation, so every term matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return model


# ---------------------------------------------------------------------------------------------
# MaxNorm and Cosine RelPE


def test_max_norm_bounds():
    x = torch.randn(4, 7, 16, dtype=torch.float64) * 100
    y = max_norm(x, 1e-3)
    largest = x.abs().amax(-1)
    torch.testing.assert_close(y.abs().amax(-1), largest / (largest + 1e-3))
    assert torch.all(y.abs() < 1)
    torch.testing.assert_close(y * (largest + 1e-3)[..., None], x)  # a per-token rescaling, signs kept
    assert torch.all(max_norm(torch.zeros(2, 3), 1e-3) == 0)


def test_cosine_relpe_formula():
    table = cosine_relpe(50, 8, dtype=torch.float64)
    assert table.shape == (50, 8)
    for m in (0, 1, 7, 49):
        for i in range(8):
            assert table[m, i].item() == pytest.approx(math.cos(m * 10000 ** (-2 * i / 8)), abs=1e-12)
    assert torch.all(table[0] == 1)
    # long sequences: angles in float64 before the cast
    far = cosine_relpe(20000, 4)[-1]
    assert far[0].item() == pytest.approx(math.cos(19999.0), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# the block's equations


def hand_block(block, x, T_scale, relpe, eps=1e-3, causal=False):
    """X' = DenseAttention(MaxNorm(X) N^(-1/3)); X_next = X + MaxNorm(FFN(X')), with loops."""
    B, T, C = x.shape
    H = block.n_head
    D = C // H
    out = torch.empty_like(x)
    W_q = block.attn.c_q.weight  # (C_out, C_in): q = h W_q^T
    W_fc = block.mlp.c_fc.weight * block.mlp.fc_scale
    W_proj = block.mlp.c_proj.weight * block.mlp.proj_scale
    for b in range(B):
        h = torch.stack([x[b, t] / (x[b, t].abs().max() + eps) for t in range(T)]) * T_scale
        h = h * relpe.repeat(1, H)
        q = h @ W_q.T
        att = torch.zeros(T, C, dtype=x.dtype)
        for head in range(H):
            cols = slice(head * D, (head + 1) * D)
            for i in range(T):
                for j in range(T):
                    if causal and j > i:
                        continue
                    att[i, cols] += (q[i, cols] @ h[j, cols]) * h[j, cols]
        ffn = torch.relu(att @ W_fc.T) @ W_proj.T
        out[b] = x[b] + torch.stack([f / (f.abs().max() + eps) for f in ffn])
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_block_equations_by_hand(causal):
    config = danet_config(ffn_linf_norm=0.3)
    block = DANetBlock(config, causal=causal, layer_idx=0).double()
    randomize(block)
    block.mlp.rescale(0.3)
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    relpe = cosine_relpe(6, 4, dtype=torch.float64)
    expected = hand_block(block, x, 6 ** (-1 / 3), relpe, causal=causal)
    torch.testing.assert_close(block(x, None, relpe), expected, rtol=1e-10, atol=1e-12)


def test_local_layers_scale_by_window_and_attend_in_windows():
    config = danet_config(layer_scheme="LSG", window=4)
    blocks = [DANetBlock(config, causal=False, layer_idx=i).double() for i in range(3)]
    assert [(b.kind, b.attn.mechanism.window, b.attn.mechanism.shift) for b in blocks] == \
        [("L", 4, False), ("S", 4, True), ("G", 0, False)]
    local = randomize(blocks[0])
    x = torch.randn(1, 8, 8, dtype=torch.float64)
    y = local(x)
    # windows [0, 4) and [4, 8) are independent: each equals the block applied to its window alone,
    # with the same scale w^(-1/3)
    torch.testing.assert_close(y[:, :4], local(x[:, :4]), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(y[:, 4:], local(x[:, 4:]), rtol=1e-10, atol=1e-12)
    assert local.input_scale(x) == 4 ** (-1 / 3)


def test_pad_rows_stay_zero_through_a_danet_layer():
    block = randomize(DANetBlock(danet_config(), causal=False).double())
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    x[0, 5:] = 0
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[0, 5:] = False
    y = block(x, mask, cosine_relpe(7, 4, dtype=torch.float64))
    assert torch.all(y[0, 5:] == 0) and torch.all(y[0, :5] != 0)
    # the PAD embedding is zero at the model's input as well, position embedding included
    model = BertEncoder(danet_config(pos_emb="learned", pad_token_id=0))
    idx = torch.randint(1, 50, (1, 6))
    idx[0, 4:] = 0
    with torch.no_grad():
        hidden = model.transformer.h[0](model.transformer.wte(idx) * (idx != 0)[..., None], idx != 0)
    assert torch.all(hidden[0, 4:] == 0)


@pytest.mark.parametrize("scheme,pos_emb", [("G", "cosine_relpe"), ("LSG", "learned"), ("SG", "none")])
def test_encoder_real_tokens_ignore_appended_padding(scheme, pos_emb):
    torch.manual_seed(0)
    model = randomize(BertEncoder(danet_config(layer_scheme=scheme, window=4, pos_emb=pos_emb, pad_token_id=0)),
                      seed=1).double().eval()
    idx = torch.randint(1, 50, (2, 10))
    padded = torch.cat([idx, torch.zeros(2, 6, dtype=torch.long)], 1)
    with torch.no_grad():
        short = model(idx)
        by_pad_id = model(padded)
        by_mask = model(torch.cat([idx, torch.randint(1, 50, (2, 6))], 1), torch.arange(16)[None] < 10)
    torch.testing.assert_close(by_pad_id[:, :10], short, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(by_mask[:, :10], short, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("model_cls", [GPT, BertEncoder])
def test_regimes_give_the_same_model_output(model_cls):
    model = randomize(model_cls(danet_config(n_layer=4, layer_scheme="LSG", window=6, pad_token_id=0)),
                      seed=2).double().eval()
    idx = torch.randint(1, 50, (2, 29))
    idx[1, 25:] = 0
    outputs = {}
    for regime in ("linear", "quadratic", "auto"):
        model.set_attention("dense", {"regime": regime, "chunk_size": 4})
        with torch.no_grad():
            out = model(idx)
        outputs[regime] = out[0] if isinstance(out, tuple) else out
    model.set_attention("dense", {"implementation": "reference"})
    with torch.no_grad():
        out = model(idx)
    reference = out[0] if isinstance(out, tuple) else out
    for regime, out in outputs.items():
        torch.testing.assert_close(out, reference, rtol=1e-9, atol=1e-9)
    assert [m.window for m in model.attention_modules()] == [6, 6, 0, 6]
    assert model.config.attention_params == {"implementation": "reference"}


def test_danet_gpt_is_causal():
    model = randomize(GPT(danet_config(layer_scheme="SG", window=4)), seed=3).double().eval()
    idx = torch.randint(0, 50, (1, 16))
    changed = idx.clone()
    changed[0, 9] = (idx[0, 9] + 1) % 50
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    torch.testing.assert_close(a[:, :9], b[:, :9], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(a[:, 9:], b[:, 9:])


# ---------------------------------------------------------------------------------------------
# position information for every model


def test_pos_emb_choices_for_transformer_blocks():
    base = dict(block_size=8, vocab_size=50, n_layer=2, n_head=2, n_embd=16)
    none = BertEncoder(ModelConfig(**base, pos_emb="none")).eval()
    rel = randomize(BertEncoder(ModelConfig(**base, pos_emb="cosine_relpe"))).eval()
    assert none.transformer.wpe is None and "transformer.wpe.weight" not in none.state_dict()
    assert none.num_params() == none.num_params(non_embedding=False)
    idx = torch.randint(0, 50, (1, 12))  # longer than block_size: fine without learned positions
    perm = torch.randperm(12)
    with torch.no_grad():
        # no position information: the encoder is permutation-equivariant
        torch.testing.assert_close(none(idx[:, perm]), none(idx)[:, perm], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(rel(idx[:, perm]), rel(idx)[:, perm], atol=1e-2)
        # Cosine RelPE multiplies q and k per head, as RoPE would be applied
        attn = rel.transformer.h[0].attn
        x = torch.randn(1, 12, 16)
        table = cosine_relpe(12, 8)
        q, k, v = attn.c_attn(x).split(16, dim=2)
        q, k, v = (t.view(1, 12, 2, 8).transpose(1, 2) for t in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q * table, k * table, v)
        expected = attn.c_proj(y.transpose(1, 2).reshape(1, 12, 16))
        torch.testing.assert_close(attn(x, None, table), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="exceeds the model's block_size"):
        BertEncoder(ModelConfig(**base))(idx)


# ---------------------------------------------------------------------------------------------
# FFN rescaling (appendix G) and the folded export


def test_rescaling_keeps_linf_norms_and_export_folds_exactly():
    torch.manual_seed(0)
    model = BertEncoder(danet_config(ffn_linf_norm=0.05, layer_scheme="LG", window=4))
    mlps = [block.mlp for block in model.transformer.h]
    for mlp in mlps:  # already at construction
        for w, s in ((mlp.c_fc.weight, mlp.fc_scale), (mlp.c_proj.weight, mlp.proj_scale)):
            assert (w * s).abs().max().item() == pytest.approx(0.05, rel=1e-6)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.0)
    idx = torch.randint(0, 50, (2, 12))
    for _ in range(3):
        raw = [mlp.c_fc.weight.detach().clone() for mlp in mlps]
        model.mlm_logits(model(idx)).logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        assert all(not torch.equal(r, mlp.c_fc.weight) for r, mlp in zip(raw, mlps))
        model.after_optimizer_step()
        for mlp in mlps:
            for w, s in ((mlp.c_fc.weight, mlp.fc_scale), (mlp.c_proj.weight, mlp.proj_scale)):
                assert (w * s).abs().max().item() == pytest.approx(0.05, rel=1e-6)
                assert s.item() != 1.0  # the weight itself is not rescaled, only its scale
    model.eval()
    with torch.no_grad():
        before = model(idx)
        model.fold_ffn_scales()
        after = model(idx)
    assert torch.equal(before, after)
    assert model.config.ffn_linf_norm == 0.0
    for mlp in mlps:
        assert mlp.fc_scale.item() == 1.0 and mlp.c_fc.weight.abs().max().item() == pytest.approx(0.05, rel=1e-6)
    # a folded model rebuilt from its config and state dict computes the same, and no longer rescales
    clone = BertEncoder(ModelConfig(**config_dict(model.config)))
    clone.load_state_dict(model.state_dict())
    clone.eval()
    clone.after_optimizer_step()
    with torch.no_grad():
        assert torch.equal(clone(idx), after)


def test_without_rescaling_the_hook_does_nothing():
    model = GPT(danet_config())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.after_optimizer_step()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    softmax = GPT(ModelConfig(block_size=8, vocab_size=50, n_layer=1, n_head=2, n_embd=8))
    softmax.after_optimizer_step()
    assert softmax.fold_ffn_scales() is softmax


def test_sinusoidal_table_is_vaswani_sec_3_5():
    T, C = 40, 12
    table = sinusoidal_positions(T, C, dtype=torch.float64)
    assert table.shape == (T, C)
    for m in (0, 1, 7, 39):
        for i in range(C // 2):
            angle = m / 10000 ** (2 * i / C)
            assert table[m, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert table[m, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    assert torch.all(table.abs() <= 1)
    # a longer table extends a shorter one: position m means the same at every length
    torch.testing.assert_close(sinusoidal_positions(2 * T, C, dtype=torch.float64)[:T], table, rtol=0, atol=0)


@pytest.mark.parametrize("block", ["transformer", "danet"])
def test_sinusoidal_positions_are_added_to_the_token_embeddings(block):
    kw = dict(block_size=8, vocab_size=50, n_layer=2, n_head=2, n_embd=16, pos_emb="sinusoidal", block=block)
    if block == "danet":
        kw.update(attention="dense")
    model = randomize(BertEncoder(ModelConfig(**kw))).eval()
    assert model.transformer.wpe is None and model.num_params() == model.num_params(non_embedding=False)
    idx = torch.randint(0, 50, (2, 12))  # longer than block_size: fine, the table has any length
    seen = {}
    model.transformer.drop.register_forward_hook(lambda mod, inp, out: seen.setdefault("x", inp[0]))
    with torch.no_grad():
        out = model(idx)
    expected = model.transformer.wte(idx) + sinusoidal_positions(12, 16)
    torch.testing.assert_close(seen["x"], expected, rtol=0, atol=0)
    perm = torch.randperm(12)
    with torch.no_grad():
        assert not torch.allclose(model(idx[:, perm]), out[:, perm], atol=1e-2)


def test_embedding_init_std_scales_only_the_token_embedding():
    base = dict(block_size=8, vocab_size=500, n_layer=2, n_head=2, n_embd=16)
    torch.manual_seed(0)
    gpt2 = BertEncoder(ModelConfig(**base)).state_dict()
    torch.manual_seed(0)
    lra = BertEncoder(ModelConfig(**base, embedding_init_std=1.0)).state_dict()
    assert gpt2.keys() == lra.keys()
    for name in gpt2:  # the same draws: the token embedding 50x larger, every other parameter equal
        if name == "transformer.wte.weight":
            torch.testing.assert_close(lra[name], gpt2[name] / 0.02)
        else:
            assert torch.equal(lra[name], gpt2[name]), name
    assert 0.95 < lra["transformer.wte.weight"].std().item() < 1.05


# ---------------------------------------------------------------------------------------------
# configuration errors


@pytest.mark.parametrize("kw,message", [
    (dict(block="mamba"), "block must be one of transformer, danet; got 'mamba'"),
    (dict(pos_emb="rope"), "pos_emb must be one of learned, sinusoidal, cosine_relpe, none; got 'rope'"),
    (dict(pos_emb="sinusoidal", n_embd=9, n_head=3, block="transformer", attention="softmax"),
     "n_embd must be even; got 9"),
    (dict(embedding_init_std=0.0), "embedding_init_std must be > 0; got 0.0"),
    (dict(attention="softmax"), "block='danet' needs attention='dense'"),
    (dict(layer_scheme="LXG", window=4), "layer_scheme must be a non-empty string of the letters G, L, S"),
    (dict(layer_scheme="LG"), "has local layers: set window > 0"),
    (dict(layer_scheme="SG", window=5), "window must be even; got 5"),
    (dict(window=-1), "window must be an integer >= 0"),
    (dict(attention_params={"window": 4}), r"\['window'\] come from layer_scheme and window"),
    (dict(ffn_linf_norm=-1.0), "ffn_linf_norm must be >= 0"),
    (dict(pad_token_id=50), "pad_token_id must be -1"),
    (dict(block="transformer", attention="softmax", layer_scheme="LG", window=4), "needs block='danet'"),
    (dict(block="transformer", attention="softmax", ffn_linf_norm=0.1), "needs block='danet'"),
])
def test_bad_configs_are_clear_errors(kw, message):
    with pytest.raises(ValueError, match=message):
        danet_config(**kw)


def test_danet_rejects_other_attentions_on_swap():
    model = GPT(danet_config())
    with pytest.raises(ValueError, match="attention must be 'dense', got 'softmax'"):
        model.set_attention("softmax")
    with pytest.raises(ValueError, match="come from layer_scheme"):
        model.set_attention("dense", {"shift": True})


def test_danet_gpt_config_has_the_softmax_gpt_budget():
    import os

    import configurator
    import train
    from model import config_from_run

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    softmax, danet = (configurator.parse(train.DEFAULTS, [os.path.join(root, "configs", name)])
                      for name in ("wikitext2_gpt_mini.py", "wikitext2_danet_gpt_mini.py"))
    for key in ("task", "dataset", "dataset_config", "block_size", "batch_size", "gradient_accumulation_steps",
                "max_iters", "n_embd"):
        assert softmax[key] == danet[key], key
    sizes = []
    for cfg in (softmax, danet):
        model = GPT(config_from_run(cfg, block_size=cfg["block_size"], vocab_size=64))
        sizes.append(sum(p.numel() for n, p in model.named_parameters() if ".h." in n))
    assert 0.9 < sizes[1] / sizes[0] < 1.0, sizes
    assert danet["block"] == "danet" and danet["layer_scheme"] == "LSG"


def _bench_attention_module():
    import importlib
    return importlib.import_module("scripts.bench.attention")


def test_layer_benchmark_smoke(tmp_path):
    bench = _bench_attention_module()
    out = str(tmp_path / "layer")
    rows, summary = bench.main(["--suite", "layer", "--T", "8,128", "--D", "16", "--threads", "1", "--repeats", "1",
                                "--layer_tokens", "256", "--out", out])
    assert len(rows) == 2 * 4 * 2  # T x methods x modes
    assert all(r["tokens_per_s"] > 0 and r["batch"] * r["T"] == 256 for r in rows)
    regimes = {(r["method"], r["T"]): r["regime"] for r in rows}
    assert regimes[("danet_auto", 8)] == "quadratic" and regimes[("danet_auto", 128)] == "linear"  # T vs D
    assert regimes[("danet_quadratic", 128)] == "quadratic" and regimes[("softmax_layer", 8)] == "softmax"
    for ext in (".csv", ".json", ".png"):
        assert os.path.getsize(out + ext) > 0
    assert set(summary) == {"forward", "forward_backward"}


def test_layer_benchmark_targets_on_known_rows():
    bench = _bench_attention_module()
    rows = [dict(method=m, mode="forward", T=T, batch=max(1, 65536 // T), seconds=s)
            for m, T, s in [("danet_linear", 1024, 1.0), ("danet_linear", 16384, 1.1), ("danet_linear", 65536, 1.3),
                            ("danet_quadratic", 1024, 2.0), ("danet_auto", 1024, 1.05),
                            ("danet_auto", 16384, 1.5), ("softmax_layer", 16384, 22.0)]]
    forward = bench.layer_targets(rows)["forward"]
    assert forward["linear_time_per_token_Tmax_over_T1024"]["ratio"] == pytest.approx(1.3)
    assert forward["linear_over_softmax_throughput_T16384"]["ratio"] == pytest.approx(20.0)
    by_T = {r["T"]: r for r in forward["auto_over_best_regime"]}
    assert by_T[1024]["ok"] and by_T[1024]["ratio"] == pytest.approx(1.05)
    assert not by_T[16384]["ok"]  # 1.5 / 1.1 > 1.1
