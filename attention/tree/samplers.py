"""Sampling masses of buds and the shared random draws of tree attention.

Paper: "High Attention Scores and Where to Find Them", section 2.3 (masses) and Algorithm 1.
Everything here works on float64 and in log-space, so exp(scale * A / |n|) cannot overflow.

A bud n covers the consecutive history positions [s, s + c) (c = |n| leaves). Its alignment per
head is A_n = <q, K_n> with K_n the sum of its keys (Eq. 1-2); with a feature map phi its feature
alignment is A~_n = <phi(q), phi(K)_n>. The masses, summed over heads h (section 2.4):

    uniform             1
    edh                 sum_{t=s}^{s+c-1} b^(l-1-t) = b^(l-s-c) (1 - b^c) / (1 - b)        (Eq. 3)
    alignment           sum_h exp(scale * A_n,h / c)
    positive_alignment  sum_h exp(A~_n,h / c)       (phi of Eq. 4 on D^-1/4-scaled q, k, so the
                                                     1/sqrt(D) scale is inside A~)      (Eq. 4)
    rff                 sum_h (A~_n,h)_+ / c                                             (Eq. 5)
    favor_plus          sum_h (A~_n,h)_+ / c        (A~ >= 0 up to rounding)             (Eq. 6)
    favor_plus_relu     sum_h (A~_n,h)_+ / c                                             (Eq. 7)

l is the history length of the query (the key at position l-1 has EDH weight b^0). EDH and uniform
are the same for every head, so they are not multiplied by H (sampling is scale invariant).

Sampling without replacement in proportion to mass = the top-k of log(mass) + Gumbel noise
(Gumbel-top-k trick). Zero-mass rule: a bud with zero mass (RFF's ReLU, underflow) that still has
>= 2 leaves stays expandable but ranks after every positive-mass bud; among themselves such buds
are ordered by their Gumbel noise only (uniformly at random). log-masses are clamped to
>= LOG_MASS_FLOOR (far below float64's exp underflow at -745) so the two tiers never mix.
"""
import math

import torch

SAMPLERS = ("uniform", "edh", "alignment", "positive_alignment", "rff", "favor_plus", "favor_plus_relu")
FEATURE_SAMPLERS = ("positive_alignment", "rff", "favor_plus", "favor_plus_relu")
LOG_MASS_FLOOR = -9000.0
LOG_MASS_CEIL = 9000.0
ZERO_MASS_KEY = -10000.0  # key offset of zero-mass expandable buds (Gumbel noise is in [-3.6, 37])

_MASK64 = (1 << 64) - 1


def _s64(c):
    """Unsigned 64-bit constant as the signed int64 torch stores."""
    return c - (1 << 64) if c >= (1 << 63) else c


_GOLDEN = _s64(0x9E3779B97F4A7C15)
_MUL1 = _s64(0xBF58476D1CE4E5B9)
_MUL2 = _s64(0x94D049BB133111EB)


def _srl(x, k):
    """Logical right shift of int64 tensors (torch's >> is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(x):
    """splitmix64 finaliser on int64 tensors (multiplication wraps modulo 2^64)."""
    x = x + _GOLDEN
    x = (x ^ _srl(x, 30)) * _MUL1
    x = (x ^ _srl(x, 27)) * _MUL2
    return x ^ _srl(x, 31)


def seed_int64(seed):
    """The seed's low 64 bits as the signed int64 that the hash starts from."""
    return _s64(int(seed) & _MASK64)


def layer_seed(seed, layer_idx):
    """The seed every draw of one layer's tree attention is hashed from: splitmix64 of (seed,
    layer_idx), so the layers of a model draw independently (uniform and EDH would otherwise pick
    the same buds in every layer). Returns an int in [0, 2^64). Computed on the CPU whatever the
    default device (a module built under ``torch.device("meta")``, as configurator's parameter
    check builds it, needs the number)."""
    h = _mix(_mix(torch.tensor(seed_int64(seed), dtype=torch.int64, device="cpu")) ^ int(layer_idx))
    return int(h) & _MASK64


