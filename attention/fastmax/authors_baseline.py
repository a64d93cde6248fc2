"""The authors' PyTorch formulation of Fastmax, re-implemented for benchmarks (not registered).

Their released PyTorch path (armingerami/fastmax, ``fastmax_function`` in example.py; also the einops
version in armingerami/reproducing_fastmax_results) computes the causal case by materialising
the per-position cumulative sums of Eq. 34-35, k_j (x) v_j and k_j (x) k_j (x) v_j for every
position (torch.cumsum over T), and differentiates with plain autograd. Memory per head is
therefore O(T D^p Dv) in the forward pass and again for the saved tensors of the backward pass:
the cost section 2.5 of the paper proposes to avoid. Non-causal, it uses the shared sums
(Eq. 28-29). This file reproduces that formulation in our notation (same normalization and
coefficients as the module) so that ``scripts/bench/attention.py`` can compare time and peak
memory with our chunked path; no code of theirs is copied.
"""
import torch

from attention.fastmax.function import coefficients
from attention.fastmax.reference import normalize_qk


def _outer(a, b):
    return (a.unsqueeze(-1) * b.unsqueeze(-2)).flatten(-2)


def authors_formulation(q, k, v, causal, p=2, a0=1.0, a1=1.0, a2=0.5, temperature=1.0, normalization="max_norm",
                        lim=1.0):
    """Fastmax of (B, H, T, D) q, k, v (no padding, no dropout) with per-position cumulative sums.

    Same output as ``reference.reference_forward`` with the same parameters; float32 or wider.
    """
    work = torch.promote_types(q.dtype, torch.float32)
    q_hat, k_hat = normalize_qk(q.to(work), k.to(work), normalization, lim, causal)
    v = v.to(work)
    c0, c1, c2 = coefficients(p, a0, a1, a2, temperature)
    T = q.shape[2]
    if not causal:
        num = c0 * v.sum(-2, keepdim=True) + c1 * (q_hat @ (k_hat.transpose(-1, -2) @ v))
        den = c0 * T + c1 * (q_hat @ k_hat.sum(-2).unsqueeze(-1)).squeeze(-1)
        if p == 2:
            q2, k2 = _outer(q_hat, q_hat), _outer(k_hat, k_hat)
            num = num + c2 * (q2 @ (k2.transpose(-1, -2) @ v))
            den = den + c2 * (q2 @ k2.sum(-2).unsqueeze(-1)).squeeze(-1)
    else:
        x2 = (k_hat.unsqueeze(-1) * v.unsqueeze(-2)).cumsum(dim=2)  # (B, H, T, D, Dv), Eq. 34
        num = c0 * v.cumsum(dim=2) + c1 * torch.einsum("bhtm,bhtmj->bhtj", q_hat, x2)
        positions = torch.arange(1, T + 1, dtype=work, device=q.device)
        den = c0 * positions + c1 * (q_hat * k_hat.cumsum(dim=2)).sum(-1)  # Eq. 35
        if p == 2:
            q2, k2 = _outer(q_hat, q_hat), _outer(k_hat, k_hat)
            x3 = (k2.unsqueeze(-1) * v.unsqueeze(-2)).cumsum(dim=2)  # (B, H, T, D^2, Dv)
            num = num + c2 * torch.einsum("bhtf,bhtfj->bhtj", q2, x3)
            den = den + c2 * (q2 * k2.cumsum(dim=2)).sum(-1)
    return (num / den.unsqueeze(-1)).to(v.dtype)
