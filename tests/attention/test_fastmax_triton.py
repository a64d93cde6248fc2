"""Fastmax's Triton kernels (attention/fastmax/kernels/) on the CPU, the checks of issue 56:

C1 every kernel under the interpreter against the float64 PyTorch path (``chunked.py``): outputs,
   denominators and the gradients of q, k, v; float32 inputs (exact "ieee" products) within rtol
   1e-4, atol 1e-5 x max(1, max|ref|), bfloat16 inputs within a relative Frobenius error of 2e-2
   (outputs) and 5e-2 (gradients). A subset here; the full grid (1,728 cases, hours) with
   ``pytest -m slow``.
C2 the grids the launcher records at B = 1, H = 8, D = 64, T = 4096 (nothing run).
C4 the HBM bytes and FLOPs per token and head of the chunk kernels (their formulas).
The offline compilation for sm_90 (C3) is ``scripts/bench/kernel_report.py`` and its test.
"""
import inspect
import itertools
import os
import re

os.environ.setdefault("TRITON_INTERPRET", "1")  # the kernels on CPU tensors (set before triton is imported)

import pytest  # noqa: E402
import torch  # noqa: E402

import attention  # noqa: E402
from attention.fastmax import chunked  # noqa: E402
from attention.fastmax.function import row_counts  # noqa: E402
from attention.fastmax.kernels import chunk, common, kernel_for, parallel  # noqa: E402
import attention.fastmax.kernels as kernels  # noqa: E402

# (p, kernel): the three kernel families
FAMILIES = [(1, "chunk"), (2, "chunk"), (2, "parallel")]


def _inputs(N, T, D, Dv, p, causal, padded, chunk_size, seed=0):
    """float64 inputs as the module hands them to a backend: q, k standardized over D (the
    default "paper" normalization), k and v zero at padded keys; with ``padded``, sequence 0 has
    no real key in its whole first chunk (its first rows have no allowed key when causal) and
    random padding after it. g and delta as ``function.output_gradients`` makes them (zero on
    rows without an allowed key). coeffs: the default temperatures (D for p = 1, sqrt(D) for p = 2)."""
    gen = torch.Generator().manual_seed(seed)

    def standardized(*shape):
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)

    q, k = standardized(N, T, D), standardized(N, T, D)
    v = torch.randn(N, T, Dv, generator=gen, dtype=torch.float64)
    rho = torch.ones(N, T, dtype=torch.float64)
    if padded:
        rho = (torch.rand(N, T, generator=gen) > 0.25).double()
        rho[0, :chunk_size] = 0.0
    k, v = k * rho[..., None], v * rho[..., None]
    coeffs = (1.0, 1.0 / D, 0.0) if p == 1 else (1.0, D ** -0.5, 0.5 / D)
    has_key = row_counts(rho, causal) > 0
    g = torch.randn(N, T, Dv, generator=gen, dtype=torch.float64) * has_key[..., None]
    delta = torch.randn(N, T, generator=gen, dtype=torch.float64) * has_key
    return q, k, v, rho, has_key, coeffs, g, delta


def _check(actual, expected, dtype, name, gradient):
    actual = actual.double()
    if dtype == torch.float32:
        scale = max(1.0, expected.abs().max().item())
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5 * scale, msg=lambda m: f"{name}: {m}")
    else:
        error = ((actual - expected).norm() / expected.norm().clamp_min(1e-30)).item()
        assert error <= (5e-2 if gradient else 2e-2), f"{name}: relative Frobenius error {error:.2e}"


def compare(T, D, Dv, p, kernel, causal, dtype, padded, chunk_size=16, N=2, seed=0):
    """One C1 case: the kernel family (p, kernel) at these sizes against chunked.py in float64
    on the same (dtype-rounded) inputs."""
    q, k, v, rho, has_key, coeffs, g, delta = _inputs(N, T, D, Dv, p, causal, padded, chunk_size, seed)
    q, k, v, g = (t.to(dtype).double() for t in (q, k, v, g))  # the reference sees what the kernel sees
    out_ref, den_ref = chunked.forward(q, k, v, None, None, None, rho, has_key, causal, coeffs, chunk_size)
    grads_ref = chunked.backward(g, delta, q, k, v, None, None, None, rho, causal, coeffs, chunk_size)[:3]
    low = [t.to(dtype) for t in (q, k, v)]
    out, den = kernels.forward(*low, None, None, None, rho.float(), has_key, causal, coeffs, chunk_size, kernel=kernel)
    grads = kernels.backward(g.to(dtype), delta.float(), *low, None, None, None, rho.float(), causal, coeffs,
                             chunk_size, kernel=kernel)[:3]
    assert out.dtype == dtype and den.dtype == torch.float32 and all(t.dtype == dtype for t in grads)
    _check(out, out_ref, dtype, "out", False)
    _check(den, den_ref, dtype, "den", False)
    for name, a, b in zip(("dq", "dk", "dv"), grads, grads_ref):
        _check(a, b, dtype, name, True)
    if padded and causal:  # sequence 0's rows before its first real key: output 0
        assert (out[0, :chunk_size] == 0).all()


