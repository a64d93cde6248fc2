"""Vectorised tree / bud-expansion attention: all query positions and batch elements at once, in
PyTorch ops (any device; on the CPU the compiled kernel of cpu.py is faster).

Same algorithm, conventions and random draws as ``reference.py`` (read that docstring first); the
result matches the reference up to float64 rounding.

How it is vectorised:
- Prefix sums Kc[p] = sum_{t<p} k_t (and of values / feature keys) in float64 give the sum of any
  node, i.e. of any range [s, s + c) of leaves, in O(D): Kc[s + c] - Kc[s]. No tree is stored.
- A bud is (start s, count c, tree level h): the node [s, s + 2^h) with c non-empty leaves. Its
  right child is non-empty iff c > 2^(h-1); then it splits at s + 2^(h-1). With descent "authors"
  a sampled bud without a right child only moves to level h - 1; with "split" it first moves to
  level ceil(log2 c), the deepest node with the same non-empty leaves, and is split at once.
- Each query row keeps its buds in a padded table of M slots (unused: c = 0). Every round, for all
  rows together: masses -> Gumbel-top-k keys -> torch.topk(P) -> the first min(P, #expandable)
  picks of active rows (#buds < n_terms) are descended or split; right children are appended at
  the end of the row in the order of the picks.
  The Python loop runs over rounds (and over chunks of query positions to bound memory), never
  over positions or batch elements.
- The output: the buds of a row tile [0, l), so the weighted sum of bud value sums telescopes to
  one value prefix row per bud boundary; it is gathered head-major and contracted by a batched
  matmul.
"""
import math

import torch

from attention.tree.reference import add_stats
from attention.tree.schedule import block_length, default_P, terms_table, width_table
from attention.tree.samplers import FEATURE_SAMPLERS, gumbel_noise, log_mass, sampling_keys

_EPS = 1e-9
_CHUNK_ELEMENTS = 1 << 22  # ~32 MB float64 for the per-round gather of key sums


def _prefix(x):
    """(B, H, T, X) -> float64 (B, H, T + 1, X) exclusive prefix sums along T."""
    x = x.double()
    return torch.cat([torch.zeros_like(x[:, :, :1]), x.cumsum(2)], dim=2)


def _ceil_log2(c):
    """ceil(log2 c) for an int64 tensor c >= 1 (exact for c < 2^52)."""
    return torch.ceil(torch.log2(c.double()) - _EPS).long().clamp(min=0)


