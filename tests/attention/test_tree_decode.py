"""Tree attention's decode path (attention/tree/decode.py, ``TreeAttention.prefill`` / ``step``): the
tree over the cached keys that grows by a leaf per token, and each new query's bud expansion over it
("High Attention Scores and Where to Find Them", sections 1-2.4).

The registry-wide contract (tests/attention/test_decode.py) checks tree's example parameters; here:
every sampler, both normalizations and descent rules, self-exclusion, P and block_size settings
and the three forward implementations, in float64 within 1e-10 of the forward's last row (the step
makes the whole-sequence path's draws, asserted bud by bud against the reference's record); the tree
doubling past its initial capacity; the inner products per step against ceil(l^E); a GPT with tree
attention decoding as it recomputes (float32, stated tolerance). The step's two implementations
(decode.decode_query: "cpu", the compiled kernel's per-query function over the state's node tables,
which modules with implementation "cpu" or "auto" use on a CPU; "torch", PyTorch ops, the others):
equal to each other and to the forward's row for every sampler across tree doublings, with the same
bud counts; the compiled ones skip when the kernel cannot be built (no C++ compiler or ninja).
"""
import math

import pytest
import torch

import attention
from attention.registry import InferenceOnlyError, state_nbytes
from attention.testing import random_qkv
from attention.tree.cpu import load_kernel
from attention.tree.decode import TreeDecodeState, decode_query
from attention.tree.samplers import SAMPLERS
from attention.tree.schedule import initial_width, num_terms
from model import GPT, ModelConfig

B, H, D = 2, 2, 8
EXACT = 1e-10  # float64: the step and the forward make the same draws and differ in rounding only


def build(block_size=16, **params):
    """Tree attention in a model's context (layer 1, so the layer enters the draws), in eval mode."""
    return attention.build("tree", {"layer_idx": 1, "block_size": block_size, "n_head": H, "head_dim": D},
                           **params).eval()


def decode_against_forward(module, T, prompt, capacity=None, seed=0):
    """Prefill ``prompt`` tokens, step to T; every step's output against the last row of the module's
    forward on the prefix. Returns (largest difference, the final state)."""
    q, k, v = random_qkv(B, H, T, D, seed=seed)
    worst = 0.0
    with torch.no_grad():
        out, state = module.prefill(q[:, :, :prompt], k[:, :, :prompt], v[:, :, :prompt], capacity=capacity)
        torch.testing.assert_close(out, module(q[:, :, :prompt], k[:, :, :prompt], v[:, :, :prompt], True),
                                   rtol=0, atol=EXACT)
        for t in range(prompt, T):
            o_t, state = module.step(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], state)
            last = module(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], True)[:, :, -1:]
            assert o_t.shape == (B, H, 1, D) and o_t.dtype == torch.float64
            worst = max(worst, float((o_t - last).abs().max()))
    return worst, state


VARIANTS = [{}, {"E": 0.3, "normalization": "paper"}, {"E": 0.7, "descent": "split", "P": 3},
            {"exclude_self": True}]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()) or "default")
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_step_equals_the_forward_last_row(sampler, variant):
    worst, _ = decode_against_forward(build(sampler=sampler, seed=3, **variant), T=16, prompt=5)
    assert worst <= EXACT, f"{sampler} {variant}: {worst}"


