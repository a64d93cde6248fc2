"""Tree / bud-expansion attention with the compiled CPU kernel (``cpu_kernel.cpp``).

Same algorithm, conventions and random draws as ``reference.py``; the kernel runs Algorithm 1 one
query at a time, like the reference, but in C++ and spread over torch's intra-op threads
(``torch.set_num_threads``); for the whole sequence (``cpu_forward``) it builds the level tables of
key / value (/ feature-key) sums (Eq. 1) itself; for a decode step (``cpu_decode_query``) it reads
the node tables that ``decode.TreeDecodeState`` keeps, with the same per-query function. This
module passes the inputs and the number of terms per history length, and compiles the
kernel on first use with ``torch.utils.cpp_extension.load`` (needs a C++ compiler and ninja; the
build is cached under ``TORCH_EXTENSIONS_DIR``, by default ``~/.cache/torch_extensions``, in a
folder per CPU type because it is compiled for the build machine's instruction set).

Precision (not "float64 throughout"): float64 inputs run in float64; float32 inputs (and any other
dtype, converted to float32) keep the key / value sums, the query-key-sum inner products and the
weighted value sum in float32, while alignments after the inner product, feature sums and feature
alignments, masses, noise and the softmax weights are float64. With float64 inputs it matches the
reference up to rounding; with float32 a near-tie between two buds can in rare cases be sampled
differently.
"""
import functools
import hashlib
import os
import platform

import torch

from attention.tree.reference import add_stats
from attention.tree.schedule import block_length, default_P, terms_table
from attention.tree.samplers import FEATURE_SAMPLERS, SAMPLERS, seed_int64

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_kernel.cpp")


def _build_flags():
    """Compiler / linker flags: -march=native vectorises the dot products and value sums with the
    machine's widest SIMD (the build cache is keyed by flags and source); on x86-64 glibc, libmvec
    vectorises exp / log in the sampling masses, the Gumbel noise and the softmax."""
    cflags, ldflags = ["-O3", "-march=native", "-fopenmp", "-fno-math-errno"], ["-fopenmp"]
    if platform.machine() == "x86_64" and platform.libc_ver()[0] == "glibc":
        cflags.append("-DTREE_USE_LIBMVEC")
        ldflags.append("-lmvec")
    return cflags, ldflags


def _cpu_signature():
    """Short hash of the CPU's model and instruction-set flags (Linux), else of platform names:
    a -march=native build must not be reused on a different CPU sharing the cache."""
    text = platform.machine() + platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            text += "".join(line for line in f if line.startswith(("model name", "flags")))[:100000]
    except OSError:
        pass
    return hashlib.sha1(text.encode()).hexdigest()[:10]


@functools.lru_cache(maxsize=None)
def load_kernel(verbose=False, profile=False):
    """Compile (first call, ~1 min) or load the cached C++ kernel; returns the extension module.

    Args:
        verbose (bool): print the build's output.
        profile (bool): the profile build (a separate module compiled with -DTREE_PROFILE): the
            same outputs, plus time stamp counters per phase and operation counts, which its
            ``profile()`` returns and resets (see ``read_profile``). Its timers cost time of their own.
    Raises:
        RuntimeError / OSError / ImportError: from torch.utils.cpp_extension when no C++ compiler or
            ninja is available (install them, or use implementation="vectorized").
    """
    from torch.utils.cpp_extension import load
    cflags, ldflags = _build_flags()
    name = f"tree_attention_cpu_{_cpu_signature()}"
    if profile:
        cflags, name = cflags + ["-DTREE_PROFILE"], name + "_profile"
    return load(name=name, sources=[_SOURCE], verbose=verbose, extra_cflags=cflags, extra_ldflags=ldflags)


def read_profile():
    """Phase times and operation counts of the profile build, summed over its calls since the last
    read (``cpu_forward(..., profile=True)``), then reset.

    Returns:
        (seconds, counts): dicts. seconds per phase: alloc, build_levels (internal nodes of the key /
        value level tables), query_init (path reset and the initial buds' inner products),
        sampling_keys (log-masses, Gumbel noise, keys), select_top_p, expand (splits: inner products
        of right children, Eq. 2), path_alignments (alignments of nodes cut by the history end,
        summed over their complete pieces; inside the other phases), softmax_weights, value_sum,
        queries_total (all per-query work). counts: queries, rounds, gumbel_draws,
        log_mass_evaluations, inner_products (per head, as the statistics count them),
        path_pieces (extra node rows whose alignments the cut nodes need, H inner products each),
        authors_moves (descents without a split), final_buds.
    """
    seconds, counts = load_kernel(profile=True).profile()
    return dict(seconds), {key: int(n) for key, n in counts.items()}


