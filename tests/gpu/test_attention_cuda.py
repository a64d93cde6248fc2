"""Every registered attention on the GPU against its float64 reference on the CPU, on the same
inputs (issue 43 item 1; docs/gpu.md): forward, and for a trainable method the gradients of q, k
and v, causal and not (causal only where the class supports it), with padding, at the contract
test's sizes (T = 23, D = 8) and at T = 200, D = 32 (several blocks and chunks of every fast path).
The methods, their test parameters, their references and tolerances are the registry's
(``attention.attention_class``: ``example_params``, ``reference_name`` / ``reference_params``,
``float32_tolerance``, ``trainable``, ``supports_attention_mask``); no list of methods here.

Tolerances, stated:
- float32 outputs and gradients: the class's ``float32_tolerance`` (its CPU float32-vs-float64
  bound at the contract test's sizes; rtol 1e-5, atol 1e-6 by default) widened GPU_FACTOR = 10
  times (GPU kernels sum in other orders and fuse exp; float32 matrix products stay IEEE, TF32 is
  off by default in torch), atol also times max(1, the largest reference value): rounding grows
  with the values (DANet's outputs reach about 60 and its gradients about 50 here);
- bfloat16 autocast (as ``train.py --dtype=bfloat16``): relative Frobenius errors of the output and
  of the gradients within ``attention.testing.BF16_BOUNDS`` (0.02 and 0.05; the CPU measured at most
  0.007 and 0.009, tests/attention/test_contract.py::test_under_bfloat16_autocast).
Tree attention also runs in float64 on the GPU with several samplers: the same buds, so equal to
the CPU reference to 1e-10.
"""
import pytest
import torch

import attention
from attention.testing import (BF16_BOUNDS, build_example, causal_cases, example_padding, forward_and_gradients,
                               random_qkv, relative_error)

pytestmark = pytest.mark.gpu

GPU_FACTOR = 10
SIZES = [(2, 2, 23, 8), (2, 2, 200, 32)]  # (B, H, T, D)



def context(B, H, T, D):
    return {"layer_idx": 0, "block_size": T, "n_head": H, "head_dim": D}



def reference_and_inputs(name, causal, size):
    """The float64 CPU reference's output and gradients, the inputs, the mask and the upstream gradient."""
    B, H, T, D = size
    q, k, v = random_qkv(B, H, T, D)
    trainable = attention.attention_class(name).trainable
    grad = torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64) if trainable else None
    mask = example_padding(name, B, T)
    reference = build_example(name, context(*size), "reference").double()
    out, grads = forward_and_gradients(reference, q, k, v, causal, mask, grad)
    return (out, grads), (q, k, v), mask, grad


def on(device, *tensors):
    return [None if t is None else t.to(device) for t in tensors]


def cuda_case(device, name, causal, size):
    """(the float64 CPU reference (output, gradients), the example module on ``device`` in the
    mode its class trains in, its float32 inputs q, k, v, mask, output gradient on ``device``)."""
    reference, (q, k, v), mask, grad = reference_and_inputs(name, causal, size)
    module = build_example(name, context(*size)).to(device).train(attention.attention_class(name).trainable)
    return reference, module, on(device, q.float(), k.float(), v.float(), mask, None if grad is None else grad.float())


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"T{s[2]}_D{s[3]}")
@pytest.mark.parametrize("name,causal", causal_cases())
def test_float32_matches_the_float64_reference(device, name, causal, size):
    (ref_out, ref_grads), module, (q, k, v, mask, grad) = cuda_case(device, name, causal, size)
    out, grads = forward_and_gradients(module, q, k, v, causal, mask, grad)
    tol = attention.attention_class(name).float32_tolerance
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert_close_scaled(out, ref_out, tol)
    if grad is not None:
        assert torch.isfinite(grads).all(), "non-finite gradients on the GPU"
        assert_close_scaled(grads, ref_grads, tol)


def assert_close_scaled(got, expected, tolerance):
    """``assert_close`` with the class's float32 tolerance widened GPU_FACTOR times, atol also
    times max(1, the largest |expected|) (rounding grows with the values' size)."""
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(got.cpu().double(), expected, rtol=GPU_FACTOR * tolerance["rtol"],
                               atol=GPU_FACTOR * tolerance["atol"] * scale)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"T{s[2]}_D{s[3]}")
@pytest.mark.parametrize("name,causal", causal_cases())
def test_bfloat16_autocast_within_bounds(device, name, causal, size):
    (ref_out, ref_grads), module, (q, k, v, mask, grad) = cuda_case(device, name, causal, size)
    out, grads = forward_and_gradients(module, q, k, v, causal, mask, grad, autocast=torch.bfloat16)
    assert torch.isfinite(out).all()
    error = relative_error(out, ref_out)
    assert error <= BF16_BOUNDS["output"], f"output relative error {error:.4f} > {BF16_BOUNDS['output']}"
    if grad is not None:
        assert torch.isfinite(grads).all(), "non-finite gradients under bfloat16 autocast"
        error = relative_error(grads, ref_grads)
        assert error <= BF16_BOUNDS["gradients"], f"gradient relative error {error:.4f} > {BF16_BOUNDS['gradients']}"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sampler,E", [("edh", 0.5), ("alignment", 0.3), ("favor_plus", 0.5), ("uniform", 1.0)])
def test_tree_on_the_gpu_in_float64_equals_the_reference(device, sampler, E, causal):
    """The CUDA path (vectorized, float64) against the reference on the CPU: the same buds, so the
    same output to rounding, and the same inner-product counts."""
    B, H, T, D = 2, 2, 200, 16
    q, k, v = random_qkv(B, H, T, D)
    params = dict(E=E, sampler=sampler)
    reference = attention.build("tree", {"block_size": T}, **params, implementation="reference")
    fast = attention.build("tree", {"block_size": T}, **params).to(device)
    with torch.no_grad():
        expected = reference(q, k, v, causal)
        got = fast(*on(device, q, k, v), causal)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-10, atol=1e-12)
    assert fast.stats() == reference.stats()
