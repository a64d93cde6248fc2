"""The fast paths of DenseAttention: the two orders of the product Q K^T V.

Paper: "DenseAttention" (Argatkiny), section 3.1: without softmax, Q K^T V can be computed as
(Q K^T) V ("quadratic" regime, 2 N^2 d multiply-adds) or Q (K^T V) ("linear" regime, 2 N d^2).
Both give the same result up to rounding; ``reference.py`` is the specification.

- Windows (section 3.3): the sequence is zero-padded (w / 2 in front for ``shift``, at the end
  up to a multiple of w) and cut into segments of w positions, each attended independently; the
  zero rows add nothing to any sum and their outputs are dropped.
- Causal, quadratic: tril(Q K^T) V per segment.
- Causal, linear (chunked): each segment is cut into chunks of C positions; inside a chunk the
  masked product tril(Q_c K_c^T) V_c, plus Q_c S_c where S_c = sum over the earlier chunks of
  K^T V (an exclusive prefix sum of the per-chunk states). O(L C D + L D^2) per segment. The
  chunks are processed a few at a time with S carried along (``STEP_ELEMENTS``), so that no
  temporary grows with L: large fresh tensors cost page faults (found by the benchmark, issue 27).
- Padding: padded keys and values are set to zero (they add nothing), padded queries output zeros.
- Accumulation: float32 or wider (half-precision inputs are promoted), output in v's dtype.
"""
import math

import torch
import torch.nn.functional as F

from attention.registry import needs_grad, step_budget

REGIMES = ("auto", "linear", "quadratic")


def segment_length(T, window):
    """Positions per independently attended segment: the window, or T for global attention."""
    return window if window else T


def regime_cost(regime, L, D, causal, chunk_size):
    """Multiply-adds of one segment of L positions (one batch element and head, head dim D).

    quadratic: 2 L^2 D (Q K^T and the product with V; the causal mask does not save the dense
    matmuls). linear, not causal: 2 L D^2 (K^T V and Q times it). linear, causal with chunks of
    C = min(chunk_size, L): 2 L C D inside the chunks, 2 L D^2 for the chunk states and their use,
    and (L / C) D^2 for the prefix sum; a single chunk is the quadratic form.
    """
    if regime == "quadratic":
        return 2 * L * L * D
    if not causal:
        return 2 * L * D * D
    C = min(chunk_size, L)
    n_chunks = math.ceil(L / C)
    if n_chunks == 1:
        return 2 * L * L * D
    return 2 * n_chunks * C * C * D + 2 * n_chunks * C * D * D + n_chunks * D * D


def choose_regime(regime, T, D, causal, window=0, chunk_size=64):
    """Resolve "auto" to the regime with fewer multiply-adds (``regime_cost``) for a segment of
    ``segment_length(T, window)`` positions; ties go to "linear". Other regimes are returned as is.

    Not causal, this is the authors' rule: linear iff D <= L.
    """
    if regime != "auto":
        return regime
    L = segment_length(T, window)
    linear = regime_cost("linear", L, D, causal, chunk_size)
    quadratic = regime_cost("quadratic", L, D, causal, chunk_size)
    return "linear" if linear <= quadratic else "quadratic"


def _quadratic(q, k, v, causal):
    scores = q @ k.transpose(-1, -2)  # (..., L, L)
    if causal:
        scores = torch.tril(scores)
    return scores @ v


# Elements per temporary of one step of the causal linear regime (4 MB in float32): small enough
# for the CPU allocator to reuse them from its heap, where larger ones are fresh pages each call.
STEP_ELEMENTS = 1 << 20
# On a GPU (256 MB of float32): with the CPU's step a long sequence is hundreds of steps of a few
# kernel launches each, and the GPU waits on the launches.
CUDA_STEP_ELEMENTS = 1 << 26


