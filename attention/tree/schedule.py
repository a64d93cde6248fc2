"""Schedule of tree / bud-expansion attention shared by its three implementations (reference.py,
vectorized.py, cpu.py + cpu_kernel.cpp) and its decode step (decode.py): how many terms a query
gets, how many buds are expanded per round and where the expansion starts.

Paper: "High Attention Scores and Where to Find Them", section 2 (Algorithm 1) and section 3 (P).
Notation: l = history length of a query (number of keys it may attend to), n_terms = ceil(l^E)
(the paper's T, the number of terms of the approximation), P = buds expanded per round,
L = tree length (a power of two).
"""
import functools
import math

import torch

_EPS = 1e-9  # guards ceil/floor of real powers against float rounding (e.g. 1000^(1/3))

DESCENTS = ("authors", "split")


def num_terms(l, E):
    """Number of terms n_terms = ceil(l^E) for history length l >= 0 (0 for l = 0); never exceeds l."""
    if l <= 0:
        return 0
    return min(l, max(1, math.ceil(l ** E - _EPS)))


def default_P(L, E):
    """Buds expanded per round, P = 2^floor(log2(L^(E/2))) (paper section 3), L = tree length.

    The authors take L = the model's block size (1024 for GPT-2), not the evaluated length."""
    return 2 ** max(0, math.floor(E / 2 * math.log2(L) + _EPS))


def block_length(T):
    """Sequence length T padded to the next power of two (>= 1)."""
    return 1 << max(0, (int(T) - 1).bit_length())


def initial_width(l, P):
    """Leaf width w of the initial buds for history length l >= 1; there are ceil(l / w) <= P.

    w = max(1, 2^ceil(log2 l) / 2^floor(log2 P)): the tree level where at most P nodes cover the
    prefix (P is rounded down to a power of two here, so the initial buds are tree nodes)."""
    lp = 1 << (l - 1).bit_length()       # 2^ceil(log2 l)
    p2 = 1 << (P.bit_length() - 1)       # 2^floor(log2 P)
    return max(1, lp // p2)


@functools.lru_cache(maxsize=64)
def terms_table(T, E):
    """int64 tensor (T + 1,): num_terms(l, E) for every history length l = 0..T (a lookup table
    for the vectorized implementation and the CPU kernel)."""
    return torch.tensor([num_terms(l, E) for l in range(T + 1)], dtype=torch.int64)


@functools.lru_cache(maxsize=64)
def width_table(T, P):
    """int64 tensor (T + 1,): initial_width(l, P) for l = 1..T (entry 0, no history, is 1)."""
    return torch.tensor([1] + [initial_width(l, P) for l in range(1, T + 1)], dtype=torch.int64)
