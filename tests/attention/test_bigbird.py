"""bigbird: the block sets (global, window, seeded random) and the pair rule written out by hand,
the softmax limit when the blocks cover everything, no switch to full attention on a short input,
seeds, parameter errors. The blockwise path against the reference (float64, padding, gradients,
dtypes, no (T, T) tensor) is in tests/attention/test_blockwise.py with the other sparse methods."""
import functools
import itertools

import pytest
import torch

import attention
from attention import bigbird
from attention.testing import padding_mask, random_qkv

T = 23


_qkv = functools.partial(random_qkv, B=2, H=3, T=T, D=4)
LEFT = padding_mask("left", 2, T, pads=(0, 5))  # batch 1: 5 padding positions first
HOLES = padding_mask("holes", 2, T, every=4, first=2)


def _params(block=3, r=2, w=3, g=2, seed=0):
    return dict(block_size_sparse=block, num_random_blocks=r, num_window_blocks=w, num_global_blocks=g, seed=seed)


def test_global_and_window_blocks():
    assert bigbird.global_blocks(6, 2).tolist() == [True, False, False, False, False, True]
    assert bigbird.global_blocks(6, 3).tolist() == [True, True, False, False, False, True]
    assert bigbird.global_blocks(6, 1).tolist() == [True] + [False] * 5
    assert not bigbird.global_blocks(6, 0).any() and bigbird.global_blocks(2, 5).all()
    window = bigbird.window_blocks(6, 3, causal=False)
    assert window[2].tolist() == [False, True, True, True, False, False]
    assert bigbird.window_blocks(6, 5, causal=True)[3].tolist() == [False, True, True, True, False, False]


@pytest.mark.parametrize("causal", [False, True])
def test_random_blocks_are_distinct_candidates_and_seeded(causal):
    nb, heads, r, w, g = 12, 4, 3, 3, 2
    ids, valid = bigbird.random_blocks(nb, heads, r, w, g, causal, seed=7)
    assert ids.shape == valid.shape == (heads, nb, r)
    is_global = bigbird.global_blocks(nb, g)
    window = bigbird.window_blocks(nb, w, causal)
    for h, n in itertools.product(range(heads), range(nb)):
        chosen = ids[h, n][valid[h, n]].tolist()
        candidates = [m for m in range(nb) if not window[n, m] and not is_global[m] and (m < n or not causal)]
        assert len(set(chosen)) == len(chosen) == min(r, len(candidates))
        assert set(chosen) <= set(candidates)
    again = bigbird.random_blocks(nb, heads, r, w, g, causal, seed=7)
    assert torch.equal(again[0], ids) and torch.equal(again[1], valid)
    assert not torch.equal(bigbird.random_blocks(nb, heads, r, w, g, causal, seed=8)[0], ids)
    assert not all(torch.equal(ids[0], ids[h]) for h in range(1, heads))  # one draw per head