@pytest.mark.parametrize("params", [
    {"implementation": "vectorized", "sampler": "alignment"},
    {"implementation": "reference", "sampler": "favor_plus", "E": 0.6},
    {"sampler": "rff", "feature_redraw": "per_layer"},
    {"sampler": "positive_alignment", "block_size": None},   # P from the prefix length, as forward's
    {"sampler": "edh", "block_size": 4, "E": 0.8},          # decoding past block_size (P stays pinned)
], ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_step_equals_the_forward_last_row_for_other_settings(params):
    params = dict(params)
    worst, _ = decode_against_forward(build(block_size=params.pop("block_size", 16), **params), T=18, prompt=3)
    assert worst <= EXACT, f"{params}: {worst}"


@pytest.mark.parametrize("normalization", ["bud_mean", "paper"])
def test_E1_steps_are_exact_softmax(normalization):
    module = build(E=1.0, sampler="alignment", normalization=normalization)
    exact = attention.build("softmax_reference")
    q, k, v = random_qkv(B, H, 14, D, seed=4)
    with torch.no_grad():
        _, state = module.prefill(q[:, :, :4], k[:, :, :4], v[:, :, :4])
        for t in range(4, 14):
            o_t, state = module.step(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], state)
            torch.testing.assert_close(o_t, exact(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], True)[:, :, -1:],
                                       rtol=0, atol=EXACT)


@pytest.mark.parametrize("params", [{"sampler": "alignment", "E": 0.5}, {"sampler": "favor_plus_relu", "E": 0.4},
                                    {"sampler": "edh", "E": 0.6, "descent": "split", "exclude_self": True}])
def test_step_draws_the_buds_of_the_whole_sequence_path(params):
    """The step's buds (decode_query with return_buds) are the reference's record for the same row,
    bud by bud, and its inner products the reference's for that row: the same draws, not only a
    close output."""
    module = build(block_size=32, seed=7, **params)
    T, prompt = 30, 2
    q, k, v = random_qkv(B, H, T, D, seed=2)
    excl = module.exclude_self
    with torch.no_grad():
        _, state = module.prefill(q[:, :, :prompt], k[:, :, :prompt], v[:, :, :prompt])
        for t in range(prompt, T):
            qf = module._step_features(q[:, :, t:t + 1], t)[:, :, 0] if module.feature_map(D) else None
            kf = module._step_features(k[:, :, t:t + 1], t) if module.feature_map(D) else None
            if not excl:
                state.append(k[:, :, t:t + 1], v[:, :, t:t + 1], kf)
            l = t if excl else t + 1
            _, info = decode_query(state, q[:, :, t].double(), l, t, num_terms(l, module.E),
                                   module.buds_per_round(t + 1), module.sampler, module.normalization,
                                   1 / math.sqrt(D), module.b, module.draw_seed, qf=qf, descent=module.descent,
                                   return_buds=True)
            if excl:
                state.append(k[:, :, t:t + 1], v[:, :, t:t + 1], kf)
            module.reset_stats()
            _, record = module.forward_recorded(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], True, positions=[t])
            assert torch.equal(info["bud_start"], record["bud_start"][:, t, :l]), f"position {t}"
            assert int((info["initial"] + info["splits"]).sum()) * H == module.stats()["alignment_inner_products"]


def test_the_tree_grows_past_its_capacity_and_stays_equal_to_the_whole_sequence_path():
    """Prefill 5 tokens into a tree of 8 leaves and step to 70: four doublings (8 -> 128 leaves), every
    node the sum of its leaves, O(log T) node updates per token, and every step the forward's row."""
    module = build(block_size=64, sampler="alignment", E=0.5)
    worst, state = decode_against_forward(module, T=70, prompt=5, capacity=8)
    assert worst <= EXACT
    assert (state.capacity, state.growths, state.length) == (128, 4, 70)
    # node updates: log2(C) + 1 per appended token, C the capacity when it was appended
    assert state.node_updates == 3 * 4 + 8 * 5 + 16 * 6 + 32 * 7 + 6 * 8
    _, k, v = random_qkv(B, H, 70, D, seed=0)
    for h in range(state.levels):
        width = 1 << h
        level = state.K[:, state.offset(h):state.offset(h) + (state.capacity >> h)]   # (B, C >> h, H, D)
        padded = torch.zeros(B, H, state.capacity, D, dtype=torch.float64)
        padded[:, :, :70] = k
        want = padded.view(B, H, state.capacity >> h, width, D).sum(3).transpose(1, 2)
        torch.testing.assert_close(level, want, rtol=1e-12, atol=1e-12)
        for j in range(state.capacity >> h):
            assert state.count(h, j) == max(0, min(width, 70 - j * width))
    assert state_nbytes(state) == 2 * (2 * 128 - 1) * B * H * D * 8  # key and value sums, float64


