"""Attention registry: every attention mechanism of the repo behind one interface.

All registered modules share the call signature

    forward(q, k, v, causal: bool, key_padding_mask=None) -> out

with q, k, v and out of shape (B, H, T, D) (batch, heads, sequence length, head dim), any float
dtype; out has the dtype of v. ``key_padding_mask`` is an optional bool tensor of shape (B, T)
that is True for real tokens and False for padding; padded keys receive no attention.

Use ``build(name, **params)`` to construct one and ``registered()`` to list the names.
A method is added by a new file in this package that decorates its class with
``@register("name")``; the file must be imported below.
"""
import difflib
import inspect

import torch
import torch.nn as nn

_REGISTRY = {}


def register(name):
    """Class decorator that adds an ``Attention`` subclass to the registry under ``name``.

    Raises:
        ValueError: if ``name`` is already registered.
    """
    def decorator(cls):
        if name in _REGISTRY:
            raise ValueError(f"attention '{name}' is registered twice ({_REGISTRY[name].__name__} and {cls.__name__})")
        cls.registry_name = name
        _REGISTRY[name] = cls
        return cls
    return decorator


def registered():
    """Sorted list of the registered attention names."""
    return sorted(_REGISTRY)


def accepted_params(name):
    """Dict of the keyword parameters (name -> default) that ``build(name, ...)`` accepts.

    Raises:
        ValueError: if ``name`` is not registered.
    """
    cls = _lookup(name)
    sig = inspect.signature(cls.__init__)
    return {p.name: p.default for p in list(sig.parameters.values())[1:]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def build(name, **params):
    """Construct the registered attention module ``name`` with keyword parameters ``params``.

    Raises:
        ValueError: ``name`` is unknown (the message lists the registered names), or a parameter
            is unknown (the message lists the accepted ones).
    """
    accepted = accepted_params(name)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        allowed = ", ".join(accepted) if accepted else "none"
        raise ValueError(f"attention '{name}' got unknown parameter(s) {unknown}; accepted parameters: {allowed}")
    return _REGISTRY[name](**params)


def _lookup(name):
    if name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"unknown attention '{name}'{hint}; registered: {', '.join(registered())}")
    return _REGISTRY[name]


class Attention(nn.Module):
    """Base class of all registered attention mechanisms (no learnable parameters of their own
    unless the method needs them; projections live in the model). Subclasses implement
    ``forward(q, k, v, causal, key_padding_mask=None)`` as described in the module docstring.

    Attributes:
        exclude_self (bool): when True and ``causal``, query t attends to keys 0..t-1 only and
            the first position gets a zero output. Only used by eval_ppl's ``casino`` protocol,
            which reproduces the measurement of "High Attention Scores and Where to Find Them".
    """

    exclude_self = False

    def stats(self):
        """Counters accumulated since the last ``reset_stats`` (e.g. inner products); a dict of
        numbers that eval_ppl sums over layers. Methods without cost accounting return {}."""
        return {}

    def reset_stats(self):
        """Zero the counters returned by ``stats``."""


def check_qkv(q, k, v, key_padding_mask=None):
    """Validate q, k, v of shape (B, H, T, D) and an optional (B, T) bool key padding mask.

    Raises:
        ValueError: on a rank other than 4, mismatched shapes, or a bad mask.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must have shape (B, H, T, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"incompatible q, k, v shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if key_padding_mask is not None:
        B, _, T, _ = k.shape
        if key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (B, T):
            raise ValueError(f"key_padding_mask must be a bool tensor of shape (B, T) = ({B}, {T}); "
                             f"got {key_padding_mask.dtype} {tuple(key_padding_mask.shape)}")


from attention import softmax  # noqa: E402,F401  (registers softmax, softmax_reference)
from attention import tree  # noqa: E402,F401
