"""Tests of Fastmax attention (attention/fastmax/): every implementation against the reference."""
import math
import os
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels on CPU tensors (set before import)

import pytest  # noqa: E402
import torch  # noqa: E402

import attention  # noqa: E402
import attention.fastmax  # noqa: E402,F401  (registers "fastmax")
from attention.fastmax import chunked, fast_forward  # noqa: E402
from attention.fastmax.function import FastmaxFunction, coefficients, fastmax_factorized  # noqa: E402
from attention.fastmax.dropout import DROPOUT_VARIANTS, draw_dropout_masks, numerator_keys  # noqa: E402
from attention.fastmax.reference import (fastmax_weights, kernel_minimum, normalize_qk,  # noqa: E402
                                         reference_forward, score_bound)

NORMALIZATIONS = ("max_norm", "paper", "none")
# temperature per normalization that keeps p = 1 denominators away from zero on random inputs
TEMPERATURE = {"max_norm": 1.0, "paper": 8.0, "none": 6.0}


def _qkv(B=2, H=2, T=37, D=8, seed=0, dtype=torch.float64, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g, dtype=dtype).requires_grad_(grad) for _ in range(3)]


def _padding(B, T, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, T, generator=g) > 0.3
    mask[0, :3] = False  # left padding: causal rows 0..2 of batch 0 have no allowed key
    mask[-1, -1] = False
    return mask


def _params(p, normalization, **extra):
    return dict(p=p, normalization=normalization, temperature=TEMPERATURE[normalization], **extra)


def _assert_close(actual, expected, rtol=1e-9, atol=1e-11):
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# reference: definitions


def test_reference_matches_explicit_formula():
    # o_i = sum_j f(s_ij) v_j / sum_j f(s_ij) written with Python loops for one head
    q, k, v = _qkv(B=1, H=1, T=6, D=4, seed=3)
    a0, a1, a2, temp = 0.7, 1.3, 0.4, 2.0
    out = reference_forward(q, k, v, True, p=2, a0=a0, a1=a1, a2=a2, temperature=temp, normalization="none")
    for i in range(6):
        weights = [a0 + a1 * s + a2 * s * s for s in (float(q[0, 0, i] @ k[0, 0, j]) / temp for j in range(i + 1))]
        expected = sum(w * v[0, 0, j] for j, w in enumerate(weights)) / sum(weights)
        _assert_close(out[0, 0, i], expected)


