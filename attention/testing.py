"""Helpers for testing an attention against the registry's contract (like ``numpy.testing``):
seeded inputs and padding masks in the shapes and conventions of ``attention/__init__.py``, and
the contract's checks that tests/attention/test_contract.py runs over every registered attention.

- ``random_qkv``: seeded q, k of shape (B, H, T, D) and v of shape (B, H, T, Dv).
- ``padding_mask``: a (B, T) bool ``attention_mask`` (True = real token) with right padding,
  left padding or holes, or None.
- ``build_example``: an attention with the parameters its class declares for tests
  (``example_params``) or others, or its reference (``reference_name`` / ``reference_params``).
- ``causal_cases``: (name, causal) for every registered attention and each value of ``causal`` it
  computes; ``example_padding``: the right-and-left padded mask the cross-device tests share.
- ``forward_and_gradients``: one call, optionally under autocast, and the gradients of q, k, v
  for an upstream gradient; ``relative_error``: ||x - ref|| / ||ref|| (Frobenius);
  ``BF16_BOUNDS``: the bounds of those errors under bfloat16 autocast (``check_autocast`` on the
  CPU, tests/gpu/ on CUDA).
- ``allowed_output_dtypes``: the contract's output dtype rule; ``in_repository``: whether an
  attention is one of the repository's (else registered from a file passed with ``--import``).
- The checks, each raising AssertionError with what differs: ``check_autocast`` (a call under
  bfloat16 autocast as the model makes it: shape, dtype rule, finite, accuracy, gradients) and
  ``check_causality`` (changing later tokens changes no earlier output, or does for "leaky").
  They take a registered name or an ``Attention`` subclass that is not registered (the tests' toy
  attentions with a known defect).

References to compare against are in the package itself: ``attention.build("softmax_reference",
...)`` (exact softmax with the (T, T) matrix, causal / window / exclude_self / padding) and
``attention.blockwise.explicit_attention(q, k, v, allowed)`` (softmax over an arbitrary
(B, H, T, T) bool mask of allowed pairs); both give zero for a row without an allowed key. For
the sizes every call of a test file shares, bind them once:
``qkv = functools.partial(random_qkv, B=2, H=3, T=13, D=5, Dv=4)``, then ``qkv(T=9)``.
"""
import inspect

import torch

from attention.registry import Attention, attention_class, build, registered

__all__ = ["random_qkv", "padding_mask", "DEFAULT_PADS", "build_example", "causal_cases", "example_padding",
           "forward_and_gradients", "relative_error", "BF16_BOUNDS", "allowed_output_dtypes", "in_repository",
           "class_of", "changed", "check_autocast", "check_causality"]

# padding_mask's padding counts per batch row when ``pads`` is not given
DEFAULT_PADS = {"right": (4, 1), "left": (0, 3)}
# Relative (Frobenius) errors allowed under bfloat16 autocast against the float64 reference on the
# same inputs (cast to float64), for standard normal q, k, v at check_autocast's sizes: about 3-5x the
# largest measured on the CPU, float32 or bfloat16 q, k, v (output 0.0066, softmax_reference at
# T = 200; gradients 0.0093, informer; bfloat16's unit roundoff is 2^-8 = 0.0039). Methods that
# compute in float32 inside (autocast off) stay near 1e-7 with float32 inputs. An all-zeros output
# has error 1. Not within them: Informer, causal, bfloat16 inputs at T = 200 (0.056; its measurement
# ranks in bfloat16: tests/attention/test_contract.py's KNOWN_FAILURES).
BF16_BOUNDS = {"output": 0.02, "gradients": 0.05}


