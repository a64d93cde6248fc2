"""Chunk-state Triton kernels of Fastmax, p = 1 and p = 2: linear in T, parallel over chunks.

Paper: "FAST: Factorizable Attention for Speeding up Transformers", section 2.4 (Eq. 26-35: the
factorized sums and their prefix sums) and section 2.5 (gradients that recompute the states).
Notation of ``attention/fastmax/function.py``: c0, c1, c2 carry the temperature, rho_j is 1 for
a real key and 0 for a padded one (k_j = v_j = 0 there), and

    w_ij = c0 rho_j + c1 s_ij + c2 s_ij^2,   s_ij = q_i . k_j,   o_i = sum_j w_ij v_j / sum_j w_ij

over the allowed keys (j <= i when causal). The kernel is a sum of feature products,
w_ij = c0 rho_j + c1 q_i . k_j + c2 sum_f psi_f(q_i) . phi_f(k_j), which the chunk-state
decomposition (the one flash-linear-attention's chunk kernels use) splits at chunk boundaries.

Features of p = 2 (block-symmetric pairs). The D dims are cut into NB blocks of BP dims; for
every pair of blocks (a, b) with a <= b, phi_f(k) is the BP x BP outer product of k's blocks a and
b (FW = BP^2 features), and psi_f(q) the same of q times 2 when a < b (the block (b, a) it stands
for; ``(q . k)^2 = sum_{m,l} q_m q_l k_m k_l``). NP = NB (NB + 1) / 2 pair blocks, F = D + NP FW
features with the linear ones: 2,368 at D = 64 (BP = 8; the packed pairs of the PyTorch path have
2,145, the full outer product 4,160), 176 at D = 16 (BP = 4). Every feature block is one
tensor-core product of width FW, which the packed triangle is not.

Passes (C = the chunk, NC = ceil(T / C) chunks, N = B * H):

1. ``_state_kernel``, grid (N, 1 + NP, ceil(Dv / BV)) (BV = 16 for p = 1): one program per
   (sequence, feature block, value block) walks the chunks in order (or reverse) and stores,
   before adding each chunk, the running sums of the keys' features times the values (D x BV
   linear, FW x BV per pair block:
   one tensor-core product and one store per chunk), and of the features times rho (the
   denominator's column, by value block 0), the value sums x1 and the key counts y1. Non-causal:
   only the totals. The backward pass runs it again on the keys (section 2.5: recompute, do not
   store) and, in reverse, on the queries with g as values and delta as weights (the query states
   of the key gradients).
2. ``_output_kernel``, grid (ceil(T / R), N, ceil(Dv / BV)), R = min(C, ``ROWS``) rows per
   program: the earlier chunks through the stored state (c0 x1 + c1 q H + c2 sum_f psi_f(q) S_f,
   one product per feature block), the chunk's own keys through explicit R x R weights with the
   causal mask, over the R-row blocks of the chunk up to the program's own. Denominator: the same
   sums on the rho column (a vector product per feature block), no second pass over the sequence.
3. ``_dq_kernel`` and ``_dkv_kernel``, grid (ceil(T / R), N) each: the gradients of R queries
   from the key states, and of R keys and their values from the query states, plus the chunk's
   own R x R terms (queries up to the row block; keys from it to the chunk's end).

Tile sizes: C = 64 (p = 1) and ``P2_CHUNK`` = 128 (p = 2), BV = min(64, Dv) (16 in the p = 1
state pass), BP = 8 at D >= 64 and 4 below. Precision: ``common.py`` (16-bit inputs as they are,
float32 accumulators and states).

Cost per token and head of each kernel (``kernel_costs``; issue 56 C4 bounds them): with
e bytes per input element, F features, Y = Dv + 1 value columns and the denominator's, and
float32 states of 4 (F Y + Dv + 1) bytes per chunk of C tokens (S, Z, x1, y1),
    state pass (forward: keys; backward: keys, then queries in reverse)
        HBM bytes  e (D + Dv) + 4 + 4 (F Y + Dv + 1) / C      inputs read, states written
        FLOPs      2 F Y + F                                  the state product, the features
    output
        HBM bytes  e (2 D + 2 Dv) + 9 + 4 (F Y + Dv + 1) / C  q, k, v, rho, has_key, out, den; states read
        FLOPs      2 F Y + F + 2 C (D + Dv) + 5 C             the states' use; the chunk's own scores and
                                                              weights (a row meets (C + R) / 2 <= C keys)
    dq (from the key states) and dkv (from the query states)
        HBM bytes  e (2 D + 2 Dv) + 8 + e D + 4 (F Y + Dv + 1) / C   (dkv: + e Dv for dv)
        FLOPs      dq: 2 F Y + 4 F + 2 C (D + 2 Dv) + 6 C;  dkv: 4 F Y + 5 F + 2 C (2 D + 2 Dv) + 8 C
with F = D for p = 1. A value block re-reads q (and the states' own columns only), so Dv <= 64
reads everything once.
"""
import torch
import triton
import triton.language as tl

