"""BigBird block-sparse attention, registered as ``bigbird``: window, global and random blocks.

Paper: M. Zaheer, G. Guruganesh, A. Dubey, J. Ainslie, C. Alberti, S. Ontanon, P. Pham,
A. Ravula, Q. Wang, L. Yang, A. Ahmed, "Big Bird: Transformers for Longer Sequences" (NeurIPS
2020): section 2 (generalised attention with r random, w window and g global keys per query) in
its blocked form (appendix D, the ITC construction: global tokens are tokens of the sequence).

The positions 0..T-1 are split into blocks of b = ``block_size_sparse`` (T is padded to a
multiple of b by the module itself; the padding is never a key). With nb blocks, query block n
attends key block m when

- m is in its window: |n - m| <= (w - 1) / 2 for w = ``num_window_blocks`` (odd); causal, the
  window's left half and the block itself, n - (w - 1) / 2 <= m <= n;
- m or n is a global block: the first ceil(g / 2) and the last floor(g / 2) blocks of the padded
  sequence for g = ``num_global_blocks`` (g = 2: the first and the last block, as in Hugging
  Face's BigBird); a global query block attends to every key;
- m is one of the r = ``num_random_blocks`` random key blocks of n (per head): drawn without
  replacement from the blocks that are neither global nor in n's window (causal: m < n), fewer
  when fewer exist; a torch.Generator seeded with ``seed + 1_000_003 * layer_idx`` draws them
  (``random_per_layer``, the default, as LRA seeds a draw per layer; else ``seed`` in every
  layer), so a (seed, layer, T, H) gives the same blocks in every call;

token pairs further need j <= i when causal and a real key j (``attention_mask``). Then softmax
over the allowed keys; a row with no allowed key outputs zeros. There is no switch to full
attention for short inputs: a short T only means that the sets above overlap (a block is counted
once) or cover everything, which is then exact softmax attention.

``reference``: the (T, T) mask from the block sets and ``blockwise.explicit_attention``.
``blockwise``: every query block gathers its w + r + g key blocks (``blockwise.block_sparse``),
global query blocks attend all keys (``blockwise.attend_rows``). Cost O(T (w + r + g) b D).

Decoding (``decode = "kv_cache"``): step t gives the last row of the causal forward over tokens
0..t. The newest token always sits in the last block of that prefix, and with
``num_global_blocks`` >= 2 (the default 2) the last block is global: the step is full softmax
attention over every real cached key (``attention.kv_cache.KVCache``, the shared cache of the
softmax modules), with memory and time per token growing with the context. With g < 2 the last
block is not global (unless it is among the first ceil(g / 2)) and the step applies the block sets
of the prefix's nb = t // b + 1 blocks to its last query block: its window, the leading global
blocks and its random blocks, drawn as the forward draws them for nb blocks (an O(H nb^2) draw
per step).

Those rows depend on the sequence's length, not only on the tokens up to them (which block is
last, hence global, and the random draw for nb blocks): a row of the forward over 0..T-1 may
differ from the same row over 0..t, t < T. So a step is the last row of the forward over its
prefix, but in a model with BigBird below its last layer the later layers' cached keys of earlier
positions are not those of the whole forward; ``rows_depend_on_length`` tells
``model.GPT.decode_unsupported``, which then generates by recomputation.
"""
import math

import torch

from attention.blockwise import (SparseAttention, attend, attend_rows, block_sparse, explicit_attention, pad_positions,
                                 work_dtype)
from attention.kv_cache import KVCache
from attention.registry import check_int, check_step, matrix_flops, register


def global_blocks(nb, num_global_blocks, device=None):
    """Bool (nb,): the first ceil(g / 2) and the last floor(g / 2) blocks are global."""
    is_global = torch.zeros(nb, dtype=torch.bool, device=device)
    is_global[:math.ceil(num_global_blocks / 2)] = True
    last = num_global_blocks // 2
    if last:
        is_global[-last:] = True
    return is_global


def window_blocks(nb, num_window_blocks, causal, device=None):
    """Bool (nb, nb): key block m is in query block n's window (module docstring)."""
    n = torch.arange(nb, device=device)[:, None]
    m = torch.arange(nb, device=device)[None, :]
    half = (num_window_blocks - 1) // 2
    return ((m <= n) & (m >= n - half)) if causal else ((m - n).abs() <= half)


