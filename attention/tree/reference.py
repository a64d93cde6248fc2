"""Readable reference of tree / bud-expansion attention: one query at a time.

Paper: "High Attention Scores and Where to Find Them" (Menet, Choi, de Viragh, Chettata), section 2,
Algorithm 1. This file is the specification; ``cpu.py`` (compiled kernel) and ``vectorized.py`` must
give the same result for the same seed, and so must the decode step (``decode.py``) for its row.

Conventions shared with cpu_kernel.cpp and vectorized.py (schedule helpers in schedule.py):
- Tree length L = sequence length padded to the next power of two. A perfect binary tree over the
  L leaf positions stores for every node (level h, index j) covering leaves [j 2^h, (j+1) 2^h) the
  sum of its keys, values (and feature-mapped keys) and its number of non-empty leaves (Eq. 1).
  Leaves at or after the query's history length l are empty.
- History: causal query t sees keys 0..t (l = t+1), or 0..t-1 (l = t) with exclude_self;
  non-causal queries see the whole sequence (l = sequence length). l = 0 gives a zero output.
- n_terms = ceil(l^E) terms (buds; the paper's T); P buds are expanded per round.
- Initial buds: the nodes of width w = max(1, 2^ceil(log2 l) / P) that intersect [0, l), i.e.
  ceil(l / w) <= P nodes of the level where min(P, 2^ceil(log2 l)) nodes cover the prefix
  (as in the authors' code; a P that is not a power of two is rounded down for this step only).
  Each costs one inner product per head.
- Each round (while #buds < n_terms) samples k = min(P, #expandable) buds without replacement in
  proportion to their mass (Gumbel-top-k with counter-based noise, see samplers.py). Expandable =
  at least 2 non-empty leaves (a bud with one leaf is a leaf: mass 0, never expanded).
  A sampled bud whose right child is empty (it straddles the history end) is handled by the
  ``descent`` rule:
    "authors" (default; the authors' code, np_attention.py): the bud is replaced by its left child
        (same sums, same mass, no inner product) and its draw is used up: no new bud from it in
        this round. At small E this makes the number of rounds, hence the result, depend on the
        sampler.
    "split": the bud descends until its right child is non-empty and is split in the same round.
  A split: the right child's alignment costs one inner product per head, the left one is
  parent - right (Eq. 2). The last round may overshoot n_terms by up to P - 1 buds (as in the
  authors' code).
- Bud identity for the noise: its first leaf position s (buds are disjoint, so s is unique).
- Output per head, with a_n = scale * A_n / |n| (log of the bud's geometric-mean score):
    "bud_mean": sum_n |n| e^{a_n} (V_n / |n|) / sum_n |n| e^{a_n}  (every leaf of a bud gets a_n)
    "paper":    sum_n e^{a_n} V_n / sum_n e^{a_n}                  (Algorithm 1 as printed)
  "bud_mean" is a deterministic approximation with a known bias: since |n| exp(mean_i s_i) <=
  sum_i exp(s_i) (Jensen), a bud whose leaves' scores are spread out is under-weighted relative
  to exact attention. "paper" sums the bud's values, so with equal scores it returns
  (l / #buds) mean(v) instead of mean(v). With E = 1 every bud is a leaf and both equal exact
  softmax attention.
- Keys attended exactly (recorded on request, ``reference_forward(record=...)``, here only): the
  buds that hold one key. Their exact score is known and weighted as in softmax; every other key
  enters the output only through its bud's mean score.
"""
import math

import torch

from attention.tree.samplers import FEATURE_SAMPLERS, gumbel_noise, log_mass, sampling_keys
from attention.tree.schedule import DESCENTS, block_length, default_P, initial_width, num_terms  # noqa: F401

