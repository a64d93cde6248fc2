"""Performer attention (FAVOR+), registered as ``performer`` (Choromanski, Likhosherstov, Dohan,
Song, Gane, Sarlos, Hawkins, Davis, Mohiuddin, Kaiser, Belanger, Colwell, Weller 2021,
"Rethinking Attention with Performers", ICLR 2021).

Softmax attention's kernel exp(q . k / sqrt(D)) is estimated with random features,
exp(q . k / sqrt(D)) ~ phi(q') . phi(k') with q' = q D^(-1/4), k' = k D^(-1/4), and attention is
computed as linear attention with these features (``attention.kernelized.kernel_attention``):

- kernel "softmax": Lemma 1's positive random features phi(x) = exp(W x - ||x||^2 / 2) / sqrt(m)
  (``feature_maps.performer_softmax_features``), W of m rows; unbiased, E phi(x) . phi(y) =
  exp(x . y), with orthogonal rows (section 2.4, chi(D) norms) for a lower variance;
- kernel "relu": the generalized attention of section 2.2 with f = ReLU (Performer-ReLU),
  phi(x) = (ReLU(W x) + 1e-3) / sqrt(m) (``feature_maps.performer_relu_features``), a different
  kernel, not an estimate of softmax; ``features="deterministic"`` uses W = I (LRA's setting).

Causal attention keeps prefix sums of phi(k_j) v_j^T and of phi(k_j), the normaliser included
(the paper's unidirectional case); padded keys are left out of both sums.

Numerics (fast path; the ratio is unchanged): query features are exp(logit - its largest logit),
key features exp(logit - s_j) with s_j key j's largest logit, recombined relative to the largest
s_j a query may see (causal: keys j <= i only), so float32 neither overflows nor underflows to an
empty row. The reference (``implementation="reference"``) uses the formulas as written and the
(T, T) matrix.

The projection W (m, D) is a buffer drawn from (seed, layer_idx, draw number): draw 0 at
construction, draw n after n * redraw_interval optimizer steps. The model calls
``after_optimizer_step`` after every optimizer step (the optional method of the attention
contract, ``attention/__init__.py``); nothing else changes W, so evaluation never redraws. The step
count and W are persistent buffers: a checkpoint restores both, and a resumed run redraws at the
same steps with the same matrices.

Decoding (``decode = "state"``, the recurrent form of the unidirectional case): with the W in use
(fixed at evaluation), the state is S = sum_j phi(k_j) v_j^T and Z = sum_j phi(k_j), R (Dv + 1)
numbers per head for R features, plus, for the softmax kernel, the reference m (one number per
head): S and Z hold exp(logit - s_j) e^{s_j - m}, m the largest s_j so far, and are rescaled by
exp(m - m_new) when a key raises it (``kernelized.kernel_state`` / ``kernel_step``), so the
per-key shifts are exact and nothing overflows. The size does not depend on the context.
"""
import torch

from attention.feature_maps import (performer_projection, performer_relu_features, performer_softmax_features,
                                    performer_softmax_logits, position_seed)
from attention.kernelized import (check_lengths, kernel_attention, kernel_attention_flops, kernel_reference,
                                  kernel_state, kernel_step)
from attention.registry import Attention, check_choice, check_int, check_qkv, check_step, matrix_flops, register

KERNELS = ("softmax", "relu")
FEATURES = ("orthogonal", "iid", "deterministic")
IMPLEMENTATIONS = ("fast", "reference")


