"""Linformer attention, registered as ``linformer`` (Wang, Li, Khabsa, Fang, Ma 2020, "Linformer:
Self-Attention with Linear Complexity").

Section 4, Eq. 7: keys and values are projected along the sequence to k = ``proj_len`` rows by
learned (k, n) matrices E and F before softmax attention,

    head = softmax(Q (E K)^T / sqrt(D)) (F V),

which costs O(T k D) instead of O(T^2 D). n is the model's ``block_size`` (the longest sequence);
a sequence of T < n positions uses the first T columns of E and F (the projections of the
positions it has), as the authors' code does.

Parameter sharing (section 4, "Additional efficiency techniques"): ``sharing="headwise"`` (default,
one E and one F per layer shared by all heads, the authors' released code), "kv" (one matrix,
E = F, per layer; LRA's Linformer) or "none" (E_h, F_h per head, Eq. 7 as written). Layerwise
sharing (one matrix for all layers) is not offered: each layer owns its module.

Not causal: E K mixes every position into every projected key, so a query would see the future.
``forward`` with ``causal=True`` raises ValueError.

Padding: padded keys and values are set to zero BEFORE the projection, so the projected keys and
values are combinations of real tokens only and the output of a query does not depend on what the
padded positions hold (the authors' and LRA's code project padded positions too).

Initialisation: entries N(0, 1 / (n + k)), the variance of the authors' code (Xavier uniform with
gain 1/sqrt(2)); projected keys keep about the scale of the keys for T = n.
Accumulation in float32 or wider (autocast off), output in v's dtype; ``implementation="reference"``
computes Eq. 7 head by head with explicit matrices, for tests.
"""
import math

import torch
import torch.nn as nn

from attention.registry import Attention, check_choice, check_int, check_qkv, matrix_flops, register

SHARING = ("headwise", "kv", "none")
IMPLEMENTATIONS = ("fast", "reference")
QUERY_BLOCK = 1024  # queries per block of the fast path