def add_stats(stats, heads, queries, tree_inner_products, full_inner_products, terms, features):
    """Add one batch of cost counts to a TreeAttention stats dict (see TreeAttention.stats).

    Args:
        stats (dict | None): counters to increment in place (nothing happens for None).
        heads (int): H; every count below is per query position and is multiplied by H.
        queries (int): query positions processed.
        tree_inner_products (int): initial buds + splits, summed over the queries.
        full_inner_products (int): history lengths l, summed over the queries (exact attention's cost).
        terms (int): final numbers of buds, summed over the queries.
        features (bool): the sampler uses feature maps (each tree inner product has a feature twin).
    """
    if stats is None:
        return
    stats["queries"] += queries * heads
    stats["alignment_inner_products"] += tree_inner_products * heads
    stats["feature_inner_products"] += tree_inner_products * heads if features else 0
    stats["full_attention_inner_products"] += full_inner_products * heads
    stats["terms"] += terms * heads


class BudTree:
    """Perfect binary tree of key / value / feature-key sums with L leaves (Eq. 1), built incrementally.

    Attributes:
        K[h], V[h]: float64 (H, L >> h, D) sums at level h (h = 0 are the leaves).
        F[h]: float64 (H, L >> h, R) sums of feature-mapped keys, or None.
        N[h]: int64 (L >> h,) number of non-empty leaves below each node.
    """

    def __init__(self, L, H, D, R=None):
        self.L = L
        self.levels = L.bit_length()  # log2(L) + 1
        self.K = [torch.zeros(H, L >> h, D, dtype=torch.float64) for h in range(self.levels)]
        self.V = [torch.zeros(H, L >> h, D, dtype=torch.float64) for h in range(self.levels)]
        self.F = None if R is None else [torch.zeros(H, L >> h, R, dtype=torch.float64) for h in range(self.levels)]
        self.N = [torch.zeros(L >> h, dtype=torch.int64) for h in range(self.levels)]

    def insert(self, pos, k, v, kf=None):
        """Add key k (H, D), value v (H, D) and feature key kf (H, R) at leaf ``pos`` and on its path to the root."""
        for h in range(self.levels):
            j = pos >> h
            self.K[h][:, j] += k
            self.V[h][:, j] += v
            if self.F is not None:
                self.F[h][:, j] += kf
            self.N[h][j] += 1

    def count(self, h, j):
        return int(self.N[h][j])


