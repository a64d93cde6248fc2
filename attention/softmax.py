"""Exact softmax attention (Vaswani et al. 2017, Eq. 1): softmax(q k^T / sqrt(D) + M) v, where
M is 0 for an allowed (query, key) pair and -inf otherwise.

``softmax`` calls torch's fused ``scaled_dot_product_attention``; ``softmax_reference``
materialises the (T, T) score matrix and is the readable reference that tests compare against.

Allowed pairs (query i, key j, positions 0..T-1), the conjunction of:

- ``causal``: j <= i;
- ``window`` = w > 0 (sliding window; 0 = no limit): causal, j > i - w, i.e. the last w keys up
  to and including i; non-causal, |i - j| < w, i.e. up to w - 1 keys on each side and i itself;
- ``exclude_self``: j != i (causal: keys 0..i-1, so query 0 has no key; used by eval_ppl's
  casino protocol, see ``attention.Attention``);
- ``attention_mask`` (B, T) bool, True = real token: key j must be real.

A query row with no allowed key outputs zeros; it is the only case where the output is forced,
so NaNs from upstream stay NaN: a NaN query gives a NaN output row, a NaN key or value gives NaN
in every row that may attend to it. A NaN key or value may also reach the other non-empty rows
of its head (a masked weight 0 times NaN is NaN in the matrix product; the fused kernel adds the
mask to the scores), never rows that are empty or belong to another head or batch element.
"""
import math

import torch
import torch.nn.functional as F

from attention.registry import Attention, check_qkv, register


def allowed_keys(T, causal, attention_mask=None, exclude_self=False, window=0, device=None):
    """Bool mask of the allowed (query, key) pairs (rules in the module docstring).

    Args:
        T (int): sequence length (queries and keys).
        causal (bool), exclude_self (bool), window (int >= 0): the pair rules.
        attention_mask (torch.Tensor | None): (B, T) bool, True = real token.
        device: device of the mask.

    Returns:
        None if every pair is allowed; else a bool tensor of shape (T, T) without
        ``attention_mask`` or (B, 1, T, T) / (B, 1, 1, T) with it, broadcastable to (B, H, T, T)
        with True = allowed.
    """
    mask = None
    if causal or window or exclude_self:
        i = torch.arange(T, device=device)[:, None]
        j = torch.arange(T, device=device)[None, :]
        mask = torch.ones(T, T, dtype=torch.bool, device=device)
        if causal:
            mask &= j <= i
        if window:
            mask &= (j > i - window) if causal else ((i - j).abs() < window)
        if exclude_self:
            mask &= j != i
    if attention_mask is not None:
        real_key = attention_mask[:, None, None, :]
        mask = real_key if mask is None else (mask & real_key)
    return mask


def _check_options(exclude_self, window):
    if not isinstance(exclude_self, bool):
        raise ValueError(f"exclude_self must be True or False; got {exclude_self!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an integer >= 0 (0 = no limit, w = the last w keys); got {window!r}")


class _SoftmaxBase(Attention):
    def __init__(self, exclude_self=False, window=0):
        super().__init__()
        _check_options(exclude_self, window)
        self.exclude_self, self.window = exclude_self, window

    def extra_repr(self):
        return f"exclude_self={self.exclude_self}, window={self.window}"


@register("softmax_reference")
class SoftmaxReference(_SoftmaxBase):
    """Exact softmax attention with the (B, H, T, T) score matrix materialised in float32 or
    wider (float64 stays float64); the output has v's dtype.

    Args:
        exclude_self (bool): query t never attends to key t (module docstring).
        window (int): sliding window w >= 0, 0 = no limit (module docstring).

    Raises:
        ValueError: bad ``exclude_self`` / ``window`` (constructor), bad shapes or mask (forward).
    """

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k, v: (B, H, T, D); attention_mask: (B, T) bool or None -> out (B, H, T, D)."""
        check_qkv(q, k, v, attention_mask)
        work = torch.promote_types(q.dtype, torch.float32)
        scores = (q.to(work) @ k.to(work).transpose(-1, -2)) / math.sqrt(q.shape[-1])
        mask = allowed_keys(q.shape[2], causal, attention_mask, self.exclude_self, self.window, q.device)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v.to(work)
        if mask is not None:
            # softmax of an all -inf row is NaN: those rows, and only those, are defined as zero
            out = out.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return out.to(v.dtype)


@register("softmax")
class Softmax(_SoftmaxBase):
    """Exact softmax attention through ``torch.nn.functional.scaled_dot_product_attention``
    (fused kernels; ``is_causal`` when no other rule applies, a bool mask otherwise).

    Args:
        exclude_self (bool): query t never attends to key t (module docstring).
        window (int): sliding window w >= 0, 0 = no limit (module docstring).

    Raises:
        ValueError: bad ``exclude_self`` / ``window`` (constructor), bad shapes or mask (forward).
    """

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k, v: (B, H, T, D); attention_mask: (B, T) bool or None -> out (B, H, T, D)."""
        check_qkv(q, k, v, attention_mask)
        if attention_mask is None and not self.exclude_self and not self.window:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        mask = allowed_keys(q.shape[2], causal, attention_mask, self.exclude_self, self.window, q.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        # rows with no allowed key (NaN or zero depending on the backend) are defined as zero
        return out.masked_fill(~mask.any(-1, keepdim=True), 0.0)
