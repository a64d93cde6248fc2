"""Fastmax's Triton kernels compiled for the GPU (not interpreted) against the PyTorch path
(issue 43 item 1; docs/gpu.md): D = 32, 64, 128, p = 1 and 2, causal and not, with a padding
mask, outputs and the gradients of q, k, v; one case with dropout (the kernels' separate
numerator keys); and the shared-memory launch check against the device's real limit.

Reference: the PyTorch path (``implementation="pytorch"``, ``attention/fastmax/chunked.py``) in
float64 on the same GPU, the same module parameters (the paper normalization at its default
temperature) and inputs; the Triton kernels compute in float32 with IEEE products. Tolerance,
stated: rtol 1e-4, atol 1e-5 times max(1, the largest reference value).

Compilation takes seconds to a minute per kernel at D = 128 (Triton 3.6, measured offline for
sm_90: docs/gpu.md), so the module first compiles the kernels its selected tests need in parallel
processes (``scripts.bench.gpu.warm_triton``), then the tests load them from Triton's cache.
"""
import pytest
import torch

import attention
from attention.testing import padding_mask, random_qkv
from scripts.bench.gpu import warm_triton

pytestmark = pytest.mark.gpu

CASES = [(D, p, causal) for D in (32, 64, 128) for p in (1, 2) for causal in (False, True)]
DROPOUT_CASE = (32, 2, True)  # with dropout 0.1 ("quadratic"): the kernels' separate numerator keys
OVER_LIMIT = (128, 128)  # (D, chunk): the estimate refuses it on every GPU (459,776 B)
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def warmed(compiled_triton, request):
    """Compile, in parallel, the kernels of the cases selected in this session (the others are
    compiled at their launch if run later): (D, p, causal) at chunk 64, the dropout case's
    separate variant, and the forward kernel over the shared-memory limit."""
    configs = set()
    for item in request.session.items:
        if item.module is not request.module:
            continue
        if item.originalname == "test_compiled_kernels_match_the_pytorch_path":
            configs.add(tuple(item.callspec.params[key] for key in ("D", "p", "causal")))
        elif item.originalname == "test_dropout_variant_matches_the_pytorch_path":
            configs.add((*DROPOUT_CASE, True))
        elif item.originalname == "test_a_launch_over_the_limit_is_one_clear_error":
            configs.add((OVER_LIMIT[0], 1, True, False, OVER_LIMIT[1], ("forward",)))
    return warm_triton(sorted(configs, key=str))


def module(p, implementation, **params):
    return attention.build("fastmax", p=p, implementation=implementation, **params)


def run(mod, q, k, v, causal, mask, grad):
    """(out, gradients of q, k, v) of one call."""
    leaf = torch.stack([q, k, v]).detach().requires_grad_()
    out = mod(*leaf, causal, attention_mask=mask)
    out.backward(grad.to(out.dtype))
    return out.detach(), leaf.grad


def assert_close(got, expected):
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(got.double(), expected, rtol=RTOL, atol=ATOL * scale)


@pytest.mark.parametrize("D,p,causal", CASES)
def test_compiled_kernels_match_the_pytorch_path(warmed, D, p, causal):
    B, H, T = 2, 2, 300  # 4 chunks of 64 + 44 positions
    q, k, v = (x.cuda() for x in random_qkv(B, H, T, D))
    mask = (padding_mask("right", B, T, pads=(7, 0)) & padding_mask("left", B, T, pads=(0, 70))
            & ~(torch.arange(T) % 9 == 4)).cuda()  # batch 1 has no real key in its first chunk
    grad = torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(5), dtype=torch.float64).cuda()
    expected = run(module(p, "pytorch").double(), q, k, v, causal, mask, grad)
    got = run(module(p, "triton"), q.float(), k.float(), v.float(), causal, mask, grad.float())
    for g, e in zip(got, expected):
        assert g.dtype == torch.float32 and torch.isfinite(g).all()
        assert_close(g, e)


def test_dropout_variant_matches_the_pytorch_path(warmed):
    """Dropout draws its masks from the global generator on the inputs' device: the same seed gives
    both implementations the same masks."""
    D, p, causal = DROPOUT_CASE
    B, H, T = 2, 2, 150
    q, k, v = (x.cuda() for x in random_qkv(B, H, T, D))
    grad = torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(5), dtype=torch.float64).cuda()
    results = []
    for implementation, dtype in (("pytorch", torch.float64), ("triton", torch.float32)):
        mod = module(p, implementation, dropout=0.1, dropout_variant="quadratic").train()
        torch.manual_seed(11)
        results.append(run(mod.to(dtype), q.to(dtype), k.to(dtype), v.to(dtype), causal, None, grad.to(dtype)))
    for g, e in zip(results[1], results[0]):
        assert torch.isfinite(g).all()
        assert_close(g, e)


def test_the_estimate_checks_against_the_real_device_limit(warmed, compiled_triton, capsys):
    """The limit the launch check reads (torch's opt-in shared memory per block) is Triton's; every
    kernel launched in this process passed the check and its compiled need fits that limit. Prints
    the compiled kernels' shared memory beside the estimate (tests.log). On an H100 or H200 every
    chunk-64 kernel of the tests passes (D = 128: estimate 197,120 B of 232,448)."""
    import triton
    tk = compiled_triton
    index = torch.cuda.current_device()
    limit = tk.device_shared_memory_limit(index)
    assert limit == triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]
    launched = dict(tk.COMPILED_SHARED_MEMORY)
    assert launched, "no compiled kernel was launched in this process (run the whole module)"
    for name, D, Dv, chunk, *_ in launched:
        assert tk.check_shared_memory(chunk, D, Dv, limit) <= limit  # the check let it through
    with capsys.disabled():
        print(f"\nshared memory per block, {torch.cuda.get_device_name(index)} (limit {limit:,} B):")
        print("kernel D Dv chunk causal quad separate compiled_B estimate_B")
        for key, shared in sorted(launched.items(), key=str):
            print(*key, shared, tk.shared_memory_bytes(key[3], key[1], key[2]))
    over = {key: shared for key, shared in launched.items() if shared > limit}
    assert not over, f"kernels launched although over the limit {limit}: {over}"
    for row in warmed:
        assert row["error"] is None or row["chunk"] != 64, f"compiling failed: {row}"


def test_a_refused_launch_names_the_limit(compiled_triton):
    """The estimate refuses chunk 128 at D = 128 before compiling anything: one clear error."""
    q, k, v = (x.cuda().float() for x in random_qkv(1, 1, 256, 128))
    with pytest.raises(ValueError, match=r"shared memory per block.*allows [\d,]+ B"):
        module(1, "triton", chunk_size=128)(q, k, v, True)


def test_a_launch_over_the_limit_is_one_clear_error(warmed, compiled_triton, monkeypatch):
    """With the estimate bypassed, a kernel that needs more than the device has raises the kernel's
    own need as a ValueError (not Triton's OutOfResources)."""
    monkeypatch.setattr(compiled_triton, "check_shared_memory", lambda *args, **kwargs: 0)
    D, chunk = OVER_LIMIT
    q, k, v = (x.cuda().float() for x in random_qkv(1, 1, 256, D))
    with torch.no_grad(), pytest.raises(ValueError, match=r"needs [\d,]+ B of shared memory per block; the device"):
        module(1, "triton", chunk_size=chunk)(q, k, v, True)
