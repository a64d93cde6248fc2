"""Tests of the DenseAttention operation (attention/dense/): regimes against the reference."""
import itertools

import pytest
import torch

import attention
import attention.dense  # noqa: F401  (registers "dense")
from attention.dense import (DenseAttention, allowed_pairs, choose_regime, dense_forward, reference_forward,
                             regime_cost, window_ids)

WINDOWS = [(0, False), (8, False), (8, True), (6, True), (5, False), (64, True)]  # (window, shift)


def _qkv(B=2, H=2, T=37, D=8, Dv=None, seed=0, dtype=torch.float64, grad=False):
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, H, T, D), (B, H, T, D), (B, H, T, Dv or D)]
    return [torch.randn(*s, generator=g, dtype=dtype).requires_grad_(grad) for s in shapes]


def _padding(B, T, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, T, generator=g) > 0.3
    mask[0, :3] = False  # left padding
    mask[-1, -4:] = False  # right padding
    return mask


# ---------------------------------------------------------------------------------------------
# reference: the definition


def test_reference_is_the_sum_over_allowed_keys():
    q, k, v = _qkv(B=1, H=1, T=9, D=3, Dv=2)
    mask = torch.tensor([[True] * 7 + [False] * 2])
    window, shift = 4, True  # windows [0, 2), [2, 6), [6, 10)
    out = reference_forward(q, k, v, True, mask, window, shift)
    start = {0: 0, 1: 0, 2: 2, 3: 2, 4: 2, 5: 2, 6: 6, 7: 6, 8: 6}
    for i in range(9):
        expected = torch.zeros(2, dtype=torch.float64)
        if mask[0, i]:
            for j in range(start[i], i + 1):  # same shifted window, causal
                if mask[0, j]:
                    expected += (q[0, 0, i] @ k[0, 0, j]) * v[0, 0, j]
        torch.testing.assert_close(out[0, 0, i], expected, rtol=1e-12, atol=1e-12)


