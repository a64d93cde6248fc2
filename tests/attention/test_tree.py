"""Tests of tree / bud-expansion attention (attention/tree/)."""
import math

import pytest
import torch

import attention
from attention.testing import random_qkv
from attention.tree.reference import BudTree, default_P, initial_width, num_terms, tree_attention_query
from attention.tree.samplers import (SAMPLERS, ZERO_MASS_KEY, gumbel_noise, hash_uniform, log_mass,
                                     sampling_keys)

torch.set_flush_denormal(True)


def _qkv(B=2, H=3, T=29, D=8, **kw):
    return random_qkv(B, H, T, D, **kw)


def _softmax(q, k, v, causal, exclude_self=False):
    return attention.build("softmax_reference", exclude_self=exclude_self)(q, k, v, causal)


def _tree(exclude_self=False, layer_idx=0, block_size=None, **kw):
    context = {"layer_idx": layer_idx, "block_size": block_size}
    return attention.build("tree", context=context, exclude_self=exclude_self, **kw)


MODES = [(True, False), (True, True), (False, False)]  # (causal, exclude_self)
RUNS = [(True, False, "bud_mean"), (True, True, "paper"), (False, False, "bud_mean")]
DESCENT_RUNS = [("authors", True, False, "bud_mean"), ("authors", True, True, "paper"),
                ("authors", False, False, "bud_mean"), ("split", False, False, "bud_mean"),
                ("split", True, True, "bud_mean")]


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("E,P", [(0.35, None), (0.6, 2), (0.8, 3)])
def test_fast_implementations_match_reference(sampler, E, P):
    q, k, v = _qkv(B=2, H=2, T=19)
    for descent, causal, excl, norm in DESCENT_RUNS:
        outs, stats = {}, {}
        for impl in ("cpu", "vectorized", "reference"):
            m = _tree(excl, E=E, P=P, sampler=sampler, normalization=norm, implementation=impl, seed=5,
                      descent=descent)
            outs[impl] = m(q, k, v, causal)
            stats[impl] = m.stats()
        for impl in ("cpu", "vectorized"):
            torch.testing.assert_close(outs[impl], outs["reference"], rtol=1e-9, atol=1e-11)
            assert stats[impl] == stats["reference"]


def test_cpu_kernel_long_sequence_threads_and_seed():
    # T not a power of two, several rounds, several threads, a seed above 2^63
    from attention.tree.cpu import cpu_forward
    from attention.tree.reference import reference_forward
    q, k, v = _qkv(B=2, H=3, T=100, D=16, seed=11)
    seed = 2 ** 64 - 5
    n = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = cpu_forward(q, k, v, True, False, 0.5, None, "alignment", "bud_mean", 0.99, seed)
    finally:
        torch.set_num_threads(n)
    b = reference_forward(q, k, v, True, False, 0.5, None, "alignment", "bud_mean", 0.99, seed)
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("sampler", ["alignment", "favor_plus_relu"])
def test_cpu_kernel_matches_reference_on_a_long_block(sampler):
    # 11-level tree, T = 1000 (not a power of two), default P = 4; the reference is run on a few
    # positions only (the others stay zero in its output)
    from attention.feature_maps import RandomFeatureMap
    from attention.tree.cpu import cpu_forward
    from attention.tree.reference import reference_forward
    q, k, v = _qkv(B=1, H=3, T=1000, D=16, seed=14)
    qf = kf = None
    if sampler == "favor_plus_relu":
        fmap = RandomFeatureMap(sampler, 16, None, seed=2, input_scale=16 ** -0.25)
        qf, kf = fmap(q), fmap(k)
    positions = [0, 1, 511, 512, 777, 999]
    a = cpu_forward(q, k, v, True, False, 0.5, None, sampler, "bud_mean", 0.99, 4, qf=qf, kf=kf)
    b = reference_forward(q, k, v, True, False, 0.5, None, sampler, "bud_mean", 0.99, 4, qf=qf, kf=kf,
                          positions=positions)
    torch.testing.assert_close(a[:, :, positions], b[:, :, positions], rtol=1e-9, atol=1e-11)


