"""Re-implementation of the AUTHORS' design of bud-expansion attention, for speed comparisons only.

Design as in the authors' public NumPy code (read, not copied): batch size 1, one query at a time,
a heap-indexed array tree of 2L - 1 nodes updated incrementally leaf-to-root after each token,
masses computed directly (exp, no log-space) plus a tiny epsilon for non-leaf buds, and sampling
without replacement from a binary sum-heap (draw, set the weight to 0, redraw; Vieira 2016).
Like their code, history excludes the current token (query t sees keys 0..t-1), a sampled bud
whose right child is empty becomes its left child and uses up its draw (descent "authors" of
reference.py), and the "paper" output normalization is used. It uses numpy's own random generator,
so its draws differ from ``reference.py`` / ``cpu.py`` / ``vectorized.py``; where no draw matters
(every round expands all expandable buds, e.g. E = 1) it equals the reference with
descent="authors", normalization="paper", causal, exclude_self (tested).
"""
import math

import numpy as np

from attention.tree.schedule import default_P, num_terms

_EPS = 1e-10


class SumHeap:
    """Binary sum-heap over ``cap`` non-negative weights: O(log cap) update and proportional draw."""

    def __init__(self, cap):
        self.cap = 1 << max(0, (cap - 1).bit_length())
        self.s = np.zeros(2 * self.cap)

    def update(self, i, w):
        i += self.cap
        delta = w - self.s[i]
        while i >= 1:
            self.s[i] += delta
            i //= 2

    def sample(self, rng):
        u = rng.random() * self.s[1]
        i = 1
        while i < self.cap:
            left = self.s[2 * i]
            if u < left:
                i = 2 * i
            else:
                u -= left
                i = 2 * i + 1
        return i - self.cap


