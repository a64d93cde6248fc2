"""Triton backend of Fastmax: chunk-state kernels (p = 1 and 2) and the parallel kernel (p = 2).

Paper: "FAST: Factorizable Attention for Speeding up Transformers", sections 2.4-2.5. This
package is the backend "triton" of ``attention/fastmax/function.py``, with its interface

    forward(q, k, v, kl, ka, kb, rho, has_key, causal, coeffs, chunk) -> (out, den)
    backward(g, delta, q, k, v, kl, ka, kb, rho, causal, coeffs, chunk) -> (dq, dk, dv, dkl, dka, dkb)

on (N = B*H, T, X) tensors. Files, in the manner of flash-linear-attention (a naive reference per
op, fast kernels beside it, tests comparing them; the reference here is ``chunked.py``):
``common.py`` (precision, the launch record), ``chunk.py`` (linear in T: a state pass, then
outputs parallel over chunks), ``parallel.py`` (p = 2 only: FlashAttention's loop with
f(s) = c0 + c1 s + c2 s^2 in place of exp, quadratic in T).

Dispatch (``kernel_for``): p = 1 always the chunk kernels; p = 2 the parallel kernel up to
``PARALLEL_MAX_T`` positions and the chunk kernels beyond; at D = 16 the chunk kernels always.
PARALLEL_MAX_T is an estimate until a GPU measures the crossover (issue 56): per token and head at
D = Dv = 64 the causal parallel forward costs about T (D + Dv) = 128 T FLOP on the tensor cores,
the chunk forward about 4 F (Dv + 1) + 2 C (D + Dv + 1) = 0.65 MFLOP (F = 2,368 features, C = 128)
and 2 x 4 F (Dv + 1) / C = 9.6 KB of float32 states written and read; at an H100's ~3 TB/s and
~400 TFLOP/s sustained the chunk path takes about 3 ns per token and head, the parallel one
0.32 ns per 1,000 positions: equal near T = 8k. At D = 16 the chunk path has F = 176 features
(0.05 MFLOP, 0.7 KB): it wins at every length.

Dropout on the factorized terms (separate numerator keys kl, ka, kb) is not implemented here:
the module refuses it with implementation="triton" (``dropout_variant="output_noise"`` works).
"""
import functools
from types import SimpleNamespace

from attention.fastmax.kernels import chunk, common, parallel

KERNELS = ("auto", "chunk", "parallel")
HEAD_DIMS = (16, 32, 64, 128)
CHUNK_SIZES = (16, 32, 64, 128)  # positions per chunk of the chunk kernels (their register budget ends at 128)
PARALLEL_MAX_T = 8192  # p = 2: the parallel kernel up to this T, the chunk kernels beyond (estimate, above)


def kernel_for(kernel, p, T, D):
    """The kernel family ("chunk" or "parallel") that ``kernel`` ("auto", "chunk", "parallel")
    means for degree p at sequence length T and head dim D (module docstring).

    Raises:
        ValueError: an unknown kernel, or "parallel" with p = 1 (it has only p = 2).
    """
    if kernel not in KERNELS:
        raise ValueError(f"triton kernel '{kernel}' unknown; allowed: {', '.join(KERNELS)}")
    if kernel == "parallel" and p != 2:
        raise ValueError("the parallel Triton kernel computes p = 2 only; use kernel 'chunk' or 'auto' for p = 1")
    if kernel != "auto":
        return kernel
    if p == 1 or D <= 16:
        return "chunk"
    return "parallel" if T <= PARALLEL_MAX_T else "chunk"


def _check(q, k, v, kl, ka, kb, chunk_size):
    common.check_dtype(q, k, v)
    if any(t is not None for t in (kl, ka, kb)):
        raise ValueError("the fastmax Triton kernels have no dropout on the factorized terms (separate numerator "
                         "keys); use dropout_variant='output_noise' or implementation='pytorch'")
    D, Dv = q.shape[-1], v.shape[-1]
    if D not in HEAD_DIMS or Dv not in HEAD_DIMS:
        raise ValueError(f"the fastmax Triton kernels support head dims {', '.join(map(str, HEAD_DIMS))}; got q/k "
                         f"head dim {D} and v head dim {Dv} (use implementation='pytorch')")
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"the fastmax Triton kernels need chunk_size in {', '.join(map(str, CHUNK_SIZES))}; "
                         f"got {chunk_size}")


def forward(q, k, v, kl, ka, kb, rho, has_key, causal, coeffs, chunk_size, kernel="auto"):
    """Output and denominator (``function.py``'s backend interface; shapes and dtypes in
    ``chunk.forward``). ``kernel``: "auto", "chunk" or "parallel" (``kernel_for``).

    Raises:
        ValueError: separate numerator keys, mixed or unsupported dtypes, head dims or chunk size.
    """
    _check(q, k, v, kl, ka, kb, chunk_size)
    p = 2 if coeffs[2] != 0.0 else 1
    q, k, v = (t.contiguous() for t in (q, k, v))
    has_key = has_key.contiguous()
    if kernel_for(kernel, p, q.shape[1], q.shape[-1]) == "parallel":
        return parallel.forward(q, k, v, rho, has_key, causal, coeffs)
    return chunk.forward(q, k, v, rho, has_key, causal, coeffs, chunk_size)


def backward(g, delta, q, k, v, kl, ka, kb, rho, causal, coeffs, chunk_size, kernel="auto"):
    """Gradients (``function.py``'s backend interface): (dq, dk, dv, None, None, None), the
    gradients typed like q, k, v. ``kernel`` as in ``forward``; the same choice as the forward
    pass (the dispatch depends only on p, T and D)."""
    _check(q, k, v, kl, ka, kb, chunk_size)
    p = 2 if coeffs[2] != 0.0 else 1
    q, k, v = (t.contiguous() for t in (q, k, v))
    g = g.to(q.dtype).contiguous()
    if kernel_for(kernel, p, q.shape[1], q.shape[-1]) == "parallel":
        grads = parallel.backward(g, delta, q, k, v, rho, causal, coeffs)
    else:
        grads = chunk.backward(g, delta, q, k, v, rho, causal, coeffs, chunk_size)
    return (*grads, None, None, None)


def backend(kernel="auto"):
    """The backend object of ``function.py`` with ``kernel`` fixed: ``forward`` and ``backward``."""
    return SimpleNamespace(forward=functools.partial(forward, kernel=kernel),
                           backward=functools.partial(backward, kernel=kernel))

