"""Reformer LSH attention, registered as ``reformer``: shared-QK attention within hash buckets.

Paper: N. Kitaev, L. Kaiser, A. Levskaya, "Reformer: The Efficient Transformer" (ICLR 2020),
section 2 ("Locality-sensitive hashing attention"): shared QK, angular LSH, sorted chunks,
multi-round hashing, causal masking and the self-attention rule for shared QK.

Definitions (positions 0..T-1, one batch element and head):

- Shared QK: the keys are the normalised queries, k_j = q_j / ||q_j||; the scores are
  q_i . k_j / sqrt(D). The ``k`` argument of the attention contract is not used (the paper's
  model has one projection for both; in this repo's models the key projection then gets no
  gradient). v is used as given.
- Buckets: n_buckets = ceil(T / bucket_size), rounded up to an even number when above 1. Round r
  (of ``n_hashes``) draws a random Gaussian matrix R_r of shape (D, n_buckets / 2) and hashes
  h_r(x) = argmax([x R_r ; -x R_r]) (the paper's angular LSH), x R_r computed in float32 or wider
  (autocast off); one bucket hashes everything to 0.
  The draws come from a torch.Generator seeded with ``seed`` (the same in every call and layer)
  and are shared by the batch and the heads. Padding tokens (``attention_mask`` False) go to an
  extra bucket of their own, so they never take chunk slots from real tokens (and a padding
  query attends to nothing: its output is zero).
- Sorted chunks (Eq. 4-5): in each round the tokens are sorted by (bucket, position) and cut
  into chunks of m = ``chunk_size`` (default: bucket_size) sorted positions; query i attends key
  j in round r when both have the same bucket and j's chunk is i's chunk or the one before it
  (chunk 0 has none before it; no wrap-around).
- Rounds (Eq. 6): i's keys are the union over the rounds; a key found in several rounds counts
  once (the score is lowered by log N_ij, N_ij = the rounds in which i attends j), so the
  output is softmax attention over the union.
- Causal: j <= i. Padding: key j must be real. Caveat (the paper's scheme): which earlier keys
  share query i's chunk depends on how many tokens, later ones included, hash to lower buckets,
  so a later token can change the output at i; the mask keeps later keys out, not their
  influence on the chunking.
- Self (section 2, "shared QK"): q_i . k_i is the largest score of row i, so a token never
  attends to itself unless it has no other key (e.g. the first token when causal); then its
  output is v_i (zero for a padding token).

``reference``: those pairs as a (T, T) mask and ``blockwise.explicit_attention``.
``chunked``: per round, gather the sorted q, v, keys in chunks, attend to the chunk and the one
before it, unsort, and combine the rounds by their log-normalisers (Eq. 7). Cost per round
O(T m D) plus O(n_hashes T m) for the duplicate counts, and O(T n_buckets D) for the hashing
(n_buckets grows with T: a small quadratic term, T^2 D / (2 bucket_size) per round); memory O(T)
(SCORE_BUDGET scores at a time). T is padded to a multiple of m by the module itself (no length
restriction).
"""
import math

import torch
import torch.nn.functional as F

from attention.blockwise import (SCORE_BUDGET, SparseAttention, attend, explicit_attention, pad_positions,
                                 score_budget)
from attention.registry import check_int, matrix_flops, register

def bucket_count(T, bucket_size):
    """ceil(T / bucket_size), rounded up to even when above 1 (the hash splits in halves)."""
    n = math.ceil(T / bucket_size)
    return n + n % 2 if n > 1 else 1


