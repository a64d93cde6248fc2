"""The decode contract (attention/__init__.py, ``Attention.prefill`` / ``Attention.step``), checked
for every registered attention that declares a decode path (``decode_kind`` not None), so that a
new one, or one registered through ``--import``, is checked without an edit of this file:

- attention level, float64: ``prefill`` gives the causal forward's output, and the output of step
  t equals the last row of the method's own causal forward over tokens 0..t, at most 1e-10, with
  and without padding of the prompt (methods that take a mask); float32 in, float32 out; a
  "state" keeps its size (``state_nbytes``) whatever the context; Performer's steps where its
  reference m rises; the registry's checks of the metadata; a method without a decode path raises
  an error naming the method called;
- model level, float32: the logits of ``GPT.prefill`` and of every ``GPT.decode_step`` equal those
  of the whole forward over the prefix (``MODEL_TOLERANCE``), for each decode-capable attention
  and the model's per-position pieces (learned, sinusoidal and Cosine RelPE positions, the token
  shift, self-exclusion), DANet blocks included; generation with and without states gives the
  same greedy tokens; a model whose lower layers' rows depend on the length (BigBird, a global
  DANet layer below the last) generates by recomputation;
- the outside check: the tiny Hugging Face GPT-2 (``GPT2_TINY_HF_DIR``, loaded as eval_ppl.py
  loads it) gives, decoding a greedy continuation a token at a time, the logits ``transformers``
  computes with its own KV cache (``past_key_values``), at most 1e-5.
"""
import inspect
import os

import pytest
import torch

import attention
import eval_ppl
from attention.kv_cache import KVCache
from attention.testing import build_example, random_qkv
from model import GPT, DecodeCache, ModelConfig

B, H, D = 2, 2, 8
PROMPT, T = 7, 21  # 14 steps after a 7-token prompt: past the KV cache's first 16 positions (a growth)
CONTEXT = {"layer_idx": 0, "block_size": T, "n_head": H, "head_dim": D}
EXACT = 1e-10  # float64: the step and the forward differ in rounding only
DECODERS = [name for name in attention.registered() if attention.decode_kind(name)]
OTHERS = [name for name in attention.registered() if not attention.decode_kind(name)]
# Parameters that change what a decoder computes beyond its example parameters: the other degree and
# normalizations of Fastmax ("max_norm" keeps running maxima in its state), softmax's window and
# self-exclusion (which keys of the cache a step may see); Longformer's window and global tokens
# (a window past the prompt, more global tokens than the prompt has, none, a window of 0); BigBird
# with fewer than 2 global blocks (the last block not global: window, random and leading global
# blocks), with more, and with other block sizes; Performer's other kernel and features; DenseAttention's
# windows (a new window restarts the state), shifted windows and regimes.
VARIANTS = {
    "dense": [{"window": 4}, {"window": 6, "shift": True}, {"window": 5, "regime": "quadratic"},
              {"regime": "linear"}, {"implementation": "reference", "window": 4, "shift": True}],
    "performer": [{"kernel": "relu"}, {"kernel": "relu", "features": "deterministic"}, {"features": "iid"},
                  {"implementation": "reference"}],
    "bigbird": [{"num_global_blocks": 0, "num_random_blocks": 2}, {"num_global_blocks": 1, "num_window_blocks": 1},
                {"num_global_blocks": 1, "block_size_sparse": 3, "num_random_blocks": 2, "seed": 5},
                {"num_global_blocks": 3, "block_size_sparse": 5}, {"implementation": "reference"},
                {"num_global_blocks": 0, "implementation": "reference", "random_per_layer": False}],
    "longformer": [{"num_global": 0}, {"window": 0, "num_global": 2}, {"window": 12, "num_global": 9},
                   {"implementation": "reference"}],
    "fastmax": [{"p": 1}, {"p": 1, "normalization": "max_norm"}, {"p": 2, "normalization": "max_norm", "lim": 2.0},
                {"p": 2, "normalization": "none"}, {"p": 2, "implementation": "reference"}],
    "softmax": [{"window": 5}, {"exclude_self": True}, {"window": 4, "exclude_self": True}],
    "softmax_reference": [{"window": 5}, {"exclude_self": True}],
}


def cases():
    """(name, extra parameters) for every decoder: its example parameters, then its variants."""
    return [(name, params) for name in DECODERS for params in [{}] + VARIANTS.get(name, [])]