def test_cpu_kernel_float32_close_to_float64():
    q, k, v = _qkv(B=2, H=4, T=64, D=32, seed=12, dtype=torch.float32)
    m = _tree(E=0.5, sampler="edh", implementation="cpu", seed=1)
    out32 = m(q, k, v, True)
    out64 = m(q.double(), k.double(), v.double(), True)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), out64, rtol=1e-4, atol=1e-5)


def test_cpu_kernel_rejects_bad_inputs():
    from attention.tree.cpu import load_kernel
    q, k, v = _qkv(B=1, H=2, T=8, D=4)
    terms = torch.tensor([num_terms(l, 0.5) for l in range(9)], dtype=torch.int64)
    empty = torch.empty(0, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="shapes differ"):
        load_kernel().forward(q, k[:, :, :4].contiguous(), v, empty, empty, terms, True, False, 2, 0, True, True, 0.99, 0)
    with pytest.raises(RuntimeError, match="terms must be int64"):
        load_kernel().forward(q, k, v, empty, empty, terms[:4], True, False, 2, 0, True, True, 0.99, 0)
    with pytest.raises(RuntimeError, match="float32 or float64"):
        load_kernel().forward(q.half(), k.half(), v.half(), empty, empty, terms, True, False, 2, 0, True, True, 0.99, 0)


def test_vectorized_matches_reference_small_chunks_and_float32():
    q, k, v = _qkv(B=3, T=40, dtype=torch.float32, seed=1)
    from attention.tree.reference import reference_forward
    from attention.tree.vectorized import vectorized_forward
    a = vectorized_forward(q, k, v, True, False, 0.5, None, "alignment", "bud_mean", 0.99, 3, chunk=7)
    b = reference_forward(q, k, v, True, False, 0.5, None, "alignment", "bud_mean", 0.99, 3)
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    m = _tree(E=0.5, sampler="alignment", seed=3)
    out = m(q, k, v, True)
    assert out.dtype == torch.float32 and out.shape == q.shape


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("norm", ["bud_mean", "paper"])
@pytest.mark.parametrize("impl", ["cpu", "vectorized", "reference"])
def test_E1_equals_softmax(sampler, norm, impl):
    q, k, v = _qkv(B=2, H=2, T=11, seed=2)
    for causal, excl in MODES:
        m = _tree(excl, E=1.0, sampler=sampler, normalization=norm, implementation=impl)
        torch.testing.assert_close(m(q, k, v, causal), _softmax(q, k, v, causal, excl), rtol=1e-9, atol=1e-12)
        st = m.stats()
        # a fully expanded tree costs exactly one inner product per key (paper section 2.1)
        assert st["alignment_inner_products"] == st["full_attention_inner_products"] > 0


def test_E_below_one_is_approximate_and_paper_differs():
    q, k, v = _qkv(T=64, seed=3)
    exact = _softmax(q, k, v, True)
    c = _tree(E=0.5, sampler="alignment")(q, k, v, True)
    p = _tree(E=0.5, sampler="alignment", normalization="paper")(q, k, v, True)
    assert (c - exact).abs().max() > 1e-3
    assert (p - c).abs().max() > 1e-3
    e = _tree(E=0.5, sampler="edh")(q, k, v, True)
    assert (e - c).abs().max() > 1e-3  # the sampler changes which buds are expanded
    # more terms -> closer to exact attention (alignment sampler, averaged over positions)
    err = [(_tree(E=E, sampler="alignment")(q, k, v, True) - exact).pow(2).mean().item() for E in (0.3, 0.6, 0.9)]
    assert err[0] > err[1] > err[2]


