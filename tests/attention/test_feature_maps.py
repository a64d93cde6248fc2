"""Tests of attention/feature_maps.py (Eq. 4-7 of "High Attention Scores and Where to Find Them")."""
import math

import pytest
import torch

from attention.feature_maps import (RandomFeatureMap, favor_plus_features, favor_plus_relu_features,
                                    orthogonal_gaussian_matrix, position_projections, position_seed,
                                    positive_alignment_features, rff_features)

torch.set_flush_denormal(True)


def test_positive_alignment_inner_product():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(5, 7, generator=g, dtype=torch.float64), torch.randn(5, 7, generator=g, dtype=torch.float64)
    got = (positive_alignment_features(q) * positive_alignment_features(k)).sum(-1)
    want = torch.relu(q * k).sum(-1)
    assert positive_alignment_features(q).shape == (5, 14)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("m,D", [(3, 8), (8, 8), (20, 8)])
def test_orthogonal_blocks_and_norms(m, D):
    g = torch.Generator().manual_seed(1)
    W = orthogonal_gaussian_matrix(m, D, g, norms="chi")
    assert W.shape == (m, D)
    for i in range(0, m, D):
        blk = W[i:i + D]
        unit = blk / blk.norm(dim=1, keepdim=True)
        torch.testing.assert_close(unit @ unit.T, torch.eye(len(blk), dtype=W.dtype), atol=1e-12, rtol=0)
    Wf = orthogonal_gaussian_matrix(m, D, g, norms="fixed")
    torch.testing.assert_close(Wf.norm(dim=1), torch.full((m,), math.sqrt(D), dtype=W.dtype))


def test_chi_norms_have_gaussian_second_moment():
    # rows marginally N(0, I_D): E ||w||^2 = D
    W = orthogonal_gaussian_matrix(4000, 6, torch.Generator().manual_seed(2), norms="chi")
    sq = (W * W).sum(1)
    assert abs(sq.mean().item() - 6) < 5 * sq.std().item() / math.sqrt(4000)


def _block_estimates(feature_fn, q, k, m_blocks, D, seed):
    """Independent per-block estimates of <phi(q), phi(k)> (one orthogonal block of D rows each)."""
    W = orthogonal_gaussian_matrix(m_blocks * D, D, torch.Generator().manual_seed(seed))
    m = W.shape[0]
    prod = feature_fn(q, W) * feature_fn(k, W)                      # (2m,)
    per_row = prod[:m] + prod[m:]                                   # contributions of each direction
    # full estimate = sum of all rows; a single block of D rows would be normalised by m / D more
    return per_row.view(m_blocks, D).sum(1) * (m / D)


@pytest.mark.parametrize("fn", [favor_plus_features, rff_features])
def test_random_features_unbiased_for_softmax_kernel(fn):
    D = 4
    g = torch.Generator().manual_seed(3)
    q = 0.5 * torch.randn(D, generator=g, dtype=torch.float64)
    k = 0.5 * torch.randn(D, generator=g, dtype=torch.float64)
    est = _block_estimates(fn, q, k, 4000, D, seed=4)
    target = math.exp(float(q @ k))
    sem = est.std().item() / math.sqrt(len(est))
    assert sem > 0
    assert abs(est.mean().item() - target) < 4 * sem, (est.mean().item(), target, sem)
    # whole-matrix estimate equals the mean of the block estimates
    W = orthogonal_gaussian_matrix(4000 * D, D, torch.Generator().manual_seed(4))
    full = (fn(q, W) * fn(k, W)).sum()
    torch.testing.assert_close(full, est.mean(), rtol=1e-9, atol=0)


def test_favor_plus_variance_matches_theory_iid():
    # Eq. 9 (iid rows, R = 2): Var / mean^2 = 2/R (cosh(||q + k||^2) - 1) with unscaled inputs; the
    # orthogonal estimator should not be worse on average, so check the iid formula's order only.
    D = 4
    q = torch.tensor([0.3, -0.2, 0.1, 0.4], dtype=torch.float64)
    k = torch.tensor([0.1, 0.2, -0.3, 0.2], dtype=torch.float64)
    est = _block_estimates(favor_plus_features, q, k, 4000, D, seed=5)  # R = 2D per block
    rel_var = est.var().item() / math.exp(float(q @ k)) ** 2
    bound = 2 / (2 * D) * (math.cosh(float((q + k) @ (q + k))) - 1)
    assert rel_var < 1.5 * bound