def build(name, params):
    """The decoder ``name`` with its example parameters updated by ``params``, in eval mode."""
    torch.manual_seed(0)
    return attention.build(name, CONTEXT, **{**attention.attention_class(name).example_params, **params}).eval()


def prompt_mask(name, padded):
    """The prompt's (B, PROMPT) ``attention_mask``: batch 0 with holes at 2 and 3, batch 1 with its
    first 3 tokens padded (its first queries have no real key); None unpadded or for a method that
    takes no mask."""
    if not padded or not attention.attention_class(name).supports_attention_mask:
        return None
    mask = torch.ones(B, PROMPT, dtype=torch.bool)
    mask[0, 2:4] = False
    mask[1, :3] = False
    return mask


def extended(mask, length):
    """The prompt's mask followed by real tokens up to ``length``."""
    if mask is None:
        return None
    return torch.cat([mask, torch.ones(B, length - PROMPT, dtype=torch.bool)], dim=1)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name,params", cases())
def test_step_equals_the_last_row_of_the_causal_forward(name, params, padded):
    module = build(name, params)
    q, k, v = random_qkv(B, H, T, D)
    mask = prompt_mask(name, padded)
    if padded and mask is None:
        pytest.skip(f"{name} takes no attention_mask")
    with torch.no_grad():
        out, state = module.prefill(q[:, :, :PROMPT], k[:, :, :PROMPT], v[:, :, :PROMPT], mask)
        whole = module(q[:, :, :PROMPT], k[:, :, :PROMPT], v[:, :, :PROMPT], True, attention_mask=mask)
        torch.testing.assert_close(out, whole, rtol=0, atol=EXACT)
        sizes = {attention.state_nbytes(state)}
        for t in range(PROMPT, T):
            o_t, state = module.step(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], state)
            last = module(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], True,
                          attention_mask=extended(mask, t + 1))[:, :, -1:]
            assert o_t.shape == (B, H, 1, D) and o_t.dtype == torch.float64
            torch.testing.assert_close(o_t, last, rtol=0, atol=EXACT, msg=lambda m: f"{name} {params} step {t}: {m}")
            sizes.add(attention.state_nbytes(state))
    if attention.decode_kind(name) == "state":
        longer = module.prefill(q[:, :, :T - 1], k[:, :, :T - 1], v[:, :, :T - 1])[1]
        sizes.add(attention.state_nbytes(longer))
        assert len(sizes) == 1, f"{name}: a 'state' must not grow with the context; bytes seen {sorted(sizes)}"


def test_performer_state_follows_rising_key_scales():
    """Keys whose norms shrink with the position, so that their log scales s_j (largest logit,
    about -|k'|^2 / 2 for a long key) rise from about -100 to about 0: the steps raise the state's
    reference m (S and Z rescaled) and still equal the forward's last rows; float32 steps, where
    e^-100 is 0, stay close to float64's."""
    module = build("performer", {})
    q, k, v = random_qkv(B, H, T, D)
    k = k * torch.linspace(8.0, 1.0, T, dtype=k.dtype)[:, None]
    with torch.no_grad():
        states = {dtype: module.prefill(*(x[:, :, :PROMPT].to(dtype) for x in (q, k, v)))[1]
                  for dtype in (torch.float64, torch.float32)}
        references = []
        for t in range(PROMPT, T):
            o_t, states[torch.float64] = module.step(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1],
                                                     states[torch.float64])
            o32, states[torch.float32] = module.step(*(x[:, :, t:t + 1].float() for x in (q, k, v)),
                                                     states[torch.float32])
            last = module(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], True)[:, :, -1:]
            torch.testing.assert_close(o_t, last, rtol=0, atol=EXACT)
            torch.testing.assert_close(o32.double(), last, rtol=1e-4, atol=1e-5)
            references.append(states[torch.float64]["m"].clone())
    assert all(bool((b >= a).all()) for a, b in zip(references, references[1:]))
    assert bool((references[-1] > references[0]).all())