def vectorized_forward(q, k, v, causal, exclude_self, E, P, sampler, normalization, b, seed,
                       qf=None, kf=None, stats=None, chunk=None, descent="authors"):
    """Tree attention for (B, H, T, D) inputs without a Python loop over positions.

    Args:
        q, k, v (torch.Tensor): (B, H, T, D), any float dtype (computed in float64).
        causal, exclude_self (bool): history rule (reference.py).
        E (float), P (int | None: default_P), sampler, normalization (str), b (float), seed (int).
        qf, kf (torch.Tensor | None): (B, H, T, R) feature-mapped queries / keys for FEATURE_SAMPLERS.
        stats (dict | None): counters to increment (see TreeAttention.stats).
        chunk (int | None): query positions processed together (default: sized so that the
            per-round gathers and the bud tables stay near 32 MB).
        descent (str): "authors" or "split" (reference.py).
    Returns:
        float64 tensor (B, H, T, D).
    """
    B, H, Tlen, D = q.shape
    dev = q.device
    L = block_length(Tlen)
    P = default_P(L, E) if P is None else P
    scale = 1.0 / math.sqrt(D)
    use_f = sampler in FEATURE_SAMPLERS
    Kc, Vc = _prefix(k), _prefix(v)                                   # (B, H, T+1, D)
    Fc = _prefix(kf) if use_f else None                               # (B, H, T+1, R)
    qd = q.double().permute(0, 2, 1, 3)                               # (B, T, H, D)
    qfd = qf.double().permute(0, 2, 1, 3) if use_f else None
    out = torch.zeros(B, Tlen, H, D, dtype=torch.float64, device=dev)
    if chunk is None:
        # bounded by the per-round gather (2P prefix rows) and the output gather (<= n_terms + P buds)
        terms = min(Tlen, math.ceil(Tlen ** E) + P)
        per_query = B * H * max(2 * P * (D + (qf.shape[-1] if use_f else 0)), 4 * terms)
        chunk = max(1, _CHUNK_ELEMENTS // per_query)
    for t0 in range(0, Tlen, chunk):
        t1 = min(Tlen, t0 + chunk)
        out[:, t0:t1] = _chunk(qd, qfd, Kc, Vc, Fc, t0, t1, causal, exclude_self, E, P, sampler,
                               normalization, b, seed, scale, stats, descent)
    return out.permute(0, 2, 1, 3)


def _chunk(qd, qfd, Kc, Vc, Fc, t0, t1, causal, exclude_self, E, P, sampler, normalization, b, seed,
           scale, stats, descent):
    """Query positions t0..t1-1 of every batch element; returns float64 (B, t1 - t0, H, D)."""
    B, Tlen, H, D = qd.shape
    dev = qd.device  # Kc, Vc, Fc: (B, H, T+1, X) prefix sums
    use_f = Fc is not None
    tq = t1 - t0
    N = B * tq
    bi = torch.arange(B, device=dev).repeat_interleave(tq)            # row -> batch element
    ti = torch.arange(t0, t1, device=dev).repeat(B)                   # row -> query position
    if causal:
        hist = ti if exclude_self else ti + 1
    else:
        hist = torch.full_like(ti, Tlen)
    n_terms = terms_table(Tlen, E).to(dev)[hist]                     # schedule.num_terms per row
    width = width_table(Tlen, P).to(dev)[hist]                        # schedule.initial_width per row
    n0 = torch.where(hist > 0, (hist + width - 1) // width, torch.zeros_like(hist))
    M = int(min(int(hist.max()), int(torch.maximum(n_terms, n0).max()) + P - 1)) if int(hist.max()) > 0 else 1
    M = max(M, 1)
    n0max = int(n0.max())
    rows = torch.arange(N, device=dev)

    # bud table; column M is a write-off slot for masked scatters
    s = torch.zeros(N, M + 1, dtype=torch.long, device=dev)
    c = torch.zeros(N, M + 1, dtype=torch.long, device=dev)
    lv = torch.zeros(N, M + 1, dtype=torch.long, device=dev)         # tree level of each bud
    A = torch.zeros(N, M + 1, H, dtype=torch.float64, device=dev)
    Af = torch.zeros(N, M + 1, H, dtype=torch.float64, device=dev) if use_f else None
    q_rows = qd[bi, ti]                                               # (N, H, D)
    # flat row index into the (B * H * (T+1), X) views of the prefix sums: (b H + h)(T+1) + p;
    # index_select on a flat view is much faster than multi-tensor advanced indexing
    base = bi * (H * (Tlen + 1))
    hoff = (torch.arange(H, device=dev) * (Tlen + 1))[None, :, None]
    Kc_flat = Kc.reshape(-1, Kc.shape[-1])
    Vc_flat = Vc.reshape(-1, Vc.shape[-1])
    Fc_flat = Fc.reshape(-1, Fc.shape[-1]) if use_f else None
    qf_rows = qfd[bi, ti] if use_f else None

    def node_align(r, start, cnt):
        """Alignments of ranges [start, start + cnt) (n, m) of rows r (n,) -> (n, m, H) (and the
        feature ones): <q, Kc[s + c]> - <q, Kc[s]>, one gather of 2m prefix rows."""
        m = start.shape[1]
        pos = torch.cat([start + cnt, start], dim=1)[:, None, :]      # (n, 1, 2m)
        flat = (base[r][:, None, None] + hoff) + pos                  # (n, H, 2m) rows of Kc_flat
        # gather head-major (n, H, 2m, D) and contract with a batched matmul (no product temp)
        G = Kc_flat.index_select(0, flat.reshape(-1)).view(*flat.shape, -1)
        d = torch.matmul(G, q_rows[r][..., None])[..., 0].transpose(1, 2)  # (n, 2m, H)
        a = d[:, :m] - d[:, m:]
        af = None
        if use_f:
            Gf = Fc_flat.index_select(0, flat.reshape(-1)).view(*flat.shape, -1)
            df = torch.matmul(Gf, qf_rows[r][..., None])[..., 0].transpose(1, 2)
            af = df[:, :m] - df[:, m:]
        return a, af

    # initial buds: slots 0..n0-1 of width `width`, the last one clipped at the history end
    if n0max > 0:
        slot = torch.arange(n0max, device=dev)[None, :]
        live = slot < n0[:, None]
        st = torch.where(live, slot * width[:, None], torch.zeros_like(slot))
        ct = torch.where(live, torch.minimum(width[:, None], hist[:, None] - st), torch.zeros_like(slot))
        s[:, :n0max], c[:, :n0max] = st, ct
        lv[:, :n0max] = _ceil_log2(width)[:, None]
        a, af = node_align(rows, st, ct)
        A[:, :n0max] = a * live[..., None]
        if use_f:
            Af[:, :n0max] = af * live[..., None]
    nb = n0.clone()
    Pk = min(P, M)
    rank = torch.arange(Pk, device=dev)[None, :]
    rnd = 0
    while True:
        act = (nb < n_terms).nonzero()[:, 0]                          # rows still below n_terms buds
        if act.numel() == 0:
            break
        r2 = act[:, None]
        sa, ca, Aa = s[act, :M], c[act, :M], A[act, :M]
        Afa = Af[act, :M] if use_f else None
        logm = log_mass(sampler, Aa, Afa, ca, sa, hist[act][:, None], scale, b)
        expandable = ca >= 2
        n_exp = expandable.sum(1)
        if bool((n_exp == 0).any()):
            raise RuntimeError("no expandable bud left before reaching n_terms buds")
        k_r = torch.clamp(n_exp, max=P)
        keys = sampling_keys(logm, expandable, gumbel_noise(seed, bi[r2], ti[r2], rnd, sa))
        idx = keys.topk(Pk, dim=1).indices                            # (n, Pk), best first
        valid = rank < k_r[:, None]
        ps, pc = sa.gather(1, idx), ca.gather(1, idx)
        pc_safe = torch.where(valid, pc, torch.full_like(pc, 2))
        plv = torch.where(valid, lv[act, :M].gather(1, idx), torch.ones_like(idx))
        if descent == "split":  # descend to the first level with a non-empty right child
            plv = _ceil_log2(pc_safe)
        half = 1 << (plv - 1)                                         # leaves of the left child
        splits_now = valid & (pc_safe > half)                         # "authors": else only descend
        rs = torch.where(splits_now, ps + half, torch.zeros_like(ps))
        rc = torch.where(splits_now, pc_safe - half, torch.zeros_like(pc))
        a_r, af_r = node_align(act, rs, rc)                           # one inner product per head
        A_p = Aa.gather(1, idx[..., None].expand(-1, -1, H))
        left_slot = torch.where(valid, idx, torch.full_like(idx, M))
        n_new = splits_now.long().cumsum(1)
        new_slot = torch.where(splits_now, nb[act][:, None] + n_new - 1, torch.full_like(idx, M))
        # a descended bud keeps its sums; a split one's left child replaces it (Eq. 2) and the right
        # child is appended; invalid picks go to the write-off slot M
        c[r2, left_slot] = torch.minimum(pc_safe, half)
        lv[r2, left_slot] = plv - 1
        A[r2, left_slot] = A_p - a_r
        s[r2, new_slot] = rs
        c[r2, new_slot] = rc
        lv[r2, new_slot] = plv - 1
        A[r2, new_slot] = a_r
        if use_f:
            Af[r2, left_slot] = Afa.gather(1, idx[..., None].expand(-1, -1, H)) - af_r
            Af[r2, new_slot] = af_r
        c[:, M] = 0
        nb[act] += n_new[:, -1]
        rnd += 1
    splits = nb - n0

    # output. The buds of a row tile [0, l), so after sorting them by start s_0 = 0 < s_1 < ... the
    # sum over buds of u_m (Vc[s_{m+1}] - Vc[s_m]) (with s_nb = l) telescopes into one value prefix
    # row per bud boundary: sum_j Vc[s_j] (u_{j-1} - u_j), j = 1..nb.
    cM = c[:, :M]
    order = torch.where(cM > 0, s[:, :M], torch.full_like(cM, Tlen + 1)).argsort(dim=1)
    cM, sM, AM = cM.gather(1, order), s[:, :M].gather(1, order), A[rows[:, None], order]
    used = cM > 0
    cf = cM.clamp(min=1).double()[..., None]                          # (N, M, 1)
    a = scale * AM / cf
    logw = a + cf.log() if normalization == "bud_mean" else a
    logw = logw.masked_fill(~used[..., None], -math.inf)
    u = torch.softmax(logw, dim=1).nan_to_num(0.0)                    # rows without history -> 0
    if normalization == "bud_mean":
        u = u / cf                                                    # values V_n / |n|
    coef = u - torch.cat([u[:, 1:], torch.zeros_like(u[:, :1])], dim=1)   # u_m - u_{m+1}, at s_{m+1}
    ends = torch.where(used, sM + cM, torch.zeros_like(sM))           # s_{m+1} (= l for the last bud)
    coef_h = coef.transpose(1, 2)[:, :, None, :]                      # (N, H, 1, M)
    res = torch.empty(N, H, D, dtype=torch.float64, device=dev)
    step = max(1, _CHUNK_ELEMENTS // (H * M * D))                     # rows per output gather
    for r0 in range(0, N, step):
        r1 = min(N, r0 + step)
        flat = (base[r0:r1, None, None] + hoff) + ends[r0:r1, None, :]
        G = Vc_flat.index_select(0, flat.reshape(-1)).view(*flat.shape, D)  # (rows, H, M, D)
        res[r0:r1] = torch.matmul(coef_h[r0:r1], G)[:, :, 0]
    res = res.view(B, tq, H, D)

    if stats is not None:
        add_stats(stats, H, N, int((n0 + splits).sum()), int(hist.sum()), int(nb.sum()), use_f)
    return res
