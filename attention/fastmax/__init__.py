"""Fastmax attention (FAST), registered as ``fastmax``.

Paper: "FAST: Factorizable Attention for Speeding up Transformers" (Gerami, Hoover, Dulepet,
Duraiswami 2024). The softmax's exp is replaced by a polynomial f(s) = a0 + a1 s (+ a2 s^2) of
the normalized query-key score, whose Taylor-like structure factorizes: the attention output
becomes sums over keys of k (x) v and k (x) k (x) v shared by all queries (Eq. 26-29), or their
prefix sums when causal (Eq. 32-35). Cost O(T D^(p+1)) instead of O(T^2 D).

Files: ``reference.py`` (explicit (T, T) weights; the specification, including normalization
and dropout), ``dropout.py`` (the three dropout variants of section 2.4), ``function.py`` (the
custom autograd Function of section 2.5, the backend choice and the output gradients, shared by
both backends), ``chunked.py`` (the PyTorch backend), ``kernels/`` (the Triton backend: chunk-state
kernels for p = 1 and 2 and a FlashAttention-style kernel for p = 2, forward and backward; on CPU
tensors they run under ``TRITON_INTERPRET=1``),
``authors_baseline.py`` (the authors' formulation, for benchmarks), ``decode.py`` (a token at a
time: the factorized moments of the keys, constant memory in T; ``Fastmax.prefill`` / ``step``).
Imports go one way: this module -> function.py -> the backends, which import nothing of the
package; decode.py imports reference.py only.
"""
import importlib.util
import math
import os
import warnings

import torch

from attention.registry import Attention, check_qkv, check_step, matrix_flops, register
from attention.fastmax import decode as decoding
from attention.fastmax import triton_limits
from attention.fastmax.function import coefficients, fastmax_factorized
from attention.fastmax.dropout import DROPOUT_VARIANTS, draw_dropout_masks, numerator_keys
from attention.fastmax.reference import (NORMALIZATIONS, kernel_minimum, max_norm_scale, normalize_qk,
                                         reference_forward, score_bound)

IMPLEMENTATIONS = ("auto", "pytorch", "triton", "reference")
# the module's dropout variants: ours on the factorized terms (dropout.py), the authors' CUDA
# extension's multiplicative output noise, and "auto" = quadratic for p = 2, standard for p = 1
MODULE_DROPOUT_VARIANTS = ("auto", *DROPOUT_VARIANTS, "output_noise")
# "auto" computes p = 2 through the explicit (T, T) weights up to T = EXPLICIT_T_PER_D x head dim, for
# at most EXPLICIT_MAX_ELEMENTS weights per call (64 MB in float32). Measured on the CPU, B x H = 32
# (results/bench_attention/fastmax_explicit_crossover, docs/fastmax.md): forward+backward 5-32x faster
# than the chunked path at T = 64, 1.8-2.5x at T = 8 D (D = 32: 256; D = 64: 512), slower at 16 D;
# one cell inside the bound is slower (forward, non-causal, D = 32, T = 256: 1.6x). p = 1: mixed,
# within 1.7x either way at T <= 128.
EXPLICIT_T_PER_D = 8
EXPLICIT_MAX_ELEMENTS = 2 ** 24
# temperatures given relative to the head dim D, resolved in ``forward`` (``Fastmax.temperature_for``)
TEMPERATURE_NAMES = ("head_dim", "sqrt_head_dim")


def _number(name, value, condition, allowed):
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number ({allowed}); got {value!r}") from None
    if not condition(value):
        raise ValueError(f"{name} must be {allowed}; got {name}={value}")
    return value


