"""informer: u and S, the seeded group draws, the measurement, the lazy rows (mean of V, or the
running mean divided by the count when causal), the sparse path against the reference with
several query groups, the softmax limit u = T, seeds, parameter errors. The module against its
reference (float64, padding, gradients, dtypes, no (T, T) tensor) is in
tests/attention/test_blockwise.py with the other sparse methods."""
import functools
import itertools
import math

import pytest
import torch

import attention
from attention import informer
from attention.testing import padding_mask, random_qkv

T = 29


_qkv = functools.partial(random_qkv, B=2, H=2, T=T, D=4)
LEFT = padding_mask("left", 2, T, pads=(0, 6))  # batch 1: 6 padding positions first
HOLES = padding_mask("holes", 2, T, every=5, first=4)


def test_counts():
    assert informer.active_count(1024, 5) == math.ceil(5 * math.log(1024)) == 35
    assert informer.sample_count(1024, 5) == 5 * 7
    assert informer.active_count(16384, 5) == 49 and informer.sample_count(16384, 5) == 50
    assert informer.active_count(10, 100) == 10 and informer.sample_count(10, 100) == 10
    assert informer.active_count(1, 5) == 0 and informer.active_count(7, 0.5) == 1


@pytest.mark.parametrize("causal", [False, True])
def test_group_draws_come_from_the_allowed_keys_outside_the_group(causal):
    real = (torch.arange(40) % 5 != 4) & (torch.arange(40)[None] >= torch.tensor([[0], [13]]))
    group = 8
    positions, valid = informer.group_draws(causal, real, 30.0, seed=2, group=group)
    assert positions.shape == valid.shape == (2, 5, informer.sample_count(40, 30.0))
    for b, g in itertools.product(range(2), range(5)):
        candidates = {j for j in range(40) if real[b, j] and not g * group <= j < (g + 1) * group
                      and (j < g * group or not causal)}
        assert bool(valid[b, g].all()) == bool(candidates) and bool(valid[b, g].any()) == bool(candidates)
        if candidates:
            drawn = set(positions[b, g].tolist())
            assert drawn <= candidates
            assert len(drawn) > len(candidates) / 2  # 30 * 4 = 120 draws spread over the candidates
    again = informer.group_draws(causal, real, 30.0, seed=2, group=group)[0]
    assert torch.equal(again, positions)
    assert not torch.equal(informer.group_draws(causal, real, 30.0, seed=3, group=group)[0], positions)


def test_measurement_and_selection():
    scores = torch.tensor([[[[1.0, 3.0, 2.0, 9.0], [0.0, 0.0, 5.0, 5.0], [4.0, 1.0, 1.0, 1.0]]]])
    valid = torch.tensor([[[True, True, True, False], [True, True, True, True], [False, False, False, False]]])
    m = informer.measurement(scores, valid, torch.ones(1, 3, dtype=torch.bool))
    assert m[0, 0].tolist() == [3.0 - 2.0, 5.0 - 2.5, float("-inf")]  # max - mean over the sample
    m = informer.measurement(scores, valid, torch.tensor([[True, False, True]]))
    assert m[0, 0, 1] == float("-inf")  # padding queries are never preferred
    ties = torch.tensor([[[1.0, 2.0, 2.0, float("-inf"), 2.0]]])
    assert informer.top_queries(ties, 3).tolist() == [[[1, 2, 4]]]


@pytest.mark.parametrize("causal", [False, True])
def test_rows_are_softmax_for_u_queries_and_the_mean_for_the_others(causal):
    """Eq. 3 row by row: u rows are softmax attention; the lazy rows are the mean of the allowed
    values, the running mean (divided by the count, not the cumulative sum) when causal."""
    q, k, v = _qkv(B=1, H=1, T=40)
    out = attention.build("informer", factor=2.0)(q, k, v, causal=causal)
    softmax = attention.build("softmax_reference")(q, k, v, causal=causal)
    counts = torch.arange(1, 41, dtype=torch.float64)[:, None]
    mean = v[0, 0].cumsum(0) / counts if causal else v[0, 0].mean(0).expand(40, -1)
    active = [t for t in range(40) if torch.allclose(out[0, 0, t], softmax[0, 0, t], rtol=1e-12, atol=1e-12)]
    lazy = [t for t in range(40) if torch.allclose(out[0, 0, t], mean[t], rtol=1e-12, atol=1e-12)]
    assert len(set(active) - set(lazy)) == informer.active_count(40, 2.0) == 8
    assert sorted(set(active) | set(lazy)) == list(range(40))


@pytest.mark.parametrize("causal,real", list(itertools.product([False, True], [LEFT | True, LEFT, HOLES])))
@pytest.mark.parametrize("factor,group,seed", [(1.0, 4, 0), (3.0, 7, 2), (2.0, 1, 3), (0.1, 5, 0), (50.0, 6, 0)])
@pytest.mark.parametrize("score_budget", [1 << 20, 1, 400])
def test_sparse_matches_reference_with_several_groups(causal, real, factor, group, seed, score_budget, monkeypatch):
    """The module's groups are 64 positions (one group at the T of the shared tests); smaller
    groups exercise the draws outside each group. ``score_budget``: the measurement in one step,
    one group per step, a few groups per step."""
    monkeypatch.setattr(informer, "SCORE_BUDGET", score_budget)
    q, k, v = _qkv()
    fast = informer.sparse(q, k, v, causal, real, factor, seed, group)
    ref = informer.reference(q, k, v, causal, real, factor, seed, group)
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal,mask", list(itertools.product([False, True], [None, LEFT, HOLES])))
def test_u_equal_to_T_is_softmax(causal, mask):
    q, k, v = _qkv()
    assert informer.active_count(T, 10.0) == T
    softmax = attention.build("softmax_reference")(q, k, v, causal=causal, attention_mask=mask)
    for implementation in ("fast", "reference"):
        out = attention.build("informer", factor=10.0, implementation=implementation)(q, k, v, causal=causal,
                                                                                     attention_mask=mask)
        torch.testing.assert_close(out, softmax, rtol=1e-12, atol=1e-12)


def test_seed_fixes_the_sample():
    q, k, v = _qkv(T=300)
    outs = [attention.build("informer", factor=1.0, seed=seed)(q, k, v, causal=False) for seed in (4, 4, 5)]
    assert torch.equal(outs[0], outs[1])
    assert not torch.allclose(outs[0], outs[2])


@pytest.mark.parametrize("params,message", [
    (dict(factor=0), "factor must be a number > 0"), (dict(factor=-1.0), "factor must be a number > 0"),
    (dict(factor="5"), "factor must be a number > 0"), (dict(factor=math.inf), "factor must be a number > 0"),
    (dict(seed=1.5), "seed must be an integer >= 0"),
    (dict(implementation="prob"), "implementation 'prob' unknown; allowed: 'fast', 'reference'")])
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        attention.build("informer", **params)


def test_registry_defaults_and_an_int_factor():
    assert attention.accepted_params("informer") == {"factor": 5.0, "seed": 0, "implementation": "fast"}
    attention.check_params("informer", {"factor": 5})  # an int is a float here
    assert attention.build("informer", factor=3).params["factor"] == 3.0