def random_qkv(B, H, T, D, Dv=None, dtype=torch.float64, seed=0, scale=1.0):
    """Seeded standard normal q, k and v (on the CPU), drawn in that order from one
    ``torch.Generator().manual_seed(seed)``: the same seed gives the same tensors.

    Args:
        B, H, T, D (int): batch, heads, sequence length, head dim of q and k.
        Dv (int | None): head dim of v; None = D.
        dtype (torch.dtype): dtype of all three (drawn in that dtype, not cast); float64 by
            default, for comparisons at rtol ~ 1e-12.
        seed (int): the generator's seed.
        scale (float): q and k are multiplied by it (v is not), e.g. to sharpen or flatten the
            softmax; 1.0 leaves the draws as they are.

    Returns:
        (q, k, v): q, k of shape (B, H, T, D), v of shape (B, H, T, Dv), all of ``dtype``.
    """
    g = torch.Generator().manual_seed(seed)
    q, k = (scale * torch.randn(B, H, T, D, generator=g, dtype=dtype) for _ in range(2))
    return q, k, torch.randn(B, H, T, D if Dv is None else Dv, generator=g, dtype=dtype)


def padding_mask(kind, B, T, pads=None, every=4, first=2):
    """A (B, T) bool ``attention_mask``, True = real token, False = padding.

    Args:
        kind: which positions are padding (False):
            - None: none; returns None (no mask, every token real).
            - "right": the last ``pads[b]`` positions of row b, ``mask[b, T - pads[b]:]``.
            - "left": the first ``pads[b]`` positions of row b, ``mask[b, :pads[b]]``; under
              causal attention the first ``pads[b]`` queries of row b have no real key.
            - "holes": positions first, first + every, first + 2 * every, ... < T in every
              row, ``mask[:, first::every]``.
        B, T (int): batch size and sequence length.
        pads (sequence of int | None): for "right" / "left", the number of padding positions of
            rows 0, 1, ... (0 <= pads[b] <= T; rows past its end have none; at most B entries).
            None: ``DEFAULT_PADS[kind]`` cut to B rows, i.e. right: row 0 its last 4 positions,
            row 1 its last 1; left: row 1 its first 3 (row 0 and rows from 2 on: none).
        every, first (int): for "holes", the period and the first padded position.

    Returns:
        torch.Tensor | None: (B, T) torch.bool on the CPU, or None for kind None.

    Raises:
        ValueError: an unknown kind, more than B entries in ``pads`` or one outside [0, T].
    """
    if kind is None:
        return None
    if kind not in ("right", "left", "holes"):
        raise ValueError(f"padding kind must be None, 'right', 'left' or 'holes'; got {kind!r}")
    mask = torch.ones(B, T, dtype=torch.bool)
    if kind == "holes":
        mask[:, first::every] = False
        return mask
    if pads is None:
        pads = DEFAULT_PADS[kind][:B]
    if len(pads) > B or any(not 0 <= n <= T for n in pads):
        raise ValueError(f"pads must give at most B = {B} counts, each in [0, T = {T}]; got {tuple(pads)}")
    for b, n in enumerate(pads):
        if kind == "right":
            mask[b, T - n:] = False
        else:
            mask[b, :n] = False
    return mask


