"""Triton kernels of Fastmax: forward and backward, causal and not, chunked, float32 accumulation.

The backend "triton" of ``function.FastmaxFunction``: ``forward`` and ``backward`` have the
interface described in ``function.py``, whose docstring has the mathematics and notation (read it
first): inputs are (N = B*H, T, D) float32 tensors, already normalized, padded keys zeroed; c0,
c1, c2 carry the temperature. Any T (the last chunk is masked); D and Dv in {16, 32, 64, 128};
the chunk size BT is a power of two >= 16. Under ``TRITON_INTERPRET=1`` (set before this module is
imported) they run on CPU tensors, which is how the tests check them against the reference.
Paper: "FAST: Factorizable Attention for Speeding up Transformers", sections 2.4 (Eq. 26-35)
and 2.5.

Work decomposition: one program per (batch*head n, value block of BV columns), walking over the
chunks of the sequence in order (causal forward and dq), in reverse (causal key gradients) or
twice (non-causal: first the sums over the whole sequence, then the outputs). States live in
registers except the quadratic ones (D x D x BV and D x D per program), which live in a float32
scratch buffer in global memory and are visited one row m at a time:

    sum_{m,l} q_m q_l x3[m, l, :]  =  sum_m  (q_m q) @ x3[m]          (x3[m] is D x BV)

Every kernel adds a chunk to such a row through ``_add_quadratic_row`` (the one copy of that
update: key states x3, y3 in the forward and dq kernels, query states R2, S2 in the dk / dv one),
and a chunk of keys to the other key states through ``_add_key_chunk``.

Backward (section 2.5) recomputes the states from the saved q, k, v, output and denominator:
- ``_dq_kernel``: prefix key states, dL/dq (a partial sum per value block, added afterwards);
- ``_dkv_kernel``: suffix query states u0 = sum g, R1 = sum q (x) g, R2 = sum (q (x) q) (x) g and
  (first value block) r1 = sum delta q, r2 = sum delta q (x) q; dL/dv per value block and
  partial dL/dk (and the numerator keys under dropout).
with g_i = dL/do_i / den_i and delta_i = (dL/do_i . o_i) / den_i from
``function.output_gradients``. Terms that do not depend on the value block (the denominator's)
are added by value block 0 only.
"""
import torch
import triton
import triton.language as tl

BLOCK_V = 64  # value columns per program (fewer when Dv is smaller)
# Runtime integers Triton would otherwise specialize on (a value of 1, divisibility by 16): one
# compiled kernel per constexpr set, whatever the sequence length (compilation takes seconds to a
# minute per kernel at D = 128). Alignment is not lost: offsets are multiples of the constexpr D.
UNSPECIALIZED = ["T", "n_chunks"]

# Shared memory per block that a launch needs, as ptxas reported it for the p = 1 causal forward
# and the p = 2 key/value backward (Triton 3.9 compiled offline for sm_80/86/90): 115,200 B at
# D = Dv = 64 and 197,120 B at D = Dv = 128, chunk 64, float32. Both fit
# 4 * (5 * BT * D + 2 * BT^2 + 2 * BT) bytes: five chunk x D tiles, two chunk x chunk score
# tiles and two chunk vectors staged in shared memory. It is an estimate for the launch check
# below, and an underestimate for the p = 1 causal backward kernels (dq 147,968 B and dkv 148,480 B
# at D = 64, 229,888 and 230,400 B at D = 128, chunk 64; Triton 3.6 and 3.9 alike, sm_90;
# docs/gpu.md has the table). The compiled kernel's own number, ``metadata.shared``, is exact:
# ``_launch`` turns Triton's OutOfResources into the same kind of error with it.
SHARED_MEMORY_LIMITS = {"sm_80 (A100)": 166_912, "sm_86": 101_376, "sm_89": 101_376, "sm_90 (H100)": 232_448}


def shared_memory_bytes(chunk, D, Dv=None, element_bytes=4):
    """Estimated shared memory (bytes) per block of the largest Fastmax kernel launched with
    chunk size ``chunk`` (BT) and head dims D, Dv (float32 elements by default); see the note at
    ``SHARED_MEMORY_LIMITS``."""
    width = max(D, Dv or D)
    return element_bytes * (5 * chunk * width + 2 * chunk * chunk + 2 * chunk)


