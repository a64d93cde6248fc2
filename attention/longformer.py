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
"""
import math

import torch

from attention.blockwise import SparseAttention, attend_rows, block_sparse, explicit_attention, pad_positions
from attention.registry import check_int, matrix_flops, register

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

    Raises:
        ValueError: a parameter that is not an integer in range or an unknown implementation
            (constructor); bad shapes or mask, or q and k of different lengths (forward).
    """

    causal = "exact"
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
