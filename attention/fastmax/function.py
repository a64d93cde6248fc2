"""The custom autograd Function of Fastmax, its backend choice and the output gradients.

Paper: "FAST: Factorizable Attention for Speeding up Transformers", section 2.4 (Eq. 26-35) and
section 2.5 (custom gradients). Inputs here are already normalized (q_hat, k_hat) and padded keys
already zeroed; the temperature is folded into the coefficients: with c0 = a0, c1 = a1 / T,
c2 = a2 / T^2 (T = temperature; c2 = 0 for p = 1) the kernel of a query-key pair is

    denominator:  w_ij  = c0 rho_j + c1 (q_i.k_j) + c2 (q_i.k_j)^2
    numerator:    w~_ij = c0 rho_j + c1 (q_i.kl_j) + c2 (q_i.ka_j)(q_i.kb_j)

where rho_j = 1 for a real key and 0 for a padded one, and kl = ka = kb = k unless dropout is
active (``dropout.numerator_keys``). o_i = sum_j w~_ij v_j / sum_j w_ij over allowed j (j <= i
when causal).

Factorized sums (one batch element and head, "(x)" = outer product, D^2 features flattened):
    x1 = sum_j v_j,  x2 = sum_j kl_j (x) v_j,  x3 = sum_j (ka_j (x) kb_j) (x) v_j    (Eq. 28 / 34)
    y1 = sum_j rho_j, y2 = sum_j k_j,          y3 = sum_j k_j (x) k_j                 (Eq. 29 / 35)
    numerator_i   = c0 x1 + c1 q_i.x2 + c2 (q_i (x) q_i).x3                         (Eq. 26 / 32)
    denominator_i = c0 y1 + c1 q_i.y2 + c2 (q_i (x) q_i).y3                         (Eq. 27 / 33)
over all keys (non-causal) or as prefix sums over j <= i (causal).

Layers. ``FastmaxFunction`` flattens (B, H) to N = B*H, chooses the backend and computes what
both backends share: the keys' weights rho, which queries have an allowed key (``row_counts``)
and, in backward, the gradients of numerator and denominator from the output's
(``output_gradients``). The backends compute the rest on (N, T, X) tensors with one interface,
    forward(q, k, v, kl, ka, kb, rho, has_key, causal, coeffs, chunk) -> (out, den)
    backward(g, delta, q, k, v, kl, ka, kb, rho, causal, coeffs, chunk) -> (dq, dk, dv, dkl, dka, dkb)
"pytorch": ``chunked.py``; "triton", "triton_chunk", "triton_parallel": the package ``kernels``
(its dispatch between the chunk and the parallel kernels, or one of them forced; imported on
first use: triton is an optional dependency). The backends import nothing from each other, from this module or from the
package; this module imports them. The output math that ``outputs.py`` used to hold lives here
because it is the Function's part of the chain rule (o = numerator / denominator), the one thing
both backends take from their caller; a module of its own would only be imported from here.

Memory: the Function saves q, k, v (and the numerator keys under dropout), the output and the
denominator: O(T D) per head. Backward recomputes the states (section 2.5) instead of storing
per-position ones. Accumulation is in float32 or wider: the PyTorch backend computes in float32 or
float64 (``fast_forward`` in ``__init__`` casts), the Triton kernels take float32, bfloat16 or
float16 inputs as they are and accumulate in float32 (``kernels/common.py``).
"""
import torch

from attention.fastmax import chunked

BACKENDS = ("pytorch", "triton", "triton_chunk", "triton_parallel")


def coefficients(p, a0, a1, a2, temperature):
    """(c0, c1, c2) with the temperature folded in: s / T enters as c1 s + c2 s^2 (c2 = 0 for p = 1)."""
    return float(a0), float(a1) / temperature, (float(a2) / temperature ** 2 if p == 2 else 0.0)