def check_shared_memory(chunk, D, Dv, limit_bytes, device="the device"):
    """Refuse a launch that needs more shared memory per block than ``limit_bytes`` (the device's
    opt-in maximum, e.g. 101,376 B on sm_86, 166,912 B on an A100).

    Raises:
        ValueError: names the need, the limit, and the chunk sizes that fit (or the PyTorch path).
    """
    need = shared_memory_bytes(chunk, D, Dv)
    if need <= limit_bytes:
        return need
    fits = [c for c in (16, 32, 64, 128) if shared_memory_bytes(c, D, Dv) <= limit_bytes]
    hint = f"chunk_size={max(fits)} fits" if fits else "no chunk size fits"
    raise ValueError(f"fastmax Triton kernels at chunk_size={chunk}, head dim {max(D, Dv or D)} need about "
                     f"{need:,} B of shared memory per block; {device} allows {limit_bytes:,} B. {hint}; or use "
                     f"implementation='pytorch'")


def device_shared_memory_limit(device):
    """The opt-in shared memory per block of a CUDA ``device`` (bytes), or None if unknown."""
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "shared_memory_per_block_optin", None) or getattr(props, "shared_memory_per_block", None)


# What the compiled kernels launched in this process need: (kernel name, D, DV, BT, CAUSAL, QUAD,
# SEPARATE) -> shared memory per block in bytes, the compiled kernel's own ``metadata.shared``
# (CUDA launches only; the interpreter compiles nothing). tests/gpu/ compare it with the estimate.
COMPILED_SHARED_MEMORY = {}


def _launch(kernel, grid, *args, **meta):
    """``kernel[grid](*args, **meta)``, recording the compiled kernel's shared memory per block
    (``COMPILED_SHARED_MEMORY``).

    Raises:
        ValueError: the compiled kernel needs more shared memory per block than the device allows
            (Triton's ``OutOfResources`` at launch, which the estimate of ``check_shared_memory``
            did not foresee: it is an estimate); the message names the kernel, the need, the
            limit and what to change.
    """
    try:
        compiled = kernel[grid](*args, **meta)
    except triton.runtime.errors.OutOfResources as exc:
        if exc.name != "shared memory":
            raise
        raise ValueError(f"fastmax Triton kernel {kernel.__name__} at chunk_size={meta['BT']}, head dims "
                         f"{meta['D']}/{meta['DV']} needs {exc.required:,} B of shared memory per block; the device "
                         f"allows {exc.limit:,} B. Use a smaller chunk_size or implementation='pytorch'") from exc
    shared = getattr(getattr(compiled, "metadata", None), "shared", None)
    if shared is not None:
        key = (kernel.__name__, *(meta[k] for k in ("D", "DV", "BT", "CAUSAL", "QUAD", "SEPARATE")))
        COMPILED_SHARED_MEMORY[key] = int(shared)
    return compiled


@triton.jit
def _tile(base, rows, row_mask, cols, width):
    """rows x cols block of a row-major (T, width) matrix, zero outside the sequence."""
    return tl.load(base + rows[:, None] * width + cols[None, :], mask=row_mask[:, None], other=0.0)


@triton.jit
def _column(base, rows, row_mask, col, width):
    return tl.load(base + rows * width + col, mask=row_mask, other=0.0)


@triton.jit
def _store_tile(base, rows, row_mask, cols, width, value):
    tl.store(base + rows[:, None] * width + cols[None, :], value, mask=row_mask[:, None])


@triton.jit
def _program(X3, Y3, D: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):
    """This program's batch*head n (int64: n * T * D may pass 2^31), value block iv, offsets of
    the chunk's rows, of D and of its value columns, and its scratch rows: pointers to row 0 of
    the (D, D, BV) and (D, D) quadratic states (row m at + m * D * BV and + m * D)."""
    n = tl.program_id(0).to(tl.int64)
    iv = tl.program_id(1)
    scratch = n * tl.num_programs(1) + iv
    offs_d = tl.arange(0, D)
    offs_b = tl.arange(0, BV)
    x3_ptrs = X3 + scratch * D * D * BV + offs_d[:, None] * BV + offs_b[None, :]
    return n, iv, tl.arange(0, BT), offs_d, iv * BV + offs_b, x3_ptrs, Y3 + scratch * D * D + offs_d


@triton.jit
def _add_quadratic_row(x3_ptrs, y3_ptrs, x3m, y3m, a_m, b, values, w_m, c):
    """Add one chunk to row m of a pair of quadratic states (loaded as x3m, y3m), in place:

        x3[m] += sum_rows (a_m b) (x) values   (D x BV),     y3[m] += sum_rows w_m c   (D)

    Key states (Eq. 34-35): a, b = ka, kb (= k without dropout), values = v, w = c = k, so that
    x3 = sum (ka (x) kb) (x) v and y3 = sum k (x) k. Query states of the key gradients: a = b = q,
    values = g, w = delta q, c = q (R2 = sum (q (x) q) (x) g, r2 = sum delta q (x) q)."""
    tl.store(x3_ptrs, x3m + tl.dot(tl.trans(a_m[:, None] * b), values, input_precision="ieee"))
    tl.store(y3_ptrs, y3m + tl.sum(w_m[:, None] * c, 0))