def implementation_for(implementation, p, shape, dropout_active=False):
    """The implementation a Fastmax module with ``implementation`` and degree p uses on (B, H, T, D)
    inputs of ``shape`` ("auto" resolved): "reference" (the explicit (T, T) weights) for p = 2 when
    T <= EXPLICIT_T_PER_D x D, B H T^2 <= EXPLICIT_MAX_ELEMENTS and no dropout is active, else
    "pytorch". The Triton kernels have only run under the interpreter: until a GPU test passes,
    "auto" never picks them (docs/fastmax.md: shared memory, stack frames, what is unverified)."""
    if implementation != "auto":
        return implementation
    B, H, T, D = shape
    if p == 2 and not dropout_active and T <= EXPLICIT_T_PER_D * D and B * H * T * T <= EXPLICIT_MAX_ELEMENTS:
        return "reference"
    return "pytorch"


def chunk_size_for(p, chunk_size):
    """Positions per chunk of the causal fast paths: ``chunk_size`` when given, else 128 for p = 2
    and 64 for p = 1, on both backends (docs/fastmax.md says how 128 was chosen for the PyTorch
    path; the Triton chunk kernels' p = 2 states cost 4 F (Dv + 1) / C bytes per token and head,
    at most 10 KB at C = 128, D = 64: ``kernels/chunk.py``)."""
    if chunk_size is not None:
        return chunk_size
    return 128 if p == 2 else 64