# ---------------------------------------------------------------------------------------------
# C1: the default subset (every kernel, both dtypes, ragged last chunks, a first chunk without a
# real key, T = 1, several chunk sizes and head dims); about a minute on one core

SUBSET = [
    # T, D, Dv, p, kernel, causal, dtype, padded, chunk
    (65, 16, 16, 1, "chunk", True, torch.float32, True, 16),
    (65, 32, 64, 1, "chunk", False, torch.bfloat16, True, 32),
    (200, 64, 64, 1, "chunk", True, torch.bfloat16, False, 64),
    (1, 16, 16, 1, "chunk", True, torch.float32, False, 16),
    (37, 16, 16, 2, "chunk", True, torch.float32, True, 16),
    (65, 16, 64, 2, "chunk", False, torch.float32, True, 32),
    (130, 64, 64, 2, "chunk", True, torch.bfloat16, True, 64),
    (15, 64, 16, 2, "chunk", False, torch.bfloat16, False, 16),
    (1, 16, 16, 2, "chunk", False, torch.float32, False, 16),
    (300, 16, 16, 2, "chunk", True, torch.float32, True, 128),  # chunks of 128 in programs of 64 rows
    (300, 32, 64, 1, "chunk", True, torch.bfloat16, True, 128),
    (65, 16, 16, 2, "parallel", True, torch.float32, True, 16),
    (200, 64, 64, 2, "parallel", True, torch.bfloat16, True, 64),
    (65, 32, 16, 2, "parallel", False, torch.bfloat16, True, 32),
    (1, 16, 16, 2, "parallel", True, torch.float32, False, 16),
]


@pytest.mark.parametrize("T,D,Dv,p,kernel,causal,dtype,padded,chunk_size", SUBSET)
def test_kernels_match_the_float64_pytorch_path(T, D, Dv, p, kernel, causal, dtype, padded, chunk_size):
    compare(T, D, Dv, p, kernel, causal, dtype, padded, chunk_size)


def test_the_subset_covers_every_kernel_family_dtype_and_edge():
    covered = {(p, kernel, dtype) for _, _, _, p, kernel, _, dtype, _, _ in SUBSET}
    assert covered == {(p, kernel, dtype) for p, kernel in FAMILIES for dtype in (torch.float32, torch.bfloat16)}
    assert all(any(case[5] == causal for case in SUBSET if (case[3], case[4]) == family)
               for family in FAMILIES for causal in (False, True))
    assert any(T % chunk_size for T, *_, chunk_size in SUBSET)  # a ragged last chunk
    assert any(case[7] for case in SUBSET)  # padding with a first chunk without a real key


FULL_GRID = [(T, D, Dv, p, kernel, causal, dtype, chunk_size)
             for T, chunk_size, D, Dv, (p, kernel), causal, dtype in itertools.product(
                 (1, 15, 64, 65, 200, 333), (16, 32, 64, 128), (16, 32, 64), (16, 64), FAMILIES, (False, True),
                 (torch.float32, torch.bfloat16))]


@pytest.mark.slow
@pytest.mark.parametrize("T,D,Dv,p,kernel,causal,dtype,chunk_size", FULL_GRID)
def test_full_grid(T, D, Dv, p, kernel, causal, dtype, chunk_size):
    compare(T, D, Dv, p, kernel, causal, dtype, padded=True, chunk_size=chunk_size)