def test_favor_plus_relu_nonnegative_and_fixed_norm():
    fmap = RandomFeatureMap("favor_plus_relu", D=8, R=16, seed=0)
    torch.testing.assert_close(fmap.W.norm(dim=1), torch.full((8,), math.sqrt(8), dtype=torch.float64))
    x = torch.randn(3, 5, 8)
    f = fmap(x)
    assert f.shape == (3, 5, 16) and bool((f >= 0).all())
    torch.testing.assert_close(f, favor_plus_relu_features(x, fmap.W))


def test_feature_map_input_scale_estimates_scaled_kernel():
    # with input_scale = D^-1/4 the features estimate exp(<q, k> / sqrt(D))
    D = 4
    fmap = RandomFeatureMap("favor_plus", D=D, R=2 * D * 3000, seed=7, input_scale=D ** -0.25)
    q = torch.tensor([0.5, -0.5, 1.0, 0.2], dtype=torch.float64)
    k = torch.tensor([0.3, 0.4, 0.6, -0.1], dtype=torch.float64)
    got = float((fmap(q) * fmap(k)).sum())
    assert abs(got - math.exp(float(q @ k) / math.sqrt(D))) < 0.05


def test_feature_map_errors():
    with pytest.raises(ValueError, match="unknown; allowed"):
        RandomFeatureMap("foo", D=4)
    with pytest.raises(ValueError, match="even"):
        RandomFeatureMap("rff", D=4, R=7)
    with pytest.raises(ValueError, match="last dimension"):
        RandomFeatureMap("rff", D=4)(torch.randn(2, 5))
    with pytest.raises(ValueError):
        orthogonal_gaussian_matrix(0, 4)
    assert RandomFeatureMap("rff", D=4).R == 8
    assert RandomFeatureMap("positive_alignment", D=4, R=100).R == 8


@pytest.mark.parametrize("norms", ["chi", "fixed"])
def test_position_projections_are_counter_based(norms):
    # W_t = the projection drawn from position_seed(seed, t), whatever range it is drawn in
    W = position_projections(9, 0, 12, 10, 4, norms)
    assert W.shape == (12, 10, 4)
    for t in (0, 7, 11):
        want = orthogonal_gaussian_matrix(10, 4, torch.Generator().manual_seed(position_seed(9, t)), norms)
        torch.testing.assert_close(W[t], want, rtol=0, atol=1e-14)
    torch.testing.assert_close(position_projections(9, 5, 12, 10, 4, norms), W[5:], rtol=0, atol=1e-14)
    assert not torch.allclose(W[0], W[1])
    assert not torch.allclose(position_projections(10, 0, 1, 10, 4, norms)[0], W[0])
    assert position_seed(9, 3) == position_seed(9, 3) != position_seed(9, 4)
    with pytest.raises(ValueError, match="stop > start"):
        position_projections(9, 3, 3, 10, 4)


def test_per_position_map_uses_one_projection_per_position_and_caches_them():
    fmap = RandomFeatureMap("favor_plus", D=4, R=8, seed=3, per_position=True)
    x = torch.randn(2, 6, 4, dtype=torch.float64)
    f = fmap(x)
    W = fmap.projections(6)
    assert W.shape == (6, 4, 4)
    for t in range(6):
        torch.testing.assert_close(f[:, t], favor_plus_features(x[:, t], W[t]))
    longer = fmap.projections(9)  # extends the cache; the first 6 stay the same
    assert longer.shape == (9, 4, 4) and torch.equal(longer[:6], W)
    torch.testing.assert_close(longer, position_projections(3, 0, 9, 4, 4), rtol=0, atol=1e-14)
