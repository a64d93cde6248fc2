"""Informer ProbSparse self-attention, registered as ``informer``.

Paper: H. Zhou, S. Zhang, J. Peng, S. Zhang, J. Li, H. Xiong, W. Zhang, "Informer: Beyond
Efficient Transformer for Long Sequence Time-Series Forecasting" (AAAI 2021), section "Efficient
Self-attention Mechanism": Eq. 3 (ProbSparse attention), Eq. 4 (max-mean sparsity measurement)
and the sampling that follows it.

Definitions (one batch element and head; the allowed keys of query i are the real keys, and
j <= i when causal):

- u = min(T, ceil(factor * ln T)) active queries per (batch element, head).
- Measurement (Eq. 4, on a sample of keys, as the paper samples): the queries are split into
  groups of ``group`` = 64 consecutive positions. Each group draws S = min(T, ceil(factor *
  ceil(ln T))) keys uniformly, with replacement, from the real keys outside the group that every
  query of the group may attend (causal: the keys before the group; otherwise all keys outside
  it), from a torch.Generator seeded with ``seed`` (the same draw for every batch element, head,
  call and layer of a given T). The sample of query i is those S keys plus its allowed keys in
  its own group, and M_i = max - mean of q_i . k_j / sqrt(D) over that sample (a key drawn
  twice counts twice in the mean). A group's shared draw makes the scores one dense product per
  group instead of a gather of S keys per query; for T <= 64 the sample is all allowed keys, M
  exact. Padding queries and queries without an allowed key get M = -inf.
- The u queries with the largest M are active (ties: the earlier position); Eq. 3 is
  softmax(Q_bar K^T / sqrt(D)) V with Q_bar = q on the active rows and 0 on the others, over the
  allowed keys. An active query therefore gets softmax attention; a lazy query's scores are all
  0, so it gets the plain mean of its allowed values: mean(V) non-causal, the running mean
  (sum_{j <= i} v_j) / (number of real j <= i) causal (divided by the count: its scale does not
  grow with the position). A row with no allowed key outputs zeros. u = T is softmax attention.
- Causal caveat: the top-u choice compares all positions, so in a causal model whether query i
  is active depends on later tokens (the paper's decoder does the same; one bit per position).
  The measurement of query i itself only uses keys j <= i.

``reference``: the measurement read off the (T, T) score matrix, then Eq. 3 literally
(``blockwise.explicit_attention`` on Q_bar). ``sparse``: the measurement group by group (a
(64, 64) block and a (64, S) product), the u active rows against all keys
(``blockwise.attend_rows``) and the (running) mean of V for the rest: cost O(T (64 + S) D +
u T D), no (T, T) matrix. u and S grow with ln T, so the cost is O(T log T), not O(T).
"""
import math

import torch

from attention.blockwise import (SCORE_BUDGET, SparseAttention, attend_rows, explicit_attention, pad_positions,
                                 score_budget)
from attention.registry import check_int, matrix_flops, register

GROUP = 64  # queries that share one draw of sampled keys


def active_count(T, factor):
    """u = min(T, ceil(factor * ln T))."""
    return min(T, math.ceil(factor * math.log(T))) if T > 1 else 0


def sample_count(T, factor):
    """S = min(T, ceil(factor * ceil(ln T))): keys drawn per group of queries."""
    return min(T, math.ceil(factor * math.ceil(math.log(T)))) if T > 1 else 0


def allowed_counts(causal, real):
    """Long (B, T): number of allowed keys of each query (real keys, j <= i when causal)."""
    if causal:
        return real.long().cumsum(dim=1)
    return real.long().sum(dim=1, keepdim=True).expand_as(real)


def group_draws(causal, real, factor, seed, group):
    """The shared draw of each group of queries (module docstring).

    Returns:
        (positions, valid): long and bool (B, n_groups, S); valid is False for a group with no
        real key outside it that all its queries may attend (nothing to draw from).
    """
    B, T = real.shape
    n_groups = math.ceil(T / group)
    uniform = torch.rand(n_groups, sample_count(T, factor), generator=torch.Generator().manual_seed(seed),
                         dtype=torch.float64).to(real.device)
    running = real.long().cumsum(dim=1)
    starts = torch.arange(n_groups, device=real.device) * group
    ends = (starts + group).clamp(max=T)
    before = torch.where(starts > 0, running[:, (starts - 1).clamp(min=0)], 0)  # real keys before the group
    inside = running[:, ends - 1] - before
    outside = before if causal else running[:, -1:] - inside
    rank = (uniform * outside[..., None]).long()  # 0-based rank among the keys outside the group
    # the rank-th key outside the group is the (rank + 1)-th real key, or the one after the
    # group's own real keys once the rank passes the keys before it
    target = rank + 1 + torch.where(rank >= before[..., None], inside[..., None], 0)
    positions = torch.searchsorted(running, target.view(B, -1)).view(target.shape).clamp(max=T - 1)
    return positions, (outside > 0)[..., None].expand_as(positions)


