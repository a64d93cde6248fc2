"""Readable reference of the DenseAttention operation: the explicit (T, T) score matrix.

Paper: "DenseAttention: No-Compromise Exact All N x N Interactions Algorithm with O(N) Space and
Time Complexity" (Argatkiny), section 3.1 (DenseAttention(X) = X W_Q X^T X, no softmax, no
normalizer, no scaling) and section 3.3 (local and shifted-local windows). This file is the
specification; ``attention/dense/compute.py`` (the linear and quadratic regimes) must give the
same outputs and gradients.

Definitions, per batch element and head, query position i and key position j in 0..T-1:

    out_i = sum_{j allowed(i, j)} (q_i . k_j) v_j

    allowed(i, j) is the conjunction of
      - causal:            j <= i;
      - window = w > 0:    i and j lie in the same window; windows are [0, w), [w, 2w), ... and,
                           with ``shift``, [0, w/2), [w/2, 3w/2), [3w/2, 5w/2), ... (the paper's
                           ShiftedLocal layer: the same partition moved by w/2);
      - attention_mask:    key j is a real token (True).

A padded query position (attention_mask False) outputs zeros. There is no normalizer, so a query
with no allowed key outputs zeros as well (an empty sum). The computation runs in float32 or
wider (half-precision inputs are promoted); the output has v's dtype.
"""
import torch


def window_ids(T, window, shift=False, device=None):
    """Index of the window of each position 0..T-1, a (T,) int64 tensor.

    Windows of ``window`` positions start at 0 (``shift`` False) or at window / 2 (``shift``
    True; the first window is then [0, window / 2)). ``window`` = 0 puts every position in
    window 0 (global attention).
    """
    positions = torch.arange(T, device=device)
    if not window:
        return torch.zeros_like(positions)
    offset = window // 2 if shift else 0
    return (positions + offset) // window


def allowed_pairs(T, causal, window=0, shift=False, attention_mask=None, device=None):
    """Bool mask of the allowed (query, key) pairs, True = allowed.

    Returns:
        (T, T) without ``attention_mask``; (B, 1, T, T) with it (broadcastable to (B, H, T, T)).
    """
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    allowed = torch.ones(T, T, dtype=torch.bool, device=device)
    if causal:
        allowed &= j <= i
    if window:
        ids = window_ids(T, window, shift, device)
        allowed &= ids[:, None] == ids[None, :]
    if attention_mask is not None:
        allowed = allowed[None, None] & attention_mask[:, None, None, :]
    return allowed


def reference_forward(q, k, v, causal, attention_mask=None, window=0, shift=False):
    """DenseAttention with the (B, H, T, T) score matrix materialised (rules in the module docstring).

    Args:
        q, k: (B, H, T, D) float; v: (B, H, T, Dv) float.
        causal (bool): key j <= query i only.
        attention_mask: (B, T) bool, True = real token, or None.
        window (int): 0 = global; w > 0 = non-overlapping windows of w positions.
        shift (bool): windows start at w / 2 (needs an even w > 0).

    Returns:
        (B, H, T, Dv) tensor in v's dtype.
    """
    work = torch.promote_types(q.dtype, torch.float32)
    q, k, v_work = q.to(work), k.to(work), v.to(work)
    T = q.shape[2]
    scores = q @ k.transpose(-1, -2)  # (B, H, T, T): q_i . k_j, no softmax, no scaling
    allowed = allowed_pairs(T, causal, window, shift, attention_mask, q.device)
    weights = torch.where(allowed, scores, torch.zeros((), dtype=work, device=q.device))
    out = torch.einsum("bhij,bhjd->bhid", weights, v_work)
    if attention_mask is not None:
        out = torch.where(attention_mask[:, None, :, None], out, torch.zeros((), dtype=work, device=q.device))
    return out.to(v.dtype)
