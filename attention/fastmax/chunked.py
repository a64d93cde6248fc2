"""Chunked PyTorch backend of Fastmax: ``forward`` and ``backward`` on (N = B*H, T, X) tensors.

Paper: "FAST: Factorizable Attention for Speeding up Transformers", section 2.4 (Eq. 26-35) and
section 2.5 (gradients that recompute the states). The kernel w_ij, the numerator keys kl, ka, kb,
the factorized sums x1..x3, y1..y3 and the contract of both functions are in the docstring of
``function.py``, which calls this module (``FastmaxFunction``); this module imports nothing of
the package.

One path for every case. The denominator is the numerator of one more value column, rho (1 for a
real key, 0 for a padded one): sum_j w_ij [v_j, rho_j] = [numerator_i, denominator_i], because k
and v are zero at padded keys. Every product is therefore taken with the value columns
va = [v, rho], and its gradient with ga = [g, -delta]. The keys of those columns are a list of
*parts* (``_parts``): without dropout one part, k for all Dv + 1 columns, so each product gives
numerator and denominator at once; with dropout two parts, the numerator keys (kl, ka, kb) for the
columns of v and k for the column rho (the denominator is never dropped).

Non-causal: the sums over the whole sequence are shared by all queries. Causal: the sequence is
cut into chunks of C positions; a query sees the keys of earlier chunks through running states
(exclusive prefix sums of the per-chunk sums, Eq. 34-35, kept only at chunk boundaries) and the
keys of its own chunk through explicit C x C weights with a causal mask. Chunks are processed in
groups (vectorized inside a group, sequential across groups) so that the per-chunk states of a
group stay within STATE_BUDGET elements; without dropout and for p = 1 the forward pass uses
blocks of CACHE_BUDGET elements that go from the inputs to the finished output, so that the
intermediates stay in the CPU cache.

Symmetric quadratic features (p = 2 without dropout): both quadratic factors are one tensor, and
(q . k)^2 = (q (x) q) . (k (x) k) with x (x) x symmetric, so the states and features keep only the
D (D + 1) / 2 pairs m <= l (``_pairs``: unweighted on the side that is summed into a state, the
off-diagonal pairs times 2 on the side that meets it). This halves the dominant products
(features (C, D^2) @ states (D^2, Dv + 1)), the states and their prefix sums; the gradients
through a packed state use ``_pair_matvec``. Dropout's distinct ka, kb keep the full D^2 features
on both sides.

Memory: transient states of O(D^p (Dv + 1)) per chunk of a group; nothing per position beyond
the O(T D) inputs and outputs. Accumulation in the inputs' dtype (float32 or wider: the caller
casts).
"""
import functools

import torch

STATE_BUDGET = 1 << 23  # elements per group of chunks for features and states (32 MB in fp32)
CACHE_BUDGET = 1 << 20  # elements per block of the forward pass without dropout (4 MB in fp32: in L2 / L3)
# On a GPU both budgets are this one (512 MB of float32 transients): the CPU's budgets cut a long
# sequence into hundreds of small groups, each a handful of kernel launches, and a GPU then waits on
# the launches (the first H100 run, 2026-11-28: causal p = 1 at T = 65,536 took 0.23 s in about
# 340 groups of 3 chunks); with this budget a few groups cover it.
CUDA_BUDGET = 1 << 27


def _budget(x, cpu_budget):
    """Elements per group or block for tensors like ``x``: CUDA_BUDGET on a GPU, else ``cpu_budget``."""
    return CUDA_BUDGET if x.is_cuda else cpu_budget