def test_the_module_through_the_kernels_matches_the_pytorch_path():
    """Fastmax(implementation="triton") end to end, with its normalization, a padding mask and
    autograd, against implementation="pytorch": float32 and bfloat16 inputs (the model's c_attn
    hands the attention bfloat16 under autocast); output in v's dtype."""
    gen = torch.Generator().manual_seed(3)
    mask = torch.rand(2, 40, generator=gen) > 0.2
    mask[0, :16] = False
    for (p, kernel), dtype, causal in itertools.product(FAMILIES, (torch.float32, torch.bfloat16), (False, True)):
        q, k, v = (torch.randn(2, 2, 40, 16, generator=gen).to(dtype).requires_grad_(True) for _ in range(3))
        triton_module = attention.build("fastmax", p=p, implementation="triton", triton_kernel=kernel, chunk_size=16)
        torch_module = attention.build("fastmax", p=p, implementation="pytorch", chunk_size=16)
        out = triton_module(q, k, v, causal, mask)
        ref = torch_module(*(t.double() for t in (q, k, v)), causal, mask)
        assert out.dtype == dtype
        bound = 1e-4 if dtype == torch.float32 else 2e-2
        assert ((out.double() - ref).norm() / ref.norm()).item() <= bound, (p, kernel, dtype, causal)
        grad_out = torch.randn(out.shape, generator=gen)
        grads = torch.autograd.grad(out, (q, k, v), grad_out.to(dtype))
        grads_ref = torch.autograd.grad(ref, (q, k, v), grad_out.double())
        for a, b in zip(grads, grads_ref):
            assert a.dtype == dtype
            error = ((a.double() - b.double()).norm() / b.double().norm()).item()
            assert error <= (1e-4 if dtype == torch.float32 else 5e-2), (p, kernel, dtype, causal, error)


def test_interpreter_rounds_bfloat16_operands_to_nearest_even():
    """``common.to_operand`` under the interpreter (DOT = "emulate"): the float32 bits rounded to
    bfloat16 as torch rounds them (the interpreter's own cast truncates)."""
    import triton
    import triton.language as tl

    assert common.EMULATE and common.dot_mode() == "emulate"
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0)) * 3
    x[0, :4] = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -20])  # ties, above
    out = torch.empty_like(x)
    like = torch.zeros(1, dtype=torch.bfloat16)
    _round_probe[(1,)](x, like, out, ROWS=64, COLS=16, DOT="emulate")
    assert torch.equal(out, x.bfloat16().float())
    del triton, tl


try:
    import triton
    import triton.language as tl

    @triton.jit
    def _round_probe(X, LIKE, OUT, ROWS: tl.constexpr, COLS: tl.constexpr, DOT: tl.constexpr):
        offs = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
        like = tl.load(LIKE + tl.arange(0, 1))
        tl.store(OUT + offs, common.to_operand(tl.load(X + offs), like, DOT))
except ImportError:  # the test fails without triton; the module still imports
    _round_probe = None


# ---------------------------------------------------------------------------------------------
# dispatch


def test_dispatch_rule():
    """p = 1 and D = 16: the chunk kernels; p = 2 at D >= 32: parallel up to PARALLEL_MAX_T, chunk
    beyond; a forced kernel is kept; "parallel" refuses p = 1."""
    T_star = kernels.PARALLEL_MAX_T
    assert kernel_for("auto", 1, 1024, 64) == "chunk" and kernel_for("auto", 1, 10 ** 6, 64) == "chunk"
    assert kernel_for("auto", 2, T_star, 64) == "parallel" and kernel_for("auto", 2, T_star + 1, 64) == "chunk"
    assert kernel_for("auto", 2, 1024, 32) == "parallel"
    assert kernel_for("auto", 2, 64, 16) == "chunk"  # D = 16: the chunk kernels always
    assert kernel_for("chunk", 2, 64, 64) == "chunk" and kernel_for("parallel", 2, 10 ** 6, 64) == "parallel"
    with pytest.raises(ValueError, match="parallel Triton kernel computes p = 2 only"):
        kernel_for("parallel", 1, 64, 64)
    with pytest.raises(ValueError, match="triton kernel 'flash' unknown; allowed: auto, chunk, parallel"):
        kernel_for("flash", 2, 64, 64)
    # the launches follow the rule
    for T, expected in ((T_star, "_forward_kernel"), (T_star + 1, "_output_kernel")):
        q = torch.zeros(1, T, 64)
        with common.record_only() as launches:
            kernels.forward(q, q, q, None, None, None, torch.ones(1, T), torch.ones(1, T, dtype=torch.bool), True,
                            (1.0, 0.125, 1 / 128), 128)
        assert launches[-1].name == expected


# ---------------------------------------------------------------------------------------------
# C2: parallelism of the grids


