"""Helpers for testing an attention against the registry's contract (like ``numpy.testing``):
seeded inputs and padding masks in the shapes and conventions of ``attention/__init__.py``.

- ``random_qkv``: seeded q, k of shape (B, H, T, D) and v of shape (B, H, T, Dv).
- ``padding_mask``: a (B, T) bool ``attention_mask`` (True = real token) with right padding,
  left padding or holes, or None.
- ``build_example``: a registered attention with the parameters its class declares for tests
  (``example_params``), or its reference (``reference_name`` / ``reference_params``).
- ``causal_cases``: (name, causal) for every registered attention and each value of ``causal`` it
  computes; ``example_padding``: the right-and-left padded mask the cross-device tests share.
- ``forward_and_gradients``: one call, optionally under autocast, and the gradients of q, k, v
  for an upstream gradient; ``relative_error``: ||x - ref|| / ||ref|| (Frobenius);
  ``BF16_BOUNDS``: the bounds of those errors under bfloat16 autocast (tests/attention/test_autocast.py
  on the CPU, tests/gpu/ on CUDA).

References to compare against are in the package itself: ``attention.build("softmax_reference",
...)`` (exact softmax with the (T, T) matrix, causal / window / exclude_self / padding) and
``attention.blockwise.explicit_attention(q, k, v, allowed)`` (softmax over an arbitrary
(B, H, T, T) bool mask of allowed pairs); both give zero for a row without an allowed key. For
the sizes every call of a test file shares, bind them once:
``qkv = functools.partial(random_qkv, B=2, H=3, T=13, D=5, Dv=4)``, then ``qkv(T=9)``.
"""
import torch

from attention.registry import attention_class, build, registered

__all__ = ["random_qkv", "padding_mask", "DEFAULT_PADS", "build_example", "causal_cases", "example_padding",
           "forward_and_gradients", "relative_error", "BF16_BOUNDS"]

# padding_mask's padding counts per batch row when ``pads`` is not given
DEFAULT_PADS = {"right": (4, 1), "left": (0, 3)}
# Relative (Frobenius) errors allowed under bfloat16 autocast against the float64 reference on the
# same float32 inputs, for standard normal q, k, v at the contract test's sizes: about 5x the largest
# measured on the CPU (output 0.0048, softmax_reference; gradients 0.0093, informer; bfloat16's unit
# roundoff is 2^-8 = 0.0039). Methods that compute in float32 inside (autocast off) stay near 1e-7.
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


def causal_modes(name):
    """The values of ``causal`` the registered attention ``name`` computes: [False, True], or
    [False] alone when its class declares causal "unsupported"."""
    return [False] if attention_class(name).causal == "unsupported" else [False, True]


def causal_cases():
    """(name, causal) for every registered attention and each value of ``causal`` it computes."""
    return [(name, causal) for name in registered() for causal in causal_modes(name)]


def example_padding(name, B, T):
    """A (B, T) bool ``attention_mask`` (True = real token, B >= 2): batch 0 with its last 5
    positions padded, batch 1 with its first 3 (causal: its first rows have no real key); None for
    a method whose class supports no ``attention_mask``."""
    if not attention_class(name).supports_attention_mask:
        return None
    return padding_mask("right", B, T, pads=(5, 0)) & padding_mask("left", B, T, pads=(0, 3))


def build_example(name, context, path="fast", seed=0):
    """The registered attention ``name`` with its class's ``example_params``, or with ``path``
    "reference" its reference (``reference_name`` with ``reference_params`` over the example
    parameters; the method itself when it declares none), in evaluation mode on the CPU. The
    global seed is set to ``seed`` first, so draws at construction (Linformer's E and F, Performer's
    projections) are the same for both paths.

    Args:
        name (str): a registered attention; context (dict): the model context (``build``);
        path (str): "fast" or "reference"; seed (int).

    Raises:
        ValueError: an unknown name or path.
    """
    if path not in ("fast", "reference"):
        raise ValueError(f"path must be 'fast' or 'reference'; got {path!r}")
    cls = attention_class(name)
    params = dict(cls.example_params)
    if path == "reference":
        name, params = cls.reference_name or name, {**params, **(cls.reference_params or {})}
    torch.manual_seed(seed)
    return build(name, context, **params).eval()
