"""Every trainable attention of the registry on the inputs the model gives it: q, k, v as
transposed views of (B, T, H, D) (not contiguous when H > 1). Outputs and gradients must equal
those of the same values in contiguous tensors (a view in a custom backward pass once failed on
them: BigBird's per-head key blocks)."""
import pytest
import torch

import attention

B, T, H, D = 2, 32, 3, 8
SPECS = {  # small sizes so that the sparse methods are sparse at T = 32
    "softmax": {}, "softmax_reference": {}, "fastmax": {"p": 2}, "dense": {}, "linear": {"chunk_size": 8},
    "performer": {"num_features": 16}, "longformer": {"window": 4, "num_global": 1},
    "bigbird": {"block_size_sparse": 4, "num_random_blocks": 1}, "reformer": {"bucket_size": 4, "n_hashes": 2},
    "informer": {}, "linformer": {"proj_len": 8},
}
CONTEXT = {"layer_idx": 0, "block_size": T, "n_head": H, "head_dim": D}


def test_every_trainable_attention_is_covered():
    trainable = {name for name in attention.registered() if attention.is_trainable(name)}
    assert trainable <= set(SPECS), f"add {sorted(trainable - set(SPECS))} to SPECS"


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("causal", [False, True])
def test_transposed_views_give_the_contiguous_results(name, causal):
    if causal and attention.causal_support(name) == "unsupported":
        pytest.skip(f"{name} has no causal form")
    torch.manual_seed(0)
    module = attention.build(name, context=CONTEXT, **SPECS[name]).double().eval()
    base = torch.randn(3, B, T, H, D, dtype=torch.float64)
    results = []
    for contiguous in (False, True):
        leaf = base.clone().requires_grad_(True)
        q, k, v = (x.transpose(1, 2) for x in leaf)  # (B, H, T, D) views, as model.py makes them
        if contiguous:
            q, k, v = (x.contiguous() for x in (q, k, v))
        else:
            assert not q.is_contiguous()
        torch.manual_seed(1)  # methods that draw (Performer's features, Reformer's hashes) draw alike
        out = module(q, k, v, causal)
        out.backward(torch.ones_like(out).cumsum(-2))  # position-dependent upstream gradient
        results.append((out.detach(), leaf.grad))
    (out_view, grad_view), (out_cont, grad_cont) = results
    torch.testing.assert_close(out_view, out_cont, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_view, grad_cont, rtol=1e-10, atol=1e-10)
