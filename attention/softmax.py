"""Exact softmax attention (Vaswani et al. 2017, Eq. 1): softmax(q k^T / sqrt(D) + M) v, where
M is 0 for an allowed (query, key) pair and -inf otherwise.

``softmax`` calls torch's fused ``scaled_dot_product_attention``; ``softmax_reference``
materialises the (T, T) score matrix and is the readable reference that tests compare against.

Allowed pairs (query i, key j, positions 0..T-1; ``attention.registry.allowed_keys``, also
importable from here), the conjunction of:

- ``causal``: j <= i;
- ``window`` = w > 0 (sliding window; 0 = no limit): causal, j > i - w, i.e. the last w keys up
  to and including i; non-causal, |i - j| < w, i.e. up to w - 1 keys on each side and i itself;
- ``exclude_self``: j != i (causal: keys 0..i-1, so query 0 has no key; used by eval_ppl's
  casino protocol, see ``attention.Attention``);
- ``attention_mask`` (B, T) bool, True = real token: key j must be real.

Decoding (``decode = "kv_cache"``, both modules): ``prefill`` keeps the prompt's keys and values
in an ``attention.kv_cache.KVCache`` and ``step`` appends one token and attends with the same rules.

A query row with no allowed key outputs zeros; it is the only case where the output is forced,
so NaNs from upstream stay NaN: a NaN query gives a NaN output row, a NaN key or value gives NaN
in every row that may attend to it. A NaN key or value may also reach the other non-empty rows
of its head (a masked weight 0 times NaN is NaN in the matrix product; the fused kernel adds the
mask to the scores), never rows that are empty or belong to another head or batch element.
"""
import math

import torch
import torch.nn.functional as F

from attention.kv_cache import KVCache
from attention.registry import Attention, allowed_keys, check_qkv, check_step, matrix_flops, register


def _check_options(exclude_self, window):
    if not isinstance(exclude_self, bool):
        raise ValueError(f"exclude_self must be True or False; got {exclude_self!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an integer >= 0 (0 = no limit, w = the last w keys); got {window!r}")


class _SoftmaxBase(Attention):
    """What both softmax modules share: their options and the decode path, a KV cache
    (``attention.kv_cache.KVCache``: preallocated, grown geometrically). ``step`` attends with the
    module's own kernel (``_attend``) to the cached keys its rules allow: the last ``window`` ones
    with a window (the cache still keeps every token), all but the new one with ``exclude_self``,
    real ones only; no allowed key gives zeros, as in ``forward``."""

    decode = "kv_cache"

    def __init__(self, exclude_self=False, window=0):
        super().__init__()
        _check_options(exclude_self, window)
        self.exclude_self, self.window = exclude_self, window

    def extra_repr(self):
        return f"exclude_self={self.exclude_self}, window={self.window}"

    def prefill(self, q, k, v, attention_mask=None):
        """``Attention.prefill``: the causal forward, and a ``KVCache`` of k and v (their dtype)."""
        return self.forward(q, k, v, True, attention_mask), KVCache(k, v, attention_mask)

    def step(self, q_t, k_t, v_t, state):
        """``Attention.step``: k_t, v_t appended to the cache, q_t attends to the allowed keys."""
        check_step(q_t, k_t, v_t)
        state.append(k_t, v_t)
        start = max(0, state.length - self.window) if self.window else 0
        real = state.real(start)
        allowed = None if real is None else real[:, None, None, :]  # (B, 1, 1, n)
        if self.exclude_self:
            n = state.length - start
            others = (torch.arange(n, device=q_t.device) != n - 1)[None, None, None, :]
            allowed = others if allowed is None else allowed & others
        return self._attend(q_t, state.keys(start), state.values(start), allowed), state


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

    causal = "exact"
    flop_formula = "4 D H T^2 (the (T, T) matrix, causal or not)"

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: every pair of the (T, T) matrix."""
        return heads * matrix_flops(T, D)

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k, v: (B, H, T, D); attention_mask: (B, T) bool or None -> out (B, H, T, D)."""
        check_qkv(q, k, v, attention_mask)
        mask = allowed_keys(q.shape[2], causal, attention_mask, self.exclude_self, self.window, q.device)
        return self._attend(q, k, v, mask)

    def _attend(self, q, k, v, mask):
        """Softmax attention of q (B, H, Tq, D) over k, v (B, H, Tk, D) with the allowed pairs
        ``mask`` (broadcastable to (B, H, Tq, Tk), True = allowed) or None (all allowed)."""
        work = torch.promote_types(q.dtype, torch.float32)
        scores = (q.to(work) @ k.to(work).transpose(-1, -2)) / math.sqrt(q.shape[-1])
        empty = None
        if mask is not None:
            # a row without an allowed key is defined as zero; its scores stay finite (the softmax
            # of an all -inf row is NaN, and its backward would put NaN into every gradient)
            empty = ~mask.any(-1, keepdim=True)
            scores = scores.masked_fill(~mask & ~empty, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v.to(work)
        if empty is not None:
            out = out.masked_fill(empty, 0.0)
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

    causal = "exact"
    reference_name = "softmax_reference"
    reference_params = {}
    flop_formula = ("4 D H T^2; causal 4 D H T(T+1)/2 (the CPU and CUDA kernels skip blocks above the diagonal); "
                    "with window or exclude_self a dense mask: 4 D H T^2 in both modes")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: the allowed pairs of the fused kernel, all T^2 with a dense mask
        (window or exclude_self), T (T + 1) / 2 causal without one."""
        if params["window"] or params["exclude_self"] or not causal:
            return heads * matrix_flops(T, D)
        return heads * 4 * D * (T * (T + 1) // 2)

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k, v: (B, H, T, D); attention_mask: (B, T) bool or None -> out (B, H, T, D)."""
        check_qkv(q, k, v, attention_mask)
        if attention_mask is None and not self.exclude_self and not self.window:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self._attend(q, k, v, allowed_keys(q.shape[2], causal, attention_mask, self.exclude_self,
                                                  self.window, q.device))

    def _attend(self, q, k, v, mask):
        """Softmax attention of q (B, H, Tq, D) over k, v (B, H, Tk, D) through the fused kernel,
        with the allowed pairs ``mask`` (broadcastable to (B, H, Tq, Tk), True = allowed) or None."""
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v)
        # a row with no allowed key is defined as zero: inside the kernel it may attend to every key,
        # so that its scores stay finite on every backend (an all -inf row gives NaN or zero depending
        # on the backend, and may put NaN into the backward), and it is zeroed afterwards
        empty = ~mask.any(-1, keepdim=True)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | empty)
        return out.masked_fill(empty, 0.0)