def random_blocks(nb, heads, num_random_blocks, num_window_blocks, num_global_blocks, causal, seed, device=None):
    """The random key blocks of every query block, per head.

    Returns:
        (ids, valid): long and bool (heads, nb, min(r, nb)); ids[h, n] are distinct blocks that
        are neither global nor in n's window (causal: before n); valid False marks a slot left
        empty because fewer candidates exist. The draw depends only on (seed, nb, heads, the
        parameters): uniform random numbers from a generator seeded with ``seed``, the largest
        r among the candidates.
    """
    candidates = ~window_blocks(nb, num_window_blocks, causal) & ~global_blocks(nb, num_global_blocks)[None, :]
    if causal:
        candidates &= torch.ones(nb, nb, dtype=torch.bool).tril(-1)
    draws = torch.rand(heads, nb, nb, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    scores, ids = draws.masked_fill(~candidates, -1.0).topk(min(num_random_blocks, nb), dim=-1)
    return ids.to(device), (scores >= 0).to(device)


def allowed_pairs(T, heads, causal, real, block, num_random_blocks, num_window_blocks, num_global_blocks, seed):
    """Bool (B, heads, T, T): the pairs of the module docstring, written as block sets.

    Args:
        T (int), heads (int), causal (bool); real (torch.Tensor): (B, T) bool, True = real token;
        the others: the module's parameters.
    """
    nb = math.ceil(T / block)
    device = real.device
    is_global = global_blocks(nb, num_global_blocks, device)
    rand_ids, rand_valid = random_blocks(nb, heads, num_random_blocks, num_window_blocks, num_global_blocks,
                                         causal, seed, device)
    blocks = window_blocks(nb, num_window_blocks, causal, device)[None].repeat(heads, 1, 1)
    blocks |= is_global[None, :, None] | is_global[None, None, :]
    head = torch.arange(heads, device=device)[:, None, None]
    query_block = torch.arange(nb, device=device)[None, :, None]
    blocks[head, query_block, rand_ids] |= rand_valid  # the ids of one (head, block) are distinct
    of_block = torch.arange(T, device=device) // block
    pairs = blocks[:, of_block][:, :, of_block]
    if causal:
        pairs = pairs & torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return pairs & real[:, None, None, :]


def reference(q, k, v, causal, real, block, num_random_blocks, num_window_blocks, num_global_blocks, seed):
    """BigBird attention through the materialised (T, T) mask (the specification)."""
    pairs = allowed_pairs(q.shape[2], q.shape[1], causal, real, block, num_random_blocks, num_window_blocks,
                          num_global_blocks, seed)
    return explicit_attention(q, k, v, pairs)


def blockwise(q, k, v, causal, real, block, num_random_blocks, num_window_blocks, num_global_blocks, seed):
    """BigBird attention without a (T, T) matrix; q, k, v (B, H, T, D) in the work dtype,
    real (B, T) bool -> (B, H, T, Dv)."""
    B, H, T, _ = q.shape
    q, k, v = (pad_positions(x, block) for x in (q, k, v))
    real = pad_positions(real, block, dim=1)
    nb = q.shape[2] // block
    device = q.device
    is_global = global_blocks(nb, num_global_blocks, device)
    half = (num_window_blocks - 1) // 2
    offsets = torch.arange(-half, 1 if causal else half + 1, device=device)
    window_ids = torch.arange(nb, device=device)[:, None] + offsets
    in_range = (window_ids >= 0) & (window_ids < nb)
    window_ids = window_ids.clamp(0, nb - 1)
    rand_ids, rand_valid = random_blocks(nb, H, num_random_blocks, num_window_blocks, num_global_blocks, causal, seed,
                                         device)
    global_ids = is_global.nonzero()[:, 0].expand(nb, -1)
    # the three sets are disjoint slot lists: window slots leave out global blocks (they have
    # their own slots) and random blocks exclude both
    key_blocks = torch.cat([window_ids.expand(H, -1, -1), rand_ids, global_ids.expand(H, -1, -1)], dim=2)
    # causal: a global block after the query block holds no allowed key (the query block's own
    # is in its window, or the query block is global and its rows are replaced below)
    global_valid = global_ids < torch.arange(nb, device=device)[:, None] if causal else global_ids >= 0
    key_valid = torch.cat([(in_range & ~is_global[window_ids]).expand(H, -1, -1), rand_valid,
                           global_valid.expand(H, -1, -1)], dim=2)
    # token level, only the query's own block (window offset 0) is causal inside
    pattern = torch.ones(block, key_blocks.shape[2] * block, dtype=torch.bool, device=device)
    if causal:
        pattern[:, half * block:(half + 1) * block] = torch.ones(block, block, dtype=torch.bool, device=device).tril()
    out = block_sparse(q, k, v, block, key_blocks, key_valid.repeat_interleave(block, dim=2), pattern, real)
    rows = (is_global.nonzero() * block + torch.arange(block, device=device)).flatten()
    if rows.numel():
        global_out = attend_rows(q[:, :, rows], rows, k, v, causal, real)
        # under CUDA autocast the two parts can differ in dtype (bfloat16 block products, float32
        # here) and index_copy, unlike under CPU autocast, is not promoted for us
        dtype = torch.promote_types(out.dtype, global_out.dtype)
        out = out.to(dtype).index_copy(2, rows, global_out.to(dtype))
    return out[:, :, :T]


def last_row_blocks(t, heads, block, num_random_blocks, num_window_blocks, num_global_blocks, seed, device=None):
    """The key blocks that the causal query at position t attends over the prefix 0..t, the last
    row of ``allowed_pairs(t + 1, heads, True, ...)`` at block level.

    Returns:
        bool (heads, nb), nb = t // block + 1 (every key j <= t lies in them; the caller masks
        padded keys), or None when the query's block is global (every block).
    """
    nb = t // block + 1
    n = nb - 1
    is_global = global_blocks(nb, num_global_blocks, device)
    if is_global[n]:
        return None
    m = torch.arange(nb, device=device)
    blocks = ((m >= n - (num_window_blocks - 1) // 2) | is_global)[None].repeat(heads, 1)
    ids, valid = random_blocks(nb, heads, num_random_blocks, num_window_blocks, num_global_blocks, True, seed, device)
    blocks[torch.arange(heads, device=device)[:, None], ids[:, n]] |= valid[:, n]
    return blocks


@register("bigbird")
class BigBird(SparseAttention):
    """BigBird block-sparse attention for (B, H, T, D) q, k, v (Zaheer et al. 2020, section 2 and
    appendix D; the block sets in the module docstring). Computation in float32 or wider; the
    output has v's dtype.

    Args:
        block_size_sparse (int): >= 1, positions per block b (64, as Hugging Face and LRA).
        num_random_blocks (int): >= 0, random key blocks per query block r (3).
        num_window_blocks (int): odd >= 1, blocks of the sliding window w (3: the block and one on
            each side; causal: the block and the one before).
        num_global_blocks (int): >= 0, global blocks g: the first ceil(g / 2) and the last
            floor(g / 2) (2: first and last).
        seed (int): >= 0, seed of the random blocks.
        random_per_layer (bool): True (default, as LRA seeds its draw per layer): layer l draws
            its random blocks from the seed ``seed + 1_000_003 l``, so the layers of a model see
            different random blocks (layer 0 keeps ``seed``); False: every layer the same draw
            (the runs archived before 2026-11-27 used this).
        layer_idx (int): model context (``attention.MODEL_CONTEXT``), the block's layer; 0 when
            built alone.
        implementation (str): "fast" (blockwise, default) or "reference" (the (T, T) mask).

    Decoding (``prefill`` / ``step``): a ``KVCache`` of every token (module docstring). The newest
    token is in the last block, global when num_global_blocks >= 2: the step is then full
    attention over the cache; otherwise its window, leading global and random blocks.

    Raises:
        ValueError: a parameter that is not an integer in range, an even num_window_blocks or an
            unknown implementation (constructor); bad shapes or mask, or q and k of different
            lengths (forward).
    """

    causal = "exact"
    decode = "kv_cache"
    rows_depend_on_length = True  # model.GPT.decode_unsupported: a decode path in the last layer only
    defaults_date = "2026-11-27T20:26:53+00:00"  # random_per_layer=True (one draw per layer) became the default
    defaults_before = "random_per_layer=False, one draw of random blocks for all layers"
    example_params = {"block_size_sparse": 4, "num_random_blocks": 1}
    reference_params = {"implementation": "reference"}
    flop_formula = ("H 4 D (Tp m b + n_g b Tp): m = window + random + global blocks per query block of b, "
                    "n_g global blocks against all keys; implementation='reference': 4 D H T^2")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: every query block against its window, random and global key
        blocks, the global blocks' rows against all keys."""
        if params["implementation"] == "reference":
            return heads * matrix_flops(T, D)
        b = params["block_size_sparse"]
        Tp = math.ceil(T / b) * b
        nb = Tp // b
        half = (params["num_window_blocks"] - 1) // 2
        g = params["num_global_blocks"]
        n_global = len({i for i in range(math.ceil(g / 2)) if i < nb} | {nb - 1 - i for i in range(g // 2) if i < nb})
        key_blocks = (half + 1 if causal else 2 * half + 1) + min(params["num_random_blocks"], nb) + n_global
        return heads * 4 * D * (Tp * key_blocks * b + n_global * b * Tp)

    def __init__(self, block_size_sparse=64, num_random_blocks=3, num_window_blocks=3, num_global_blocks=2, seed=0,
                 random_per_layer=True, implementation="fast", layer_idx=0):
        check_int("block_size_sparse", block_size_sparse, 1, "positions per block")
        check_int("num_random_blocks", num_random_blocks, 0, "random key blocks per query block")
        check_int("num_window_blocks", num_window_blocks, 1, "blocks of the sliding window, odd")
        if num_window_blocks % 2 == 0:
            raise ValueError(f"num_window_blocks must be odd (the query's block and as many on each side); "
                             f"got num_window_blocks={num_window_blocks}")
        check_int("num_global_blocks", num_global_blocks, 0, "global: the first ceil(g/2), the last floor(g/2) blocks")
        check_int("seed", seed, 0, "seed of the random blocks")
        check_int("layer_idx", layer_idx, 0, "the block's layer (model context)")
        if not isinstance(random_per_layer, bool):
            raise ValueError(f"random_per_layer must be True or False; got {random_per_layer!r}")
        layer_seed = seed + 1_000_003 * layer_idx if random_per_layer else seed
        super().__init__(implementation, block=block_size_sparse, num_random_blocks=num_random_blocks,
                         num_window_blocks=num_window_blocks, num_global_blocks=num_global_blocks, seed=layer_seed)
        self.random_per_layer, self.layer_idx = random_per_layer, layer_idx

    def compute(self, q, k, v, causal, real):
        return (reference if self.implementation == "reference" else blockwise)(q, k, v, causal, real, **self.params)

    def prefill(self, q, k, v, attention_mask=None):
        """``Attention.prefill``: the causal forward, and a ``KVCache`` of k and v (their dtype)."""
        return self.forward(q, k, v, True, attention_mask), KVCache(k, v, attention_mask)

    def step(self, q_t, k_t, v_t, state):
        """``Attention.step``: k_t, v_t appended to the cache; q_t attends, in float32 or wider, to
        the real cached keys of the blocks ``last_row_blocks`` allows (all when its block is global)."""
        check_step(q_t, k_t, v_t)
        state.append(k_t, v_t)
        t = state.length - 1
        real = state.real()
        allowed = torch.ones(1, 1, 1, t + 1, dtype=torch.bool, device=q_t.device) if real is None \
            else real[:, None, None, :]
        p = self.params
        blocks = last_row_blocks(t, q_t.shape[1], p["block"], p["num_random_blocks"], p["num_window_blocks"],
                                 p["num_global_blocks"], p["seed"], q_t.device)
        if blocks is not None:
            of_block = torch.arange(t + 1, device=q_t.device) // p["block"]
            allowed = allowed & blocks[:, of_block][None, :, None, :]
        k, v = state.keys(), state.values()
        work = work_dtype(q_t, k, v)
        return attend(q_t.to(work), k.to(work), v.to(work), allowed).to(v_t.dtype), state
