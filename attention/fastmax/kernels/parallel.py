"""The "parallel" Triton kernels of Fastmax p = 2: FlashAttention-2's loop with a polynomial in place of exp.

Paper: "FAST: Factorizable Attention for Speeding up Transformers", section 2 (the kernel
f(s) = 1 + s + s^2 / 2 of Eq. 8, here with general coefficients). Instead of the factorized sums
of ``chunked.py`` (O(T D^2 Dv) work), these kernels compute every allowed query-key weight
explicitly, block by block, as FlashAttention does (O(T^2 (D + Dv)) work, all of it products of
tiles for the tensor cores, and no D^2 states); which of the two is faster at which T is a
question for the benchmarks.
Notation as in ``function.py`` (inputs already normalized, temperature folded into c0, c1, c2);
the results are those of ``chunked.forward`` / ``chunked.backward`` without dropout.

Math, with s_ij = q_i . k_j over the allowed pairs (all j, or j <= i when causal):
    forward:  w_ij = c0 rho_j + c1 s_ij + c2 s_ij^2,  num_i = sum_j w_ij v_j,  den_i = sum_j w_ij,
              out_i = num_i / den_i (0 where the query has no allowed key or den_i = 0).
              No running maximum: with the default coefficients f(s) >= 1/2, nothing overflows.
    backward: from g_i = dL/do_i / den_i and delta_i = (dL/do_i . o_i) / den_i
              (``function.output_gradients``),
              P_ij = g_i . v_j - delta_i rho_j,  ds_ij = (c1 + 2 c2 s_ij) P_ij,
              dq_i = sum_j ds_ij k_j,  dk_j = sum_i ds_ij q_i,  dv_j = sum_i (c0 + c1 s_ij + c2 s_ij^2) g_i
              (dv without rho, as ``chunked.backward`` returns it: the gradient of the value
              columns, of which a padded key's is discarded by the caller).

Kernels and grids (N = batch * heads; program axis 0 the block, axis 1 the sequence n):
    ``_forward_kernel`` (cdiv(T, BLOCK_M), N): a block of queries, looping over the key blocks
        (causal: up to the diagonal; the causal mask only in the diagonal blocks);
    ``_dkdv_kernel``    (cdiv(T, BLOCK_N), N): a block of keys, looping over the query blocks
        (causal: from the diagonal), accumulating dk and dv;
    ``_dq_kernel``      (cdiv(T, BLOCK_M), N): a block of queries, looping over the key blocks.
Every program owns its output rows: no atomics and no partial sums. The ragged last block is
masked at the loads (zero rows): a missing key has k = v = rho = 0 and a missing query
q = g = delta = 0, which makes all their terms exactly zero.

Tile sizes (``FORWARD_BLOCKS``, ``DKDV_BLOCKS``, ``DQ_BLOCKS``, chosen for an H100 / sm_90, keyed
by the input element size and max(D, Dv) rounded up to 64 or 128): BLOCK_M query rows and BLOCK_N
key rows per step. 16-bit inputs (tensor cores): at D <= 64 the forward uses 64 x 64 blocks and
4 warps (FlashAttention-2's choice for small heads: one warpgroup, enough work per step for
``wgmma``, one BLOCK_M x Dv float32 accumulator in registers); at D = 128 the key blocks shrink to
32 (forward), 16 (dq) and the streamed query blocks to 16 (dk/dv), so that the float32 score tiles
next to the 128-wide accumulators stay within 255 registers per thread. The dk/dv kernel holds two
accumulators (dk, dv) and four score-sized tiles (s, w, P, ds), hence its smaller streamed blocks.
float32 inputs need 8 warps and smaller blocks for the same bound (their exact "ieee" products run
on the FMA units with the operand tiles in registers), down to 16 x 16 for dq at D = 128.
Checked offline (Triton 3.9 compiled for sm_90a, ``ptxas -v``): no spill stores for any D, Dv in
{16, 32, 64, 128} tried, causal or not, in bfloat16, float16 and float32 ("ieee" and "tf32");
at most 255 registers (the 16-bit dk/dv kernel at D = 128) and 66 KB of shared memory per block.
BLOCK_M is a multiple of BLOCK_N in the forward and dq kernels (and BLOCK_N of BLOCK_M in dk/dv)
so that a causal diagonal is whole blocks.

Precision: see the docstring of ``common.py``. q, k, v, g are read in their dtype (float32,
bfloat16 or float16); every product goes through ``common.mm`` with the constexpr
DOT = ``common.dot_mode()`` (float32 accumulation; float32 operands as exact "ieee" products, or
"tf32" under PyTorch's "high" matmul precision; 16-bit operands on the tensor cores; "emulate"
under the interpreter). The float32 tiles made here that meet a 16-bit tile in a product (w
before w @ v, w^T before w^T @ g, ds before ds @ k and ds^T @ q) are rounded with
``common.to_operand`` first, as FlashAttention rounds its P; den sums the unrounded weights, as
FlashAttention's row sums. den, the gradients' accumulators and rho / delta are float32; out and
the gradients are stored in the inputs' dtype, rounded to nearest.

Cost per token and head (e = bytes per element of q, k, v; products only, the polynomial and the
masks add a few FLOP per pair). T_a = the keys a query's program visits: T rounded up to whole
key blocks when non-causal; causal, up to the end of its diagonal block, on average about
(T + BLOCK_M) / 2. T_a' likewise the queries a key's program visits (causal: about
(T + BLOCK_N) / 2 of the dk/dv kernel's BLOCK_N). Per token the costs are linear in T through T_a,
so per sequence quadratic in T.
    forward FLOP:   2 T_a (D + Dv) per query (s = q k^T, then w v).
    backward FLOP:  2 T_a' (2 D + 2 Dv) per key in dk/dv (s, P = v g^T, dv, dk)
                  + 2 T_a (2 D + Dv) per query in dq (s, P, dq); about 2 T_a (4 D + 3 Dv) in all,
                    3.5 times the forward at D = Dv (s and P are computed in both kernels).
    forward HBM bytes (every re-read counted, i.e. without L2 hits: an upper bound):
                    e (D + Dv) + 5                      (q, out, den, has_key)
                  + (T_a / BLOCK_M) (e (D + Dv) + 4)    (k, v, rho, re-read by every query block).
    backward HBM bytes:
        dk/dv:      2 e (D + Dv) + 4                    (k, v, rho, dk, dv)
                  + (T_a' / BLOCK_N) (e (D + Dv) + 4)   (q, g, delta, re-read by every key block);
        dq:         e (2 D + Dv) + 4                    (q, g, delta, dq)
                  + (T_a / BLOCK_M) (e (D + Dv) + 4)    (k, v, rho, re-read by every query block);
with the block sizes of the respective kernel: larger blocks mean fewer re-reads.
"""
from collections import namedtuple

