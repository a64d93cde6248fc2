"""Fastmax a token at a time (``Fastmax.prefill`` / ``Fastmax.step``): the factorized moments of
the keys (the causal prefix sums of the paper's Eq. 32-35, taken at the newest position), in memory
that does not depend on the context length.

With q, k normalized (``reference.normalize_qk``), s = q . k / temperature and f(s) = a0 + a1 s
(+ a2 s^2), the causal output of query t is sum_{j <= t} f(s_tj) [v_j, 1] split into numerator
and denominator. Expanding f, every sum over j is a moment of the keys that a new key updates in
O(D^p Dv):

    M0 = sum_j [v_j, 1]                      (Dv + 1)
    M1 = sum_j k_j [v_j, 1]^T                (D, Dv + 1)
    M2 = sum_j (k_j (x) k_j) [v_j, 1]^T      (D^2, Dv + 1; p = 2 only)
    [num, den] = a0 M0 + (a1 / T) q^T M1 + (a2 / T^2) (q (x) q)^T M2

(T = temperature; the last column carries the denominator, its M0 entry counts the real keys). A
padded prompt key enters no moment. M2 keeps all D^2 products (not the D (D + 1) / 2 distinct ones
of the chunked path): twice the memory, one matrix product per step.

Normalization, step by step: "paper" and "none" act on each token alone; "max_norm" divides a
causal token t by M_t, the largest norm of the real tokens up to t (the running maximum of
``reference.max_norm_scale``), separately for queries and keys: a key keeps the scale it had at
its own position, so the state carries the two running maxima (B, H) and every normalization is
computed exactly as the causal forward computes it. None needs a fallback.
"""
import torch

from attention.fastmax.reference import MAX_NORM_EPS, max_norm_scale, normalize_qk

PREFILL_CHUNK = 256  # prompt tokens whose D^2 key products are formed at once (memory of the prefill)


def _with_ones(v):
    """[v, 1]: (B, H, T, Dv) -> (B, H, T, Dv + 1), the denominator's column appended."""
    return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)


def _squares(k):
    """k (x) k per token: (B, H, T, D) -> (B, H, T, D^2)."""
    return (k[..., :, None] * k[..., None, :]).flatten(-2)


def prefill_state(q, k, v, attention_mask, p, normalization, lim):
    """The decode state after the prompt: the moments M0, M1 (and M2 for p = 2) of its real keys,
    and for "max_norm" the running maxima of the real query and key norms ("q_max", "k_max",
    (B, H), 0 before any real token). q, k (B, H, T, D), v (B, H, T, Dv) in the accumulation dtype;
    attention_mask (B, T) bool or None. Returns a dict of tensors."""
    state = {"q_max": None, "k_max": None}
    if normalization == "max_norm":
        k_hat = k * max_norm_scale(k, lim, True, attention_mask).unsqueeze(-1)
        for name, x in (("q_max", q), ("k_max", k)):
            norms = x.norm(dim=-1)
            if attention_mask is not None:
                norms = norms.masked_fill(~attention_mask[:, None, :], 0.0)
            state[name] = norms.amax(-1)
    else:
        k_hat = normalize_qk(k, k, normalization, lim)[1]
    values = _with_ones(v)
    if attention_mask is not None:
        values = values * attention_mask[:, None, :, None].to(values.dtype)
    state["M0"] = values.sum(2)
    state["M1"] = k_hat.transpose(-1, -2) @ values
    if p == 2:
        B, H, T, D = k.shape
        M2 = values.new_zeros(B, H, D * D, values.shape[-1])
        for start in range(0, T, PREFILL_CHUNK):
            end = start + PREFILL_CHUNK
            M2 += _squares(k_hat[:, :, start:end]).transpose(-1, -2) @ values[:, :, start:end]
        state["M2"] = M2
    return state


def _normalize_token(x, normalization, lim, largest):
    """One real token x (B, H, 1, D) normalized as the causal forward normalizes it at its
    position; ``largest``: the running maximum norm before it ("max_norm"; (B, H)), returned
    updated (None otherwise)."""
    if normalization != "max_norm":
        return normalize_qk(x, x, normalization, lim)[0], largest
    largest = torch.maximum(largest, x.norm(dim=-1)[..., 0])
    return x * (lim / largest.clamp_min(MAX_NORM_EPS))[..., None, None], largest


def step(q_t, k_t, v_t, state, p, a0, a1, a2, temperature, normalization, lim):
    """One token: k_t, v_t added to the moments of ``state`` (updated in place), q_t's output
    (B, H, 1, Dv) from them; zero when the denominator is zero (``reference.reference_forward``'s
    guard). q_t, k_t (B, H, 1, D), v_t (B, H, 1, Dv) in the state's dtype."""
    q_hat, state["q_max"] = _normalize_token(q_t, normalization, lim, state["q_max"])
    k_hat, state["k_max"] = _normalize_token(k_t, normalization, lim, state["k_max"])
    values = _with_ones(v_t)
    state["M0"] += values[:, :, 0]
    state["M1"] += k_hat.transpose(-1, -2) @ values
    out = a0 * state["M0"][:, :, None] + (a1 / temperature) * (q_hat @ state["M1"])
    if p == 2:
        state["M2"] += _squares(k_hat).transpose(-1, -2) @ values
        out = out + (a2 / temperature ** 2) * (_squares(q_hat) @ state["M2"])
    numerator, denominator = out[..., :-1], out[..., -1:]
    has_key = (state["M0"][:, :, None, -1:] > 0) & (denominator != 0)
    return torch.where(has_key, numerator / torch.where(has_key, denominator, 1.0), 0.0)