def test_single_position_and_exclude_self_first_row_zero():
    q, k, v = _qkv(B=2, H=2, T=1)
    out = _tree(True, E=0.5)(q, k, v, True)
    assert torch.equal(out, torch.zeros_like(out))
    q, k, v = _qkv(B=2, H=2, T=9)
    out = _tree(True, E=0.5, sampler="rff")(q, k, v, True)
    assert torch.equal(out[:, :, 0], torch.zeros_like(out[:, :, 0]))
    torch.testing.assert_close(out[:, :, 1], v[:, :, 0])  # one key in the history


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_bud_mean_exact_when_scores_equal(sampler):
    # all keys equal -> every score equal -> exact output is the mean of the values, for any E
    B, H, T, D = 1, 2, 33, 4
    q, _, v = _qkv(B, H, T, D, seed=4)
    k = torch.randn(1, H, 1, D, dtype=torch.float64).expand(B, H, T, D).contiguous()
    exact = _softmax(q, k, v, True)
    got = _tree(E=0.3, sampler=sampler)(q, k, v, True)
    torch.testing.assert_close(got, exact, rtol=1e-9, atol=1e-11)
    paper = _tree(E=0.3, sampler=sampler, normalization="paper")(q, k, v, True)
    assert (paper - exact).abs().max() > 1e-2


def test_bud_mean_exact_for_piecewise_constant_keys():
    # non-causal, 16 keys constant on [0, 8) and [8, 16); P = 2, T = ceil(16^0.2) = 2 -> the two
    # initial buds are exactly the two constant pieces, so bud_mean is exact
    H, D = 2, 4
    q, _, v = _qkv(1, H, 16, D, seed=5)
    k = torch.cat([torch.randn(1, H, 1, D, dtype=torch.float64).expand(1, H, 8, D),
                   3 * torch.randn(1, H, 1, D, dtype=torch.float64).expand(1, H, 8, D)], dim=2)
    m = _tree(E=0.2, P=2, sampler="alignment")
    torch.testing.assert_close(m(q, k, v, False), _softmax(q, k, v, False), rtol=1e-9, atol=1e-11)
    assert m.stats()["alignment_inner_products"] == 2 * H * 16


def test_eq1_eq2_tree_sums_and_recursion():
    H, D, L = 2, 3, 8
    g = torch.Generator().manual_seed(6)
    keys = torch.randn(6, H, D, generator=g, dtype=torch.float64)
    tree = BudTree(L, H, D)
    for p in range(6):
        tree.insert(p, keys[p], keys[p])
    q = torch.randn(H, D, generator=g, dtype=torch.float64)
    for h in range(1, tree.levels):
        for j in range(L >> h):
            torch.testing.assert_close(tree.K[h][:, j], tree.K[h - 1][:, 2 * j] + tree.K[h - 1][:, 2 * j + 1])  # Eq. 1
            parent = (q * tree.K[h][:, j]).sum(-1)
            right = (q * tree.K[h - 1][:, 2 * j + 1]).sum(-1)
            torch.testing.assert_close(parent - right, (q * tree.K[h - 1][:, 2 * j]).sum(-1))  # Eq. 2
            direct = (q[:, None] * keys[j << h: min(6, (j + 1) << h)].transpose(0, 1)).sum((-1, -2))
            torch.testing.assert_close(parent, direct)
    assert tree.N[3][0] == 6 and tree.N[2].tolist() == [4, 2] and tree.N[1].tolist() == [2, 2, 2, 0]


def test_edh_closed_form_matches_direct_sum():
    b, l = 0.99, 300
    start = torch.tensor([0, 5, 100, 250, 299])
    count = torch.tensor([300, 17, 128, 50, 1])
    got = log_mass("edh", None, None, count, start, l, 1.0, b).exp()
    want = torch.tensor([sum(b ** (l - 1 - t) for t in range(s, s + c)) for s, c in zip(start.tolist(), count.tolist())],
                        dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=0)


