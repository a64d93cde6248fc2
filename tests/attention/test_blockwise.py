"""attention/blockwise.py and what the four sparse methods (longformer, bigbird, reformer,
informer) share: the explicit masked softmax, attend / attend_rows / block_sparse against it,
and for every method its fast path against its (T, T) reference in float64 (causal or not,
padding, parameter grids that exercise several blocks and lengths no block divides), gradients,
half inputs, tiny and fully padded inputs, no (T, T) tensor, and input errors. The methods'
own rules and limits are in tests/attention/test_<method>.py."""
import functools
import itertools
import math

import pytest
import torch

import attention
from attention import blockwise
from attention.registry import allowed_keys
from attention.testing import padding_mask, random_qkv

T = 23


_qkv = functools.partial(random_qkv, B=2, H=2, T=T, D=4)


def _mask(kind, B=2, T=T):
    """None, right padding (batch 0: its last 7 positions), left padding (batch 1: its first 5,
    causal rows without a real key) or holes (every fourth position from 2)."""
    return padding_mask(kind, B, T, pads={"right": (7,), "left": (0, 5)}.get(kind), every=4, first=2)


PADDING = [None, "right", "left", "holes"]

# parameters that exercise several blocks / chunks / groups at T = 23, lengths no block divides,
# and sets that overlap or cover everything
GRIDS = {
    "longformer": [dict(window=0, num_global=0, chunk_size=4), dict(window=1, num_global=0, chunk_size=3),
                   dict(window=3, num_global=2, chunk_size=4), dict(window=5, num_global=1, chunk_size=2),
                   dict(window=4, num_global=7, chunk_size=5), dict(window=8, num_global=2),
                   dict(window=40, num_global=3, chunk_size=6), dict(window=6, num_global=25, chunk_size=4)],
    "bigbird": [dict(block_size_sparse=3),
                dict(block_size_sparse=1, num_random_blocks=3, num_window_blocks=1, num_global_blocks=0),
                dict(block_size_sparse=2, num_random_blocks=1, num_window_blocks=5, num_global_blocks=1),
                dict(block_size_sparse=4, num_random_blocks=2, num_global_blocks=3),
                dict(block_size_sparse=5, num_random_blocks=0, num_window_blocks=1, seed=1),
                dict(block_size_sparse=3, num_random_blocks=9, seed=2), dict(block_size_sparse=23),
                dict(block_size_sparse=30, num_random_blocks=1, num_window_blocks=1, num_global_blocks=0)],
    "reformer": [dict(n_hashes=1, bucket_size=4), dict(n_hashes=2, bucket_size=3),
                 dict(n_hashes=3, bucket_size=2, chunk_size=3), dict(n_hashes=4, bucket_size=5, chunk_size=7),
                 dict(n_hashes=2, bucket_size=8, chunk_size=1), dict(n_hashes=3, bucket_size=1, chunk_size=2, seed=5),
                 dict(n_hashes=2, bucket_size=30, chunk_size=4), dict(n_hashes=1, bucket_size=2, chunk_size=23)],
    "informer": [dict(factor=0.5), dict(factor=1.0, seed=1), dict(factor=2.0, seed=2), dict(factor=50.0)],
}
CASES = [(name, params) for name, grid in GRIDS.items() for params in grid]
CASE_IDS = [f"{name}{i}" for name, grid in GRIDS.items() for i in range(len(grid))]


def _both(name, params, q, k, v, causal, mask):
    """(fast, reference) outputs of a method."""
    return [attention.build(name, implementation=implementation, **params)(q, k, v, causal=causal, attention_mask=mask)
            for implementation in ("fast", "reference")]


# ---------------------------------------------------------------------------------------------
# the shared pieces


@pytest.mark.parametrize("causal,window,pad", list(itertools.product([False, True], [0, 3], PADDING)))
def test_explicit_attention_is_softmax_reference(causal, window, pad):
    q, k, v = _qkv()
    mask = _mask(pad)
    allowed = allowed_keys(T, causal, mask, window=window)
    allowed = torch.ones(T, T, dtype=torch.bool) if allowed is None else allowed
    expected = attention.build("softmax_reference", window=window)(q, k, v, causal=causal, attention_mask=mask)
    torch.testing.assert_close(blockwise.explicit_attention(q, k, v, allowed), expected, rtol=1e-12, atol=1e-12)