def cpu_forward(q, k, v, causal, exclude_self, E, P, sampler, normalization, b, seed,
                qf=None, kf=None, stats=None, descent="authors", profile=False):
    """Tree attention for (B, H, T, D) CPU inputs with the compiled kernel.

    Args:
        q, k, v (torch.Tensor): (B, H, T, D) on the CPU; float64 runs in float64, anything else in
            float32.
        causal, exclude_self (bool): history rule (reference.py).
        E (float), P (int | None: default_P), sampler, normalization (str), b (float), seed (int):
            see TreeAttention.
        qf, kf (torch.Tensor | None): (B, H, T, R) feature-mapped queries / keys for FEATURE_SAMPLERS.
        stats (dict | None): counters to increment (see TreeAttention.stats).
        descent (str): "authors" or "split" (reference.py).
        profile (bool): run the profile build (``load_kernel(profile=True)``, ``read_profile``).
    Returns:
        (B, H, T, D) tensor in the compute dtype (float32 or float64).
    Raises:
        ValueError: tensors not on the CPU.
    """
    if q.device.type != "cpu":
        raise ValueError(f"implementation='cpu' needs CPU tensors; got {q.device} "
                         "(use implementation='vectorized' on accelerators)")
    B, H, Tlen, _ = q.shape
    L = block_length(Tlen)
    P = default_P(L, E) if P is None else P
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32

    use_f = sampler in FEATURE_SAMPLERS
    empty = torch.empty(0, dtype=torch.float64)
    out, info = load_kernel(profile=bool(profile)).forward(
        q.to(dtype).contiguous(), k.to(dtype).contiguous(), v.to(dtype).contiguous(),
        qf.double().contiguous() if use_f else empty, kf.double().contiguous() if use_f else empty,
        terms_table(Tlen, float(E)), bool(causal), bool(exclude_self), int(P), SAMPLERS.index(sampler),
        normalization == "bud_mean", descent == "authors", float(b), seed_int64(seed))
    if stats is not None:
        initial, splits, terms = info.sum(dim=(0, 1)).tolist()
        hist = (Tlen * (Tlen - 1) // 2 if exclude_self else Tlen * (Tlen + 1) // 2) if causal else Tlen * Tlen
        add_stats(stats, H, B * Tlen, initial + splits, B * hist, terms, use_f)
    return out


def cpu_decode_query(state, q, l, pos, n_terms, P, sampler, normalization, scale, b, seed, qf=None,
                     descent="authors"):
    """The decode step with the compiled kernel (``decode_query`` with implementation "cpu"):
    Algorithm 1 for the query at position ``pos`` of every batch element over the first l leaves
    of ``state``'s node tables (read in place, not rebuilt), the batch elements over torch's
    intra-op threads. Arguments, draws and result as ``decode.decode_query`` (without return_buds).

    Args:
        state (decode.TreeDecodeState): CPU tables K, V (and F), float64 (B, 2C - 1, H, X).
        q (torch.Tensor): (B, H, D) queries, converted to the tables' dtype (float64).
        l, pos, n_terms, P (int); sampler, normalization (str); scale, b (float); seed (int);
            qf (torch.Tensor | None, (B, H, R), feature samplers); descent (str): as ``decode_query``.

    Returns:
        (out, info): out (B, H, Dv) in the tables' dtype (float64); info dict of int64 (B,)
        tensors "initial", "splits", "terms".

    Raises:
        ValueError: tables not on the CPU. RuntimeError: from the kernel's shape checks, or from
        ``load_kernel`` when the kernel cannot be built.

    Source: "High Attention Scores and Where to Find Them", Algorithm 1 (section 2.2), Eq. 2, the
    masses of section 2.3 and section 2.4 (P buds per round, one tree for all heads).
    """
    if state.K.device.type != "cpu":
        raise ValueError(f"the compiled decode step needs CPU tensors; got {state.K.device}")
    use_f = sampler in FEATURE_SAMPLERS
    empty = torch.empty(0, dtype=torch.float64)
    out, info = load_kernel().decode_step(
        q.to(state.K.dtype).contiguous(), state.K, state.V,
        qf.double().contiguous() if use_f else empty, state.F if use_f else empty,
        int(l), int(pos), int(n_terms), int(P), SAMPLERS.index(sampler), normalization == "bud_mean",
        descent == "authors", float(scale), float(b), seed_int64(seed))
    return out, {"initial": info[:, 0], "splits": info[:, 1], "terms": info[:, 2]}