def tree_attention_query(tree, q, l, n_terms, P, sampler, normalization, scale, b, seed, batch, pos, qf=None,
                         descent="authors", return_buds=False):
    """Algorithm 1 for one query over a tree whose first l leaves are the history.

    Args:
        tree (BudTree): holds exactly the keys/values of history positions 0..l-1.
        q (torch.Tensor): float64 (H, D) query.
        l (int): history length (>= 1).
        n_terms (int): number of terms (the paper's T), 1 <= n_terms <= l.
        P (int): buds expanded per round, >= 1.
        sampler, normalization (str), scale (float), b (float): see the package docstring.
        seed, batch, pos (int): select the random draws (with the round and the bud start).
        qf (torch.Tensor | None): float64 (H, R) feature-mapped query for FEATURE_SAMPLERS.
        descent (str): what a sampled bud whose right child is empty does (module docstring):
            "authors" (it becomes its left child and uses up its draw) or "split" (it descends
            until it can be split and is split in the same round).
        return_buds (bool): also put the final buds in ``info["buds"]`` (off by default: no cost).

    Returns:
        (out, info): out float64 (H, D); info dict with "initial" (initial buds), "splits",
        "terms" (final number of buds), "rounds", "sampled" (per round, the list of sampled
        buds as (start, leaf count) pairs) and "expandable" (per round, the number of expandable
        buds), for tests; with ``return_buds`` also "buds": the final buds (the terms of the
        output) as (start, key count) pairs in no particular order: bud n holds the history keys
        start .. start + count - 1 (a bud's non-empty leaves are consecutive from its start), and
        the buds partition 0 .. l-1.

    Raises:
        ValueError: n_terms outside [1, l], P < 1 or an unknown descent.
        RuntimeError: no expandable bud left before n_terms buds (cannot happen for n_terms <= l).
    """
    if not 1 <= n_terms <= l:
        raise ValueError(f"n_terms must satisfy 1 <= n_terms <= l (history length {l}); got n_terms={n_terms}")
    if descent not in DESCENTS:
        raise ValueError(f"descent '{descent}' unknown; allowed: {', '.join(DESCENTS)}")
    if P < 1:
        raise ValueError(f"P (buds expanded per round) must be >= 1; got P={P}")
    use_f = sampler in FEATURE_SAMPLERS
    w = initial_width(l, P)
    h0 = w.bit_length() - 1
    # a bud: [level, index, alignment (H,), feature alignment (H,) or None]
    buds = []
    for j in range(-(-l // w)):
        A = (q * tree.K[h0][:, j]).sum(-1)
        Af = (qf * tree.F[h0][:, j]).sum(-1) if use_f else None
        buds.append([h0, j, A, Af])
    info = {"initial": len(buds), "splits": 0, "rounds": 0, "sampled": [], "expandable": []}
    rnd = 0
    while len(buds) < n_terms:
        starts = torch.tensor([j << h for h, j, _, _ in buds], dtype=torch.int64)
        counts = torch.tensor([tree.count(h, j) for h, j, _, _ in buds], dtype=torch.int64)
        A_all = torch.stack([bd[2] for bd in buds])
        Af_all = torch.stack([bd[3] for bd in buds]) if use_f else None
        logm = log_mass(sampler, A_all, Af_all, counts, starts, l, scale, b)
        expandable = counts >= 2
        n_exp = int(expandable.sum())
        if n_exp == 0:
            raise RuntimeError(f"no expandable bud left with {len(buds)} < n_terms={n_terms} buds (l={l})")
        keys = sampling_keys(logm, expandable, gumbel_noise(seed, batch, pos, rnd, starts))
        chosen = torch.argsort(keys, descending=True)[:min(P, n_exp)].tolist()
        info["sampled"].append([(int(starts[i]), int(counts[i])) for i in chosen])
        info["expandable"].append(n_exp)
        for i in chosen:
            h, j, A, Af = buds[i]
            if descent == "authors" and tree.count(h - 1, 2 * j + 1) == 0:
                buds[i] = [h - 1, 2 * j, A, Af]  # the left child has the same sums: no inner product
                continue
            while tree.count(h - 1, 2 * j + 1) == 0:  # "split": descend to the first level with a right child
                h, j = h - 1, 2 * j
            A_right = (q * tree.K[h - 1][:, 2 * j + 1]).sum(-1)  # one inner product per head
            Af_right = (qf * tree.F[h - 1][:, 2 * j + 1]).sum(-1) if use_f else None
            buds[i] = [h - 1, 2 * j, A - A_right, (Af - Af_right) if use_f else None]  # Eq. 2
            buds.append([h - 1, 2 * j + 1, A_right, Af_right])
            info["splits"] += 1
        rnd += 1
    info["rounds"] = rnd
    info["terms"] = len(buds)
    if return_buds:
        info["buds"] = [(j << h, tree.count(h, j)) for h, j, _, _ in buds]

    counts = torch.tensor([tree.count(h, j) for h, j, _, _ in buds], dtype=torch.float64)
    A_all = torch.stack([bd[2] for bd in buds])                          # (n, H)
    V_all = torch.stack([tree.V[h][:, j] for h, j, _, _ in buds])        # (n, H, D)
    a = scale * A_all / counts[:, None]
    if normalization == "bud_mean":
        weights = torch.softmax(a + counts.log()[:, None], dim=0) / counts[:, None]
    else:
        weights = torch.softmax(a, dim=0)
    return (weights[:, :, None] * V_all).sum(0), info


def reference_forward(q, k, v, causal, exclude_self, E, P, sampler, normalization, b, seed,
                      qf=None, kf=None, stats=None, positions=None, descent="authors", record=None):
    """Tree attention for (B, H, T, D) inputs, one batch element and one query at a time.

    Args:
        q, k, v (torch.Tensor): (B, H, T, D), any float dtype (computed in float64).
        causal (bool), exclude_self (bool): history rule (see module docstring).
        E (float), P (int | None: default_P), sampler, normalization (str), b (float), seed (int).
        qf, kf (torch.Tensor | None): (B, H, T, R) feature-mapped queries / keys for FEATURE_SAMPLERS.
        stats (dict | None): counters to increment (see TreeAttention.stats).
        positions (iterable | torch.Tensor | None): query positions to evaluate (others stay zero,
            keys are still inserted): an iterable of ints for every batch element, or a bool
            (B, T) tensor (True = evaluate) per batch element; None = all. For timing a subset in
            benchmarks and for recording at chosen queries.
        descent (str): "authors" or "split" (module docstring).
        record (dict | None): if a dict, the final buds (the terms of the output) of every
            evaluated query are written into it (off by default: no cost):
            - "bud_start": int64 (B, T, T); [b, t, i] = first key position of the bud that holds
              key i in query t's output, -1 where key i is outside t's history or query t was
              not evaluated (``positions``). The tree is shared by the heads (paper section 2.4),
              so this holds for every head.
            - "exact_keys": bool (B, T, T); [b, t, i] = key i is a bud of its own (one key):
              the keys tree attention attends to exactly. Its exact score <q_t, k_i> / sqrt(D)
              was computed (directly or as parent minus right child, Eq. 2) and it gets softmax's
              unnormalised weight exp(score) on v_i under both normalizations; every other key of
              the history enters the output only through its bud's mean score (module docstring).
              Every key of the history is in exactly one bud, so "the keys that entered the
              output" would be the whole history; the exact keys are the ones the sampling found.
              With E = 1 these are all keys of the history.
    Returns:
        float64 tensor (B, H, T, D).
    """
    B, H, Tlen, D = q.shape
    if positions is None:
        todo = [set(range(Tlen))] * B
    elif torch.is_tensor(positions) and positions.dim() == 2:
        todo = [set(row.nonzero().flatten().tolist()) for row in positions]
    else:
        todo = [set(positions)] * B
    L = block_length(Tlen)
    P = default_P(L, E) if P is None else P
    scale = 1.0 / math.sqrt(D)
    q, k, v = q.double(), k.double(), v.double()
    use_f = sampler in FEATURE_SAMPLERS
    R = qf.shape[-1] if use_f else None
    out = torch.zeros(B, H, Tlen, D, dtype=torch.float64)
    bud_start = None if record is None else torch.full((B, Tlen, Tlen), -1, dtype=torch.int64)
    for bi in range(B):
        tree = BudTree(L, H, D, R)

        def insert(p):
            tree.insert(p, k[bi, :, p], v[bi, :, p], kf[bi, :, p].double() if use_f else None)

        if not causal:
            for p in range(Tlen):
                insert(p)
        for t in range(Tlen):
            if causal and not exclude_self:
                insert(t)
            l = Tlen if not causal else (t if exclude_self else t + 1)
            if t not in todo[bi]:
                if causal and exclude_self:
                    insert(t)
                continue
            ips = terms = 0
            if l > 0:
                o, info = tree_attention_query(tree, q[bi, :, t], l, num_terms(l, E), P, sampler, normalization,
                                               scale, b, seed, bi, t, qf[bi, :, t].double() if use_f else None,
                                               descent=descent, return_buds=record is not None)
                out[bi, :, t] = o
                ips, terms = info["initial"] + info["splits"], info["terms"]
                if record is not None:
                    for start, count in info["buds"]:
                        bud_start[bi, t, start:start + count] = start
            add_stats(stats, H, 1, ips, l, terms, use_f)
            if causal and exclude_self:
                insert(t)
    if record is not None:
        record["bud_start"] = bud_start
        record["exact_keys"] = _single_key_buds(bud_start)
    return out


def _single_key_buds(bud_start):
    """bool (B, T, T): the keys whose bud (``bud_start`` labels, -1 = none) holds no other key.
    A bud's keys are consecutive and labelled by its first position, so key i is alone exactly
    when it is its bud's start and key i+1 is not in the same bud."""
    starts_here = bud_start == torch.arange(bud_start.shape[-1])
    next_same = torch.zeros_like(starts_here)
    next_same[..., :-1] = bud_start[..., 1:] == bud_start[..., :-1]
    return starts_here & ~next_same