def test_empty_rows_are_zero_with_finite_gradients():
    q, k, v = (x.requires_grad_() for x in _qkv())
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    allowed[4] = False  # a row without keys
    out = blockwise.explicit_attention(q, k, v, allowed)
    rows, lse = blockwise.attend(q, k, v, allowed, with_lse=True)
    torch.testing.assert_close(rows, out, rtol=1e-12, atol=1e-12)
    assert (out[:, :, 4] == 0).all() and (lse[:, :, 4] == float("-inf")).all()
    scores = q @ k.transpose(-1, -2) / 2.0
    torch.testing.assert_close(lse[:, :, 5], torch.logsumexp(scores[:, :, 5, :6], -1))
    (out.sum() + rows.sum() + lse[:, :, 5:].sum()).backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))


def test_attend_with_a_bias_and_attend_rows():
    q, k, v = _qkv()
    bias = torch.rand(T, T, dtype=torch.float64)
    out = blockwise.attend(q, k, v, torch.ones(T, T, dtype=torch.bool), bias)
    expected = torch.softmax(q @ k.transpose(-1, -2) / 2.0 - bias, -1) @ v
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    rows = torch.tensor([0, 7, 22, 3])
    real = _mask("left")
    expected = attention.build("softmax_reference")(q, k, v, causal=True, attention_mask=real)[:, :, rows]
    torch.testing.assert_close(blockwise.attend_rows(q[:, :, rows], rows, k, v, True, real), expected)


def test_block_sparse_against_explicit_mask():
    """Blocks of 4, each query block attends its own and the previous key block (pattern: all)."""
    q, k, v = (blockwise.pad_positions(x, 4) for x in _qkv())
    real = blockwise.pad_positions(_mask("holes"), 4, dim=1)
    nb = 6
    ids = torch.stack([(torch.arange(nb) - 1).clamp(min=0), torch.arange(nb)], dim=1)
    key_allowed = torch.stack([torch.arange(nb) > 0, torch.ones(nb, dtype=torch.bool)], 1).repeat_interleave(4, 1)
    out = blockwise.block_sparse(q, k, v, 4, ids[None], key_allowed[None], torch.ones(4, 8, dtype=torch.bool), real)
    block = torch.arange(24) // 4
    behind = block[:, None] - block[None, :]
    allowed = (behind >= 0) & (behind <= 1) & real[:, None, None, :]
    torch.testing.assert_close(out, blockwise.explicit_attention(q, k, v, allowed), rtol=1e-12, atol=1e-12)