from attention.fastmax.kernels import common
from attention.fastmax.kernels.common import mm, to_operand

P1_CHUNK = 64
P2_CHUNK = 128
BLOCK_V = 64  # value columns per program of the output kernel and of the p = 2 state pass
# p = 1's state pass has one feature block: narrower value blocks put 4x the programs in flight
# (32 at B = 1, H = 8, Dv = 64) on a walk whose time is the latency of its per-chunk loads and stores
LINEAR_STATE_BLOCK_V = 16
ROWS = 64  # rows per program of the output and gradient kernels (``_rows_per_program``)
NUM_WARPS = 8  # of the output and gradient kernels (4 spill at p = 2, D = 64; the state pass: ``_states``)
FLOAT32_MAX_CHUNK = 64  # float32 inputs: C x C float32 tiles of 128 need more than 255 registers (kernel report)


def pair_layout(D):
    """(BP, NB, NP): dims per block, blocks, pair blocks a <= b of the p = 2 features at head dim D."""
    BP = 8 if D >= 64 else 4
    NB = D // BP
    return BP, NB, NB * (NB + 1) // 2


def feature_count(D, p):
    """F, the features per key of ``_state_kernel`` (linear, plus the pair blocks for p = 2)."""
    if p == 1:
        return D
    BP, _, NP = pair_layout(D)
    return D + NP * BP * BP


def kernel_costs(D, Dv, p, chunk, element_bytes=2):
    """{kernel: (HBM bytes, FLOPs)} per token and head of the state, output, dq and dkv kernels
    (the formulas of the module docstring; element_bytes: 2 for bfloat16 / float16, 4 for float32)."""
    F, Y, C, e = feature_count(D, p), Dv + 1, chunk, element_bytes
    states = 4 * (F * Y + Dv + 1) / C
    return {
        "state": (e * (D + Dv) + 4 + states, 2 * F * Y + F),
        "output": (e * (2 * D + 2 * Dv) + 9 + states, 2 * F * Y + F + 2 * C * (D + Dv) + 5 * C),
        "dq": (e * (3 * D + 2 * Dv) + 8 + states, 2 * F * Y + 4 * F + 2 * C * (D + 2 * Dv) + 6 * C),
        "dkv": (e * (3 * D + 3 * Dv) + 8 + states, 4 * F * Y + 5 * F + 2 * C * (2 * D + 2 * Dv) + 8 * C),
    }


_PAIRS = {}


def _pairs(D, device):
    """(NP, 2) int32 table of the pair blocks (a, b), a <= b, row-major over a."""
    key = (D, str(device))
    if key not in _PAIRS:
        _, NB, _ = pair_layout(D)
        table = [(a, b) for a in range(NB) for b in range(a, NB)]
        _PAIRS[key] = torch.tensor(table, dtype=torch.int32, device=device)
    return _PAIRS[key]


@triton.jit
def _rows_tile(base, rows, rmask, cols, width):
    """rows x cols tile of a row-major (T, width) matrix, zero beyond the sequence."""
    return tl.load(base + rows[:, None] * width + cols[None, :], mask=rmask[:, None], other=0.0)


@triton.jit
def _pair_features(x_base, rows, rmask, a, b, D: tl.constexpr, BP: tl.constexpr):
    """(C, BP * BP) float32 features x_m x_l of the dims m in block a, l in block b (row-major)."""
    offs = tl.arange(0, BP)
    xa = _rows_tile(x_base, rows, rmask, a * BP + offs, D).to(tl.float32)
    xb = _rows_tile(x_base, rows, rmask, b * BP + offs, D).to(tl.float32)
    return tl.reshape(xa[:, :, None] * xb[:, None, :], (xa.shape[0], BP * BP))


