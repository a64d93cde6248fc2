"""The contract of attention/__init__.py, checked for every registered attention with the
parameters its class declares for tests (``Attention.example_params``) and its other metadata
(``causal``, ``trainable``, ``supports_attention_mask``, ``reference_name`` /
``reference_params``, ``float32_tolerance``): no list of methods here, so a newly registered
attention is checked without an edit of this file.

Per method: output shape and dtype (float32, float64; T = 1 and a T that no block or chunk size
of the examples divides); batch elements independent; padded keys (``attention_mask`` False)
change no real position's output; causal "exact": a later token changes no earlier output,
"leaky": it does, "unsupported": causal=True raises; transposed (non-contiguous) inputs give the
contiguous results, gradients included; finite gradients (trainable methods; the others refuse
autograd); float32 close to float64; the fast path equal to its reference; the same output for
the same seed. What only one method has stays in tests/attention/test_<method>.py.
"""
import pytest
import torch

import attention
import configurator
from attention.testing import build_example, causal_cases, random_qkv

B, H, T, D = 2, 2, 23, 8  # T = 23 is prime: no block, chunk or bucket size of the examples divides it
LATER = 15  # the causality checks change the tokens from this position on
CONTEXT = {"layer_idx": 0, "block_size": T, "n_head": H, "head_dim": D}
NAMES = attention.registered()
EXACT = 1e-12  # float64: only rounding may differ


def metadata(name):
    return attention.attention_class(name)


def by_name_and_causal(reference_only=False):
    return [(name, causal) for name, causal in causal_cases() if has_reference(name) or not reference_only]


def by_name_causal_and_path():
    """(name, causal, "fast"), and (name, causal, "reference") for a method with a reference."""
    return [(name, causal, path) for name, causal in by_name_and_causal()
            for path in (("fast", "reference") if has_reference(name) else ("fast",))]


def has_reference(name):
    return metadata(name).reference_name is not None or metadata(name).reference_params is not None


def build(name, path="fast"):
    """The module ``name`` with its example parameters, or its reference (``path`` "reference":
    ``reference_name`` with ``reference_params`` over the example parameters), with the model
    context of the test sizes and the global seed 0 (for draws at construction, e.g. Linformer's
    E and F, the same for both paths), in evaluation mode."""
    return build_example(name, CONTEXT, path)


def padding(name):
    """The (B, T) ``attention_mask`` of the tests (True = real token): batch 0 with its last 5
    positions padded, batch 1 with its first 3 (causal, its first rows have no real key) and
    holes at 6, 10, 14, ...; None for a method that supports no ``attention_mask``."""
    if not metadata(name).supports_attention_mask:
        return None
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, T - 5:] = False
    mask[1, :3] = False
    mask[1, 6::4] = False
    return mask