def forward_and_gradients(module, q, k, v, causal, attention_mask=None, grad=None, autocast=None):
    """One call of an attention ``module`` and, when ``grad`` is given, the gradients of q, k, v.

    Args:
        module: a registered attention (``attention.build``), on the inputs' device.
        q, k, v (torch.Tensor): (B, H, T, D) each (the same shapes: they are stacked into one
            leaf); cast to nothing, so their dtype and device are the call's.
        causal (bool); attention_mask (torch.Tensor | None): (B, T) bool on the inputs' device.
        grad (torch.Tensor | None): the upstream gradient dL/d out, (B, H, T, D); None = forward
            only, under ``torch.no_grad`` (the way an inference-only method is called).
        autocast (torch.dtype | None): run the call under ``torch.autocast(device_type, autocast)``
            (as train.py's ``--dtype`` runs the model); None = no autocast.

    Returns:
        (out, grads): out detached in its own dtype; grads a (3, B, H, T, D) tensor of the
        gradients of q, k, v in the inputs' dtype, or None without ``grad``.
    """
    leaf = torch.stack([q, k, v]).detach().requires_grad_(grad is not None)
    device_type = q.device.type
    with torch.set_grad_enabled(grad is not None), \
            torch.autocast(device_type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        out = module(*leaf, causal, attention_mask=attention_mask)
    if grad is None:
        return out.detach(), None
    out.backward(grad.to(out.dtype))
    return out.detach(), leaf.grad


def relative_error(x, reference):
    """||x - reference|| / ||reference|| (Frobenius norms, computed in float64 on the CPU; 0 when
    both are zero). x and reference: tensors of the same shape, any float dtype and device."""
    x, reference = x.detach().double().cpu(), reference.detach().double().cpu()
    scale = reference.norm()
    error = (x - reference).norm()
    return float(error / scale) if scale > 0 else float(error)


def class_of(attention):
    """The class of ``attention``: a registered name (``attention_class``) or an ``Attention``
    subclass, registered or not (e.g. a test's toy attention), returned as it is.

    Raises:
        ValueError: an unknown name; TypeError: neither a str nor an ``Attention`` subclass.
    """
    if isinstance(attention, str):
        return attention_class(attention)
    if isinstance(attention, type) and issubclass(attention, Attention):
        return attention
    raise TypeError(f"expected a registered attention's name or an Attention subclass; got {attention!r}")


def label_of(attention):
    """A name for messages: the registered name, else the class's qualified name."""
    return attention if isinstance(attention, str) else getattr(attention, "registry_name", attention.__qualname__)


def in_repository(attention):
    """Whether ``attention`` (a name or a class) is defined in the ``attention`` package, i.e. one of
    the repository's methods with its family module, config file (``configs/attention/``) and FLOP
    formula; False for one registered from outside (a file passed with ``--import``)."""
    module = class_of(attention).__module__
    return module == "attention" or module.startswith("attention.")


def allowed_output_dtypes(v_dtype, autocast=None):
    """The dtypes the contract (``attention/__init__.py``, ``attention.Attention``) allows for the
    output of a call with v of dtype ``v_dtype``: v's dtype; under autocast (``autocast``: the
    dtype of the enclosing ``torch.autocast``, None = none) also the autocast dtype, as PyTorch's
    own products and ``scaled_dot_product_attention`` give under autocast. With v already in the
    autocast dtype, the model's case (its ``c_attn`` output under autocast), that is v's dtype
    alone: bfloat16 in, bfloat16 out.

    Returns:
        set of torch.dtype.
    """
    return {v_dtype} if autocast is None else {v_dtype, autocast}


def causal_modes(attention):
    """The values of ``causal`` the attention (a registered name or a class) computes: [False,
    True], or [False] alone when its class declares causal "unsupported"."""
    return [False] if class_of(attention).causal == "unsupported" else [False, True]


def causal_cases():
    """(name, causal) for every registered attention and each value of ``causal`` it computes."""
    return [(name, causal) for name in registered() for causal in causal_modes(name)]


def example_padding(attention, B, T):
    """A (B, T) bool ``attention_mask`` (True = real token, B >= 2): batch 0 with its last 5
    positions padded, batch 1 with its first 3 (causal: its first rows have no real key); None for
    a method (a registered name or a class) that supports no ``attention_mask``."""
    if not class_of(attention).supports_attention_mask:
        return None
    return padding_mask("right", B, T, pads=(5, 0)) & padding_mask("left", B, T, pads=(0, 3))


def build_example(attention, context, path="fast", seed=0, params=None):
    """The attention ``attention`` (a registered name, or an ``Attention`` subclass, registered or
    not) with its class's ``example_params``, or with ``path`` "reference" its reference
    (``reference_name`` with ``reference_params`` over the parameters; the method itself when it
    declares none), in evaluation mode on the CPU. The global seed is set to ``seed`` first, so
    draws at construction (Linformer's E and F, Performer's projections) are the same for both
    paths.

    Args:
        attention (str | type); context (dict): the model context (``build``; a class gets the
            keys its constructor declares, as ``build`` passes them);
        path (str): "fast" or "reference"; seed (int);
        params (dict | None): the user parameters; None = the class's ``example_params``, {} = the
            constructor's defaults.

    Raises:
        ValueError: an unknown name or path.
    """
    if path not in ("fast", "reference"):
        raise ValueError(f"path must be 'fast' or 'reference'; got {path!r}")
    cls = class_of(attention)
    params = dict(cls.example_params if params is None else params)
    if path == "reference":
        attention, params = cls.reference_name or attention, {**params, **(cls.reference_params or {})}
    torch.manual_seed(seed)
    if isinstance(attention, str):
        return build(attention, context, **params).eval()
    declared = inspect.signature(attention.__init__).parameters
    return attention(**{k: v for k, v in context.items() if k in declared}, **params).eval()


def changed(x, where, seed=1):
    """A copy of x (B, H, T, D) with new standard normal values where ``where`` (broadcastable) is True."""
    fresh = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed), dtype=x.dtype)
    return torch.where(where, fresh, x)