def _block_pairs(ids, key_allowed, pattern, real, block):
    """The allowed (B, H or 1, T, T) pairs of ``block_sparse``'s table, written out pair by pair."""
    G, nb, m = ids.shape
    B, T = real.shape
    allowed = torch.zeros(B, G, T, T, dtype=torch.bool)
    for b, g, i, c in itertools.product(range(B), range(G), range(T), range(m * block)):
        j = int(ids[g, i // block, c // block]) * block + c % block
        if key_allowed[g, i // block, c] and pattern[i % block, c] and real[b, j]:
            allowed[b, g, i, j] = True
    return allowed


@pytest.mark.parametrize("per_head", [False, True])
def test_block_sparse_gradcheck_over_several_steps(per_head, monkeypatch):
    """The custom backward of block_sparse (float64 gradcheck) with one query block a step, a
    table per head or shared, a causal pattern inside the own block and rows without any key."""
    monkeypatch.setattr(blockwise, "SCORE_BUDGET", 1)
    block, nb, H = 3, 4, 2
    q, k, v = (x.requires_grad_() for x in random_qkv(B=2, H=H, T=block * nb, D=3, Dv=2))
    real = torch.ones(2, block * nb, dtype=torch.bool)
    real[1, :block] = False  # batch 1: query block 0 has no key (its own block is padding)
    own = torch.arange(nb)
    if per_head:  # head 0: previous and own block; head 1: own block and block 3 (twice: one slot off)
        ids = torch.stack([torch.stack([(own - 1).clamp(min=0), own], 1), torch.stack([own, own.new_full((nb,), 3)], 1)])
        slot = torch.stack([torch.stack([own > 0, own >= 0], 1), torch.stack([own >= 0, own != 3], 1)])
    else:
        ids, slot = torch.stack([(own - 1).clamp(min=0), own], 1)[None], torch.stack([own > 0, own >= 0], 1)[None]
    key_allowed = slot.repeat_interleave(block, dim=2)
    pattern = torch.cat([torch.ones(block, block, dtype=torch.bool), torch.ones(block, block, dtype=torch.bool).tril()], 1)
    if per_head:
        pattern = torch.ones(block, 2 * block, dtype=torch.bool)
    out = blockwise.block_sparse(q, k, v, block, ids, key_allowed, pattern, real)
    allowed = _block_pairs(ids, key_allowed, pattern, real, block)
    assert not allowed[1, 0, :block].any()  # head 0 of batch 1: rows without a key
    torch.testing.assert_close(out, blockwise.explicit_attention(q, k, v, allowed), rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda *x: blockwise.block_sparse(*x, block, ids, key_allowed, pattern, real),
                                    (q, k, v), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("causal,per_row", list(itertools.product([False, True], [False, True])))
def test_attend_rows_gradcheck_over_several_key_chunks(causal, per_row, monkeypatch):
    """attend_rows (one key a chunk) against the explicit softmax, and its custom backward
    (float64 gradcheck), rows shared by every head or per (batch, head), rows without a key."""
    monkeypatch.setattr(blockwise, "SCORE_BUDGET", 1)
    n = 10
    q, k, v = (x.requires_grad_() for x in random_qkv(B=2, H=2, T=n, D=3, Dv=2))
    real = padding_mask("left", 2, n, pads=(0, 4))  # batch 1: causal rows 0..3 have no key
    rows = torch.tensor([0, 7, 3]) if not per_row else torch.tensor([[[0, 7, 3], [9, 2, 2]], [[1, 0, 8], [5, 6, 0]]])
    expected = attention.build("softmax_reference")(q, k, v, causal=causal, attention_mask=real)
    index = rows.expand(2, 2, 3)[..., None]
    torch.testing.assert_close(blockwise.attend_rows(q.gather(2, index.expand(-1, -1, -1, 3)), rows, k, v, causal, real),
                               expected.gather(2, index.expand(-1, -1, -1, 2)), rtol=1e-12, atol=1e-12)
    q_rows = q.gather(2, index.expand(-1, -1, -1, 3)).detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b, c: blockwise.attend_rows(a, rows, b, c, causal, real), (q_rows, k, v),
                                    eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("name,params", [("longformer", dict(window=6, num_global=2, chunk_size=8)),
                                         ("bigbird", dict(block_size_sparse=8))])
def test_forward_and_backward_work_grow_linearly_in_T(name, params, monkeypatch):
    """Elements written by the forward and backward at T and 4 T, with steps of two query blocks
    (a small SCORE_BUDGET): 4 times as many. (Autograd's backward of each step's gathers wrote a
    (B, H, T, D) gradient per step; the global rows' groups did the same.)"""
    monkeypatch.setattr(blockwise, "SCORE_BUDGET", 2 * 2 * 8 * 8 * 8)  # B H block^2 m: bigbird's 8 blocks
    counts = []
    for n in (256, 1024):
        q, k, v = (x.requires_grad_() for x in random_qkv(B=1, H=2, T=n, D=8, dtype=torch.float32))
        module = attention.build(name, **params)
        counts.append(blockwise.elements_written(lambda: module(q, k, v, causal=True).sum().backward())[1])
    assert counts[1] <= 4.3 * counts[0]


def test_small_helpers():
    x = torch.ones(2, 3, 5, 4)
    assert blockwise.pad_positions(x, 4).shape == (2, 3, 8, 4) and blockwise.pad_positions(x, 5) is x
    assert blockwise.pad_positions(torch.ones(2, 5, dtype=torch.bool), 3, dim=1)[:, 5:].eq(False).all()
    assert blockwise.work_dtype(x.half(), x.bfloat16()) == torch.float32
    assert blockwise.work_dtype(x.float(), x.double()) == torch.float64
    q, k, v = _qkv()
    _, n = blockwise.largest_intermediate(lambda: q @ k.transpose(-1, -2))
    assert n == 2 * 2 * T * T


# ---------------------------------------------------------------------------------------------
# every method: fast path against its reference


@pytest.mark.parametrize("causal,pad", list(itertools.product([False, True], PADDING)))
@pytest.mark.parametrize("name,params", CASES, ids=CASE_IDS)
def test_fast_matches_reference_float64(name, params, causal, pad):
    q, k, v = _qkv()
    fast, ref = _both(name, params, q, k, v, causal, _mask(pad))
    assert fast.shape == q.shape and fast.dtype == torch.float64
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", GRIDS)
def test_gradients_match_the_reference(name, causal):
    grads = {}
    for implementation in ("fast", "reference"):
        q, k, v = (x.requires_grad_() for x in _qkv())
        out = attention.build(name, implementation=implementation, **GRIDS[name][2])(q, k, v, causal=causal,
                                                                                     attention_mask=_mask("left"))
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        grads[implementation] = [torch.zeros_like(x) if x.grad is None else x.grad for x in (q, k, v)]
    for fast, ref in zip(grads["fast"], grads["reference"]):
        assert torch.isfinite(fast).all()
        torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name", GRIDS)
def test_half_inputs_keep_their_dtype_and_accumulate_in_float32(name, dtype):
    q, k, v = _qkv(dtype=dtype)
    params = GRIDS[name][2]
    out = attention.build(name, **params)(q, k, v, causal=True, attention_mask=_mask("holes"))
    ref = attention.build(name, implementation="reference", **params)(q.double(), k.double(), v.double(), causal=True,
                                                                      attention_mask=_mask("holes"))
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-5 if dtype == torch.float32 else 3e-2)


@pytest.mark.parametrize("name", GRIDS)
def test_tiny_and_fully_padded_inputs(name):
    for n, causal, pad in itertools.product([1, 2, 3], [False, True], [False, True]):
        q, k, v = _qkv(T=n)
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[0, 0] = not pad
        fast, ref = _both(name, {}, q, k, v, causal, mask)
        torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)
    q, k, v = _qkv(T=70)
    assert (attention.build(name)(q, k, v, causal=True, attention_mask=torch.zeros(2, 70, dtype=torch.bool)) == 0).all()


# sizes where the groups of SCORE_BUDGET scores and the linear tensors are what is largest
LARGE = {"longformer": (dict(window=32, num_global=2), (1024, 2048)),
         "bigbird": (dict(block_size_sparse=16), (2048, 4096)),  # (3 + 3 + 2) x 16 = 128 keys a query
         "reformer": (dict(n_hashes=2, bucket_size=16), (4096, 8192)),  # the hashing's groups reach the budget
         "informer": (dict(factor=5.0), (2048, 4096))}


@pytest.mark.parametrize("name", GRIDS)
def test_no_quadratic_tensor_in_the_fast_path(name):
    params, sizes = LARGE[name]
    largest = []
    for n in sizes:
        q, k, v = _qkv(B=1, H=2, T=n, D=8, dtype=torch.float32)
        module = attention.build(name, **params)
        largest.append(blockwise.largest_intermediate(module, q, k, v, causal=True,
                                                      attention_mask=torch.ones(1, n, dtype=torch.bool))[1])
        assert largest[-1] < 2 * n * n / 8  # (B, H, T, T) would be 2 n^2
    assert largest[1] <= 2.5 * largest[0]  # grows (at most) linearly, up to Informer's ln T


@pytest.mark.parametrize("name", GRIDS)
def test_input_errors(name):
    q, k, v = _qkv()
    module = attention.build(name)
    with pytest.raises(ValueError, match=f"{name} is self-attention: q and k need the same length T; got 23 and 22"):
        module(q, k[:, :, :-1], v[:, :, :-1], causal=False)
    with pytest.raises(ValueError, match="attention_mask must be a bool tensor"):
        module(q, k, v, causal=False, attention_mask=torch.ones(2, T))
    with pytest.raises(ValueError, match=r"\(B, H, T, D\)"):
        module(q[0], k[0], v[0], causal=False)
    assert math.isfinite(float(module(q, k, v, causal=True).abs().max()))