@pytest.mark.parametrize("name", DECODERS)
def test_float32_steps(name):
    module = build(name, {})
    q, k, v = random_qkv(B, H, PROMPT + 3, D, dtype=torch.float32)
    tolerance = attention.attention_class(name).float32_tolerance
    with torch.no_grad():
        _, state = module.prefill(q[:, :, :PROMPT], k[:, :, :PROMPT], v[:, :, :PROMPT])
        for t in range(PROMPT, PROMPT + 3):
            o_t, state = module.step(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], state)
            assert o_t.dtype == torch.float32 and o_t.shape == (B, H, 1, D)
            exact = module(*(x[:, :, :t + 1].double() for x in (q, k, v)), True)[:, :, -1:]
            torch.testing.assert_close(o_t.double(), exact, **tolerance)


@pytest.mark.parametrize("name", OTHERS)
def test_no_decode_path_raises_naming_the_method(name):
    module = build_example(name, CONTEXT)
    q, k, v = random_qkv(B, H, 3, D)
    with pytest.raises(NotImplementedError, match=rf"'{name}'.*prefill\(\)"):
        module.prefill(q, k, v)
    with pytest.raises(NotImplementedError, match=r"step\(\)"):
        module.step(q[:, :, :1], k[:, :, :1], v[:, :, :1], None)


def test_the_registry_checks_the_decode_metadata():
    def probe(**attrs):
        return type("Probe", (attention.Attention,), {"causal": "exact", **attrs})

    with pytest.raises(ValueError, match="decode = 'recurrent'.*allowed"):
        attention.register("decode_probe_bad")(probe(decode="recurrent"))
    with pytest.raises(ValueError, match="without implementing prefill and step"):
        attention.register("decode_probe_missing")(probe(decode="state"))
    with pytest.raises(ValueError, match="causal = 'leaky'"):
        attention.register("decode_probe_leaky")(probe(decode="state", causal="leaky",
                                                       prefill=lambda *a: None, step=lambda *a: None))
    assert not {"decode_probe_bad", "decode_probe_missing", "decode_probe_leaky"} & set(attention.registered())


def test_kv_cache_grows_geometrically_and_keeps_every_token():
    q, k, v = random_qkv(1, 2, 40, 4)
    cache = KVCache(k[:, :, :3], v[:, :, :3], torch.tensor([[False, True, True]]))
    capacities = {cache.capacity}
    for t in range(3, 40):
        cache.append(k[:, :, t:t + 1], v[:, :, t:t + 1])
        capacities.add(cache.capacity)
    assert sorted(capacities) == [16, 32, 64]  # two growths for 37 appends
    assert torch.equal(cache.keys(), k) and torch.equal(cache.values(5), v[:, :, 5:])
    assert cache.real().tolist() == [[False] + [True] * 39]


# --- model level ----------------------------------------------------------------------------------

VOCAB, BLOCK = 61, 32
MODEL_TOLERANCE = {"rtol": 1e-4, "atol": 2e-5}  # float32: c_attn / c_proj / the LM head on 1 row vs T rows
MODEL_CASES = [
    dict(attention="softmax"),
    dict(attention="softmax", pos_emb="sinusoidal", token_shift=True),
    dict(attention="softmax", pos_emb="cosine_relpe", attention_params={"exclude_self": True, "window": 6}),
    dict(attention="linear", token_shift=True),
    dict(attention="fastmax", attention_params={"p": 1}),
    dict(attention="fastmax", attention_params={"p": 2, "normalization": "max_norm"}, pos_emb="cosine_relpe",
         mlp=False),
    dict(attention="softmax_reference", bias=False, embedding_maxnorm=True, pos_emb="none"),
    dict(attention="longformer", attention_params={"window": 4, "num_global": 2}, pos_emb="sinusoidal"),
    # one layer: BigBird's rows depend on the sequence's length (which blocks are last, hence global,
    # and the random draw for nb blocks), so a second layer's cached keys, computed at shorter
    # lengths, are not those of the whole forward; one layer's last row is (its step)
    dict(attention="bigbird", attention_params={"block_size_sparse": 4, "num_random_blocks": 1, "num_global_blocks": 1},
         n_layer=1),
    dict(attention="bigbird", attention_params={"block_size_sparse": 4, "num_random_blocks": 1}, n_layer=1),
    dict(attention="performer", attention_params={"num_features": 16, "redraw_interval": 0}),
    dict(attention="dense", attention_params={"window": 6, "shift": True}),  # in GPT blocks (no DANet scale)
]