import torch
import triton
import triton.language as tl

from attention.fastmax.kernels import common
from attention.fastmax.kernels.common import mm, to_operand

HEAD_DIMS = (16, 32, 64, 128)


class Blocks(namedtuple("Blocks", "block_m block_n num_warps num_stages")):
    """Tile sizes and launch options of one kernel: BLOCK_M query rows and BLOCK_N key rows per
    step, ``num_warps`` and ``num_stages`` (software pipelining of the streamed loads)."""


# keyed by (bytes per input element, max(D, Dv) rounded up to 64 or 128); see the module docstring
FORWARD_BLOCKS = {(2, 64): Blocks(64, 64, 4, 3), (2, 128): Blocks(64, 32, 4, 2),
                  (4, 64): Blocks(64, 32, 8, 2), (4, 128): Blocks(16, 16, 4, 2)}
DKDV_BLOCKS = {(2, 64): Blocks(32, 64, 4, 2), (2, 128): Blocks(16, 64, 4, 2),
               (4, 64): Blocks(16, 32, 8, 2), (4, 128): Blocks(16, 32, 8, 2)}
DQ_BLOCKS = {(2, 64): Blocks(64, 32, 4, 2), (2, 128): Blocks(64, 16, 4, 2),
             (4, 64): Blocks(64, 32, 8, 2), (4, 128): Blocks(16, 16, 4, 2)}