@triton.jit
def _add_key_quadratic_row(x3_ptrs, y3_ptrs, x3m, y3m, k_base, ka_base, rows, rmask, m, k, kb, v,
                           D: tl.constexpr, SEPARATE: tl.constexpr):
    """``_add_quadratic_row`` for the key states of a chunk (k, kb: BT x D tiles, v: BT x BV)."""
    km = _column(k_base, rows, rmask, m, D)
    kam = _column(ka_base, rows, rmask, m, D) if SEPARATE else km
    _add_quadratic_row(x3_ptrs, y3_ptrs, x3m, y3m, kam, kb, v, km, k)


@triton.jit
def _key_chunk(k_base, kl_base, ka_base, kb_base, v_base, rho_base, rows, rmask, offs_d, offs_v,
               D: tl.constexpr, DV: tl.constexpr, QUAD: tl.constexpr, SEPARATE: tl.constexpr):
    """The tiles of one chunk of keys: k, kl, ka, kb (BT x D; k itself without dropout), v (BT x BV), rho (BT)."""
    k = _tile(k_base, rows, rmask, offs_d, D)
    kl = _tile(kl_base, rows, rmask, offs_d, D) if SEPARATE else k
    ka = _tile(ka_base, rows, rmask, offs_d, D) if SEPARATE and QUAD else k
    kb = _tile(kb_base, rows, rmask, offs_d, D) if SEPARATE and QUAD else k
    v = _tile(v_base, rows, rmask, offs_v, DV)
    return k, kl, ka, kb, v, tl.load(rho_base + rows, mask=rmask, other=0.0)


@triton.jit
def _add_key_chunk(x1, y1, x2, y2, k, kl, v, rho):
    """The linear key states after one more chunk: x1 += sum v, y1 += sum rho, x2 += sum kl (x) v,
    y2 += sum k (Eq. 34-35)."""
    x2 += tl.dot(tl.trans(kl), v, input_precision="ieee")
    y2 += tl.sum(k, 0)
    x1 += tl.sum(v, 0)
    y1 += tl.sum(rho, 0)
    return x1, y1, x2, y2


@triton.jit
def _key_sums(k_base, kl_base, ka_base, kb_base, v_base, rho_base, x3_ptrs, y3_ptrs, T, n_chunks, offs_c, offs_d,
              offs_v, D: tl.constexpr, DV: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, QUAD: tl.constexpr,
              SEPARATE: tl.constexpr):
    """Non-causal first pass: the key states over the whole sequence, (x1, y1, x2, y2) returned and
    x3, y3 (QUAD) added to the scratch rows."""
    x2 = tl.zeros((D, BV), dtype=tl.float32)  # sum kl (x) v  (Eq. 28 / 34)
    y2 = tl.zeros((D,), dtype=tl.float32)  # sum k      (Eq. 29 / 35)
    x1 = tl.zeros((BV,), dtype=tl.float32)  # sum v
    y1 = tl.zeros((1,), dtype=tl.float32)  # number of real keys
    for c in range(0, n_chunks):
        rows = c * BT + offs_c
        rmask = rows < T
        k, kl, ka, kb, v, rho = _key_chunk(k_base, kl_base, ka_base, kb_base, v_base, rho_base, rows, rmask, offs_d,
                                           offs_v, D, DV, QUAD, SEPARATE)
        x1, y1, x2, y2 = _add_key_chunk(x1, y1, x2, y2, k, kl, v, rho)
        if QUAD:
            for m in range(D):
                _add_key_quadratic_row(x3_ptrs + m * D * BV, y3_ptrs + m * D, tl.load(x3_ptrs + m * D * BV),
                                       tl.load(y3_ptrs + m * D), k_base, ka_base, rows, rmask, m, k, kb, v, D, SEPARATE)
            tl.debug_barrier()
    return x1, y1, x2, y2


