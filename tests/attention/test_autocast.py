"""Every registered attention under bfloat16 autocast on the CPU, as ``train.py --dtype=bfloat16``
runs it on a GPU (the CPU twin of tests/gpu/test_attention_cuda.py's bfloat16 test): forward and,
for a trainable method, backward run (a custom backward once mixed the float32 weights saved under
autocast with the bfloat16 output gradient: BigBird's and Longformer's block-sparse path), every
output and gradient is finite, and both are within ``attention.testing.BF16_BOUNDS`` of the
float64 reference, with padding (causal: the first rows of batch 1 have no real key), at the
contract test's sizes and at T = 200, D = 32 (where Reformer's buckets, hashed in bfloat16, once
differed from float32's). The methods are the registry's, with the parameters their classes
declare for tests (no list here)."""
import pytest
import torch

import attention
from attention.testing import (BF16_BOUNDS, build_example, causal_cases, example_padding, forward_and_gradients,
                               random_qkv, relative_error)

SIZES = [(2, 2, 23, 8), (2, 2, 200, 32)]  # (B, H, T, D): the contract test's, and several blocks of every path




@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"T{s[2]}_D{s[3]}")
@pytest.mark.parametrize("name,causal", causal_cases())
def test_bfloat16_autocast_runs_and_stays_within_bounds(name, causal, size):
    B, H, T, D = size
    context = {"layer_idx": 0, "block_size": T, "n_head": H, "head_dim": D}
    trainable = attention.attention_class(name).trainable
    q, k, v = random_qkv(B, H, T, D)
    grad = torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64) if trainable else None
    mask = example_padding(name, B, T)
    ref_out, ref_grads = forward_and_gradients(build_example(name, context, "reference").double(), q, k, v, causal,
                                               mask, grad)
    module = build_example(name, context).train(trainable)
    out, grads = forward_and_gradients(module, q.float(), k.float(), v.float(), causal, mask,
                                       None if grad is None else grad.float(), autocast=torch.bfloat16)
    assert torch.isfinite(out).all()
    assert relative_error(out, ref_out) <= BF16_BOUNDS["output"]
    if trainable:
        assert grads.dtype == torch.float32 and torch.isfinite(grads).all()
        assert relative_error(grads, ref_grads) <= BF16_BOUNDS["gradients"]