def changed(x, where, seed=1):
    """A copy of x (B, H, T, D) with new standard normal values where ``where`` (broadcastable) is True."""
    fresh = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed), dtype=x.dtype)
    return torch.where(where, fresh, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length", [1, T])
@pytest.mark.parametrize("name,causal", by_name_and_causal())
def test_output_shape_and_dtype(name, causal, length, dtype):
    q, k, v = random_qkv(B, H, length, D, dtype=dtype)
    out = build(name)(q, k, v, causal)
    assert out.shape == (B, H, length, D) and out.dtype == dtype
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name,causal", by_name_and_causal())
def test_batch_elements_are_independent(name, causal):
    module = build(name)
    q, k, v = random_qkv(B, H, T, D)
    out = module(q, k, v, causal)
    first = torch.arange(B)[:, None, None, None] == 0
    other = module(*(changed(x, first) for x in (q, k, v)), causal)
    torch.testing.assert_close(other[1:], out[1:], rtol=EXACT, atol=EXACT)  # element 0 changed, the rest not
    alone = module(q[:1], k[:1], v[:1], causal)
    torch.testing.assert_close(alone, out[:1], rtol=EXACT, atol=EXACT)


@pytest.mark.parametrize("name,causal", by_name_and_causal())
def test_padded_keys_change_no_real_output(name, causal):
    module = build(name)
    q, k, v = random_qkv(B, H, T, D)
    mask = padding(name)
    if mask is None:
        with pytest.raises(ValueError, match="attention_mask"):
            module(q, k, v, causal, attention_mask=torch.ones(B, T, dtype=torch.bool))
        return
    out = module(q, k, v, causal, attention_mask=mask)
    padded = ~mask[:, None, :, None]
    other = module(*(changed(x, padded) for x in (q, k, v)), causal, attention_mask=mask)
    real = mask[:, None, :, None].expand_as(out)
    assert torch.isfinite(out[real]).all()
    torch.testing.assert_close(other[real], out[real], rtol=EXACT, atol=EXACT)


@pytest.mark.parametrize("name", NAMES)
def test_the_parameter_check_builds_it_on_the_meta_device(name):
    """train.py and eval_ppl.py check an attention's parameters by building it under
    torch.device("meta") (configurator.check_attention_params) before any data is read."""
    configurator.check_attention_params(name, dict(metadata(name).example_params), CONTEXT)


@pytest.mark.parametrize("name", NAMES)
def test_causal_support_is_what_the_class_declares(name):
    """"exact": changing the tokens from LATER on changes no output before LATER; "leaky": it
    does (why the method is declared so); "unsupported": causal=True is a ValueError."""
    support = metadata(name).causal
    assert support in attention.CAUSAL_KINDS
    module = build(name)
    q, k, v = random_qkv(B, H, T, D)
    if support == "unsupported":
        with pytest.raises(ValueError):
            module(q, k, v, True)
        return
    later = torch.arange(T)[None, None, :, None] >= LATER
    before = module(q, k, v, True)[:, :, :LATER]
    after = module(*(changed(x, later) for x in (q, k, v)), True)[:, :, :LATER]
    if support == "exact":
        torch.testing.assert_close(after, before, rtol=EXACT, atol=EXACT)
    else:
        assert (after - before).abs().max() > 1e-6, f"{name} is declared 'leaky' but no earlier output changed"


@pytest.mark.parametrize("name,causal,path", by_name_causal_and_path())
def test_transposed_views_give_the_contiguous_results(name, causal, path):
    """q, k, v as the model makes them: transposed views of (B, T, H, D), not contiguous when
    H > 1. Outputs, and gradients for a trainable method, equal those of contiguous copies (a
    view in a custom backward once failed on them: BigBird's per-head key blocks); the fast path
    and the reference both."""
    module = build(name, path).double()
    trainable = metadata(name).trainable
    base = torch.randn(3, B, T, H, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    results = []
    for contiguous in (False, True):
        leaf = base.clone().requires_grad_(trainable)
        q, k, v = (x.transpose(1, 2) for x in leaf)  # (B, H, T, D) views
        if contiguous:
            q, k, v = (x.contiguous() for x in (q, k, v))
        else:
            assert not q.is_contiguous()
        out = module(q, k, v, causal)
        if trainable:
            out.backward(torch.ones_like(out).cumsum(-2))  # a position-dependent upstream gradient
        results.append((out.detach(), leaf.grad))
    (out_view, grad_view), (out_cont, grad_cont) = results
    torch.testing.assert_close(out_view, out_cont, rtol=EXACT, atol=EXACT)
    if trainable:
        torch.testing.assert_close(grad_view, grad_cont, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name,causal", by_name_and_causal())
def test_gradients_are_finite_or_refused(name, causal):
    """Trainable: finite outputs and gradients of q, k, v, also with padding (causal, the first
    rows of batch 1 have no real key). Inference-only: a call under autograd raises
    InferenceOnlyError."""
    module = build(name).train()
    leaf = torch.stack(random_qkv(B, H, T, D)).requires_grad_()
    if not metadata(name).trainable:
        with pytest.raises(attention.InferenceOnlyError):
            module(*leaf, causal)
        return
    for mask in (None, padding(name)):
        leaf.grad = None
        out = module(*leaf, causal, attention_mask=mask)
        assert torch.isfinite(out).all()
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype))
        assert torch.isfinite(leaf.grad).all() and leaf.grad.abs().sum() > 0


@pytest.mark.parametrize("name,causal", by_name_and_causal())
def test_float32_is_close_to_float64(name, causal):
    module = build(name)
    q, k, v = random_qkv(B, H, T, D)
    wide = module(q, k, v, causal)
    narrow = module(q.float(), k.float(), v.float(), causal)
    torch.testing.assert_close(narrow.double(), wide, **metadata(name).float32_tolerance)


@pytest.mark.parametrize("length", [1, T])
@pytest.mark.parametrize("name,causal", by_name_and_causal(reference_only=True))
def test_fast_path_equals_the_reference(name, causal, length):
    q, k, v = random_qkv(B, H, length, D)
    for mask in (None, padding(name)):
        mask = None if mask is None else mask[:, :length]
        fast = build(name)(q, k, v, causal, attention_mask=mask)
        expected = build(name, "reference")(q, k, v, causal, attention_mask=mask)
        torch.testing.assert_close(fast, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,causal", by_name_and_causal())
def test_same_seed_same_output(name, causal):
    """Two modules built alike (the method's seed parameters at their defaults, the global seed
    at construction alike) give the same output, whatever the global random state at the call;
    so does a second call."""
    q, k, v = random_qkv(B, H, T, D)
    outputs = []
    for call_seed in (1, 2):
        module = build(name)
        torch.manual_seed(call_seed)
        outputs += [module(q, k, v, causal), module(q, k, v, causal)]
    for out in outputs[1:]:
        assert torch.equal(out, outputs[0])
