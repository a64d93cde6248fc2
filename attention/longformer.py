"""Longformer attention, registered as ``longformer``: a sliding window plus global tokens.

Paper: I. Beltagy, M. E. Peters, A. Cohan, "Longformer: The Long-Document Transformer" (2020),
section 3.1 (sliding window, global attention). Query i attends key j (positions 0..T-1) when

- |i - j| <= window (``window`` keys on each side; the paper's window size w is 2 * window + 1,
  "1/2 w on each side"), or
- i < num_global or j < num_global: the first ``num_global`` tokens are global, they attend to
  every key and every query attends to them (symmetric, as in the paper);

and, in addition, j <= i when causal and key j is real (``attention_mask``). The scores are
softmax(q k^T / sqrt(D)) over the allowed keys; a row with no allowed key outputs zeros.

Not implemented (docs/baselines.md): dilation, and the paper's separate projections Q_g, K_g, V_g
for global attention (the model's one set of projections serves both patterns).

``reference``: the (T, T) pair mask and ``blockwise.explicit_attention`` (the specification).
``blockwise``: query blocks of ``chunk`` positions attend the key blocks within the window's reach
plus the blocks holding the global keys (``blockwise.block_sparse``); the global query rows
attend to all keys (``blockwise.attend_rows``). Cost O(T (window + chunk + num_global) D), memory
O(T (window + chunk) ) per head at most SCORE_BUDGET scores at a time.

Decoding (``decode = "state"``): the causal query t attends to keys t - window .. t and to the
first ``num_global`` keys, nothing else, so a step needs only those. ``WindowCache`` keeps them in
buffers of fixed size: the ``num_global`` global keys and values, and a ring of the last
``window + 1`` tokens (the new one included), with a real-token flag per slot. Memory per layer:
(num_global + window + 1) (D + Dv) numbers per head in the inputs' dtype, plus (num_global +
window + 1) flags per sequence, whatever the context (the registry's "state": its size does not
depend on T, tests/attention/test_decode.py asserts it); a step costs O((num_global + window) D).
"""
import math

import torch

from attention.blockwise import (SparseAttention, attend, attend_rows, block_sparse, explicit_attention, pad_positions,
                                 real_tokens, work_dtype)
from attention.registry import check_int, check_step, matrix_flops, register


def allowed_pairs(T, causal, window, num_global, real):
    """Bool (B, 1, T, T): the pairs of the module docstring (True = query i may attend key j).

    Args:
        T (int): sequence length; causal (bool); window, num_global (int >= 0);
        real (torch.Tensor): (B, T) bool, True = real token.
    """
    i = torch.arange(T, device=real.device)[:, None]
    j = torch.arange(T, device=real.device)[None, :]
    pairs = ((i - j).abs() <= window) | (i < num_global) | (j < num_global)
    if causal:
        pairs = pairs & (j <= i)
    return pairs & real[:, None, None, :]


def reference(q, k, v, causal, real, window, num_global):
    """Longformer attention through the materialised (T, T) mask; (B, H, T, D) in, (B, H, T, Dv)
    out in the work dtype."""
    return explicit_attention(q, k, v, allowed_pairs(q.shape[2], causal, window, num_global, real))


def auto_chunk(window):
    """Positions per query block of the fast path: the window rounded into [16, 128] (a block
    much shorter than the window costs more gathers, a longer one more wasted scores)."""
    return min(128, max(16, window))


