"""Tree / bud-expansion attention, registered as ``tree``.

Paper: "High Attention Scores and Where to Find Them" (Menet, Choi, de Viragh, Chettata 2023).
Instead of all l query-key inner products, a query evaluates a perfect binary tree of key/value sums
only partially: starting from a few large buds, it repeatedly splits buds sampled in proportion to a
"mass" until it has n_terms = ceil(l^E) buds (the paper's T), and attends to every bud with its
geometric-mean score.

Files: ``reference.py`` (one query at a time; the specification and its conventions),
``schedule.py`` (number of terms, P, initial buds: shared by all implementations),
``cpu.py`` + ``cpu_kernel.cpp`` (compiled CPU kernel, one query per iteration over threads; also the
decode step's bud expansion on a CPU),
``vectorized.py`` (PyTorch ops over all positions and batch elements, any device),
``samplers.py`` (masses, shared random draws),
``decode.py`` (the decode path: a tree over the cached keys growing by a leaf per token, one new
query's bud expansion over it; ``TreeAttention.prefill`` / ``step``),
``numpy_baseline.py`` (the authors' NumPy design, for benchmarks), ``attention/feature_maps.py``.
"""

import math
import warnings

import torch

from attention.registry import Attention, InferenceOnlyError, check_qkv, check_step, needs_grad, register
from attention.feature_maps import (RandomFeatureMap, favor_plus_features, favor_plus_relu_features,
                                    rff_features)
from attention.tree.cpu import cpu_forward, load_kernel
from attention.tree.decode import TreeDecodeState, decode_query
from attention.tree.reference import add_stats, reference_forward
from attention.tree.samplers import FEATURE_SAMPLERS, SAMPLERS, layer_seed
from attention.tree.schedule import DESCENTS, block_length, default_P, num_terms, terms_table
from attention.tree.vectorized import vectorized_forward

NORMALIZATIONS = ("bud_mean", "paper")
FEATURE_REDRAWS = ("per_query", "per_layer")
IMPLEMENTATIONS = ("auto", "cpu", "vectorized", "reference")
_FORWARD = {"cpu": cpu_forward, "vectorized": vectorized_forward, "reference": reference_forward}
_FEATURE_FUNCTIONS = {"rff": rff_features, "favor_plus": favor_plus_features,
                      "favor_plus_relu": favor_plus_relu_features}
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


def _as_bool(name, value):
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    if value in (True, False):  # also 0 / 1
        return bool(value)
    raise ValueError(f"{name} must be True or False; got {value!r}")


def _choice(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name} '{value}' unknown; allowed: {', '.join(allowed)}")
    return value


