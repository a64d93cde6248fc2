"""Kernelized (feature-map) attention, shared by ``linear`` and ``performer``: softmax's
exp(q . k) replaced by a kernel phi_q(q) . phi_k(k) with non-negative features, so that

    out_i = phi_q(q_i)^T (sum_j phi_k(k_j) v_j^T) / phi_q(q_i)^T (sum_j phi_k(k_j))

costs O(T R Dv) for R features instead of O(T^2 D) (Katharopoulos et al. 2020, "Transformers are
RNNs", sections 3.2-3.3; causal: the sums over j <= i).

``kernel_attention`` is the efficient path: it computes features chunk by chunk (C positions) and
folds them into the running state (S, Z); causal, each chunk adds its masked (C, C) products to
the state of the earlier chunks; no (T, T) matrix is built. Padding: padded keys get features 0,
so they add nothing to S or Z; a query with no real key up to it (a zero denominator) outputs
zeros, as softmax does for a row without allowed keys. ``kernel_reference`` is the explicit form
with the (T, T) matrix, which tests compare with; ``kernel_attention_flops`` counts the fast
path's products (the benchmark's FLOPs of both methods).

On a GPU the chunks are not walked one by one (each a handful of small kernel launches: the first
H100 run, 2026-11-28, took 0.36 s for linear's causal forward at T = 65,536 in 1,024 chunks):
``all_chunks_at_once`` computes every chunk's sums in one product, their exclusive prefix sums
with one cumsum, and every chunk's masked (C, C) block in one batched product. The same function;
sums taken in another order. Features with log scales (Performer's, causal) keep the sequential
path: their running reference has no prefix-sum form without a risk of underflow.

Decoding (a token at a time): ``kernel_state`` gives the sums S and Z over a prompt's keys and
``kernel_step`` adds one key and answers one query, in constant memory. Features with log scales
(Performer's) keep S and Z relative to the running reference m, the largest s_j so far, as the
sequential path does (``_absorb``): a key with a larger s_j rescales S and Z by exp(m - m_new)
before it is added, so nothing overflows and the ratio is the forward's.
"""
import torch

from attention.registry import allowed_keys


def _finite(m):
    """-inf (no real key yet) -> 0, so that differences with it stay defined."""
    return m.masked_fill(torch.isneginf(m), 0.0)


def _divide(num, den):
    """num / den with rows of zero denominator set to 0 (all their weights are 0, so is num)."""
    return num / torch.where(den == 0, torch.ones_like(den), den)


def _key_chunk(key_features, k, attention_mask):
    """Features of a chunk of keys with padded keys removed: kf (B, H, n, R) with zero rows and
    log scales s (B, H, n) at -inf for padded keys (s None: no scales)."""
    kf, s = key_features(k)
    if attention_mask is not None:
        real = attention_mask[:, None, :]
        kf = kf.masked_fill(~real[..., None], 0.0)
        s = None if s is None else s.masked_fill(~real, float("-inf"))
    return kf, s


def _absorb(S, Z, m, kf, s, v):
    """Add a chunk of keys to the running sums S = sum kf_j v_j^T (B, H, R, Dv) and Z = sum kf_j
    (B, H, R), kept at log scale m (B, H), the largest s_j so far (-inf before any real key)."""
    if s is None:
        return S + kf.transpose(-1, -2) @ v, Z + kf.sum(-2), m
    m_new = torch.maximum(m, s.amax(-1))
    to_new = _finite(m_new)
    k_scaled = kf * torch.exp(s - to_new[..., None])[..., None]
    decay = torch.exp(m - to_new)
    return (S * decay[..., None, None] + k_scaled.transpose(-1, -2) @ v, Z * decay[..., None] + k_scaled.sum(-2),
            m_new)


