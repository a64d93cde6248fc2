"""Tests of the symmetric quadratic features of Fastmax's chunked backend (attention/fastmax/chunked.py).

Without dropout the two quadratic factors are one tensor, and (q . k)^2 = (q (x) q) . (k (x) k) is
computed from the D (D + 1) / 2 pairs m <= l (``chunked._pairs``) instead of the D^2 entries of the
outer products. Checked here: the pairs against the full features (hand case and random, float64),
the backend against the reference and against its own full-feature path (dropout's code), and
gradcheck of the custom Function.
"""
import pytest
import torch

from attention.fastmax import chunked, fast_forward
from attention.fastmax.function import FastmaxFunction, coefficients
from attention.fastmax.reference import reference_forward


def _randn(*shape, seed=0, scale=1.0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).requires_grad_(grad)


def _padding(B, T):
    g = torch.Generator().manual_seed(11)
    mask = torch.rand(B, T, generator=g) > 0.3
    mask[0, :3] = False  # left padding: causal rows 0..2 of batch 0 have no allowed key
    mask[-1, -1] = False
    return mask


def _assert_close(actual, expected, rtol=1e-9, atol=1e-11):
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# the packed features


def test_pairs_hand_case():
    # D = 2, q = (1, 2), k = (3, 5): pairs (0,0), (0,1), (1,1); q.k = 13, (q.k)^2 = 169
    q = torch.tensor([1.0, 2.0], dtype=torch.float64)
    k = torch.tensor([3.0, 5.0], dtype=torch.float64)
    assert chunked._pairs(q).tolist() == [1.0, 4.0, 2.0]  # (0,0), (1,1), (0,1)
    assert chunked._pairs(q, weighted=True).tolist() == [1.0, 4.0, 4.0]  # off-diagonal pair counted twice
    assert chunked._pairs(k).tolist() == [9.0, 25.0, 15.0]
    assert float(chunked._pairs(q, weighted=True) @ chunked._pairs(k)) == 169.0  # 9 + 100 + 60
    assert chunked._unpack(chunked._pairs(k), 2).tolist() == [[9.0, 15.0], [15.0, 25.0]]
    # M x with M = k k^T = [[9, 15], [15, 25]] and x = q: (9 + 30, 15 + 50)
    assert chunked._pair_matvec(chunked._pairs(k), q).tolist() == [39.0, 65.0]


def test_pair_order_and_full_map():
    # diagonal by diagonal: (0,0), (1,1), (2,2), then (0,1), (1,2), then (0,2)
    first, second, full = chunked._pair_index(3, torch.device("cpu"))
    assert list(zip(first.tolist(), second.tolist())) == [(0, 0), (1, 1), (2, 2), (0, 1), (1, 2), (0, 2)]
    assert full.view(3, 3).tolist() == [[0, 3, 5], [3, 1, 4], [5, 4, 2]]
    x = torch.tensor([2.0, 3.0, 5.0], dtype=torch.float64)
    assert chunked._pairs(x).tolist() == [4.0, 9.0, 25.0, 6.0, 15.0, 10.0]
    assert chunked._pairs(x, weighted=True).tolist() == [4.0, 9.0, 25.0, 12.0, 30.0, 20.0]