def small_gpt(n_layer=2, **config):
    """A random GPT whose attention matters: sharp scores and a strong output projection."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=BLOCK, vocab_size=VOCAB, n_layer=n_layer, n_head=2, n_embd=16, **config))
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.weight.mul_(8.0)
            block.attn.c_proj.weight.mul_(8.0)
        model.transformer.ln_f.weight.mul_(20.0)
    return model.eval()


@pytest.mark.parametrize("config", MODEL_CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_model_decode_logits_equal_the_whole_forward(config):
    model = small_gpt(**config)
    idx = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, cache = model.prefill(idx[:, :5])
        torch.testing.assert_close(logits, model(idx[:, :5])[0], **MODEL_TOLERANCE)
        for t in range(5, idx.shape[1]):
            step = model.decode_step(idx[:, t:t + 1], cache)
            torch.testing.assert_close(step, model(idx[:, :t + 1])[0][:, -1:], **MODEL_TOLERANCE,
                                       msg=lambda m: f"position {t}: {m}")
    assert cache.length == idx.shape[1]


class _NoDecodePath(attention.attention_class("softmax_reference")):
    """softmax_reference without its decode path, not registered: every exactly causal registered
    attention decodes (tree too, since issue 59), so the fallback is checked on this probe."""

    decode = None
    registry_name = "no_decode_probe"


def test_generate_with_states_equals_recomputation_and_falls_back_once(capsys):
    model = small_gpt(attention="fastmax", pos_emb="sinusoidal")
    idx = torch.randint(0, VOCAB, (2, 4), generator=torch.Generator().manual_seed(2))
    stats = {}
    decoded = model.generate(idx, 40, temperature=0, stats=stats)  # past block_size: sinusoidal positions
    assert stats["mode"] == "decode" and stats["new_tokens"] == 80 and capsys.readouterr().err == ""
    assert torch.equal(decoded[:, :BLOCK], model.generate(idx, BLOCK - 4, temperature=0, recompute=True))
    for block in model.transformer.h:
        block.attn.mechanism = _NoDecodePath()
    for _ in range(2):
        model.generate(idx, 3, temperature=0.8, top_k=5)
    err = capsys.readouterr().err.splitlines()
    assert err == ["generate: attention 'no_decode_probe' has no decode path; recomputing the last 32 tokens at "
                   "every step (no decode state)"]


def small_danet(**config):
    """A random causal DANet (DenseAttention blocks, attention "dense") with weights larger than its
    initialisation, so that every term matters."""
    torch.manual_seed(0)
    base = dict(block_size=BLOCK, vocab_size=VOCAB, n_layer=3, n_head=2, n_embd=16, block="danet", attention="dense")
    model = GPT(ModelConfig(**{**base, **config}))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    return model.eval()


@pytest.mark.parametrize("config", [dict(layer_scheme="LSG", window=4), dict(layer_scheme="G", n_layer=1),
                                    dict(layer_scheme="SL", window=6, n_layer=2, pos_emb="cosine_relpe"),
                                    dict(layer_scheme="L", window=5, n_layer=2, pos_emb="sinusoidal")],
                         ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_danet_decode_logits_equal_the_whole_forward(config):
    """DANet blocks decode with the dense mechanism's state, the input scale a applied as a^3 on
    the attention's output (a global last layer: a of the tokens seen so far)."""
    model = small_danet(**config)
    assert model.decode_unsupported() is None
    idx = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, cache = model.prefill(idx[:, :5])
        torch.testing.assert_close(logits, model(idx[:, :5])[0], **MODEL_TOLERANCE)
        for t in range(5, idx.shape[1]):
            step = model.decode_step(idx[:, t:t + 1], cache)
            torch.testing.assert_close(step, model(idx[:, :t + 1])[0][:, -1:], **MODEL_TOLERANCE,
                                       msg=lambda m: f"position {t}: {m}")


@pytest.mark.parametrize("config,reason", [
    (dict(layer_scheme="GL", window=4), "global layer below the last (layer 0)"),
    (dict(layer_scheme="LS", window=4, pos_emb="cosine_relpe", relpe_local_positions=True), "relpe_local_positions"),
])
def test_danet_without_a_decode_path_generates_by_recomputation(config, reason, capsys):
    model = small_danet(**config)
    assert reason in model.decode_unsupported()
    idx = torch.randint(0, VOCAB, (2, 4), generator=torch.Generator().manual_seed(2))
    stats = {}
    assert torch.equal(model.generate(idx, 6, temperature=0, stats=stats),
                       model.generate(idx, 6, temperature=0, recompute=True))
    assert stats["mode"] == "recompute" and reason in capsys.readouterr().err