@triton.jit(do_not_specialize=UNSPECIALIZED)
def _fwd_kernel(Q, K, KL, KA, KB, V, RHO, HAS_KEY, OUT, DEN, X3, Y3, T, n_chunks, c0, c1, c2,
                D: tl.constexpr, DV: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                CAUSAL: tl.constexpr, QUAD: tl.constexpr, SEPARATE: tl.constexpr):
    n, iv, offs_c, offs_d, offs_v, x3_ptrs, y3_ptrs = _program(X3, Y3, D, BT, BV)
    q_base, k_base = Q + n * T * D, K + n * T * D
    kl_base, ka_base, kb_base = KL + n * T * D, KA + n * T * D, KB + n * T * D
    v_base, rho_base = V + n * T * DV, RHO + n * T
    if CAUSAL:  # running sums, updated after each chunk's outputs
        x2 = tl.zeros((D, BV), dtype=tl.float32)
        y2 = tl.zeros((D,), dtype=tl.float32)
        x1 = tl.zeros((BV,), dtype=tl.float32)
        y1 = tl.zeros((1,), dtype=tl.float32)
    else:  # first pass: the sums over the whole sequence
        x1, y1, x2, y2 = _key_sums(k_base, kl_base, ka_base, kb_base, v_base, rho_base, x3_ptrs, y3_ptrs, T, n_chunks,
                                   offs_c, offs_d, offs_v, D, DV, BT, BV, QUAD, SEPARATE)

    for c in range(0, n_chunks):  # outputs (and, causal, the running sums after use)
        rows = c * BT + offs_c
        rmask = rows < T
        q = _tile(q_base, rows, rmask, offs_d, D)
        k, kl, ka, kb, v, rho = _key_chunk(k_base, kl_base, ka_base, kb_base, v_base, rho_base, rows, rmask, offs_d,
                                           offs_v, D, DV, QUAD, SEPARATE)
        num = c0 * x1[None, :] + c1 * tl.dot(q, x2, input_precision="ieee")
        den = c0 * y1 + c1 * tl.sum(q * y2[None, :], 1)
        if CAUSAL:
            causal_mask = offs_c[:, None] >= offs_c[None, :]
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
            s_lin = tl.dot(q, tl.trans(kl), input_precision="ieee") if SEPARATE else s
            w = c0 * rho[None, :] + c1 * s
            w_num = c0 * rho[None, :] + c1 * s_lin
            if QUAD:
                w += c2 * s * s
                if SEPARATE:
                    w_num += c2 * tl.dot(q, tl.trans(ka), input_precision="ieee") * \
                        tl.dot(q, tl.trans(kb), input_precision="ieee")
                else:
                    w_num += c2 * s * s
            w = tl.where(causal_mask, w, 0.0)
            w_num = tl.where(causal_mask, w_num, 0.0)
            num += tl.dot(w_num, v, input_precision="ieee")
            den += tl.sum(w, 1)
        if QUAD:
            for m in range(D):
                qm = _column(q_base, rows, rmask, m, D)
                x3m = tl.load(x3_ptrs + m * D * BV)
                y3m = tl.load(y3_ptrs + m * D)
                num += c2 * tl.dot(qm[:, None] * q, x3m, input_precision="ieee")
                den += c2 * qm * tl.sum(q * y3m[None, :], 1)
                if CAUSAL:
                    _add_key_quadratic_row(x3_ptrs + m * D * BV, y3_ptrs + m * D, x3m, y3m, k_base, ka_base, rows,
                                           rmask, m, k, kb, v, D, SEPARATE)
            tl.debug_barrier()
        # the guard of the PyTorch path: zero on rows without an allowed key or with a zero denominator
        has_key = (tl.load(HAS_KEY + n * T + rows, mask=rmask, other=0) != 0) & (den != 0)
        out = tl.where(has_key[:, None], num / tl.where(has_key, den, 1.0)[:, None], 0.0)
        _store_tile(OUT + n * T * DV, rows, rmask, offs_v, DV, out)
        if iv == 0:
            tl.store(DEN + n * T + rows, den, mask=rmask)
        if CAUSAL:
            x1, y1, x2, y2 = _add_key_chunk(x1, y1, x2, y2, k, kl, v, rho)