def _linear(q, k, v, causal, chunk_size):
    if not causal:
        return q @ (k.transpose(-1, -2) @ v)  # (..., D, Dv) state, then one matmul per query
    L = q.shape[-2]
    C = min(chunk_size, L)
    n_chunks = math.ceil(L / C)
    if n_chunks == 1:
        return _quadratic(q, k, v, causal=True)
    pad = n_chunks * C - L
    if pad:  # zero positions at the end: they add nothing and their outputs are dropped
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    lead, D, Dv = q.shape[:-2], q.shape[-1], v.shape[-1]
    # The sequence goes through in steps of whole chunks, the running state K^T V of the steps
    # before carried along: every temporary is then STEP_ELEMENTS or less instead of the size of
    # the input (a (T, D) tensor per head at most; the split and cat keep the backward linear).
    rows = math.prod(lead) * max(D, Dv, C)
    step = C * max(1, step_budget(q, STEP_ELEMENTS, CUDA_STEP_ELEMENTS) // (rows * C))
    state = q.new_zeros(*lead, 1, D, Dv)  # K^T V of all the chunks before the step
    # without autograd each step's output goes straight into its rows (no list of pieces to cat)
    out = None if needs_grad(q, k, v) else q.new_empty(*lead, n_chunks * C, Dv)
    pieces, start = [], 0
    for qs, ks, vs in zip(q.split(step, -2), k.split(step, -2), v.split(step, -2)):
        n = qs.shape[-2] // C
        qc, kc, vc = (t.reshape(*lead, n, C, t.shape[-1]) for t in (qs, ks, vs))
        inside = (qc @ kc.transpose(-1, -2)).tril_() @ vc  # (..., n, C, Dv)
        states = torch.cumsum(kc.transpose(-1, -2) @ vc, dim=-3) + state  # inclusive prefix of K_c^T V_c
        before = torch.cat([state, states[..., :-1, :, :]], dim=-3)  # chunk c sees chunks < c only
        piece = (inside + qc @ before).reshape(*lead, n * C, Dv)
        if out is None:
            pieces.append(piece)
        else:
            out[..., start:start + n * C, :] = piece
        start += n * C
        state = states[..., -1:, :, :]
    if out is None:
        out = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=-2)
    return out[..., :L, :]


def dense_forward(q, k, v, causal, attention_mask=None, regime="auto", window=0, shift=False, chunk_size=64):
    """DenseAttention through the linear or quadratic regime (same result as
    ``reference.reference_forward``).

    Args:
        q, k: (B, H, T, D) float; v: (B, H, T, Dv) float.
        causal (bool): key j <= query i only.
        attention_mask: (B, T) bool, True = real token, or None.
        regime (str): "linear", "quadratic" or "auto" (``choose_regime``).
        window (int): 0 = global; w > 0 = non-overlapping windows of w positions.
        shift (bool): windows start at w / 2 (w even).
        chunk_size (int): chunk length of the causal linear regime.

    Returns:
        (B, H, T, Dv) tensor in v's dtype.
    """
    B, H, T, D = q.shape
    work = torch.promote_types(q.dtype, torch.float32)
    out_dtype = v.dtype
    q, k, v = q.to(work), k.to(work), v.to(work)
    if attention_mask is not None:
        real = attention_mask[:, None, :, None]
        zero = torch.zeros((), dtype=work, device=q.device)
        k, v = torch.where(real, k, zero), torch.where(real, v, zero)  # padded keys add nothing
    resolved = choose_regime(regime, T, D, causal, window, chunk_size)
    if window:
        front = window // 2 if shift else 0
        n_windows = math.ceil((front + T) / window)
        back = n_windows * window - front - T
        q, k, v = (F.pad(t, (0, 0, front, back)).reshape(B, H, n_windows, window, t.shape[-1]) for t in (q, k, v))
    if resolved == "quadratic":
        out = _quadratic(q, k, v, causal)
    else:
        out = _linear(q, k, v, causal, chunk_size)
    if window:
        out = out.reshape(B, H, n_windows * window, out.shape[-1])[:, :, front:front + T]
    if attention_mask is not None:
        out = torch.where(attention_mask[:, None, :, None], out, torch.zeros((), dtype=work, device=q.device))
    return out.to(out_dtype)
