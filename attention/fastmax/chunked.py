"""Fast PyTorch path of Fastmax and the custom autograd Function shared with the Triton kernels.

Paper: "FAST: Factorizable Attention for Speeding up Transformers", section 2.4 (Eq. 26-35) and
section 2.5 (custom gradients). Inputs here are already normalized (q_hat, k_hat) and padded keys
already zeroed; the temperature is folded into the coefficients: with c0 = a0, c1 = a1 / T,
c2 = a2 / T^2 (T = temperature; c2 = 0 for p = 1) the kernel of a query-key pair is

    denominator:  w_ij  = c0 rho_j + c1 (q_i.k_j) + c2 (q_i.k_j)^2
    numerator:    w~_ij = c0 rho_j + c1 (q_i.kl_j) + c2 (q_i.ka_j)(q_i.kb_j)

where rho_j = 1 for a real key and 0 for a padded one, and kl = ka = kb = k unless dropout is
active (``dropout.numerator_keys``). o_i = sum_j w~_ij v_j / sum_j w_ij over allowed j.

Factorized sums (one batch element and head, "(x)" = outer product, D^2 features flattened):
    x1 = sum_j v_j,  x2 = sum_j kl_j (x) v_j,  x3 = sum_j (ka_j (x) kb_j) (x) v_j    (Eq. 28 / 34)
    y1 = sum_j rho_j, y2 = sum_j k_j,          y3 = sum_j k_j (x) k_j                 (Eq. 29 / 35)
    numerator_i   = c0 x1 + c1 q_i.x2 + c2 (q_i (x) q_i).x3                         (Eq. 26 / 32)
    denominator_i = c0 y1 + c1 q_i.y2 + c2 (q_i (x) q_i).y3                         (Eq. 27 / 33)

Non-causal: the sums run over the whole sequence and are shared by all queries.
Causal: the sequence is cut into chunks of C positions. For a query in chunk c the sums over
earlier chunks come from running states (the prefix sums of Eq. 34-35, kept only at chunk
boundaries), and the keys of its own chunk are handled with explicit C x C scores and a causal
mask. Chunks are processed in groups (vectorized inside a group, sequential across groups) so
that the per-chunk states of a group stay within a fixed memory budget.

Two code paths compute this. Without dropout (kl = ka = kb = k, the common case) the denominator
is the numerator of one more value column, rho, so ``_forward_shared_keys`` and
``_backward_shared_keys`` get numerator and denominator (and their gradients) from the same
products. With dropout the numerator keys differ from k and ``_Chunks`` keeps the two apart. Both
follow the chunking and grouping described above and are tested against the reference.

Memory: the Function saves q, k, v (and the numerator keys under dropout), the output and the
denominator: O(T D) per head, i.e. O(T D^(p-1)) for p = 2, plus transient states of
O(D^p D_v) per chunk of a group. Backward recomputes the states (section 2.5) instead of storing
per-position ones. Accumulation is in float32 or wider (the caller casts).
"""
import torch

from attention.fastmax.outputs import finish_output, output_gradients, row_counts

STATE_BUDGET = 1 << 23  # elements per group of chunks for features and states (32 MB in fp32)
CACHE_BUDGET = 1 << 20  # elements per block of the forward pass without dropout (4 MB in fp32: in L2 / L3)


def coefficients(p, a0, a1, a2, temperature):
    """(c0, c1, c2) with the temperature folded in: s / T enters as c1 s + c2 s^2 (c2 = 0 for p = 1)."""
    return float(a0), float(a1) / temperature, (float(a2) / temperature ** 2 if p == 2 else 0.0)