@triton.jit(do_not_specialize=UNSPECIALIZED)
def _dq_kernel(Q, K, KL, KA, KB, V, RHO, G, DELTA, DQ, X3, Y3, T, n_chunks, c0, c1, c2,
               D: tl.constexpr, DV: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
               CAUSAL: tl.constexpr, QUAD: tl.constexpr, SEPARATE: tl.constexpr):
    n, iv, offs_c, offs_d, offs_v, x3_ptrs, y3_ptrs = _program(X3, Y3, D, BT, BV)
    first = (iv == 0).to(tl.float32)  # denominator terms: once, not per value block
    q_base, k_base = Q + n * T * D, K + n * T * D
    kl_base, ka_base, kb_base = KL + n * T * D, KA + n * T * D, KB + n * T * D
    v_base, rho_base = V + n * T * DV, RHO + n * T
    g_base, delta_base = G + n * T * DV, DELTA + n * T
    if CAUSAL:  # x1, y1: unused here
        x2 = tl.zeros((D, BV), dtype=tl.float32)
        y2 = tl.zeros((D,), dtype=tl.float32)
        x1 = tl.zeros((BV,), dtype=tl.float32)
        y1 = tl.zeros((1,), dtype=tl.float32)
    else:
        x1, y1, x2, y2 = _key_sums(k_base, kl_base, ka_base, kb_base, v_base, rho_base, x3_ptrs, y3_ptrs, T, n_chunks,
                                   offs_c, offs_d, offs_v, D, DV, BT, BV, QUAD, SEPARATE)

    for c in range(0, n_chunks):
        rows = c * BT + offs_c
        rmask = rows < T
        q = _tile(q_base, rows, rmask, offs_d, D)
        k, kl, ka, kb, v, rho = _key_chunk(k_base, kl_base, ka_base, kb_base, v_base, rho_base, rows, rmask, offs_d,
                                           offs_v, D, DV, QUAD, SEPARATE)
        g = _tile(g_base, rows, rmask, offs_v, DV)
        delta = tl.load(delta_base + rows, mask=rmask, other=0.0)
        dq = c1 * tl.dot(g, tl.trans(x2), input_precision="ieee") - first * c1 * delta[:, None] * y2[None, :]
        if CAUSAL:
            causal_mask = offs_c[:, None] >= offs_c[None, :]
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
            p_num = tl.where(causal_mask, tl.dot(g, tl.trans(v), input_precision="ieee"), 0.0)
            ds = -first * delta[:, None] * (c1 + 2 * c2 * s)
            if SEPARATE:
                dq += tl.dot(c1 * p_num, kl, input_precision="ieee")
                if QUAD:
                    s_a = tl.dot(q, tl.trans(ka), input_precision="ieee")
                    s_b = tl.dot(q, tl.trans(kb), input_precision="ieee")
                    dq += tl.dot(c2 * p_num * s_b, ka, input_precision="ieee")
                    dq += tl.dot(c2 * p_num * s_a, kb, input_precision="ieee")
            else:
                ds += c1 * p_num
                if QUAD:
                    ds += 2 * c2 * p_num * s
            dq += tl.dot(tl.where(causal_mask, ds, 0.0), k, input_precision="ieee")
        if QUAD:
            for m in range(D):
                qm = _column(q_base, rows, rmask, m, D)
                x3m = tl.load(x3_ptrs + m * D * BV)
                y3m = tl.load(y3_ptrs + m * D)
                xg = tl.dot(g, tl.trans(x3m), input_precision="ieee")  # sum_j x3[m, l, j] g_j over l
                onehot = (offs_d == m).to(tl.float32)
                dq += c2 * (tl.sum(q * xg, 1)[:, None] * onehot[None, :] + qm[:, None] * xg)
                dq -= first * 2 * c2 * (delta * qm)[:, None] * y3m[None, :]
                if CAUSAL:
                    _add_key_quadratic_row(x3_ptrs + m * D * BV, y3_ptrs + m * D, x3m, y3m, k_base, ka_base, rows,
                                           rmask, m, k, kb, v, D, SEPARATE)
            tl.debug_barrier()
        _store_tile(DQ + (iv * tl.num_programs(0) + n) * T * D, rows, rmask, offs_d, D, dq)
        if CAUSAL:
            x1, y1, x2, y2 = _add_key_chunk(x1, y1, x2, y2, k, kl, v, rho)


@triton.jit
def _query_chunk(q_base, g_base, delta_base, rows, rmask, offs_d, offs_v, D: tl.constexpr, DV: tl.constexpr):
    """The tiles of one chunk of queries: q (BT x D), g (BT x BV), delta (BT)."""
    return (_tile(q_base, rows, rmask, offs_d, D), _tile(g_base, rows, rmask, offs_v, DV),
            tl.load(delta_base + rows, mask=rmask, other=0.0))


@triton.jit
def _add_query_chunk(r1, u0, s1, q, g, delta):
    """The linear query states of the key gradients after one more chunk: R1 (r1 here) += sum
    q (x) g, u0 += sum g, r1 (s1 here) += sum delta q."""
    r1 += tl.dot(tl.trans(q), g, input_precision="ieee")
    u0 += tl.sum(g, 0)
    s1 += tl.sum(delta[:, None] * q, 0)
    return r1, u0, s1