@pytest.mark.parametrize("sampler,E", [("edh", 0.5), ("favor_plus", 0.5), ("alignment", 0.3)])
def test_inner_products_per_step_follow_ceil_l_to_the_E(sampler, E):
    """One inner product per head for every bud of the step (the initial buds and every split's
    right child; the left child by Eq. 2): n_terms = ceil(l^E) to n_terms + P - 1 of them per batch
    element and head (the last round's overshoot), or the initial buds when they are more, against
    l for exact attention."""
    module = build(block_size=1024, sampler=sampler, E=E, feature_redraw="per_layer")  # (no projection per position)
    P = module.buds_per_round(1)
    assert P == 2 ** math.floor(E / 2 * 10)
    T = 260
    q, k, v = random_qkv(1, H, T, D, seed=5)
    with torch.no_grad():
        _, state = module.prefill(q[:, :, :1], k[:, :, :1], v[:, :, :1])
        for t in range(1, T):
            module.reset_stats()
            updates = state.node_updates
            module.step(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], state)
            stats, l = module.stats(), t + 1
            n_terms, n0 = num_terms(l, E), -(-l // initial_width(l, P))
            per_head = stats["alignment_inner_products"] // H
            assert stats["queries"] == H and stats["full_attention_inner_products"] == H * l
            assert stats["terms"] == stats["alignment_inner_products"]
            features = stats["alignment_inner_products"] if sampler == "favor_plus" else 0
            assert stats["feature_inner_products"] == features
            if n0 >= n_terms:
                assert per_head == n0 <= P
            else:
                assert n_terms <= per_head <= n_terms + P - 1, (l, per_head, n_terms)
            assert state.node_updates - updates == state.levels  # log2(C) + 1 nodes per new leaf
    assert per_head <= math.ceil(T ** E) + P - 1 < T / 4  # at l = 260: tens of inner products, not 260


def test_state_and_input_errors():
    module = build()
    q, k, v = random_qkv(B, H, 6, D)
    with torch.no_grad():
        with pytest.raises(ValueError, match="does not support attention_mask"):
            module.prefill(q, k, v, torch.ones(B, 6, dtype=torch.bool))
        with pytest.raises(ValueError, match="at least one token"):
            module.prefill(q[:, :, :0], k[:, :, :0], v[:, :, :0])
        _, state = module.prefill(q[:, :, :5], k[:, :, :5], v[:, :, :5])
        with pytest.raises(ValueError, match="TreeDecodeState"):
            module.step(q[:, :, 5:], k[:, :, 5:], v[:, :, 5:], {"k": k})
        with pytest.raises(ValueError, match="do not match the state"):
            module.step(q[:1, :, 5:], k[:1, :, 5:], v[:1, :, 5:], state)
        with pytest.raises(ValueError, match="one token"):
            module.step(q[:, :, 4:], k[:, :, 4:], v[:, :, 4:], state)
        with pytest.raises(ValueError, match="capacity must be"):
            TreeDecodeState(k, v, capacity=0)
        with pytest.raises(ValueError, match="no feature sums.*sampler is 'rff'"):
            build(sampler="rff").step(q[:, :, 5:], k[:, :, 5:], v[:, :, 5:], state)
    with pytest.raises(InferenceOnlyError, match="inference-only"):
        module.step(q[:, :, 5:].requires_grad_(), k[:, :, 5:], v[:, :, 5:], state)


# --- model level ------------------------------------------------------------------------------------

VOCAB, BLOCK = 61, 32
# float32: c_attn / c_proj / the LM head on 1 row against T rows, and the forward's CPU kernel keeps its
# sums in float32 where the step's tree is float64; the same draws (no near-tie on these inputs)
MODEL_TOLERANCE = {"rtol": 1e-4, "atol": 2e-5}


def tree_gpt(**params):
    """A random 2-layer GPT with tree attention and sharp scores (attention matters)."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=BLOCK, vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=16, attention="tree",
                            attention_params=params))
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.weight.mul_(8.0)
            block.attn.c_proj.weight.mul_(8.0)
        model.transformer.ln_f.weight.mul_(20.0)
    return model.eval()


@pytest.mark.parametrize("params", [{"E": 0.5, "sampler": "alignment"},
                                    {"E": 0.4, "sampler": "edh", "exclude_self": True}],
                         ids=["alignment", "edh-exclude_self"])
def test_gpt_decodes_with_tree_as_it_recomputes(params):
    model = tree_gpt(**params)
    assert model.decode_unsupported() is None
    idx = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, cache = model.prefill(idx[:, :5])
        torch.testing.assert_close(logits, model(idx[:, :5])[0], **MODEL_TOLERANCE)
        for t in range(5, idx.shape[1]):
            step = model.decode_step(idx[:, t:t + 1], cache)
            torch.testing.assert_close(step, model(idx[:, :t + 1])[0][:, -1:], **MODEL_TOLERANCE,
                                       msg=lambda m: f"position {t}: {m}")
    stats = {}
    decoded = model.generate(idx[:, :4], 20, temperature=0, stats=stats)
    assert stats["mode"] == "decode"
    assert torch.equal(decoded, model.generate(idx[:, :4], 20, temperature=0, recompute=True))


# --- the compiled step (cpu_kernel.cpp's decode_step) -------------------------------------------------

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def kernel():
    """The compiled CPU kernel, or a skip when it cannot be built here (no C++ compiler or ninja)."""
    try:
        return load_kernel()
    except Exception as exc:  # noqa: BLE001  (torch.utils.cpp_extension raises several kinds)
        pytest.skip(f"the CPU kernel cannot be built here ({type(exc).__name__}: {str(exc)[:200]})")


COMPILED_VARIANTS = [{}, {"exclude_self": True}, {"E": 0.7, "descent": "split", "P": 3, "normalization": "paper"}]


@pytest.mark.parametrize("variant", COMPILED_VARIANTS,
                         ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()) or "default")
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_compiled_step_equals_the_torch_step_and_the_forward_row(kernel, sampler, variant):
    """A module with implementation "cpu" steps with the kernel, one with "vectorized" with PyTorch
    ops: every step of both equals the other and the whole-sequence path's last row within 1e-10
    (float64), through three doublings of the tree (8 -> 64 leaves), and both count the same inner
    products and buds (the same draws)."""
    compiled = build(sampler=sampler, seed=5, implementation="cpu", **variant)
    plain = build(sampler=sampler, seed=5, implementation="vectorized", **variant)
    whole = build(sampler=sampler, seed=5, implementation="cpu", **variant)
    assert (compiled.decode_implementation(CPU), plain.decode_implementation(CPU)) == ("cpu", "torch")
    T, prompt = 40, 5
    q, k, v = random_qkv(B, H, T, D, seed=6)
    with torch.no_grad():
        _, s_c = compiled.prefill(q[:, :, :prompt], k[:, :, :prompt], v[:, :, :prompt], capacity=8)
        _, s_p = plain.prefill(q[:, :, :prompt], k[:, :, :prompt], v[:, :, :prompt], capacity=8)
        compiled.reset_stats()
        plain.reset_stats()
        for t in range(prompt, T):
            step = [q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1]]
            o_c, s_c = compiled.step(*step, s_c)
            o_p, s_p = plain.step(*step, s_p)
            last = whole(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], True)[:, :, -1:]
            assert o_c.dtype == torch.float64
            torch.testing.assert_close(o_c, o_p, rtol=0, atol=EXACT, msg=lambda m: f"position {t}: {m}")
            torch.testing.assert_close(o_c, last, rtol=0, atol=EXACT, msg=lambda m: f"position {t}: {m}")
    assert (s_c.capacity, s_c.growths) == (64, 3)
    assert compiled.stats() == plain.stats()


@pytest.mark.parametrize("params", [{"sampler": "alignment", "E": 0.5}, {"sampler": "edh", "E": 0.6},
                                    {"sampler": "favor_plus_relu", "E": 0.4, "descent": "split"},
                                    {"sampler": "uniform", "E": 0.5, "normalization": "paper"}],
                         ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_compiled_decode_query_makes_the_torch_draws(kernel, params):
    """decode_query's two implementations on the same state: equal outputs (1e-10) and, per batch
    element, equal numbers of initial buds, splits and final buds, at every length of a sequence of
    300 keys (P = 4 from block_size 1024, up to 18 buds per query, several sampled rounds) in a tree
    that doubles from 16 to 512 leaves; values of another head dim (Dv = 12, D = 8)."""
    module = build(block_size=1024, seed=9, feature_redraw="per_layer", **params)
    T, Bn = 300, 3
    q, k, v = random_qkv(Bn, H, T, D, Dv=12, seed=8)
    fmap = module.feature_map(D)
    kf = None if fmap is None else fmap(k.double())
    qf = None if fmap is None else fmap(q.double())
    state = TreeDecodeState(k[:, :, :1], v[:, :, :1], None if kf is None else kf[:, :, :1])
    for t in range(1, T):
        state.append(k[:, :, t:t + 1], v[:, :, t:t + 1], None if kf is None else kf[:, :, t:t + 1])
        l = t + 1
        args = (state, q[:, :, t].double(), l, t, num_terms(l, module.E), module.buds_per_round(l), module.sampler,
                module.normalization, 1 / math.sqrt(D), module.b, module.draw_seed)
        extra = {"qf": None if qf is None else qf[:, :, t], "descent": module.descent}
        out_c, info_c = decode_query(*args, implementation="cpu", **extra)
        out_t, info_t = decode_query(*args, implementation="torch", **extra)
        torch.testing.assert_close(out_c, out_t, rtol=0, atol=EXACT, msg=lambda m: f"l={l}: {m}")
        for key in ("initial", "splits", "terms"):
            assert torch.equal(info_c[key], info_t[key]), (l, key, info_c[key], info_t[key])
    assert state.capacity == 512 and state.growths == 5


@pytest.mark.parametrize("sampler", ["edh", "alignment", "favor_plus"])
def test_compiled_step_with_float32_inputs(kernel, sampler):
    """float32 inputs: the state and both step implementations compute in float64, so the compiled
    and the PyTorch step agree to 1e-10 before the cast to float32 (within one float32 rounding
    after it); the forward's row comes from the CPU kernel's float32 path (float32 key / value sums,
    inner products and value sum, cpu.py), so a step and that row agree to the kernel's float32
    precision (rtol 1e-4, atol 1e-5, as tests/attention/test_tree.py's float32 check), with the same
    draws on these inputs (no near-tie)."""
    compiled = build(sampler=sampler, seed=2, implementation="cpu")
    plain = build(sampler=sampler, seed=2, implementation="vectorized")
    whole = build(sampler=sampler, seed=2, implementation="cpu")
    T, prompt = 40, 6
    q, k, v = random_qkv(B, H, T, D, seed=11, dtype=torch.float32)
    with torch.no_grad():
        _, s_c = compiled.prefill(q[:, :, :prompt], k[:, :, :prompt], v[:, :, :prompt], capacity=8)
        _, s_p = plain.prefill(q[:, :, :prompt], k[:, :, :prompt], v[:, :, :prompt], capacity=8)
        compiled.reset_stats()
        plain.reset_stats()
        for t in range(prompt, T):
            step = [q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1]]
            o_c, s_c = compiled.step(*step, s_c)
            o_p, s_p = plain.step(*step, s_p)
            assert o_c.dtype == torch.float32 and s_c.K.dtype == torch.float64
            torch.testing.assert_close(o_c, o_p, rtol=2.0 ** -23, atol=EXACT)
            last = whole(q[:, :, :t + 1], k[:, :, :t + 1], v[:, :, :t + 1], True)[:, :, -1:]
            assert last.dtype == torch.float32
            torch.testing.assert_close(o_c, last, rtol=1e-4, atol=1e-5, msg=lambda m: f"position {t}: {m}")
    assert compiled.stats() == plain.stats()


def test_decode_implementation_follows_the_forward_and_falls_back(monkeypatch):
    """"cpu" and "auto" on a CPU step with the kernel; "vectorized", "reference" and other devices
    with PyTorch ops; "auto" falls back to PyTorch ops where the kernel cannot be built (no test of
    the kernel itself: runs without a compiler)."""
    import attention.tree as tree_pkg
    assert build(implementation="vectorized").decode_implementation(CPU) == "torch"
    assert build(implementation="reference").decode_implementation(CPU) == "torch"
    assert build().decode_implementation(torch.device("meta")) == "torch"
    assert build(implementation="cpu").decode_implementation(CPU) == "cpu"
    monkeypatch.setattr(tree_pkg, "_KERNEL_STATE", {"ok": False})
    assert build().decode_implementation(CPU) == "torch"
    monkeypatch.setattr(tree_pkg, "_KERNEL_STATE", {"ok": True})
    assert build().decode_implementation(CPU) == "cpu"
    q, k, v = random_qkv(B, H, 6, D)
    state = TreeDecodeState(k, v)
    args = (state, q[:, :, 5], 6, 5, 3, 2, "edh", "bud_mean", 0.3, 0.99, 0)
    with pytest.raises(ValueError, match="implementation 'gpu' unknown"):
        decode_query(*args, implementation="gpu")
    with pytest.raises(ValueError, match="return_buds needs implementation='torch'"):
        decode_query(*args, implementation="cpu", return_buds=True)


def test_compiled_decode_step_rejects_bad_tables(kernel):
    q, k, v = random_qkv(B, H, 6, D)
    state = TreeDecodeState(k, v, capacity=8)
    empty = torch.empty(0, dtype=torch.float64)
    q5 = q[:, :, 5].contiguous()
    args = (empty, empty, 6, 5, 3, 2, 1, True, True, 0.3, 0.99, 0)
    with pytest.raises(RuntimeError, match="expected 2C - 1"):
        kernel.decode_step(q5, state.K[:, :14].contiguous(), state.V[:, :14].contiguous(), *args)
    with pytest.raises(RuntimeError, match="does not match q"):
        kernel.decode_step(q5[:1], state.K, state.V, *args)
    with pytest.raises(RuntimeError, match="share a dtype"):
        kernel.decode_step(q5.float(), state.K, state.V, *args)
    with pytest.raises(RuntimeError, match=r"l=9 outside \[1, C=8\]"):
        kernel.decode_step(q5, state.K, state.V, empty, empty, 9, 5, 3, 2, 1, True, True, 0.3, 0.99, 0)
    with pytest.raises(RuntimeError, match="n_terms=7 outside"):
        kernel.decode_step(q5, state.K, state.V, empty, empty, 6, 5, 7, 2, 1, True, True, 0.3, 0.99, 0)
    with pytest.raises(RuntimeError, match="feature samplers need"):
        kernel.decode_step(q5, state.K, state.V, empty, empty, 6, 5, 3, 2, 3, True, True, 0.3, 0.99, 0)
