"""Tree / bud-expansion attention, registered as ``tree``.

Paper: "High Attention Scores and Where to Find Them" (Menet, Choi, de Viragh, Chettata 2023).
Instead of all l query-key inner products, a query evaluates a perfect binary tree of key/value sums
only partially: starting from a few large buds, it repeatedly splits buds sampled in proportion to a
"mass" until it has T = ceil(l^E) buds, and attends to every bud with its geometric-mean score.

Files: ``reference.py`` (one query at a time; the specification and its conventions),
``cpu.py`` + ``cpu_kernel.cpp`` (compiled CPU kernel, one query per iteration over threads),
``vectorized.py`` (PyTorch ops over all positions and batch elements, any device),
``samplers.py`` (masses, shared random draws),
``numpy_baseline.py`` (the authors' NumPy design, for benchmarks), ``attention/feature_maps.py``.
"""

import warnings

import torch

from attention import Attention, check_qkv, register
from attention.feature_maps import RandomFeatureMap
from attention.tree.cpu import cpu_forward, load_kernel
from attention.tree.reference import reference_forward
from attention.tree.samplers import FEATURE_SAMPLERS, SAMPLERS
from attention.tree.vectorized import vectorized_forward

NORMALIZATIONS = ("consistent", "paper")
IMPLEMENTATIONS = ("auto", "cpu", "vectorized", "reference")
_FORWARD = {"cpu": cpu_forward, "vectorized": vectorized_forward, "reference": reference_forward}
STAT_KEYS = ("queries", "alignment_inner_products", "feature_inner_products",
             "full_attention_inner_products", "terms")


def _as_int_or_none(name, value):
    if value is None or (isinstance(value, str) and value.lower() in ("none", "")):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer or None; got {value!r}") from None
    if f != int(f):
        raise ValueError(f"{name} must be an integer or None; got {value!r}")
    return int(f)