def blocks(table, dtype, D, Dv):
    """The entry of ``table`` for inputs of ``dtype`` and head dims D, Dv."""
    return table[(torch.finfo(dtype).bits // 8, 64 if max(D, Dv) <= 64 else 128)]


@triton.jit
def _load_rows(base, start, T, WIDTH: tl.constexpr, ROWS: tl.constexpr):
    """Rows start .. start + ROWS - 1 of a row-major (T, WIDTH) matrix; zero rows beyond T."""
    rows = start + tl.arange(0, ROWS)
    cols = tl.arange(0, WIDTH)
    return tl.load(base + rows[:, None] * WIDTH + cols[None, :], mask=rows[:, None] < T, other=0.0)


@triton.jit
def _load_entries(base, start, T, ROWS: tl.constexpr):
    """Entries start .. start + ROWS - 1 of a (T,) vector; zero beyond T."""
    rows = start + tl.arange(0, ROWS)
    return tl.load(base + rows, mask=rows < T, other=0.0)


@triton.jit
def _store_rows(base, start, T, value, like, WIDTH: tl.constexpr, ROWS: tl.constexpr, DOT: tl.constexpr):
    """Store the float32 tile ``value`` as rows start .. of a (T, WIDTH) matrix of ``like``'s
    dtype, rows beyond T left out. Rounded to nearest even through ``to_operand`` first: the
    interpreter's own cast to bfloat16 truncates (``common.py``; DOT = "emulate")."""
    rows = start + tl.arange(0, ROWS)
    cols = tl.arange(0, WIDTH)
    value = to_operand(value, like, DOT).to(base.dtype.element_ty)
    tl.store(base + rows[:, None] * WIDTH + cols[None, :], value, mask=rows[:, None] < T)


@triton.jit
def _forward_step(num, den, q, k_base, v_base, rho_base, query_rows, start_n, T, c0, c1, c2,
                  D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr,
                  DOT: tl.constexpr):
    """num += w @ v and den += rowsum(w) for the key block at start_n."""
    k = _load_rows(k_base, start_n, T, D, BLOCK_N)
    v = _load_rows(v_base, start_n, T, DV, BLOCK_N)
    rho = _load_entries(rho_base, start_n, T, BLOCK_N)
    s = mm(q, tl.trans(k), DOT)
    w = c0 * rho[None, :] + s * (c1 + c2 * s)
    if CAUSAL_MASK:  # diagonal block only: keys after the query
        key_rows = start_n + tl.arange(0, BLOCK_N)
        w = tl.where(query_rows[:, None] >= key_rows[None, :], w, 0.0)
    den += tl.sum(w, 1)  # from the unrounded weights, as FlashAttention's row sums
    num += mm(to_operand(w, v, DOT), v, DOT)
    return num, den


@triton.jit(do_not_specialize=["T"])
def _forward_kernel(q_ptr, k_ptr, v_ptr, rho_ptr, has_key_ptr, out_ptr, den_ptr, T, c0, c1, c2,
                    D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr, DOT: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    n = tl.program_id(1).to(tl.int64)  # int64: n * T * D may pass 2^31
    q_ptr += n * T * D
    k_ptr += n * T * D
    v_ptr += n * T * DV
    out_ptr += n * T * DV
    rho_ptr += n * T
    has_key_ptr += n * T
    den_ptr += n * T
    query_rows = start_m + tl.arange(0, BLOCK_M)
    q = _load_rows(q_ptr, start_m, T, D, BLOCK_M)
    num = tl.zeros([BLOCK_M, DV], dtype=tl.float32)
    den = tl.zeros([BLOCK_M], dtype=tl.float32)
    if CAUSAL:
        # the keys before this query block are allowed for all its queries (start_m is a multiple of BLOCK_N)
        for start_n in range(0, start_m, BLOCK_N):
            num, den = _forward_step(num, den, q, k_ptr, v_ptr, rho_ptr, query_rows, start_n, T, c0, c1, c2,
                                     D, DV, BLOCK_N, False, DOT)
        for start_n in range(start_m, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
            num, den = _forward_step(num, den, q, k_ptr, v_ptr, rho_ptr, query_rows, start_n, T, c0, c1, c2,
                                     D, DV, BLOCK_N, True, DOT)
    else:
        for start_n in range(0, T, BLOCK_N):
            num, den = _forward_step(num, den, q, k_ptr, v_ptr, rho_ptr, query_rows, start_n, T, c0, c1, c2,
                                     D, DV, BLOCK_N, False, DOT)
    has_key = tl.load(has_key_ptr + query_rows, mask=query_rows < T, other=0) != 0
    valid = has_key & (den != 0.0)
    out = tl.where(valid[:, None], num / tl.where(valid, den, 1.0)[:, None], 0.0)
    _store_rows(out_ptr, start_m, T, out, q, DV, BLOCK_M, DOT)
    tl.store(den_ptr + query_rows, den, mask=query_rows < T)


@triton.jit
def _dkdv_step(dk, dv, k, v, rho, q_base, g_base, delta_base, key_rows, start_m, T, c0, c1, c2,
               D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL_MASK: tl.constexpr,
               DOT: tl.constexpr):
    """dk += ds^T @ q and dv += w^T @ g for the query block at start_m (tiles transposed: rows are
    keys, columns queries)."""
    q = _load_rows(q_base, start_m, T, D, BLOCK_M)
    g = _load_rows(g_base, start_m, T, DV, BLOCK_M)
    delta = _load_entries(delta_base, start_m, T, BLOCK_M)
    s_t = mm(k, tl.trans(q), DOT)
    w_t = c0 + s_t * (c1 + c2 * s_t)  # no rho: the gradient of the value columns (``chunked.backward``)
    p_t = mm(v, tl.trans(g), DOT) - rho[:, None] * delta[None, :]
    ds_t = (c1 + 2.0 * c2 * s_t) * p_t
    if CAUSAL_MASK:  # diagonal block only: queries before the key
        query_rows = start_m + tl.arange(0, BLOCK_M)
        allowed = query_rows[None, :] >= key_rows[:, None]
        w_t = tl.where(allowed, w_t, 0.0)
        ds_t = tl.where(allowed, ds_t, 0.0)
    dv += mm(to_operand(w_t, g, DOT), g, DOT)
    dk += mm(to_operand(ds_t, q, DOT), q, DOT)
    return dk, dv


@triton.jit(do_not_specialize=["T"])
def _dkdv_kernel(q_ptr, k_ptr, v_ptr, rho_ptr, g_ptr, delta_ptr, dk_ptr, dv_ptr, T, c0, c1, c2,
                 D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr, DOT: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    n = tl.program_id(1).to(tl.int64)  # int64: n * T * D may pass 2^31
    q_ptr += n * T * D
    k_ptr += n * T * D
    dk_ptr += n * T * D
    v_ptr += n * T * DV
    g_ptr += n * T * DV
    dv_ptr += n * T * DV
    rho_ptr += n * T
    delta_ptr += n * T
    key_rows = start_n + tl.arange(0, BLOCK_N)
    k = _load_rows(k_ptr, start_n, T, D, BLOCK_N)
    v = _load_rows(v_ptr, start_n, T, DV, BLOCK_N)
    rho = _load_entries(rho_ptr, start_n, T, BLOCK_N)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, DV], dtype=tl.float32)
    if CAUSAL:
        # the queries of the diagonal block are masked; all later ones see every key of this block
        # (start_n + BLOCK_N is a multiple of BLOCK_M)
        diagonal_end = tl.minimum(start_n + BLOCK_N, T)
        for start_m in range(start_n, diagonal_end, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, rho, q_ptr, g_ptr, delta_ptr, key_rows, start_m, T, c0, c1, c2,
                                D, DV, BLOCK_M, True, DOT)
        for start_m in range(start_n + BLOCK_N, T, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, rho, q_ptr, g_ptr, delta_ptr, key_rows, start_m, T, c0, c1, c2,
                                D, DV, BLOCK_M, False, DOT)
    else:
        for start_m in range(0, T, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, rho, q_ptr, g_ptr, delta_ptr, key_rows, start_m, T, c0, c1, c2,
                                D, DV, BLOCK_M, False, DOT)
    _store_rows(dk_ptr, start_n, T, dk, k, D, BLOCK_N, DOT)
    _store_rows(dv_ptr, start_n, T, dv, v, DV, BLOCK_N, DOT)


@triton.jit
def _dq_step(dq, q, g, delta, k_base, v_base, rho_base, query_rows, start_n, T, c1, c2,
             D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr,
             DOT: tl.constexpr):
    """dq += ds @ k for the key block at start_n."""
    k = _load_rows(k_base, start_n, T, D, BLOCK_N)
    v = _load_rows(v_base, start_n, T, DV, BLOCK_N)
    rho = _load_entries(rho_base, start_n, T, BLOCK_N)
    s = mm(q, tl.trans(k), DOT)
    p = mm(g, tl.trans(v), DOT) - delta[:, None] * rho[None, :]
    ds = (c1 + 2.0 * c2 * s) * p
    if CAUSAL_MASK:  # diagonal block only: keys after the query
        key_rows = start_n + tl.arange(0, BLOCK_N)
        ds = tl.where(query_rows[:, None] >= key_rows[None, :], ds, 0.0)
    dq += mm(to_operand(ds, k, DOT), k, DOT)
    return dq


@triton.jit(do_not_specialize=["T"])
def _dq_kernel(q_ptr, k_ptr, v_ptr, rho_ptr, g_ptr, delta_ptr, dq_ptr, T, c1, c2,
               D: tl.constexpr, DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, DOT: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    n = tl.program_id(1).to(tl.int64)  # int64: n * T * D may pass 2^31
    q_ptr += n * T * D
    k_ptr += n * T * D
    dq_ptr += n * T * D
    v_ptr += n * T * DV
    g_ptr += n * T * DV
    rho_ptr += n * T
    delta_ptr += n * T
    query_rows = start_m + tl.arange(0, BLOCK_M)
    q = _load_rows(q_ptr, start_m, T, D, BLOCK_M)
    g = _load_rows(g_ptr, start_m, T, DV, BLOCK_M)
    delta = _load_entries(delta_ptr, start_m, T, BLOCK_M)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    if CAUSAL:
        for start_n in range(0, start_m, BLOCK_N):
            dq = _dq_step(dq, q, g, delta, k_ptr, v_ptr, rho_ptr, query_rows, start_n, T, c1, c2,
                          D, DV, BLOCK_N, False, DOT)
        for start_n in range(start_m, tl.minimum(start_m + BLOCK_M, T), BLOCK_N):
            dq = _dq_step(dq, q, g, delta, k_ptr, v_ptr, rho_ptr, query_rows, start_n, T, c1, c2,
                          D, DV, BLOCK_N, True, DOT)
    else:
        for start_n in range(0, T, BLOCK_N):
            dq = _dq_step(dq, q, g, delta, k_ptr, v_ptr, rho_ptr, query_rows, start_n, T, c1, c2,
                          D, DV, BLOCK_N, False, DOT)
    _store_rows(dq_ptr, start_m, T, dq, q, D, BLOCK_M, DOT)


def _check(q, k, v):
    """The dtype of q, k, v and their sizes (N, T, D, Dv).

    Raises:
        ValueError: dtypes (``common.check_dtype``), shapes or head dims not supported.
    """
    dtype = common.check_dtype(q, k, v)
    if q.dim() != 3 or q.shape != k.shape or v.dim() != 3 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"fastmax parallel kernels need q, k (N, T, D) and v (N, T, Dv); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    N, T, D = q.shape
    Dv = v.shape[-1]
    if D not in HEAD_DIMS or Dv not in HEAD_DIMS:
        raise ValueError(f"fastmax parallel kernels need head dims D, Dv in {HEAD_DIMS}; got D={D}, Dv={Dv}")
    return dtype, (N, T, D, Dv)


def forward(q, k, v, rho, has_key, causal, coeffs):
    """Output and denominator of Fastmax p = 2 by explicit weights (see the module docstring).

    Args:
        q, k: (N, T, D) normalized queries and keys, float32, bfloat16 or float16 (one dtype for
            q, k, v); k zero at padded keys. D in {16, 32, 64, 128}; any T >= 1.
        v: (N, T, Dv), Dv in {16, 32, 64, 128}, zero at padded keys.
        rho: (N, T), 1 for a real key and 0 for a padded one (used as float32).
        has_key: (N, T) bool, whether a query has an allowed key (``function.row_counts`` > 0).
        causal: bool.
        coeffs: (c0, c1, c2) floats, the temperature folded in (``function.coefficients``).

    Returns:
        out (N, T, Dv) in v's dtype, zero on rows without an allowed key or with a zero
        denominator; den (N, T) float32.

    Raises:
        ValueError: mixed or unsupported dtypes, shapes, or head dims.
    """
    _, (N, T, D, Dv) = _check(q, k, v)
    q, k, v, has_key = (t.contiguous() for t in (q, k, v, has_key))
    rho = rho.to(torch.float32).contiguous()
    out = torch.empty_like(v)
    den = torch.empty(N, T, dtype=torch.float32, device=q.device)
    dot = common.dot_mode()
    b = blocks(FORWARD_BLOCKS, q.dtype, D, Dv)
    common.launch(_forward_kernel, (triton.cdiv(T, b.block_m), N), q, k, v, rho, has_key, out, den, T,
                  *(float(c) for c in coeffs), D=D, DV=Dv, BLOCK_M=b.block_m, BLOCK_N=b.block_n,
                  CAUSAL=bool(causal), DOT=dot, num_warps=b.num_warps, num_stages=b.num_stages)
    return out, den


def backward(g, delta, q, k, v, rho, causal, coeffs):
    """Gradients of ``forward`` (see the module docstring) from the output gradients of
    ``function.output_gradients``.

    Args:
        g: (N, T, Dv), dL/do / den, in q's dtype (zero on rows without an allowed key).
        delta: (N, T), (dL/do . o) / den (used as float32).
        q, k, v, rho, causal, coeffs: as ``forward``.

    Returns:
        (dq, dk, dv) in q's, k's and v's dtype, shaped like them; dv without rho (the gradient of
        the value columns, as ``chunked.backward``).

    Raises:
        ValueError: mixed or unsupported dtypes (g's included), shapes, or head dims.
    """
    _, (N, T, D, Dv) = _check(q, k, v)
    common.check_dtype(q, g)
    if g.shape != v.shape:
        raise ValueError(f"fastmax parallel backward needs g shaped like v {tuple(v.shape)}; got {tuple(g.shape)}")
    g, q, k, v = (t.contiguous() for t in (g, q, k, v))
    rho, delta = (t.to(torch.float32).contiguous() for t in (rho, delta))
    c0, c1, c2 = (float(c) for c in coeffs)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dot = common.dot_mode()
    b = blocks(DKDV_BLOCKS, q.dtype, D, Dv)
    common.launch(_dkdv_kernel, (triton.cdiv(T, b.block_n), N), q, k, v, rho, g, delta, dk, dv, T, c0, c1, c2,
                  D=D, DV=Dv, BLOCK_M=b.block_m, BLOCK_N=b.block_n, CAUSAL=bool(causal), DOT=dot,
                  num_warps=b.num_warps, num_stages=b.num_stages)
    b = blocks(DQ_BLOCKS, q.dtype, D, Dv)
    common.launch(_dq_kernel, (triton.cdiv(T, b.block_m), N), q, k, v, rho, g, delta, dq, T, c1, c2,
                  D=D, DV=Dv, BLOCK_M=b.block_m, BLOCK_N=b.block_n, CAUSAL=bool(causal), DOT=dot,
                  num_warps=b.num_warps, num_stages=b.num_stages)
    return dq, dk, dv