def forward(q, k, v, kl, ka, kb, rho, has_key, causal, coeffs, chunk, q_scale=None, k_scale=None):
    """Output and denominator of Fastmax (paper Eq. 26-27 non-causal, Eq. 32-33 causal).

    Args:
        q, k: (N, T, D) normalized queries and keys (float32 or float64), k zero at padded keys.
        v: (N, T, Dv), zero at padded keys.
        kl, ka, kb: numerator keys like k (dropout, ``dropout.numerator_keys``) or None (= k).
        rho: (N, T), 1 for a real key and 0 for a padded one, in q's dtype.
        has_key: (N, T) bool, whether a query has an allowed key (``function.row_counts`` > 0).
        causal: bool. coeffs: (c0, c1, c2). chunk: positions per chunk of the causal path.
        q_scale, k_scale: optional (N, T) factors applied block by block (q * q_scale, k * k_scale;
            max_norm without materialising the scaled copies); only without numerator keys.

    Returns:
        out (N, T, Dv) = numerator / denominator, zero on rows without an allowed key or with a
        zero denominator; den (N, T), the denominator.
    """
    c0, c1, c2 = coeffs
    parts = _parts(k, kl, ka, kb, Dv=v.shape[-1])
    packed = len(parts) == 1  # one key tensor: symmetric quadratic features (``_pairs``)
    quad, N, T, D, Dv, feature = _sizes(q, v, coeffs, packed)
    # p = 1 without dropout: blocks that stay in the CPU cache; p = 2's D^2 features of a chunk do
    # not fit in it anyway (and dropout's extra tensors), so fewer, larger blocks
    budget = _budget(q, STATE_BUDGET if quad or len(parts) > 1 else CACHE_BUDGET)
    if not causal:
        out, den = q.new_empty(N, T, Dv), q.new_empty(N, T)
        rows = max(1, budget // max(1, N * (2 * feature + 2 * (Dv + 1))))
        slices = [(t0, min(T, t0 + rows)) for t0 in range(0, T, rows)]
        x1 = torch.cat([v.sum(1), rho.sum(1, keepdim=True)], dim=-1).unsqueeze(1)  # (N, 1, Dv + 1)
        x2 = q.new_zeros(N, D, Dv + 1)  # sum_j kl_j (x) [v_j, rho_j] (k for the rho column)
        x3 = q.new_zeros(N, feature, Dv + 1) if quad else None  # sum_j (ka_j (x) kb_j) (x) [v_j, rho_j], packed or not
        for t0, t1 in slices:
            vt = torch.cat([v[:, t0:t1], rho[:, t0:t1, None]], -1)
            for (kl_t, ka_t, kb_t), cols in _map_keys(parts, lambda t: _scaled(t, k_scale, t0, t1)):
                x2[..., cols].baddbmm_(kl_t.transpose(1, 2), vt[..., cols])
                if quad:
                    x3[..., cols].baddbmm_(_key_features(ka_t, kb_t, packed).transpose(1, 2), vt[..., cols])
        for t0, t1 in slices:
            qt = _scaled(q, q_scale, t0, t1)
            n = torch.baddbmm(x1, qt, x2, beta=c0, alpha=c1)
            if quad:
                n.baddbmm_(_query_features(qt, packed), x3, alpha=c2)
            _finish_block(n, has_key[:, t0:t1], out[:, t0:t1], den[:, t0:t1])
        return out, den

    C = int(chunk)
    n_chunks = max(1, -(-T // C))
    q, v, rho, has_key = (_chunked(t, n_chunks, C) for t in (q, v, rho, has_key))
    q_scale, k_scale = (None if t is None else _chunked(t, n_chunks, C) for t in (q_scale, k_scale))
    parts = _map_keys(parts, lambda t: _chunked(t, n_chunks, C))
    out, den = q.new_empty(N, n_chunks, C, Dv), q.new_empty(N, n_chunks, C)
    per_chunk = N * (3 * C * feature + 2 * feature * (Dv + 1) + 2 * C * C + 3 * C * (Dv + 1))
    group = max(1, min(n_chunks, budget // max(1, per_chunk)))
    future = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)
    carry = None  # sums over the keys of all earlier groups: x1 (N, Dv+1), x2 (N, D, Dv+1), x3
    for g0 in range(0, n_chunks, group):
        g1 = min(n_chunks, g0 + group)
        qg = _scaled(q, q_scale, g0, g1)
        parts_g = _map_keys(parts, lambda t: _scaled(t, k_scale, g0, g1))  # scales only without numerator keys
        vg = torch.cat([v[:, g0:g1], rho[:, g0:g1, :, None]], dim=-1)  # (N, G, C, Dv + 1)
        before, carry = _exclusive(_position_sums(parts_g, vg, quad, packed), carry)
        n = (qg @ before[1]).mul_(c1).add_(before[0].unsqueeze(-2), alpha=c0)  # earlier chunks
        if quad:
            n.add_(_query_features(qg, packed) @ before[2], alpha=c2)
        for keys, cols in parts_g:  # own chunk: explicit C x C weights, causal mask
            n[..., cols] += _weights(qg, keys, coeffs)[0].masked_fill_(future, 0.0) @ vg[..., cols]
        _finish_block(n, has_key[:, g0:g1], out[:, g0:g1], den[:, g0:g1])
    return _unchunked(out, T), _unchunked(den, T)


def backward(g, delta, q, k, v, kl, ka, kb, rho, causal, coeffs, chunk):
    """Gradients of ``forward`` from g = dL/do / den (N, T, Dv) and delta = (dL/do . o) / den (N, T)
    (``function.output_gradients``), paper section 2.5.

    With ga_i = [g_i, -delta_i] (the upstream gradients of [numerator_i, denominator_i]) and
    P_ij = ga_i . va_j over allowed pairs, without dropout:
        dq_i = sum_j w'(s_ij) P_ij k_j,  dk_j = sum_i w'(s_ij) P_ij q_i,  dva_j = sum_i w_ij ga_i,
    factorized over the key states (queries) and the query states (keys): the states are
    recomputed here, per chunk, instead of being stored by the forward pass. With dropout the
    numerator's columns use kl, ka, kb in place of k (``_grads_through_sums``, ``_score_grads``).
    Arguments as ``forward`` (q_scale / k_scale already applied by the caller).

    Returns:
        (dq, dk, dv, dkl, dka, dkb): like q, k, v and the numerator keys; dkl, dka, dkb are None
        where the key was None (their gradient is part of dk).
    """
    parts = _parts(k, kl, ka, kb, Dv=v.shape[-1])
    shared = len(parts) == 1  # the key states are symmetric in their two quadratic factors
    packed = shared  # then both sides' quadratic states are packed (``_pairs``); dropout: full D^2
    quad, N, T, D, Dv, feature = _sizes(q, v, coeffs, packed)
    # per part: the gradient names of its three key slots (None = k) and whether it has v's columns
    if shared:
        slots = [(("k",) * 3, True)]
    else:
        names = tuple("k" if t is None else name for name, t in (("kl", kl), ("ka", ka), ("kb", kb)))
        slots = [(names, True), (("k",) * 3, False)]
    va = torch.cat([v, rho.unsqueeze(-1)], dim=-1)
    ga = torch.cat([g, -delta.unsqueeze(-1)], dim=-1)
    if not causal:
        rows = max(1, _budget(q, STATE_BUDGET) // max(1, 3 * N * feature))
        slices = [(t0, min(T, t0 + rows)) for t0 in range(0, T, rows)]
        key_sums = query_sums = None
        for t0, t1 in slices:
            ks = _position_sums(_map_keys(parts, lambda t: t[:, t0:t1]), va[:, t0:t1], quad, packed)
            qs = _position_sums(_query_part(q[:, t0:t1]), ga[:, t0:t1], quad, packed)
            key_sums = ks if key_sums is None else [a + b for a, b in zip(key_sums, ks)]
            query_sums = qs if query_sums is None else [a + b for a, b in zip(query_sums, qs)]
        grads = _Gradients(q, va, slots, packed)
        for t0, t1 in slices:
            index = (slice(None), slice(t0, t1))
            grads.add("q", index, _grads_through_sums((q[:, t0:t1],) * 3, ga[:, t0:t1], key_sums, coeffs, shared,
                                                      packed=packed)[0])
            grads.add_key_side(index, _map_keys(parts, lambda t: t[:, t0:t1]), va[:, t0:t1], query_sums, coeffs)
        return grads.result(lambda t: t)

    C = int(chunk)
    n_chunks = max(1, -(-T // C))
    # padded positions: k = va = 0 and ga = 0; their gradient rows are cut at the end
    q, va, ga = (_chunked(t, n_chunks, C) for t in (q, va, ga))
    parts = _map_keys(parts, lambda t: _chunked(t, n_chunks, C))
    per_chunk = N * (6 * C * feature + 3 * feature * (Dv + 1) + 4 * C * C + 2 * C * (Dv + 1))
    group = max(1, min(n_chunks, _budget(q, STATE_BUDGET) // max(1, per_chunk)))
    groups = [(g0, min(n_chunks, g0 + group)) for g0 in range(0, n_chunks, group)]
    future = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)
    grads = _Gradients(q, va, slots, packed)

    carry = None  # queries against the keys of earlier chunks, and the chunk's own keys
    for g0, g1 in groups:
        index = (slice(None), slice(g0, g1))
        qg, vg, gg = q[index], va[index], ga[index]
        parts_g = _map_keys(parts, lambda t: t[index])
        before, carry = _exclusive(_position_sums(parts_g, vg, quad, packed), carry)
        grads.add("q", index, _grads_through_sums((qg,) * 3, gg, before, coeffs, shared, packed=packed)[0])
        for (keys, cols), (names, values) in zip(parts_g, slots):
            w, s, sa, sb = _weights(qg, keys, coeffs)
            p = (gg[..., cols] @ vg[..., cols].transpose(-1, -2)).masked_fill_(future, 0.0)  # P_ij
            for ds, key, name in zip(_score_grads(p, keys, s, sa, sb, coeffs), keys, names):
                if ds is not None:
                    grads.add("q", index, ds @ key)
                    grads.add(name, index, ds.transpose(-1, -2) @ qg)
            if values:  # dva_j = sum_i w_ij ga_i over the chunk's own queries i >= j
                w = w.masked_fill_(future, 0.0).transpose(-1, -2)
                grads.add("va", index + (Ellipsis, cols), w @ gg[..., cols])
    carry = None  # keys against the queries of later chunks
    for g0, g1 in reversed(groups):
        index = (slice(None), slice(g0, g1))
        after, carry = _exclusive(_position_sums(_query_part(q[index]), ga[index], quad, packed), carry,
                                  reverse=True)
        grads.add_key_side(index, _map_keys(parts, lambda t: t[index]), va[index], after, coeffs)
    return grads.result(lambda t: _unchunked(t, T))


def _sizes(q, v, coeffs, packed):
    """(quad, N, T, D, Dv, feature): whether p = 2 (c2 != 0), the sizes of q (N, T, D) and v's Dv,
    and the width of the key features: for p = 2 D (D + 1) / 2 when ``packed`` (``_pairs``), else
    D^2; D for p = 1."""
    quad = coeffs[2] != 0.0
    N, T, D = q.shape
    return quad, N, T, D, v.shape[-1], (D * (D + 1) // 2 if packed else D * D) if quad else D


def _parts(k, kl, ka, kb, Dv):
    """The keys of the value columns [v, rho]: a list of ((linear, quadratic a, quadratic b) keys,
    column slice). Without numerator keys one part, k for all columns; otherwise the columns of v
    use kl, ka, kb (None = k) and the column rho uses k."""
    if kl is None and ka is None and kb is None:
        return [((k, k, k), slice(None))]
    return [(tuple(k if t is None else t for t in (kl, ka, kb)), slice(0, Dv)), ((k, k, k), slice(Dv, Dv + 1))]


def _query_part(q):
    """Queries as the single part of the query-side sums (their quadratic features are q (x) q)."""
    return [((q, q, q), slice(None))]


def _map_keys(parts, f):
    """``parts`` with f applied once to every distinct key tensor (k used thrice stays one tensor)."""
    done = {}

    def once(t):
        if id(t) not in done:
            done[id(t)] = f(t)
        return done[id(t)]
    return [(tuple(once(t) for t in keys), cols) for keys, cols in parts]


def _outer(a, b):
    """(..., D), (..., D) -> (..., D*D): the quadratic features a_m b_l, flattened row-major."""
    return (a.unsqueeze(-1) * b.unsqueeze(-2)).flatten(-2)


@functools.lru_cache(maxsize=None)
def _pair_index(D, device):
    """The order of the D (D + 1) / 2 pairs m <= l of the packed features: diagonal by diagonal,
    d = l - m = 0, 1, ..., D - 1, and m increasing within a diagonal (so that every diagonal is one
    contiguous slice, ``_pairs`` and ``_pair_matvec``). Returns (first, second, full): first[f] = m
    and second[f] = l of pair f, and full (D*D,) the pair of every entry (r, c) of a D x D matrix,
    that of (min(r, c), max(r, c)). For ``_unpack`` and the tests; the fast path uses slices."""
    first = torch.cat([torch.arange(D - d, device=device) for d in range(D)])
    second = torch.cat([torch.arange(d, D, device=device) for d in range(D)])
    full = torch.empty(D, D, dtype=torch.long, device=device)
    pair = torch.arange(first.numel(), device=device)
    full[first, second] = pair
    full[second, first] = pair
    return first, second, full.flatten()


def _pairs(x, weighted=False):
    """(..., D) -> (..., D (D + 1) / 2): the symmetric quadratic features x_m x_l for m <= l
    (``_pair_index`` order: the main diagonal first), times 2 for m < l when ``weighted``, so that

        _pairs(q, weighted=True) . _pairs(k) = sum_{m,l} q_m q_l k_m k_l = (q . k)^2,

    the inner product of the full features q (x) q and k (x) k (``_outer``) with about half of
    their D^2 entries: x (x) x is symmetric, its entries (m, l) and (l, m) are equal. The states
    of the packed path are sums of unweighted pairs; the side that meets a state is weighted.
    One product per diagonal (D slices) rather than a gather, which is slow along the last dim."""
    D = x.shape[-1]
    out = x.new_empty(*x.shape[:-1], D * (D + 1) // 2)
    offset = 0
    for d in range(D):
        torch.mul(x[..., :D - d], x[..., d:], out=out[..., offset:offset + D - d])
        offset += D - d
    if weighted:
        out[..., D:].mul_(2.0)  # the pairs off the main diagonal stand for (m, l) and (l, m)
    return out


def _pair_matvec(m, x):
    """M x for the symmetric M (..., D, D) given by its unweighted pairs m (..., D (D + 1) / 2)
    (``_pairs`` order) and x (..., D): sum_l M_rl x_l, diagonal by diagonal, without building M."""
    D = x.shape[-1]
    out = m[..., :D] * x  # the main diagonal
    offset = D
    for d in range(1, D):
        diagonal = m[..., offset:offset + D - d]  # M_{a, a+d} = M_{a+d, a}
        out[..., :D - d].addcmul_(diagonal, x[..., d:])
        out[..., d:].addcmul_(diagonal, x[..., :D - d])
        offset += D - d
    return out


def _unpack(t, D):
    """(..., D (D + 1) / 2) unweighted pair values (``_pairs`` order) -> (..., D, D) symmetric."""
    return t.index_select(-1, _pair_index(D, t.device)[2]).unflatten(-1, (D, D))


def _key_features(a, b, packed):
    """The quadratic features of the key side, (..., D (D + 1) / 2) unweighted pairs of a when
    ``packed`` (a is b), else a (x) b (..., D*D)."""
    return _pairs(a) if packed else _outer(a, b)


def _query_features(q, packed):
    """The quadratic features that meet a state of key features: weighted pairs (``_pairs``)
    when ``packed``, else q (x) q."""
    return _pairs(q, weighted=True) if packed else _outer(q, q)


def _chunked(t, n_chunks, C):
    """(N, T, X) -> (N, n_chunks, C, X) or (N, T) -> (N, n_chunks, C), zero-padded at the end
    (padded positions have rho = k = v = 0: they add nothing; their rows are cut by ``_unchunked``)."""
    pad = n_chunks * C - t.shape[1]
    if pad:
        t = torch.nn.functional.pad(t, (0, 0, 0, pad) if t.dim() == 3 else (0, pad))
    return t.reshape(t.shape[0], n_chunks, C, *t.shape[2:])


def _unchunked(t, T):
    return t.reshape(t.shape[0], t.shape[1] * t.shape[2], *t.shape[3:])[:, :T]


def _scaled(x, scale, i0, i1):
    """x[:, i0:i1] times scale[:, i0:i1] broadcast over the last dim (a view when scale is None)."""
    return x[:, i0:i1] if scale is None else x[:, i0:i1] * scale[:, i0:i1].unsqueeze(-1)


def _finish_block(n, has_key, out, den):
    """Split [numerator, denominator] n (..., Dv + 1) into the views out (..., Dv) = numerator /
    denominator (zero on rows without an allowed key or with a zero denominator) and den (...)."""
    den.copy_(n[..., -1])
    scale = torch.where(has_key & (den != 0), den.reciprocal(), 0.0)
    torch.mul(n[..., :-1], scale.unsqueeze(-1), out=out)


def _exclusive(sums, carry, reverse=False):
    """State before (after, when reverse) each chunk of a group (dim 1): carry plus the sums of
    the group's earlier (later) chunks; and the new carry (carry plus all the group's sums).

    Args:
        sums: list of tensors (N, G, ...), the per-chunk sums of a group of G chunks.
        carry: list like ``sums`` without dim 1 (the state entering the group), or None (zero).
        reverse: states after each chunk (sums of later chunks), walking the group backwards.

    Returns:
        (states, new_carry): lists like ``sums`` and like ``carry``.

    Two ways to the same states, chosen by device (``_exclusive_for``): on the CPU a running sum
    (``_exclusive_running``), on CUDA a scan (``_exclusive_scan``): the running sum's one add per
    chunk is one kernel launch per chunk on a GPU, thousands at T = 65,536, and the GPU then waits
    on the launches; the scan is a few launches per tensor. Both are exactly causal: a state is
    built from the carry and the sums of the chunks strictly before it, never from an inclusive
    sum minus the chunk's own term, so no rounding of its own or a later chunk's sums reaches it."""
    return _exclusive_for(sums[0].device)(sums, carry, reverse)


def _exclusive_for(device):
    """``_exclusive_scan`` for tensors on CUDA (few launches), else ``_exclusive_running`` (the
    tests force the scan on CPU tensors by replacing this function)."""
    return _exclusive_scan if device.type == "cuda" else _exclusive_running


def _exclusive_running(sums, carry, reverse=False):
    """``_exclusive`` as a running sum, chunk after chunk (each state is the previous one plus that
    chunk's sums), so that no rounding of a chunk's own terms reaches the other side (exact
    causality); one pass over the states, where torch.cumsum along dim 1 plus the shift and the
    carry took several (and cumsum over a middle dim is slow on CPU)."""
    chunks = sums[0].shape[1]
    order = range(chunks - 1, -1, -1) if reverse else range(chunks)
    states, new_carry = [], []
    for i, x in enumerate(sums):
        state = torch.empty_like(x)
        previous = None
        for c in order:
            if previous is None:
                state[:, c] = 0.0 if carry is None else carry[i]
            else:
                torch.add(state[:, previous], x[:, previous], out=state[:, c])
            previous = c
        states.append(state)
        new_carry.append(state[:, previous] + x[:, previous])
    return states, new_carry


def _exclusive_scan(sums, carry, reverse=False):
    """``_exclusive`` as one inclusive cumsum along dim 1 per tensor (the GPU path: a few launches
    instead of one per chunk). The scanned sequence is shifted by one chunk, [carry, x_0, ...,
    x_{G-2}], so its entry c is carry + x_0 + ... + x_{c-1}: the state before chunk c, made of the
    carry and the earlier chunks' sums only (an inclusive scan's entry c depends on entries 0..c
    alone, whatever order it adds them in). Reverse: the same on the chunks flipped, then flipped
    back; never total minus a prefix, which would put the earlier chunks' rounding into the later
    states. The new carry is the last state plus the last chunk's sums."""
    states, new_carry = [], []
    for i, x in enumerate(sums):
        if reverse:
            x = x.flip(1)
        start = x.new_zeros(x[:, :1].shape) if carry is None else carry[i].unsqueeze(1).to(x.dtype)
        state = torch.cat([start, x[:, :-1]], dim=1).cumsum_(1)
        new_carry.append(state[:, -1] + x[:, -1])
        states.append(state.flip(1) if reverse else state)
    return states, new_carry


def _position_sums(parts, y, quad, packed=False):
    """Sums over positions (dim -2) of y, kl (x) y and, for p = 2, (ka (x) kb) (x) y, each part's
    keys on its columns of y: [(.., Y), (.., D, Y), (.., D*D, Y)]; ``packed`` (one part whose keys
    are one tensor): the last one is over the unweighted pairs (``_pairs``), (.., D (D + 1) / 2, Y).
    With the key parts and y = va these are the key states of Eq. 34-35; with ``_query_part(q)``
    and y = ga the query states of the key gradients."""
    sums = [y.sum(-2)]
    for order in ((1, 2) if quad else (1,)):
        blocks = [keys[0].transpose(-1, -2) @ y[..., cols] if order == 1
                  else _quadratic_sum(*keys[1:], y[..., cols], packed) for keys, cols in parts]
        sums.append(blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=-1))
    return sums


def _quadratic_sum(a, b, y, packed=False):
    """sum over positions (dim -2) of (a (x) b) (x) y: (.., D*D, Y); ``packed`` (a is b): of
    _pairs(a) (x) y, (.., D (D + 1) / 2, Y)."""
    if packed:  # y^T @ features, transposed back (a view): faster on CPU than features^T @ y for Y = Dv + 1
        return (y.transpose(-1, -2) @ _pairs(a)).transpose(-1, -2)
    if y.shape[-1] == 1:  # the rho column alone (dropout): (a y)^T b, no (L, D*D) features
        return ((a * y).transpose(-1, -2) @ b).flatten(-2).unsqueeze(-1)
    return _outer(a, b).transpose(-1, -2) @ y


def _weights(q, keys, coeffs):
    """w_ij = c0 + c1 s_ij + c2 sa_ij sb_ij (.., C, C) with s, sa, sb = q_i . (kl_j, ka_j, kb_j);
    returns (w, s, sa, sb). One key tensor: Horner's form c0 + s (c1 + c2 s)."""
    c0, c1, c2 = coeffs
    kl, ka, kb = keys
    s = q @ kl.transpose(-1, -2)
    if c2 == 0.0:
        return s.mul(c1).add_(c0), s, None, None
    if kl is ka and kl is kb:
        return s.mul(c2).add_(c1).mul_(s).add_(c0), s, s, s
    sa = s if ka is kl else q @ ka.transpose(-1, -2)
    sb = sa if kb is ka else q @ kb.transpose(-1, -2)
    return (sa * sb).mul_(c2).add_(s, alpha=c1).add_(c0), s, sa, sb


def _score_grads(p, keys, s, sa, sb, coeffs):
    """dL/ds, dL/dsa, dL/dsb (.., C, C) of the weights of ``_weights`` for dL/dw = p (consumed);
    one key tensor: w'(s) p in the first slot and None in the others."""
    _, c1, c2 = coeffs
    kl, ka, kb = keys
    if c2 == 0.0:
        return p.mul_(c1), None, None
    if kl is ka and kl is kb:
        return p.mul_(s.mul(2 * c2).add_(c1)), None, None
    return p * c1, (p * sb).mul_(c2), p.mul_(sa).mul_(c2)


def _grads_through_sums(x, y, sums, coeffs, symmetric, with_values=False, packed=False):
    """Gradients of positions (x_i, y_i) whose outputs are n_i = sum_j w_ij y'_j with
    w_ij = c0 + c1 xl_i.x'_j + c2 (xa_i.x'a_j)(xb_i.x'b_j), from the sums of the other side
    (``_position_sums``), for the upstream gradient y_i of n_i (y and y' swap roles for keys).

    x = (xl, xa, xb) (.., L, D); y (.., L, Y). ``symmetric``: the other side's quadratic sums are
    symmetric in their two factors (one key tensor), so that one tensor in all three slots gets
    2 c2 m x. Returns (dxl, dxa, dxb, dy): dxa, dxb None when the three slots are one tensor
    (their gradient is in dxl); dy = sum_j w_ij y'_j (the values' gradient) with ``with_values``.
    ``packed``: the quadratic sums are over unweighted pairs (``_position_sums``), which needs one
    tensor in all three slots on both sides; m_i = sum_j x'_j (x) x'_j (y_i . y'_j) is then unpacked
    from its D (D + 1) / 2 distinct entries, and d/dx_i of c2 (x_i . x'_j)^2 (y_i . y'_j) summed
    over j is 2 c2 m_i x_i.
    """
    c0, c1, c2 = coeffs
    xl, xa, xb = x
    D = xl.shape[-1]
    dl = (y @ sums[1].transpose(-1, -2)).mul_(c1)
    dy = (xl @ sums[1]).mul_(c1).add_(sums[0].unsqueeze(-2), alpha=c0) if with_values else None
    da = db = None
    if len(sums) == 3 and packed:
        m = y @ sums[2].transpose(-1, -2)  # (.., L, D (D + 1) / 2): pairs of a symmetric (D, D) per position
        dl.add_(_pair_matvec(m, xl), alpha=2 * c2)
        if with_values:
            dy.add_(_pairs(xl, weighted=True) @ sums[2], alpha=c2)
    elif len(sums) == 3:
        if y.shape[-1] == 1:  # the rho column alone (dropout): m_i = y_i S, no (L, D, D) tensor
            S = sums[2].squeeze(-1).unflatten(-1, (D, D))
            mb, am = (xb @ S.transpose(-1, -2)).mul_(y), lambda: (xa @ S).mul_(y)
        else:
            m = (y @ sums[2].transpose(-1, -2)).unflatten(-1, (D, D))  # sum_j x'a_j (x) x'b_j (y_i . y'_j)
            mb, am = (m @ xb.unsqueeze(-1)).squeeze(-1), lambda: (xa.unsqueeze(-2) @ m).squeeze(-2)
        if xl is xa and xl is xb:
            if symmetric:
                dl.add_(mb, alpha=2 * c2)
            else:
                dl.add_(mb + am(), alpha=c2)
        else:
            da, db = mb.mul_(c2), am().mul_(c2)
        if with_values:
            dy.add_(_outer(xa, xb) @ sums[2], alpha=c2)
    return dl, da, db, dy


class _Gradients:
    """Gradient buffers of ``backward``, zero-initialised and shaped like q (keys) or va: "q",
    "va" ([v, rho]) and the key tensors named in ``slots`` ("k", and "kl" / "ka" / "kb" when given).
    ``slots``: per part, the names of its three key slots and whether its columns include v's.
    ``packed``: the query sums of ``add_key_side`` are over unweighted pairs (no dropout)."""

    def __init__(self, q, va, slots, packed=False):
        names = {name for names, _ in slots for name in names}
        self.buffers = {name: torch.zeros_like(q) for name in ("q", *names)}  # keys are shaped like q
        self.buffers["va"] = torch.zeros_like(va)
        self.slots = slots
        self.packed = packed

    def add(self, name, index, value):
        if value is not None:
            self.buffers[name][index] += value

    def add_key_side(self, index, parts, va, query_sums, coeffs):
        """The key-side factorized gradients of every part from the query sums."""
        for (keys, cols), (names, values) in zip(parts, self.slots):
            grads = _grads_through_sums(keys, va[..., cols], [s[..., cols] for s in query_sums], coeffs, True, values,
                                        self.packed)
            for name, grad in zip(names, grads[:3]):
                self.add(name, index, grad)
            if values:
                self.add("va", index + (Ellipsis, cols), grads[3])

    def result(self, finish):
        b = {name: finish(t) for name, t in self.buffers.items()}
        return b["q"], b["k"], b["va"][..., :-1], b.get("kl"), b.get("ka"), b.get("kb")
