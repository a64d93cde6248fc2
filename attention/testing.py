"""Helpers for testing an attention against the registry's contract (like ``numpy.testing``):
seeded inputs and padding masks in the shapes and conventions of ``attention/__init__.py``.

- ``random_qkv``: seeded q, k of shape (B, H, T, D) and v of shape (B, H, T, Dv).
- ``padding_mask``: a (B, T) bool ``attention_mask`` (True = real token) with right padding,
  left padding or holes, or None.

References to compare against are in the package itself: ``attention.build("softmax_reference",
...)`` (exact softmax with the (T, T) matrix, causal / window / exclude_self / padding) and
``attention.blockwise.explicit_attention(q, k, v, allowed)`` (softmax over an arbitrary
(B, H, T, T) bool mask of allowed pairs); both give zero for a row without an allowed key. For
the sizes every call of a test file shares, bind them once:
``qkv = functools.partial(random_qkv, B=2, H=3, T=13, D=5, Dv=4)``, then ``qkv(T=9)``.
"""
import torch

__all__ = ["random_qkv", "padding_mask", "DEFAULT_PADS"]

# padding_mask's padding counts per batch row when ``pads`` is not given
DEFAULT_PADS = {"right": (4, 1), "left": (0, 3)}


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