@register("fastmax")
class Fastmax(Attention):
    """Fastmax attention for (B, H, T, D) q, k, v (paper section 2).

    o_i = sum_j f(s_ij) v_j / sum_j f(s_ij) over the allowed keys j (j <= i when causal; padded
    keys never), with s_ij = q_hat_i . k_hat_j / temperature and f(s) = a0 + a1 s (p = 1) or
    a0 + a1 s + a2 s^2 (p = 2). Computation in float32 or wider; the output has v's dtype.
    Rows with no allowed key output zeros. The exact definitions, including dropout, are in
    ``attention/fastmax/reference.py``.

    Args:
        p (int): 1 or 2, the degree of f (paper: Fastmax1 / Fastmax2).
        a0, a1, a2 (float): coefficients of f; 1, 1, 1/2 is the paper's Eq. 8. a2 is unused when
            p = 1.
        temperature (float | str): > 0; scores are divided by it. Or relative to the head dim D of
            the input: "head_dim" (D: with "paper", |s| <= 1, the paper's assumption),
            "sqrt_head_dim" (sqrt(D), softmax's usual scale). None (default): with "paper",
            D for p = 1 (the largest scale that keeps every p = 1 weight >= 0) and sqrt(D) for
            p = 2; 1 with "max_norm" and "none" (their scale is lim or the inputs').
        normalization (str): "paper" (default; Eq. 5-6: each token minus its mean over D,
            divided by its standard deviation), "max_norm" (the authors' code: q_hat = lim q /
            max_n ||q_n|| per batch element and head, same for k; causal uses the running maximum
            over positions <= t so that nothing depends on later tokens) or "none".
            The defaults ("paper" at the temperature None resolves to) were chosen on multi-query
            associative recall (docs/fastmax.md "Choice of the default normalization": test
            accuracy 0.916 (p = 1) and 0.997 (p = 2) against 0.817 and 0.865 for "max_norm",
            lim 1, the default before); WikiText-2 runs made before that change used "max_norm".
        lim (float): > 0, the bound on ||q_hat||, ||k_hat|| of "max_norm" (ignored otherwise).
        dropout (float): rate in [0, 1); active in training mode only.
        dropout_variant (str): "auto" (default: "quadratic" for p = 2, "standard" for p = 1),
            "quadratic" (only the quadratic terms; needs p = 2), "standard" (linear and quadratic
            features independently) or "1d" (whole key tokens): section 2.4 on the factorized
            terms, defined in ``dropout.py``; only the numerator is dropped, so E[output] is
            unchanged. "output_noise": the authors' CUDA extension's variant, the output times
            (1 + dropout * N(0, 1)) per element (also E[output] unchanged). The authors' PyTorch
            path drops entries of q (x) q and k (x) k, which feed numerator and denominator alike;
            that variant is not implemented (docs/fastmax.md compares the three).
        implementation (str): "auto" (the PyTorch path on every device, except p = 2 on short
            sequences without active dropout: T <= 8 D and B H T^2 <= 2^24, where the explicit
            (T, T) weights of "reference" are faster, ``implementation_for``; the Triton kernels
            have never run on a GPU, only under the interpreter), "pytorch" (chunked.py),
            "triton" (opt-in, kernels/: float32, bfloat16 or float16 inputs as they are,
            float32 accumulation; no dropout on the factorized terms, "output_noise" works; CPU
            tensors need TRITON_INTERPRET=1) or "reference" (the (T, T) matrix, autograd
            through it).
        triton_kernel (str): with implementation="triton": "auto" (default; p = 1 and D = 16 the
            chunk kernels, p = 2 the parallel kernel up to T = kernels.PARALLEL_MAX_T and the
            chunk kernels beyond), "chunk" or "parallel" (p = 2 only) forced.
        chunk_size (int | None): positions per chunk of the causal fast paths, a power of two in
            [16, 1024] ([16, 128] for the Triton kernels). None (default): 128 for p = 2, 64 for
            p = 1 (measured on the CPU: p = 2 causal at T = 16384, D = 64, 128 took 0.62x the time
            of 64 forward and 0.71x forward+backward,
            `results/bench_attention/rerun_dense_fastmax_tree`; p = 1 is fastest at 64).

    Negative weights: the paper's Eq. 10 (weights >= 0) needs f(s) >= 0 on the scores that
    occur. For p = 2 with the default coefficients f >= 1/2 everywhere. For p = 1, f(s) < 0 when
    a1 s < -a0: "max_norm" bounds |s| by lim^2 / temperature, "paper" by D / temperature (the
    defaults give |s| <= 1, so f >= 0) and "none" not at all. The output is still the exact ratio (weights
    summing to one, some negative; a zero denominator gives inf / NaN); the module warns once
    (RuntimeWarning) when its configuration allows negative f.

    Raises:
        ValueError: on bad parameters (the message names the accepted values); in ``forward`` on
            bad shapes or mask, different query and key lengths, or implementation="triton" with
            an unsupported head dim or a CPU tensor without TRITON_INTERPRET=1.
    """

    causal = "exact"
    decode = "state"  # the moments of decode.py: D^p (Dv + 1) numbers per head, whatever T
    defaults_date = "2026-11-27T00:20:48+00:00"  # normalization="paper" replaced max_norm as the default
    defaults_before = 'normalization="max_norm"'
    # the chunked PyTorch path ("auto" picks the explicit form at these sizes), two chunks at T ~ 20
    example_params = {"p": 2, "implementation": "pytorch", "chunk_size": 16}
    reference_params = {"implementation": "reference"}
    flop_formula = (f"the explicit form where auto picks it (p = 2, T <= {EXPLICIT_T_PER_D} D, "
                    f"H T^2 <= {EXPLICIT_MAX_ELEMENTS:,}, no dropout) or implementation='reference': H 4 D T^2; else "
                    "Y = D + 1 (values and the denominator column), F = D (+ D (D + 1) / 2 symmetric pairs for p = 2; "
                    "D^2 with dropout): non-causal H 4 T F Y; causal H (4 Tc F Y + 2 Tc C (D + Y)), Tc = T rounded up "
                    "to the chunk C")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops`` of the implementation that ``forward`` uses on (1, heads, T, D)
        inputs (``implementation_for``; dropout counted as active)."""
        p = params["p"]
        dropout = bool(params["dropout"])
        implementation = implementation_for(params["implementation"], p, (1, heads, T, D), dropout)
        if implementation == "reference":
            return heads * matrix_flops(T, D)
        Y = D + 1  # the value columns and the denominator's column rho
        # p = 2: the D (D + 1) / 2 symmetric quadratic features without dropout (chunked.py), all D^2 with it
        quadratic = (D * D if dropout else D * (D + 1) // 2) if p == 2 else 0
        features = D + quadratic
        if not causal:
            return heads * 4 * T * features * Y
        C = chunk_size_for(p, params["chunk_size"])
        Tc = math.ceil(T / C) * C
        return heads * (4 * Tc * features * Y + 2 * Tc * C * (D + Y))

    def __init__(self, p=2, a0=1.0, a1=1.0, a2=0.5, temperature=None, normalization="paper", lim=1.0,
                 dropout=0.0, dropout_variant="auto", implementation="auto", chunk_size=None, triton_kernel="auto"):
        super().__init__()
        if p not in (1, 2) or isinstance(p, bool):
            raise ValueError(f"p must be 1 or 2 (the degree of f); got p={p!r}")
        self.p = int(p)
        self.a0 = _number("a0", a0, lambda x: abs(x) < float("inf"), "a finite number")
        self.a1 = _number("a1", a1, lambda x: abs(x) < float("inf"), "a finite number")
        self.a2 = _number("a2", a2, lambda x: abs(x) < float("inf"), "a finite number")
        if temperature is None or isinstance(temperature, str):
            if temperature is not None and temperature not in TEMPERATURE_NAMES:
                raise ValueError(f"temperature must be a number > 0 or one of {', '.join(TEMPERATURE_NAMES)}; "
                                 f"got {temperature!r}")
            self.temperature = temperature
        else:
            self.temperature = _number("temperature", temperature, lambda x: 0 < x < float("inf"),
                                       f"> 0 or one of {', '.join(TEMPERATURE_NAMES)}")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization '{normalization}' unknown; allowed: {', '.join(NORMALIZATIONS)}")
        self.normalization = normalization
        self.lim = _number("lim", lim, lambda x: 0 < x < float("inf"), "> 0")
        self.dropout = _number("dropout", dropout, lambda x: 0 <= x < 1, "in [0, 1)")
        if dropout_variant not in MODULE_DROPOUT_VARIANTS:
            raise ValueError(f"dropout_variant '{dropout_variant}' unknown; allowed: "
                             f"{', '.join(MODULE_DROPOUT_VARIANTS)}")
        if dropout_variant == "auto":
            dropout_variant = "quadratic" if self.p == 2 else "standard"
        if dropout_variant == "quadratic" and self.p == 1 and self.dropout > 0:
            raise ValueError("dropout_variant 'quadratic' needs p = 2 (p = 1 has no quadratic term); "
                             "with p = 1 use 'standard' or '1d'")
        self.dropout_variant = dropout_variant
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation '{implementation}' unknown; allowed: {', '.join(IMPLEMENTATIONS)}")
        self.implementation = implementation
        if triton_kernel not in triton_limits.KERNELS:
            raise ValueError(f"triton_kernel '{triton_kernel}' unknown; allowed: {', '.join(triton_limits.KERNELS)}")
        if triton_kernel == "parallel" and self.p != 2:
            raise ValueError("triton_kernel 'parallel' computes p = 2 only; use 'chunk' or 'auto' with p = 1")
        self.triton_kernel = triton_kernel
        if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                       or chunk_size < 16 or chunk_size > 1024 or chunk_size & (chunk_size - 1)):
            raise ValueError(f"chunk_size must be a power of two in [16, 1024] or None (= 128 for p = 2 on the "
                             f"PyTorch backend, else 64); got {chunk_size!r}")
        self.chunk_size = chunk_size
        self._warned = False

    def extra_repr(self):
        return (f"p={self.p}, a0={self.a0}, a1={self.a1}, a2={self.a2}, temperature={self.temperature}, "
                f"normalization={self.normalization}, lim={self.lim}, dropout={self.dropout}, "
                f"dropout_variant={self.dropout_variant}, implementation={self.implementation}, "
                f"chunk_size={self.chunk_size}, triton_kernel={self.triton_kernel}")

    def implementation_for(self, q):
        """The implementation ``forward`` uses for a (B, H, T, D) query tensor like q ("auto" resolved)."""
        # with active dropout the explicit form builds (B, H, T, D, D) masks: the chunked path then
        return implementation_for(self.implementation, self.p, tuple(q.shape), self.training and self.dropout > 0)

    def temperature_for(self, D):
        """The temperature (float) for head dim D: a named temperature resolved, a number as is."""
        name = self.temperature
        if name is None:
            if self.normalization != "paper":
                return 1.0
            name = "head_dim" if self.p == 1 else "sqrt_head_dim"
        if name == "head_dim":
            return float(D)
        if name == "sqrt_head_dim":
            return math.sqrt(D)
        return name

    def chunk_size_for(self):
        """Positions per chunk of the causal fast paths (``chunk_size_for``)."""
        return chunk_size_for(self.p, self.chunk_size)

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k, v: (B, H, T, D) -> out (B, H, T, D) in v's dtype; attention_mask (B, T) bool or None."""
        check_qkv(q, k, v, attention_mask)
        if q.shape[2] != k.shape[2]:
            raise ValueError(f"fastmax needs as many queries as keys; got {q.shape[2]} and {k.shape[2]}")
        impl = self.implementation_for(q)
        dropout_on_terms = self.training and self.dropout > 0 and self.dropout_variant != "output_noise"
        if impl == "triton":
            _check_triton(q, v, self.chunk_size_for(), dropout_on_terms)
        self._warn_negative_weights(q.shape[-1])
        causal = bool(causal)
        masks = None
        noise = self.training and self.dropout > 0 and self.dropout_variant == "output_noise"
        if self.training and self.dropout > 0 and not noise:
            masks = draw_dropout_masks(self.dropout_variant, self.dropout, self.p, tuple(k.shape), k.device)
        params = dict(p=self.p, a0=self.a0, a1=self.a1, a2=self.a2,
                      temperature=self.temperature_for(q.shape[-1]), normalization=self.normalization, lim=self.lim,
                      dropout_variant=None if noise else self.dropout_variant,
                      dropout_rate=0.0 if noise else self.dropout, dropout_masks=masks)
        # the states must accumulate in float32 or wider: no autocast to bf16 / fp16 inside
        with torch.autocast(device_type=q.device.type, enabled=False):
            if impl == "reference":
                out = reference_forward(q, k, v, causal, attention_mask, **params)
            else:
                backend = impl if impl != "triton" or self.triton_kernel == "auto" else f"triton_{self.triton_kernel}"
                out = fast_forward(q, k, v, causal, attention_mask, **params, chunk_size=self.chunk_size_for(),
                                   backend=backend)
        if noise:  # the authors' CUDA extension: multiplicative Gaussian noise on the output
            out = out * (1.0 + self.dropout * torch.randn_like(out))
        return out

    def prefill(self, q, k, v, attention_mask=None):
        """``Attention.prefill``: the causal forward (the module's implementation) and the moments
        of ``decode.prefill_state`` in float32 or wider. Every normalization decodes exactly
        ("max_norm" with its causal running maxima in the state).

        Raises:
            ValueError: in training mode with dropout (decoding computes the evaluation output),
                and ``forward``'s errors.
        """
        if self.training and self.dropout > 0:
            raise ValueError(f"fastmax: decoding computes the evaluation-mode output, but the module is in training "
                             f"mode with dropout={self.dropout}; call .eval() first")
        out = self.forward(q, k, v, True, attention_mask)
        work = torch.promote_types(q.dtype, torch.float32)
        with torch.autocast(device_type=q.device.type, enabled=False):
            state = decoding.prefill_state(q.to(work), k.to(work), v.to(work), attention_mask, self.p,
                                           self.normalization, self.lim)
        return out, state

    def step(self, q_t, k_t, v_t, state):
        """``Attention.step``: (B, H, 1, D) inputs, the moments of ``prefill`` updated in place."""
        check_step(q_t, k_t, v_t)
        work = state["M0"].dtype
        with torch.autocast(device_type=q_t.device.type, enabled=False):
            out = decoding.step(q_t.to(work), k_t.to(work), v_t.to(work), state, self.p, self.a0, self.a1, self.a2,
                                self.temperature_for(q_t.shape[-1]), self.normalization, self.lim)
        return out.to(v_t.dtype), state

    def _warn_negative_weights(self, D):
        if self._warned:
            return
        temperature = self.temperature_for(D)
        bound = score_bound(self.normalization, D, self.lim, temperature)
        if kernel_minimum(self.p, self.a0, self.a1, self.a2, bound) < 0:
            self._warned = True
            warnings.warn(
                f"fastmax: with p={self.p}, a0={self.a0}, a1={self.a1}, a2={self.a2}, normalization="
                f"'{self.normalization}', temperature={temperature}, lim={self.lim} and head dim {D}, "
                f"f(s) can be negative (|s| <= {bound}): attention weights may be negative and a denominator "
                f"may reach zero. The defaults (normalization='paper', temperature None = head dim) keep "
                f"p = 1 weights >= 0, as does 'max_norm' with lim^2 * |a1| <= a0 * temperature.",
                RuntimeWarning, stacklevel=3)


