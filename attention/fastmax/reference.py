"""Readable reference of Fastmax attention: the explicit (T, T) weight matrix.

Paper: "FAST: Factorizable Attention for Speeding up Transformers" (Gerami, Hoover, Dulepet,
Duraiswami 2024), section 2.2 (Eq. 5-12) and section 2.4 (dropout). This file is the
specification; the fast paths (``chunked.py``, the Triton ``kernels/``) must give the same outputs
and gradients.

Definitions, per batch element and head, positions i (query) and j (key) in 0..T-1:

    q_hat, k_hat   normalized queries and keys (``normalize_qk``)
    s_ij = q_hat_i . k_hat_j / temperature
    f(s) = a0 + a1 s            (p = 1)
    f(s) = a0 + a1 s + a2 s^2   (p = 2; a0, a1, a2 = 1, 1, 1/2 is Eq. 8)
    allowed(i, j): j <= i when causal, and key j is a real token (attention_mask True)
    o_i = sum_{allowed j} f(s_ij) v_j / sum_{allowed j} f(s_ij)          (Eq. 7, 11-12)

A row with no allowed key (e.g. a left-padded causal position) outputs zeros. The ratio is never
altered otherwise: if f takes negative values on the scores that occur (p = 1 when
a1 s < -a0; see ``kernel_minimum``), the implied weights f(s_ij) / sum_j f(s_ij) still sum to one
but some are negative, and a denominator that reaches zero gives inf / NaN. The module warns
when its configuration allows this.

Dropout (training only) acts on the numerator's factorized key terms (x in Eq. 28 and 34); the
denominator (y in Eq. 29 and 35) stays exact, so E[o] equals the output without dropout, as for
dropout on a softmax attention matrix. With keep = 1 - rate and Bernoulli masks drawn per key
token (``attention/fastmax/dropout.py``), the numerator uses, in place of f(s_ij):

    "1d":        a0 + c_j (a1 s_ij + a2 s_ij^2),  c_j = token_j / keep   (whole key token dropped)
    "standard":  a0 + a1 sum_m q_m k_jm lin_jm / keep / T
                    + a2 sum_{m,l} q_m q_l k_jm k_jl M_jml / keep / T^2
    "quadratic": a0 + a1 s_ij + a2 sum_{m,l} q_m q_l k_jm k_jl M_jml / keep / T^2

with q = q_hat_i, k = k_hat, T = temperature, lin_jm ~ Bernoulli(keep) per key coordinate, and
M_jml = row_jm col_jl where row, col ~ Bernoulli(sqrt(keep)) per key coordinate, so that every
quadratic feature (m, l) of every key is kept with probability keep (rescaled by 1 / keep) while
the products stay factorizable. The constant term a0 is never dropped.
"""
import math

import torch

NORMALIZATIONS = ("max_norm", "paper", "none")
PAPER_EPS = 1e-5  # added to the per-token variance in the "paper" normalization (as LayerNorm)
MAX_NORM_EPS = 1e-12  # floor of the largest norm in "max_norm" (an all-zero sequence stays zero)


def normalize_qk(q, k, normalization, lim=1.0, causal=False, attention_mask=None):
    """Normalized queries and keys (q_hat, k_hat), same shape and dtype as q and k.

    Args:
        q, k: (B, H, T, D) float tensors.
        normalization: "paper" (Eq. 5-6: each token minus its mean over D, divided by its
            population standard deviation over D, with variance + 1e-5 under the square root, so
            ||q_hat_i|| <= sqrt(D)); "max_norm" (the authors' code: x_hat_t = lim x_t / M_t with
            M_t the largest L2 norm over the real tokens of the sequence, per batch element and
            head, separately for q and k, so ||x_hat_t|| <= lim); "none" (q_hat = q, k_hat = k).
        lim: max_norm's bound on the normalized norms (> 0).
        causal: for "max_norm", M_t is the largest norm over real tokens n <= t (a running
            maximum) instead of over the whole sequence, so that no position depends on a later
            one (the authors' code uses the whole sequence, which leaks one scalar per head from
            the future into every position of a causal model).
        attention_mask: optional (B, T) bool, True = real token. Padded tokens do not enter M_t
            of real tokens; a padded token t uses max(M_t, ||x_t||) so that its norm stays <= lim.

    Raises:
        ValueError: unknown normalization.
    """
    if normalization == "none":
        return q, k
    if normalization == "paper":
        return _standardize(q), _standardize(k)
    if normalization == "max_norm":
        return (_max_normalize(q, lim, causal, attention_mask),
                _max_normalize(k, lim, causal, attention_mask))
    raise ValueError(f"normalization '{normalization}' unknown; allowed: {', '.join(NORMALIZATIONS)}")