def test_masses_formulas():
    A = torch.tensor([[2.0, -1.0], [0.5, 0.5]], dtype=torch.float64)   # (buds, heads)
    Af = torch.tensor([[1.0, -3.0], [-1.0, -2.0]], dtype=torch.float64)
    c = torch.tensor([2, 4])
    s = torch.tensor([0, 2])
    lm = log_mass("alignment", A, None, c, s, 6, 0.5, 0.99)
    torch.testing.assert_close(lm.exp(), (0.5 * A / c[:, None].double()).exp().sum(1))
    torch.testing.assert_close(log_mass("rff", A, Af, c, s, 6, 0.5).exp(), torch.tensor([0.5, 0.0], dtype=torch.float64))
    torch.testing.assert_close(log_mass("positive_alignment", A, Af, c, s, 6, 0.5).exp(),
                               (Af / c[:, None].double()).exp().sum(1))
    assert torch.equal(log_mass("uniform", A, Af, c, s, 6, 0.5), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="unknown; allowed"):
        log_mass("foo", A, Af, c, s, 6, 0.5)
    # overflowed features: NaN -> zero mass, inf -> capped finite
    bad = torch.tensor([[math.nan, 1.0], [math.inf, 0.0]], dtype=torch.float64)
    lm = log_mass("favor_plus", A, bad, c, s, 6, 0.5)
    assert torch.isneginf(lm[0]) and torch.isfinite(lm[1])


def test_hash_rng_is_deterministic_and_uniform():
    n = torch.arange(20000)
    u1 = hash_uniform(7, 0, n, 3, 5)
    u2 = hash_uniform(7, 0, n, 3, 5)
    assert torch.equal(u1, u2)
    assert not torch.equal(u1, hash_uniform(8, 0, n, 3, 5))
    assert 0 < u1.min() and u1.max() < 1
    assert abs(u1.mean().item() - 0.5) < 0.01 and abs(u1.var().item() - 1 / 12) < 0.005


def test_gumbel_top1_is_proportional_to_mass():
    mass = torch.tensor([1.0, 2.0, 5.0, 0.0], dtype=torch.float64)
    n = torch.arange(20000)[:, None]
    keys = sampling_keys(mass.log(), torch.tensor([True, True, True, True]),
                         gumbel_noise(1, 0, n, 0, torch.arange(4)[None, :]))
    freq = torch.bincount(keys.argmax(1), minlength=4).double() / 20000
    torch.testing.assert_close(freq[:3], mass[:3] / 8, atol=0.015, rtol=0)
    assert freq[3] == 0  # zero-mass buds come after every positive-mass bud


def test_zero_mass_buds_rank_between_positive_and_unexpandable():
    logm = torch.tensor([-700.0, -math.inf, -math.inf, 3.0], dtype=torch.float64)
    expandable = torch.tensor([True, True, False, True])
    keys = sampling_keys(logm, expandable, torch.zeros(4, dtype=torch.float64))
    assert keys.argsort(descending=True).tolist() == [3, 0, 1, 2]
    assert keys[1] == ZERO_MASS_KEY and keys[2] == -math.inf


def test_all_zero_mass_still_reaches_T():
    # q = 0 makes every FAVOR+ReLU mass zero; buds must still be expanded to T terms
    q, k, v = _qkv(T=40, seed=7)
    q = torch.zeros_like(q)
    for impl in ("cpu", "vectorized", "reference"):
        m = _tree(E=0.5, sampler="favor_plus_relu", implementation=impl)
        m(q, k, v, True)
        st = m.stats()
        need = sum(num_terms(t + 1, 0.5) for t in range(40)) * q.shape[0] * q.shape[1]
        assert st["terms"] >= need


def test_sampling_without_replacement_and_never_leaves():
    g = torch.Generator().manual_seed(8)
    H, D, L, l = 2, 4, 64, 50
    tree = BudTree(L, H, D)
    for p in range(l):
        tree.insert(p, torch.randn(H, D, generator=g, dtype=torch.float64),
                    torch.randn(H, D, generator=g, dtype=torch.float64))
    q = torch.randn(H, D, generator=g, dtype=torch.float64)
    for sampler in ("uniform", "edh", "alignment"):
        for T, P in ((20, 4), (50, 8), (45, 3)):
            out, info = tree_attention_query(tree, q, l, T, P, sampler, "bud_mean", 0.5, 0.99, 0, 0, 0)
            assert info["rounds"] == len(info["sampled"]) > 0
            for picks in info["sampled"]:
                starts = [s for s, _ in picks]
                assert len(set(starts)) == len(starts)            # no bud twice in a round
                assert all(c >= 2 for _, c in picks)              # never a leaf
                assert 1 <= len(picks) <= P
            assert T <= info["terms"] <= T + P - 1
            assert info["initial"] + info["splits"] == info["terms"]