class NumpyTreeBaseline:
    """One sequence (batch 1): call ``step(q_t, k_t, v_t)`` for t = 0, 1, ... in order.

    Args:
        L (int): block length, power of two. H, D (int): heads, head dim.
        E (float): n_terms = ceil(l^E). P (int | None): buds per round (None: default_P).
        sampler (str): uniform, edh, alignment, positive_alignment, rff, favor_plus,
            favor_plus_relu. For the feature samplers pass feature-mapped inputs to ``step``.
        b (float): EDH base. seed (int): numpy seed.
    """

    def __init__(self, L, H, D, E, P=None, sampler="alignment", b=0.99, R=None, seed=0):
        self.L, self.H, self.D, self.E = L, H, D, E
        self.P = default_P(L, E) if P is None else P
        self.sampler, self.b, self.scale = sampler, b, 1.0 / math.sqrt(D)
        self.feat = sampler in ("positive_alignment", "rff", "favor_plus", "favor_plus_relu")
        self.K = np.zeros((H, 2 * L - 1, D))
        self.V = np.zeros((H, 2 * L - 1, D))
        self.F = np.zeros((H, 2 * L - 1, R)) if self.feat else None
        self.n = np.zeros(2 * L - 1, dtype=np.int64)
        self.lo = np.full(2 * L - 1, -1, dtype=np.int64)   # leftmost / rightmost leaf (EDH)
        self.hi = np.full(2 * L - 1, -1, dtype=np.int64)
        self.l = 0
        self.rng = np.random.default_rng(seed)
        self.inner_products = 0

    def _mass(self, A, Af, idx):
        c = self.n[idx]
        if self.sampler == "uniform":
            m = np.ones(len(idx))
        elif self.sampler == "edh":
            m = self.b ** (self.l - self.hi[idx] - 1) - self.b ** (self.l - self.lo[idx]) + _EPS
        elif self.sampler == "alignment":
            m = np.exp(A * (self.scale / c)).sum(0) + _EPS
        elif self.sampler == "positive_alignment":
            m = np.exp(Af / c).sum(0) + _EPS
        else:
            m = np.maximum(Af, 0).sum(0) / c + _EPS
        m[c <= 1] = 0.0
        return m

    def step(self, q, k, v, qf=None, kf=None, compute=True):
        """Attend with query q (H, D) to the history, then insert k, v (H, D). Returns (H, D)."""
        out = np.zeros((self.H, self.D))
        l = self.l
        if l > 0 and compute:
            n_terms = num_terms(l, self.E)
            lp = 1 << (l - 1).bit_length()
            p0 = min(self.P, lp)
            first = (self.L // lp) * p0 - 1            # first node of the level with p0 nodes over [0, lp)
            idx = np.arange(first, first + p0)
            idx = idx[self.n[idx] > 0]
            cap = n_terms + self.P + len(idx)
            buds = np.zeros(cap, dtype=np.int64)
            A = np.zeros((self.H, cap))
            Af = np.zeros((self.H, cap)) if self.feat else None
            nb = len(idx)
            buds[:nb] = idx
            A[:, :nb] = np.einsum("hd,hnd->hn", q, self.K[:, idx])
            if self.feat:
                Af[:, :nb] = np.einsum("hr,hnr->hn", qf, self.F[:, idx])
            self.inner_products += nb * self.H
            pm = np.zeros(cap)
            pm[:nb] = self._mass(A[:, :nb], Af[:, :nb] if self.feat else None, idx)
            heap = SumHeap(cap)
            for i in range(nb):
                heap.update(i, pm[i])
            while nb < n_terms:
                k_s = min(int(np.count_nonzero(pm[:nb])), self.P)
                picks = []
                for _ in range(k_s):
                    i = heap.sample(self.rng)
                    heap.update(i, 0.0)
                    picks.append(i)
                for i in picks:
                    node = buds[i]
                    if self.n[2 * node + 2] == 0:  # right child empty: the left child replaces it,
                        buds[i] = 2 * node + 1     # its mass goes back, its draw is used up
                        heap.update(i, pm[i])
                        continue
                    right, left = 2 * node + 2, 2 * node + 1
                    a_r = np.einsum("hd,hd->h", q, self.K[:, right])
                    self.inner_products += self.H
                    A[:, nb] = a_r
                    A[:, i] = A[:, i] - a_r
                    if self.feat:
                        af_r = np.einsum("hr,hr->h", qf, self.F[:, right])
                        Af[:, nb] = af_r
                        Af[:, i] = Af[:, i] - af_r
                    buds[i], buds[nb] = left, right
                    two = np.array([i, nb])
                    pm[two] = self._mass(A[:, two], Af[:, two] if self.feat else None, buds[two])
                    heap.update(i, pm[i])
                    heap.update(nb, pm[nb])
                    nb += 1
            sel = buds[:nb]
            a = A[:, :nb] * (self.scale / self.n[sel])
            w = np.exp(a - a.max(1, keepdims=True))
            w /= w.sum(1, keepdims=True)
            out = np.einsum("hn,hnd->hd", w, self.V[:, sel])
        # insert the current token on its leaf-to-root path
        i = self.L - 1 + l
        while True:
            self.K[:, i] += k
            self.V[:, i] += v
            if self.feat:
                self.F[:, i] += kf
            self.n[i] += 1
            if self.lo[i] < 0:
                self.lo[i] = l
            self.hi[i] = l
            if i == 0:
                break
            i = (i - 1) // 2
        self.l += 1
        return out


def numpy_baseline_forward(q, k, v, E, sampler="alignment", P=None, b=0.99, seed=0, qf=None, kf=None,
                           positions=None):
    """Run the baseline over one (1, H, T, D) sequence (numpy or torch arrays, batch 1).

    Args:
        positions (iterable | None): query positions to evaluate (others only insert their token);
            None = all. Used to time a subset and extrapolate.
    Returns:
        (out, inner_products): float64 numpy (H, T, D) (zeros at skipped positions), and the
        number of query-key inner products (per head, summed).
    """
    q, k, v = (np.asarray(x, dtype=np.float64)[0] for x in (q, k, v))
    H, Tlen, D = q.shape
    feat = qf is not None
    if feat:
        qf, kf = (np.asarray(x, dtype=np.float64)[0] for x in (qf, kf))
    L = 1 << max(0, (Tlen - 1).bit_length())
    base = NumpyTreeBaseline(L, H, D, E, P, sampler, b, R=qf.shape[-1] if feat else None, seed=seed)
    todo = set(range(Tlen)) if positions is None else set(positions)
    out = np.zeros((H, Tlen, D))
    for t in range(Tlen):
        out[:, t] = base.step(q[:, t], k[:, t], v[:, t], qf[:, t] if feat else None,
                              kf[:, t] if feat else None, compute=t in todo)
    return out, base.inner_products
