"""linear (Katharopoulos et al. 2020): the chunked fast path against the (T, T) reference in
float64, the reference against the paper's formula written per query, causality, padding, dtypes,
gradients, parameter errors, and a few training steps through train.py."""
import functools
import itertools
import os

import pytest
import torch

import attention
from attention.blockwise import elements_written
from attention.kernelized import all_chunks_at_once, kernel_attention, kernel_reference
from attention.linear import elu_features
from attention.testing import padding_mask, random_qkv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T = 13


qkv = functools.partial(random_qkv, B=2, H=3, T=T, D=5, Dv=4)
padding = functools.partial(padding_mask, B=2, T=T)  # DEFAULT_PADS: right (4, 1) last, left (0, 3) first


def by_hand(q, k, v, causal, mask):
    """The paper's V'_i = sum_j phi(q_i)^T phi(k_j) v_j / sum_j phi(q_i)^T phi(k_j) over the
    allowed keys, one query at a time (sections 3.2, 3.3)."""
    B, H, n, _ = q.shape
    out = torch.zeros(B, H, n, v.shape[-1], dtype=v.dtype)
    for b, h, i in itertools.product(range(B), range(H), range(n)):
        keys = [j for j in range(n) if (not causal or j <= i) and (mask is None or mask[b, j])]
        if keys:
            sims = torch.stack([elu_features(q[b, h, i]) @ elu_features(k[b, h, j]) for j in keys])
            out[b, h, i] = (sims[:, None] * v[b, h, keys]).sum(0) / sims.sum()
    return out


@pytest.mark.parametrize("causal,pad,chunk", list(itertools.product([False, True], [None, "right", "left"],
                                                                     [1, 4, 64])))
def test_fast_matches_reference_float64(causal, pad, chunk):
    q, k, v = qkv()
    mask = padding(pad)
    fast = attention.build("linear", chunk_size=chunk)(q, k, v, causal=causal, attention_mask=mask)
    ref = attention.build("linear", implementation="reference")(q, k, v, causal=causal, attention_mask=mask)
    assert fast.shape == v.shape and fast.dtype == torch.float64
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("causal,pad", list(itertools.product([False, True], [None, "right", "left"])))
def test_reference_matches_the_formula_per_query(causal, pad):
    q, k, v = qkv(H=2)
    mask = padding(pad)
    ref = attention.build("linear", implementation="reference")(q, k, v, causal=causal, attention_mask=mask)
    torch.testing.assert_close(ref, by_hand(q, k, v, causal, mask), rtol=1e-12, atol=1e-13)


def test_causal_limits_and_no_dependence_on_the_future():
    q, k, v = qkv()
    layer = attention.build("linear", chunk_size=4)
    out = layer(q, k, v, causal=True)
    torch.testing.assert_close(out[:, :, 0], v[:, :, 0])  # the first query sees only itself
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    for t in (q2, k2, v2):
        t[:, :, 7:] = 100 * torch.randn_like(t[:, :, 7:])
    torch.testing.assert_close(layer(q2, k2, v2, causal=True)[:, :, :7], out[:, :, :7], rtol=1e-13, atol=1e-13)
    # the normaliser: constant values come out unchanged, causal or not
    ones = torch.ones_like(v)
    for causal in (False, True):
        torch.testing.assert_close(layer(q, k, ones, causal=causal), ones)


@pytest.mark.parametrize("causal", [False, True])
def test_padded_positions_never_matter(causal):
    q, k, v = qkv()
    mask = padding("right")
    out = attention.build("linear", chunk_size=4)(q, k, v, causal=causal, attention_mask=mask)
    k2, v2 = k.clone(), v.clone()
    pad = ~mask[:, None, :, None]
    k2, v2 = k2.masked_fill(pad, 50.0), v2.masked_fill(pad, -1e6)
    out2 = attention.build("linear", chunk_size=4)(q, k2, v2, causal=causal, attention_mask=mask)
    real = mask[:, None, :, None].expand_as(out)
    torch.testing.assert_close(out2[real], out[real], rtol=1e-12, atol=1e-12)
    # a row whose allowed keys are all padding outputs zeros (left padding, causal)
    if causal:
        left = attention.build("linear", chunk_size=2)(q, k, v, causal=True, attention_mask=padding("left"))
        assert torch.all(left[1, :, :3] == 0) and torch.all(left[1, :, 3:] != 0)