def fast_forward(q, k, v, causal, attention_mask=None, p=2, a0=1.0, a1=1.0, a2=0.5, temperature=1.0,
                 normalization="max_norm", lim=1.0, dropout_variant=None, dropout_rate=0.0, dropout_masks=None,
                 chunk_size=64, backend="pytorch"):
    """Fastmax through the factorized fast paths; same arguments and result as
    ``reference.reference_forward`` plus ``chunk_size`` and ``backend`` (``function.BACKENDS``).
    The PyTorch backend computes in float32 or wider; the Triton ones in the inputs' dtype when it
    is float32, bfloat16 or float16 (float32 accumulation inside), else float32.

    Normalization and dropout are plain differentiable PyTorch ops (O(T D)); the attention itself
    is ``function.FastmaxFunction`` (custom backward).
    """
    work = torch.promote_types(q.dtype, torch.float32)
    if backend.startswith("triton"):  # 16-bit inputs as they are (no float32 copies); float64 -> float32
        work = q.dtype if q.dtype in (torch.float32, torch.bfloat16, torch.float16) else torch.float32
    q_scale = k_scale = None
    if normalization == "max_norm" and backend == "pytorch" and dropout_masks is None:
        # a per-position scaling: the fast path applies it block by block (no scaled copies)
        q_hat, k_hat = q.to(work), k.to(work)
        q_scale, k_scale = (max_norm_scale(x, lim, causal, attention_mask) for x in (q_hat, k_hat))
    else:
        q_hat, k_hat = normalize_qk(q.to(work), k.to(work), normalization, lim, causal, attention_mask)
    values = v.to(work)
    key_weight = None
    if attention_mask is not None:
        key_weight = attention_mask.to(work)
        if k_scale is not None:  # padded keys: no linear / quadratic term
            k_scale = k_scale * key_weight[:, None, :]
        else:
            k_hat = k_hat * key_weight[:, None, :, None]
        values = values * key_weight[:, None, :, None]
    keys = (None, None, None)
    if dropout_masks is not None:
        keys = numerator_keys(k_hat, dropout_masks, dropout_variant, dropout_rate, p)
    coeffs = coefficients(p, a0, a1, a2, temperature)
    out = fastmax_factorized(q_hat, k_hat, values, causal, coeffs, key_weight, keys, chunk_size, backend,
                             q_scale, k_scale)
    return out.to(v.dtype)


def _check_triton(q, v, chunk_size, dropout_on_terms):
    """Refuse what the Triton backend cannot run, one line each (``triton_limits.check``, then
    whether triton can run here)."""
    triton_limits.check(q.shape[-1], v.shape[-1], chunk_size, dropout_on_terms)
    if importlib.util.find_spec("triton") is None:
        raise ValueError("implementation='triton' needs the triton package")
    if q.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"implementation='triton' on {q.device.type} tensors needs TRITON_INTERPRET=1 set "
                         "before the kernels are imported (or use implementation='pytorch')")