def blockwise(q, k, v, causal, real, window, num_global, chunk):
    """Longformer attention without a (T, T) matrix (module docstring); q, k, v (B, H, T, D) in
    the work dtype, real (B, T) bool -> (B, H, T, Dv)."""
    T = q.shape[2]
    chunk = min(chunk, T)
    q, k, v = (pad_positions(x, chunk) for x in (q, k, v))
    real = pad_positions(real, chunk, dim=1)  # the appended positions are not real keys
    nb = q.shape[2] // chunk
    device = q.device
    # window keys of query block n lie in blocks n - reach .. n + reach (.. n when causal)
    reach = min(nb - 1, math.ceil(window / chunk))
    offsets = torch.arange(-reach, 1 if causal else reach + 1, device=device)
    window_ids = torch.arange(nb, device=device)[:, None] + offsets
    global_ids = torch.arange(math.ceil(min(num_global, T) / chunk), device=device).expand(nb, -1)
    key_blocks = torch.cat([window_ids.clamp(0, nb - 1), global_ids], dim=1)
    in_range = torch.cat([(window_ids >= 0) & (window_ids < nb), torch.ones_like(global_ids, dtype=torch.bool)], 1)
    within = torch.arange(chunk, device=device)
    j = (key_blocks[..., None] * chunk + within).flatten(1)  # (nb, columns): key positions
    window_column = torch.arange(key_blocks.shape[1], device=device).repeat_interleave(chunk) < offsets.numel()
    # a global key counts in its global slot only, so a window block that holds it adds nothing
    key_allowed = in_range.repeat_interleave(chunk, dim=1) & torch.where(window_column, j >= num_global, j < num_global)
    # i - j of a window column is the same for every query block: a - c - offset * chunk
    column_offset = torch.cat([offsets, offsets.new_zeros(global_ids.shape[1])]).repeat_interleave(chunk)
    distance = within[:, None] - (column_offset * chunk + within.repeat(key_blocks.shape[1]))[None, :]
    in_window = (distance >= 0) & (distance <= window) if causal else distance.abs() <= window
    # global columns: every query; causal holds there too, as the rows i < num_global are replaced below
    pattern = in_window | ~window_column
    out = block_sparse(q, k, v, chunk, key_blocks[None], key_allowed[None], pattern, real)[:, :, :T]
    g = min(num_global, T)
    if g == 0:
        return out
    rows = torch.arange(g, device=device)
    return torch.cat([attend_rows(q[:, :, :g], rows, k, v, causal, real), out[:, :, g:]], dim=2)


class WindowCache:
    """The decode state of causal Longformer attention: what query t may attend to, in fixed-size
    buffers (module docstring).

    Attributes:
        global_k (B, H, G, D), global_v (B, H, G, Dv), global_real (B, G): the first G =
            ``num_global`` tokens (slots of positions not seen yet are not real);
        ring_k (B, H, W, D), ring_v (B, H, W, Dv), ring_real (B, W): position p in slot p % W,
            W = window + 1; a slot is real when its token is real and not global (a global key
            counts once, in its global slot);
        length (int): the tokens seen, the next token's position.
    """

    def __init__(self, k, v, real, window, num_global):
        B, H, T, D = k.shape
        G, W = num_global, window + 1
        self.global_k, self.global_v = k.new_zeros(B, H, G, D), v.new_zeros(B, H, G, v.shape[3])
        self.global_real = torch.zeros(B, G, dtype=torch.bool, device=k.device)
        self.ring_k, self.ring_v = k.new_zeros(B, H, W, D), v.new_zeros(B, H, W, v.shape[3])
        self.ring_real = torch.zeros(B, W, dtype=torch.bool, device=k.device)
        self.length = 0
        for p in list(range(min(G, T))) + list(range(max(G, T - W), T)):
            self._put(p, k[:, :, p], v[:, :, p], real[:, p])
        self.length = T

    def _put(self, p, k_p, v_p, real_p):
        """Write the token at position p (k_p (B, H, D), v_p (B, H, Dv), real_p (B,)) in its slot."""
        if p < self.global_k.shape[2]:
            self.global_k[:, :, p], self.global_v[:, :, p], self.global_real[:, p] = k_p, v_p, real_p
            return
        slot = p % self.ring_k.shape[2]
        self.ring_k[:, :, slot], self.ring_v[:, :, slot], self.ring_real[:, slot] = k_p, v_p, real_p

    def append(self, k_t, v_t):
        """Add the next (real) token, k_t (B, H, 1, D), v_t (B, H, 1, Dv); its slot's old token
        (position length - window - 1) leaves the window."""
        self._put(self.length, k_t[:, :, 0], v_t[:, :, 0], torch.ones_like(self.ring_real[:, 0]))
        self.length += 1

    def keys_values(self):
        """(k (B, H, G + W, D), v (B, H, G + W, Dv), real (B, G + W)): every slot, global first."""
        return (torch.cat([self.global_k, self.ring_k], dim=2), torch.cat([self.global_v, self.ring_v], dim=2),
                torch.cat([self.global_real, self.ring_real], dim=1))


