"""What an attention module did inside a model: its inputs and outputs per layer (``capture``) and
the (T, T) weights it applied (``attention_weights``, ``probe_weights``). A library for the
analysis tools (attention maps, CLS attention, the recall study), not a script.
"""
import math

import torch

from attention.fastmax.reference import fastmax_weights
from attention.softmax import allowed_keys

CLOSED_FORMS = ("softmax", "softmax_reference", "fastmax")
# attributes a forward call may change as a side effect (tree attention's cost counters and its
# record of exact keys); the probe's calls restore them, so a probe leaves no trace in stats()
_SIDE_EFFECTS = ("_stats", "recorded")


def capture(model, idx):
    """Run ``model`` once on ``idx`` (1, T) under no_grad and return, per layer, what its
    attention module received and returned.

    Returns:
        list (one per layer, in order) of dicts with "q", "k", "v" (B, H, T, D), "out" (B, H, T, D),
        "causal" (bool), "attention_mask" ((B, T) bool or None), "mechanism" (the module).
    """
    records, handles = [], []
    for layer, mechanism in enumerate(model.attention_modules()):
        record = {"mechanism": mechanism}
        records.append(record)

        def pre_hook(module, args, kwargs, record=record):
            names = ("q", "k", "v", "causal", "attention_mask")
            values = dict(zip(names, args))
            values.update({k: v for k, v in kwargs.items() if k in names})
            record.update({k: (v.detach() if torch.is_tensor(v) else v) for k, v in values.items()})
            record.setdefault("attention_mask", None)

        def hook(module, args, kwargs, output, record=record):
            record["out"] = output.detach()

        handles.append(mechanism.register_forward_pre_hook(pre_hook, with_kwargs=True))
        handles.append(mechanism.register_forward_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for handle in handles:
            handle.remove()
    return records


def attention_weights(mechanism, q, k, causal, attention_mask=None, value_dim=None):
    """The (T, T) matrix A that a registered attention module applies to its values, out = A v,
    for fixed (q, k), in float64.

    Every registered attention is linear in v once q, k and its random draws are fixed (in eval
    mode: no dropout; Performer's features are a buffer; BigBird's random blocks, Reformer's
    rotations, Informer's key sample and tree attention's noise and projections are seeded per
    call, the same in every call), so A exists. It is computed

    - by its closed form for ``softmax`` / ``softmax_reference``: A_ij = exp(q_i.k_j / sqrt(D)) /
      sum_n exp(q_i.k_n / sqrt(D)) over the allowed keys (``attention.softmax.allowed_keys``:
      causal, window, exclude_self, padding; "Attention Is All You Need", Eq. 1), and ``fastmax``:
      A_ij = f(s_ij) / sum_n f(s_in), s = q_hat.k_hat / temperature with the module's
      normalization of q, k and coefficients (``attention.fastmax.reference.fastmax_weights``;
      "FAST: Factorizable Attention for Speeding up Transformers", Eq. 5-12), eval mode;
    - for every other attention by ``probe_weights`` (the module called on the columns of the
      identity as values).

    What the rows hold depends on the method. They sum to one over the allowed keys for softmax,
    fastmax, linear, performer, longformer, bigbird, reformer, informer and tree attention with
    normalization "bud_mean". Not for these:

    - ``dense`` (DenseAttention, section 3.1: no softmax, no normalizer): A_ij = q_i.k_j on the
      allowed pairs; rows do not sum to one and entries can be negative;
    - ``linformer`` (Eq. 7): A = softmax(q (E k)^T / sqrt(D)) F over the ORIGINAL positions (F of
      shape (proj_len, T) mixes the values before the softmax weights apply); rows sum to the
      softmax-weighted sums of F's rows, and entries can be negative;
    - ``tree`` with normalization "paper" (Algorithm 1 as printed: softmax over the buds times
      their summed values): rows sum to sum_n |n| e^{a_n} / sum_n e^{a_n} over the buds n (a_n
      the bud's mean scaled score), l / (number of buds) for equal scores over l keys.

    Disallowed entries are zero, and so are rows without an allowed key (or, where the module
    zeroes them, padded queries).

    Args:
        mechanism: a registered attention module (its parameters and buffers are used as they are).
        q, k: (B, H, T, D) float tensors; causal: bool; attention_mask: (B, T) bool (True = real
            token) or None.
        value_dim: head dim of the values the module receives (DenseAttention in a DANet block
            may differ from D); None = D. Only the probe uses it.

    Returns:
        (B, H, T, T) float64 tensor A, A[b, h, i, j] = weight of value j in the output of query i.

    Raises:
        ValueError: ``fastmax`` in training mode with dropout (the weights are random then);
            from ``probe_weights``: a module whose output is not A v for one A (not linear in v,
            or different random draws in different calls), or what the module itself raises.
    """
    name = getattr(mechanism, "registry_name", type(mechanism).__name__)
    if name in ("softmax", "softmax_reference"):
        q, k = q.double(), k.double()
        T = q.shape[2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        mask = allowed_keys(T, causal, attention_mask, mechanism.exclude_self, mechanism.window, q.device)
        if mask is None:
            return torch.softmax(scores, dim=-1)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        return torch.where(mask.any(-1, keepdim=True), weights, 0.0).nan_to_num(0.0)
    if name == "fastmax":
        if mechanism.training and mechanism.dropout > 0:
            raise ValueError("fastmax in training mode applies random dropout: its weights differ per call; "
                             "call mechanism.eval() (or model.eval()) first")
        return fastmax_weights(q.double(), k.double(), causal, attention_mask, p=mechanism.p, a0=mechanism.a0,
                               a1=mechanism.a1, a2=mechanism.a2, temperature=mechanism.temperature_for(q.shape[-1]),
                               normalization=mechanism.normalization, lim=mechanism.lim)
    return probe_weights(mechanism, q, k, causal, attention_mask, value_dim)


def probe_weights(mechanism, q, k, causal, attention_mask=None, value_dim=None, check_seed=0):
    """The matrix A of a module that computes out = A v, read off its outputs: the module is
    called with q, k (cast to float64) and values v = columns of the (T, T) identity, at most
    Dv = ``value_dim`` columns per call (the last call's missing columns are zeros), so that
    call c returns out[..., i, m] = A[..., i, c Dv + m]. Then the module is called once more
    with seeded standard normal values and A v must equal its output (relative 1e-9 of the
    output's scale), which fails for a module that is not linear in v or draws anything
    differently in another call. Side effects of the calls on tree attention's ``stats()`` and
    ``recorded`` are undone.

    Args:
        mechanism: an attention module with forward(q, k, v, causal, attention_mask).
        q, k: (B, H, T, D) float; causal: bool; attention_mask: (B, T) bool or None.
        value_dim: Dv, the values' head dim (None = D).
        check_seed: seed of the random values of the check.

    Returns:
        (B, H, T, T) float64 A (batch elements and heads probed together: one call per chunk).

    Raises:
        ValueError: value_dim < 1, or the check fails (the message gives the difference); what
            the module raises for its inputs (e.g. linformer with causal=True).
    """
    q, k = q.double(), k.double()
    B, H, T, D = q.shape
    Dv = D if value_dim is None else int(value_dim)
    if Dv < 1:
        raise ValueError(f"value_dim must be >= 1 (the head dim of v); got {value_dim!r}")
    saved = {name: getattr(mechanism, name) for name in _SIDE_EFFECTS if hasattr(mechanism, name)}
    if isinstance(saved.get("_stats"), dict):  # counters are added in place; a record is replaced
        saved["_stats"] = dict(saved["_stats"])
    try:
        with torch.no_grad():
            A = q.new_zeros(B, H, T, T)
            for start in range(0, T, Dv):
                n = min(Dv, T - start)
                basis = q.new_zeros(T, Dv)
                basis[start:start + n, :n] = torch.eye(n, dtype=q.dtype)  # v[t, m] = 1 iff t = start + m
                out = mechanism(q, k, basis.expand(B, H, T, Dv).contiguous(), causal, attention_mask)
                A[..., start:start + n] = out[..., :n].double()
            v = torch.randn(B, H, T, Dv, generator=torch.Generator().manual_seed(check_seed), dtype=q.dtype)
            out = mechanism(q, k, v, causal, attention_mask).double()
    finally:
        for name, value in saved.items():
            setattr(mechanism, name, value)
    error = float((A @ v - out).abs().max())
    scale = max(1.0, float((A.abs() @ v.abs()).max()))
    if not error <= 1e-9 * scale:  # also catches NaN
        name = getattr(mechanism, "registry_name", type(mechanism).__name__)
        raise ValueError(f"attention {name!r}: its output on random values differs from A v by {error:.3g} (scale "
                         f"{scale:.3g}) for the A probed with basis values, so it does not apply one matrix A to v: "
                         f"it is not linear in v, or its random draws differ between calls (training mode?); "
                         f"attention weights are defined here for modules with out = A(q, k) v")
    return A