@triton.jit(do_not_specialize=["T", "NC"])
def _state_kernel(X, Y, W, S_LIN, Z_LIN, X1, Y1, S_QUAD, Z_QUAD, PAIRS, T, NC,
                  D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, BV: tl.constexpr, BP: tl.constexpr,
                  NP: tl.constexpr, CAUSAL: tl.constexpr, REVERSE: tl.constexpr, DOT: tl.constexpr):
    """Running sums over chunks of x's features times y (and times the weights w):
    S_LIN (N, NS, D, DV) = sum x (x) y, Z_LIN (N, NS, D) = sum w x, X1 (N, NS, DV) = sum y,
    Y1 (N, NS) = sum w; S_QUAD (N, NS, NP, BP*BP, DV) = sum phi_f(x) (x) y, Z_QUAD (N, NS, NP,
    BP*BP) = sum w phi_f(x). NS = NC with entry c the sum over the chunks before c (after c when
    REVERSE), or 1, the total (not CAUSAL). Feature block 0 is the linear one (and x1, y1),
    block 1 + f the pair block f; value block iv holds columns iv*BV .. iv*BV + BV - 1."""
    n = tl.program_id(0).to(tl.int64)
    fb = tl.program_id(1)
    iv = tl.program_id(2)
    NS = NC if CAUSAL else 1
    offs_c = tl.arange(0, C)
    offs_v = iv * BV + tl.arange(0, BV)
    x_base, y_base, w_base = X + n * T * D, Y + n * T * DV, W + n * T
    if fb == 0:
        offs_d = tl.arange(0, D)
        s = tl.zeros((D, BV), dtype=tl.float32)
        z = tl.zeros((D,), dtype=tl.float32)
        x1 = tl.zeros((BV,), dtype=tl.float32)
        y1 = tl.zeros((1,), dtype=tl.float32)
        for i in range(0, NC):
            c = NC - 1 - i if REVERSE else i
            if CAUSAL:
                state = n * NS + c
                tl.store(S_LIN + state * D * DV + offs_d[:, None] * DV + offs_v[None, :], s)
                tl.store(X1 + state * DV + offs_v, x1)
                if iv == 0:
                    tl.store(Z_LIN + state * D + offs_d, z)
                    tl.store(Y1 + state + tl.arange(0, 1), y1)
            rows = c * C + offs_c
            rmask = rows < T
            x = _rows_tile(x_base, rows, rmask, offs_d, D)
            y = _rows_tile(y_base, rows, rmask, offs_v, DV)
            w = tl.load(w_base + rows, mask=rmask, other=0.0)
            s += mm(tl.trans(x), y, DOT)
            z += tl.sum(x.to(tl.float32) * w[:, None], 0)
            x1 += tl.sum(y.to(tl.float32), 0)
            y1 += tl.sum(w, 0)
        if not CAUSAL:
            tl.store(S_LIN + n * D * DV + offs_d[:, None] * DV + offs_v[None, :], s)
            tl.store(X1 + n * DV + offs_v, x1)
            if iv == 0:
                tl.store(Z_LIN + n * D + offs_d, z)
                tl.store(Y1 + n + tl.arange(0, 1), y1)
    else:
        f = fb - 1
        a = tl.load(PAIRS + 2 * f)
        b = tl.load(PAIRS + 2 * f + 1)
        offs_f = tl.arange(0, BP * BP)
        s = tl.zeros((BP * BP, BV), dtype=tl.float32)
        z = tl.zeros((BP * BP,), dtype=tl.float32)
        for i in range(0, NC):
            c = NC - 1 - i if REVERSE else i
            if CAUSAL:
                state = (n * NS + c) * NP + f
                tl.store(S_QUAD + state * BP * BP * DV + offs_f[:, None] * DV + offs_v[None, :], s)
                if iv == 0:
                    tl.store(Z_QUAD + state * BP * BP + offs_f, z)
            rows = c * C + offs_c
            rmask = rows < T
            phi = _pair_features(x_base, rows, rmask, a, b, D, BP)
            y = _rows_tile(y_base, rows, rmask, offs_v, DV)
            w = tl.load(w_base + rows, mask=rmask, other=0.0)
            s += mm(tl.trans(to_operand(phi, y, DOT)), y, DOT)
            z += tl.sum(phi * w[:, None], 0)
        if not CAUSAL:
            state = n * NP + f
            tl.store(S_QUAD + state * BP * BP * DV + offs_f[:, None] * DV + offs_v[None, :], s)
            if iv == 0:
                tl.store(Z_QUAD + state * BP * BP + offs_f, z)