def _programs(grid):
    count = 1
    for g in grid:
        count *= g
    return count


@pytest.mark.parametrize("p,kernel", FAMILIES)
def test_grids_keep_the_gpu_busy(p, kernel):
    """At B = 1, H = 8, D = 64, T = 4096 (nothing run): the output / intra-chunk kernels launch at
    least B x H x ceil(T / C) programs, the p = 2 state pass at least 256 (the old kernels: 8)."""
    N, T, D = 8, 4096, 64
    C = 128 if p == 2 else 64
    q = torch.zeros(N, T, D, dtype=torch.bfloat16)
    rho, has_key = torch.ones(N, T), torch.ones(N, T, dtype=torch.bool)
    coeffs = (1.0, 1 / 8, 1 / 128) if p == 2 else (1.0, 1 / 64, 0.0)
    with common.record_only() as launches:
        kernels.forward(q, q, q, None, None, None, rho, has_key, True, coeffs, C, kernel=kernel)
        kernels.backward(q, rho, q, q, q, None, None, None, rho, True, coeffs, C, kernel=kernel)
    grids = {}
    for launch in launches:
        grids.setdefault(launch.name, []).append(launch.grid)
    per_chunk = N * -(-T // C)
    for name in ("_output_kernel", "_dq_kernel", "_dkv_kernel", "_forward_kernel", "_dkdv_kernel"):
        for grid in grids.get(name, []):
            assert _programs(grid) >= per_chunk, (name, grid)
    if kernel == "chunk":
        assert set(grids) == {"_state_kernel", "_output_kernel", "_dq_kernel", "_dkv_kernel"}
        if p == 2:
            assert all(_programs(grid) >= 256 for grid in grids["_state_kernel"]), grids["_state_kernel"]
    else:
        assert set(grids) == {"_forward_kernel", "_dkdv_kernel", "_dq_kernel"}


def test_only_the_state_pass_walks_the_sequence():
    """The chunk family's output and gradient kernels loop over feature blocks and over the R-row
    blocks of their own chunk only (from ``chunk_start``, to the program's own block or the
    chunk's end): no loop over the chunks, which the state pass alone walks (one product and one
    store per chunk)."""
    within_chunk = (r"chunk_start, tl\.program_id\(0\) \* R \+ R, R", r"tl\.program_id\(0\) \* R, chunk_start \+ C, R")
    for kernel in (chunk._output_kernel, chunk._dq_kernel, chunk._dkv_kernel, chunk._through_states):
        source = inspect.getsource(kernel.fn)
        loops = re.findall(r"for \w+ in (?:tl\.)?(?:static_)?range\((.*)\):$", source, re.M)
        assert all(bounds == "0, NP" or any(re.fullmatch(p, bounds) for p in within_chunk) for bounds in loops), \
            (kernel.fn.__name__, loops)
    state_loops = re.findall(r"for \w+ in range\((.*)\):$", inspect.getsource(chunk._state_kernel.fn), re.M)
    assert state_loops == ["0, NC", "0, NC"]


# ---------------------------------------------------------------------------------------------
# C4: bytes and FLOPs per token and head


def test_cost_per_token_and_head_within_the_aims():
    """Each forward kernel of the chunk family, from the formulas of its docstring: p = 1 (C = 64)
    at most 1.5 KB and 40 kFLOP per token and head, p = 2 (C = 128) at most 10 KB (float32 states)
    and 1.2 MFLOP; D = Dv = 64, bfloat16 inputs."""
    for p, C, max_bytes, max_flops in ((1, 64, 1536, 40_000), (2, 128, 10_240, 1_200_000)):
        costs = chunk.kernel_costs(64, 64, p, C, element_bytes=2)
        for name in ("state", "output"):
            hbm, flops = costs[name]
            assert hbm <= max_bytes and flops <= max_flops, (p, name, hbm, flops)
    # the formula counts what the kernels move: the states of one chunk are 4 (F (Dv + 1) + Dv + 1) bytes
    F = chunk.feature_count(64, 2)
    assert F == 64 + 36 * 64 and chunk.feature_count(16, 2) == 16 + 10 * 16
    N, T, C = 1, 256, 128
    q = torch.zeros(N, T, 64, dtype=torch.bfloat16)
    states = chunk._states(q, q, torch.ones(N, T), True, C, quad=True)
    assert sum(t.numel() * 4 for t in states) == (T // C) * 4 * (F * 65 + 65)

