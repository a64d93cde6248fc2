"""Decode path of tree / bud-expansion attention: a tree over the cached keys that grows by one leaf
per token, and the bud expansion of each new query over it.

Paper: "High Attention Scores and Where to Find Them" (Menet, Choi, de Viragh, Chettata), the
setting of sections 1-2.4: autoregressive inference, where the query of a new token looks for its
high scores in a tree over the past keys; the tree of sums (section 2.1, Eq. 1), the left child's
alignment by subtraction (Eq. 2), Algorithm 1 (bud expansion, section 2.2), the masses (section
2.3), P buds per round and one tree shared by all heads (section 2.4).

What the decode state holds (``TreeDecodeState``), per batch element: a perfect binary tree with C
leaves (C a power of two, the capacity) whose level h stores, for every node j covering the leaves
[j 2^h, (j+1) 2^h), the sums over its non-empty leaves of the keys, of the values and (feature
samplers) of the feature-mapped keys, one row per head: the tree's structure (which leaves are
filled) is shared by all heads (section 2.4) and its sums are per head, as in the whole-sequence
path (``reference.BudTree``). Level 0 is the cached keys and values themselves, so the tree is the
KV cache plus its C - 1 internal nodes. A node's leaf count is not stored: with n tokens inserted it
is clamp(n - j 2^h, 0, 2^h). Appending a token adds its key, value (and feature key) to the log2(C)
+ 1 nodes on its leaf's path to the root, one ``index_add_`` (O(log T) node updates). When the C
leaves are used up the tree doubles its leaf count: every level is copied into the first half of
the same level of a tree with 2C leaves (the new halves are empty) and a new root, equal to the old
root, is put on top; a doubling copies O(C) numbers, so T appends copy O(T) in all (amortised O(1)
per token). Node indices do not depend on C (node j of level h always covers [j 2^h, (j+1) 2^h)), so
growing changes no bud and no result.

The step (``decode_query``) runs Algorithm 1 for the one new query of every batch element, in one
of two implementations with the same draws: "cpu", the compiled kernel (``cpu_kernel.cpp``'s
``decode_step``, through ``cpu.cpu_decode_query``): the per-query function of the whole-sequence
kernel, reading this state's node tables in place (an incomplete node, the one holding the newest
leaves, is read as it is: its empty leaves are zero), batch elements over torch's intra-op threads,
CPU only, what ``TreeAttention.step`` uses when the module's forward is the CPU kernel's; and
"torch", the PyTorch ops below, on any device (batch elements are rows of a bud table, as in
``vectorized.py``; the Python loop runs over rounds only), the readable one and the tests' second
reference. Both follow the conventions and the counter-based random draws of ``reference.py``: the
initial buds of ``schedule.initial_width``, n_terms = ceil(l^E) (``schedule.num_terms``), P buds
per round drawn without replacement by Gumbel-top-k with the noise of (seed, batch index, query
position, round, bud start) (``samplers.gumbel_noise``), the same masses (``samplers.log_mass``),
the same descent rules and the same output normalizations. The draws depend on the batch index and
the position, not on the sequence length or the other queries, so the step's buds are those of the
whole-sequence path's row t for the same inputs. Cost per step: one inner product per head for
every bud (the initial buds and the right child of every split), n_terms to n_terms + P - 1 of them,
instead of l for exact attention; a log-mass evaluation per new bud and a Gumbel draw per expandable
bud and round. Everything is computed in float64 on the inputs' device. In time, the "torch" step
pays about a millisecond of Python and small-op overhead per round (several milliseconds per step
even at a 1k context); the "cpu" step pays a fixed ~0.1-0.2 ms of Python around the kernel call
(checks, the ``index_add_`` of the new leaf, conversions) plus the kernel's own time, which grows
like the number of buds (docs/tree_attention.md, "Decoding a token at a time", for rough timings).
"""
import math

import torch

from attention.tree.cpu import cpu_decode_query
from attention.tree.samplers import FEATURE_SAMPLERS, gumbel_noise, log_mass, sampling_keys
from attention.tree.schedule import DESCENTS, initial_width

