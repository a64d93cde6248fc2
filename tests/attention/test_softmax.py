"""softmax / softmax_reference: the pair rules (causal, window, exclude_self, padding), empty rows,
NaN propagation, and agreement of the fused path with the reference."""
import functools
import itertools
import math

import pytest
import torch

import attention
from attention.testing import padding_mask, random_qkv

T = 7


qkv = functools.partial(random_qkv, B=2, H=3, T=T, D=8)


def padding(kind):
    """right: batch 0's last 2 positions, batch 1's last 1; left: batch 1's first 2 (under
    causal attention its first rows have no real key)."""
    return padding_mask(kind, 2, T, pads={"right": (2, 1), "left": (0, 2)}.get(kind))


def allowed(i, j, causal, window, exclude_self):
    """The rule of the softmax module docstring, written out for one (query, key) pair."""
    if causal and j > i:
        return False
    if window and causal and not (i - window < j):
        return False
    if window and not causal and not abs(i - j) < window:
        return False
    return not (exclude_self and i == j)


def by_hand(q, k, v, causal, window, exclude_self, mask):
    """One query at a time: softmax over the explicitly listed allowed keys (Vaswani et al. Eq. 1)."""
    B, H, n, D = q.shape
    out = torch.zeros_like(v)
    for b, h, i in itertools.product(range(B), range(H), range(n)):
        keys = [j for j in range(n) if allowed(i, j, causal, window, exclude_self)
                and (mask is None or mask[b, j])]
        if keys:
            s = torch.stack([q[b, h, i] @ k[b, h, j] for j in keys]) / math.sqrt(D)
            out[b, h, i] = torch.softmax(s, 0) @ v[b, h, keys]
    return out


MODES = list(itertools.product([False, True], [0, 1, 3, T + 2], [False, True], [None, "right", "left"]))


@pytest.mark.parametrize("causal,window,exclude_self,pad", MODES)
def test_fused_matches_reference_float64(causal, window, exclude_self, pad):
    q, k, v = qkv()
    mask = padding(pad)
    kw = dict(exclude_self=exclude_self, window=window)
    fast = attention.build("softmax", **kw)(q, k, v, causal=causal, attention_mask=mask)
    ref = attention.build("softmax_reference", **kw)(q, k, v, causal=causal, attention_mask=mask)
    assert fast.shape == q.shape and fast.dtype == torch.float64
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal,window,exclude_self,pad",
                         [m for m in MODES if m[1] in (0, 3)])
def test_reference_matches_hand_computation(causal, window, exclude_self, pad):
    q, k, v = qkv(B=2, H=1, D=4)
    mask = padding(pad)
    out = attention.build("softmax_reference", exclude_self=exclude_self, window=window)(
        q, k, v, causal=causal, attention_mask=mask)
    torch.testing.assert_close(out, by_hand(q, k, v, causal, window, exclude_self, mask), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["softmax", "softmax_reference"])
def test_window_and_exclude_self_special_cases(name):
    q, k, v = qkv()
    # window 1: every query sees only itself, so the output is v (causal or not)
    for causal in (False, True):
        torch.testing.assert_close(attention.build(name, window=1)(q, k, v, causal=causal), v)
    # exclude_self causal: query 0 has no key (zero output), query 1 sees only key 0
    out = attention.build(name, exclude_self=True)(q, k, v, causal=True)
    assert torch.all(out[:, :, 0] == 0)
    torch.testing.assert_close(out[:, :, 1], v[:, :, 0])
    # window 2 with exclude_self, causal: query t sees only key t - 1
    out = attention.build(name, exclude_self=True, window=2)(q, k, v, causal=True)
    torch.testing.assert_close(out[:, :, 1:], v[:, :, :-1])
    # window 1 with exclude_self leaves no key at all
    assert torch.all(attention.build(name, exclude_self=True, window=1)(q, k, v, causal=True) == 0)
    # a window at least T long changes nothing
    torch.testing.assert_close(attention.build(name, window=T)(q, k, v, causal=True),
                               attention.build(name)(q, k, v, causal=True))


@pytest.mark.parametrize("name", ["softmax", "softmax_reference"])
def test_only_empty_rows_are_zeroed_nans_propagate(name):
    q, k, v = qkv()
    q[0, 1, 4] = float("nan")  # a query: its own output row
    k[1, 0, 3] = float("nan")  # a key: every row that may attend to it (t >= 4 with exclude_self)
    v[1, 2, 3] = float("nan")  # a value: likewise
    out = attention.build(name, exclude_self=True)(q, k, v, causal=True)
    assert torch.all(out[:, :, 0] == 0)  # the empty row is zero, even in the NaN heads
    assert torch.isnan(out[0, 1, 4]).all()
    assert torch.isnan(out[1, 0, 4:]).all() and torch.isnan(out[1, 2, 4:]).all()
    # a NaN query does not leak into other rows; heads without a NaN input are finite
    assert torch.isfinite(out[0, 1, torch.arange(T) != 4]).all()
    assert torch.isfinite(out[0, [0, 2]]).all() and torch.isfinite(out[1, 1]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["softmax", "softmax_reference"])
def test_dtype_preserved(dtype, name):
    q, k, v = qkv(dtype=dtype)
    for kw in ({}, {"window": 2, "exclude_self": True}):
        out = attention.build(name, **kw)(q, k, v, causal=True, attention_mask=padding("left"))
        assert out.dtype == dtype


@pytest.mark.parametrize("bad", [dict(window=-1), dict(window=1.5), dict(window=True), dict(window="3"),
                                 dict(exclude_self=1), dict(exclude_self="True")])
def test_bad_parameters(bad):
    key = next(iter(bad))
    for name in ("softmax", "softmax_reference"):
        with pytest.raises(ValueError, match=key):
            attention.build(name, **bad)
