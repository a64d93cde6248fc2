"""What an attention module did inside a model: its inputs and outputs per layer (``capture``) and
the (T, T) weights it applied (``attention_weights``). A library for the analysis tools
(attention maps, CLS attention), not a script.
"""
import math

import torch

from attention.fastmax.reference import fastmax_weights
from attention.softmax import allowed_keys

SUPPORTED = ("softmax", "softmax_reference", "fastmax")


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


def attention_weights(mechanism, q, k, causal, attention_mask=None):
    """The attention matrix a registered module applies to (q, k), in float64.

    Args:
        mechanism: a ``softmax``, ``softmax_reference`` or ``fastmax`` module (its parameters are
            read: window / exclude_self, or p, a0, a1, a2, temperature, normalization, lim).
        q, k: (B, H, T, D) float tensors; causal: bool; attention_mask: (B, T) bool or None.

    Returns:
        (B, H, T, T) float64: rows sum to one over the allowed keys; disallowed entries and rows
        without an allowed key are zero.

    Raises:
        ValueError: another attention (the message lists the supported ones).
    """
    name = getattr(mechanism, "registry_name", type(mechanism).__name__)
    q, k = q.double(), k.double()
    if name in ("softmax", "softmax_reference"):
        T = q.shape[2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        mask = allowed_keys(T, causal, attention_mask, mechanism.exclude_self, mechanism.window, q.device)
        if mask is None:
            return torch.softmax(scores, dim=-1)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        return torch.where(mask.any(-1, keepdim=True), weights, 0.0).nan_to_num(0.0)
    if name == "fastmax":
        return fastmax_weights(q, k, causal, attention_mask, p=mechanism.p, a0=mechanism.a0, a1=mechanism.a1,
                               a2=mechanism.a2, temperature=mechanism.temperature,
                               normalization=mechanism.normalization, lim=mechanism.lim)
    raise ValueError(f"attention maps are defined here for {', '.join(SUPPORTED)}; got attention {name!r}")
