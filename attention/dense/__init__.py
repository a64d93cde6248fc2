"""DenseAttention, registered as ``dense``: out_i = sum over allowed keys j of (q_i . k_j) v_j.

Paper: "DenseAttention: No-Compromise Exact All N x N Interactions Algorithm with O(N) Space and
Time Complexity" (Argatkiny). Section 3.1: no softmax, no normalizer and no scaling inside the
operation (the DANet block in ``model.py`` scales its input by N^(-1/3)); the product Q K^T V is
computed as Q (K^T V) ("linear", O(T D^2)) or (Q K^T) V ("quadratic", O(T^2 D)). Section 3.3:
local attention in non-overlapping windows and the same windows shifted by w / 2.

Files: ``reference.py`` (the explicit (T, T) score matrix; the specification), ``compute.py``
(the two regimes, windows, the chunked causal linear regime, padding).

Decoding (``decode = "state"``, the causal linear regime as a recurrence): out_t = q_t S_t with
S_t = sum k_j v_j^T over the real keys j <= t of t's window (every earlier key when global), so
the state is S, D x Dv numbers per head, and the index of its window; a step that enters a new
window starts S again from zero. Its size does not depend on the context. The DANet block
(``model.DANetBlock``) has no decode path yet: its input scale N^(-1/3) depends on the length.
"""
import math

import torch

from attention.registry import Attention, check_int, check_qkv, check_step, matrix_flops, register
from attention.dense.compute import REGIMES, choose_regime, dense_forward, regime_cost, segment_length
from attention.dense.reference import allowed_pairs, reference_forward, window_ids  # noqa: F401

IMPLEMENTATIONS = ("fast", "reference")