def kernel_attention(q, k, v, causal, query_features, key_features, attention_mask=None, chunk_size=64):
    """out_i = sum_{j allowed} a_ij v_j / sum_{j allowed} a_ij with a_ij = phi_q(q_i) . phi_k(k_j),
    allowed = real keys (and j <= i when ``causal``), 0 where the denominator is 0.

    Chunks of ``chunk_size`` positions: features are computed chunk by chunk and folded into
    running sums S = sum_j phi_k(k_j) v_j^T (R, Dv) and Z = sum_j phi_k(k_j) (R), so memory is
    O(chunk R + R Dv) per head (plus what autograd keeps). Not causal: one pass over the keys, then
    one over the queries. Causal: per chunk, the masked (C, C) products inside it plus the sums of
    the earlier chunks.

    Args:
        q (torch.Tensor): (B, H, Tq, D) queries; k (B, H, T, D) keys; v (B, H, T, Dv) values, all of
            one float dtype (the accumulation dtype).
        causal (bool): sums over j <= i (needs Tq = T).
        query_features: x (B, H, n, D) -> non-negative (B, H, n, R).
        key_features: x (B, H, n, D) -> (kf, s): kf (B, H, n, R) non-negative and s (B, H, n)
            or None. With s, key j's features are kf_j e^{s_j} (Performer stores exp(logit - s_j),
            s_j key j's largest logit, so nothing overflows or underflows); the factors are taken
            relative to the largest s_j a query may see, which cancels in the ratio. Causal, that
            reference depends on keys j <= i only, so later keys change nothing, not even rounding.
        attention_mask (torch.Tensor | None): (B, T) bool, True = real key.
        chunk_size (int): positions per chunk.

    Returns:
        torch.Tensor (B, H, Tq, Dv).
    """
    if k.is_cuda:
        out = all_chunks_at_once(q, k, v, causal, query_features, key_features, attention_mask, chunk_size)
        if out is not None:
            return out
    B, H = k.shape[:2]
    C = chunk_size
    S, m = None, k.new_full((B, H), float("-inf"))
    lower = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    # chunks from split, not slices taken inside the loop: the backward of each slice would
    # write its gradient into a zero tensor of the full (B, H, T, D) shape, O(T^2 / C) in all;
    # split's backward concatenates the chunks' gradients once
    q_chunks, k_chunks, v_chunks = q.split(C, dim=2), k.split(C, dim=2), v.split(C, dim=2)
    masks = [None] * len(k_chunks) if attention_mask is None else attention_mask.split(C, dim=1)
    outs = []
    for i, (k_c, v_c, mask_c) in enumerate(zip(k_chunks, v_chunks, masks)):
        kf, s = _key_chunk(key_features, k_c, mask_c)
        if S is None:
            S, Z = kf.new_zeros(B, H, kf.shape[-1], v.shape[-1]), kf.new_zeros(B, H, kf.shape[-1])
        if causal:
            n = kf.shape[2]
            qf = query_features(q_chunks[i])
            scores = qf @ kf.transpose(-1, -2)  # (B, H, n, n)
            num, den = qf @ S, qf @ Z[..., None]
            if s is None:
                scores = scores.masked_fill(~lower[:n, :n], 0.0)
            else:
                # query i's reference: the largest s_j over j <= i (earlier chunks included)
                ref = _finite(torch.maximum(m[..., None], s.cummax(-1).values))
                rel = (s[..., None, :] - ref[..., :, None]).masked_fill(~lower[:n, :n], float("-inf"))
                scores = scores * torch.exp(rel)
                carried = torch.exp(m[..., None] - ref)[..., None]  # S and Z rescaled to the reference
                num, den = num * carried, den * carried
            outs.append(_divide(num + scores @ v_c, den + scores.sum(-1, keepdim=True)))
        S, Z, m = _absorb(S, Z, m, kf, s, v_c)
    if not causal:  # every query sees the same sums (at scale m, common to all of them)
        for q_c in q_chunks:
            qf = query_features(q_c)
            outs.append(_divide(qf @ S, qf @ Z[..., None]))
    return torch.cat(outs, dim=2)