@triton.jit
def _state_index(n, c, NC, CAUSAL: tl.constexpr):
    """Index of the state a chunk c of sequence n reads: its own (causal) or the total."""
    if CAUSAL:
        return n * NC + c
    else:
        return n


@triton.jit
def _program_rows(T, C: tl.constexpr, R: tl.constexpr):
    """This program's R rows (block program_id(0)), their mask, and the start of the chunk of C
    positions that holds them (R divides C)."""
    start = tl.program_id(0) * R
    rows = start + tl.arange(0, R)
    return rows, rows < T, (start // C) * C


@triton.jit(do_not_specialize=["T", "NC"])
def _output_kernel(Q, K, V, RHO, HAS_KEY, S_LIN, Z_LIN, X1, Y1, S_QUAD, Z_QUAD, PAIRS, OUT, DEN, T, NC,
                   c0, c1, c2, D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, R: tl.constexpr,
                   BV: tl.constexpr, BP: tl.constexpr, NP: tl.constexpr, CAUSAL: tl.constexpr, QUAD: tl.constexpr,
                   DOT: tl.constexpr):
    """out (N, T, DV) and den (N, T) of R rows and one value block (module docstring, pass 2)."""
    n = tl.program_id(1).to(tl.int64)
    iv = tl.program_id(2)
    rows, rmask, chunk_start = _program_rows(T, C, R)
    offs_r = tl.arange(0, R)
    offs_d = tl.arange(0, D)
    offs_v = iv * BV + tl.arange(0, BV)
    q_base = Q + n * T * D
    q = _rows_tile(q_base, rows, rmask, offs_d, D)
    num = tl.zeros((R, BV), dtype=tl.float32)
    den = tl.zeros((R,), dtype=tl.float32)
    if CAUSAL:  # the chunk's own keys j <= i, R at a time: explicit weights, first so that they are dead in the loop
        for key_start in range(chunk_start, tl.program_id(0) * R + R, R):
            keys = key_start + offs_r
            kmask = keys < T
            k = _rows_tile(K + n * T * D, keys, kmask, offs_d, D)
            v = _rows_tile(V + n * T * DV, keys, kmask, offs_v, DV)
            rho = tl.load(RHO + n * T + keys, mask=kmask, other=0.0)
            s = mm(q, tl.trans(k), DOT)
            w = c0 * rho[None, :] + c1 * s
            if QUAD:
                w += c2 * s * s
            w = tl.where(rows[:, None] >= keys[None, :], w, 0.0)
            num += mm(to_operand(w, v, DOT), v, DOT)
            den += tl.sum(w, 1)
    # the earlier chunks (or all, not causal) through the states
    state = _state_index(n, chunk_start // C, NC, CAUSAL)
    h = tl.load(S_LIN + state * D * DV + offs_d[:, None] * DV + offs_v[None, :])
    z = tl.load(Z_LIN + state * D + offs_d)
    num += c0 * tl.load(X1 + state * DV + offs_v)[None, :] + c1 * mm(q, to_operand(h, q, DOT), DOT)
    den += c0 * tl.load(Y1 + state) + c1 * tl.sum(q.to(tl.float32) * z[None, :], 1)
    if QUAD:
        offs_f = tl.arange(0, BP * BP)
        for f in range(0, NP):
            a = tl.load(PAIRS + 2 * f)
            b = tl.load(PAIRS + 2 * f + 1)
            weight = tl.where(a < b, 2.0 * c2, c2)  # the off-diagonal blocks stand for (a, b) and (b, a)
            psi = _pair_features(q_base, rows, rmask, a, b, D, BP)
            sq = tl.load(S_QUAD + (state * NP + f) * BP * BP * DV + offs_f[:, None] * DV + offs_v[None, :])
            zq = tl.load(Z_QUAD + (state * NP + f) * BP * BP + offs_f)
            num += weight * mm(to_operand(psi, q, DOT), to_operand(sq, q, DOT), DOT)
            den += weight * tl.sum(psi * zq[None, :], 1)
    # the guard of the PyTorch path: zero on rows without an allowed key or with a zero denominator
    has_key = (tl.load(HAS_KEY + n * T + rows, mask=rmask, other=0) != 0) & (den != 0)
    out = tl.where(has_key[:, None], num / tl.where(has_key, den, 1.0)[:, None], 0.0)
    out = to_operand(out, q, DOT).to(OUT.dtype.element_ty)  # rounded to nearest, also under the interpreter
    tl.store(OUT + n * T * DV + rows[:, None] * DV + offs_v[None, :], out, mask=rmask[:, None])
    if iv == 0:
        tl.store(DEN + n * T + rows, den, mask=rmask)


@triton.jit
def _through_states(grad, y, w, x_base, rows, rmask, state, S_LIN, Z_LIN, S_QUAD, Z_QUAD, PAIRS, c1, c2,
                    R: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BP: tl.constexpr, NP: tl.constexpr,
                    QUAD: tl.constexpr, VALUES: tl.constexpr, DOT: tl.constexpr):
    """grad (C, D) plus sum_j (c1 + 2 c2 x_i . x'_j) (y_i . y'_j - w_i w'_j) x'_j for the R rows i
    of a program, from the other side's states (S = sum x' (x) y', Z = sum w' x', with phi_f(x') for
    the quadratic part): c1 (y S_lin^T - w Z_lin) + 2 c2 M_i x_i, where
    M_i = sum_j (y_i . y'_j - w_i w'_j) x'_j x'_j^T is assembled from its pair blocks
    m_f = y S_f^T - w Z_f. dq with (g, delta, q) and the key states; dk with (v, rho, k) and the
    query states. ``VALUES`` (dk): also c2 sum_f psi_f(x) S_f, the quadratic part of dv, from the
    same loads. Returns (grad (R, D), that dv part (R, DV) or 0), float32."""
    offs_d = tl.arange(0, D)
    offs_all_v = tl.arange(0, DV)
    h_t = tl.load(S_LIN + state * D * DV + offs_d[None, :] * DV + offs_all_v[:, None])  # (DV, D)
    z = tl.load(Z_LIN + state * D + offs_d)
    grad += c1 * (mm(y, to_operand(h_t, y, DOT), DOT) - w[:, None] * z[None, :])
    dv = tl.zeros((R, DV), dtype=tl.float32)
    if QUAD:
        NB: tl.constexpr = D // BP
        offs_f = tl.arange(0, BP * BP)
        offs_p = tl.arange(0, BP)
        blocks = tl.arange(0, NB)
        grad = tl.reshape(grad, (R, NB, BP))  # dims by block: M x adds to blocks a and b
        for f in range(0, NP):
            a = tl.load(PAIRS + 2 * f)
            b = tl.load(PAIRS + 2 * f + 1)
            sq = tl.load(S_QUAD + (state * NP + f) * BP * BP * DV + offs_f[:, None] * DV + offs_all_v[None, :])
            sq = to_operand(sq, y, DOT)
            zq = tl.load(Z_QUAD + (state * NP + f) * BP * BP + offs_f)
            m = mm(y, tl.trans(sq), DOT) - w[:, None] * zq[None, :]
            m = tl.reshape(m, (R, BP, BP))  # m[i, p, r]: dims a*BP + p and b*BP + r
            xa = _rows_tile(x_base, rows, rmask, a * BP + offs_p, D).to(tl.float32)
            xb = _rows_tile(x_base, rows, rmask, b * BP + offs_p, D).to(tl.float32)
            to_a = tl.sum(m * xb[:, None, :], 2)  # block (a, b) of M times x's block b
            to_b = tl.sum(m * xa[:, :, None], 1)  # its transpose, block (b, a), times block a
            grad += tl.where((blocks == a)[None, :, None], 2.0 * c2 * to_a[:, None, :], 0.0)
            grad += tl.where(((blocks == b) & (a < b))[None, :, None], 2.0 * c2 * to_b[:, None, :], 0.0)
            if VALUES:
                psi = tl.reshape(xa[:, :, None] * xb[:, None, :], (R, BP * BP))
                weight = tl.where(a < b, 2.0 * c2, c2)  # the off-diagonal blocks stand for (a, b) and (b, a)
                dv += weight * mm(to_operand(psi, y, DOT), sq, DOT)
        grad = tl.reshape(grad, (R, D))
    return grad, dv


@triton.jit(do_not_specialize=["T", "NC"])
def _dq_kernel(Q, K, V, RHO, G, DELTA, S_LIN, Z_LIN, S_QUAD, Z_QUAD, PAIRS, DQ, T, NC, c0, c1, c2,
               D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, R: tl.constexpr, BP: tl.constexpr,
               NP: tl.constexpr, CAUSAL: tl.constexpr, QUAD: tl.constexpr, DOT: tl.constexpr):
    """dq (N, T, D) of R rows: dq_i = sum_j (c1 + 2 c2 s_ij) P_ij k_j, P_ij = g_i . v_j -
    delta_i rho_j; the chunk's own keys explicitly, earlier chunks through the key states."""
    n = tl.program_id(1).to(tl.int64)
    rows, rmask, chunk_start = _program_rows(T, C, R)
    offs_r = tl.arange(0, R)
    offs_d = tl.arange(0, D)
    offs_v = tl.arange(0, DV)
    g = _rows_tile(G + n * T * DV, rows, rmask, offs_v, DV)
    delta = tl.load(DELTA + n * T + rows, mask=rmask, other=0.0)
    dq = tl.zeros((R, D), dtype=tl.float32)
    if CAUSAL:  # first, so that its R x R tiles are dead before the loop over the states
        q = _rows_tile(Q + n * T * D, rows, rmask, offs_d, D)
        for key_start in range(chunk_start, tl.program_id(0) * R + R, R):
            keys = key_start + offs_r
            kmask = keys < T
            k = _rows_tile(K + n * T * D, keys, kmask, offs_d, D)
            v = _rows_tile(V + n * T * DV, keys, kmask, offs_v, DV)
            rho = tl.load(RHO + n * T + keys, mask=kmask, other=0.0)
            s = mm(q, tl.trans(k), DOT)
            ds = (mm(g, tl.trans(v), DOT) - delta[:, None] * rho[None, :]) * (c1 + 2.0 * c2 * s)
            ds = tl.where(rows[:, None] >= keys[None, :], ds, 0.0)
            dq += mm(to_operand(ds, k, DOT), k, DOT)
    state = _state_index(n, chunk_start // C, NC, CAUSAL)
    dq, _ = _through_states(dq, g, delta, Q + n * T * D, rows, rmask, state, S_LIN, Z_LIN, S_QUAD, Z_QUAD, PAIRS,
                            c1, c2, R, D, DV, BP, NP, QUAD, False, DOT)
    dq = to_operand(dq, g, DOT).to(DQ.dtype.element_ty)
    tl.store(DQ + n * T * D + rows[:, None] * D + offs_d[None, :], dq, mask=rmask[:, None])


@triton.jit(do_not_specialize=["T", "NC"])
def _dkv_kernel(Q, K, V, RHO, G, DELTA, R_LIN, R_Z, U1, R_QUAD, R_ZQ, PAIRS, DK, DV_OUT, T, NC, c0, c1, c2,
                D: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, R: tl.constexpr, BP: tl.constexpr,
                NP: tl.constexpr, CAUSAL: tl.constexpr, QUAD: tl.constexpr, DOT: tl.constexpr):
    """dk (N, T, D) and dv (N, T, DV) of R rows (keys): dk_j = sum_i (c1 + 2 c2 s_ij) P_ij q_i and
    dv_j = sum_i (c0 + c1 s_ij + c2 s_ij^2) g_i over the queries i >= j; the chunk's own queries
    explicitly, later chunks through the query states (R_LIN = sum q (x) g, R_Z = sum delta q,
    U1 = sum g, R_QUAD / R_ZQ the same with phi_f(q))."""
    n = tl.program_id(1).to(tl.int64)
    rows, rmask, chunk_start = _program_rows(T, C, R)
    offs_r = tl.arange(0, R)
    offs_d = tl.arange(0, D)
    offs_v = tl.arange(0, DV)
    k_base = K + n * T * D
    k = _rows_tile(k_base, rows, rmask, offs_d, D)
    v = _rows_tile(V + n * T * DV, rows, rmask, offs_v, DV)
    rho = tl.load(RHO + n * T + rows, mask=rmask, other=0.0)
    dk = tl.zeros((R, D), dtype=tl.float32)
    dv = tl.zeros((R, DV), dtype=tl.float32)
    if CAUSAL:  # first, so that its R x R tiles are dead before the loop over the states
        for query_start in range(tl.program_id(0) * R, chunk_start + C, R):
            queries = query_start + offs_r
            qmask = queries < T
            q = _rows_tile(Q + n * T * D, queries, qmask, offs_d, D)
            g = _rows_tile(G + n * T * DV, queries, qmask, offs_v, DV)
            delta = tl.load(DELTA + n * T + queries, mask=qmask, other=0.0)
            s_t = mm(k, tl.trans(q), DOT)  # s_t[j, i] = s_ij
            later = queries[None, :] >= rows[:, None]  # query i at or after key j
            ds_t = (mm(v, tl.trans(g), DOT) - rho[:, None] * delta[None, :]) * (c1 + 2.0 * c2 * s_t)
            dk += mm(to_operand(tl.where(later, ds_t, 0.0), q, DOT), q, DOT)
            w_t = tl.where(later, c0 + c1 * s_t + c2 * s_t * s_t, 0.0)
            dv += mm(to_operand(w_t, g, DOT), g, DOT)
    state = _state_index(n, chunk_start // C, NC, CAUSAL)
    # dv from the later queries: c0 sum g + c1 k G, and c2 sum_f psi_f(k) R_f from the loop of dk
    r = tl.load(R_LIN + state * D * DV + offs_d[:, None] * DV + offs_v[None, :])
    dv += c0 * tl.load(U1 + state * DV + offs_v)[None, :] + c1 * mm(k, to_operand(r, k, DOT), DOT)
    dk, dv_quad = _through_states(dk, v, rho, k_base, rows, rmask, state, R_LIN, R_Z, R_QUAD, R_ZQ, PAIRS, c1, c2,
                                  R, D, DV, BP, NP, QUAD, True, DOT)
    dv += dv_quad
    dk = to_operand(dk, k, DOT).to(DK.dtype.element_ty)
    dv = to_operand(dv, v, DOT).to(DV_OUT.dtype.element_ty)
    tl.store(DK + n * T * D + rows[:, None] * D + offs_d[None, :], dk, mask=rmask[:, None])
    tl.store(DV_OUT + n * T * DV + rows[:, None] * DV + offs_v[None, :], dv, mask=rmask[:, None])


def _layout(D, quad):
    """The pair constexprs: BP, and NP (0 without the quadratic term)."""
    BP, _, NP = pair_layout(D)
    return dict(BP=BP, NP=NP if quad else 0)


def _chunk_for(chunk, dtype):
    """The chunk the kernels run: ``chunk``, at most FLOAT32_MAX_CHUNK for float32 inputs (the
    result is the same up to rounding: the chunk only orders the sums)."""
    return min(chunk, FLOAT32_MAX_CHUNK) if dtype == torch.float32 else chunk


def _stages(x):
    """num_stages of the output and gradient kernels: Triton's 3 for 16-bit inputs; 2 for float32,
    whose pipelined tiles would need 116 KB of shared memory (over sm_86 / sm_89's 101,376 B)."""
    return 2 if x.dtype == torch.float32 else 3


def _rows_per_program(chunk):
    """R, the rows of the output and gradient kernels' programs: the chunk, at most ``ROWS``. A
    causal program loops over the R-row blocks of its chunk up to its own (the chunk's own keys);
    smaller tiles keep the p = 2 gradient kernels without spills at C = 128 (kernel report, Triton
    3.6 and 3.9) and put more programs in flight."""
    return min(chunk, ROWS)


def _states(x, y, w, causal, chunk, quad, reverse=False):
    """``_state_kernel`` on x (N, T, D), y (N, T, Dv) (x's dtype), w (N, T) float32: the tuple
    (S_lin, Z_lin, X1, Y1, S_quad, Z_quad) of float32 states (module docstring, pass 1)."""
    N, T, D = x.shape
    Dv = y.shape[-1]
    NC = triton.cdiv(T, chunk)
    NS = NC if causal else 1
    layout = _layout(D, quad)
    FW, NP = layout["BP"] ** 2, layout["NP"]
    f32 = dict(dtype=torch.float32, device=x.device)
    s_lin, z_lin = torch.empty(N, NS, D, Dv, **f32), torch.empty(N, NS, D, **f32)
    x1, y1 = torch.empty(N, NS, Dv, **f32), torch.empty(N, NS, **f32)
    s_quad, z_quad = torch.empty(N, NS, NP, FW, Dv, **f32), torch.empty(N, NS, NP, FW, **f32)
    BV = min(BLOCK_V if quad else LINEAR_STATE_BLOCK_V, Dv)
    common.launch(_state_kernel, (N, 1 + NP, Dv // BV), x, y, w, s_lin, z_lin, x1, y1, s_quad, z_quad,
                  _pairs(D, x.device), T, NC, D=D, DV=Dv, C=chunk, BV=BV, CAUSAL=bool(causal), REVERSE=bool(reverse),
                  DOT=common.dot_mode(), num_warps=4 if chunk * x.element_size() <= 128 else 8, **layout)
    return s_lin, z_lin, x1, y1, s_quad, z_quad


def forward(q, k, v, rho, has_key, causal, coeffs, chunk):
    """Fastmax through the chunk-state kernels (module docstring).

    Args:
        q, k: (N, T, D), v: (N, T, Dv); contiguous, one dtype (float32, bfloat16 or float16),
            normalized, k and v zero at padded keys. D, Dv in {16, 32, 64, 128}.
        rho: (N, T) float32, 1 for a real key, 0 for a padded one. has_key: (N, T) bool.
        causal: bool. coeffs: (c0, c1, c2), c2 = 0 for p = 1. chunk: C, a power of two in [16, 128]
            (float32 inputs: at most FLOAT32_MAX_CHUNK, ``_chunk_for``).

    Returns:
        out (N, T, Dv) in v's dtype (0 on rows without an allowed key or with a zero
        denominator), den (N, T) float32.
    """
    c0, c1, c2 = (float(c) for c in coeffs)
    quad = c2 != 0.0
    N, T, D = q.shape
    Dv = v.shape[-1]
    chunk = _chunk_for(chunk, q.dtype)
    rho = rho.to(torch.float32).contiguous()
    states = _states(k, v, rho, causal, chunk, quad)
    out = torch.empty_like(v)
    den = torch.empty(N, T, dtype=torch.float32, device=q.device)
    rows = _rows_per_program(chunk)
    BV = min(BLOCK_V, Dv)
    common.launch(_output_kernel, (triton.cdiv(T, rows), N, Dv // BV), q, k, v, rho, has_key, *states,
                  _pairs(D, q.device), out, den, T, triton.cdiv(T, chunk), c0, c1, c2, D=D, DV=Dv, C=chunk, R=rows,
                  BV=BV, CAUSAL=bool(causal), QUAD=quad, DOT=common.dot_mode(), num_warps=NUM_WARPS,
                  num_stages=_stages(q), **_layout(D, quad))
    return out, den


def backward(g, delta, q, k, v, rho, causal, coeffs, chunk):
    """Gradients of ``forward`` (section 2.5: the key states recomputed, the query states built in
    reverse) from g = dL/do / den (N, T, Dv) and delta = (dL/do . o) / den (N, T).

    Returns:
        (dq, dk, dv) shaped and typed like q, k, v. dv_j = sum_i (c0 + c1 s_ij + c2 s_ij^2) g_i
        (not multiplied by rho_j, as ``chunked.backward``; the caller's mask zeroes padded keys).
    """
    c0, c1, c2 = (float(c) for c in coeffs)
    quad = c2 != 0.0
    N, T, D = q.shape
    chunk = _chunk_for(chunk, q.dtype)
    rho = rho.to(torch.float32).contiguous()
    delta = delta.to(torch.float32).contiguous()
    g = g.to(q.dtype).contiguous()
    rows = _rows_per_program(chunk)
    grid = (triton.cdiv(T, rows), N)
    meta = dict(D=D, DV=v.shape[-1], C=chunk, R=rows, CAUSAL=bool(causal), QUAD=quad, DOT=common.dot_mode(),
                num_warps=NUM_WARPS, num_stages=_stages(q), **_layout(D, quad))
    scalars = (T, triton.cdiv(T, chunk), c0, c1, c2)
    pairs = _pairs(D, q.device)
    s_lin, z_lin, _, _, s_quad, z_quad = _states(k, v, rho, causal, chunk, quad)
    dq = torch.empty_like(q)
    common.launch(_dq_kernel, grid, q, k, v, rho, g, delta, s_lin, z_lin, s_quad, z_quad, pairs, dq, *scalars, **meta)
    del s_lin, z_lin, s_quad, z_quad  # before the query states: one set of states at a time
    r_lin, r_z, u1, _, r_quad, r_zq = _states(q, g, delta, causal, chunk, quad, reverse=True)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    common.launch(_dkv_kernel, grid, q, k, v, rho, g, delta, r_lin, r_z, u1, r_quad, r_zq, pairs, dk, dv, *scalars,
                  **meta)
    return dq, dk, dv