def test_paper_normalization_is_eq_5_6():
    q, k, _ = _qkv(T=5, D=16)
    q_hat, k_hat = normalize_qk(q, k, "paper")
    for x, x_hat in ((q, q_hat), (k, k_hat)):
        expected = (x - x.mean(-1, keepdim=True)) / x.std(-1, unbiased=False, keepdim=True)
        _assert_close(x_hat, expected, rtol=1e-5, atol=1e-5)  # differs by the 1e-5 variance epsilon
        _assert_close(x_hat.mean(-1), torch.zeros_like(x_hat[..., 0]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_max_norm_normalization(causal):
    q, k, _ = _qkv(T=9, D=4)
    q = q * torch.linspace(0.5, 3.0, 9, dtype=q.dtype)[:, None]  # growing norms: running max matters
    mask = _padding(2, 9)
    q_hat, _ = normalize_qk(q, k, "max_norm", lim=2.0, causal=causal, attention_mask=mask)
    norms = q.norm(dim=-1).masked_fill(~mask[:, None, :], 0)
    for t in range(9):
        scope = norms[..., :t + 1] if causal else norms
        largest = torch.maximum(scope.amax(-1), q.norm(dim=-1)[..., t])
        _assert_close(q_hat[..., t, :], 2.0 * q[..., t, :] / largest[..., None])
    assert (q_hat.norm(dim=-1) <= 2.0 + 1e-12).all()


# ---------------------------------------------------------------------------------------------
# fast PyTorch path against the reference (float64)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_pytorch_path_matches_reference(p, causal, normalization, padded):
    q, k, v = _qkv(T=37, grad=True)  # 37 = 2 chunks of 16 + 5
    mask = _padding(2, 37) if padded else None
    params = _params(p, normalization, a0=0.9, a1=1.1, a2=0.6)
    ref = reference_forward(q, k, v, causal, mask, **params)
    fast = fast_forward(q, k, v, causal, mask, **params, chunk_size=16)
    _assert_close(fast, ref)
    grad_out = torch.randn_like(ref)
    for g_fast, g_ref in zip(torch.autograd.grad(fast, (q, k, v), grad_out),
                             torch.autograd.grad(ref, (q, k, v), grad_out)):
        _assert_close(g_fast, g_ref, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("T,chunk", [(1, 16), (16, 16), (17, 16), (64, 16), (5, 64)])
@pytest.mark.parametrize("p", [1, 2])
def test_pytorch_path_sequence_lengths(T, chunk, p):
    q, k, v = _qkv(B=1, H=3, T=T, grad=True)
    for causal in (False, True):
        ref = reference_forward(q, k, v, causal, p=p)
        fast = fast_forward(q, k, v, causal, p=p, chunk_size=chunk)
        _assert_close(fast, ref)
        g_fast = torch.autograd.grad(fast.sum(), (q, k, v))
        g_ref = torch.autograd.grad(ref.sum(), (q, k, v))
        for a, b in zip(g_fast, g_ref):
            _assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("dropout", [False, True])
def test_groups_of_chunks_carry_state(monkeypatch, p, dropout):
    # budgets of one chunk per group (one position per slice) exercise the carry between groups
    q, k, v = _qkv(T=70, grad=True)
    masks = draw_dropout_masks("standard", 0.3, p, tuple(k.shape), k.device,
                               torch.Generator().manual_seed(0)) if dropout else None
    params = dict(p=p, dropout_variant="standard", dropout_rate=0.3 if dropout else 0.0, dropout_masks=masks)
    for causal in (False, True):
        ref = reference_forward(q, k, v, causal, **params)
        monkeypatch.setattr(chunked, "STATE_BUDGET", 1)
        monkeypatch.setattr(chunked, "CACHE_BUDGET", 1)
        fast = fast_forward(q, k, v, causal, **params, chunk_size=16)
        g_fast = torch.autograd.grad(fast.sum(), (q, k, v))
        monkeypatch.undo()
        _assert_close(fast, ref)
        for a, b in zip(g_fast, torch.autograd.grad(ref.sum(), (q, k, v))):
            _assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dropout", [None, "separate", "shared"])
def test_gradcheck_custom_function(p, causal, dropout):
    # dropout: three numerator keys of their own, or one tensor as k_linear and k_quad_a with
    # k_quad_b = k (the "1d" variant's pattern: identical tensors in two slots)
    B, H, T, D = 1, 2, 11, 3
    g = torch.Generator().manual_seed(5)
    count = {None: 3, "separate": 6, "shared": 4}[dropout]
    q, k, v, *keys = [(torch.randn(B, H, T, D, generator=g, dtype=torch.float64) * 0.5).requires_grad_()
                      for _ in range(count)]
    key_weight = torch.ones(B, T, dtype=torch.float64)
    key_weight[0, 4] = 0.0  # a padded key
    coeffs = coefficients(p, 1.0, 0.8, 0.3, 1.5)
    real = key_weight[:, None, :, None]

    def fn(q, k, v, *keys):  # the Function expects keys and values zeroed at padded keys
        keys = [key * real for key in keys]
        numerator = {None: [None] * 3, "separate": keys, "shared": keys[:1] * 2 + [None]}[dropout]
        return FastmaxFunction.apply(q, k * real, v * real, *numerator, key_weight, causal, coeffs, 4, "pytorch")

    assert torch.autograd.gradcheck(fn, (q, k, v, *keys), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_custom_function_with_scales(p, causal):
    # q_scale / k_scale (max_norm applied inside the fast path): gradients to q, k, v and the scales
    B, H, T, D = 1, 2, 11, 3
    g = torch.Generator().manual_seed(6)
    q, k, v = [(torch.randn(B, H, T, D, generator=g, dtype=torch.float64) * 0.5).requires_grad_() for _ in range(3)]
    q_scale, k_scale = [(torch.rand(B, H, T, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
                        for _ in range(2)]
    key_weight = torch.ones(B, T, dtype=torch.float64)
    key_weight[0, 4] = 0.0
    coeffs = coefficients(p, 1.0, 0.8, 0.3, 1.5)

    def fn(q, k, v, q_scale, k_scale):
        return FastmaxFunction.apply(q, k, v * key_weight[:, None, :, None], None, None, None, key_weight, causal,
                                     coeffs, 4, "pytorch", q_scale, k_scale * key_weight[:, None, :])

    assert torch.autograd.gradcheck(fn, (q, k, v, q_scale, k_scale), eps=1e-6, atol=1e-7)
    # the same as scaling outside
    ref = FastmaxFunction.apply(q * q_scale[..., None], k * (k_scale * key_weight[:, None, :])[..., None],
                                v * key_weight[:, None, :, None], None, None, None, key_weight, causal, coeffs, 4,
                                "pytorch")
    _assert_close(fn(q, k, v, q_scale, k_scale), ref)
    with pytest.raises(ValueError, match="q_scale"):
        FastmaxFunction.apply(q, k, v, k * 2, None, None, key_weight, causal, coeffs, 4, "pytorch", q_scale, k_scale)


def test_memory_saved_for_backward_is_linear_in_T():
    # section 2.5: no per-position states are stored, only O(T D) tensors
    B, H, T, D = 1, 2, 64, 8
    q, k, v = _qkv(B, H, T, D, grad=True)
    for p in (1, 2):
        out = fast_forward(q, k, v, True, p=p, chunk_size=16)
        node = out.grad_fn
        while node is not None and not hasattr(node, "saved_tensors"):
            node = node.next_functions[0][0]
        saved = sum(t.numel() for t in node.saved_tensors if t is not None)
        assert saved <= 5 * B * H * T * D  # q, k, v, out + denominator
        assert saved < B * H * T * D * D  # far below one per-position D x D state


# ---------------------------------------------------------------------------------------------
# structure of the package (the Triton kernels: tests/attention/test_fastmax_triton.py)


def test_backends_import_nothing_of_the_package():
    """function.py imports the backends; chunked.py imports no module of the repository, and the
    Triton kernels (kernels/) only each other (no circle, no import of the package's __init__ names)."""
    import ast
    import pathlib
    folder = pathlib.Path(chunked.__file__).parent

    def imported(name):
        found = set()
        for node in ast.walk(ast.parse((folder / name).read_text())):
            if isinstance(node, ast.ImportFrom):
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        return {m for m in found if m.split(".")[0] == "attention"}

    assert imported("chunked.py") == set()
    for name in ("__init__.py", "chunk.py", "parallel.py", "common.py"):
        assert all(m.startswith("attention.fastmax.kernels.") for m in imported(f"kernels/{name}")), name
    assert imported("function.py") == {"attention.fastmax.chunked", "attention.fastmax.kernels"}


# ---------------------------------------------------------------------------------------------
# attention weights and the sign of the denominator (Eq. 10)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
@pytest.mark.parametrize("causal", [False, True])
def test_p2_weights_nonnegative_and_rows_sum_to_one(normalization, causal):
    q, k, _ = _qkv(T=23, D=16)
    q, k = 4 * q, 4 * k  # large scores: s^2 dominates
    mask = _padding(2, 23)
    A = fastmax_weights(q, k, causal, mask, p=2, normalization=normalization)
    assert (A >= 0).all()
    sums = A.sum(-1)
    has_key = (torch.ones(23, 23).tril() if causal else torch.ones(23, 23)).bool()[None, None] & mask[:, None, None, :]
    has_key = has_key.any(-1).expand_as(sums)
    _assert_close(sums[has_key], torch.ones_like(sums[has_key]))
    assert (sums[~has_key] == 0).all()


def test_p1_max_norm_defaults_give_nonnegative_weights():
    q, k, _ = _qkv(T=23, D=16)
    for causal in (False, True):
        A = fastmax_weights(3 * q, -3 * k, causal, p=1, normalization="max_norm")
        assert (A >= 0).all()
    assert kernel_minimum(1, 1.0, 1.0, 0.5, score_bound("max_norm", 16, 1.0, 1.0)) == 0.0
    assert kernel_minimum(2, 1.0, 1.0, 0.5, math.inf) == 0.5


def test_p1_negative_weights_warn_and_stay_exact():
    # "paper" + p = 1 at temperature 1: |s| up to D, f(s) = 1 + s < 0 for s < -1
    q, k, v = _qkv(T=20, D=16, grad=True)
    module = attention.build("fastmax", p=1, normalization="paper", temperature=1.0, implementation="pytorch")
    with pytest.warns(RuntimeWarning, match="can be negative"):
        out = module(q, k, v, causal=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per module
        module(q, k, v, causal=False)
    A = fastmax_weights(q, k, False, p=1, normalization="paper")
    assert (A < 0).any()  # the case the decision is about
    _assert_close(A.sum(-1), torch.ones(2, 2, 20, dtype=A.dtype), rtol=1e-8, atol=1e-8)  # signed weights sum to 1
    ref = reference_forward(q, k, v, False, p=1, normalization="paper")
    _assert_close(out, ref, rtol=1e-7, atol=1e-9)  # the exact ratio, not clamped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attention.build("fastmax", p=1)(q, k, v, causal=True)  # defaults: "paper" at temperature D, |s| <= 1
        attention.build("fastmax", p=1, normalization="max_norm")(q, k, v, causal=True)  # lim 1, temperature 1


def test_rows_without_allowed_key_are_zero_with_finite_gradients():
    q, k, v = _qkv(T=20, grad=True)
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[0, :4] = False
    mask[1] = False  # a fully padded sequence
    for impl in ("reference", "pytorch"):
        out = attention.build("fastmax", implementation=impl, chunk_size=16)(q, k, v, True, mask)
        assert (out[0, :, :4] == 0).all() and (out[1] == 0).all()
        grads = torch.autograd.grad(out.sum(), (q, k, v))
        assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("implementation", ["reference", "pytorch", "triton"])
def test_p1_zero_denominator_is_guarded(implementation):
    """p = 1, causal max_norm (lim 1, temperature 1): q0 and k0 antiparallel give s = -1, f = 1 + s = 0 at
    position 0, the row's only key, so its denominator is exactly 0. The guard makes such a row
    output zeros with zero gradient (like a row without an allowed key) instead of 0/0 = NaN."""
    q, k, v = _qkv(B=1, H=1, T=20, D=16, dtype=torch.float32)
    q[0, 0, 0], k[0, 0, 0] = 0.0, 0.0
    q[0, 0, 0, 0], k[0, 0, 0, 0] = 2.0, -3.0  # exactly antiparallel: q_hat0 . k_hat0 = -1 exactly
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    out = attention.build("fastmax", p=1, normalization="max_norm", implementation=implementation,
                          chunk_size=16)(q, k, v, True)
    assert torch.isfinite(out).all() and (out[0, 0, 0] == 0).all()
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    later = reference_forward(q.detach(), k.detach(), v.detach(), True, p=1)[0, 0, 1:]
    torch.testing.assert_close(out[0, 0, 1:].detach(), later, rtol=1e-5, atol=1e-5)  # other rows unchanged


@pytest.mark.parametrize("implementation", ["reference", "pytorch"])
@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_causal_outputs_ignore_later_tokens_and_padding(implementation, normalization):
    q, k, v = _qkv(T=30)
    module = attention.build("fastmax", normalization=normalization, implementation=implementation, chunk_size=16)
    out = module(q, k, v, causal=True)
    q2, k2, v2 = [t.clone() for t in (q, k, v)]
    for t in (q2, k2, v2):
        t[:, :, 20:] = 50 * torch.randn_like(t[:, :, 20:])  # large: would change any max norm
    _assert_close(module(q2, k2, v2, causal=True)[:, :, :20], out[:, :, :20])
    # padded tokens' content does not matter (non-causal, every normalization)
    mask = _padding(2, 30)
    real = mask[:, None, :, None]
    out = module(q, k, v, causal=False, attention_mask=mask)
    q2, k2, v2 = [torch.where(real, t, 50 * torch.randn_like(t)) for t in (q, k, v)]
    out2 = module(q2, k2, v2, causal=False, attention_mask=mask)
    _assert_close(out2[real.expand_as(out2)], out[real.expand_as(out)])


@pytest.mark.parametrize("p", [1, 2])
def test_fast_path_is_exactly_causal_in_float32(p):
    """Not even rounding leaks from later tokens: earlier outputs are bit-identical, and the gradient
    of earlier outputs is exactly zero for later keys and values (exclusive scans are shifted sums,
    not inclusive sums minus the chunk's own term)."""
    q, k, v = _qkv(T=45, dtype=torch.float32)
    module = attention.build("fastmax", p=p, implementation="pytorch", chunk_size=16)
    out = module(q, k, v, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 40:], v2[:, :, 40:] = 3 * torch.randn_like(k2[:, :, 40:]), 3 * torch.randn_like(v2[:, :, 40:])
    assert torch.equal(module(q, k2, v2, causal=True)[:, :, :40], out[:, :, :40])
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    _, dk, dv = torch.autograd.grad(module(q, k, v, causal=True)[:, :, :40].sum(), (q, k, v))
    assert torch.count_nonzero(dk[:, :, 40:]) == 0 and torch.count_nonzero(dv[:, :, 40:]) == 0


def test_exclusive_scan_is_the_cuda_branch():
    assert chunked._exclusive_for(torch.device("cuda")) is chunked._exclusive_scan
    assert chunked._exclusive_for(torch.device("cpu")) is chunked._exclusive_running


@pytest.mark.parametrize("chunks", [1, 2, 5])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("with_carry", [False, True])
def test_exclusive_scan_matches_running_sum(chunks, reverse, with_carry):
    g = torch.Generator().manual_seed(chunks)
    shapes = [(3,), (4, 3), (10, 3)]  # like x1, x2, x3: (N, G, ...)
    sums = [torch.randn(2, chunks, *shape, generator=g, dtype=torch.float64) for shape in shapes]
    carry = [torch.randn(2, *shape, generator=g, dtype=torch.float64) for shape in shapes] if with_carry else None
    states, new_carry = chunked._exclusive_scan(sums, carry, reverse)
    expected_states, expected_carry = chunked._exclusive_running(sums, carry, reverse)
    for actual, expected in zip(states + new_carry, expected_states + expected_carry):
        _assert_close(actual, expected, rtol=1e-13, atol=1e-13)
    # the definition: carry plus the sums of the strictly earlier (later, reverse) chunks
    for c in range(chunks):
        others = slice(c + 1, None) if reverse else slice(0, c)
        expected = sums[1][:, others].sum(1) + (carry[1] if with_carry else 0.0)
        _assert_close(states[1][:, c], expected, rtol=1e-13, atol=1e-13)
    # a chunk's own and later (earlier, reverse) sums never reach its state, not even by rounding
    changed = [x.clone() for x in sums]
    c = 0 if reverse else chunks - 1
    for x in changed:
        x[:, c] = 1e6 * torch.randn(x[:, c].shape, generator=g, dtype=x.dtype)
    changed_states, _ = chunked._exclusive_scan(changed, carry, reverse)
    for a, b in zip(changed_states, states):
        assert torch.equal(a, b)


@pytest.mark.parametrize("p", [1, 2])
def test_fast_path_with_the_cuda_scan_matches_reference_and_is_causal(monkeypatch, p):
    """The CUDA branch of ``_exclusive`` forced on CPU tensors: outputs and gradients against the
    reference (groups of several chunks and a carry between groups), and no leak from later tokens."""
    calls = []

    def scan(sums, carry, reverse=False):
        calls.append((sums[0].shape[1], carry is not None, reverse))
        return chunked._exclusive_scan(sums, carry, reverse)
    monkeypatch.setattr(chunked, "_exclusive_for", lambda device: scan)
    budget = {1: 30_000, 2: 60_000}[p]  # groups of 2 to 4 chunks of 16 positions, carried across
    monkeypatch.setattr(chunked, "STATE_BUDGET", budget)
    monkeypatch.setattr(chunked, "CACHE_BUDGET", budget)
    q, k, v = _qkv(T=70, grad=True)  # 5 chunks of 16
    mask = _padding(2, 70)
    ref = reference_forward(q, k, v, True, mask, p=p)
    fast = fast_forward(q, k, v, True, mask, p=p, chunk_size=16, backend="pytorch")
    _assert_close(fast, ref)
    grad_out = torch.randn_like(ref)
    for g_fast, g_ref in zip(torch.autograd.grad(fast, (q, k, v), grad_out),
                             torch.autograd.grad(ref, (q, k, v), grad_out)):
        _assert_close(g_fast, g_ref, rtol=1e-8, atol=1e-10)
    assert any(chunks > 1 and has_carry for chunks, has_carry, _ in calls)
    assert any(chunks > 1 and has_carry and reverse for chunks, has_carry, reverse in calls)

    t = 40  # positions > t changed: outputs at <= t bit-identical, their gradient zero for later keys
    q, k, v = (x.detach().float() for x in (q, k, v))
    out = fast_forward(q, k, v, True, p=p, chunk_size=16, backend="pytorch")
    k2, v2 = k.clone(), v.clone()
    k2[:, :, t + 1:], v2[:, :, t + 1:] = 3 * torch.randn_like(k2[:, :, t + 1:]), 3 * torch.randn_like(v2[:, :, t + 1:])
    assert torch.equal(fast_forward(q, k2, v2, True, p=p, chunk_size=16, backend="pytorch")[:, :, :t + 1],
                       out[:, :, :t + 1])
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = fast_forward(q, k, v, True, p=p, chunk_size=16, backend="pytorch")
    _, dk, dv = torch.autograd.grad(out[:, :, :t + 1].sum(), (q, k, v))
    assert torch.count_nonzero(dk[:, :, t + 1:]) == 0 and torch.count_nonzero(dv[:, :, t + 1:]) == 0


def test_low_precision_inputs_accumulate_in_float32():
    q, k, v = _qkv(T=40, D=16)
    ref = reference_forward(q, k, v, True)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        out = fast_forward(q.to(dtype), k.to(dtype), v.to(dtype), True, chunk_size=16)
        assert out.dtype == dtype
        tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}[dtype]
        torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------------
# dropout (section 2.4)


def _dropout_params(variant):
    p = 2
    return p, dict(p=p, normalization="max_norm", temperature=0.5, a1=1.0, a2=0.5)


@pytest.mark.parametrize("variant", DROPOUT_VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
def test_dropout_fast_path_matches_reference_with_same_masks(variant, causal):
    for p in (1, 2):
        if variant == "quadratic" and p == 1:
            continue
        q, k, v = _qkv(T=37, grad=True)
        mask = _padding(2, 37)
        masks = draw_dropout_masks(variant, 0.3, p, tuple(k.shape), "cpu", torch.Generator().manual_seed(2))
        kw = dict(p=p, dropout_variant=variant, dropout_rate=0.3, dropout_masks=masks)
        ref = reference_forward(q, k, v, causal, mask, **kw)
        fast = fast_forward(q, k, v, causal, mask, **kw, chunk_size=16)
        _assert_close(fast, ref)
        assert not torch.allclose(ref, reference_forward(q, k, v, causal, mask, p=p))  # masks did something
        grad_out = torch.randn_like(ref)
        for a, b in zip(torch.autograd.grad(fast, (q, k, v), grad_out), torch.autograd.grad(ref, (q, k, v), grad_out)):
            _assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("implementation", ["reference", "pytorch"])
def test_dropout_rate_zero_is_identity_and_eval_is_deterministic(implementation):
    q, k, v = _qkv(T=20)
    plain = attention.build("fastmax", implementation=implementation, chunk_size=16).eval()(q, k, v, True)
    zero = attention.build("fastmax", dropout=0.0, implementation=implementation, chunk_size=16).train()
    _assert_close(zero(q, k, v, True), plain)
    module = attention.build("fastmax", dropout=0.5, implementation=implementation, chunk_size=16)
    module.eval()
    _assert_close(module(q, k, v, True), plain)
    _assert_close(module(q, k, v, True), plain)
    module.train()
    a, b = module(q, k, v, True), module(q, k, v, True)
    assert not torch.allclose(a, b) and not torch.allclose(a, plain)
    torch.manual_seed(7)
    a = module(q, k, v, True)
    torch.manual_seed(7)
    _assert_close(module(q, k, v, True), a)  # masks come from torch's global RNG


def test_dropout_same_seed_same_output_in_every_implementation():
    q, k, v = _qkv(T=20)
    outs = []
    for impl in ("reference", "pytorch"):
        module = attention.build("fastmax", dropout=0.3, dropout_variant="standard", implementation=impl, chunk_size=16)
        torch.manual_seed(3)
        outs.append(module.train()(q, k, v, True))
    _assert_close(outs[1], outs[0])


@pytest.mark.parametrize("variant", DROPOUT_VARIANTS)
def test_dropout_preserves_expected_output(variant):
    """Monte Carlo over many independent masks (one per batch copy): the mean output matches the
    output without dropout within 5 standard errors, while a missing 1 / keep rescaling of the
    dropped terms is rejected by the same criterion."""
    draws, rate = 3000, 0.4
    q, k, v = _qkv(B=1, H=1, T=9, D=4, seed=11)
    q, k, v = [t.expand(draws, 1, 9, 4).contiguous() for t in (q, k, v)]
    p, params = _dropout_params(variant)
    exact = reference_forward(q[:1], k[:1], v[:1], True, **params)[0, 0]
    torch.manual_seed(0)
    masks = draw_dropout_masks(variant, rate, p, tuple(k.shape), "cpu")

    def z_scores(unscale):
        q_hat, k_hat = normalize_qk(q, k, params["normalization"], causal=True)
        keys = list(numerator_keys(k_hat, masks, variant, rate, p))
        if unscale:  # the wrong rescaling: dropped terms not divided by keep
            keep = 1 - rate
            keys = [key if key is k_hat or key is None else key * (keep if variant == "1d" or i == 0 else keep ** 0.5)
                    for i, key in enumerate(keys)]
        coeffs = coefficients(p, 1.0, params["a1"], params["a2"], params["temperature"])
        outs = fastmax_factorized(q_hat, k_hat, v, True, coeffs, None, keys, 16)
        mean, se = outs.mean(0)[0], outs.std(0)[0] / math.sqrt(draws)
        varying = se > 1e-12
        return ((mean - exact)[varying] / se[varying]).abs()

    z = z_scores(unscale=False)
    assert z.max() < 5.0, z.max()
    assert z_scores(unscale=True).max() > 10.0


# ---------------------------------------------------------------------------------------------
# module: registry, parameters, errors


def test_registered_with_parameters():
    assert "fastmax" in attention.registered()
    assert attention.accepted_params("fastmax") == {
        "p": 2, "a0": 1.0, "a1": 1.0, "a2": 0.5, "temperature": None, "normalization": "paper", "lim": 1.0,
        "dropout": 0.0, "dropout_variant": "auto", "implementation": "auto", "chunk_size": None,
        "triton_kernel": "auto"}


def test_default_dropout_variant_is_valid_for_both_degrees():
    q, k, v = _qkv(T=20, dtype=torch.float32)
    for p, resolved in ((1, "standard"), (2, "quadratic")):
        module = attention.build("fastmax", p=p, dropout=0.1)  # raised for p = 1 before
        assert module.dropout_variant == resolved
        torch.manual_seed(0)
        out = module.train()(q, k, v, True)
        assert torch.isfinite(out).all()
        assert not torch.allclose(out, module.eval()(q, k, v, True))  # dropout acts in training only


def test_output_noise_variant_is_the_authors_cuda_dropout():
    """The authors' CUDA extension: output x (1 + rate N(0, 1)) per element; the same draw here."""
    q, k, v = _qkv(T=20, dtype=torch.float32)
    module = attention.build("fastmax", p=2, dropout=0.25, dropout_variant="output_noise").train()
    clean = module.eval()(q, k, v, True)
    module.train()
    torch.manual_seed(3)
    noisy = module(q, k, v, True)
    torch.manual_seed(3)
    expected = clean * (1.0 + 0.25 * torch.randn_like(clean))
    torch.testing.assert_close(noisy, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="allowed: auto, quadratic, standard, 1d, output_noise"):
        attention.build("fastmax", dropout_variant="2d")


def test_default_is_paper_at_the_auto_temperature():
    """The defaults (docs/fastmax.md, chosen on recall): "paper" at temperature D for p = 1 (|s| <= 1,
    so every weight is >= 0) and sqrt(D) for p = 2; the default temperature is 1 with the other normalizations."""
    D = 16
    q, k, v = _qkv(T=23, D=D)
    for p, temperature in ((1, float(D)), (2, math.sqrt(D))):
        module = attention.build("fastmax", p=p)
        assert (module.normalization, module.temperature) == ("paper", None)
        assert module.temperature_for(D) == pytest.approx(temperature)
        expected = reference_forward(q, k, v, True, p=p, normalization="paper", temperature=temperature)
        _assert_close(module(q, k, v, True), expected)
        assert attention.build("fastmax", p=p, normalization="max_norm").temperature_for(D) == 1.0
        assert attention.build("fastmax", p=p, normalization="none").temperature_for(D) == 1.0
    assert kernel_minimum(1, 1.0, 1.0, 0.5, score_bound("paper", D, 1.0, float(D))) == 0.0
    A = fastmax_weights(3 * q, -3 * k, False, p=1, normalization="paper", temperature=float(D))
    assert (A >= -1e-12).all()


@pytest.mark.filterwarnings("ignore:fastmax. with p=1")  # p = 1 at sqrt(D) allows negative weights
@pytest.mark.parametrize("name,value", [("head_dim", lambda D: float(D)), ("sqrt_head_dim", math.sqrt)])
@pytest.mark.parametrize("p", [1, 2])
def test_named_temperature_is_the_number_for_the_input_head_dim(name, value, p):
    for D in (8, 18):
        q, k, v = _qkv(T=21, D=D)
        named = attention.build("fastmax", p=p, normalization="paper", temperature=name)
        assert named.temperature_for(D) == pytest.approx(value(D))
        expected = reference_forward(q, k, v, True, p=p, normalization="paper", temperature=value(D))
        _assert_close(named(q, k, v, True), expected)
    with pytest.raises(ValueError, match=r"temperature must be a number > 0 or one of head_dim, sqrt_head_dim; "
                                         r"got 'sqrt_d'"):
        attention.build("fastmax", temperature="sqrt_d")


def test_auto_uses_pytorch_on_cpu_and_matches():
    q, k, v = _qkv(T=20)
    module = attention.build("fastmax", p=1)
    assert module.implementation_for(q) == "pytorch"
    expected = reference_forward(q, k, v, True, p=1, normalization="paper", temperature=float(q.shape[-1]))
    _assert_close(module(q, k, v, True), expected)


@pytest.mark.parametrize("params,match", [
    (dict(p=3), r"p must be 1 or 2"),
    (dict(p=2.5), r"p must be 1 or 2"),
    (dict(normalization="layer"), r"normalization 'layer' unknown; allowed: max_norm, paper, none"),
    (dict(dropout_variant="2d"), r"dropout_variant '2d' unknown; allowed: auto, quadratic, standard, 1d"),
    (dict(p=1, dropout=0.1, dropout_variant="quadratic"), r"'quadratic' needs p = 2.*'standard' or '1d'"),
    (dict(implementation="cuda"), r"implementation 'cuda' unknown; allowed: auto, pytorch, triton, reference"),
    (dict(temperature=0), r"temperature must be > 0"),
    (dict(lim=-1.0), r"lim must be > 0"),
    (dict(dropout=1.0), r"dropout must be in \[0, 1\)"),
    (dict(chunk_size=48), r"chunk_size must be a power of two in \[16, 1024\]"),
    (dict(triton_kernel="flash"), r"triton_kernel 'flash' unknown; allowed: auto, chunk, parallel"),
    (dict(p=1, triton_kernel="parallel"), r"triton_kernel 'parallel' computes p = 2 only"),
])
def test_bad_parameters_raise(params, match):
    with pytest.raises(ValueError, match=match):
        attention.build("fastmax", **params)


def test_bad_inputs_raise():
    q, k, v = _qkv(T=8, D=24)
    with pytest.raises(ValueError, match=r"head dims 16, 32, 64, 128.*got q/k head dim 24"):
        attention.build("fastmax", implementation="triton")(q, k, v, True)
    q16, k16, v16 = _qkv(T=8, D=16)
    with pytest.raises(ValueError, match=r"chunk_size in 16, 32, 64, 128 \(or None for the module's default\); got 256"):
        attention.build("fastmax", implementation="triton", chunk_size=256)(q16, k16, v16, True)
    with pytest.raises(ValueError, match=r"no dropout on the factorized terms; use dropout_variant='output_noise'"):
        attention.build("fastmax", implementation="triton", dropout=0.1).train()(q16, k16, v16, True)
    with pytest.raises(ValueError, match="as many queries as keys"):
        attention.build("fastmax")(q[:, :, :5], k, v, True)
    with pytest.raises(ValueError, match="attention_mask|mask"):
        attention.build("fastmax")(q, k, v, True, torch.ones(2, 8))  # not bool


def test_gpt_trains_with_fastmax():
    from model import GPT, ModelConfig
    torch.manual_seed(0)
    for p in (1, 2):
        config = ModelConfig(block_size=32, vocab_size=50, n_layer=2, n_head=2, n_embd=32, attention="fastmax",
                             attention_params={"p": p, "chunk_size": 16})
        model = GPT(config)
        idx = torch.randint(0, 50, (2, 32))
        _, loss = model(idx, targets=idx)
        loss.backward()
        assert torch.isfinite(loss)
        assert all(torch.isfinite(prm.grad).all() for prm in model.parameters() if prm.grad is not None)


# ---------------------------------------------------------------------------------------------
# benchmark helpers


@pytest.mark.parametrize("normalization", ["none", "max_norm"])
def test_authors_formulation_matches_reference(normalization):
    from attention.fastmax.authors_baseline import authors_formulation
    q, k, v = _qkv(T=19)
    for p in (1, 2):
        for causal in (False, True):
            kw = dict(p=p, normalization=normalization, temperature=TEMPERATURE[normalization], a2=0.3)
            _assert_close(authors_formulation(q, k, v, causal, **kw), reference_forward(q, k, v, causal, **kw))


def test_autocast_does_not_lower_the_accumulation_precision():
    q, k, v = _qkv(T=40, D=16, dtype=torch.float32, grad=True)
    for impl in ("pytorch", "reference"):
        module = attention.build("fastmax", implementation=impl, chunk_size=16)
        plain = module(q, k, v, True)
        grads = torch.autograd.grad(plain.sum(), (q, k, v))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = module(q, k, v, True)
        torch.testing.assert_close(out, plain, rtol=1e-6, atol=1e-6)  # bf16 matmuls would give ~1e-2
        for a, b in zip(torch.autograd.grad(out.sum(), (q, k, v)), grads):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# implementation and chunk size choices


def test_auto_never_picks_the_unverified_triton_kernels():
    import types
    module = attention.build("fastmax", p=2)
    for device in ("cuda", "cpu"):
        fake = types.SimpleNamespace(device=torch.device(device), shape=(1, 1, 1024, 64), dtype=torch.float32)
        assert module.implementation_for(fake) == "pytorch"
    assert attention.build("fastmax", implementation="triton").implementation_for(fake) == "triton"  # opt-in


def test_auto_uses_the_explicit_weights_for_short_p2_sequences():
    """p = 2, no active dropout, T <= 8 D and B H T^2 <= 2^24: the explicit (T, T) weights (faster
    there on the CPU benchmark); otherwise the chunked path. Both give the same outputs and gradients."""
    two, one = attention.build("fastmax", p=2), attention.build("fastmax", p=1)
    pick = lambda module, shape: module.implementation_for(torch.empty(shape, device="meta"))  # noqa: E731
    assert pick(two, (64, 4, 64, 32)) == "reference"  # the recall study's batch
    assert pick(two, (1, 1, 256, 32)) == "reference" and pick(two, (1, 1, 257, 32)) == "pytorch"
    assert pick(two, (1, 8, 512, 64)) == "reference" and pick(two, (1, 1, 513, 64)) == "pytorch"
    assert pick(two, (16, 4, 512, 64)) == "reference" and pick(two, (17, 4, 512, 64)) == "pytorch"  # 2^24 weights
    assert pick(one, (64, 4, 64, 32)) == "pytorch"
    dropped = attention.build("fastmax", p=2, dropout=0.1)
    assert pick(dropped.train(), (2, 2, 64, 32)) == "pytorch" and pick(dropped.eval(), (2, 2, 64, 32)) == "reference"
    q, k, v = _qkv(T=37, D=8, grad=True)
    mask = _padding(2, 37)
    for causal in (False, True):
        auto = two(q, k, v, causal, mask)
        chunked = attention.build("fastmax", p=2, implementation="pytorch", chunk_size=16)(q, k, v, causal, mask)
        _assert_close(auto, chunked)
        g_auto = torch.autograd.grad(auto.square().sum(), (q, k, v))
        g_chunked = torch.autograd.grad(chunked.square().sum(), (q, k, v))
        for a, b in zip(g_auto, g_chunked):
            _assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_default_chunk_size_per_degree_and_backend():
    """None: 128 for p = 2 (faster on the CPU benchmark; the Triton chunk kernels' state bytes),
    64 for p = 1; an explicit chunk_size is kept; the default gives the same causal output as an
    explicit one."""
    two, one = attention.build("fastmax", p=2), attention.build("fastmax", p=1)
    assert (two.chunk_size_for(), one.chunk_size_for()) == (128, 64)
    assert attention.build("fastmax", p=2, chunk_size=32).chunk_size_for() == 32
    q, k, v = (torch.randn(1, 2, 300, 8, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
               for i in range(3))
    torch.testing.assert_close(two(q, k, v, True), attention.build("fastmax", p=2, chunk_size=16)(q, k, v, True),
                               rtol=1e-10, atol=1e-12)