class FastmaxFunction(torch.autograd.Function):
    """o = Fastmax(q, k, v) with a backward that recomputes the factorized states (section 2.5).

    forward(q, k, v, k_linear, k_quad_a, k_quad_b, key_weight, causal, coeffs, chunk_size, backend)

    Args:
        q, k: (B, H, T, D) normalized queries and keys in the working dtype (float32 / float64);
            k zero at padded keys.
        v: (B, H, T, Dv), zero at padded keys.
        k_linear, k_quad_a, k_quad_b: numerator keys like k (dropout), or None (= k). With p = 1
            the quadratic ones are ignored.
        key_weight: (B, T) float, 1 for real and 0 for padded keys, or None (all real).
        causal: bool.
        coeffs: (c0, c1, c2) from ``coefficients``.
        chunk_size: positions per chunk (power of two >= 16 for the Triton backend).
        backend: "pytorch" (this file) or "triton" (``triton_kernels.py``).
        q_scale, k_scale: optional (B, H, T) per-position factors; the attention then uses
            q * q_scale and k * k_scale (max_norm's normalization, padded keys' k_scale = 0) without
            materialising them in the forward pass. Only with backend "pytorch" and no dropout.

    Returns:
        (B, H, T, Dv) output in the working dtype; rows with no allowed key are zero.
    """

    @staticmethod
    def forward(ctx, q, k, v, k_linear, k_quad_a, k_quad_b, key_weight, causal, coeffs, chunk_size, backend,
                q_scale=None, k_scale=None):
        B, H, T, D = q.shape
        flat = _Flat(B, H, T)
        # a numerator key that is k itself is passed as None: its gradient is merged into k's
        k_linear, k_quad_a, k_quad_b = [None if t is k else t for t in (k_linear, k_quad_a, k_quad_b)]
        if coeffs[2] == 0.0:
            k_quad_a = k_quad_b = None
        scaled = q_scale is not None
        if scaled and (backend != "pytorch" or any(t is not None for t in (k_linear, k_quad_a, k_quad_b))):
            raise ValueError("q_scale / k_scale need backend='pytorch' and no separate numerator keys (dropout)")
        rho = flat.weights(key_weight, q)
        if scaled:  # the scales are applied block by block inside (no scaled copies of q and k)
            out, den = _forward_shared_keys(flat.x(q), flat.x(k), flat.x(v), rho, causal, coeffs, chunk_size,
                                            flat.s(q_scale), flat.s(k_scale))
        else:
            out, den = _backend(backend).forward(*[flat.x(t) for t in (q, k, v, k_linear, k_quad_a, k_quad_b)],
                                                 rho, causal, coeffs, chunk_size)
        ctx.save_for_backward(q, k, v, k_linear, k_quad_a, k_quad_b, key_weight, q_scale, k_scale, out, den)
        ctx.causal, ctx.coeffs, ctx.chunk_size, ctx.backend = causal, coeffs, chunk_size, backend
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
            grads = _backend(ctx.backend).backward(
                flat.x(grad_out.to(out.dtype).contiguous()), *[flat.x(t) for t in (q, k, v, k_linear, k_quad_a, k_quad_b)],
                rho, out, den, ctx.causal, ctx.coeffs, ctx.chunk_size)
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
    """Apply ``FastmaxFunction`` (see there for shapes); the entry point of the fast paths."""
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


def _backend(name):
    if name == "pytorch":
        return _PyTorchBackend
    if name == "triton":
        from attention.fastmax import triton_kernels
        return triton_kernels.TritonBackend
    raise ValueError(f"backend '{name}' unknown; allowed: pytorch, triton")


def _outer(a, b):
    """(..., D), (..., D) -> (..., D*D): the quadratic features a_m b_l, flattened row-major."""
    return (a.unsqueeze(-1) * b.unsqueeze(-2)).flatten(-2)


def _exclusive_prefix(increments, carry):
    """State before each chunk of a group (dim 1): carry + sum of the group's earlier chunks."""
    inclusive = increments.cumsum(dim=1)
    before = torch.cat([torch.zeros_like(inclusive[:, :1]), inclusive[:, :-1]], dim=1)
    return before if carry is None else before + carry.unsqueeze(1)


def _exclusive_suffix(increments, carry):
    """State after each chunk of a group (dim 1): carry + sum of the group's later chunks."""
    return _exclusive_prefix(increments.flip(1), carry).flip(1)


def _scan(states_of_group, groups, reverse=False):
    """Yield (g0, g1, increments, exclusive running states) over the groups of chunks, in order
    (prefix sums, causal queries) or reversed (suffix sums, causal keys)."""
    carry = None
    for g0, g1 in (reversed(list(groups)) if reverse else groups):
        increments = states_of_group(g0, g1)
        shift = _exclusive_suffix if reverse else _exclusive_prefix
        running = {name: shift(value, None if carry is None else carry[name]) for name, value in increments.items()}
        yield g0, g1, running
        sums = {name: value.sum(dim=1) for name, value in increments.items()}
        carry = sums if carry is None else {name: carry[name] + sums[name] for name in sums}


def _totals(states_of_group, groups):
    """Sum of the per-chunk states over all chunks, shaped (N, 1, ...) to broadcast over chunks."""
    totals = None
    for g0, g1 in groups:
        sums = {name: value.sum(dim=1, keepdim=True) for name, value in states_of_group(g0, g1).items()}
        totals = sums if totals is None else {name: totals[name] + sums[name] for name in sums}
    return totals