def row_counts(rho, causal):
    """Number of allowed keys of every query, (N, T): running sum of rho (causal) or its total."""
    if causal:
        return rho.cumsum(dim=-1)
    return rho.sum(dim=-1, keepdim=True).expand_as(rho)


def output_gradients(grad_out, out, den, rho, causal):
    """The upstream gradients of numerator and denominator (section 2.5): from dL/do (N, T, Dv),
    the output o = numerator / denominator (N, T, Dv) and den (N, T),

        g_i = dL/do_i / den_i (N, T, Dv),  delta_i = (dL/do_i . o_i) / den_i (N, T),

    so that dL/d numerator_i = g_i and dL/d denominator_i = -delta_i. Both are zero on rows
    without an allowed key or with a zero denominator (whose output the backends set to zero)."""
    has_key = (row_counts(rho, causal) > 0) & (den != 0)
    safe = torch.where(has_key, den, torch.ones_like(den))
    g = torch.where(has_key[..., None], grad_out / safe[..., None], 0.0)
    delta = torch.where(has_key, (grad_out * out).sum(-1) / safe, 0.0)
    return g, delta


def backend(name):
    """The backend ``name`` (one of ``BACKENDS``): an object with ``forward`` and ``backward``.

    Raises:
        ValueError: an unknown name.
    """
    if name == "pytorch":
        return chunked
    if name in BACKENDS:
        from attention.fastmax import kernels  # needs triton; CPU tensors need TRITON_INTERPRET=1
        return kernels.backend(name.partition("_")[2] or "auto")
    raise ValueError(f"backend '{name}' unknown; allowed: {', '.join(BACKENDS)}")