def local_allowed(causal, real, group):
    """Bool (B, n_groups, group, group): query a of a group may attend key c of the same group
    (a real key inside the sequence; c <= a when causal). T is padded to whole groups."""
    B, T = real.shape
    n_groups = math.ceil(T / group)
    keys = real.new_zeros(B, n_groups * group)
    keys[:, :T] = real
    allowed = keys.view(B, n_groups, 1, group)
    if causal:
        allowed = allowed & torch.ones(group, group, dtype=torch.bool, device=real.device).tril()
    return allowed.expand(B, n_groups, group, group)


def measurement(sampled_scores, valid, real):
    """M (B, H, T) from the scores of every query's sample (B, H, T, n) with validity (B, T, n):
    max - mean over the valid entries; -inf for padding queries and empty samples."""
    mask = valid[:, None]
    top = sampled_scores.masked_fill(~mask, float("-inf")).amax(-1)
    mean = sampled_scores.masked_fill(~mask, 0.0).sum(-1) / valid.sum(-1).clamp_min(1)[:, None]
    ranked = real & valid.any(-1)
    return (top - mean).masked_fill(~ranked[:, None], float("-inf"))


def top_queries(m, u):
    """Long (B, H, u): the positions of the u largest M (stable: ties go to the earlier one)."""
    return torch.sort(m, dim=-1, descending=True, stable=True).indices[..., :u]


def allowed_pairs(T, causal, real):
    """Bool (B, 1, T, T): real keys, j <= i when causal."""
    pairs = real[:, None, None, :]
    if causal:
        pairs = pairs & torch.ones(T, T, dtype=torch.bool, device=real.device).tril()
    return pairs


def reference(q, k, v, causal, real, factor, seed, group=GROUP):
    """The measurement read off the (T, T) score matrix, then Eq. 3: softmax(Q_bar K^T / sqrt(D))
    V over the allowed pairs, Q_bar = q on the active rows and zeros elsewhere; q, k, v
    (B, H, T, D) in the work dtype -> (B, H, T, Dv)."""
    B, H, T, D = q.shape
    with torch.autocast(device_type=q.device.type, enabled=False):  # the ranking in the work dtype, as ``sparse``
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    # every query's sample as key positions: its own group, then its group's draw
    of_group = torch.arange(T, device=q.device) // group
    own = of_group[:, None] * group + torch.arange(group, device=q.device)  # (T, group)
    own_valid = local_allowed(causal, real, group).reshape(B, -1, group)[:, :T]
    drawn, drawn_valid = group_draws(causal, real, factor, seed, group)
    positions = torch.cat([own.clamp(max=T - 1).expand(B, -1, -1), drawn[:, of_group]], dim=2)
    valid = torch.cat([own_valid, drawn_valid[:, of_group]], dim=2)
    sampled = scores.gather(3, positions[:, None].expand(-1, H, -1, -1))
    active = top_queries(measurement(sampled, valid, real), active_count(T, factor))
    rows = active[..., None].expand(-1, -1, -1, D)
    q_bar = torch.zeros_like(q).scatter(2, rows, q.gather(2, rows))
    return explicit_attention(q_bar, k, v, allowed_pairs(T, causal, real))