class _PyTorchBackend:
    """Chunked PyTorch implementation (module docstring). Tensors are (N = B*H, T, X)."""

    @staticmethod
    def forward(q, k, v, kl, ka, kb, rho, causal, coeffs, chunk):
        if kl is None and ka is None and kb is None:
            return _forward_shared_keys(q, k, v, rho, causal, coeffs, chunk)
        ch = _Chunks(q, k, v, kl, ka, kb, rho, chunk, quad=coeffs[2] != 0.0)
        num = q.new_zeros(ch.N, ch.n_chunks, ch.C, ch.Dv)
        den = q.new_zeros(ch.N, ch.n_chunks, ch.C)
        if not causal:
            totals = _totals(ch.key_states, ch.groups())
            for g0, g1 in ch.groups():
                num[:, g0:g1], den[:, g0:g1] = _apply_key_states(ch.get("q", g0, g1), totals, coeffs)
        else:
            for g0, g1, before in _scan(ch.key_states, ch.groups()):
                n_inter, d_inter = _apply_key_states(ch.get("q", g0, g1), before, coeffs)
                n_intra, d_intra = _intra_forward(ch, g0, g1, coeffs)
                num[:, g0:g1], den[:, g0:g1] = n_inter + n_intra, d_inter + d_intra
        num, den = ch.unchunk(num), ch.unchunk(den)
        return finish_output(num, den, rho, causal), den

    @staticmethod
    def backward(grad_out, q, k, v, kl, ka, kb, rho, out, den, causal, coeffs, chunk):
        g, delta = output_gradients(grad_out, out, den, rho, causal)
        if kl is None and ka is None and kb is None:
            return _backward_shared_keys(q, k, v, rho, g, delta, causal, coeffs, chunk)
        ch = _Chunks(q, k, v, kl, ka, kb, rho, chunk, quad=coeffs[2] != 0.0, g=g, delta=delta)
        grads = {name: q.new_zeros(ch.N, ch.n_chunks, ch.C, ch.width(name)) for name in ("q",) + ch.key_names}

        def add(g0, g1, values):
            for name, value in values.items():
                grads[name][:, g0:g1] += value

        if not causal:
            key_totals = _totals(ch.key_states, ch.groups())
            query_totals = _totals(ch.query_states, ch.groups())
            for g0, g1 in ch.groups():
                add(g0, g1, _query_grad(ch, g0, g1, key_totals, coeffs))
                add(g0, g1, _key_grads(ch, g0, g1, query_totals, coeffs))
        else:
            for g0, g1, before in _scan(ch.key_states, ch.groups()):  # earlier chunks' keys
                add(g0, g1, _query_grad(ch, g0, g1, before, coeffs))
                add(g0, g1, _intra_backward(ch, g0, g1, coeffs))
            for g0, g1, after in _scan(ch.query_states, ch.groups(), reverse=True):  # later queries
                add(g0, g1, _key_grads(ch, g0, g1, after, coeffs))
        full = {name: ch.unchunk(value) for name, value in grads.items()}
        return full["q"], full["k"], full["v"], full.get("kl"), full.get("ka"), full.get("kb")