MIN_CAPACITY = 16  # leaves a new tree has at least (as attention.kv_cache.MIN_CAPACITY)
DECODE_IMPLEMENTATIONS = ("torch", "cpu")  # decode_query: PyTorch ops (any device) or the compiled kernel


def _pow2(h):
    """2^h for an int64 tensor h >= 0."""
    return torch.ones_like(h) << h


def _ceil_log2(c):
    """ceil(log2 c) for an int64 tensor 1 <= c < 2^53: the bit length of c - 1 (frexp's exponent of
    an integer held exactly in float64)."""
    return torch.frexp((c - 1).double()).exponent.long()


class TreeDecodeState:
    """The decode state of tree attention (``TreeAttention.prefill`` / ``step``): the keys and values
    seen so far and the tree of their sums (module docstring), in float64 on the inputs' device.

    Args:
        k (torch.Tensor): (B, H, T, D) keys of the prompt, any float dtype; v (B, H, T, Dv) values.
        kf (torch.Tensor | None): (B, H, T, R) feature-mapped keys (feature samplers), else None.
        capacity (int | None): leaves to allocate, rounded up to a power of two and at least T;
            None: 2T rounded up to a power of two, at least ``MIN_CAPACITY``.

    Attributes:
        length (int): tokens inserted so far (the next token's position).
        capacity (int): C, leaves before the next doubling (a power of two).
        K, V, F: float64 (B, 2C - 1, H, D) / (B, 2C - 1, H, Dv) / (B, 2C - 1, H, R) or None: every
            level's node sums, level h at rows [2C - 2 (C >> h), 2C - (C >> h)) (``offset``).
        node_updates (int): nodes written by ``append`` since the state was made (per batch element
            and head), log2(C) + 1 per token; growths (int): doublings so far.

    Raises:
        ValueError: capacity < 1, or k, v, kf whose batch, head or length dimensions differ.

    Source: "High Attention Scores and Where to Find Them", section 2.1 (the tree of sums, Eq. 1)
    and section 2.4 (one tree shared by all heads); the incremental insertion is the setting of
    sections 1-2 (autoregressive inference, a key per new token).
    """

    def __init__(self, k, v, kf=None, capacity=None):
        B, H, T, D = k.shape
        if v.shape[:3] != (B, H, T) or (kf is not None and kf.shape[:3] != (B, H, T)):
            raise ValueError(f"tree decode state: k, v (and kf) must share (B, H, T); got {tuple(k.shape)}, "
                             f"{tuple(v.shape)}" + ("" if kf is None else f", {tuple(kf.shape)}"))
        if capacity is not None and int(capacity) < 1:
            raise ValueError(f"tree decode state: capacity must be an integer >= 1 or None; got {capacity!r}")
        room = max(T, 1, int(capacity)) if capacity is not None else max(2 * T, MIN_CAPACITY)
        C = 1 << (room - 1).bit_length()
        self.capacity, self.length, self.node_updates, self.growths = C, T, 0, 0
        self.K = self._build(k, C)
        self.V = self._build(v, C)
        self.F = None if kf is None else self._build(kf, C)

    @staticmethod
    def _build(x, C):
        """(B, H, T, X) leaves -> float64 (B, 2C - 1, H, X): the levels of Eq. 1, leaves T..C-1 empty."""
        B, H, T, X = x.shape
        level = torch.zeros(B, C, H, X, dtype=torch.float64, device=x.device)
        level[:, :T] = x.double().transpose(1, 2)
        levels = [level]
        while level.shape[1] > 1:
            level = level.view(B, level.shape[1] // 2, 2, H, X).sum(2)
            levels.append(level)
        return torch.cat(levels, dim=1)

    @property
    def levels(self):
        """Number of levels, log2(C) + 1."""
        return self.capacity.bit_length()

    def offset(self, h):
        """First row of level h in ``K`` / ``V`` / ``F`` (int, or an int64 tensor for a tensor h)."""
        C = self.capacity
        if torch.is_tensor(h):
            return 2 * C - 2 * torch.div(torch.full_like(h, C), _pow2(h), rounding_mode="floor")
        return 2 * C - 2 * (C >> h)

    def count(self, h, j):
        """Non-empty leaves below node j of level h (ints): clamp(length - j 2^h, 0, 2^h)."""
        return min(max(self.length - (j << h), 0), 1 << h)

    def append(self, k_t, v_t, kf_t=None):
        """Insert the next token's key k_t (B, H, 1, D), value v_t (B, H, 1, Dv) (and feature key
        kf_t (B, H, 1, R)) at leaf ``length`` and into the log2(C) + 1 nodes above it; doubles the
        tree first when its C leaves are in use."""
        if self.length == self.capacity:
            self._grow()
        t, C = self.length, self.capacity
        path = torch.tensor([2 * C - 2 * (C >> h) + (t >> h) for h in range(self.levels)], dtype=torch.int64,
                            device=self.K.device)                          # rows offset(h) + (t >> h)
        for table, x in ((self.K, k_t), (self.V, v_t), (self.F, kf_t)):
            if table is not None:
                row = x.double()[:, :, 0][:, None]                          # (B, 1, H, X)
                table.index_add_(1, path, row.expand(-1, len(path), -1, -1))
        self.length += 1
        self.node_updates += len(path)

    def _grow(self):
        """Double the leaf count: each level moves to the first half of the same level of a tree with
        2C leaves; the new root is the old root (its right half is empty)."""
        C, levels = self.capacity, self.levels
        self.capacity = 2 * C
        for name in ("K", "V", "F"):
            old = getattr(self, name)
            if old is None:
                continue
            new = old.new_zeros(old.shape[0], 4 * C - 1, *old.shape[2:])
            for h in range(levels):
                src = 2 * C - 2 * (C >> h)
                new[:, self.offset(h):self.offset(h) + (C >> h)] = old[:, src:src + (C >> h)]
            new[:, self.offset(levels)] = old[:, 2 * C - 2]
            setattr(self, name, new)
        self.growths += 1

    def nodes(self, table, h, j):
        """Rows of ``table`` (``K``, ``V`` or ``F``) of the nodes (h, j): int64 tensors (B, m) ->
        float64 (B, m, H, X), row b from batch element b."""
        rows = self.offset(h) + j
        return table[torch.arange(rows.shape[0], device=rows.device)[:, None], rows]


def decode_query(state, q, l, pos, n_terms, P, sampler, normalization, scale, b, seed, qf=None,
                 descent="authors", return_buds=False, implementation="torch"):
    """Algorithm 1 for the query at position ``pos`` of every batch element, over a tree whose first
    l leaves are its history (conventions of ``reference.tree_attention_query``, batched).

    Two implementations, the same draws: "torch" (the PyTorch ops below, any device, the readable
    one: a bud table with a row per batch element and a Python loop over rounds) and "cpu" (the
    compiled kernel, ``cpu.cpu_decode_query``: the whole-sequence kernel's per-query function over
    this state's node tables, in C++, the batch elements over torch's intra-op threads; CPU tensors
    only). Both compute in float64 (the state's dtype) and agree up to rounding.

    Args:
        state (TreeDecodeState): holds exactly the keys / values of positions 0..l-1 (l = state.length).
        q (torch.Tensor): float64 (B, H, D) queries.
        l (int): history length, >= 1.
        pos (int): the query's position (selects the random draws with the batch index, round and bud start).
        n_terms (int): number of terms (the paper's T), 1 <= n_terms <= l.
        P (int): buds expanded per round, >= 1.
        sampler, normalization (str), scale (float), b (float), seed (int): as ``reference.tree_attention_query``.
        qf (torch.Tensor | None): float64 (B, H, R) feature-mapped queries for FEATURE_SAMPLERS.
        descent (str): "authors" or "split" (reference.py).
        return_buds (bool): also put the final buds in ``info["bud_start"]`` (off by default;
            implementation "torch" only).
        implementation (str): "torch" (default) or "cpu" (see above).

    Returns:
        (out, info): out float64 (B, H, Dv); info dict of int64 (B,) tensors "initial" (initial
        buds), "splits" and "terms" (final buds) per batch element; inner products per head =
        initial + splits. With ``return_buds`` also "bud_start": int64 (B, l), the first key
        position of the bud that holds key i (the labels of ``reference_forward``'s record).

    Raises:
        ValueError: l != state.length, n_terms outside [1, l], P < 1, an unknown descent, a
            feature sampler without qf, an unknown implementation, "cpu" with a state not on the
            CPU or with return_buds.
        RuntimeError: no expandable bud left before n_terms buds (cannot happen for n_terms <= l);
            "cpu": the kernel cannot be built (no C++ compiler: ``cpu.load_kernel``).

    Source: "High Attention Scores and Where to Find Them", Algorithm 1 (section 2.2), Eq. 2 (the
    left child's alignment as parent minus right child), the masses of section 2.3 (Eq. 3-7) and
    P buds per round with masses summed over heads (section 2.4).
    """
    if l != state.length:
        raise ValueError(f"decode_query: the tree holds {state.length} keys but the history length is l={l}")
    if not 1 <= n_terms <= l:
        raise ValueError(f"n_terms must satisfy 1 <= n_terms <= l (history length {l}); got n_terms={n_terms}")
    if P < 1:
        raise ValueError(f"P (buds expanded per round) must be >= 1; got P={P}")
    if descent not in DESCENTS:
        raise ValueError(f"descent '{descent}' unknown; allowed: {', '.join(DESCENTS)}")
    use_f = sampler in FEATURE_SAMPLERS
    if use_f and qf is None:
        raise ValueError(f"sampler '{sampler}' needs the feature-mapped query qf")
    if implementation not in DECODE_IMPLEMENTATIONS:
        raise ValueError(f"implementation '{implementation}' unknown; allowed: {', '.join(DECODE_IMPLEMENTATIONS)}")
    if implementation == "cpu":
        if return_buds:
            raise ValueError("decode_query: return_buds needs implementation='torch' (the kernel returns no buds)")
        return cpu_decode_query(state, q, l, pos, n_terms, P, sampler, normalization, scale, b, seed, qf=qf,
                                descent=descent)
    B, H, _ = q.shape
    dev = q.device
    batch = torch.arange(B, device=dev)

    def align(h, j):
        """Alignments (B, m, H) (and feature alignments) of the nodes (h, j), (B, m) each."""
        a = (state.nodes(state.K, h, j) * q[:, None]).sum(-1)
        af = (state.nodes(state.F, h, j) * qf[:, None]).sum(-1) if use_f else None
        return a, af

    # the initial buds: the nodes of width w that intersect [0, l) (schedule.initial_width)
    w = initial_width(l, P)
    h0, n0 = w.bit_length() - 1, -(-l // w)
    M = min(l, max(n_terms, n0) + P - 1)          # buds never exceed l; the last round overshoots by < P
    s = torch.zeros(B, M + 1, dtype=torch.int64, device=dev)   # slot M: write-off slot of masked picks
    c = torch.zeros_like(s)
    lv = torch.zeros_like(s)
    A = torch.zeros(B, M + 1, H, dtype=torch.float64, device=dev)
    Af = torch.zeros_like(A) if use_f else None
    j0 = torch.arange(n0, device=dev).expand(B, n0)
    s[:, :n0] = j0 * w
    c[:, :n0] = torch.clamp(l - j0 * w, max=w)
    lv[:, :n0] = h0
    a, af = align(torch.full_like(j0, h0), j0)
    A[:, :n0] = a
    if use_f:
        Af[:, :n0] = af
    nb = torch.full((B,), n0, dtype=torch.int64, device=dev)
    Pk = min(P, M)
    rank = torch.arange(Pk, device=dev)[None, :]
    rnd = 0
    while True:
        active = nb < n_terms
        if not bool(active.any()):
            break
        sM, cM = s[:, :M], c[:, :M]
        logm = log_mass(sampler, A[:, :M], Af[:, :M] if use_f else None, cM, sM, l, scale, b)
        expandable = cM >= 2
        n_exp = expandable.sum(1)
        if bool((active & (n_exp == 0)).any()):
            raise RuntimeError(f"no expandable bud left before n_terms={n_terms} buds (l={l})")
        keys = sampling_keys(logm, expandable, gumbel_noise(seed, batch[:, None], pos, rnd, sM))
        idx = keys.topk(Pk, dim=1).indices                            # (B, Pk), best first
        valid = (rank < n_exp.clamp(max=P)[:, None]) & active[:, None]
        ps, pc = sM.gather(1, idx), cM.gather(1, idx)
        pc_safe = torch.where(valid, pc, torch.full_like(pc, 2))
        plv = torch.where(valid, lv.gather(1, idx), torch.ones_like(idx))
        if descent == "split":  # descend to the first level whose right child is non-empty
            plv = _ceil_log2(pc_safe)
        half = _pow2(plv - 1)                                          # leaves of the left child
        split = valid & (pc_safe > half)                               # "authors": otherwise only descend
        rs = torch.where(split, ps + half, torch.zeros_like(ps))       # the right child's first leaf
        rc = torch.where(split, pc_safe - half, torch.zeros_like(pc))
        rlv = torch.where(split, plv - 1, torch.zeros_like(plv))
        a_r, af_r = align(rlv, torch.div(rs, _pow2(rlv), rounding_mode="floor"))  # one inner product per head
        a_r = a_r * split[..., None]
        A_p = A[:, :M].gather(1, idx[..., None].expand(-1, -1, H))
        left = torch.where(valid, idx, torch.full_like(idx, M))
        n_new = split.long().cumsum(1)
        new = torch.where(split, nb[:, None] + n_new - 1, torch.full_like(idx, M))
        rows = batch[:, None]
        # a descended bud keeps its sums; a split one becomes its left child (Eq. 2) and the right
        # child is appended; masked picks write into slot M
        c[rows, left] = torch.minimum(pc_safe, half)
        lv[rows, left] = plv - 1
        A[rows, left] = A_p - a_r
        s[rows, new], c[rows, new], lv[rows, new], A[rows, new] = rs, rc, plv - 1, a_r
        if use_f:
            af_r = af_r * split[..., None]
            Af[rows, left] = Af[:, :M].gather(1, idx[..., None].expand(-1, -1, H)) - af_r
            Af[rows, new] = af_r
        c[:, M] = 0
        nb += n_new[:, -1]
        rnd += 1

    # output: every leaf of bud n gets the bud's mean score scale A_n / |n| ("bud_mean"), or the
    # softmax over buds weights the summed values ("paper"); V_n is the node's value sum
    used = c[:, :M] > 0
    cf = c[:, :M].clamp(min=1).double()[..., None]                     # (B, M, 1)
    a = scale * A[:, :M] / cf
    logw = (a + cf.log() if normalization == "bud_mean" else a).masked_fill(~used[..., None], -math.inf)
    # softmax over the buds, written out: torch.softmax over a middle dimension of so small a tensor
    # goes through a parallel loop that costs milliseconds on a busy machine
    u = (logw - logw.amax(dim=1, keepdim=True)).exp()
    u = u / u.sum(dim=1, keepdim=True)
    if normalization == "bud_mean":
        u = u / cf
    lv_used = torch.where(used, lv[:, :M], torch.zeros_like(lv[:, :M]))
    j_used = torch.where(used, torch.div(s[:, :M], _pow2(lv_used), rounding_mode="floor"), torch.zeros_like(lv_used))
    Vn = state.nodes(state.V, lv_used, j_used)                         # (B, M, H, Dv)
    out = torch.einsum("bmh,bmhd->bhd", u, Vn)
    initial = torch.full((B,), n0, dtype=torch.int64, device=dev)
    info = {"initial": initial, "splits": nb - initial, "terms": nb}
    if return_buds:  # the buds tile [0, l): key i belongs to the bud with the largest start <= i
        marks = torch.full((B, l + 1), -1, dtype=torch.int64, device=dev)
        marks[batch[:, None], torch.where(used, s[:, :M], torch.full_like(s[:, :M], l))] = s[:, :M]
        info["bud_start"] = marks[:, :l].cummax(dim=1).values
    return out, info