def test_bigbird_below_the_last_layer_generates_by_recomputation(capsys):
    """Two BigBird layers: the first one's rows depend on the length (module docstring of
    attention/bigbird.py), so the model has no decode path and generates by recomputation; the
    whole forward and the per-layer decode do differ on such a model past a few blocks."""
    params = {"block_size_sparse": 4, "num_random_blocks": 1}
    model = small_gpt(attention="bigbird", attention_params=params)
    assert "'bigbird' in layer 0 of 2 has no decode path" in model.decode_unsupported()
    idx = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(1))
    stats = {}
    assert torch.equal(model.generate(idx[:, :4], 20, temperature=0, stats=stats),
                       model.generate(idx[:, :4], 20, temperature=0, recompute=True))
    assert stats["mode"] == "recompute" and "rows depend on the sequence's length" in capsys.readouterr().err
    with torch.no_grad():  # what a per-layer decode would give: the states of prefixes, not of the whole
        cache = DecodeCache(2)
        model.transformer.decode(idx[:, :5], cache)
        steps = [model.lm_head(model.transformer.decode(idx[:, t:t + 1], cache)) for t in range(5, 24)]
        assert (steps[-1] - model(idx)[0][:, -1:]).abs().max() > 0.01


def test_generate_stops_at_block_size_with_learned_positions_unless_cropped(capsys):
    model = small_gpt(attention="softmax")
    model.train()
    idx = torch.randint(0, VOCAB, (1, BLOCK - 3), generator=torch.Generator().manual_seed(3))
    assert model.generate(idx, 10).shape == (1, BLOCK + 1)  # the last token predicted at position BLOCK - 1
    assert model.training  # the mode is restored
    assert "stopped at block_size 32" in capsys.readouterr().err
    stats = {}
    assert model.generate(idx, 10, crop=True, stats=stats).shape == (1, BLOCK - 3 + 10)
    assert stats["mode"] == "decode, then recompute"
    with pytest.raises(ValueError, match="more than the model's block_size 32"):
        model.generate(torch.zeros(1, BLOCK + 1, dtype=torch.long), 1)


def test_seeded_generation_repeats():
    model = small_gpt(attention="linear")
    idx = torch.zeros(3, 2, dtype=torch.long)
    runs = [model.generate(idx, 12, temperature=1.0, top_k=10, generator=torch.Generator().manual_seed(5))
            for _ in range(2)]
    assert torch.equal(*runs) and len(set(map(tuple, runs[0].tolist()))) > 1


# --- the outside check: transformers' own KV cache --------------------------------------------------

def test_tiny_hf_gpt2_per_step_logits_equal_transformers_kv_cache():
    path = os.environ.get("GPT2_TINY_HF_DIR", "")
    if not os.path.exists(os.path.join(path, "config.json")):
        pytest.skip(f"no tiny Hugging Face GPT-2 at {path!r} (GPT2_TINY_HF_DIR)")
    from transformers import GPT2LMHeadModel

    ours = eval_ppl.load_model(dict(eval_ppl.DEFAULTS, init_from=path))
    theirs = GPT2LMHeadModel.from_pretrained(path).eval()
    # the past keys and values go in and out as `past_key_values`, renamed `cache` in transformers 5.x
    past_name = "cache" if "cache" in inspect.signature(theirs.forward).parameters else "past_key_values"
    prompt = torch.tensor([[464, 2068, 7586, 21831, 18045, 625, 262]])
    steps = 12
    with torch.no_grad():
        logits, cache = ours.prefill(prompt)
        out = theirs(prompt, use_cache=True)
        torch.testing.assert_close(logits, out.logits, rtol=0, atol=1e-5)
        token = logits[:, -1:].argmax(-1)
        for _ in range(steps):  # a greedy continuation, one token per call on both sides
            mine = ours.decode_step(token, cache)
            out = theirs(token, use_cache=True, **{past_name: getattr(out, past_name)})
            torch.testing.assert_close(mine, out.logits, rtol=0, atol=1e-5)
            token = mine[:, -1:].argmax(-1)
    assert cache.length == prompt.shape[1] + steps