@register("dense")
class DenseAttention(Attention):
    """DenseAttention for (B, H, T, D) q, k, v (paper section 3.1, 3.3).

    out_i = sum_{j allowed} (q_i . k_j) v_j with allowed = causal (j <= i) and same window and
    real key (``attention_mask``); padded queries output zeros. Exact definitions in
    ``attention/dense/reference.py``. Computation in float32 or wider (autocast is not applied to
    it); the output has v's dtype. Inside DANet (``model.py``) keys = values = the block's scaled
    input, queries = input x W_Q; this module itself accepts any q, k, v.

    Args:
        regime (str): "linear" (Q (K^T V); causal: chunked), "quadratic" ((Q K^T) V) or "auto"
            (default: the one with fewer multiply-adds for the segment length L = window or T and
            head dim D, ``compute.choose_regime``; not causal this is linear iff D <= L, the
            authors' rule). All three give the same output up to rounding.
        window (int): 0 = global (default); w > 0 = non-overlapping windows [0, w), [w, 2w), ...
        shift (bool): with a window, the windows start at w / 2: [0, w/2), [w/2, 3w/2), ... (the
            paper's ShiftedLocal layer); needs an even window.
        chunk_size (int): >= 1, positions per chunk of the causal linear regime (default 64).
        implementation (str): "fast" (``compute.py``, default) or "reference" (the (T, T)
            matrix, for tests).

    Raises:
        ValueError: unknown regime or implementation, window < 0 or not an integer, shift without
            a window or with an odd window, chunk_size < 1; in ``forward`` bad shapes or mask, or
            different query and key lengths.
    """

    causal = "exact"
    decode = "state"  # S = sum k_j v_j^T over the window so far: D x Dv numbers per head, whatever T
    example_params = {"chunk_size": 8}
    reference_params = {"implementation": "reference"}
    # unnormalized sums: on the contract test's inputs |out| reaches 57 while a cancelling entry is
    # 0.07; float32's error is absolute in the output's scale (5.5e-6 there, 1e-7 of the largest
    # entry; the default atol 1e-6 failed on an Intel Xeon)
    float32_tolerance = {"rtol": 1e-5, "atol": 1e-5}
    flop_formula = ("2 x attention.dense.compute.regime_cost(regime for T, D) x segments x H: linear 4 T D^2, "
                    "quadratic 4 T^2 D, causal linear 4 T C D + 4 T D^2 + 2 (T / C) D^2; "
                    "implementation='reference': 4 D H T^2")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: the regime's multiply-adds (``compute.regime_cost``) per segment of
        the window (or T), times the segments (the shifted windows add one)."""
        if params["implementation"] == "reference":
            return heads * matrix_flops(T, D)
        window, chunk_size = params["window"], params["chunk_size"]
        segments = math.ceil(((window // 2 if params["shift"] else 0) + T) / window) if window else 1
        regime = choose_regime(params["regime"], T, D, causal, window, chunk_size)
        return heads * 2 * regime_cost(regime, segment_length(T, window), D, causal, chunk_size) * segments

    def __init__(self, regime="auto", window=0, shift=False, chunk_size=64, implementation="fast"):
        super().__init__()
        if regime not in REGIMES:
            raise ValueError(f"regime {regime!r} unknown; allowed: {', '.join(REGIMES)}")
        check_int("window", window, 0, "0 = global attention, w > 0 = windows of w positions")
        if not isinstance(shift, bool):
            raise ValueError(f"shift must be True or False; got {shift!r}")
        if shift and window == 0:
            raise ValueError("shift=True needs a window > 0 (the windows are shifted by window / 2)")
        if shift and window % 2:
            raise ValueError(f"shift=True needs an even window (shifted by window / 2); got window={window}")
        check_int("chunk_size", chunk_size, 1, "positions per chunk of the causal linear regime")
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation {implementation!r} unknown; allowed: {', '.join(IMPLEMENTATIONS)}")
        self.regime, self.window, self.shift = regime, window, shift
        self.chunk_size, self.implementation = chunk_size, implementation

    def extra_repr(self):
        return (f"regime={self.regime}, window={self.window}, shift={self.shift}, chunk_size={self.chunk_size}, "
                f"implementation={self.implementation}")

    def regime_for(self, T, D, causal):
        """The regime ``forward`` uses for sequence length T and head dim D ("auto" resolved)."""
        return choose_regime(self.regime, T, D, bool(causal), self.window, self.chunk_size)

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k: (B, H, T, D), v: (B, H, T, Dv) -> (B, H, T, Dv) in v's dtype; attention_mask (B, T) bool or None."""
        check_qkv(q, k, v, attention_mask)
        if q.shape[2] != k.shape[2]:
            raise ValueError(f"dense attention needs as many queries as keys; got {q.shape[2]} and {k.shape[2]}")
        causal = bool(causal)
        with torch.autocast(device_type=q.device.type, enabled=False):  # sums of products stay >= float32
            if self.implementation == "reference":
                return reference_forward(q, k, v, causal, attention_mask, self.window, self.shift)
            return dense_forward(q, k, v, causal, attention_mask, self.regime, self.window, self.shift,
                                 self.chunk_size)

    def prefill(self, q, k, v, attention_mask=None):
        """``Attention.prefill``: the causal forward, and the state {"S", "window", "length"}: S
        (B, H, D, Dv) the sum of k_j v_j^T over the real keys in the last position's window, in
        float32 or wider, and that window's index (module docstring)."""
        out = self.forward(q, k, v, True, attention_mask)
        T = k.shape[2]
        work = torch.promote_types(q.dtype, torch.float32)
        ids = window_ids(T, self.window, self.shift, k.device)
        keep = ids == ids[-1]  # (T,): the keys of the last position's window
        keep = keep[None, :] if attention_mask is None else keep[None, :] & attention_mask  # (1 or B, T)
        with torch.autocast(device_type=q.device.type, enabled=False):
            kw = k.to(work) * keep[:, None, :, None].to(work)
            state = {"S": kw.transpose(-1, -2) @ v.to(work), "window": int(ids[-1]), "length": T}
        return out, state

    def step(self, q_t, k_t, v_t, state):
        """``Attention.step``: S restarted when position t opens a new window, k_t v_t^T added,
        out = q_t S (in S's dtype, cast to v_t's)."""
        check_step(q_t, k_t, v_t)
        t = state["length"]
        window = (t + (self.window // 2 if self.shift else 0)) // self.window if self.window else 0  # window_ids
        work = state["S"].dtype
        with torch.autocast(device_type=q_t.device.type, enabled=False):
            if window != state["window"]:
                state["S"].zero_()
                state["window"] = window
            state["S"] += k_t.to(work).transpose(-1, -2) @ v_t.to(work)
            out = q_t.to(work) @ state["S"]
        state["length"] = t + 1
        return out.to(v_t.dtype), state