def test_inner_product_counts_match_algorithm():
    q, k, v = _qkv(B=2, H=3, T=50, seed=9)
    m = _tree(E=0.5, sampler="edh", implementation="cpu")
    m(q, k, v, True)
    st = m.stats()
    B, H, T = 2, 3, 50
    # replay the schedule with the reference per query and count initial buds + splits
    ref = _tree(E=0.5, sampler="edh", implementation="reference")
    ref(q, k, v, True)
    assert st == ref.stats()
    P = default_P(64, 0.5)
    lo = sum(max(num_terms(t + 1, 0.5), -(-(t + 1) // initial_width(t + 1, P))) for t in range(T)) * B * H
    hi = sum(max(num_terms(t + 1, 0.5) + P - 1, -(-(t + 1) // initial_width(t + 1, P))) for t in range(T)) * B * H
    assert lo <= st["alignment_inner_products"] <= hi
    assert st["feature_inner_products"] == 0
    assert st["full_attention_inner_products"] == sum(range(1, T + 1)) * B * H
    assert st["queries"] == B * H * T
    m.reset_stats()
    assert m.stats()["alignment_inner_products"] == 0
    f = _tree(E=0.5, sampler="rff")
    f(q, k, v, True)
    assert f.stats()["feature_inner_products"] == f.stats()["alignment_inner_products"] > 0


def test_schedule_helpers():
    assert default_P(1024, 0.5) == 4 and default_P(1024, 1.0) == 32 and default_P(1024, 0.2) == 2
    assert num_terms(1024, 0.5) == 32 and num_terms(1000, 1 / 3) == 10 and num_terms(0, 0.5) == 0
    assert initial_width(1000, 4) == 256 and initial_width(3, 32) == 1


def test_seed_determinism():
    q, k, v = _qkv(T=40, seed=10)
    a = _tree(E=0.4, sampler="uniform", seed=1)(q, k, v, True)
    b = _tree(E=0.4, sampler="uniform", seed=1)(q, k, v, True)
    c = _tree(E=0.4, sampler="uniform", seed=2)(q, k, v, True)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_bad_parameters():
    for kw, msg in [({"E": 0}, "E must be in"), ({"E": 1.5}, "E must be in"), ({"E": -0.1}, "E must be in"),
                    ({"P": 0}, "P"), ({"sampler": "foo"}, "sampler 'foo' unknown; allowed"),
                    ({"normalization": "bar"}, "normalization 'bar' unknown"), ({"R": 7}, "even"),
                    ({"b": 1.0}, "b \\(EDH base\\)"), ({"implementation": "fast"}, "implementation"),
                    ({"descent": "down"}, "descent 'down' unknown; allowed: authors, split"),
                    ({"feature_redraw": "never"}, "feature_redraw 'never' unknown"),
                    ({"normalization": "consistent"}, "renamed 'bud_mean'")]:
        with pytest.raises(ValueError, match=msg):
            attention.build("tree", **kw)
    tree = BudTree(4, 1, 2)
    for p in range(3):
        tree.insert(p, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.float64))
    q = torch.ones(1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="n_terms must satisfy"):
        tree_attention_query(tree, q, 3, 4, 1, "uniform", "bud_mean", 1.0, 0.99, 0, 0, 0)
    with pytest.raises(ValueError, match="P"):
        tree_attention_query(tree, q, 3, 2, 0, "uniform", "bud_mean", 1.0, 0.99, 0, 0, 0)
    qq, kk, vv = _qkv(B=1, T=4)
    with pytest.raises(ValueError, match="attention_mask"):
        attention.build("tree")(qq, kk, vv, True, attention_mask=torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="exclude_self needs causal"):
        _tree(True)(qq, kk, vv, False)


def test_registry_and_string_params():
    assert "tree" in attention.registered()
    m = attention.build("tree", E="0.5", P="4", R="None", seed="3")
    assert m.E == 0.5 and m.P == 4 and m.R is None and m.seed == 3


def test_auto_uses_cpu_kernel_and_falls_back_with_a_warning(monkeypatch):
    import attention.tree as tree_pkg
    m = _tree(E=0.5)
    assert m._implementation_for(torch.device("cpu")) == "cpu"
    assert m._implementation_for(torch.device("meta")) == "vectorized"

    def broken():
        raise OSError("no compiler")

    monkeypatch.setattr(tree_pkg, "load_kernel", broken)
    monkeypatch.setattr(tree_pkg, "_KERNEL_STATE", {})
    q, k, v = _qkv(B=1, T=12, seed=13)
    with pytest.warns(RuntimeWarning, match="could not be built.*vectorized"):
        out = m(q, k, v, True)
    assert m._implementation_for(torch.device("cpu")) == "vectorized"
    ref = _tree(E=0.5, implementation="reference")(q, k, v, True)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-11)


# --- issue 7: the authors' setting -------------------------------------------------------------

def test_descent_authors_makes_small_E_depend_on_the_sampler():
    # GPT-2's block size 1024, E = 0.2: P = 2 and n_terms <= 4. With "split" every round expands all
    # expandable buds, so nothing is sampled and all samplers agree; with "authors" a bud that
    # straddles the history end uses up its draw descending, a second round is needed and there
    # the sampler chooses 2 of 3 buds
    q, k, v = _qkv(B=1, H=2, T=300, D=8, seed=20)
    outs = {d: {s: _tree(E=0.2, sampler=s, descent=d, seed=1, block_size=1024)(q, k, v, True)
                for s in ("uniform", "edh", "alignment")}
            for d in ("authors", "split")}
    # (the order of the picks changes only the order of the sum over buds: rounding)
    torch.testing.assert_close(outs["split"]["uniform"], outs["split"]["edh"], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(outs["split"]["uniform"], outs["split"]["alignment"], rtol=1e-12, atol=1e-12)
    assert (outs["authors"]["uniform"] - outs["authors"]["edh"]).abs().max() > 1e-3
    assert (outs["authors"]["edh"] - outs["authors"]["alignment"]).abs().max() > 1e-3


def test_descent_authors_uses_up_the_draw():
    # l = 6, P = 2: initial buds [0, 4) and [4, 6) (level 2, width 4), both always sampled in round 0.
    # "split": [4, 6) descends to level 1 and both split in round 0 -> 4 buds, one round.
    # "authors": [4, 6) only descends (its draw is used up) -> 3 buds < n_terms = 4, so a second
    # round samples 2 of the 3 buds: which ones depends on the draws.
    H, D = 1, 2
    tree = BudTree(8, H, D)
    g = torch.Generator().manual_seed(21)
    for p in range(6):
        tree.insert(p, torch.randn(H, D, generator=g, dtype=torch.float64), torch.randn(H, D, generator=g, dtype=torch.float64))
    q = torch.randn(H, D, generator=g, dtype=torch.float64)
    seen = {"authors": set(), "split": set()}
    second_round = set()
    for seed in range(40):
        for descent in seen:
            _, info = tree_attention_query(tree, q, 6, 4, 2, "uniform", "bud_mean", 0.5, 0.99, seed, 0, 0,
                                           descent=descent)
            seen[descent].add((info["rounds"], info["splits"], info["terms"]))
            assert info["initial"] + info["splits"] == info["terms"]
            if descent == "authors":
                second_round.add(tuple(sorted(info["sampled"][1])))
    assert seen["split"] == {(1, 2, 4)}
    assert seen["authors"] == {(2, 3, 5)}
    assert len(second_round) == 3  # every pair of the 3 buds [0, 2), [2, 4), [4, 6) occurs


def test_layers_draw_independently():
    q, k, v = _qkv(B=1, H=2, T=60, D=8, seed=22)
    a0 = _tree(E=0.4, sampler="uniform", layer_idx=0)(q, k, v, True)
    a0b = _tree(E=0.4, sampler="uniform", layer_idx=0)(q, k, v, True)
    a1 = _tree(E=0.4, sampler="uniform", layer_idx=1)(q, k, v, True)
    assert torch.equal(a0, a0b) and not torch.equal(a0, a1)
    f0, f1 = (_tree(E=0.4, sampler="favor_plus", feature_redraw="per_layer", layer_idx=i).feature_map(8).W for i in (0, 1))
    assert not torch.equal(f0, f1)


@pytest.mark.parametrize("redraw", ["per_query", "per_layer"])
def test_feature_redraw_modes_and_implementations_agree(redraw):
    q, k, v = _qkv(B=2, H=2, T=23, D=8, seed=23)
    outs = {impl: _tree(E=0.6, sampler="favor_plus_relu", feature_redraw=redraw, implementation=impl, seed=4)(q, k, v, True)
            for impl in ("cpu", "vectorized", "reference")}
    torch.testing.assert_close(outs["cpu"], outs["reference"], rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(outs["vectorized"], outs["reference"], rtol=1e-9, atol=1e-11)
    fmap = _tree(sampler="favor_plus_relu", feature_redraw=redraw, seed=4).feature_map(8)
    x = q.double()
    if redraw == "per_layer":
        # one fixed W for every position
        from attention.feature_maps import favor_plus_relu_features
        torch.testing.assert_close(fmap(x), favor_plus_relu_features(x * 8 ** -0.25, fmap.W))
        assert fmap.W.shape == (8, 8)
    else:
        W = fmap.projections(23)
        assert W.shape == (23, 8, 8) and not torch.equal(W[0], W[1])
        from attention.feature_maps import favor_plus_relu_features
        for t in (0, 11, 22):
            torch.testing.assert_close(fmap(x)[:, :, t], favor_plus_relu_features(x[:, :, t] * 8 ** -0.25, W[t]))
        torch.testing.assert_close(fmap(x), fmap(x))  # same seed and length, same projections
        # counter-based: W_t is a function of (seed, layer, t) only, not of the sequence length
        from attention.feature_maps import orthogonal_gaussian_matrix, position_seed
        fresh = _tree(sampler="favor_plus_relu", feature_redraw=redraw, seed=4).feature_map(8)
        assert torch.equal(fresh.projections(5), W[:5])
        want = orthogonal_gaussian_matrix(8, 8, torch.Generator().manual_seed(position_seed(fmap.seed, 17)), "fixed")
        torch.testing.assert_close(W[17], want, rtol=0, atol=1e-14)
        other_layer = _tree(sampler="favor_plus_relu", feature_redraw=redraw, seed=4, layer_idx=1).feature_map(8)
        assert not torch.equal(other_layer.projections(23)[0], W[0])


def test_default_P_comes_from_the_model_block_size():
    m = _tree(E=0.5, block_size=1024)
    assert m.buds_per_round(100) == default_P(1024, 0.5) == 4
    assert _tree(E=0.5).buds_per_round(100) == default_P(128, 0.5) == 2
    assert _tree(E=0.5, P=3, block_size=1024).buds_per_round(100) == 3


def test_gpt_with_tree_attention_at_E1_gives_softmax_logits():
    from model import GPT, ModelConfig
    torch.manual_seed(0)
    cfg = dict(block_size=32, vocab_size=50, n_layer=2, n_head=2, n_embd=16)
    exact = GPT(ModelConfig(**cfg, attention="softmax")).double().eval()
    idx = torch.randint(0, 50, (2, 19))
    with torch.no_grad():
        want, _ = exact(idx)
        for norm in ("bud_mean", "paper"):
            # a model built with tree attention (default implementation, the CPU kernel) and the
            # softmax model's weights
            tree = GPT(ModelConfig(**cfg, attention="tree", attention_params={"E": 1.0, "normalization": norm}))
            tree.load_state_dict(exact.state_dict())
            tree = tree.double().eval()
            mechanisms = [block.attn.mechanism for block in tree.transformer.h]
            assert [m.layer_idx for m in mechanisms] == [0, 1] and {m.block_size for m in mechanisms} == {32}
            got, _ = tree(idx)
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
        for norm in ("bud_mean", "paper"):
            exact.set_attention("tree", {"E": 1.0, "normalization": norm, "sampler": "alignment"})
            got, _ = exact(idx)
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


def test_paper_normalization_is_the_printed_formula():
    # Algorithm 1 as printed: out = sum_n softmax_n(scale A_n / |n|) V_n with V_n the SUM of the
    # bud's values. Non-causal, 8 keys, P = 2, E = 0.2 -> n_terms = 2 = the two initial buds
    # [0, 4) and [4, 8): nothing is sampled, so the output is known by hand.
    H, D = 1, 4
    q, k, v = _qkv(1, H, 8, D, seed=24)
    out = _tree(E=0.2, P=2, normalization="paper", implementation="reference")(q, k, v, False)
    scale = D ** -0.5
    A = torch.stack([(q[0, 0] * k[0, 0, :4].sum(0)).sum(-1), (q[0, 0] * k[0, 0, 4:].sum(0)).sum(-1)], dim=-1)  # (8, 2)
    w = torch.softmax(scale * A / 4, dim=-1)
    V = torch.stack([v[0, 0, :4].sum(0), v[0, 0, 4:].sum(0)])  # (2, D)
    torch.testing.assert_close(out[0, 0], w @ V, rtol=1e-12, atol=1e-12)
    bud_mean = _tree(E=0.2, P=2, normalization="bud_mean", implementation="reference")(q, k, v, False)
    torch.testing.assert_close(bud_mean[0, 0], w @ (V / 4), rtol=1e-12, atol=1e-12)  # equal sizes: /|n|


def test_numpy_baseline_matches_reference_where_no_draw_matters():
    # the baseline claims the authors' rule: causal, exclude_self, descent "authors", "paper"
    # normalization. Its random generator differs from ours, so compare at the positions where
    # every round expands all expandable buds (no draw matters), found with the reference's info.
    from attention.tree.numpy_baseline import numpy_baseline_forward
    from attention.tree.reference import reference_forward
    H, D, T, E, P = 2, 4, 40, 0.6, 4
    q, k, v = _qkv(1, H, T, D, seed=25)
    base, _ = numpy_baseline_forward(q, k, v, E, sampler="alignment", P=P, seed=3)
    ref = reference_forward(q, k, v, True, True, E, P, "alignment", "paper", 0.99, 0, descent="authors")
    tree, checked = BudTree(64, H, D), []
    for t in range(T):
        if t > 0:
            _, info = tree_attention_query(tree, q[0, :, t], t, num_terms(t, E), P, "alignment", "paper",
                                           D ** -0.5, 0.99, 0, 0, t, descent="authors")
            if all(len(s) == n for s, n in zip(info["sampled"], info["expandable"])):
                checked.append(t)
                torch.testing.assert_close(torch.from_numpy(base[:, t]), ref[0, :, t], rtol=1e-9, atol=1e-11)
        tree.insert(t, k[0, :, t], v[0, :, t])
    assert len(checked) >= 10 and max(checked) >= 16  # includes positions with real expansion rounds
    torch.testing.assert_close(torch.from_numpy(numpy_baseline_forward(q, k, v, 1.0)[0]),
                               _softmax(q, k, v, True, True)[0], rtol=1e-9, atol=1e-11)


def test_training_through_tree_attention_raises():
    q, k, v = (x.requires_grad_() for x in _qkv(B=1, H=2, T=8, D=4))
    with pytest.raises(RuntimeError, match="inference-only"):
        _tree(E=0.5)(q, k, v, True)
    with torch.no_grad():
        assert _tree(E=0.5)(q, k, v, True).shape == q.shape
    # a model trained with tree attention fails loudly instead of leaving c_attn without gradients
    from model import GPT, ModelConfig
    gpt = GPT(ModelConfig(block_size=16, vocab_size=20, n_layer=1, n_head=2, n_embd=8, attention="tree"))
    idx = torch.randint(0, 20, (1, 9))
    with pytest.raises(RuntimeError, match="inference-only.*eval_ppl.py.*torch.no_grad"):
        gpt(idx, targets=idx)