@triton.jit(do_not_specialize=UNSPECIALIZED)
def _dkv_kernel(Q, K, KL, KA, KB, V, RHO, G, DELTA, DK, DKL, DKA, DKB, DVOUT, R2, S2, T, n_chunks, c0, c1, c2,
                D: tl.constexpr, DV: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
                CAUSAL: tl.constexpr, QUAD: tl.constexpr, SEPARATE: tl.constexpr):
    # scratch: R2 = sum (q (x) q) (x) g and S2 = sum delta q (x) q (r2 in the module docstring)
    n, iv, offs_c, offs_d, offs_v, r2_ptrs, s2_ptrs = _program(R2, S2, D, BT, BV)
    n_all = tl.num_programs(0)
    first = (iv == 0).to(tl.float32)
    q_base, k_base = Q + n * T * D, K + n * T * D
    kl_base, ka_base, kb_base = KL + n * T * D, KA + n * T * D, KB + n * T * D
    v_base, rho_base = V + n * T * DV, RHO + n * T
    g_base, delta_base = G + n * T * DV, DELTA + n * T

    r1 = tl.zeros((D, BV), dtype=tl.float32)  # sum q (x) g
    u0 = tl.zeros((BV,), dtype=tl.float32)  # sum g
    s1 = tl.zeros((D,), dtype=tl.float32)  # sum delta q
    if not CAUSAL:
        for c in range(0, n_chunks):
            rows = c * BT + offs_c
            rmask = rows < T
            q, g, delta = _query_chunk(q_base, g_base, delta_base, rows, rmask, offs_d, offs_v, D, DV)
            r1, u0, s1 = _add_query_chunk(r1, u0, s1, q, g, delta)
            if QUAD:
                for m in range(D):
                    qm = _column(q_base, rows, rmask, m, D)
                    _add_quadratic_row(r2_ptrs + m * D * BV, s2_ptrs + m * D, tl.load(r2_ptrs + m * D * BV),
                                       tl.load(s2_ptrs + m * D), qm, q, g, delta * qm, q)
                tl.debug_barrier()

    for c_rev in range(0, n_chunks):
        c = n_chunks - 1 - c_rev if CAUSAL else c_rev  # causal: keys see later queries
        rows = c * BT + offs_c
        rmask = rows < T
        q, g, delta = _query_chunk(q_base, g_base, delta_base, rows, rmask, offs_d, offs_v, D, DV)
        k, kl, ka, kb, v, rho = _key_chunk(k_base, kl_base, ka_base, kb_base, v_base, rho_base, rows, rmask, offs_d,
                                           offs_v, D, DV, QUAD, SEPARATE)
        dv = c0 * rho[:, None] * u0[None, :] + c1 * tl.dot(kl, r1, input_precision="ieee")
        dkl = c1 * tl.dot(v, tl.trans(r1), input_precision="ieee")
        dka = tl.zeros((BT, D), dtype=tl.float32)
        dkb = tl.zeros((BT, D), dtype=tl.float32)
        dk = -first * c1 * s1[None, :] + tl.zeros((BT, D), dtype=tl.float32)
        if CAUSAL:
            causal_mask = offs_c[:, None] >= offs_c[None, :]  # [query i, key j]
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
            s_lin = tl.dot(q, tl.trans(kl), input_precision="ieee") if SEPARATE else s
            s_a = tl.dot(q, tl.trans(ka), input_precision="ieee") if SEPARATE else s
            s_b = tl.dot(q, tl.trans(kb), input_precision="ieee") if SEPARATE else s
            p_num = tl.where(causal_mask, tl.dot(g, tl.trans(v), input_precision="ieee"), 0.0)
            w_num = c0 * rho[None, :] + c1 * s_lin
            if QUAD:
                w_num += c2 * s_a * s_b
                dka += tl.dot(tl.trans(c2 * p_num * s_b), q, input_precision="ieee")
                dkb += tl.dot(tl.trans(c2 * p_num * s_a), q, input_precision="ieee")
            dv += tl.dot(tl.trans(tl.where(causal_mask, w_num, 0.0)), g, input_precision="ieee")
            dkl += tl.dot(tl.trans(c1 * p_num), q, input_precision="ieee")
            ds = tl.where(causal_mask, -first * delta[:, None] * (c1 + 2 * c2 * s), 0.0)
            dk += tl.dot(tl.trans(ds), q, input_precision="ieee")
        if QUAD:
            for m in range(D):
                km = _column(k_base, rows, rmask, m, D)
                kam = _column(ka_base, rows, rmask, m, D) if SEPARATE else km
                r2m = tl.load(r2_ptrs + m * D * BV)
                s2m = tl.load(s2_ptrs + m * D)
                vr = tl.dot(v, tl.trans(r2m), input_precision="ieee")  # sum_j R2[m, l, j] v_j over l
                onehot = (offs_d == m).to(tl.float32)
                dv += c2 * kam[:, None] * tl.dot(kb, r2m, input_precision="ieee")
                dka += c2 * tl.sum(kb * vr, 1)[:, None] * onehot[None, :]
                dkb += c2 * kam[:, None] * vr
                dk -= first * 2 * c2 * km[:, None] * s2m[None, :]
                if CAUSAL:
                    qm = _column(q_base, rows, rmask, m, D)
                    _add_quadratic_row(r2_ptrs + m * D * BV, s2_ptrs + m * D, r2m, s2m, qm, q, g, delta * qm, q)
            tl.debug_barrier()
        _store_tile(DVOUT + n * T * DV, rows, rmask, offs_v, DV, dv)
        part = (iv * n_all + n) * T * D
        if SEPARATE:
            _store_tile(DK + part, rows, rmask, offs_d, D, dk)
            _store_tile(DKL + part, rows, rmask, offs_d, D, dkl)
            _store_tile(DKA + part, rows, rmask, offs_d, D, dka)
            _store_tile(DKB + part, rows, rmask, offs_d, D, dkb)
        else:
            _store_tile(DK + part, rows, rmask, offs_d, D, dk + dkl + dka + dkb)
        if CAUSAL:
            r1, u0, s1 = _add_query_chunk(r1, u0, s1, q, g, delta)