@pytest.mark.parametrize("D", [1, 2, 5, 16, 64])
def test_pairs_reproduce_full_inner_products(D):
    q, k = _randn(7, D, seed=D), _randn(9, D, seed=D + 100)
    packed = chunked._pairs(q, weighted=True) @ chunked._pairs(k).T  # (7, 9) from D (D + 1) / 2 features
    full = chunked._outer(q, q) @ chunked._outer(k, k).T  # from D^2 features
    assert chunked._pairs(q).shape[-1] == D * (D + 1) // 2
    _assert_close(packed, full, rtol=1e-12, atol=1e-12)
    _assert_close(packed, (q @ k.T) ** 2, rtol=1e-12, atol=1e-12)
    # unpacking the unweighted pairs gives back the full outer product exactly (a gather)
    assert torch.equal(chunked._unpack(chunked._pairs(k), D), k[:, :, None] * k[:, None, :])
    # the symmetric matrix-vector product from the pairs, against the unpacked matrix
    m = _randn(9, D * (D + 1) // 2, seed=D + 200)
    _assert_close(chunked._pair_matvec(m, k), (chunked._unpack(m, D) @ k.unsqueeze(-1)).squeeze(-1),
                  rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# the backend: packed path against the reference and against the full-feature path


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("normalization", ["max_norm", "none"])  # max_norm: q_scale / k_scale inside the backend
def test_p2_matches_reference(causal, padded, normalization):
    q, k, v = (_randn(2, 2, 37, 6, seed=s, scale=0.7, grad=True) for s in (1, 2, 3))
    mask = _padding(2, 37) if padded else None
    params = dict(p=2, normalization=normalization, a0=0.9, a1=1.1, a2=0.6, temperature=1.3)
    ref = reference_forward(q, k, v, causal, mask, **params)
    fast = fast_forward(q, k, v, causal, mask, **params, chunk_size=16)  # 37 = 2 chunks of 16 + 5
    _assert_close(fast, ref)
    grad_out = _randn(*ref.shape, seed=4)
    for g_fast, g_ref in zip(torch.autograd.grad(fast, (q, k, v), grad_out),
                             torch.autograd.grad(ref, (q, k, v), grad_out)):
        _assert_close(g_fast, g_ref, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_p2_small_budgets_carry_packed_states(monkeypatch, causal):
    # one chunk per group and one position per slice: the packed states go through every carry
    q, k, v = (_randn(1, 3, 41, 5, seed=s, grad=True) for s in (5, 6, 7))
    ref = reference_forward(q, k, v, causal, p=2, normalization="none")
    monkeypatch.setattr(chunked, "STATE_BUDGET", 1)
    monkeypatch.setattr(chunked, "CACHE_BUDGET", 1)
    fast = fast_forward(q, k, v, causal, p=2, normalization="none", chunk_size=16)
    grads = torch.autograd.grad(fast.sum(), (q, k, v))
    monkeypatch.undo()
    _assert_close(fast, ref)
    for a, b in zip(grads, torch.autograd.grad(ref.sum(), (q, k, v))):
        _assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_packed_path_equals_full_feature_path(causal):
    # numerator keys that are copies of k (distinct tensors) send the backend down dropout's
    # full D^2 path with the same mathematics: both paths must agree, outputs and gradients
    N, T, D, Dv = 3, 45, 7, 5
    q, k, v = _randn(N, T, D, seed=8), _randn(N, T, D, seed=9), _randn(N, T, Dv, seed=10)
    rho = torch.ones(N, T, dtype=torch.float64)
    rho[1, 5:9] = 0.0
    k, v = k * rho[..., None], v * rho[..., None]
    has_key = (rho.cumsum(-1) if causal else rho.sum(-1, keepdim=True).expand_as(rho)) > 0
    coeffs = coefficients(2, 0.8, 1.2, 0.7, 1.4)
    copies = [k.clone() for _ in range(3)]
    out, den = chunked.forward(q, k, v, None, None, None, rho, has_key, causal, coeffs, 16)
    out_full, den_full = chunked.forward(q, k, v, *copies, rho, has_key, causal, coeffs, 16)
    _assert_close(out, out_full)
    _assert_close(den, den_full)
    g, delta = _randn(N, T, Dv, seed=12), _randn(N, T, seed=13)
    dq, dk, dv, *none = chunked.backward(g, delta, q, k, v, None, None, None, rho, causal, coeffs, 16)
    assert none == [None, None, None]
    dq_f, dk_f, dv_f, dkl, dka, dkb = chunked.backward(g, delta, q, k, v, *copies, rho, causal, coeffs, 16)
    _assert_close(dq, dq_f)
    _assert_close(dk, dk_f + dkl + dka + dkb)
    _assert_close(dv, dv_f)


def test_no_dropout_never_builds_full_features(monkeypatch):
    # the packed path must not fall back to D^2 features anywhere (forward, backward, both modes)
    def full_features(*args):
        raise AssertionError("D^2 quadratic features built without dropout")
    monkeypatch.setattr(chunked, "_outer", full_features)
    for causal in (False, True):
        q, k, v = (_randn(1, 2, 20, 4, seed=s, grad=True) for s in (14, 15, 16))
        fast_forward(q, k, v, causal, p=2, chunk_size=16).sum().backward()


def test_state_width_is_halved():
    # the key states of p = 2 without dropout have D (D + 1) / 2 rows instead of D^2
    k, va = _randn(2, 9, 6, seed=17), _randn(2, 9, 4, seed=18)
    sums = chunked._position_sums(chunked._parts(k, None, None, None, 3), va, True, packed=True)
    assert sums[2].shape == (2, 21, 4)
    full = chunked._position_sums(chunked._parts(k, None, None, None, 3), va, True)
    assert full[2].shape == (2, 36, 4)
    _assert_close(chunked._unpack(sums[2].transpose(-1, -2), 6).flatten(-2), full[2].transpose(-1, -2))


# ---------------------------------------------------------------------------------------------
# gradcheck of the custom Function through the packed path


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scales", [False, True])
def test_gradcheck_packed_path(causal, scales):
    B, H, T, D = 1, 2, 13, 4
    q, k, v = (_randn(B, H, T, D, seed=s, scale=0.5, grad=True) for s in (20, 21, 22))
    key_weight = torch.ones(B, T, dtype=torch.float64)
    key_weight[0, 6] = 0.0  # a padded key
    coeffs = coefficients(2, 1.0, 0.8, 0.3, 1.5)
    real = key_weight[:, None, :, None]
    inputs = [q, k, v]
    if scales:
        g = torch.Generator().manual_seed(23)
        inputs += [(torch.rand(B, H, T, generator=g, dtype=torch.float64) + 0.5).requires_grad_() for _ in range(2)]

    def fn(q, k, v, q_scale=None, k_scale=None):
        if scales:
            return FastmaxFunction.apply(q, k, v * real, None, None, None, key_weight, causal, coeffs, 4, "pytorch",
                                         q_scale, k_scale * key_weight[:, None, :])
        return FastmaxFunction.apply(q, k * real, v * real, None, None, None, key_weight, causal, coeffs, 4, "pytorch")

    assert torch.autograd.gradcheck(fn, tuple(inputs), eps=1e-6, atol=1e-7)
