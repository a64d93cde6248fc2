"""longformer: the pair rule written out by hand, the softmax limit, global tokens, parameter
errors. The blockwise path against the reference (float64, padding, gradients, dtypes, no (T, T)
tensor) is in tests/attention/test_blockwise.py with the other sparse methods."""
import functools
import itertools

import pytest
import torch

import attention
from attention import longformer
from attention.testing import padding_mask, random_qkv

T = 19


_qkv = functools.partial(random_qkv, B=2, H=2, T=T, D=4)
LEFT = padding_mask("left", 2, T, pads=(0, 4))  # batch 1: 4 padding positions first
HOLES = padding_mask("holes", 2, T, every=3, first=1)


def test_pairs_follow_the_rule_written_out():
    real = HOLES
    for causal, window, num_global in itertools.product([False, True], [0, 2, 30], [0, 3]):
        pairs = longformer.allowed_pairs(T, causal, window, num_global, real)
        for b, i, j in itertools.product(range(2), range(T), range(T)):
            expected = (abs(i - j) <= window or i < num_global or j < num_global) and bool(real[b, j])
            expected = expected and (j <= i or not causal)
            assert bool(pairs[b, 0, i, j]) == expected, (causal, window, num_global, b, i, j)


@pytest.mark.parametrize("causal,mask", list(itertools.product([False, True], [None, LEFT, HOLES])))
def test_window_covering_the_sequence_is_softmax(causal, mask):
    q, k, v = _qkv()
    softmax = attention.build("softmax_reference")(q, k, v, causal=causal, attention_mask=mask)
    for window in (T - 1, T, 100):
        for implementation in ("fast", "reference"):
            out = attention.build("longformer", window=window, num_global=0, chunk_size=4,
                                  implementation=implementation)(q, k, v, causal=causal, attention_mask=mask)
            torch.testing.assert_close(out, softmax, rtol=1e-12, atol=1e-12)
    # one key fewer on each side is no longer softmax
    out = attention.build("longformer", window=T - 2, num_global=0)(q, k, v, causal=False)
    assert not torch.allclose(out, attention.build("softmax_reference")(q, k, v, causal=False))


def test_global_tokens_and_a_zero_window():
    """window 0: a token sees itself and the global tokens; a global token sees everything."""
    q, k, v = _qkv(B=1, H=1)
    out = attention.build("longformer", window=0, num_global=2, chunk_size=4)(q, k, v, causal=False)
    full = attention.build("softmax_reference")(q, k, v, causal=False)
    torch.testing.assert_close(out[:, :, :2], full[:, :, :2], rtol=1e-12, atol=1e-12)
    i = 11
    scores = torch.stack([q[0, 0, i] @ k[0, 0, j] for j in (0, 1, i)]) / 2.0  # sqrt(D) = 2
    expected = torch.softmax(scores, 0) @ v[0, 0, [0, 1, i]]
    torch.testing.assert_close(out[0, 0, i], expected, rtol=1e-12, atol=1e-12)
    # causal and window 0 without global tokens: each token sees itself only
    torch.testing.assert_close(attention.build("longformer", window=0, num_global=0)(q, k, v, causal=True), v)


@pytest.mark.parametrize("params,message", [
    (dict(window=-1), "window must be an integer >= 0"), (dict(window=2.5), "window must be an integer"),
    (dict(window=True), "window must be an integer"), (dict(num_global=-2), "num_global must be an integer >= 0"),
    (dict(chunk_size=-1), "chunk_size must be an integer >= 0"),
    (dict(implementation="dense"), "implementation 'dense' unknown; allowed: 'fast', 'reference'")])
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        attention.build("longformer", **params)


def test_registry_defaults():
    assert attention.accepted_params("longformer") == {"window": 256, "num_global": 1, "chunk_size": 0,
                                                       "implementation": "fast"}
    with pytest.raises(ValueError, match="parameter 'window' expects int"):
        attention.check_params("longformer", {"window": "3"})