@pytest.mark.parametrize("causal", [False, True])
def test_pairs_follow_the_block_sets_written_out(causal):
    block, heads = 3, 2
    params = _params(block=block, r=2, w=3, g=2, seed=3)
    real = HOLES
    pairs = bigbird.allowed_pairs(T, heads, causal, real, block, *list(params.values())[1:])
    nb = -(-T // block)
    ids, valid = bigbird.random_blocks(nb, heads, 2, 3, 2, causal, seed=3)
    is_global = {0, nb - 1}
    for b, h, i, j in itertools.product(range(2), range(heads), range(T), range(T)):
        n, m = i // block, j // block
        in_window = n - 1 <= m <= n if causal else abs(n - m) <= 1
        random = m in ids[h, n][valid[h, n]].tolist()
        expected = (in_window or random or n in is_global or m in is_global) and bool(real[b, j])
        expected = expected and (j <= i or not causal)
        assert bool(pairs[b, h, i, j]) == expected, (b, h, i, j)


@pytest.mark.parametrize("causal,mask", list(itertools.product([False, True], [None, LEFT, HOLES])))
def test_blocks_covering_everything_is_softmax(causal, mask):
    q, k, v = _qkv()
    softmax = attention.build("softmax_reference")(q, k, v, causal=causal, attention_mask=mask)
    nb = -(-T // 3)
    covering = [_params(r=0, w=2 * nb - 1, g=0),  # the window spans every block
                _params(r=0, w=1, g=nb),  # every block is global
                _params(r=nb, w=1, g=0)]  # the random blocks take every candidate
    for params, implementation in itertools.product(covering, ("fast", "reference")):
        out = attention.build("bigbird", implementation=implementation, **params)(q, k, v, causal=causal,
                                                                                   attention_mask=mask)
        torch.testing.assert_close(out, softmax, rtol=1e-12, atol=1e-12)


def test_short_inputs_stay_sparse_and_change_nothing_for_later_calls():
    """Hugging Face's BigBird turns to full attention below (5 + 2r) b tokens (and stayed there
    once it had): ours keeps the block sets at every length and keeps no state between calls."""
    module = attention.build("bigbird", **_params(block=4, r=1, w=1, g=0))
    long_q, long_k, long_v = _qkv(T=40)
    first = module(long_q, long_k, long_v, causal=False)
    q, k, v = _qkv(T=12)  # 3 blocks, far below (5 + 2) * 4 = 28
    short = module(q, k, v, causal=False)
    assert not torch.allclose(short, attention.build("softmax_reference")(q, k, v, causal=False))
    real = torch.ones(2, 12, dtype=torch.bool)
    torch.testing.assert_close(short, bigbird.reference(q, k, v, False, real, 4, 1, 1, 0, 0))
    assert torch.equal(module(long_q, long_k, long_v, causal=False), first)


def test_seed_fixes_the_random_blocks():
    q, k, v = _qkv(T=60)
    outs = [attention.build("bigbird", **_params(block=3, r=2, g=0, seed=seed))(q, k, v, causal=False)
            for seed in (5, 5, 6)]
    assert torch.equal(outs[0], outs[1])
    assert not torch.allclose(outs[0], outs[2])


@pytest.mark.parametrize("params,message", [
    (dict(block_size_sparse=0), "block_size_sparse must be an integer >= 1"),
    (dict(num_random_blocks=-1), "num_random_blocks must be an integer >= 0"),
    (dict(num_window_blocks=2), "num_window_blocks must be odd"),
    (dict(num_window_blocks=0), "num_window_blocks must be an integer >= 1"),
    (dict(num_global_blocks=1.0), "num_global_blocks must be an integer"),
    (dict(seed=-3), "seed must be an integer >= 0"),
    (dict(implementation="sparse"), "implementation 'sparse' unknown; allowed: 'fast', 'reference'")])
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        attention.build("bigbird", **params)


def test_registry_defaults():
    assert attention.accepted_params("bigbird") == {
        "block_size_sparse": 64, "num_random_blocks": 3, "num_window_blocks": 3, "num_global_blocks": 2, "seed": 0,
        "random_per_layer": True, "implementation": "fast"}


def test_random_blocks_are_drawn_per_layer_as_lra_does():
    """Each layer of a model draws its own random blocks (LRA seeds the draw per layer); layer 0 keeps
    the seed itself, and random_per_layer=False gives every layer the same draw."""
    import attention

    context = lambda i: {"layer_idx": i, "block_size": 64, "n_head": 2, "head_dim": 4}  # noqa: E731
    params = _params(block=4, r=2, w=1, g=0, seed=5)
    layers = [attention.build("bigbird", context(i), **params) for i in range(3)]
    seeds = [m.params["seed"] for m in layers]
    assert seeds[0] == 5 and len(set(seeds)) == 3
    assert bigbird.BigBird(**params).params["seed"] == 5  # built alone: layer 0
    shared = [attention.build("bigbird", context(i), random_per_layer=False, **params) for i in range(3)]
    assert {m.params["seed"] for m in shared} == {5}
    q = torch.randn(1, 2, 32, 4, dtype=torch.float64)
    outs = [m(q, q, q, causal=False) for m in layers]
    assert not torch.allclose(outs[0], outs[1]) and not torch.allclose(outs[1], outs[2])
    assert torch.equal(shared[0](q, q, q, causal=False), shared[2](q, q, q, causal=False))
    with pytest.raises(ValueError, match="random_per_layer must be True or False"):
        bigbird.BigBird(random_per_layer=1)


@pytest.mark.parametrize("causal", [False, True])
def test_block_products_in_bfloat16_as_under_cuda_autocast(monkeypatch, causal):
    """Under CUDA autocast the block products come out in bfloat16 while the global rows stay in
    float32, and CUDA autocast (unlike the CPU's) does not promote index_copy: the H100 run of
    2026-11-28 failed there. The parts are brought to one dtype before they are joined."""
    q, k, v = (x.float() for x in _qkv())
    module = attention.build("bigbird", {"block_size": T}, **_params())
    expected = module(q, k, v, causal)
    block_sparse = bigbird.block_sparse
    monkeypatch.setattr(bigbird, "block_sparse", lambda *a: block_sparse(*a).to(torch.bfloat16))
    got = module(q, k, v, causal)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0.02, atol=0.02)