@register("longformer")
class Longformer(SparseAttention):
    """Longformer sliding-window + global attention for (B, H, T, D) q, k, v (Beltagy et al.
    2020, section 3.1; the pairs in the module docstring). Computation in float32 or wider; the
    output has v's dtype.

    Args:
        window (int): >= 0, keys on each side of a query (256: Hugging Face's attention_window
            512 in total); window >= T - 1 with num_global = 0 is exact softmax attention.
        num_global (int): >= 0, the first num_global tokens are global (attend to all, attended
            by all); 1 (the first token, a classifier's [CLS] or a language model's first
            context token) by default.
        chunk_size (int): positions per query block of the fast path, 0 = automatic
            (``auto_chunk``: the window within [16, 128]); the output does not depend on it.
        implementation (str): "fast" (blockwise, default) or "reference" (the (T, T) mask).

    Decoding (``prefill`` / ``step``): a ``WindowCache`` of the global tokens and the last
    ``window + 1`` tokens, (num_global + window + 1) (D + Dv) numbers per head in the inputs'
    dtype whatever the context, hence ``decode = "state"`` (a fixed size, not a growing KV cache).

    Raises:
        ValueError: a parameter that is not an integer in range or an unknown implementation
            (constructor); bad shapes or mask, or q and k of different lengths (forward).
    """

    causal = "exact"
    decode = "state"  # WindowCache: (num_global + window + 1) keys and values per head, whatever T
    example_params = {"window": 3, "num_global": 1, "chunk_size": 4}
    reference_params = {"implementation": "reference"}
    flop_formula = ("H 4 D (Tp m c + g Tp): query blocks of c, m = window blocks + global blocks per query block, "
                    "g global rows against all keys; implementation='reference': 4 D H T^2")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: every query block against the key blocks in the window's reach and
        those holding global keys (computed, then masked), the global rows against all keys."""
        if params["implementation"] == "reference":
            return heads * matrix_flops(T, D)
        c = min(params["chunk_size"] or auto_chunk(params["window"]), T)
        Tp = math.ceil(T / c) * c
        reach = min(Tp // c - 1, math.ceil(params["window"] / c))
        g = min(params["num_global"], T)
        key_blocks = (reach + 1 if causal else 2 * reach + 1) + math.ceil(g / c)
        return heads * 4 * D * (Tp * key_blocks * c + g * Tp)

    def __init__(self, window=256, num_global=1, chunk_size=0, implementation="fast"):
        check_int("window", window, 0, "keys on each side of a query")
        check_int("num_global", num_global, 0, "the first num_global tokens are global")
        check_int("chunk_size", chunk_size, 0, "positions per block of the fast path, 0 = automatic")
        super().__init__(implementation, window=window, num_global=num_global)
        self.chunk = chunk_size or auto_chunk(window)

    def compute(self, q, k, v, causal, real):
        if self.implementation == "reference":
            return reference(q, k, v, causal, real, **self.params)
        return blockwise(q, k, v, causal, real, chunk=self.chunk, **self.params)

    def prefill(self, q, k, v, attention_mask=None):
        """``Attention.prefill``: the causal forward, and a ``WindowCache`` of k and v (their dtype)."""
        out = self.forward(q, k, v, True, attention_mask)
        real = real_tokens(attention_mask, k.shape[0], k.shape[2], k.device)
        return out, WindowCache(k, v, real, self.params["window"], self.params["num_global"])

    def step(self, q_t, k_t, v_t, state):
        """``Attention.step``: the new token enters the cache, q_t attends to every real slot (the
        global keys and keys t - window .. t), softmax in float32 or wider."""
        check_step(q_t, k_t, v_t)
        state.append(k_t, v_t)
        k, v, real = state.keys_values()
        work = work_dtype(q_t, k, v)
        out = attend(q_t.to(work), k.to(work), v.to(work), real[:, None, None, :])
        return out.to(v_t.dtype), state