def lsh_buckets(q, n_hashes, n_buckets, real, seed):
    """Long (n_hashes, B, H, T): the bucket of every token in every round (module docstring);
    padding tokens (real False) get bucket n_buckets. The projections x R cost O(T n_buckets D),
    which is O(T^2 D / bucket_size) as n_buckets grows with T; they are computed a group of
    positions at a time, so memory stays O(T)."""
    B, H, T, D = q.shape
    if n_buckets == 1:
        buckets = torch.zeros(n_hashes, B, H, T, dtype=torch.long, device=q.device)
    else:
        half = n_buckets // 2
        # the projections in float32 or wider whatever autocast says: in bfloat16 near-ties round
        # to equal values and the buckets would depend on the precision mode (tests/gpu/)
        work = torch.promote_types(q.dtype, torch.float32)
        rotations = torch.randn(n_hashes, D, half, generator=torch.Generator().manual_seed(seed),
                                dtype=torch.float64).to(q.device, work)
        step = max(1, score_budget(q, SCORE_BUDGET) // (B * H * half))
        rounds = []
        for rotation in rotations:
            parts = []
            for start in range(0, T, step):
                with torch.autocast(device_type=q.device.type, enabled=False):
                    projected = q[:, :, start:start + step].to(work) @ rotation
                # argmax of [xR ; -xR] without building it: the largest entry, or the most
                # negative one in the second half (ties: the first half, as argmax takes the
                # first maximum)
                top, top_at = projected.max(dim=-1)
                bottom, bottom_at = projected.min(dim=-1)
                parts.append(torch.where(top >= -bottom, top_at, bottom_at + half))
            rounds.append(torch.cat(parts, dim=-1))
        buckets = torch.stack(rounds)
    return buckets.masked_fill(~real[None, :, None, :], n_buckets)


def sorted_chunks(buckets):
    """The sort of Eq. 4-5: (order, slot), both long of the shape of ``buckets`` (..., T): order
    lists the positions sorted by (bucket, position), slot[..., t] is the place of position t in
    that order (its chunk is slot // chunk)."""
    T = buckets.shape[-1]
    positions = torch.arange(T, device=buckets.device)
    order = (buckets * T + positions).argsort(dim=-1)
    return order, torch.empty_like(order).scatter_(-1, order, positions.expand_as(order))


def allowed_pairs(buckets, chunk_of, causal, real):
    """Bool (B, H, T, T) from the buckets and chunks of every round (n_hashes, B, H, T): the pairs
    of the module docstring, self-rule included."""
    same_bucket = buckets[..., :, None] == buckets[..., None, :]
    offset = chunk_of[..., :, None] - chunk_of[..., None, :]  # query chunk - key chunk
    pairs = (same_bucket & ((offset == 0) | (offset == 1))).any(dim=0) & real[:, None, None, :]
    T = buckets.shape[-1]
    if causal:
        pairs = pairs & torch.ones(T, T, dtype=torch.bool, device=real.device).tril()
    self_pair = torch.eye(T, dtype=torch.bool, device=real.device)
    others = pairs & ~self_pair
    return others | (pairs & self_pair & ~others.any(-1, keepdim=True))


def hashing(q, real, n_hashes, bucket_size, seed):
    """(buckets (n_hashes, B, H, T) long, n_buckets) of queries q (B, H, T, D)."""
    n_buckets = bucket_count(q.shape[2], bucket_size)
    return lsh_buckets(q, n_hashes, n_buckets, real, seed), n_buckets


def chunk_length(T, bucket_size, chunk_size):
    """m: chunk_size, 0 meaning bucket_size; never above T (one chunk holds everything then)."""
    return min(chunk_size or bucket_size, T)


def shared_keys(q):
    """k_j = q_j / ||q_j|| (a zero query gives a zero key)."""
    return F.normalize(q, dim=-1)


def reference(q, v, causal, real, n_hashes, bucket_size, chunk_size, seed):
    """LSH attention through the materialised (T, T) mask (the specification); q, v (B, H, T, D)
    in the work dtype -> (B, H, T, Dv)."""
    buckets, _ = hashing(q, real, n_hashes, bucket_size, seed)
    _, slot = sorted_chunks(buckets)
    chunk_of = slot // chunk_length(q.shape[2], bucket_size, chunk_size)
    return explicit_attention(q, shared_keys(q), v, allowed_pairs(buckets, chunk_of, causal, real))


def chunked(q, v, causal, real, n_hashes, bucket_size, chunk_size, seed):
    """LSH attention in sorted chunks, never a (T, T) matrix (module docstring); q, v
    (B, H, T, D) in the work dtype, real (B, T) bool -> (B, H, T, Dv)."""
    B, H, T, _ = q.shape
    chunk = chunk_length(T, bucket_size, chunk_size)
    buckets, n_buckets = hashing(q, real, n_hashes, bucket_size, seed)
    # appended positions go to the padding bucket: sorted last, never keys
    buckets = F.pad(buckets, (0, -T % chunk), value=n_buckets)
    q, v, real = pad_positions(q, chunk), pad_positions(v, chunk), pad_positions(real, chunk, dim=1)
    Tp = q.shape[2]
    nc = Tp // chunk
    order, slot = sorted_chunks(buckets)
    # i attends j in round r iff code_r(i) - code_r(j) is 0 or 1 (same bucket, j's chunk is i's
    # or the one before): a chunk difference alone never reaches the next bucket's codes
    # doubled codes 2 code: the count below compares |2 code_i - 1 - 2 code_j| with 1; the
    # smallest integer type that holds them (memory traffic is the cost of that loop)
    codes = 2 * (buckets * (nc + 1) + slot // chunk)
    codes = codes.to(torch.int16 if int(codes.max()) < 2 ** 15 - 2 else torch.int32)
    # For keys of the query's bucket the sorted order is the position order, so self and
    # causality are fixed patterns of (query slot a, key column): the previous chunk holds
    # earlier positions only, in the own chunk column c is the query itself when c = a
    within = torch.arange(chunk, device=q.device)
    own_chunk = within[None, :] < within[:, None] if causal else within[None, :] != within[:, None]
    pattern = torch.cat([torch.ones(chunk, chunk, dtype=torch.bool, device=q.device), own_chunk], dim=1)
    has_previous = torch.ones(nc, 2 * chunk, dtype=torch.bool, device=q.device)
    has_previous[0, :chunk] = False  # chunk 0 has no previous chunk (its rolled-in keys are dropped)

    row_offset = (torch.arange(B * H, device=q.device) * Tp).view(B, H, 1)

    def rows_of(x, index):  # x (B, H, Tp, n)[b, h, index[b, h, t]] as (B, H, Tp, n): one row gather
        return x.reshape(B * H * Tp, -1).index_select(0, (index + row_offset).flatten()).view(B, H, Tp, -1)

    def with_previous(x, start, stop):
        # chunks start..stop-1 of x (B, H, nc, chunk, ...) with the chunk before each in front:
        # (B, H, n, 2 chunk, ...); chunk 0 gets a stand-in that has_previous masks
        previous = x[:, :, start - 1:stop - 1] if start else torch.cat([x[:, :, :1], x[:, :, :stop - 1]], dim=2)
        return torch.cat([previous, x[:, :, start:stop]], dim=3)

    # chunks per step: the intermediates stay within SCORE_BUDGET (in cache at any T)
    step = max(1, score_budget(q, SCORE_BUDGET) // (B * H * chunk * 2 * chunk))
    outs, lses = [], []
    for r in range(n_hashes):
        index = order[r]
        sorted_q, sorted_v = (rows_of(x, index).view(B, H, nc, chunk, -1) for x in (q, v))
        sorted_keys = shared_keys(sorted_q)  # normalising after the gather: one gather fewer
        sorted_bucket = buckets[r].gather(2, index).view(B, H, nc, chunk)
        other_codes = [codes[o].gather(2, index).view(B, H, nc, chunk) for o in range(n_hashes) if o != r]
        parts = []
        for start in range(0, nc, step):
            stop = min(nc, start + step)
            bucket_k = with_previous(sorted_bucket, start, stop)
            key_ok = (bucket_k < n_buckets) & has_previous[start:stop]  # real keys that exist
            bucket_q = sorted_bucket[:, :, start:stop, :, None]
            allowed = (bucket_q == bucket_k[..., None, :]) & key_ok[..., None, :] & pattern
            bias = None
            if other_codes:
                count = torch.ones(allowed.shape, dtype=codes.dtype, device=q.device)  # round r itself
                for code in other_codes:
                    # code_i - code_j is 0 or 1 (i attends j in that round too) iff
                    # |(2 code_i - 1) - 2 code_j| = 1: integer arithmetic in place, which runs
                    # several times faster here than comparisons that broadcast
                    code_k = with_previous(code, start, stop)[..., None, :]
                    difference = (code[:, :, start:stop] - 1)[..., :, None] - code_k
                    count += difference.abs_().eq_(1)
                bias = torch.log(count.to(q.dtype))
            parts.append(attend(sorted_q[:, :, start:stop], with_previous(sorted_keys, start, stop),
                                with_previous(sorted_v, start, stop), allowed, bias, with_lse=True))
        # back to positions (position t sits in sorted slot slot[r, ..., t]): the outputs and
        # their log-normaliser side by side, one gather
        both = torch.cat([torch.cat([out, lse[..., None]], dim=-1) for out, lse in parts], dim=2)
        both = rows_of(both.reshape(B, H, Tp, -1), slot[r])
        outs.append(both[..., :-1])
        lses.append(both[..., -1])
    lse = torch.stack(lses)
    total = torch.logsumexp(lse, dim=0)
    alone = total == float("-inf")
    # Eq. 7: round r weighs exp(lse_r - total); rows without any key keep weight 0 (no NaN)
    weights = torch.exp(lse - total.masked_fill(alone, 0.0))
    out = sum(weight[..., None] * round_out for weight, round_out in zip(weights, outs))
    # no key besides itself: the token attends to itself alone (padding tokens: zero)
    out = torch.where(alone[..., None], v * real[:, None, :, None], out)
    return out[:, :, :T]


@register("reformer")
class Reformer(SparseAttention):
    """Reformer LSH attention with shared QK for (B, H, T, D) q, k, v (Kitaev et al. 2020,
    section 2; definitions in the module docstring). The keys are the normalised queries: the
    ``k`` argument is checked but not used. Computation in float32 or wider; the output has v's
    dtype.

    Args:
        n_hashes (int): >= 1, hashing rounds (8, as reformer-pytorch; the paper's experiments use
            1 to 8).
        bucket_size (int): >= 1, average tokens per bucket: n_buckets = ceil(T / bucket_size),
            rounded up to even (64, as reformer-pytorch and the paper).
        chunk_size (int): >= 0, sorted positions per chunk m, 0 = bucket_size (as
            reformer-pytorch; the paper's m = 2 T / n_buckets is chunk_size = 2 * bucket_size).
            One bucket with a chunk of at least T is exact shared-QK softmax attention with the
            self rule.
        seed (int): >= 0, seed of the random rotations.
        implementation (str): "fast" (sorted chunks, default) or "reference" (the (T, T) mask).

    Raises:
        ValueError: a parameter that is not an integer in range or an unknown implementation
            (constructor); bad shapes or mask, or q and k of different lengths (forward).

    ``causal = "leaky"``: with ``causal=True`` every scored pair has j <= i, but the buckets and
    chunk boundaries depend on every token, later ones included, so an output can change when a
    later token does; train.py refuses it for causal tasks (``attention.causal_support``).
    """

    causal = "leaky"
    example_params = {"bucket_size": 8, "chunk_size": 4, "n_hashes": 2}  # chunks shorter than buckets
    reference_params = {"implementation": "reference"}
    flop_formula = ("H n_hashes (T D n_buckets + 8 Tp m D): hashing, and 2m keys per query in sorted chunks of m; "
                    "implementation='reference': 4 D H T^2")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: per round the hashing x R_r (R_r of D x n_buckets / 2) and 2m keys
        per query in sorted chunks of m."""
        if params["implementation"] == "reference":
            return heads * matrix_flops(T, D)
        m = chunk_length(T, params["bucket_size"], params["chunk_size"])
        n_buckets = bucket_count(T, params["bucket_size"])
        hashing = T * D * n_buckets if n_buckets > 1 else 0
        return heads * params["n_hashes"] * (hashing + 8 * math.ceil(T / m) * m * m * D)

    def __init__(self, n_hashes=8, bucket_size=64, chunk_size=0, seed=0, implementation="fast"):
        check_int("n_hashes", n_hashes, 1, "hashing rounds")
        check_int("bucket_size", bucket_size, 1, "average tokens per bucket")
        check_int("chunk_size", chunk_size, 0, "sorted positions per chunk, 0 = bucket_size")
        check_int("seed", seed, 0, "seed of the random rotations")
        super().__init__(implementation, n_hashes=n_hashes, bucket_size=bucket_size, chunk_size=chunk_size, seed=seed)

    def compute(self, q, k, v, causal, real):
        # shared QK: the keys are made from q, k is not read
        return (reference if self.implementation == "reference" else chunked)(q, v, causal, real, **self.params)