def _standardize(x):
    centered = x - x.mean(dim=-1, keepdim=True)  # Eq. 5
    return centered / torch.sqrt(centered.pow(2).mean(dim=-1, keepdim=True) + PAPER_EPS)  # Eq. 6


def _max_normalize(x, lim, causal, attention_mask):
    return x * max_norm_scale(x, lim, causal, attention_mask).unsqueeze(-1)


def max_norm_scale(x, lim=1.0, causal=False, attention_mask=None):
    """The per-position factor of the "max_norm" normalization, x_hat_t = scale_t x_t
    (``normalize_qk``): lim / M_t, (B, H, T) for x (B, H, T, D); differentiable."""
    norms = x.norm(dim=-1)  # (B, H, T)
    real_norms = norms
    if attention_mask is not None:
        real_norms = norms.masked_fill(~attention_mask[:, None, :], 0.0)
    if causal:
        largest = torch.cummax(real_norms, dim=-1).values
    else:
        largest = real_norms.amax(dim=-1, keepdim=True).expand_as(norms)
    largest = torch.maximum(largest, norms)  # only changes padded tokens (real ones are in their M)
    return lim / largest.clamp_min(MAX_NORM_EPS)


def kernel(s, p, a0, a1, a2):
    """f(s) = a0 + a1 s (p = 1) or a0 + a1 s + a2 s^2 (p = 2), elementwise (Eq. 8 generalised)."""
    if p == 1:
        return a0 + a1 * s
    return a0 + a1 * s + a2 * s * s


def score_bound(normalization, D, lim, temperature):
    """Largest |s_ij| the normalization allows for head dim D: D / T for "paper" (norms sqrt(D)),
    lim^2 / T for "max_norm", inf for "none" (T = temperature)."""
    if normalization == "paper":
        return D / temperature
    if normalization == "max_norm":
        return lim * lim / temperature
    return math.inf


def kernel_minimum(p, a0, a1, a2, bound):
    """Smallest value of f(s) over |s| <= bound (bound may be inf, giving -inf when unbounded below).

    Attention weights are non-negative (the paper's Eq. 10) for every input exactly when this is
    >= 0 and the allowed scores can reach the minimiser.
    """
    if p == 2 and a2 != 0:
        candidates = [-bound, bound]
        if a2 > 0:
            vertex = -a1 / (2 * a2)
            if abs(vertex) <= bound:
                candidates.append(vertex)
        values = []
        for s in candidates:
            if math.isinf(s):
                values.append(math.inf if a2 > 0 else -math.inf)
            else:
                values.append(a0 + a1 * s + a2 * s * s)
        return min(values)
    if a1 == 0:
        return a0
    return -math.inf if math.isinf(bound) else a0 - abs(a1) * bound