@register("tree")
class TreeAttention(Attention):
    """Tree / bud-expansion attention (Algorithm 1 of the paper) for (B, H, T, D) q, k, v.

    One tree is shared by all heads; a bud's mass is the sum over heads (paper section 2.4).
    Scores use scale 1/sqrt(D) as in GPT-2. Inference only: the bud sampling is not
    differentiable, and calling it with gradients enabled on inputs that require them raises.

    Precision: the reference and the vectorized path compute in float64. The CPU kernel does not:
    it computes key / value sums, the query-key-sum inner products and the weighted value sum in
    the input's precision (float64 for float64 inputs, float32 for anything else), and feature
    sums, masses, noise and softmax weights in float64 (cpu.py). The output has v's dtype.

    Args:
        E (float): n_terms = ceil(l^E) terms for a history of l keys; 0 < E <= 1. E = 1 is exact
            attention.
        sampler (str): bud mass, one of "uniform", "edh" (Eq. 3), "alignment", "positive_alignment"
            (Eq. 4), "rff" (Eq. 5), "favor_plus" (Eq. 6), "favor_plus_relu" (Eq. 7).
        normalization (str): "bud_mean" (every leaf of a bud gets the bud's geometric-mean score:
            weights |n| exp(scale A_n/|n|) on V_n/|n|; deterministic given the buds, biased:
            |n| exp(mean s) <= sum exp(s), so buds whose leaves' scores are spread out are
            under-weighted) or "paper" (Algorithm 1 as printed and the authors' code: softmax over
            buds of scale A_n/|n| times the summed V_n; with equal scores it returns
            (l / #buds) mean(v) instead of mean(v)).
        descent (str): a sampled bud whose right child is empty: "authors" (default, the authors'
            code: it becomes its left child and its draw is used up) or "split" (it descends and
            is split in the same round). See reference.py.
        P (int | None): buds expanded per round, >= 1; None = 2^floor(log2(L^(E/2))) (paper
            section 3) with L = block_size padded to a power of two (as the authors: the model's
            block size, 1024 for GPT-2), or, without block_size, the sequence length padded to a
            power of two. (The authors' tree also has L = block size leaves; the tree length does
            not change any result here, because buds are tree nodes aligned to powers of two
            whose width depends on l and P only, so the implementations size the tree by the
            sequence length.)
        b (float): EDH base, 0 < b < 1 (paper: 0.99).
        R (int | None): feature dimension of rff / favor_plus / favor_plus_relu, even >= 2;
            None = 2D. positive_alignment always uses 2D.
        feature_redraw (str): random projection of the feature samplers (rff, favor_plus,
            favor_plus_relu; shared by all heads, as in the authors' code). "per_query" (default,
            the paper's setting; the authors' ``kernel_setup`` draws a new W at every position):
            a projection W_t for every position t, used for query t and for key t, whose features
            then enter the tree's feature sums; so, as in their code, the feature inner product of
            query t with a bud mixes W_t with the projections of the bud's keys, and only same-
            position products estimate the softmax kernel. W_t is counter-based, a function of
            (seed, layer_idx, t) (feature_maps.position_projections), so every implementation and
            every call sees the same W_t. Cost: one orthogonal (R/2, D) projection per position
            and layer, O(D^2 R) work each (about 0.4 s per layer for T = 1024, D = 64, R = 128 on
            one core), paid once: the module keeps the projections of the longest sequence seen
            (T R/2 D float64 numbers, 32 MB per layer at T = 1024). "per_layer": one W per
            (seed, layer), drawn once (negligible cost); every feature inner product then is an
            estimate of the softmax kernel (unbiased for rff / favor_plus).
        seed (int): seeds the projections and the sampling noise. A layer's draws hash
            (seed, layer_idx) (samplers.layer_seed) with batch index, query position, round and
            bud start (noise) or with the position (projections), so layers draw independently
            and every implementation sees the same draws.
        implementation (str): "auto" (default: "cpu" for CPU tensors, "vectorized" otherwise; if
            the CPU kernel cannot be compiled it warns once and uses "vectorized"), "cpu" (compiled
            C++ kernel, cpu.py), "vectorized" (PyTorch ops, any device) or "reference" (readable,
            one query at a time). All give the same buds for the same seed (float64 inputs). It
            also selects the code of ``step``'s bud expansion (``decode_implementation``).
        exclude_self (bool): with causal, query t attends to keys 0..t-1 only (as in the authors'
            code); position 0 gets a zero output. Used by eval_ppl's casino protocol.
        layer_idx (int): 0-based index of the model's block; enters every random draw (seed).
        block_size (int | None): the model's maximum sequence length; sets the default P.
            layer_idx and block_size are supplied by the model (attention.MODEL_CONTEXT).
        record_keys (bool): record which keys every query attends to exactly (default False: no
            recording, no cost). True runs the reference implementation (``implementation``
            must be "auto" or "reference"; the fast paths do not record) and keeps the record of
            the last call in ``self.recorded`` (see ``forward_recorded``). For analyses such as
            the recall study (scripts/analysis/recall_tree.py).

    Feature maps get q and k scaled by D^(-1/4) each, so the random features estimate
    exp(<q, k>/sqrt(D)) (as the authors' code does).

    Decoding (``decode = "kv_cache"``; the paper's setting, autoregressive inference, sections
    1-2.4): ``prefill`` runs the causal forward on the prompt and builds a ``decode.TreeDecodeState``,
    the cached keys and values (the tree's leaves) with the node sums above them, one tree per batch
    element shared by all heads; ``step`` inserts the new token's key and value into the log2(C) + 1
    nodes on its leaf's path (the tree doubles its leaf count C when full) and runs the bud
    expansion of the new query over the tree (``decode.decode_query``): T_terms = ceil(l^E) buds
    for its history of l keys, the draws of the whole-sequence path's row for the same position and
    batch index, so its output is that row's (float64: up to rounding; E = 1: exact attention).
    P during decoding: the configured ``P``, else the default from ``block_size`` (the model's,
    fixed), as ``forward`` uses; only a module with neither (not built by a model) takes the default
    from the prefix length t + 1, as ``forward`` on that prefix does. Which code runs the step's bud
    expansion follows ``implementation`` (``decode_implementation``): the compiled CPU kernel's
    per-query function over the state's node tables when the forward's implementation is the
    kernel ("cpu", or "auto" on a CPU), else PyTorch ops on the inputs' device ("vectorized",
    "reference", other devices). Both compute in float64 (float32 inputs: the CPU kernel's forward
    keeps float32 sums, so a step and the forward's row agree to float32 rounding, with the same
    draws unless two buds' keys nearly tie) and record no keys (``record_keys`` concerns
    ``forward``). Its cost per token and head: n_terms to n_terms + P - 1 inner products (counted
    in ``stats`` like ``forward``'s), not l.
    Memory: the state grows with the context (a KV cache of float64 keys and values plus as many
    internal nodes, and feature-key sums for the feature samplers).

    Raises:
        ValueError: on bad parameters (message names the parameter and what is allowed; also
            record_keys with implementation "cpu" or "vectorized"); in
            ``forward`` if an attention_mask is given (not supported), exclude_self without causal,
            or shapes are wrong.
        RuntimeError: in ``forward`` (and ``prefill``, ``step``) with gradients enabled and an input
            that requires them.
    """

    causal = "exact"
    decode = "kv_cache"
    trainable = False  # the bud sampling is not differentiable
    supports_attention_mask = False
    reference_params = {"implementation": "reference"}
    flop_formula = ("reported: 2D per alignment inner product + 2D per bud + 2R per feature inner product (module "
                    "stats); estimate when it has not run: 4 D H sum over queries of ceil(l^E)")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``, an estimate (the buds are sampled): one D-dim inner product and one
        value term per bud, ceil(l^E) buds for a history of l keys (causal: l = t + 1, or t with
        exclude_self; non-causal: l = T); feature samplers add the projections of q and k (R = 2D
        by default). The same buds for every implementation."""
        E = float(params["E"])
        table = terms_table(T, E)
        if causal:
            terms = int(table[:T].sum()) if params["exclude_self"] else int(table[1:].sum())
        else:
            terms = T * int(table[T])
        sampler = params["sampler"]
        R = 0 if sampler in ("uniform", "edh", "alignment") else (2 * D if sampler == "positive_alignment"
                                                                 else params["R"] or 2 * D)
        return heads * (4 * D * terms + 2 * R * terms + (2 * T * D * R if R else 0))

    def reported_flops(self, T, D, heads):
        """``Attention.reported_flops`` from ``stats`` (over all calls since the last reset): 2D per
        alignment inner product, 2D per bud of the weighted value sum, 2R per feature inner product,
        plus the feature projections of q and k; None before any call."""
        stats = self.stats()
        if not stats["queries"]:
            return None
        per_call = heads * T / stats["queries"]
        R = 0
        if stats["feature_inner_products"]:
            R = 2 * D if self.sampler == "positive_alignment" else (self.R or 2 * D)
        flops = (2 * D * stats["alignment_inner_products"] + 2 * D * stats["terms"]
                 + 2 * R * stats["feature_inner_products"]) * per_call
        return flops + (2 * heads * T * D * R if R else 0)

    def __init__(self, E=0.5, sampler="edh", normalization="bud_mean", descent="authors", P=None, b=0.99,
                 R=None, feature_redraw="per_query", seed=0, implementation="auto", exclude_self=False,
                 layer_idx=0, block_size=None, record_keys=False):
        super().__init__()
        try:
            E = float(E)
        except (TypeError, ValueError):
            raise ValueError(f"E must be a number in (0, 1]; got {E!r}") from None
        if not (0.0 < E <= 1.0):
            raise ValueError(f"E must be in (0, 1] (n_terms = ceil(l^E) terms); got E={E}")
        if normalization == "consistent":
            raise ValueError("normalization 'consistent' was renamed 'bud_mean'; allowed: " + ", ".join(NORMALIZATIONS))
        self.sampler = _choice("sampler", sampler, SAMPLERS)
        self.normalization = _choice("normalization", normalization, NORMALIZATIONS)
        self.descent = _choice("descent", descent, DESCENTS)
        self.feature_redraw = _choice("feature_redraw", feature_redraw, FEATURE_REDRAWS)
        self.implementation = _choice("implementation", implementation, IMPLEMENTATIONS)
        P = _as_int_or_none("P", P)
        if P is not None and P < 1:
            raise ValueError(f"P (buds expanded per round) must be an integer >= 1 or None; got P={P}")
        b = float(b)
        if not (0.0 < b < 1.0):
            raise ValueError(f"b (EDH base) must be in (0, 1); got b={b}")
        R = _as_int_or_none("R", R)
        if R is not None and (R < 2 or R % 2):
            raise ValueError(f"R (feature dimension) must be an even integer >= 2 or None (= 2D); got R={R}")
        block_size = _as_int_or_none("block_size", block_size)
        if block_size is not None and block_size < 1:
            raise ValueError(f"block_size must be >= 1 or None; got {block_size}")
        self.E, self.P, self.b, self.R = E, P, b, R
        self.seed = int(_as_int_or_none("seed", seed) or 0)
        self.exclude_self, self.layer_idx, self.block_size = bool(exclude_self), int(layer_idx), block_size
        self.draw_seed = layer_seed(self.seed, self.layer_idx)
        self.record_keys = _as_bool("record_keys", record_keys)
        if self.record_keys and self.implementation not in ("auto", "reference"):
            raise ValueError(f"record_keys=True records in the reference implementation only; got implementation="
                             f"'{self.implementation}' (allowed with record_keys: auto, reference)")
        self.recorded = None
        self._feature_map = None
        self.reset_stats()

    def extra_repr(self):
        return (f"E={self.E}, sampler={self.sampler}, normalization={self.normalization}, descent={self.descent}, "
                f"P={self.P}, b={self.b}, R={self.R}, feature_redraw={self.feature_redraw}, seed={self.seed}, "
                f"implementation={self.implementation}, exclude_self={self.exclude_self}, layer_idx={self.layer_idx}"
                + (", record_keys=True" if self.record_keys else ""))

    def feature_map(self, D):
        """The module's RandomFeatureMap for head dim D (created on first use), or None."""
        if self.sampler not in FEATURE_SAMPLERS:
            return None
        if self._feature_map is None or self._feature_map.D != D:
            self._feature_map = RandomFeatureMap(self.sampler, D, self.R, seed=self.draw_seed & 0x7FFFFFFFFFFFFFFF,
                                                 input_scale=D ** -0.25,
                                                 per_position=self.feature_redraw == "per_query")
        return self._feature_map

    def buds_per_round(self, T):
        """P for a sequence of length T (the module's P, else the default from the block size)."""
        if self.P is not None:
            return self.P
        return default_P(block_length(self.block_size or T), self.E)

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k, v: (B, H, T, D) -> out (B, H, T, D) in v's dtype. See the class docstring.
        With ``record_keys`` the call goes through ``forward_recorded`` (reference implementation)
        and its record is kept in ``self.recorded``."""
        if self.record_keys:
            out, self.recorded = self.forward_recorded(q, k, v, causal, attention_mask)
            return out
        qf, kf = self._checked_features(q, k, v, causal, attention_mask)
        impl = _FORWARD[self._implementation_for(q.device)]
        out = impl(q, k, v, bool(causal), self.exclude_self, self.E, self.buds_per_round(q.shape[2]),
                   self.sampler, self.normalization, self.b, self.draw_seed, qf=qf, kf=kf, stats=self._stats,
                   descent=self.descent)
        return out.to(v.dtype)

    def forward_recorded(self, q, k, v, causal, attention_mask=None, positions=None):
        """The reference implementation with this module's parameters and draws, recording which
        keys each query attends to exactly. Works whatever ``record_keys`` and ``implementation``
        are (every implementation makes the same draws, so the record describes the fast paths'
        output too, up to their rounding: exactly in float64). Adds to ``stats`` like ``forward``.

        Args:
            q, k, v (torch.Tensor): (B, H, T, D) float; causal (bool); attention_mask: must be None.
            positions (iterable of int | torch.Tensor | None): query positions to evaluate, the same
                for every batch element, or a bool (B, T) tensor (True = evaluate) per batch
                element; the others get a zero output and no record (rows of -1 / False). None =
                all. A query's result does not depend on which other positions are evaluated
                (its draws depend on its batch index and position only).

        Returns:
            (out, record): out (B, H, T, D) in v's dtype; record dict (``reference_forward``, paper
            section 2 and Algorithm 1):
            - "exact_keys": bool (B, H, T, T), [b, h, t, i] = key i is a term of its own in query
              t's output (a bud holding one key): its exact score <q_t, k_i> / sqrt(D) entered
              the output with softmax's weight exp(score). One tree serves all heads (section
              2.4), so every head has the same rows (an expanded view of a (B, T, T) tensor).
              Always within the allowed keys (i <= t causal, i < t with exclude_self); with E = 1
              all of them.
            - "bud_start": int64 (B, T, T), the first key position of the bud (term) that holds
              key i for query t; -1 outside the history or for a query not evaluated.

        Raises:
            ValueError, RuntimeError: as ``forward``; ValueError for a position outside 0..T-1 or
                a positions tensor that is not bool (B, T).
        """
        qf, kf = self._checked_features(q, k, v, causal, attention_mask)
        B, H, T, _ = q.shape
        if torch.is_tensor(positions) and positions.dim() == 2:
            if positions.shape != (B, T) or positions.dtype != torch.bool:
                raise ValueError(f"positions as a tensor must be bool of shape (B, T) = {(B, T)}; got "
                                 f"{positions.dtype} {tuple(positions.shape)}")
            positions = positions.cpu()
        elif positions is not None:
            positions = [int(p) for p in positions]
            bad = [p for p in positions if not 0 <= p < T]
            if bad:
                raise ValueError(f"positions must lie in 0..{T - 1} (the sequence length is {T}); got {bad[:5]}")
        record = {}
        out = reference_forward(q, k, v, bool(causal), self.exclude_self, self.E, self.buds_per_round(T),
                                self.sampler, self.normalization, self.b, self.draw_seed, qf=qf, kf=kf,
                                stats=self._stats, positions=positions, descent=self.descent, record=record)
        record["exact_keys"] = record["exact_keys"][:, None].expand(B, H, T, T)
        return out.to(v.dtype), record

    def prefill(self, q, k, v, attention_mask=None, capacity=None):
        """``Attention.prefill``: the causal ``forward`` on the prompt and the decode state that
        continues it (class docstring, "Decoding").

        Args:
            q, k, v (torch.Tensor): (B, H, T, D), T >= 1, any float dtype and device.
            attention_mask: must be None (tree attention takes no mask).
            capacity (int | None): leaves the state's tree has before its first doubling
                (``decode.TreeDecodeState``); None: 2T rounded up to a power of two, at least 16.

        Returns:
            (out, state): out (B, H, T, D) in v's dtype, ``forward(q, k, v, causal=True)``; state a
            ``decode.TreeDecodeState`` (float64, on the inputs' device) for ``step``.

        Raises:
            ValueError: an attention_mask, an empty prompt, bad shapes or capacity.
            RuntimeError: with gradients enabled and an input that requires them.
        """
        if q.dim() == 4 and q.shape[2] < 1:
            raise ValueError(f"tree attention: prefill needs a prompt of at least one token; got q of shape "
                             f"{tuple(q.shape)}")
        out = self.forward(q, k, v, True, attention_mask)
        fmap = self.feature_map(q.shape[-1])
        kf = None if fmap is None else fmap.to(k.device)(k.double())
        return out, TreeDecodeState(k, v, kf, capacity)

    def step(self, q_t, k_t, v_t, state):
        """``Attention.step``: the new token at position t = ``state.length`` is inserted into the tree
        (before its query's bud expansion, or after it with ``exclude_self``), and its query's
        Algorithm 1 runs over the history of l = t + 1 keys (l = t with ``exclude_self``), with
        n_terms = ceil(l^E), P as in the class docstring and the draws of batch index b and position
        t: the last row of ``forward`` on positions 0..t.

        Args:
            q_t, k_t, v_t (torch.Tensor): (B, H, 1, D), the dtype and device of the prefill's inputs.
            state (decode.TreeDecodeState): what ``prefill`` or the previous ``step`` returned;
                updated in place.

        Returns:
            (o_t, state): o_t (B, H, 1, D) in v_t's dtype; the state after token t.

        Raises:
            ValueError: bad shapes, or a state that is not a ``TreeDecodeState`` of this batch size,
                head count and head dims, or one made for a sampler with (without) feature maps
                by a module whose sampler has none (has them).
            RuntimeError: with gradients enabled and an input that requires them.
        """
        check_step(q_t, k_t, v_t)
        if not isinstance(state, TreeDecodeState):
            raise ValueError(f"tree attention: step needs the state that prefill or step returned (a "
                             f"TreeDecodeState); got {type(state).__name__}")
        B, H, _, D = q_t.shape
        if (state.K.shape[0], state.K.shape[2], state.K.shape[3], state.V.shape[3]) != (B, H, D, v_t.shape[-1]):
            raise ValueError(f"tree attention: step inputs q_t {tuple(q_t.shape)}, v_t {tuple(v_t.shape)} do not "
                             f"match the state's (B, H, D, Dv) = ({state.K.shape[0]}, {state.K.shape[2]}, "
                             f"{state.K.shape[3]}, {state.V.shape[3]})")
        use_f = self.sampler in FEATURE_SAMPLERS
        if use_f != (state.F is not None):
            raise ValueError(f"tree attention: the state was made by a module whose sampler "
                             f"{'has' if state.F is not None else 'has no'} feature sums; this module's sampler is "
                             f"'{self.sampler}' (prefill with this module)")
        if needs_grad(q_t, k_t, v_t):
            raise InferenceOnlyError("tree attention is inference-only (its bud sampling is not differentiable); "
                                     "call step under torch.no_grad()")
        t = state.length
        qf = self._step_features(q_t, t)[:, :, 0] if use_f else None
        kf = self._step_features(k_t, t) if use_f else None
        if not self.exclude_self:
            state.append(k_t, v_t, kf)
        l = t if self.exclude_self else t + 1
        ips = terms = 0
        if l == 0:  # exclude_self at position 0: nothing to attend to
            out = torch.zeros(B, H, v_t.shape[-1], dtype=torch.float64, device=q_t.device)
        else:
            out, info = decode_query(state, q_t[:, :, 0].double(), l, t, num_terms(l, self.E),
                                     self.buds_per_round(t + 1), self.sampler, self.normalization,
                                     1.0 / math.sqrt(D), self.b, self.draw_seed, qf=qf, descent=self.descent,
                                     implementation=self.decode_implementation(state.K.device))
            ips, terms = int((info["initial"] + info["splits"]).sum()), int(info["terms"].sum())
        if self.exclude_self:
            state.append(k_t, v_t, kf)
        add_stats(self._stats, H, B, ips, B * l, terms, use_f)
        return out[:, :, None].to(v_t.dtype), state

    def _step_features(self, x, t):
        """Feature-mapped x (B, H, 1, D) of position t: float64 (B, H, 1, R), what ``forward``'s
        map gives at position t (``feature_redraw`` "per_query": the projection W_t of position t)."""
        fmap = self.feature_map(x.shape[-1]).to(x.device)
        if fmap.kind == "positive_alignment" or not fmap.per_position:
            return fmap(x.double())
        W = fmap.projections(t + 1)[t:t + 1].to(x.device)
        return _FEATURE_FUNCTIONS[fmap.kind](x.double() * fmap.input_scale, W)

    def _checked_features(self, q, k, v, causal, attention_mask):
        """Check the call (see ``forward``'s errors) and return the feature-mapped (qf, kf), or
        (None, None) for samplers without feature maps."""
        check_qkv(q, k, v, attention_mask)
        if attention_mask is not None:
            raise ValueError("tree attention does not support attention_mask; pass None (pad-free batches only)")
        if self.exclude_self and not causal:
            raise ValueError("tree attention: exclude_self needs causal=True")
        if needs_grad(q, k, v):
            raise InferenceOnlyError("tree attention is inference-only (its bud sampling is not differentiable), but it "
                               "was called with gradients enabled: train with a trainable attention such as "
                               "softmax and swap tree in for evaluation (python eval_ppl.py --attention=tree), "
                               "or call it under torch.no_grad()")
        fmap = self.feature_map(q.shape[-1])
        if fmap is None:
            return None, None
        fmap = fmap.to(q.device)
        return fmap(q.double()), fmap(k.double())

    def decode_implementation(self, device):
        """The implementation of ``step``'s bud expansion (``decode.decode_query``) on ``device``:
        "cpu" (the compiled kernel) when the forward's would be the CPU kernel ("cpu", or "auto" on
        a CPU with a working compiler), else "torch" (PyTorch ops: other devices, "vectorized",
        "reference", or "auto" when the kernel cannot be built)."""
        return "cpu" if self._implementation_for(device) == "cpu" else "torch"

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
        - terms: final number of buds (the n_terms-term approximation's terms, incl. overshoot).

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