def test_window_partition():
    assert window_ids(10, 4).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    # shifted by w / 2: [0, 2), [2, 6), [6, 10)
    assert window_ids(10, 4, shift=True).tolist() == [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert window_ids(5, 0).tolist() == [0] * 5
    pairs = allowed_pairs(6, causal=False, window=4, shift=True)
    assert pairs[1].tolist() == [True, True, False, False, False, False]
    assert pairs[2].tolist() == [False, False, True, True, True, True]


# ---------------------------------------------------------------------------------------------
# fast regimes against the reference (float64)


# STEP_ELEMENTS of the causal linear regime: the default (one step at these sizes), one chunk per
# step, and a few chunks per step (the state carried between steps is what these check)
STEPS = [1 << 20, 1, 512]


@pytest.mark.parametrize("regime", ["linear", "quadratic", "auto"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window,shift", WINDOWS)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("step_elements", STEPS)
def test_regimes_match_reference(regime, causal, window, shift, padded, step_elements, monkeypatch):
    monkeypatch.setattr("attention.dense.compute.STEP_ELEMENTS", step_elements)
    q, k, v = _qkv(T=37, Dv=5)  # T = 37: not a multiple of the chunk (8) or of any window
    mask = _padding(2, 37) if padded else None
    expected = reference_forward(q, k, v, causal, mask, window, shift)
    for chunk_size in (1, 8, 64):
        out = dense_forward(q, k, v, causal, mask, regime, window, shift, chunk_size)
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("causal,window,shift,padded", [
    (True, 0, False, True), (False, 0, False, True), (True, 6, True, False), (False, 8, True, True),
    (True, 5, False, True)])
@pytest.mark.parametrize("step_elements", STEPS)
def test_gradients_match_reference(causal, window, shift, padded, step_elements, monkeypatch):
    monkeypatch.setattr("attention.dense.compute.STEP_ELEMENTS", step_elements)
    mask = _padding(2, 23) if padded else None
    grads = {}
    for name in ("reference", "linear", "quadratic"):
        q, k, v = _qkv(T=23, grad=True, seed=3)
        if name == "reference":
            out = reference_forward(q, k, v, causal, mask, window, shift)
        else:
            out = dense_forward(q, k, v, causal, mask, name, window, shift, chunk_size=4)
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(9), dtype=out.dtype)
        (out * weight).sum().backward()
        grads[name] = [t.grad for t in (q, k, v)]
    for name in ("linear", "quadratic"):
        for got, want in zip(grads[name], grads["reference"]):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("regime,causal,window,shift", [
    ("linear", True, 0, False), ("linear", False, 4, True), ("quadratic", True, 6, True)])
@pytest.mark.parametrize("step_elements", [1 << 20, 1])
def test_gradcheck(regime, causal, window, shift, step_elements, monkeypatch):
    monkeypatch.setattr("attention.dense.compute.STEP_ELEMENTS", step_elements)
    q, k, v = _qkv(B=1, H=2, T=11, D=3, grad=True, seed=5)
    mask = torch.tensor([[True] * 9 + [False] * 2])

    def f(q, k, v):
        return dense_forward(q, k, v, causal, mask, regime, window, shift, chunk_size=3)

    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-8)


def test_float32_regimes_agree():
    q, k, v = _qkv(B=1, H=2, T=300, D=16, dtype=torch.float32, seed=2)
    lin = dense_forward(q, k, v, True, None, "linear", chunk_size=32)
    quad = dense_forward(q, k, v, True, None, "quadratic")
    torch.testing.assert_close(lin, quad, rtol=1e-4, atol=1e-4)
    assert lin.dtype == torch.float32


def test_half_precision_accumulates_in_float32():
    q, k, v = _qkv(B=1, H=1, T=512, D=16, dtype=torch.bfloat16, seed=4)
    out = DenseAttention(regime="linear")(q, k, v, causal=False)
    assert out.dtype == torch.bfloat16
    exact = reference_forward(q.double(), k.double(), v.double(), False)
    in_float32 = reference_forward(q.float(), k.float(), v.float(), False).to(torch.bfloat16)
    torch.testing.assert_close(out, in_float32, rtol=1e-2, atol=0.0)
    # summing 512 products in bfloat16 itself would be far off; float32 sums round only at the end
    rel = ((out.double() - exact).abs() / exact.abs().clamp_min(1.0)).max()
    assert rel < 1e-2


def test_padding_leaves_real_tokens_unchanged_and_zeroes_padded_rows():
    q, k, v = _qkv(B=1, T=20, seed=6)
    padded = [torch.cat([t, torch.randn(1, 2, 7, t.shape[-1], dtype=t.dtype)], 2) for t in (q, k, v)]
    mask = torch.tensor([[True] * 20 + [False] * 7])
    for regime in ("linear", "quadratic"):
        short = dense_forward(q, k, v, False, None, regime)
        long = dense_forward(*padded, False, mask, regime)
        torch.testing.assert_close(long[:, :, :20], short, rtol=1e-12, atol=1e-12)
        assert torch.all(long[:, :, 20:] == 0)


def test_no_normalizer_and_short_sequences():
    q, k, v = _qkv(B=1, H=1, T=1, D=4)
    for regime, window, shift in itertools.product(("linear", "quadratic"), (0, 8), (False, True)):
        if shift and not window:
            continue
        out = dense_forward(q, k, v, True, None, regime, window, shift)
        torch.testing.assert_close(out, (q * k).sum(-1, keepdim=True) * v)  # one key: (q.k) v, unnormalized


# ---------------------------------------------------------------------------------------------
# auto regime, module, registry, errors


def test_auto_picks_fewer_multiply_adds():
    # not causal: linear iff D <= L (the authors' rule)
    assert choose_regime("auto", T=64, D=64, causal=False) == "linear"
    assert choose_regime("auto", T=63, D=64, causal=False) == "quadratic"
    assert choose_regime("auto", T=4096, D=64, causal=False, window=32) == "quadratic"  # windows of 32 < D
    assert regime_cost("linear", 1000, 10, False, 64) == 2 * 1000 * 100
    for T, D, chunk in [(128, 64, 64), (4096, 64, 64), (300, 128, 32), (10, 4, 64)]:
        chosen = choose_regime("auto", T, D, True, chunk_size=chunk)
        costs = {r: regime_cost(r, T, D, True, chunk) for r in ("linear", "quadratic")}
        assert costs[chosen] == min(costs.values())
    assert choose_regime("auto", 4096, 64, True) == "linear"
    assert DenseAttention(regime="quadratic").regime_for(10 ** 6, 8, causal=True) == "quadratic"


def test_module_registry_and_reference_implementation():
    assert "dense" in attention.registered()
    assert set(attention.accepted_params("dense")) == {"regime", "window", "shift", "chunk_size", "implementation"}
    fast = attention.build("dense", {"layer_idx": 3, "block_size": 16}, window=6, shift=True)
    ref = attention.build("dense", window=6, shift=True, implementation="reference")
    q, k, v = _qkv(T=17)
    mask = _padding(2, 17)
    torch.testing.assert_close(fast(q, k, v, causal=True, attention_mask=mask),
                               ref(q, k, v, causal=True, attention_mask=mask), rtol=1e-10, atol=1e-10)
    assert "regime=auto" in repr(fast)


@pytest.mark.parametrize("params,message", [
    (dict(regime="cubic"), "regime 'cubic' unknown; allowed: auto, linear, quadratic"),
    (dict(window=-2), r"window must be an integer >= 0 .*got window=-2"),
    (dict(window=2.5), r"window must be an integer >= 0"),
    (dict(window=5, shift=True), r"shift=True needs an even window .*got window=5"),
    (dict(shift=True), r"shift=True needs a window > 0"),
    (dict(chunk_size=0), r"chunk_size must be an integer >= 1"),
    (dict(implementation="cuda"), r"implementation 'cuda' unknown; allowed: fast, reference"),
])
def test_bad_parameters_are_clear_errors(params, message):
    with pytest.raises(ValueError, match=message):
        DenseAttention(**params)


def test_bad_inputs_are_clear_errors():
    q, k, v = _qkv(T=8)
    with pytest.raises(ValueError, match="as many queries as keys"):
        DenseAttention()(q[:, :, :4], k, v, causal=False)
    with pytest.raises(ValueError, match="attention_mask must be a bool tensor"):
        DenseAttention()(q, k, v, causal=False, attention_mask=torch.ones(2, 8))