def check_autocast(attention, causal, input_dtype=torch.bfloat16, size=(2, 2, 23, 8), autocast=torch.bfloat16):
    """One call of ``attention`` (a registered name or a class, with its ``example_params``) under
    ``torch.autocast("cpu", autocast)``, as ``train.py --dtype=bfloat16`` makes it: q, k, v in
    ``input_dtype`` (bfloat16: what the model's ``c_attn`` hands the attention under autocast;
    float32: a caller outside autocast's casts), with ``example_padding``, and for a trainable
    method a backward of a fixed upstream gradient. Checked: the output's shape (B, H, T, D); its
    dtype (``allowed_output_dtypes``); finite output and gradients; relative errors within
    ``BF16_BOUNDS`` of the float64 reference (``build_example``'s "reference" path) on the same
    inputs (the rounded q, k, v and upstream gradient, cast to float64), so an output of zeros
    (error 1) fails.

    Args:
        attention (str | type); causal (bool); input_dtype (torch.dtype);
        size (tuple): (B, H, T, D), B >= 2; autocast (torch.dtype): the autocast dtype.

    Returns:
        dict: the relative errors, {"output": float, "gradients": float | None (not trainable)}.

    Raises:
        AssertionError: the first property that fails, with the attention, the call and the values.
    """
    B, H, T, D = size
    cls = class_of(attention)
    context = {"layer_idx": 0, "block_size": T, "n_head": H, "head_dim": D}
    what = (f"{label_of(attention)} (causal={causal}, {input_dtype} q, k, v under {autocast} autocast, "
            f"(B, H, T, D) = {size})")
    q, k, v = (x.to(input_dtype) for x in random_qkv(B, H, T, D))
    grad = None
    if cls.trainable:
        grad = torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        grad = grad.to(input_dtype)
    mask = example_padding(attention, B, T)
    reference = build_example(attention, context, "reference").double()
    ref_out, ref_grads = forward_and_gradients(reference, q.double(), k.double(), v.double(), causal, mask,
                                               None if grad is None else grad.double())
    module = build_example(attention, context).train(cls.trainable)
    leaf = torch.stack([q, k, v]).requires_grad_(grad is not None)
    with torch.set_grad_enabled(grad is not None), torch.autocast("cpu", dtype=autocast):
        out = module(*leaf, causal, attention_mask=mask)
    if tuple(out.shape) != (B, H, T, D):
        raise AssertionError(f"{what}: output of shape {tuple(out.shape)}, expected (B, H, T, D) = {(B, H, T, D)}")
    allowed = allowed_output_dtypes(v.dtype, autocast)
    if out.dtype not in allowed:
        raise AssertionError(f"{what}: output in {out.dtype}; the contract allows "
                             f"{' or '.join(sorted(map(str, allowed)))} (v's dtype, or the autocast dtype)")
    if not torch.isfinite(out).all():
        raise AssertionError(f"{what}: {int((~torch.isfinite(out)).sum())} output values are not finite")
    errors = {"output": relative_error(out, ref_out), "gradients": None}
    error = errors["output"]
    if not error <= BF16_BOUNDS["output"]:
        raise AssertionError(f"{what}: output's relative error {error:.3g} against the float64 reference, "
                             f"allowed {BF16_BOUNDS['output']} (BF16_BOUNDS)")
    if grad is not None:
        if not out.requires_grad:
            raise AssertionError(f"{what}: the output does not depend on q, k, v through autograd (a trainable "
                                 f"method)")
        out.backward(grad.to(out.dtype))
        grads = leaf.grad
        if not torch.isfinite(grads).all():
            raise AssertionError(f"{what}: {int((~torch.isfinite(grads)).sum())} gradient values are not finite")
        error = errors["gradients"] = relative_error(grads, ref_grads)
        if not error <= BF16_BOUNDS["gradients"]:
            raise AssertionError(f"{what}: the gradients' relative error {error:.3g} against the float64 "
                                 f"reference, allowed {BF16_BOUNDS['gradients']} (BF16_BOUNDS)")
    return errors


