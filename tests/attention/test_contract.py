"""The contract of attention/__init__.py, checked for every registered attention (and one
registered by a file passed with ``--import``) with the parameters its class declares for tests
(``Attention.example_params``) and its other metadata (``causal``, ``trainable``,
``supports_attention_mask``, ``reference_name`` / ``reference_params``, ``float32_tolerance``): no
list of methods here, so a newly registered attention is checked without an edit of this file.
``python -m pytest tests/attention/test_contract.py --import=FILE -k NAME`` checks everything below
for one attention.

Per method: output shape and dtype (float32, float64; T = 1 and a T that no block or chunk size
of the examples divides); batch elements independent; padded keys (``attention_mask`` False)
change no real position's output; causal "exact": a later token changes no earlier output,
"leaky": it does, "unsupported": causal=True raises, at T = 23 with the example parameters and
at T = 300 with the defaults (the paths chosen by length: several chunks, blocks, groups);
transposed (non-contiguous) inputs give the contiguous results, gradients included; finite
gradients (trainable methods; the others refuse autograd); float32 close to float64; the fast
path equal to its reference; the same output for the same seed; under bfloat16 autocast on the
CPU, as ``train.py --dtype=bfloat16`` runs it on a GPU, with bfloat16 q, k, v (what the model's
``c_attn`` hands the attention) and with float32 ones: the output's shape, its dtype by the
contract's rule (v's dtype, or the autocast dtype: ``attention.testing.allowed_output_dtypes``),
output and gradients finite and within ``attention.testing.BF16_BOUNDS`` of the float64
reference, with padding, at the sizes below and at T = 200, D = 32 (several blocks of every
path; where Reformer's buckets, hashed in bfloat16, once differed from float32's). What only one
method has stays in tests/attention/test_<method>.py.

The checks are ``attention.testing``'s (``check_autocast``, ``check_causality``); they take a
class as well as a name, and the toy attentions at the end of this file, one defect each and not
registered, show that each defect fails its check.
"""
import pytest
import torch

import attention
import configurator
from attention.blockwise import explicit_attention
from attention.registry import allowed_keys
from attention.testing import build_example, causal_cases, changed, check_autocast, check_causality, random_qkv

B, H, T, D = 2, 2, 23, 8  # T = 23 is prime: no block, chunk or bucket size of the examples divides it
LATER = 15  # the causality checks change the tokens from this position on
CONTEXT = {"layer_idx": 0, "block_size": T, "n_head": H, "head_dim": D}
NAMES = attention.registered()
EXACT = 1e-12  # float64: only rounding may differ
LONG = 300  # the causality check with the defaults: several chunks of 64 (or blocks, groups) of every path
AUTOCAST_SIZES = [(B, H, T, D), (2, 2, 200, 32)]  # (B, H, T, D): these, and several blocks of every path
# Cases of the autocast test that fail today, each with why: (name, causal, input dtype, T) -> reason.
KNOWN_FAILURES = {}  # (name, causal, input dtype, T) -> why it fails, each an xfail(strict=True) until fixed


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
    check_causality(name, T, later=LATER, B=B, H=H, D=D)


@pytest.mark.parametrize("name", NAMES)
def test_causal_support_holds_on_long_sequences_with_the_defaults(name):
    """The same at T = LONG with the constructor's defaults, where a method's paths chosen by
    length or by its default settings run (chunked paths with several chunks, blocks, groups of
    queries), with the tokens changed from 201 on (inside a chunk of any even size). A "leaky"
    method need not leak on these inputs."""
    check_causality(name, LONG, params={}, leak_expected=False)


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


def autocast_cases():
    """(name, causal, input dtype, size) for every registered attention, the known failures marked
    as strict xfails (a fix makes the run fail until the entry goes)."""
    cases = []
    for name, causal in by_name_and_causal():
        for dtype in (torch.bfloat16, torch.float32):
            for size in AUTOCAST_SIZES:
                reason = KNOWN_FAILURES.get((name, causal, dtype, size[2]))
                marks = [pytest.mark.xfail(reason=reason, strict=True, raises=AssertionError)] if reason else []
                ids = f"{name}-{causal}-{str(dtype)[6:]}_inputs-T{size[2]}_D{size[3]}"
                cases.append(pytest.param(name, causal, dtype, size, marks=marks, id=ids))
    return cases


@pytest.mark.parametrize("name,causal,input_dtype,size", autocast_cases())
def test_under_bfloat16_autocast(name, causal, input_dtype, size):
    """One call under ``torch.autocast("cpu", torch.bfloat16)`` with q, k, v in ``input_dtype``
    (bfloat16 as the model passes them; float32), backward too for a trainable method: shape,
    dtype rule, finite, within BF16_BOUNDS of the float64 reference (``check_autocast``). The
    CPU twin of tests/gpu/test_attention_cuda.py's bfloat16 test; a custom backward once mixed the
    float32 weights saved under autocast with the bfloat16 output gradient (BigBird's and
    Longformer's block-sparse path)."""
    check_autocast(name, causal, input_dtype, size)