def test_kernel_attention_key_scales_cancel():
    """The log-scale bookkeeping Performer relies on: key features exp(logit - s_j) with scales
    s_j = the key's largest logit, far apart (std 40), give the ratio of the features exp(logit)."""
    g = torch.Generator().manual_seed(3)
    B, H, n, R = 2, 2, 11, 6
    qf = torch.rand(B, H, n, R, generator=g, dtype=torch.float64)
    logits = torch.randn(B, H, n, R, generator=g, dtype=torch.float64) * 40
    v = torch.randn(B, H, n, 3, generator=g, dtype=torch.float64)
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[1, 4] = False
    mask[0, :2] = False

    def key_features(x):
        shift = x.amax(-1)
        return torch.exp(x - shift[..., None]), shift

    for causal in (False, True):
        ref = kernel_reference(qf, torch.exp(logits - logits.amax()), v, causal, mask)
        for chunk in (1, 3, 16):
            out = kernel_attention(qf, logits, v, causal, lambda x: x, key_features, mask, chunk)
            torch.testing.assert_close(out, ref, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("causal,pad,chunk", list(itertools.product([False, True], [None, "left", "holes"], [1, 4, 64])))
def test_all_chunks_at_once_equals_the_sequential_path(causal, pad, chunk):
    """The GPU path (every chunk in one product, prefix sums by cumsum) run here on the CPU: the
    same outputs and gradients as the chunk-by-chunk path, in float64 (T = 13: a partial last chunk)."""
    q, k, v = (t.requires_grad_() for t in qkv())
    mask = None if pad is None else (padding_mask("holes", 2, T, every=3, first=1) if pad == "holes" else padding(pad))
    features = (elu_features, lambda x: (elu_features(x), None))
    results = []
    for path in (all_chunks_at_once, kernel_attention):
        out = path(q, k, v, causal, *features, mask, chunk)
        weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
        results.append((out, torch.autograd.grad((out * weights).sum(), (q, k, v))))
    (out, grads), (expected, expected_grads) = results
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-13)
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12)


def test_all_chunks_at_once_with_log_scales():
    """Performer's key features with log scales: not causal, every key at the largest scale of all
    (the reference's ratio); causal, None (the sequential path keeps its running reference)."""
    g = torch.Generator().manual_seed(5)
    qf = torch.rand(2, 2, 11, 6, generator=g, dtype=torch.float64)
    logits = torch.randn(2, 2, 11, 6, generator=g, dtype=torch.float64) * 40
    v = torch.randn(2, 2, 11, 3, generator=g, dtype=torch.float64)
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[0, :2] = False

    def key_features(x):
        shift = x.amax(-1)
        return torch.exp(x - shift[..., None]), shift

    out = all_chunks_at_once(qf, logits, v, False, lambda x: x, key_features, mask, 4)
    torch.testing.assert_close(out, kernel_reference(qf, torch.exp(logits - logits.amax()), v, False, mask),
                               rtol=1e-11, atol=1e-12)
    assert all_chunks_at_once(qf, logits, v, True, lambda x: x, key_features, mask, 4) is None


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_reference(causal):
    q, k, v = (t.requires_grad_() for t in qkv(T=9))
    mask = padding("left", T=9)
    grads = []
    for impl in ("fast", "reference"):
        out = attention.build("linear", chunk_size=4, implementation=impl)(q, k, v, causal=causal, attention_mask=mask)
        grads.append(torch.autograd.grad((out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum(),
                                         (q, k, v)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_half_inputs_accumulate_in_float32(dtype):
    q, k, v = qkv(T=200, D=16, Dv=16)
    exact = attention.build("linear")(q, k, v, causal=True)
    out = attention.build("linear")(q.to(dtype), k.to(dtype), v.to(dtype), causal=True)
    assert out.dtype == dtype
    tol = {torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}[dtype]
    torch.testing.assert_close(out.double(), exact, rtol=tol, atol=tol)


def test_long_sequence_runs_without_a_T_by_T_matrix():
    # T = 4096 at B * H = 1: a (T, T) float64 matrix would be 128 MB; the chunked path holds (64, 64)
    q, k, v = qkv(B=1, H=1, T=4096, D=8, Dv=8)
    out = attention.build("linear")(q, k, v, causal=True)
    torch.testing.assert_close(out[:, :, :100], attention.build("linear")(q[:, :, :100], k[:, :, :100], v[:, :, :100],
                                                                          causal=True))


@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_backward_work_grow_linearly_in_T(causal):
    """Elements written by the forward and backward at T and 4 T: 4 times as many. (Chunks sliced
    inside the loop made the backward write a (B, H, T, D) gradient per chunk: 12 to 14 times.)"""
    counts = []
    for n in (256, 1024):
        q, k, v = (t.requires_grad_() for t in qkv(B=1, H=1, T=n, D=8, Dv=8))
        module = attention.build("linear", chunk_size=16)
        counts.append(elements_written(lambda: module(q, k, v, causal=causal).sum().backward())[1])
    assert counts[1] <= 4.3 * counts[0]


@pytest.mark.parametrize("bad", [dict(chunk_size=0), dict(chunk_size=2.5), dict(chunk_size=True),
                                 dict(chunk_size="64"), dict(implementation="triton")])
def test_bad_parameters(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        attention.build("linear", **bad)


def test_bad_inputs():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="as many queries as keys"):
        attention.build("linear")(q[:, :, :5], k, v, causal=True)
    with pytest.raises(ValueError, match="attention_mask"):
        attention.build("linear")(q, k, v, causal=False, attention_mask=torch.ones(2, T))
    # not causal, queries and keys may differ in number
    assert attention.build("linear")(q[:, :, :5], k, v, causal=False).shape == (2, 3, 5, 4)


def test_trains_through_train_py(tmp_path, wikitext2_dir):
    import train
    train.main([os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py"), os.path.join(ROOT, "configs", "attention",
                "linear.py"), "--max_iters=5", "--num_threads=1", "--eval_iters=1", f"--out_dir={tmp_path}"])
    assert (tmp_path / "ckpt.pt").exists()