def _check_float32(*tensors):
    for t in tensors:
        if t is not None and t.dtype != torch.float32:
            raise ValueError(f"the Triton kernels take float32 tensors; got {t.dtype} (fast_forward casts)")


def _check_launch(q, v, chunk):
    if q.device.type != "cuda":
        return  # the interpreter has no shared-memory limit
    limit = device_shared_memory_limit(q.device)
    if limit:
        check_shared_memory(int(chunk), q.shape[-1], v.shape[-1], limit, torch.cuda.get_device_name(q.device))


def _prepare(q, k, v, kl, ka, kb, coeffs, chunk):
    """Contiguous inputs, the numerator keys with k in place of None, the kernels' constexprs,
    the number of chunks and value blocks, and zeroed scratch for the (x3, y3) quadratic states."""
    N, T, D = q.shape
    DV = v.shape[-1]
    quad = coeffs[2] != 0.0
    separate = kl is not None or (quad and (ka is not None or kb is not None))
    keys = [(k if t is None else t).contiguous() for t in (kl, ka, kb)]
    bv = min(DV, BLOCK_V)
    meta = dict(D=D, DV=DV, BT=int(chunk), BV=bv, QUAD=quad, SEPARATE=separate)
    nv = DV // bv
    shape = (N, nv, D, D) if quad else (1,)
    scratch = [torch.zeros(*shape, bv if quad else 1, dtype=torch.float32, device=q.device),
               torch.zeros(*shape, dtype=torch.float32, device=q.device)]
    return keys, meta, -(-T // int(chunk)), nv, scratch


def forward(q, k, v, kl, ka, kb, rho, has_key, causal, coeffs, chunk):
    """Output (N, T, Dv) and denominator (N, T) of float32 (N, T, X) inputs; arguments and
    results as ``chunked.forward`` (the interface of ``function.py``), without scales.

    Raises:
        ValueError: a tensor that is not float32; on CUDA, a launch that needs more shared memory
            per block than the device has (``check_shared_memory``).
    """
    _check_float32(q, k, v, kl, ka, kb)
    _check_launch(q, v, chunk)
    q, k, v, rho, has_key = (t.contiguous() for t in (q, k, v, rho, has_key))
    (kl, ka, kb), meta, n_chunks, nv, (x3, y3) = _prepare(q, k, v, kl, ka, kb, coeffs, chunk)
    N, T, _ = q.shape
    out = torch.empty_like(v)
    den = torch.empty(N, T, dtype=q.dtype, device=q.device)
    _launch(_fwd_kernel, (N, nv), q, k, kl, ka, kb, v, rho, has_key, out, den, x3, y3, T, n_chunks, *coeffs,
            CAUSAL=bool(causal), **meta)
    return out, den


def backward(g, delta, q, k, v, kl, ka, kb, rho, causal, coeffs, chunk):
    """Gradients (dq, dk, dv, dkl, dka, dkb) from g, delta (``function.output_gradients``), as
    ``chunked.backward``: dkl, dka, dkb are None where the key was None (part of dk)."""
    g, delta, q, k, v, rho = (t.contiguous() for t in (g, delta, q, k, v, rho))
    given = (kl, ka, kb)
    (kl, ka, kb), meta, n_chunks, nv, (state3, state2) = _prepare(q, k, v, kl, ka, kb, coeffs, chunk)
    N, T, D = q.shape
    partial = dict(dtype=torch.float32, device=q.device)  # one partial sum per value block
    dq = torch.empty(nv, N, T, D, **partial)
    _launch(_dq_kernel, (N, nv), q, k, kl, ka, kb, v, rho, g, delta, dq, state3, state2, T, n_chunks, *coeffs,
            CAUSAL=bool(causal), **meta)
    state3.zero_()
    state2.zero_()
    dk = torch.empty(nv, N, T, D, **partial)
    dkl, dka, dkb = [torch.empty(nv, N, T, D, **partial) if meta["SEPARATE"] else dk for _ in range(3)]
    dv = torch.empty_like(v)
    _launch(_dkv_kernel, (N, nv), q, k, kl, ka, kb, v, rho, g, delta, dk, dkl, dka, dkb, dv, state3, state2, T,
            n_chunks, *coeffs, CAUSAL=bool(causal), **meta)
    dk = dk.sum(0)
    if not meta["SEPARATE"]:  # the kernel stored dk + dkl + dka + dkb
        return dq.sum(0), dk, dv, None, None, None
    key_grads = []
    for t, dt in zip(given, (dkl, dka, dkb)):  # a key passed as None is k: its gradient joins dk
        if t is None:
            dk = dk + dt.sum(0)
        key_grads.append(None if t is None else dt.sum(0))
    return dq.sum(0), dk, dv, *key_grads


KERNELS = {"forward": _fwd_kernel, "dq": _dq_kernel, "dkv": _dkv_kernel}


def compile_kernels(D, Dv, chunk, causal, p, device="cuda", kernels=tuple(KERNELS), separate=False):
    """Compile Fastmax's Triton kernels for one configuration without launching them (Triton's
    ``warmup``), so that later launches with the same constexprs (the kernels do not specialize on
    the sequence length, ``UNSPECIALIZED``) load them from Triton's cache, in this process or in
    any other on the machine. Compiling takes seconds to a minute per kernel at D = 128, and one
    process compiles one kernel at a time: scripts/bench/gpu.py's ``warm_triton`` runs several
    processes.

    Args:
        D, Dv (int): head dims of q / k and of v, each in {16, 32, 64, 128}.
        chunk (int): the chunk size BT, a power of two >= 16.
        causal (bool); p (int): 1 or 2 (the quadratic states).
        device: a CUDA device.
        kernels: names from ``KERNELS`` ("forward", "dq", "dkv").
        separate (bool): the variant with separate numerator keys (dropout; SEPARATE).

    Returns:
        dict: kernel name -> shared memory per block of the compiled kernel (bytes).

    Raises:
        ValueError: an unknown kernel name, or a device that is not CUDA (the interpreter compiles
            nothing).
    """
    unknown = sorted(set(kernels) - set(KERNELS))
    if unknown:
        raise ValueError(f"unknown kernel(s) {unknown}; allowed: {', '.join(KERNELS)}")
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"compile_kernels needs a CUDA device (the interpreter compiles nothing); got {device}")
    args, meta, nv = warmup_arguments(D, Dv, chunk, p, device, separate)
    shared = {}
    for name in kernels:
        compiled = KERNELS[name].warmup(*args[name], grid=(1, nv), CAUSAL=bool(causal), **meta)
        shared[name] = int(compiled.metadata.shared)
        key = (KERNELS[name].__name__, *(meta[k] for k in ("D", "DV", "BT")), bool(causal), meta["QUAD"],
               meta["SEPARATE"])
        COMPILED_SHARED_MEMORY[key] = shared[name]
    return shared


