import pytest
import torch

import attention


def qkv(B=2, H=3, T=7, D=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g, dtype=dtype) for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_softmax_matches_reference(causal, masked):
    q, k, v = qkv()
    mask = None
    if masked:
        mask = torch.ones(2, 7, dtype=torch.bool)
        mask[0, 5:] = False  # right padding
        mask[1, :2] = False  # left padding
    fast = attention.build("softmax")(q, k, v, causal=causal, key_padding_mask=mask)
    ref = attention.build("softmax_reference")(q, k, v, causal=causal, key_padding_mask=mask)
    assert fast.shape == q.shape and fast.dtype == q.dtype
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-10)


def test_reference_matches_explicit_formula():
    q, k, v = qkv(B=1, H=1, T=4, D=2)
    scores = (q[0, 0] @ k[0, 0].T) / 2 ** 0.5
    scores = scores.masked_fill(torch.ones(4, 4).triu(1).bool(), float("-inf"))
    expected = torch.softmax(scores, -1) @ v[0, 0]
    out = attention.build("softmax_reference")(q, k, v, causal=True)
    torch.testing.assert_close(out[0, 0], expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dtype_preserved(dtype):
    q, k, v = qkv(dtype=dtype)
    for name in ("softmax", "softmax_reference"):
        assert attention.build(name)(q, k, v, causal=True).dtype == dtype


@pytest.mark.parametrize("name", ["softmax", "softmax_reference"])
def test_exclude_self(name):
    q, k, v = qkv()
    module = attention.build(name)
    module.exclude_self = True
    out = module(q, k, v, causal=True)
    assert torch.all(out[:, :, 0] == 0)
    # position 1 may only attend to key 0, so its output is v_0
    torch.testing.assert_close(out[:, :, 1], v[:, :, 0])


def test_unknown_name_lists_registered():
    with pytest.raises(ValueError) as e:
        attention.build("softmx")
    assert "softmax_reference" in str(e.value) and "registered" in str(e.value)


def test_unknown_parameter_lists_accepted():
    with pytest.raises(ValueError, match="unknown parameter"):
        attention.build("softmax", E=0.5)


def test_bad_shapes_raise():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"\(B, H, T, D\)"):
        attention.build("softmax")(q[0], k[0], v[0], causal=True)
    with pytest.raises(ValueError, match="key_padding_mask"):
        attention.build("softmax")(q, k, v, causal=True, key_padding_mask=torch.ones(2, 6, dtype=torch.bool))
