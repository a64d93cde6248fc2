"""Tests of Fastmax's "parallel" Triton kernels (attention/fastmax/kernels/parallel.py): forward and
backward against the chunked PyTorch backend computed in float64 from the same inputs, and the
grids they launch."""
import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels on CPU tensors (set before import)

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from attention.fastmax import chunked, function  # noqa: E402
from attention.fastmax.kernels import common, parallel  # noqa: E402

CHUNK = 64  # chunk of the reference's causal path
N = 2  # sequences (batch * heads)
# relative Frobenius error allowed for 16-bit inputs: outputs, gradients
TOLERANCE_16BIT = {"forward": 2e-2, "backward": 5e-2}


def _standardized(x):
    """Rows with zero mean and unit standard deviation over the last dim (the module's default
    normalization of q and k)."""
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)


def _coefficients(D):
    """(c0, c1, c2) of f(s) = 1 + s + s^2 / 2 at temperature sqrt(D)."""
    return function.coefficients(2, 1.0, 1.0, 0.5, math.sqrt(D))


def _case(T, D, Dv, dtype, causal, padded=False, seed=0):
    """Inputs in ``dtype`` and the float64 reference (chunked backend) of forward and backward.

    ``padded``: sequence 0 has no real key in its first forward block (its causal rows there have no
    allowed key) and sequence 1 has scattered padded keys."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (_standardized(torch.randn(N, T, D, generator=gen, dtype=torch.float64)) for _ in range(2))
    v = torch.randn(N, T, Dv, generator=gen, dtype=torch.float64)
    grad_out = torch.randn(N, T, Dv, generator=gen, dtype=torch.float64)
    rho = torch.ones(N, T, dtype=torch.float64)
    if padded:
        rho[0, :parallel.blocks(parallel.FORWARD_BLOCKS, dtype, D, Dv).block_m] = 0.0
        rho[1, torch.rand(T, generator=gen) < 0.3] = 0.0
    k, v = k * rho[..., None], v * rho[..., None]
    q, k, v = (t.to(dtype) for t in (q, k, v))
    coeffs = _coefficients(D)
    has_key = function.row_counts(rho, causal) > 0

    wide = [t.to(torch.float64) for t in (q, k, v)]
    out, den = chunked.forward(*wide, None, None, None, rho, has_key, causal, coeffs, CHUNK)
    g, delta = function.output_gradients(grad_out, out, den, rho, causal)
    g, delta = g.to(dtype), delta.to(torch.float32)  # what the kernels get; the reference gets the same values
    dq, dk, dv = chunked.backward(g.to(torch.float64), delta.to(torch.float64), *wide, None, None, None, rho,
                                  causal, coeffs, CHUNK)[:3]
    inputs = dict(q=q, k=k, v=v, rho=rho.to(torch.float32), has_key=has_key, causal=causal, coeffs=coeffs)
    return inputs, (g, delta), dict(out=out, den=den, dq=dq, dk=dk, dv=dv)


def _check(results, reference, dtype, kind):
    for name, x in results.items():
        ref = reference[name]
        x = x.to(torch.float64)
        # den: float32 sums of float32 weights whatever the inputs, so the float32 criterion
        if dtype == torch.float32 or name == "den":
            torch.testing.assert_close(x, ref, rtol=1e-4, atol=1e-5 * max(1.0, ref.abs().max().item()),
                                       msg=lambda m: f"{name}: {m}")
        else:
            error = ((x - ref).norm() / ref.norm()).item()
            assert error <= TOLERANCE_16BIT[kind], f"{name}: relative error {error:.2e}"


def _run(T, D, Dv, dtype, causal, padded=False):
    inputs, (g, delta), reference = _case(T, D, Dv, dtype, causal, padded)
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    out, den = parallel.forward(**inputs)
    assert out.dtype == dtype and out.shape == (N, T, Dv)
    assert den.dtype == torch.float32 and den.shape == (N, T)
    _check(dict(out=out, den=den), reference, dtype, "forward")
    dq, dk, dv = parallel.backward(g, delta, q, k, v, inputs["rho"], causal, inputs["coeffs"])
    assert (dq.dtype, dk.dtype, dv.dtype) == (dtype,) * 3
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    _check(dict(dq=dq, dk=dk, dv=dv), reference, dtype, "backward")
    return inputs, out, dq


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D, Dv", [(16, 16), (64, 64)])
@pytest.mark.parametrize("T", [1, 15, 65, 200])
def test_matches_chunked(T, D, Dv, causal, dtype):
    _run(T, D, Dv, dtype, causal)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D, Dv", [(16, 64), (128, 128)])
def test_other_head_dims(D, Dv, causal, dtype):
    # Dv != D, and the tile sizes of the 128-wide heads
    _run(65, D, Dv, dtype, causal)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_key_padding(causal, dtype):
    inputs, out, dq = _run(200, 64, 64, dtype, causal, padded=True)
    empty = ~inputs["has_key"]
    assert empty.any() == causal  # causal rows of sequence 0's first block have no allowed key
    assert (out[empty] == 0).all() and (dq[empty] == 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("Dv", [16, 64])
@pytest.mark.parametrize("D", [16, 32, 64])
@pytest.mark.parametrize("T", [1, 15, 64, 65, 200, 333])
def test_matches_chunked_grid(T, D, Dv, causal, dtype):
    _run(T, D, Dv, dtype, causal, padded=T >= 64)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D, Dv", [(128, 128), (128, 32), (32, 128)])
@pytest.mark.parametrize("T", [33, 200])
def test_matches_chunked_wide_heads(T, D, Dv, causal, dtype):
    _run(T, D, Dv, dtype, causal, padded=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_launch_grids(dtype):
    T, N_long, D = 4096, 8, 64
    q, k, v, g = (torch.empty(N_long, T, D, dtype=dtype) for _ in range(4))
    rho, delta = torch.ones(N_long, T), torch.zeros(N_long, T)
    has_key = torch.ones(N_long, T, dtype=torch.bool)
    coeffs = _coefficients(D)
    with common.record_only() as launches:
        parallel.forward(q, k, v, rho, has_key, True, coeffs)
        parallel.backward(g, delta, q, k, v, rho, True, coeffs)
        launches = list(launches)
    forward, dkdv, dq = (parallel.blocks(table, dtype, D, D)
                         for table in (parallel.FORWARD_BLOCKS, parallel.DKDV_BLOCKS, parallel.DQ_BLOCKS))
    assert [(launch.name, launch.grid) for launch in launches] == [
        ("_forward_kernel", (triton.cdiv(T, forward.block_m), N_long)),
        ("_dkdv_kernel", (triton.cdiv(T, dkdv.block_n), N_long)),
        ("_dq_kernel", (triton.cdiv(T, dq.block_m), N_long)),
    ]
    for launch, blocks in zip(launches, (forward, dkdv, dq)):
        assert (launch.meta["BLOCK_M"], launch.meta["BLOCK_N"]) == (blocks.block_m, blocks.block_n)
        assert (launch.meta["num_warps"], launch.meta["num_stages"]) == (blocks.num_warps, blocks.num_stages)
        assert launch.meta["DOT"] == common.dot_mode() and launch.meta["CAUSAL"] is True
        assert launch.signature["T"] == "i32"


def test_refuses_unsupported_inputs():
    q = torch.zeros(1, 8, 16)
    rho, has_key = torch.ones(1, 8), torch.ones(1, 8, dtype=torch.bool)
    coeffs = _coefficients(16)
    with pytest.raises(ValueError, match="one dtype"):
        parallel.forward(q, q, q.to(torch.bfloat16), rho, has_key, False, coeffs)
    with pytest.raises(ValueError, match="one dtype"):
        parallel.forward(q.double(), q.double(), q.double(), rho, has_key, False, coeffs)
    with pytest.raises(ValueError, match="head dims"):
        parallel.forward(torch.zeros(1, 8, 24), torch.zeros(1, 8, 24), q, rho, has_key, False, coeffs)
    with pytest.raises(ValueError, match="one dtype"):
        parallel.backward(q.to(torch.bfloat16), rho, q, q, q, rho, False, coeffs)