def check_causality(attention, T, params=None, later=None, B=2, H=2, D=8, exact=1e-12, leak_expected=True):
    """The causal support that the class of ``attention`` (a registered name or a class) declares,
    at length T in float64: changing q, k and v from position ``later`` on changes no output
    before it for causal "exact" (at most ``exact``, rounding), and with ``leak_expected`` some
    output for "leaky" (why the method is declared so); causal=True raises ValueError for
    "unsupported". At a T beyond a block or chunk size this reaches the paths chosen by length
    (e.g. chunked paths with several chunks).

    Args:
        attention (str | type); T (int);
        params (dict | None): the user parameters (None: ``example_params``; {}: the defaults);
        later (int | None): the first changed position; None = (2 T) // 3 made odd, inside a chunk
            for any even chunk size, so that a leak inside a chunk shows too;
        B, H, D (int): the other sizes; exact (float): the largest change allowed for "exact";
        leak_expected (bool): whether a "leaky" method must show a change here (a leak depends on
            the input: e.g. Reformer's at T = 300 with its defaults needs a bucket shared across
            the changed position, which these inputs need not have).

    Raises:
        AssertionError: the class's declaration does not hold, with the largest change.
    """
    support = class_of(attention).causal
    module = build_example(attention, {"layer_idx": 0, "block_size": T, "n_head": H, "head_dim": D},
                           params=params).double()
    q, k, v = random_qkv(B, H, T, D)
    later = (2 * T) // 3 | 1 if later is None else later
    what = f"{label_of(attention)} (causal support {support!r}, T = {T}, tokens changed from {later} on)"
    if support == "unsupported":
        try:
            with torch.no_grad():
                module(q, k, v, True)
        except ValueError:
            return
        raise AssertionError(f"{what}: causal=True raised no ValueError")
    future = torch.arange(T)[None, None, :, None] >= later
    with torch.no_grad():
        before = module(q, k, v, True)[:, :, :later]
        after = module(*(changed(x, future) for x in (q, k, v)), True)[:, :, :later]
    change = float((after - before).abs().max())
    if support == "exact" and not change <= exact:
        first = int(((after - before).abs() > exact).any(-1).any(0).any(0).nonzero()[0])
        raise AssertionError(f"{what}: an earlier output changed by {change:.3g} (from position {first} on); "
                             f"declared exactly causal")
    if support == "leaky" and leak_expected and not change > 1e-6:
        raise AssertionError(f"{what}: declared 'leaky' but no earlier output changed (largest change {change:.3g})")