class FastmaxFunction(torch.autograd.Function):
    """o = Fastmax(q, k, v) with a backward that recomputes the factorized states (section 2.5).

    forward(q, k, v, k_linear, k_quad_a, k_quad_b, key_weight, causal, coeffs, chunk_size, backend,
            q_scale=None, k_scale=None)

    Args:
        q, k: (B, H, T, D) normalized queries and keys in the working dtype (float32 / float64;
            float32, bfloat16 or float16 for the Triton backends); k zero at padded keys.
        v: (B, H, T, Dv), zero at padded keys.
        k_linear, k_quad_a, k_quad_b: numerator keys like k (dropout), or None (= k). With p = 1
            the quadratic ones are ignored.
        key_weight: (B, T) float, 1 for real and 0 for padded keys, or None (all real).
        causal: bool.
        coeffs: (c0, c1, c2) from ``coefficients``.
        chunk_size: positions per chunk (power of two >= 16 for the Triton backend).
        backend: one of ``BACKENDS``: "pytorch" (``chunked.py``), "triton" (``kernels``, its own
            choice of kernel), "triton_chunk" or "triton_parallel" (that kernel forced).
        q_scale, k_scale: optional (B, H, T) per-position factors; the attention then uses
            q * q_scale and k * k_scale (max_norm's normalization, padded keys' k_scale = 0) without
            materialising them in the forward pass. Only with backend "pytorch" and no dropout.

    Returns:
        (B, H, T, Dv) output in the working dtype; rows with no allowed key or a zero denominator
        are zero (and get zero gradient).

    Raises:
        ValueError: an unknown backend; q_scale / k_scale with the Triton backend or with numerator
            keys; from the Triton backends, inputs of another dtype, separate numerator keys (dropout),
            unsupported head dims or chunk sizes.
    """

    @staticmethod
    def forward(ctx, q, k, v, k_linear, k_quad_a, k_quad_b, key_weight, causal, coeffs, chunk_size, backend_name,
                q_scale=None, k_scale=None):
        B, H, T, D = q.shape
        flat = _Flat(B, H, T)
        # a numerator key that is k itself is passed as None: its gradient is merged into k's
        k_linear, k_quad_a, k_quad_b = [None if t is k else t for t in (k_linear, k_quad_a, k_quad_b)]
        if coeffs[2] == 0.0:
            k_quad_a = k_quad_b = None
        compute = backend(backend_name)
        scales = {}
        if q_scale is not None:
            if backend_name != "pytorch" or any(t is not None for t in (k_linear, k_quad_a, k_quad_b)):
                raise ValueError("q_scale / k_scale need backend='pytorch' and no separate numerator keys (dropout)")
            scales = dict(q_scale=flat.s(q_scale), k_scale=flat.s(k_scale))  # applied block by block
        rho = flat.weights(key_weight, q)
        has_key = row_counts(rho, causal) > 0
        out, den = compute.forward(*[flat.x(t) for t in (q, k, v, k_linear, k_quad_a, k_quad_b)], rho, has_key,
                                   causal, coeffs, chunk_size, **scales)
        ctx.save_for_backward(q, k, v, k_linear, k_quad_a, k_quad_b, key_weight, q_scale, k_scale, out, den)
        ctx.causal, ctx.coeffs, ctx.chunk_size, ctx.backend = causal, coeffs, chunk_size, backend_name
        return flat.unflat(out)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, k_linear, k_quad_a, k_quad_b, key_weight, q_scale, k_scale, out, den = ctx.saved_tensors
        B, H, T, D = q.shape
        flat = _Flat(B, H, T)
        rho = flat.weights(key_weight, q)
        q_raw, k_raw = q, k
        if q_scale is not None:
            q, k = q * q_scale.unsqueeze(-1), k * k_scale.unsqueeze(-1)
        with torch.autocast(device_type=q.device.type, enabled=False):
            g, delta = output_gradients(flat.x(grad_out.to(out.dtype).contiguous()), out, den, rho, ctx.causal)
            grads = backend(ctx.backend).backward(
                g, delta, *[flat.x(t) for t in (q, k, v, k_linear, k_quad_a, k_quad_b)], rho, ctx.causal,
                ctx.coeffs, ctx.chunk_size)
        # gradients of numerator keys passed as None are already part of dk
        grads = [None if g is None else flat.unflat(g) for g in grads]
        scale_grads = [None, None]
        if q_scale is not None:  # q_hat = q * q_scale: chain rule to q and to the scale
            for i, (raw, scale) in enumerate(((q_raw, q_scale), (k_raw, k_scale))):
                scale_grads[i] = torch.linalg.vecdot(grads[i], raw)
                grads[i] = grads[i].mul_(scale.unsqueeze(-1))
        return (*grads, None, None, None, None, None, *scale_grads)


def fastmax_factorized(q, k, v, causal, coeffs, key_weight=None, numerator_keys=(None, None, None),
                       chunk_size=64, backend="pytorch", q_scale=None, k_scale=None):
    """Apply ``FastmaxFunction`` (see there for shapes, dtypes and errors); the entry point of the
    fast paths. numerator_keys = (k_linear, k_quad_a, k_quad_b)."""
    k_linear, k_quad_a, k_quad_b = numerator_keys
    return FastmaxFunction.apply(q, k, v, k_linear, k_quad_a, k_quad_b, key_weight, bool(causal),
                                 tuple(coeffs), int(chunk_size), backend, q_scale, k_scale)


class _Flat:
    """(B, H, T, X) <-> (B*H, T, X) and (B, T) key weights -> (B*H, T)."""

    def __init__(self, B, H, T):
        self.B, self.H, self.T = B, H, T

    def x(self, t):
        return None if t is None else t.reshape(self.B * self.H, self.T, t.shape[-1])

    def s(self, t):
        """(B, H, T) -> (B*H, T)."""
        return None if t is None else t.reshape(self.B * self.H, self.T)

    def unflat(self, t):
        return t.reshape(self.B, self.H, self.T, t.shape[-1])

    def weights(self, key_weight, like):
        if key_weight is None:
            return torch.ones(self.B * self.H, self.T, dtype=like.dtype, device=like.device)
        return key_weight.to(like.dtype)[:, None, :].expand(self.B, self.H, self.T).reshape(self.B * self.H, self.T)