def hash_uniform(seed, *fields):
    """Counter-based uniform random numbers in (0, 1): a splitmix64 hash of (seed, *fields).

    Args:
        seed (int): the module's seed.
        *fields: int64 tensors (or ints) broadcastable to each other, e.g. (batch, query position,
            round, bud start). Equal inputs give equal outputs on any device and in any order of
            evaluation, so every implementation sees identical draws.
    Returns:
        float64 tensor of the broadcast shape, values in (0, 1) (53 random bits, never 0 or 1).
    """
    h = _mix(torch.as_tensor(seed_int64(seed), dtype=torch.int64))
    for f in fields:
        h = _mix(h ^ torch.as_tensor(f, dtype=torch.int64))
    return (_srl(h, 11).to(torch.float64) + 0.5) * 2.0 ** -53


def gumbel_noise(seed, batch, query, rnd, start):
    """Standard Gumbel noise -log(-log(U)) for U = hash_uniform(seed, batch, query, rnd, start);
    float64 tensor of the broadcast shape of the integer arguments."""
    return -torch.log(-torch.log(hash_uniform(seed, batch, query, rnd, start)))


def log_mass(sampler, A, Af, count, start, hist, scale, b=0.99):
    """log of the sampling mass of buds (see the module docstring for the formulas).

    Args:
        sampler (str): one of SAMPLERS.
        A (torch.Tensor): float64 (..., H) alignments <q, K_n> (unscaled sums over the bud's keys).
        Af (torch.Tensor | None): float64 (..., H) feature alignments <phi(q), phi(K)_n>; needed by
            FEATURE_SAMPLERS.
        count (torch.Tensor): int64 (...) number of leaves |n| (>= 1 where the result is used).
        start (torch.Tensor): int64 (...) first leaf position s.
        hist (torch.Tensor | int): history length l of the query, broadcastable to (...).
        scale (float): 1/sqrt(D).
        b (float): EDH base in (0, 1).
    Returns:
        float64 (...) log-masses, -inf for zero mass (also for NaN masses, e.g. after float64
        overflow of RFF features), otherwise clamped to [LOG_MASS_FLOOR, LOG_MASS_CEIL].
    Raises:
        ValueError: unknown sampler.
    """
    c = count.clamp(min=1).to(torch.float64)
    if sampler == "uniform":
        out = torch.zeros_like(c)
    elif sampler == "edh":
        logb = math.log(b)
        end = (start + count).to(torch.float64)
        out = (torch.as_tensor(hist, dtype=torch.float64) - end) * logb + torch.log1p(-torch.exp(c * logb)) - math.log1p(-b)
    elif sampler == "alignment":
        out = torch.logsumexp(scale * A / c[..., None], dim=-1)
    elif sampler == "positive_alignment":
        out = torch.logsumexp(Af / c[..., None], dim=-1)
    elif sampler in ("rff", "favor_plus", "favor_plus_relu"):
        out = torch.log(torch.relu(Af).sum(-1) / c)
    else:
        raise ValueError(f"sampler '{sampler}' unknown; allowed: {', '.join(SAMPLERS)}")
    # NaN (e.g. inf - inf after RFF features overflow float64) counts as zero mass; +inf is capped
    out = torch.nan_to_num(out, nan=-math.inf, posinf=LOG_MASS_CEIL)
    return torch.where(torch.isneginf(out), out, out.clamp(min=LOG_MASS_FLOOR, max=LOG_MASS_CEIL))


def sampling_keys(logm, expandable, gumbel):
    """Gumbel-top-k keys: log-mass + noise for positive mass, ZERO_MASS_KEY + noise for zero-mass
    buds, -inf for buds that cannot be expanded (fewer than 2 leaves or unused slots).
    All arguments broadcast; returns float64."""
    base = torch.where(torch.isneginf(logm), torch.full_like(logm, ZERO_MASS_KEY), logm)
    return torch.where(expandable, base + gumbel, torch.full_like(logm, -math.inf))