@register("linformer")
class Linformer(Attention):
    """Linformer attention (Eq. 7) for q, k (B, H, T, D) and v (B, H, T, Dv) of any float dtype ->
    (B, H, T, Dv) in v's dtype, T <= block_size; learned projections E, F of shape (k, block_size)
    (per head with ``sharing="none"``: (H, k, block_size)).

    Args:
        proj_len (int): k >= 1, the projected length (default 256, lucidrains' linformer; LRA uses
            16, 32 for Text).
        sharing (str): "headwise" (default), "kv" or "none" (module docstring).
        implementation (str): "fast" (default) or "reference" (Eq. 7 per head, for tests).
        block_size, n_head: model context (``attention.MODEL_CONTEXT``); both are required because
            the shapes of E and F depend on them (n_head only with ``sharing="none"``).

    Raises:
        ValueError: proj_len < 1, unknown sharing or implementation, block_size missing or < 1,
            n_head missing with sharing "none" (constructor); ``causal=True``, T > block_size,
            bad shapes or mask, a head count other than n_head (forward).
    """

    causal = "unsupported"
    example_params = {"proj_len": 8}
    reference_params = {"implementation": "reference"}
    flop_formula = ("H 8 T k D (E K, F V, the (T, k) scores, their product with F V), k = proj_len; "
                    "implementation='reference': 4 D H T^2")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: E K, F V, the (T, k) scores and their product with F V."""
        if params["implementation"] == "reference":
            return heads * matrix_flops(T, D)
        return heads * 8 * T * params["proj_len"] * D

    def __init__(self, proj_len=256, sharing="headwise", implementation="fast", block_size=None, n_head=None):
        super().__init__()
        check_int("proj_len", proj_len, 1, "the projected length k of keys and values")
        check_choice("sharing", sharing, SHARING)
        check_choice("implementation", implementation, IMPLEMENTATIONS)
        if block_size is None:
            raise ValueError("linformer needs the model's block_size (the length n of E and F); build it with "
                             "attention.build('linformer', context={'block_size': n, ...})")
        check_int("block_size", block_size, 1, "the longest sequence, the length of E and F")
        if sharing == "none":
            if n_head is None:
                raise ValueError("linformer with sharing='none' needs n_head in the model context (one E, F per head)")
            check_int("n_head", n_head, 1, "heads, one E and F each with sharing='none'")
        self.proj_len, self.sharing, self.implementation = proj_len, sharing, implementation
        self.block_size, self.n_head = block_size, n_head
        shape = (n_head, proj_len, block_size) if sharing == "none" else (proj_len, block_size)
        std = 1.0 / math.sqrt(block_size + proj_len)
        self.E = nn.Parameter(torch.randn(shape) * std)
        self.F = None if sharing == "kv" else nn.Parameter(torch.randn(shape) * std)

    def extra_repr(self):
        return (f"proj_len={self.proj_len}, sharing={self.sharing}, block_size={self.block_size}, "
                f"implementation={self.implementation}")

    def projections(self, T, dtype):
        """E and F restricted to the first T positions: (k, T) each, or (H, k, T) per head."""
        F_ = self.E if self.F is None else self.F
        return self.E[..., :T].to(dtype), F_[..., :T].to(dtype)

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k (B, H, T, D), v (B, H, T, Dv); attention_mask (B, T) bool or None -> (B, H, Tq, Dv)."""
        check_qkv(q, k, v, attention_mask)
        if causal:
            raise ValueError("linformer is not causal: its projections E K and F V mix all positions, future ones "
                             "included; use it in an encoder (BERT / LRA tasks) or pick a causal attention")
        B, H, T, D = k.shape
        if T > self.block_size:
            raise ValueError(f"linformer: sequence length {T} exceeds block_size {self.block_size} (the length of "
                             f"E and F)")
        if self.sharing == "none" and H != self.n_head:
            raise ValueError(f"linformer was built for n_head={self.n_head} (one E, F per head); got H={H}")
        work = torch.promote_types(q.dtype, torch.float32)
        with torch.autocast(device_type=q.device.type, enabled=False):
            E, F_ = self.projections(T, work)
            qw, kw, vw = q.to(work), k.to(work), v.to(work)
            if attention_mask is not None:  # padding out before projecting: E K mixes positions
                real = attention_mask[:, None, :, None]
                kw, vw = kw.masked_fill(~real, 0.0), vw.masked_fill(~real, 0.0)
            if self.implementation == "reference":
                return _reference(qw, kw, vw, E, F_).to(v.dtype)
            if E.dim() == 3:  # (H, k, T) broadcasts over the batch
                E, F_ = E[None], F_[None]
            k_proj, v_proj = (E @ kw).transpose(-1, -2) / math.sqrt(D), F_ @ vw  # (B, H, D, k), (B, H, k, Dv)
            # queries are independent: blocks keep the (block, k) scores small (memory, cache)
            out = [torch.softmax(qw[:, :, a:a + QUERY_BLOCK] @ k_proj, dim=-1) @ v_proj
                   for a in range(0, qw.shape[2], QUERY_BLOCK)]
            return torch.cat(out, dim=2).to(v.dtype)


def _reference(q, k, v, E, F_):
    """Eq. 7 for each batch element b and head h: softmax(Q (E_h K)^T / sqrt(D)) (F_h V)."""
    B, H, _, D = q.shape
    out = q.new_zeros(*q.shape[:3], v.shape[-1])
    for b in range(B):
        for h in range(H):
            E_h, F_h = (E[h], F_[h]) if E.dim() == 3 else (E, F_)
            scores = q[b, h] @ (E_h @ k[b, h]).T / math.sqrt(D)
            out[b, h] = torch.softmax(scores, dim=-1) @ (F_h @ v[b, h])
    return out
