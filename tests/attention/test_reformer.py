"""reformer: bucket counts and hashing, the pair rule written out from an explicit sort, the
one-bucket limit (shared-QK softmax with the self rule), lengths that divide nothing, the unused
k, seeds, parameter errors. The chunked path against the reference (float64, padding, gradients,
dtypes, no (T, T) tensor) is in tests/attention/test_blockwise.py with the other sparse methods."""
import functools
import itertools
import math

import pytest
import torch

import attention
from attention import reformer
from attention.testing import padding_mask, random_qkv

T = 23


_qkv = functools.partial(random_qkv, B=2, H=2, T=T, D=4)
LEFT = padding_mask("left", 2, T, pads=(0, 3))  # batch 1: 3 padding positions first
HOLES = padding_mask("holes", 2, T, every=5, first=3)


def test_bucket_count():
    assert [reformer.bucket_count(T, 64) for T in (1, 64, 65, 128, 129, 200, 1000)] == [1, 1, 2, 2, 4, 4, 16]
    assert [reformer.bucket_count(23, size) for size in (4, 5, 30)] == [6, 6, 1]


def test_hashing_is_angular_seeded_and_puts_padding_last():
    q, _, _ = _qkv()
    real = HOLES
    buckets = reformer.lsh_buckets(q, 3, 6, real, seed=1)
    assert buckets.shape == (3, 2, 2, T)
    assert (buckets[:, ~real[:, None, :].expand(2, 2, T)] == 6).all()  # padding: a bucket of its own
    assert (buckets[:, real[:, None, :].expand(2, 2, T)] < 6).all()
    assert torch.equal(reformer.lsh_buckets(3.5 * q, 3, 6, real, seed=1), buckets)  # the angle only
    assert torch.equal(reformer.lsh_buckets(q, 3, 6, real, seed=1), buckets)
    assert not torch.equal(reformer.lsh_buckets(q, 3, 6, real, seed=2), buckets)
    assert not torch.equal(buckets[0], buckets[1])  # rounds differ
    # h(x) = argmax([xR ; -xR]) with R drawn from the seeded generator
    rotations = torch.randn(3, 4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    projected = q @ rotations[0]
    expected = torch.cat([projected, -projected], -1).argmax(-1).masked_fill(~real[:, None, :], 6)
    assert torch.equal(buckets[0], expected)
    assert (reformer.lsh_buckets(q, 2, 1, real, seed=0) < 2).all()


@pytest.mark.parametrize("causal", [False, True])
def test_pairs_follow_the_sort_written_out(causal):
    q, _, _ = _qkv(B=1, H=1)
    real = HOLES[:1]
    n_hashes, n_buckets, chunk = 3, 4, 3
    buckets = reformer.lsh_buckets(q, n_hashes, n_buckets, real, seed=4)
    _, place = reformer.sorted_chunks(buckets)
    pairs = reformer.allowed_pairs(buckets, place // chunk, causal, real)[0, 0]
    found = torch.zeros(T, T, dtype=torch.bool)
    for r in range(n_hashes):
        bucket = buckets[r, 0, 0].tolist()
        order = sorted(range(T), key=lambda t: (bucket[t], t))  # Eq. 4-5: by bucket, then position
        chunk_of = {t: order.index(t) // chunk for t in range(T)}
        for i, j in itertools.product(range(T), range(T)):
            if bucket[i] == bucket[j] and chunk_of[i] - 1 <= chunk_of[j] <= chunk_of[i]:
                found[i, j] = True
    for i in range(T):
        keys = [j for j in range(T) if found[i, j] and real[0, j] and (j <= i or not causal)]
        others = [j for j in keys if j != i]
        expected = others or [j for j in keys if j == i]  # itself only when nothing else
        assert pairs[i].nonzero().flatten().tolist() == expected, i


@pytest.mark.parametrize("causal,mask", list(itertools.product([False, True], [None, LEFT, HOLES])))
def test_one_bucket_and_one_chunk_is_shared_qk_softmax_with_the_self_rule(causal, mask):
    q, k, v = _qkv()
    keys = q / q.norm(dim=-1, keepdim=True)
    # every other allowed key: softmax_reference with exclude_self; a row with none: the token itself
    others = attention.build("softmax_reference", exclude_self=True)(q, keys, v, causal=causal, attention_mask=mask)
    real = torch.ones(2, T, dtype=torch.bool) if mask is None else mask
    counts = real.long().cumsum(1) if causal else real.long().sum(1, keepdim=True).expand(2, T)
    alone = (counts - real.long() == 0)[:, None, :, None]  # no real key but itself
    expected = torch.where(alone, v * real[:, None, :, None], others)
    expected = expected * real[:, None, :, None]  # a padding query is alone in its bucket: zero
    for params, implementation in itertools.product([dict(bucket_size=T), dict(bucket_size=40, chunk_size=T + 5)],
                                                    ("fast", "reference")):
        out = attention.build("reformer", n_hashes=3, implementation=implementation, **params)(
            q, k, v, causal=causal, attention_mask=mask)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    if causal:
        torch.testing.assert_close(out[:, :, 0], v[:, :, 0] * real[:, None, :1])  # the first token: itself


def test_lengths_that_divide_nothing_and_the_unused_k():
    """reformer-pytorch needs T divisible by 2 x bucket_size; here T = 37 with buckets of 4 and
    chunks of 6 pads by itself. The keys are the normalised queries: k is not read."""
    q, k, v = _qkv(T=37)
    module = attention.build("reformer", n_hashes=2, bucket_size=4, chunk_size=6)
    out = module(q, k, v, causal=True)
    torch.testing.assert_close(out, reformer.reference(q, v, True, torch.ones(2, 37, dtype=torch.bool), 2, 4, 6, 0))
    assert torch.equal(module(q, torch.zeros_like(k), v, causal=True), out)


def test_seed_fixes_the_rotations():
    q, k, v = _qkv(T=60)
    outs = [attention.build("reformer", n_hashes=2, bucket_size=4, seed=seed)(q, k, v, causal=False)
            for seed in (3, 3, 4)]
    assert torch.equal(outs[0], outs[1])
    assert not torch.allclose(outs[0], outs[2])


@pytest.mark.parametrize("params,message", [
    (dict(n_hashes=0), "n_hashes must be an integer >= 1"),
    (dict(bucket_size=0), "bucket_size must be an integer >= 1"),
    (dict(bucket_size=math.pi), "bucket_size must be an integer"),
    (dict(chunk_size=-1), "chunk_size must be an integer >= 0"),
    (dict(seed=None), "seed must be an integer >= 0"),
    (dict(implementation="lsh"), "implementation 'lsh' unknown; allowed: 'fast', 'reference'")])
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        attention.build("reformer", **params)


def test_registry_defaults():
    assert attention.accepted_params("reformer") == {"n_hashes": 8, "bucket_size": 64, "chunk_size": 0, "seed": 0,
                                                     "implementation": "fast"}