def all_chunks_at_once(q, k, v, causal, query_features, key_features, attention_mask=None, chunk_size=64):
    """``kernel_attention`` with every chunk at once (the GPU path; same arguments and result):
    not causal, the sums over all keys in one product; causal, the per-chunk sums S_c = sum_{j in c}
    phi_k(k_j) v_j^T and Z_c, their exclusive prefix sums over chunks (one cumsum), and each chunk's
    masked (C, C) block of its own keys. Memory O(T R + (T / C) R Dv) per head. Returns None for
    causal features with log scales (``key_features`` giving s), which need the sequential path."""
    B, H, T, _ = k.shape
    kf, s = _key_chunk(key_features, k, attention_mask)
    qf = query_features(q)
    if not causal:
        if s is not None:  # every query sees the same reference: the largest s_j of all keys
            kf = kf * torch.exp(s - _finite(s.amax(-1, keepdim=True)))[..., None]
        return _divide(qf @ (kf.transpose(-1, -2) @ v), qf @ kf.sum(-2)[..., None])
    if s is not None:
        return None
    C = chunk_size
    n = -(-T // C)
    pad = n * C - T  # zero rows: padded keys add nothing, padded queries are cut below
    qf, kf, v = (torch.nn.functional.pad(x, (0, 0, 0, pad)).unflatten(2, (n, C)) for x in (qf, kf, v))
    S = kf.transpose(-1, -2) @ v  # (B, H, n, R, Dv): each chunk's own sums
    Z = kf.sum(-2)  # (B, H, n, R)
    # the sums of the chunks before each one: a zero chunk in front, the last one dropped
    S_before = torch.cat([torch.zeros_like(S[:, :, :1]), S[:, :, :-1]], dim=2).cumsum(2)
    Z_before = torch.cat([torch.zeros_like(Z[:, :, :1]), Z[:, :, :-1]], dim=2).cumsum(2)
    lower = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    scores = (qf @ kf.transpose(-1, -2)).masked_fill(~lower, 0.0)  # (B, H, n, C, C)
    num = qf @ S_before + scores @ v
    den = qf @ Z_before[..., None] + scores.sum(-1, keepdim=True)
    return _divide(num, den).flatten(2, 3)[:, :, :T]


def kernel_state(kf, v, attention_mask=None, s=None):
    """The decode state after keys 0..T-1 (``Attention.prefill`` of a feature-map method): the sums
    S = sum_j phi_k(k_j) v_j^T (B, H, R, Dv) and Z = sum_j phi_k(k_j) (B, H, R) over the real keys,
    a dict {"S", "Z"} whose size does not depend on T (section 3.4's recurrent form). With log
    scales s, key j's features are kf_j e^{s_j} and the state is {"S", "Z", "m"}: the sums of
    kf_j e^{s_j - m} with m (B, H) the largest s_j of a real key (-inf before any).

    Args:
        kf (torch.Tensor): (B, H, T, R) key features; v (B, H, T, Dv), one float dtype (the
            accumulation dtype). attention_mask: (B, T) bool or None. s: (B, H, T) log scales or None.
    """
    if attention_mask is not None:
        kf = kf.masked_fill(~attention_mask[:, None, :, None], 0.0)
        s = None if s is None else s.masked_fill(~attention_mask[:, None, :], float("-inf"))
    if s is None:
        return {"S": kf.transpose(-1, -2) @ v, "Z": kf.sum(-2)}
    B, H, _, R = kf.shape
    S, Z, m = _absorb(kf.new_zeros(B, H, R, v.shape[-1]), kf.new_zeros(B, H, R), kf.new_full((B, H), float("-inf")),
                      kf, s, v)
    return {"S": S, "Z": Z, "m": m}


def kernel_step(qf, kf, v, state, s=None):
    """One decode step (``Attention.step``): the new key's features kf (B, H, 1, R) and value v
    (B, H, 1, Dv) added to the sums of ``state`` (``kernel_state``, updated in place), then the
    new query's output phi_q(q)^T S / phi_q(q)^T Z, (B, H, 1, Dv), 0 where the denominator is 0.
    qf: (B, H, 1, R) query features; all of the state's dtype. s: the new key's log scale (B, H, 1)
    for a state with a reference m (``kernel_state``): S and Z are rescaled to the new largest
    s_j when it grows."""
    if s is None:
        state["S"] += kf.transpose(-1, -2) @ v
        state["Z"] += kf[:, :, 0]
    else:
        state["S"], state["Z"], state["m"] = _absorb(state["S"], state["Z"], state["m"], kf, s, v)
    return _divide(qf @ state["S"], qf @ state["Z"][..., None])


def kernel_reference(qf, kf, v, causal, attention_mask=None):
    """The explicit form of ``kernel_attention``: the (B, H, Tq, T) matrix A = qf kf^T, masked
    (causal, padded keys), out = A v / A 1, rows with A 1 = 0 set to 0. Same shapes and dtypes."""
    A = qf @ kf.transpose(-1, -2)
    mask = allowed_keys(kf.shape[2], causal, attention_mask, device=kf.device)
    if mask is not None:
        A = A * mask
    return _divide(A @ v, A.sum(-1, keepdim=True))


def check_lengths(q, k, causal, name):
    """ValueError when causal attention gets different query and key lengths."""
    if causal and q.shape[2] != k.shape[2]:
        raise ValueError(f"{name}: causal attention needs as many queries as keys; got {q.shape[2]} and {k.shape[2]}")


def kernel_attention_flops(T, R, Dv, causal, chunk_size):
    """Forward FLOPs per sequence of ``kernel_attention`` with R features and value dim Dv: the
    states S, Z and their use by every query; causal adds the masked (C, C) blocks of the chunks
    of ``chunk_size`` positions (C^2 per full chunk, the remainder's square for the last)."""
    if not causal:
        return 4 * T * R * Dv + 2 * T * R
    full, rest = divmod(T, chunk_size)
    squares = full * chunk_size * chunk_size + rest * rest
    return 2 * squares * (R + Dv) + T * (4 * R * Dv + 2 * R)