# ---------------------------------------------------------------------------------------------
# Toy attentions with one defect each (not registered: ``register`` has no inverse), and the check
# that catches it. ToySoftmax is correct; each defect is a subclass that changes one thing.


class ToySoftmax(attention.Attention):
    """Softmax attention through the (T, T) matrix in float32 or wider, autocast off inside, the
    output in v's dtype: passes every check."""
    causal = "exact"

    def allowed(self, T, causal, attention_mask):
        allowed = allowed_keys(T, causal, attention_mask)
        return torch.ones(T, T, dtype=torch.bool) if allowed is None else allowed

    def forward(self, q, k, v, causal, attention_mask=None):
        with torch.autocast("cpu", enabled=False):
            out = explicit_attention(q, k, v, self.allowed(q.shape[-2], causal, attention_mask))
        return out.to(v.dtype)


class ZerosForBfloat16(ToySoftmax):
    """(a) all zeros for bfloat16 inputs."""

    def forward(self, q, k, v, causal, attention_mask=None):
        out = super().forward(q, k, v, causal, attention_mask)
        return torch.zeros_like(out) if v.dtype == torch.bfloat16 else out


class Float32ForBfloat16(ToySoftmax):
    """(b) float32 output for bfloat16 inputs (a forgotten cast back)."""

    def forward(self, q, k, v, causal, attention_mask=None):
        out = super().forward(q, k, v, causal, attention_mask)
        return out.float() if v.dtype == torch.bfloat16 else out


class Float16UnderAutocast(ToySoftmax):
    """(c) float16 output under autocast, whatever the inputs."""
    dtype = torch.float16

    def forward(self, q, k, v, causal, attention_mask=None):
        out = super().forward(q, k, v, causal, attention_mask)
        return out.to(self.dtype) if torch.is_autocast_enabled("cpu") else out


class Float64UnderAutocast(Float16UnderAutocast):
    """(c) float64 output under autocast, whatever the inputs."""
    dtype = torch.float64


class WrongShapeUnderAutocast(ToySoftmax):
    """(d) (B, T, H, D) instead of (B, H, T, D) under autocast."""

    def forward(self, q, k, v, causal, attention_mask=None):
        out = super().forward(q, k, v, causal, attention_mask)
        return out.transpose(1, 2) if torch.is_autocast_enabled("cpu") else out


class LeaksBeyondOneChunk(ToySoftmax):
    """(e) a fast path for sequences longer than one chunk of 64 that is causal between chunks
    only: inside its chunk a query also sees the later keys."""
    CHUNK = 64

    def allowed(self, T, causal, attention_mask):
        allowed = super().allowed(T, causal, attention_mask)
        if not causal or T <= self.CHUNK:
            return allowed
        chunk = torch.arange(T) // self.CHUNK
        return allowed | ((chunk[:, None] == chunk[None, :]) & super().allowed(T, False, attention_mask))


AUTOCAST = {"bfloat16": torch.bfloat16, "float32": torch.float32}
# toy -> (the q, k, v dtypes under autocast whose check must fail, what the failure names); the other
# dtypes pass, so that the failure is the defect's
TOY_AUTOCAST_FAILURES = {
    ZerosForBfloat16: (["bfloat16"], "relative error 1 "),
    Float32ForBfloat16: (["bfloat16"], "output in torch.float32; the contract allows torch.bfloat16"),
    Float16UnderAutocast: (["bfloat16", "float32"], "output in torch.float16"),
    Float64UnderAutocast: (["bfloat16", "float32"], "output in torch.float64"),
    WrongShapeUnderAutocast: (["bfloat16", "float32"], r"output of shape \(2, 23, 2, 8\)"),
    LeaksBeyondOneChunk: ([], None),
}


@pytest.mark.parametrize("toy", list(TOY_AUTOCAST_FAILURES), ids=lambda toy: toy.__name__)
def test_each_toy_defect_fails_its_check(toy):
    failing, message = TOY_AUTOCAST_FAILURES[toy]
    for causal in (False, True):
        for dtype in AUTOCAST:
            if dtype in failing:
                with pytest.raises(AssertionError, match=message):
                    check_autocast(toy, causal, AUTOCAST[dtype])
            else:
                check_autocast(toy, causal, AUTOCAST[dtype])
    check_causality(toy, T, later=LATER)  # every toy is causal at T = 23 (one chunk)
    if toy is LeaksBeyondOneChunk:
        with pytest.raises(AssertionError, match=r"earlier output changed .*\(from position 192 on\)"):
            check_causality(toy, LONG, params={})
    else:
        check_causality(toy, LONG, params={})


def test_the_correct_toy_passes_every_check():
    for causal in (False, True):
        for dtype in AUTOCAST.values():
            for size in AUTOCAST_SIZES:
                check_autocast(ToySoftmax, causal, dtype, size)
    check_causality(ToySoftmax, T, later=LATER)
    check_causality(ToySoftmax, LONG, params={})