@register("performer")
class Performer(Attention):
    """FAVOR+ attention for q, k (B, H, T, D) and v (B, H, T, Dv) of any float dtype ->
    (B, H, T, Dv) in v's dtype (computed in float32 or wider, autocast off).

    Args:
        num_features (int): m >= 1, the number of random features (rows of W; default 256, LRA's
            value; performer-pytorch uses int(D ln D) = 266 at D = 64). Ignored with
            ``features="deterministic"`` (m = D).
        kernel (str): "softmax" (Lemma 1, estimates softmax attention; default) or "relu"
            (generalized attention with ReLU).
        redraw_interval (int): >= 0; W is redrawn after every ``redraw_interval`` optimizer steps
            (default 1000, performer-pytorch's); 0 = never (fixed features).
        features (str): "orthogonal" (section 2.4, default), "iid" (independent Gaussian rows) or
            "deterministic" (W = I, m = D; only with kernel "relu", LRA's Performer).
        seed (int): seed of the draws (with the layer index, so layers differ).
        chunk_size (int): >= 1, positions per chunk of the fast path (default 64).
        implementation (str): "fast" (default) or "reference" (the (T, T) matrix, for tests).
        layer_idx, head_dim: model context (``attention.MODEL_CONTEXT``); without head_dim, W is
            drawn at the first call from its D.

    Raises:
        ValueError: a parameter outside the ranges above, "deterministic" with the softmax kernel
            (constructor); bad shapes or mask, causal with different query and key lengths, or a
            head dim other than the one W was drawn for (forward).
    """

    causal = "exact"
    decode = "state"  # S, Z (and the reference m): R (Dv + 1) (+ 1) numbers per head, whatever T
    example_params = {"num_features": 16, "chunk_size": 8}
    reference_params = {"implementation": "reference"}
    flop_formula = ("as linear with R = num_features features (D when deterministic), plus H 4 T D R for the "
                    "projections of q and k; implementation='reference': 4 D H T^2")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: the projections q W^T, k W^T and ``kernelized`` attention over R
        features (R = D with W = I)."""
        if params["implementation"] == "reference":
            return heads * matrix_flops(T, D)
        deterministic = params["features"] == "deterministic"
        R = D if deterministic else params["num_features"]
        projection = 0 if deterministic else 4 * T * D * R
        return heads * (projection + kernel_attention_flops(T, R, D, causal, params["chunk_size"]))

    def __init__(self, num_features=256, kernel="softmax", redraw_interval=1000, features="orthogonal", seed=0,
                 chunk_size=64, implementation="fast", layer_idx=None, head_dim=None):
        super().__init__()
        check_int("num_features", num_features, 1, "the number of random features m")
        check_choice("kernel", kernel, KERNELS)
        check_int("redraw_interval", redraw_interval, 0, "optimizer steps between draws of W, 0 = never")
        check_choice("features", features, FEATURES)
        if features == "deterministic" and kernel != "relu":
            raise ValueError("features='deterministic' (W = I) needs kernel='relu'; the softmax kernel is "
                             "estimated only with random features ('orthogonal' or 'iid')")
        check_int("seed", seed, 0, "seed of the random projections")
        check_int("chunk_size", chunk_size, 1, "positions per chunk of the fast path")
        check_choice("implementation", implementation, IMPLEMENTATIONS)
        self.num_features, self.kernel, self.redraw_interval = num_features, kernel, redraw_interval
        self.features, self.seed, self.chunk_size, self.implementation = features, seed, chunk_size, implementation
        self.layer_idx = 0 if layer_idx is None else int(layer_idx)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))  # optimizer steps seen
        # W (m, D); None for deterministic features, and until the first call without head_dim
        self.register_buffer("projection", None)
        if features != "deterministic" and head_dim is not None:
            self.projection = self.draw(0, head_dim)

    def extra_repr(self):
        return (f"num_features={self.num_features}, kernel={self.kernel}, redraw_interval={self.redraw_interval}, "
                f"features={self.features}, seed={self.seed}, layer_idx={self.layer_idx}")

    def draw(self, index, D):
        """W of draw ``index`` for head dim D: float32 (m, D), a function of (seed, layer_idx, index)."""
        # two splitmix64 steps mix (seed, layer) and then the draw number into one generator seed
        gen = torch.Generator().manual_seed(position_seed(position_seed(self.seed, self.layer_idx), index))
        return performer_projection(self.num_features, D, gen, self.features, dtype=torch.float32)

    def draw_index(self):
        """The draw in use after ``steps`` optimizer steps: steps // redraw_interval (0 if never)."""
        return int(self.steps) // self.redraw_interval if self.redraw_interval else 0

    @torch.no_grad()
    def after_optimizer_step(self):
        """Count one optimizer step; every ``redraw_interval`` steps replace W by the next draw."""
        self.steps += 1
        if self.projection is not None and self.redraw_interval and int(self.steps) % self.redraw_interval == 0:
            self.redraw()

    @torch.no_grad()
    def redraw(self):
        """Set W to draw ``draw_index()`` (in place: device and dtype are kept)."""
        self.projection.copy_(self.draw(self.draw_index(), self.projection.shape[1]))

    def _matrix(self, D, device):
        if self.features == "deterministic":
            return None
        if self.projection is None:  # built without head_dim: draw for the first D seen
            self.projection = self.draw(self.draw_index(), D).to(device)
        if self.projection.shape[1] != D:
            raise ValueError(f"performer: W was drawn for head dim {self.projection.shape[1]}; got q, k with D={D}")
        return self.projection

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k (B, H, T, D), v (B, H, T, Dv); attention_mask (B, T) bool or None -> (B, H, T, Dv)."""
        check_qkv(q, k, v, attention_mask)
        check_lengths(q, k, causal, "performer")
        D = q.shape[-1]
        W = self._matrix(D, q.device)
        work = torch.promote_types(q.dtype, torch.float32)
        with torch.autocast(device_type=q.device.type, enabled=False):
            scale = D ** -0.25  # exp(q . k / sqrt(D)) = exp(q' . k') (section 2.3)
            xq, xk, vw = q.to(work) * scale, k.to(work) * scale, v.to(work)
            W = None if W is None else W.to(work)
            if self.implementation == "reference":
                if self.kernel == "softmax":
                    qf, kf = performer_softmax_features(xq, W), performer_softmax_features(xk, W)
                else:
                    qf, kf = performer_relu_features(xq, W), performer_relu_features(xk, W)
                return kernel_reference(qf, kf, vw, causal, attention_mask).to(v.dtype)
            query_features, key_features = self._feature_maps(W)
            out = kernel_attention(xq, xk, vw, causal, query_features, key_features, attention_mask, self.chunk_size)
            return out.to(v.dtype)

    def _feature_maps(self, W):
        """(query_features, key_features) of the fast path and the decode path for W in the work
        dtype (None: deterministic): ``kernel_attention``'s feature functions of x = q D^(-1/4)."""
        if self.kernel == "softmax":
            def query_features(x):  # a constant per query cancels in the ratio: no overflow
                logits = performer_softmax_logits(x, W)
                return torch.exp(logits - logits.amax(-1, keepdim=True).detach())

            def key_features(x):  # per key: stored as exp(logit - s_j) with its scale s_j
                logits = performer_softmax_logits(x, W)
                shift = logits.amax(-1).detach()
                return torch.exp(logits - shift[..., None]), shift
        else:
            def query_features(x):
                return performer_relu_features(x, W)

            def key_features(x):
                return performer_relu_features(x, W), None
        return query_features, key_features

    def prefill(self, q, k, v, attention_mask=None):
        """``Attention.prefill``: the causal forward, and the state of the W in use (module
        docstring), in float32 or wider (``kernelized.kernel_state``)."""
        out = self.forward(q, k, v, True, attention_mask)
        work = torch.promote_types(q.dtype, torch.float32)
        with torch.autocast(device_type=q.device.type, enabled=False):
            W = self._matrix(q.shape[-1], q.device)
            key_features = self._feature_maps(None if W is None else W.to(work))[1]
            kf, s = key_features(k.to(work) * q.shape[-1] ** -0.25)
            state = kernel_state(kf, v.to(work), attention_mask, s)
        return out, state

    def step(self, q_t, k_t, v_t, state):
        """``Attention.step``: (B, H, 1, D) inputs, the state of ``prefill`` updated in place."""
        check_step(q_t, k_t, v_t)
        work = state["S"].dtype
        scale = q_t.shape[-1] ** -0.25
        with torch.autocast(device_type=q_t.device.type, enabled=False):
            W = self._matrix(q_t.shape[-1], q_t.device)
            query_features, key_features = self._feature_maps(None if W is None else W.to(work))
            kf, s = key_features(k_t.to(work) * scale)
            out = kernel_step(query_features(q_t.to(work) * scale), kf, v_t.to(work), state, s)
        return out.to(v_t.dtype), state
