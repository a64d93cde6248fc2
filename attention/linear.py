"""Linear attention, registered as ``linear`` (Katharopoulos, Vyas, Pappas, Fleuret 2020,
"Transformers are RNNs: Fast Autoregressive Transformers with Linear Attention").

Section 3.2 replaces exp(q . k) by a kernel phi(q) . phi(k) with phi(x) = elu(x) + 1 (positive, no
1/sqrt(D) scaling), so that

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / phi(q_i)^T (sum_j phi(k_j))

costs O(T D Dv) instead of O(T^2 D). Section 3.3 (causal masking) keeps the sums over j <= i:
S_i = sum_{j <= i} phi(k_j) v_j^T and Z_i = sum_{j <= i} phi(k_j).

The efficient path is ``attention.kernelized.kernel_attention`` (shared with ``performer``): the
running sums chunk by chunk, no (T, T) matrix; padded keys add nothing to S or Z, and a query
with no real key up to it outputs zeros, as softmax does for a row without allowed keys.
Accumulation in float32 or wider (half inputs are promoted, autocast is off inside); the output
has v's dtype.

``implementation="reference"`` materialises the (T, T) matrix phi(Q) phi(K)^T with the mask; tests
compare the two.

Decoding (``decode = "state"``, the paper's recurrent form, section 3.4): the state is S and Z
(``kernelized.kernel_state`` / ``kernel_step``), D x Dv + D numbers per head whatever the context.
"""
import torch
import torch.nn.functional as F

from attention.kernelized import (check_lengths, kernel_attention, kernel_attention_flops, kernel_reference,
                                  kernel_state, kernel_step)
from attention.registry import Attention, check_choice, check_int, check_qkv, check_step, matrix_flops, register

IMPLEMENTATIONS = ("fast", "reference")


def elu_features(x):
    """phi(x) = elu(x) + 1 (Katharopoulos et al., section 3.2), elementwise; positive."""
    return F.elu(x) + 1


@register("linear")
class LinearAttention(Attention):
    """Linear attention with phi = elu + 1 (Katharopoulos et al. 2020, sections 3.2-3.3) for
    q, k (B, H, T, D) and v (B, H, T, Dv) of any float dtype -> (B, H, T, Dv) in v's dtype.

    No parameters, no 1/sqrt(D) scaling (the paper's kernel); padded keys (``attention_mask``
    False) are left out of every sum; a row without any allowed key outputs zeros.

    Args:
        chunk_size (int): >= 1, positions per chunk (default 64); speed and memory only, the
            result is the same up to rounding.
        implementation (str): "fast" (``kernel_attention``, default) or "reference" (the (T, T)
            matrix, for tests).

    Raises:
        ValueError: chunk_size not an integer >= 1 or an unknown implementation (constructor);
            bad shapes or mask, or causal with different query and key lengths (forward).
    """

    causal = "exact"
    decode = "state"
    example_params = {"chunk_size": 8}
    reference_params = {"implementation": "reference"}
    flop_formula = ("non-causal H (4 T D^2 + 2 T D); causal adds the (C, C) blocks: "
                    "H (2 sum(n_c^2) 2D + T (4 D^2 + 2 D)); implementation='reference': 4 D H T^2")

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """``Attention.flops``: the features are D-dimensional (phi = elu + 1), R = D."""
        if params["implementation"] == "reference":
            return heads * matrix_flops(T, D)
        return heads * kernel_attention_flops(T, D, D, causal, params["chunk_size"])

    def __init__(self, chunk_size=64, implementation="fast"):
        super().__init__()
        check_int("chunk_size", chunk_size, 1, "positions per chunk of the fast path")
        check_choice("implementation", implementation, IMPLEMENTATIONS)
        self.chunk_size, self.implementation = chunk_size, implementation

    def extra_repr(self):
        return f"chunk_size={self.chunk_size}, implementation={self.implementation}"

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k (B, H, T, D), v (B, H, T, Dv); attention_mask (B, T) bool or None -> (B, H, T, Dv)."""
        check_qkv(q, k, v, attention_mask)
        check_lengths(q, k, causal, "linear")
        work = torch.promote_types(q.dtype, torch.float32)
        with torch.autocast(device_type=q.device.type, enabled=False):
            qw, kw, vw = q.to(work), k.to(work), v.to(work)
            if self.implementation == "reference":
                return kernel_reference(elu_features(qw), elu_features(kw), vw, causal, attention_mask).to(v.dtype)
            out = kernel_attention(qw, kw, vw, causal, elu_features, lambda x: (elu_features(x), None),
                                   attention_mask, self.chunk_size)
            return out.to(v.dtype)

    def prefill(self, q, k, v, attention_mask=None):
        """``Attention.prefill``: the causal forward, and the sums S, Z over the real keys in
        float32 or wider (``kernel_state``)."""
        out = self.forward(q, k, v, True, attention_mask)
        work = torch.promote_types(q.dtype, torch.float32)
        with torch.autocast(device_type=q.device.type, enabled=False):
            state = kernel_state(elu_features(k.to(work)), v.to(work), attention_mask)
        return out, state

    def step(self, q_t, k_t, v_t, state):
        """``Attention.step``: (B, H, 1, D) inputs, the state of ``prefill`` updated in place."""
        check_step(q_t, k_t, v_t)
        work = state["S"].dtype
        with torch.autocast(device_type=q_t.device.type, enabled=False):
            out = kernel_step(elu_features(q_t.to(work)), elu_features(k_t.to(work)), v_t.to(work), state)
        return out.to(v_t.dtype), state