def sparse(q, k, v, causal, real, factor, seed, group=GROUP):
    """ProbSparse attention without a (T, T) matrix (module docstring); q, k, v (B, H, T, D) in
    the work dtype, real (B, T) bool -> (B, H, T, Dv). The measurement goes through the query
    groups a few at a time (at most about SCORE_BUDGET sampled scores per step), so that no
    temporary grows with T but M itself: large fresh tensors cost page faults on every call."""
    B, H, T, D = q.shape
    n_groups = math.ceil(T / group)
    scale = 1 / math.sqrt(D)
    qg, kg = (pad_positions(x, group).view(B, H, n_groups, group, D) for x in (q, k))
    drawn, drawn_valid = group_draws(causal, real, factor, seed, group)
    S = drawn.shape[-1]
    local = local_allowed(causal, real, group)
    padded_real = pad_positions(real, group, dim=1)
    m = q.new_empty(B, H, n_groups * group)
    step = max(1, score_budget(q, SCORE_BUDGET) // (B * H * group * (group + S)))
    # M only ranks the queries: no gradient flows through it, and it is computed in the work dtype
    # even under autocast, which would lower the products to 16 bits and rank near-tied queries
    # differently from float32 / float64 (the contract test's bfloat16 case)
    with torch.no_grad(), torch.autocast(device_type=q.device.type, enabled=False):
        for g0 in range(0, n_groups, step):
            g1 = min(n_groups, g0 + step)
            q_step = qg[:, :, g0:g1] * scale
            # the drawn keys of these groups, every head: (B, H, g, S, D)
            keys = torch.stack([k[b].index_select(1, drawn[b, g0:g1].flatten()) for b in range(B)])
            sampled = torch.cat([q_step @ kg[:, :, g0:g1].transpose(-1, -2),
                                 q_step @ keys.view(B, H, g1 - g0, S, D).transpose(-1, -2)], dim=-1)
            valid = torch.cat([local[:, g0:g1], drawn_valid[:, g0:g1, None].expand(-1, -1, group, -1)], dim=3)
            m[:, :, g0 * group:g1 * group] = measurement(sampled.flatten(2, 3), valid.flatten(1, 2),
                                                         padded_real[:, g0 * group:g1 * group])
    active = top_queries(m[..., :T], active_count(T, factor))
    # lazy rows: the mean of the allowed values (uniform weights over them)
    values = v * real[:, None, :, None]
    counts = allowed_counts(causal, real).clamp_min(1)[:, None, :, None]
    if causal:
        out = values.cumsum(dim=2).div_(counts)
    else:
        out = (values.sum(dim=2, keepdim=True) / counts).expand(B, H, T, v.shape[-1]).contiguous()
    outputs = attend_rows(q.gather(2, active[..., None].expand(-1, -1, -1, D)), active, k, v, causal, real)
    return out.scatter_(2, active[..., None].expand(-1, -1, -1, v.shape[-1]), outputs)


@register("informer")
class Informer(SparseAttention):
    """Informer ProbSparse self-attention for (B, H, T, D) q, k, v (Zhou et al. 2021, Eq. 3-4;
    definitions in the module docstring). Computation in float32 or wider (the sparsity
    measurement also under autocast, so that the active queries do not depend on it); the output
    has v's dtype.

    Args:
        factor (float): > 0, the sampling factor c: u = min(T, ceil(c ln T)) active queries,
            S = min(T, ceil(c ceil(ln T))) keys drawn per group of 64 queries (5, as
            Informer2020). A factor with u = T is exact softmax attention.
        seed (int): >= 0, seed of the key sample.
        implementation (str): "fast" (sparse, default) or "reference" (Eq. 3 with the (T, T)
            matrix).

    Raises:
        ValueError: factor not a positive number, seed not an integer >= 0, an unknown
            implementation (constructor); bad shapes or mask, or q and k of different lengths
            (forward).

    ``causal = "leaky"``: with ``causal=True`` every scored pair has j <= i, but which queries are
    active is a top-u choice over all positions, later ones included, so an output can change when
    a later token does; train.py refuses it for causal tasks (``attention.causal_support``).
    """

    causal = "leaky"
    example_params = {"factor": 1.0}
    reference_params = {"implementation": "reference"}
    flop_formula = ("H (2 Tg D (64 + S) + 4 u T D): the measurement per group of 64 queries with S sampled keys, "
                    "u active rows against all keys; implementation='reference': 4 D H T^2")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: the measurement (per group of GROUP queries, the group's own
        block and its S sampled keys) and the u active rows against all keys."""
        if params["implementation"] == "reference":
            return heads * matrix_flops(T, D)
        measurement = 2 * math.ceil(T / GROUP) * GROUP * D * (GROUP + sample_count(T, params["factor"]))
        return heads * (measurement + 4 * active_count(T, params["factor"]) * T * D)

    def __init__(self, factor=5.0, seed=0, implementation="fast"):
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < math.inf:
            raise ValueError(f"factor must be a number > 0 (u = ceil(factor ln T) active queries); "
                             f"got factor={factor!r}")
        check_int("seed", seed, 0, "seed of the key sample")
        super().__init__(implementation, factor=float(factor), seed=seed)

    def compute(self, q, k, v, causal, real):
        return (reference if self.implementation == "reference" else sparse)(q, k, v, causal, real, **self.params)