@register("tree")
class TreeAttention(Attention):
    """Tree / bud-expansion attention (Algorithm 1 of the paper) for (B, H, T, D) q, k, v.

    One tree is shared by all heads; a bud's mass is the sum over heads (paper section 2.4).
    Scores use scale 1/sqrt(D) as in GPT-2. Computation is in float64; the output has v's dtype.
    Not differentiable in a useful way (sampling is discrete); meant for evaluation.

    Args:
        E (float): T = ceil(l^E) terms for a history of l keys; 0 < E <= 1. E = 1 is exact attention.
        sampler (str): bud mass, one of "uniform", "edh" (Eq. 3), "alignment", "positive_alignment"
            (Eq. 4), "rff" (Eq. 5), "favor_plus" (Eq. 6), "favor_plus_relu" (Eq. 7).
        normalization (str): "consistent" (every leaf of a bud gets the bud's geometric-mean score:
            weights |n| exp(scale A_n/|n|) on V_n/|n|) or "paper" (Algorithm 1 as printed:
            softmax over buds of scale A_n/|n| times the summed V_n).
        P (int | None): buds expanded per round, >= 1; None = 2^floor(log2(L^(E/2))) with L the
            sequence length padded to a power of two (paper section 3).
        b (float): EDH base, 0 < b < 1 (paper: 0.99).
        R (int | None): feature dimension of rff / favor_plus / favor_plus_relu, even >= 2;
            None = 2D. positive_alignment always uses 2D.
        seed (int): seeds the random feature projection and the sampling noise. The same seed gives
            the same draws in every layer and call (the noise is a hash of seed, batch index,
            query position, round and bud start).
        implementation (str): "auto" (default: "cpu" for CPU tensors, "vectorized" otherwise; if
            the CPU kernel cannot be compiled it warns once and uses "vectorized"), "cpu" (compiled
            C++ kernel, cpu.py), "vectorized" (PyTorch ops, any device) or "reference" (readable,
            one query at a time). All give the same buds for the same seed (float64 inputs).

    Feature maps get q and k scaled by D^(-1/4) each, so the random features estimate
    exp(<q, k>/sqrt(D)) (as the authors' code does); the projection is drawn once per module
    (the authors redraw it for every query).

    Raises:
        ValueError: on bad parameters (message names the parameter and what is allowed); in
            ``forward`` if a key_padding_mask is given (not supported) or shapes are wrong.
    """

    def __init__(self, E=0.5, sampler="edh", normalization="consistent", P=None, b=0.99, R=None,
                 seed=0, implementation="auto"):
        super().__init__()
        try:
            E = float(E)
        except (TypeError, ValueError):
            raise ValueError(f"E must be a number in (0, 1]; got {E!r}") from None
        if not (0.0 < E <= 1.0):
            raise ValueError(f"E must be in (0, 1] (T = ceil(l^E) terms); got E={E}")
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler '{sampler}' unknown; allowed: {', '.join(SAMPLERS)}")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization '{normalization}' unknown; allowed: {', '.join(NORMALIZATIONS)}")
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation '{implementation}' unknown; allowed: {', '.join(IMPLEMENTATIONS)}")
        P = _as_int_or_none("P", P)
        if P is not None and P < 1:
            raise ValueError(f"P (buds expanded per round) must be an integer >= 1 or None; got P={P}")
        b = float(b)
        if not (0.0 < b < 1.0):
            raise ValueError(f"b (EDH base) must be in (0, 1); got b={b}")
        R = _as_int_or_none("R", R)
        if R is not None and (R < 2 or R % 2):
            raise ValueError(f"R (feature dimension) must be an even integer >= 2 or None (= 2D); got R={R}")
        self.E, self.sampler, self.normalization = E, sampler, normalization
        self.P, self.b, self.R, self.seed = P, b, R, int(_as_int_or_none("seed", seed) or 0)
        self.implementation = implementation
        self._feature_map = None
        self.reset_stats()

    def extra_repr(self):
        return (f"E={self.E}, sampler={self.sampler}, normalization={self.normalization}, P={self.P}, "
                f"b={self.b}, R={self.R}, seed={self.seed}, implementation={self.implementation}")

    def feature_map(self, D):
        """The module's RandomFeatureMap for head dim D (created on first use), or None."""
        if self.sampler not in FEATURE_SAMPLERS:
            return None
        if self._feature_map is None or self._feature_map.D != D:
            self._feature_map = RandomFeatureMap(self.sampler, D, self.R, seed=self.seed,
                                                 input_scale=D ** -0.25)
        return self._feature_map

    def forward(self, q, k, v, causal, key_padding_mask=None):
        """q, k, v: (B, H, T, D) -> out (B, H, T, D) in v's dtype. See the class docstring."""
        check_qkv(q, k, v, key_padding_mask)
        if key_padding_mask is not None:
            raise ValueError("tree attention does not support key_padding_mask; pass None "
                             "(pad-free batches only)")
        if q.shape[2] != k.shape[2]:
            raise ValueError(f"tree attention needs as many queries as keys; got {q.shape[2]} and {k.shape[2]}")
        fmap = self.feature_map(q.shape[-1])
        qf = kf = None
        if fmap is not None:
            fmap = fmap.to(q.device)
            qf, kf = fmap(q.double()), fmap(k.double())
        impl = _FORWARD[self._implementation_for(q.device)]
        with torch.no_grad():
            out = impl(q, k, v, bool(causal), bool(self.exclude_self and causal), self.E, self.P,
                       self.sampler, self.normalization, self.b, self.seed, qf=qf, kf=kf,
                       stats=self._stats)
        return out.to(v.dtype)

    def _implementation_for(self, device):
        if self.implementation != "auto":
            return self.implementation
        if device.type != "cpu":
            return "vectorized"
        return "cpu" if _cpu_kernel_available() else "vectorized"

    def stats(self):
        """Counters since the last reset, summed over batch, heads and query positions; every
        count is per (query, head) pair so dicts of several layers can be added:

        - queries: number of (batch, head, query position) triples processed;
        - alignment_inner_products: D-dimensional query-key(-sum) inner products of the tree
          (initial buds + one per split; the left child comes by subtraction, Eq. 2);
        - feature_inner_products: R-dimensional feature inner products (same count, only for
          positive_alignment / rff / favor_plus / favor_plus_relu, else 0);
        - full_attention_inner_products: l per query for exact attention over the same history;
        - terms: final number of buds (the T-term approximation's terms, incl. overshoot).

        Cost fraction = alignment_inner_products / full_attention_inner_products.
        """
        return dict(self._stats)

    def reset_stats(self):
        """Zero the counters returned by ``stats``."""
        self._stats = {key: 0 for key in STAT_KEYS}


_KERNEL_STATE = {}


def _cpu_kernel_available():
    """Whether the CPU kernel compiles/loads; on failure warns once (implementation="auto")."""
    if "ok" not in _KERNEL_STATE:
        try:
            load_kernel()
            _KERNEL_STATE["ok"] = True
        except Exception as exc:  # no compiler / ninja: fall back, but say so
            warnings.warn(f"tree attention: the CPU kernel could not be built ({type(exc).__name__}: {exc}); "
                          "using implementation='vectorized' (slower)", RuntimeWarning)
            _KERNEL_STATE["ok"] = False
    return _KERNEL_STATE["ok"]