def _forward_shared_keys(q, k, v, rho, causal, coeffs, chunk, q_scale=None, k_scale=None):
    """Forward pass when the numerator keys are k itself (no dropout): (out (N, T, Dv), den (N, T)).

    The denominator is the numerator of one more value column, rho: k and v are zero at padded
    keys, so sum_j w_ij [v_j, rho_j] = [numerator_i, denominator_i] (the c0 term included). Every
    product then yields both at once. The queries are processed in blocks of about
    CACHE_BUDGET elements for p = 1 (non-causal: slices of positions; causal: groups of chunks) that
    go from the inputs to the finished output block, so the intermediates stay in the CPU cache
    and the time per token does not grow once the sequence no longer fits in it (p = 2: blocks of
    STATE_BUDGET, whose D^2 features exceed the cache anyway). Optional per-position scales
    q_scale, k_scale (N, T) are applied inside the blocks (q_hat = q * q_scale, k_hat = k * k_scale).
    """
    c0, c1, c2 = coeffs
    quad = c2 != 0.0
    N, T, D = q.shape
    Dv = v.shape[-1]
    feature = D * D if quad else D
    has_key = row_counts(rho, causal) > 0
    if not causal:
        out, den = q.new_empty(N, T, Dv), q.new_empty(N, T)
        rows = max(1, (STATE_BUDGET if quad else CACHE_BUDGET) // max(1, N * (2 * feature + 2 * (Dv + 1))))
        slices = [(t0, min(T, t0 + rows)) for t0 in range(0, T, rows)]
        x1 = torch.cat([v.sum(1), rho.sum(1, keepdim=True)], dim=-1).unsqueeze(1)  # (N, 1, Dv + 1)
        x2 = q.new_zeros(N, D, Dv + 1)  # sum_j k_j (x) [v_j, rho_j]
        x3 = q.new_zeros(N, feature, Dv + 1) if quad else None  # sum_j (k_j (x) k_j) (x) [v_j, rho_j]
        for t0, t1 in slices:
            kt, vt = _scaled(k, k_scale, t0, t1), torch.cat([v[:, t0:t1], rho[:, t0:t1, None]], -1)
            x2.baddbmm_(kt.transpose(1, 2), vt)
            if quad:
                x3.baddbmm_(_outer(kt, kt).transpose(1, 2), vt)
        for t0, t1 in slices:
            qt = _scaled(q, q_scale, t0, t1)
            n = torch.baddbmm(x1, qt, x2, beta=c0, alpha=c1)
            if quad:
                n.baddbmm_(_outer(qt, qt), x3, alpha=c2)
            _finish_block(n, has_key[:, t0:t1], out[:, t0:t1], den[:, t0:t1])
        return out, den

    C = int(chunk)
    n_chunks = max(1, -(-T // C))
    pad = n_chunks * C - T
    q_scale = torch.ones_like(rho) if q_scale is None else q_scale
    k_scale = torch.ones_like(rho) if k_scale is None else k_scale
    if pad:  # padded positions have k = v = rho = 0: they add nothing; their rows are cut below
        q, k, v, rho, has_key, q_scale, k_scale = (
            torch.nn.functional.pad(t, (0, 0, 0, pad) if t.dim() == 3 else (0, pad))
            for t in (q, k, v, rho, has_key, q_scale, k_scale))
    q, k, v = (t.reshape(N, n_chunks, C, t.shape[-1]) for t in (q, k, v))
    rho, has_key, q_scale, k_scale = (t.reshape(N, n_chunks, C) for t in (rho, has_key, q_scale, k_scale))
    out, den = q.new_empty(N, n_chunks, C, Dv), q.new_empty(N, n_chunks, C)
    per_chunk = N * (3 * C * feature + 2 * feature * (Dv + 1) + 2 * C * C + 3 * C * (Dv + 1))
    # p = 2's D^2 features of a chunk do not fit in the cache anyway: fewer, larger groups
    group = max(1, min(n_chunks, (STATE_BUDGET if quad else CACHE_BUDGET) // max(1, per_chunk)))
    future = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)
    carry = None  # sums over the keys of all earlier groups: x1 (N, Dv+1), x2 (N, D, Dv+1), x3
    for g0 in range(0, n_chunks, group):
        g1 = min(n_chunks, g0 + group)
        qg, kg = _scaled(q, q_scale, g0, g1), _scaled(k, k_scale, g0, g1)
        vg = torch.cat([v[:, g0:g1], rho[:, g0:g1, :, None]], dim=-1)  # (N, G, C, Dv + 1)
        states = [vg.sum(-2), kg.transpose(-1, -2) @ vg]  # per-chunk sums (Eq. 34-35)
        if quad:
            states.append(_outer(kg, kg).transpose(-1, -2) @ vg)
        # exclusive prefix sums, the state before each chunk (a shifted cumsum, not cumsum - x, so that
        # no rounding of a chunk's own keys reaches its earlier queries)
        before = [_exclusive_prefix(x, None if carry is None else carry[i]) for i, x in enumerate(states)]
        carry = [b[:, -1] + x[:, -1] for b, x in zip(before, states)]
        n = (qg @ before[1]).mul_(c1).add_(before[0].unsqueeze(-2), alpha=c0)  # earlier chunks
        if quad:
            n.add_(_outer(qg, qg) @ before[2], alpha=c2)
        s = qg @ kg.transpose(-1, -2)  # own chunk: explicit C x C weights, causal mask
        w = s.mul(c2).add_(c1).mul_(s).add_(c0) if quad else s.mul_(c1).add_(c0)
        n += w.masked_fill_(future, 0.0) @ vg
        _finish_block(n, has_key[:, g0:g1], out[:, g0:g1], den[:, g0:g1])
    unchunk = lambda t: t.reshape(N, n_chunks * C, *t.shape[3:])[:, :T]  # noqa: E731
    return unchunk(out), unchunk(den)


def _scaled(x, scale, i0, i1):
    """x[:, i0:i1] times scale[:, i0:i1] broadcast over the last dim (a view when scale is None)."""
    return x[:, i0:i1] if scale is None else x[:, i0:i1] * scale[:, i0:i1].unsqueeze(-1)


def _finish_block(n, has_key, out, den):
    """Split [numerator, denominator] n (..., Dv + 1) into the views out (..., Dv) = numerator /
    denominator (zero on rows without an allowed key or with a zero denominator) and den (...)."""
    den.copy_(n[..., -1])
    scale = torch.where(has_key & (den != 0), den.reciprocal(), 0.0)
    torch.mul(n[..., :-1], scale.unsqueeze(-1), out=out)


def _position_sums(x, y, quad):
    """Sums over positions (dim -2) of y, x (x) y and, for p = 2, (x (x) x) (x) y: [(.., Y),
    (.., D, Y), (.., D*D, Y)]. With x = k, y = [v, rho] these are the key states of Eq. 34-35;
    with x = q, y = the output gradients they are the query states of the key gradients."""
    sums = [y.sum(-2), x.transpose(-1, -2) @ y]
    if quad:
        sums.append(_outer(x, x).transpose(-1, -2) @ y)
    return sums


def _grad_through_sums(x, y, sums, coeffs, with_constant):
    """Gradients of positions (x_i, y_i) whose outputs are n_i = sum_j w(x_i . x'_j) y'_j with
    the sums of the other side (``_position_sums(x', y')``), w(s) = c0 + c1 s + c2 s^2, for the
    upstream gradient y_i of n_i: dL/dx_i = sum_j w'(s_ij) (y_i . y'_j) x'_j, and with
    ``with_constant`` also sum_j w(s_ij) y'_j (the gradient of the values; y, x swap roles).
    Shapes: x (.., L, D), y (.., L, Y); returns dx (.., L, D) and the second result or None."""
    c0, c1, c2 = coeffs
    D = x.shape[-1]
    dx = (y @ sums[1].transpose(-1, -2)).mul_(c1)
    other = (x @ sums[1]).mul_(c1).add_(sums[0].unsqueeze(-2), alpha=c0) if with_constant else None
    if len(sums) == 3:
        m = (y @ sums[2].transpose(-1, -2)).unflatten(-1, (D, D))  # sum_j x'_j (x) x'_j (y_i . y'_j)
        dx.add_((m @ x.unsqueeze(-1)).squeeze(-1), alpha=2 * c2)
        if with_constant:
            other.add_(_outer(x, x) @ sums[2], alpha=c2)
    return dx, other


def _backward_shared_keys(q, k, v, rho, g, delta, causal, coeffs, chunk):
    """Gradients (dq, dk, dv, None, None, None) of ``_forward_shared_keys`` from g, delta
    (``output_gradients``): the upstream gradient of [numerator_i, denominator_i] is
    ga_i = [g_i, -delta_i], against the values va_j = [v_j, rho_j]. For every allowed pair,
    with P_ij = ga_i . va_j and w(s) = c0 + c1 s + c2 s^2:
        dq_i = sum_j w'(s_ij) P_ij k_j,  dk_j = sum_i w'(s_ij) P_ij q_i,  dva_j = sum_i w(s_ij) ga_i,
    factorized over the key states (queries) and the query states (keys), section 2.5: the states
    are recomputed here, per chunk, instead of being stored by the forward pass."""
    c0, c1, c2 = coeffs
    quad = c2 != 0.0
    N, T, D = q.shape
    Dv = v.shape[-1]
    va = torch.cat([v, rho.unsqueeze(-1)], dim=-1)
    ga = torch.cat([g, -delta.unsqueeze(-1)], dim=-1)
    feature = D * D if quad else D
    if not causal:
        rows = max(1, STATE_BUDGET // max(1, 3 * N * feature))
        slices = [(t0, min(T, t0 + rows)) for t0 in range(0, T, rows)]
        key_sums = query_sums = None
        for t0, t1 in slices:
            ks, qs = _position_sums(k[:, t0:t1], va[:, t0:t1], quad), _position_sums(q[:, t0:t1], ga[:, t0:t1], quad)
            key_sums = ks if key_sums is None else [a + b for a, b in zip(key_sums, ks)]
            query_sums = qs if query_sums is None else [a + b for a, b in zip(query_sums, qs)]
        dq, dk, dva = torch.empty_like(q), torch.empty_like(k), torch.empty_like(va)
        for t0, t1 in slices:
            dq[:, t0:t1] = _grad_through_sums(q[:, t0:t1], ga[:, t0:t1], key_sums, coeffs, False)[0]
            dk[:, t0:t1], dva[:, t0:t1] = _grad_through_sums(k[:, t0:t1], va[:, t0:t1], query_sums, coeffs, True)
        return dq, dk, dva[..., :Dv], None, None, None

    C = int(chunk)
    n_chunks = max(1, -(-T // C))
    pad = n_chunks * C - T
    if pad:  # padded positions: k = va = 0 and ga = 0; their gradient rows are cut below
        q, k, va, ga = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k, va, ga))
    q, k, va, ga = (t.reshape(N, n_chunks, C, t.shape[-1]) for t in (q, k, va, ga))
    per_chunk = N * (6 * C * feature + 3 * feature * (Dv + 1) + 4 * C * C + 2 * C * (Dv + 1))
    group = max(1, min(n_chunks, STATE_BUDGET // max(1, per_chunk)))
    groups = [(g0, min(n_chunks, g0 + group)) for g0 in range(0, n_chunks, group)]
    future = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)
    dq, dk, dva = torch.empty_like(q), torch.empty_like(k), torch.empty_like(va)

    def exclusive(sums, carry, reverse):
        """State before (after, when reverse) each chunk of a group, plus the new carry."""
        shift = _exclusive_suffix if reverse else _exclusive_prefix
        states = [shift(x, None if carry is None else carry[i]) for i, x in enumerate(sums)]
        edge = 0 if reverse else -1
        return states, [b[:, edge] + x[:, edge] for b, x in zip(states, sums)]

    carry = None  # queries against the keys of earlier chunks, and the chunk's own keys
    for g0, g1 in groups:
        qg, kg, vg, gg = q[:, g0:g1], k[:, g0:g1], va[:, g0:g1], ga[:, g0:g1]
        before, carry = exclusive(_position_sums(kg, vg, quad), carry, reverse=False)
        dq_g = _grad_through_sums(qg, gg, before, coeffs, False)[0]
        s = qg @ kg.transpose(-1, -2)
        w = s.mul(c2).add_(c1).mul_(s).add_(c0) if quad else s.mul(c1).add_(c0)
        w.masked_fill_(future, 0.0)
        ds = (gg @ vg.transpose(-1, -2)).masked_fill_(future, 0.0)  # P_ij
        ds.mul_(s.mul_(2 * c2).add_(c1)) if quad else ds.mul_(c1)  # w'(s_ij) P_ij
        dq[:, g0:g1] = dq_g.add_(ds @ kg)
        dk[:, g0:g1] = ds.transpose(-1, -2) @ qg
        dva[:, g0:g1] = w.transpose(-1, -2) @ gg
    carry = None  # keys against the queries of later chunks
    for g0, g1 in reversed(groups):
        qg, kg, vg, gg = q[:, g0:g1], k[:, g0:g1], va[:, g0:g1], ga[:, g0:g1]
        after, carry = exclusive(_position_sums(qg, gg, quad), carry, reverse=True)
        dk_g, dva_g = _grad_through_sums(kg, vg, after, coeffs, True)
        dk[:, g0:g1] += dk_g
        dva[:, g0:g1] += dva_g
    unchunk = lambda t: t.reshape(N, n_chunks * C, t.shape[-1])[:, :T]  # noqa: E731
    return unchunk(dq), unchunk(dk), unchunk(dva)[..., :Dv], None, None, None


class _Chunks:
    """Inputs padded to a multiple of the chunk size C and viewed as (N, n_chunks, C, X).

    ``key_names`` are the tensors that receive key-side gradients: "k", "v", and "kl" / "ka" /
    "kb" only when they are separate tensors (dropout); otherwise ``get`` returns k for them and
    their gradients are merged into k's.
    """

    def __init__(self, q, k, v, kl, ka, kb, rho, chunk, quad, g=None, delta=None):
        self.N, self.T, self.D = q.shape
        self.Dv = v.shape[-1]
        self.C = int(chunk)
        self.quad = bool(quad)
        self.n_chunks = max(1, -(-self.T // self.C))
        self.Tp = self.n_chunks * self.C
        tensors = {"q": q, "k": k, "v": v, "rho": rho}
        separate = [name for name, t in (("kl", kl), ("ka", ka), ("kb", kb))
                    if t is not None and t is not k and (name == "kl" or self.quad)]
        tensors.update({name: t for name, t in (("kl", kl), ("ka", ka), ("kb", kb)) if name in separate})
        if g is not None:
            tensors["g"], tensors["delta"] = g, delta
        self.key_names = ("k", "v") + tuple(separate)
        self.chunked = {name: self._chunk(t) for name, t in tensors.items()}
        feature = self.D * self.D if self.quad else self.D
        per_chunk = self.N * (4 * self.C * feature + 4 * feature * self.Dv + 8 * self.C * self.C)
        self.group = max(1, min(self.n_chunks, STATE_BUDGET // max(1, per_chunk)))
        self.tril = torch.ones(self.C, self.C, dtype=q.dtype, device=q.device).tril()

    def _chunk(self, t):
        pad = self.Tp - self.T
        if pad:  # padded positions have rho = 0, k = v = 0: they add nothing; their rows are cut
            t = torch.nn.functional.pad(t, (0, 0, 0, pad) if t.dim() == 3 else (0, pad))
        return t.reshape(self.N, self.n_chunks, self.C, *t.shape[2:])

    def separate(self, name):
        return name in self.chunked

    def width(self, name):
        return self.Dv if name == "v" else self.D

    def get(self, name, g0, g1):
        return self.chunked[name if name in self.chunked else "k"][:, g0:g1]

    def groups(self):
        return [(g0, min(self.n_chunks, g0 + self.group)) for g0 in range(0, self.n_chunks, self.group)]

    def unchunk(self, t):
        return t.reshape(self.N, self.Tp, *t.shape[3:])[:, :self.T]

    def key_states(self, g0, g1):
        """Per-chunk sums over keys (Eq. 28-29 restricted to a chunk), each (N, G, ...)."""
        k, v, rho = self.get("k", g0, g1), self.get("v", g0, g1), self.get("rho", g0, g1)
        states = {"y1": rho.sum(-1), "x1": v.sum(-2), "y2": k.sum(-2),
                  "x2": self.get("kl", g0, g1).transpose(-1, -2) @ v}
        if self.quad:
            states["y3"] = _outer(k, k).sum(-2)
            states["x3"] = _outer(self.get("ka", g0, g1), self.get("kb", g0, g1)).transpose(-1, -2) @ v
        return states

    def query_states(self, g0, g1):
        """Per-chunk sums over queries for the key gradients, each (N, G, ...):
        u0 = sum g_i, r1 = sum delta_i q_i, R1 = sum q_i (x) g_i, and for p = 2
        r2 = sum delta_i q_i (x) q_i, R2 = sum (q_i (x) q_i) (x) g_i."""
        q, g, delta = self.get("q", g0, g1), self.get("g", g0, g1), self.get("delta", g0, g1)
        states = {"u0": g.sum(-2), "r1": (delta.unsqueeze(-1) * q).sum(-2), "R1": q.transpose(-1, -2) @ g}
        if self.quad:
            q2 = _outer(q, q)
            states["r2"] = (delta.unsqueeze(-1) * q2).sum(-2)
            states["R2"] = q2.transpose(-1, -2) @ g
        return states


def _apply_key_states(q, st, coeffs):
    """Numerator (N, G, C, Dv) and denominator (N, G, C) of queries q (N, G, C, D) against the
    key sums st (Eq. 26-27 / 32-33)."""
    c0, c1, c2 = coeffs
    num = c0 * st["x1"].unsqueeze(-2) + c1 * (q @ st["x2"])
    den = c0 * st["y1"].unsqueeze(-1) + c1 * (q @ st["y2"].unsqueeze(-1)).squeeze(-1)
    if "x3" in st:
        q2 = _outer(q, q)
        num = num + c2 * (q2 @ st["x3"])
        den = den + c2 * (q2 @ st["y3"].unsqueeze(-1)).squeeze(-1)
    return num, den


def _intra_scores(ch, g0, g1, coeffs):
    """Explicit C x C quantities of the chunks' own keys: dict with q, s (denominator scores),
    the numerator's score factors, and the causal-masked weights w (denominator), w_num."""
    c0, c1, c2 = coeffs
    q, k = ch.get("q", g0, g1), ch.get("k", g0, g1)
    s = q @ k.transpose(-1, -2)
    sl = q @ ch.get("kl", g0, g1).transpose(-1, -2) if ch.separate("kl") else s
    base = c0 * ch.get("rho", g0, g1).unsqueeze(-2)
    w = (base + c1 * s + (c2 * s * s if ch.quad else 0.0)) * ch.tril
    out = {"q": q, "s": s, "sl": sl, "w": w}
    w_num = base + c1 * sl
    if ch.quad:
        sa = q @ ch.get("ka", g0, g1).transpose(-1, -2) if ch.separate("ka") else s
        sb = q @ ch.get("kb", g0, g1).transpose(-1, -2) if ch.separate("kb") else s
        w_num = w_num + c2 * sa * sb
        out["sa"], out["sb"] = sa, sb
    out["w_num"] = w_num * ch.tril
    return out


def _intra_forward(ch, g0, g1, coeffs):
    sc = _intra_scores(ch, g0, g1, coeffs)
    return sc["w_num"] @ ch.get("v", g0, g1), sc["w"].sum(-1)


def _merge(ch, grads, name, value):
    """Add a gradient of key tensor ``name`` into k's when that tensor is k itself."""
    target = name if ch.separate(name) else "k"
    grads[target] = value if target not in grads else grads[target] + value


def _intra_backward(ch, g0, g1, coeffs):
    """Gradients from the explicit within-chunk part (causal only)."""
    c0, c1, c2 = coeffs
    sc = _intra_scores(ch, g0, g1, coeffs)
    q, g, delta, v = sc["q"], ch.get("g", g0, g1), ch.get("delta", g0, g1), ch.get("v", g0, g1)
    p_num = (g @ v.transpose(-1, -2)) * ch.tril  # dL/dw_num_ij = g_i . v_j
    score_grads = {}  # dL/d(score matrix) per key tensor
    _merge(ch, score_grads, "k", -delta.unsqueeze(-1) * (c1 + 2 * c2 * sc["s"]) * ch.tril)
    _merge(ch, score_grads, "kl", c1 * p_num)
    if ch.quad:
        _merge(ch, score_grads, "ka", c2 * p_num * sc["sb"])
        _merge(ch, score_grads, "kb", c2 * p_num * sc["sa"])
    grads = {"v": sc["w_num"].transpose(-1, -2) @ g, "q": 0.0}
    for name, ds in score_grads.items():
        grads["q"] = grads["q"] + ds @ ch.get(name, g0, g1)
        grads[name] = ds.transpose(-1, -2) @ q
    return grads


def _query_grad(ch, g0, g1, st, coeffs):
    """dL/dq from the key sums st of the keys outside the chunk (all keys when non-causal)."""
    c0, c1, c2 = coeffs
    q, g, delta = ch.get("q", g0, g1), ch.get("g", g0, g1), ch.get("delta", g0, g1)
    dq = c1 * (g @ st["x2"].transpose(-1, -2)) - c1 * delta.unsqueeze(-1) * st["y2"].unsqueeze(-2)
    if ch.quad:
        D = ch.D
        x = (g @ st["x3"].transpose(-1, -2)).unflatten(-1, (D, D))  # sum_j x3[m, l, j] g_j
        dq = dq + c2 * ((x @ q.unsqueeze(-1)).squeeze(-1) + (q.unsqueeze(-2) @ x).squeeze(-2))
        dq = dq - 2 * c2 * delta.unsqueeze(-1) * (q @ st["y3"].unflatten(-1, (D, D)))
    return {"q": dq}


def _key_grads(ch, g0, g1, st, coeffs):
    """dL/dk, dL/dv (and numerator keys) from the query sums st of the queries outside the chunk."""
    c0, c1, c2 = coeffs
    k, v, rho = ch.get("k", g0, g1), ch.get("v", g0, g1), ch.get("rho", g0, g1)
    kl = ch.get("kl", g0, g1)
    grads = {"v": c0 * rho.unsqueeze(-1) * st["u0"].unsqueeze(-2) + c1 * (kl @ st["R1"]),
             "k": -c1 * st["r1"].unsqueeze(-2).expand_as(k)}
    _merge(ch, grads, "kl", c1 * (v @ st["R1"].transpose(-1, -2)))
    if ch.quad:
        D = ch.D
        ka, kb = ch.get("ka", g0, g1), ch.get("kb", g0, g1)
        y = (v @ st["R2"].transpose(-1, -2)).unflatten(-1, (D, D))  # sum_j R2[m, l, j] v_j
        grads["v"] = grads["v"] + c2 * (_outer(ka, kb) @ st["R2"])
        grads["k"] = grads["k"] - 2 * c2 * (k @ st["r2"].unflatten(-1, (D, D)))
        _merge(ch, grads, "ka", c2 * (y @ kb.unsqueeze(-1)).squeeze(-1))
        _merge(ch, grads, "kb", c2 * (ka.unsqueeze(-2) @ y).squeeze(-2))
    return grads
