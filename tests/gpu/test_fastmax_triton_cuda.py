"""Fastmax's Triton kernels (attention/fastmax/kernels/) compiled for the GPU, not interpreted,
against the PyTorch path in float64 (issue 56: the GPU side of C1; docs/gpu.md), and the resources
of the compiled kernels.

- ``test_kernels_match_the_float64_pytorch_path``: D = 16 and 64; the three kernel families (p = 1
  chunk, p = 2 chunk and p = 2 parallel, forced through the module's ``triton_kernel``); float32
  and bfloat16 inputs (the module takes them as they are, no autocast); causal and not; B = 2,
  H = 2, T = 300 (a ragged last chunk at chunk 64 and 128) with right padding, left padding and
  holes, batch 1 without a real key in its first 130 positions (a first chunk without a real key
  at both chunk sizes; causal, rows without an allowed key). Outputs and the gradients of q, k, v.
- ``test_long_sequences_match_the_float64_pytorch_path``: T = 16384, B = 1, H = 4, D = 64,
  bfloat16, the first 1000 positions padded, each family causal and not.
- ``test_compiled_kernels_fit_the_device``: the benchmark's configurations (D = 16 and 64, the three
  families, causal and not, bfloat16 and float32 under its float32 matmul precision "high"), each
  launched in a fresh process: every kernel without local memory (Triton's ``n_spills``, the
  function's local bytes / 4 as the driver reports them), at most 255 registers (``n_regs``),
  shared memory (``metadata.shared``) within the device's limit per block; the table goes to
  tests.log. The exactness tests' float32 kernels ("ieee" products, PyTorch's default precision)
  are not held to these: the offline report shows that they spill.

Reference: the module with implementation="pytorch" (``attention/fastmax/chunked.py``) in float64
on the same GPU, on the inputs rounded to the tested dtype (the reference sees what the kernels
see), the same parameters (the paper normalization at its default temperature). Tolerances, C1's:
float32 inputs (exact "ieee" products) rtol 1e-4, atol 1e-5 times max(1, the largest reference
value); bfloat16 inputs a relative Frobenius error of at most 2e-2 (outputs) and 5e-2 (gradients),
``attention.testing.BF16_BOUNDS``.

Compilation: the module fixture first compiles the kernel configurations of the selected tests in
parallel processes (``scripts.bench.gpu.compile_kernels``: one forward and backward per
configuration on small inputs, into Triton's on-disk cache); the tests then load them. Every test
runs alone (``python -m pytest -m gpu tests/gpu/test_fastmax_triton_cuda.py -k "p2-parallel and
bfloat16"``).
"""
import pytest
import torch

import attention
from attention.testing import BF16_BOUNDS, forward_and_gradients, padding_mask, random_qkv, relative_error
from scripts.bench.gpu import FLOAT32_MATMUL_PRECISION, FAMILIES, compile_kernels, kernel_configs

pytestmark = pytest.mark.gpu

HEAD_DIMS = (16, 64)
DTYPES = ("float32", "bfloat16")
LONG_T, LONG_HEADS, LONG_D, LONG_PADDED = 16384, 4, 64, 1000
RTOL, ATOL = 1e-4, 1e-5
MAX_REGISTERS = 255
FAMILY_IDS = {family: f"p{family[0]}-{family[1]}" for family in FAMILIES}


def _configs(item):
    """The kernel configurations (``kernel_configs``) one collected test of this module launches."""
    if item.originalname == "test_kernels_match_the_float64_pytorch_path":
        params = item.callspec.params
        return kernel_configs([params["D"]], [params["dtype"]], [params["family"]], (params["causal"],))
    if item.originalname == "test_long_sequences_match_the_float64_pytorch_path":
        params = item.callspec.params
        return kernel_configs([LONG_D], ["bfloat16"], [params["family"]], (params["causal"],))
    return []


@pytest.fixture(scope="module")
def warmed(compiled_triton, request):
    """Compile, in parallel processes, the kernel configurations of this module's selected tests
    (the others compile at their launch if run later); the compile rows (``compile_kernels``)."""
    configs = {}
    for item in request.session.items:
        if item.module is request.module:
            configs.update({tuple(sorted(c.items())): c for c in _configs(item)})
    return compile_kernels(list(configs.values()))


