"""Exact softmax attention (Vaswani et al. 2017, Eq. 1): softmax(q k^T / sqrt(D)) v.

``softmax`` calls torch's fused scaled_dot_product_attention; ``softmax_reference``
materialises the (T, T) score matrix and is the readable reference used by tests.
"""
import math

import torch
import torch.nn.functional as F

from attention import Attention, check_qkv, register


def attention_mask(T, causal, key_padding_mask, exclude_self, device):
    """Bool mask of allowed (query, key) pairs, broadcastable to (B, H, T, T), or None if all allowed."""
    mask = None
    if causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=device).tril(-1 if exclude_self else 0)
    if key_padding_mask is not None:
        pad = key_padding_mask[:, None, None, :]
        mask = pad if mask is None else (mask & pad)
    return mask


@register("softmax_reference")
class SoftmaxReference(Attention):
    """Exact softmax attention with the (B, H, T, T) score matrix materialised in float32 or wider.

    Rows with no allowed key (e.g. the first query when ``exclude_self``) output zeros.
    """

    def forward(self, q, k, v, causal, key_padding_mask=None):
        check_qkv(q, k, v, key_padding_mask)
        T = q.shape[2]
        work = torch.promote_types(q.dtype, torch.float32)
        scores = (q.to(work) @ k.to(work).transpose(-1, -2)) / math.sqrt(q.shape[-1])
        mask = attention_mask(T, causal, key_padding_mask, self.exclude_self and causal, q.device)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # fully masked rows -> 0
        return (weights @ v.to(work)).to(v.dtype)


@register("softmax")
class Softmax(Attention):
    """Exact softmax attention through ``torch.nn.functional.scaled_dot_product_attention``."""

    def forward(self, q, k, v, causal, key_padding_mask=None):
        check_qkv(q, k, v, key_padding_mask)
        if key_padding_mask is None and not (causal and self.exclude_self):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        mask = attention_mask(q.shape[2], causal, key_padding_mask, self.exclude_self and causal, q.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        # rows with no allowed key come back as NaN; define them as zero output
        return out.masked_fill(~mask.any(-1, keepdim=True), 0.0).nan_to_num(0.0)
