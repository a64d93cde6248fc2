"""The output math both Fastmax backends share (``chunked.py``'s PyTorch path and
``triton_kernels.py``): allowed keys per query, the output num / den with its guards, and the
gradients of the numerator and denominator from the output's gradient (paper section 2.5).
Shapes: (N = B*H, T) per query, (N, T, Dv) per output row; rho (N, T) is 1 for a real key, 0 for
padding. A module of its own so that neither backend imports the other.
"""
import torch


def row_counts(rho, causal):
    """Number of allowed keys of every query, (N, T): running sum of rho (causal) or its total."""
    if causal:
        return rho.cumsum(dim=-1)
    return rho.sum(dim=-1, keepdim=True).expand_as(rho)


def output_gradients(grad_out, out, den, rho, causal):
    """g_i = dL/do_i / den_i (N, T, Dv) and delta_i = (dL/do_i . o_i) / den_i (N, T); zero on rows
    without an allowed key or with a zero denominator. dL/d numerator_i = g_i and
    dL/d denominator_i = -delta_i."""
    has_key = (row_counts(rho, causal) > 0) & (den != 0)
    safe = torch.where(has_key, den, torch.ones_like(den))
    g = torch.where(has_key[..., None], grad_out / safe[..., None], 0.0)
    delta = torch.where(has_key, (grad_out * out).sum(-1) / safe, 0.0)
    return g, delta


def finish_output(num, den, rho, causal):
    """num / den, zero on rows without an allowed key or with a zero denominator (N, T, Dv)."""
    has_key = (row_counts(rho, causal) > 0) & (den != 0)
    scale = torch.where(has_key, den.reciprocal(), 0.0)  # (N, T): one pass over num instead of three
    return num * scale.unsqueeze(-1)