def build(family, dtype=None):
    """The Fastmax module of a kernel family (p, kernel), or its PyTorch path in float64 (dtype
    None), on CUDA."""
    p, kernel = family
    if dtype is None:
        return attention.build("fastmax", p=p, implementation="pytorch").cuda().double()
    return attention.build("fastmax", p=p, implementation="triton", triton_kernel=kernel).cuda()


def compare(family, dtype, B, H, T, D, causal, mask):
    """Outputs and gradients of q, k, v of the kernel family in ``dtype`` against the float64
    PyTorch path on the same rounded inputs, within C1's tolerances (module docstring)."""
    dtype = getattr(torch, dtype)
    q, k, v = (x.to(dtype).cuda() for x in random_qkv(B, H, T, D))
    grad = torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(5)).to(dtype).cuda()
    mask = None if mask is None else mask.cuda()
    got = forward_and_gradients(build(family, dtype), q, k, v, causal, mask, grad)
    expected = forward_and_gradients(build(family), q.double(), k.double(), v.double(), causal, mask, grad.double())
    for name, g, e in (("output", got[0], expected[0]), *zip(("dq", "dk", "dv"), got[1], expected[1])):
        assert g.dtype == dtype and torch.isfinite(g).all(), name
        if dtype == torch.float32:
            scale = max(1.0, float(e.abs().max()))
            torch.testing.assert_close(g.double(), e, rtol=RTOL, atol=ATOL * scale, msg=lambda m: f"{name}: {m}")
        else:
            bound = BF16_BOUNDS["output" if name == "output" else "gradients"]
            error = relative_error(g, e)
            assert error <= bound, f"{name}: relative Frobenius error {error:.2e} > {bound}"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS.get)
@pytest.mark.parametrize("D", HEAD_DIMS)
def test_kernels_match_the_float64_pytorch_path(warmed, D, family, dtype, causal):
    B, H, T = 2, 2, 300
    mask = (padding_mask("right", B, T, pads=(7, 0)) & padding_mask("left", B, T, pads=(0, 130))
            & ~(torch.arange(T) % 9 == 4))  # batch 1 has no real key in its first 130 positions
    compare(family, dtype, B, H, T, D, causal, mask)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS.get)
def test_long_sequences_match_the_float64_pytorch_path(warmed, family, causal):
    mask = padding_mask("left", 1, LONG_T, pads=(LONG_PADDED,))
    compare(family, "bfloat16", 1, LONG_HEADS, LONG_T, LONG_D, causal, mask)


def test_compiled_kernels_fit_the_device(compiled_triton, capsys):
    """The benchmark's kernel configurations (bfloat16 and float32 under its float32 matmul
    precision: TF32 products, as ``scripts/bench/kernel_report.py`` compiles them offline), each
    launched in a fresh worker process (``compile_kernels``), which reports the resources of every
    kernel it compiled or loaded."""
    import triton
    rows = compile_kernels(kernel_configs(HEAD_DIMS, DTYPES), precision=FLOAT32_MATMUL_PRECISION)
    assert not [row for row in rows if row["error"]], [row for row in rows if row["error"]]
    kernels = sorted({(k["name"], row["D"], row["p"], row["causal"], row["dtype"], k["num_warps"], k["registers"],
                       k["spills"], k["shared_bytes"]) for row in rows for k in row["kernels"]}, key=str)
    assert {name for name, *_ in kernels} >= {"chunk._state_kernel", "chunk._output_kernel", "parallel._forward_kernel"}
    device = torch.cuda.current_device()
    limit = triton.runtime.driver.active.utils.get_device_properties(device)["max_shared_mem"]
    with capsys.disabled():
        print(f"\ncompiled Fastmax kernels on {torch.cuda.get_device_name(device)} (shared memory limit {limit:,} B "
              "per block): kernel, D, p, causal, dtype, num_warps, registers, spills (local bytes / 4), shared B")
        for kernel in kernels:
            print(*kernel)
    assert not [k for k in kernels if k[6] is None], "kernels compiled but never loaded"
    assert not [k for k in kernels if k[7]], "kernels with local-memory spills"
    assert not [k for k in kernels if k[6] > MAX_REGISTERS], f"kernels above {MAX_REGISTERS} registers"
    assert not [k for k in kernels if k[8] > limit], f"kernels above {limit} B of shared memory"
