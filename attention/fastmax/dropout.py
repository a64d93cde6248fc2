"""Dropout on Fastmax's factorized terms (paper section 2.4), shared by every implementation.

The paper has no attention matrix to drop entries from, so dropout acts on the factorized terms.
It names three variants and defines each in one sentence; our precise definitions (the
specification is the docstring of ``reference.py``):

- "standard": independent masks over the embedding dimensions of each key token's factorized
  terms: its D linear features k_m and (p = 2) its D^2 quadratic features k_m k_l;
- "1d": a whole key token (all its linear and quadratic features) dropped at once;
- "quadratic": only the quadratic features (the paper's best variant; needs p = 2).

Choices the paper leaves open, made here:
- only the numerator's terms (x, Eq. 28 / 34) are dropped, the denominator (y, Eq. 29 / 35) is
  exact, and kept terms are scaled by 1 / keep, so the expected output equals the output without
  dropout (as dropout on a softmax attention matrix);
- masks are drawn per key token (never per query), so they cost O(T D) memory like k itself;
- the constant term a0 is never dropped (it carries no embedding dimension);
- a quadratic feature (m, l) of key j is kept when row_jm and col_jl are both kept, each with
  probability sqrt(keep): every feature is kept with probability keep, and the dropped quadratic
  term is a product of two inner products, (q . k_a)(q . k_b), which keeps it factorizable.

The fast paths never see masks: they get the numerator's keys (k_linear, k_quad_a, k_quad_b)
from ``numerator_keys`` and use a0 + a1 q.k_linear + a2 (q.k_quad_a)(q.k_quad_b) in the numerator
(coefficients already divided by the temperature).
"""
import math

import torch

DROPOUT_VARIANTS = ("quadratic", "standard", "1d")


def draw_dropout_masks(variant, rate, p, shape, device, generator=None):
    """Bernoulli keep-masks (bool, True = kept) for the keys of shape (B, H, T, D).

    Returns a dict: "1d" -> {"token": (B, H, T)}; "standard" -> {"linear": (B, H, T, D)} plus,
    for p = 2, {"quad_row", "quad_col"}: (B, H, T, D) each; "quadratic" -> {"quad_row", "quad_col"}.
    Uses torch's global RNG unless a ``generator`` is given.

    Raises:
        ValueError: unknown variant, rate outside [0, 1), or "quadratic" with p = 1.
    """
    _check(variant, rate, p)
    B, H, T, D = shape
    keep = 1.0 - rate

    def bernoulli(size, probability):
        return torch.rand(size, device=device, generator=generator) < probability

    if variant == "1d":
        return {"token": bernoulli((B, H, T), keep)}
    masks = {}
    if variant == "standard":
        masks["linear"] = bernoulli((B, H, T, D), keep)
    if p == 2:
        masks["quad_row"] = bernoulli((B, H, T, D), math.sqrt(keep))
        masks["quad_col"] = bernoulli((B, H, T, D), math.sqrt(keep))
    return masks


def numerator_keys(k_hat, masks, variant, rate, p):
    """The numerator's keys (k_linear, k_quad_a, k_quad_b), each like ``k_hat`` (B, H, T, D).

    With them the numerator's kernel is a0 + a1 q.k_linear + a2 (q.k_quad_a)(q.k_quad_b) /
    (temperature powers), which equals the dropped terms of ``reference.py``. For p = 1 the
    quadratic keys are None. Differentiable (plain elementwise products).
    """
    _check(variant, rate, p)
    keep = 1.0 - rate
    if variant == "1d":
        scaled = k_hat * (masks["token"].to(k_hat.dtype) / keep).unsqueeze(-1)
        return (scaled, scaled, k_hat) if p == 2 else (scaled, None, None)
    if variant == "standard":
        k_linear = k_hat * (masks["linear"].to(k_hat.dtype) / keep)
    else:
        k_linear = k_hat
    if p == 1:
        return k_linear, None, None
    root = math.sqrt(keep)
    return (k_linear, k_hat * (masks["quad_row"].to(k_hat.dtype) / root),
            k_hat * (masks["quad_col"].to(k_hat.dtype) / root))


def _check(variant, rate, p):
    if variant not in DROPOUT_VARIANTS:
        raise ValueError(f"dropout_variant '{variant}' unknown; allowed: {', '.join(DROPOUT_VARIANTS)}")
    if not (0.0 <= rate < 1.0):
        raise ValueError(f"dropout rate must be in [0, 1); got {rate}")
    if variant == "quadratic" and p == 1:
        raise ValueError("dropout_variant 'quadratic' needs p = 2 (p = 1 has no quadratic term); "
                         "with p = 1 use 'standard' or '1d'")