def warmup_arguments(D, Dv, chunk, p, device, separate=False):
    """The positional arguments of each kernel of ``KERNELS`` for one chunk of zeros (T = chunk,
    one sequence), their constexprs but CAUSAL, and the number of value blocks: what
    ``compile_kernels`` passes to ``warmup`` (tensors of a launch's dtypes and alignment).

    Returns:
        (args: kernel name -> tuple, meta: dict, nv: int)
    """
    zeros = dict(dtype=torch.float32, device=device)
    q, k, v = torch.zeros(1, chunk, D, **zeros), torch.zeros(1, chunk, D, **zeros), torch.zeros(1, chunk, Dv, **zeros)
    rho, has_key = torch.ones(1, chunk, **zeros), torch.ones(1, chunk, dtype=torch.bool, device=device)
    coeffs = (1.0, 1.0, 0.5 if p == 2 else 0.0)
    numerator_keys = [torch.zeros_like(k) if separate else None for _ in range(3)]
    (kl, ka, kb), meta, n_chunks, nv, (s3, s2) = _prepare(q, k, v, *numerator_keys, coeffs, chunk)
    out, den, g, delta = torch.empty_like(v), torch.empty(1, chunk, **zeros), torch.empty_like(v), torch.empty(1, chunk, **zeros)
    part = torch.empty(nv, 1, chunk, D, **zeros)
    scalars = (chunk, n_chunks, *coeffs)
    args = {
        "forward": (q, k, kl, ka, kb, v, rho, has_key, out, den, s3, s2, *scalars),
        "dq": (q, k, kl, ka, kb, v, rho, g, delta, part, s3, s2, *scalars),
        "dkv": (q, k, kl, ka, kb, v, rho, g, delta, part, part, part, part, torch.empty_like(v), s3, s2, *scalars),
    }
    return args, meta, nv