def allowed_pairs(T, causal, attention_mask, device):
    """(B or 1, 1, T, T) bool: query i may attend to key j (j <= i if causal; key j real)."""
    allowed = torch.ones(1, 1, T, T, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed.tril()
    if attention_mask is not None:
        allowed = allowed & attention_mask[:, None, None, :]
    return allowed


def fastmax_weights(q, k, causal, attention_mask=None, p=2, a0=1.0, a1=1.0, a2=0.5, temperature=1.0,
                    normalization="max_norm", lim=1.0):
    """The implied attention matrix A (Eq. 7 / 9), (B, H, T, T) in float32 or wider.

    A_ij = f(s_ij) / sum_{allowed n} f(s_in) for allowed (i, j), 0 otherwise; a row with no
    allowed key is all zeros. Without dropout, the output is A @ v.
    """
    work = torch.promote_types(q.dtype, torch.float32)
    q_hat, k_hat = normalize_qk(q.to(work), k.to(work), normalization, lim, causal, attention_mask)
    scores = q_hat @ k_hat.transpose(-1, -2) / temperature
    allowed = allowed_pairs(q.shape[2], causal, attention_mask, q.device)
    weights = kernel(scores, p, a0, a1, a2) * allowed
    denominator = weights.sum(dim=-1, keepdim=True)
    has_key = allowed.any(dim=-1, keepdim=True) & (denominator != 0)  # the zero-denominator guard
    return torch.where(has_key, weights / torch.where(has_key, denominator, 1.0), 0.0)


def reference_forward(q, k, v, causal, attention_mask=None, p=2, a0=1.0, a1=1.0, a2=0.5, temperature=1.0,
                      normalization="max_norm", lim=1.0, dropout_variant=None, dropout_rate=0.0,
                      dropout_masks=None):
    """Fastmax attention with the (B, H, T, T) weights materialised; differentiable by autograd.

    Args:
        q, k, v: (B, H, T, D) float tensors (any float dtype; computed in float32 or wider).
        causal: bool, key j <= query i only.
        attention_mask: optional (B, T) bool, True = real token; padded keys get no weight.
        p, a0, a1, a2, temperature, normalization, lim: see the module docstring.
        dropout_variant, dropout_rate, dropout_masks: None / 0 / None for no dropout; otherwise
            the variant name, the rate in [0, 1) and the masks of ``dropout.draw_dropout_masks``.

    Returns:
        (B, H, T, D) tensor with v's dtype.
    """
    work = torch.promote_types(q.dtype, torch.float32)
    q_hat, k_hat = normalize_qk(q.to(work), k.to(work), normalization, lim, causal, attention_mask)
    out_dtype, v = v.dtype, v.to(work)
    scores = q_hat @ k_hat.transpose(-1, -2) / temperature
    allowed = allowed_pairs(q.shape[2], causal, attention_mask, q.device)
    denominator = (kernel(scores, p, a0, a1, a2) * allowed).sum(dim=-1, keepdim=True)
    if dropout_masks is None:
        numerator_weights = kernel(scores, p, a0, a1, a2)
    else:
        numerator_weights = _dropped_numerator_weights(q_hat, k_hat, scores, p, a0, a1, a2, temperature,
                                                       dropout_variant, dropout_rate, dropout_masks)
    numerator = (numerator_weights * allowed) @ v
    has_key = allowed.any(dim=-1, keepdim=True) & (denominator != 0)  # the zero-denominator guard
    out = torch.where(has_key, numerator / torch.where(has_key, denominator, 1.0), 0.0)
    return out.to(out_dtype)


def _dropped_numerator_weights(q_hat, k_hat, scores, p, a0, a1, a2, temperature, variant, rate, masks):
    """Numerator kernel values under dropout, (B, H, T, T); written term by term (module docstring)."""
    keep = 1.0 - rate
    if variant == "1d":
        scale = masks["token"].to(scores.dtype) / keep  # (B, H, T) over keys j
        nonconstant = kernel(scores, p, 0.0, a1, a2)
        return a0 + nonconstant * scale[:, :, None, :]
    if variant == "standard":
        kept_linear = k_hat * masks["linear"].to(k_hat.dtype)
        linear = a1 * (q_hat @ kept_linear.transpose(-1, -2)) / keep / temperature
    elif variant == "quadratic":
        linear = a1 * scores
    else:
        raise ValueError(f"dropout variant '{variant}' unknown")
    if p == 1:
        return a0 + linear
    # explicit per-feature mask M_jml = row_jm col_jl over the D x D quadratic features of key j
    feature_mask = (masks["quad_row"][..., :, None] & masks["quad_col"][..., None, :]).to(k_hat.dtype)
    quadratic = torch.einsum("bhim,bhil,bhjm,bhjl,bhjml->bhij", q_hat, q_hat, k_hat, k_hat, feature_mask)
    return a0 + linear + a2 * quadratic / keep / temperature ** 2
