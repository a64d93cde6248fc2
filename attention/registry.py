"""The attention registry and contract: ``register``, ``build``, ``check_params`` (the one place
that validates an attention name and its parameters, with suggestions for unknown names),
``accepted_params``, ``is_trainable``, the ``Attention`` base class and ``check_qkv``. The
contract itself is described in ``attention/__init__.py``: the forward signature, the model
context (``MODEL_CONTEXT``: ``layer_idx``, ``block_size``, ``n_head``, ``head_dim``, passed to
constructors that declare them, e.g. for parameters whose shapes depend on the model's sizes), and
the optional per-step method ``after_optimizer_step()`` that the model calls on every attention
module defining it after each optimizer step (e.g. Performer's feature redraw). Attention families
import this module, never the ``attention`` package (which imports them).
"""

import difflib
import inspect

import torch
import torch.nn as nn

MODEL_CONTEXT = ("layer_idx", "block_size", "n_head", "head_dim")

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


class InferenceOnlyError(RuntimeError):
    """Raised by an attention with ``trainable = False`` when it is called with gradients
    enabled; the message says how to evaluate it instead."""


def is_trainable(name):
    """False for a registered attention that declares itself inference-only (``trainable``).

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered names).
    """
    return bool(getattr(_lookup(name), "trainable", True))


CAUSAL_KINDS = ("exact", "leaky", "unsupported")


def causal_support(name):
    """How the attention ``name`` handles ``causal=True`` (its class attribute ``causal``):
    "exact" (an output depends on earlier and current tokens only), "leaky" (the pairs it scores
    are masked causally, but which pairs it scores depends on later tokens: LSH buckets and chunk
    boundaries, a top-u choice over all queries; a causal language model would see the future), or
    "unsupported" (raises).

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered names).
    """
    return getattr(_lookup(name), "causal", "exact")


def causal_refusal(name):
    """Why the attention ``name`` cannot compute a causal model's attention, or None when it can
    (``causal_support(name) == "exact"``). A sentence for error messages: a causal model's
    attention layer (model.py) and train.py's config check refuse such an attention with it.

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered names).
    """
    support = causal_support(name)
    if support == "exact":
        return None
    if support == "leaky":
        return (f"attention={name!r} is not exactly causal (causal_support 'leaky'): which keys a query scores "
                f"depends on later tokens, so a causal model would see the future")
    return f"attention={name!r} has no causal form (causal_support {support!r})"


def registered():
    """Sorted list of the registered attention names."""
    return sorted(_REGISTRY)


def _constructor_params(cls):
    """name -> default of the keyword-usable parameters of ``cls.__init__`` (without self)."""
    sig = inspect.signature(cls.__init__)
    return {p.name: p.default for p in list(sig.parameters.values())[1:]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def accepted_params(name):
    """Dict of the user parameters (name -> default, ``inspect.Parameter.empty`` if required)
    that ``build(name, ...)`` accepts; the model-context names of ``MODEL_CONTEXT`` are left out.

    Raises:
        ValueError: if ``name`` is not registered.
    """
    return {k: v for k, v in _constructor_params(_lookup(name)).items() if k not in MODEL_CONTEXT}


def check_params(name, params, check_types=True):
    """Check an attention name and its user parameters without building it.

    ``check_types`` False skips the type check: ``build`` passes values on as given, since some
    constructors parse strings themselves (tree attention's ``E="0.5"``); a config is checked
    with types (``configurator.check_attention_params``).

    Raises:
        ValueError: ``name`` is unknown (the message lists the registered names and the closest);
            ``params`` holds a model-context name (``MODEL_CONTEXT``: the model supplies it); a
            parameter is unknown (the message lists the accepted ones); a value's type differs
            from the parameter's default (an int is accepted for a float).
    """
    accepted = accepted_params(name)
    reserved = sorted(set(params) & set(MODEL_CONTEXT))
    if reserved:
        raise ValueError(f"attention '{name}': {reserved} cannot be set as a parameter; the model supplies "
                         f"{', '.join(MODEL_CONTEXT)} itself (build's context argument)")
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        allowed = ", ".join(accepted) if accepted else "none"
        raise ValueError(f"attention '{name}' got unknown parameter(s) {unknown}; accepted parameters: {allowed}")
    for key, value in params.items() if check_types else ():
        default = accepted[key]
        if default is None or default is inspect.Parameter.empty or value is None:
            continue
        if isinstance(default, bool) or isinstance(value, bool):
            ok = isinstance(value, bool) and isinstance(default, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float))
        else:
            ok = isinstance(value, type(default))
        if not ok:
            raise ValueError(f"attention '{name}': parameter '{key}' expects {type(default).__name__} "
                             f"(default {default!r}), got {type(value).__name__} {value!r}")


def build(name, context=None, **params):
    """Construct the registered attention module ``name``.

    Args:
        name (str): a registered name (see ``registered()``).
        context (dict | None): model context with keys from ``MODEL_CONTEXT`` (``layer_idx``,
            ``block_size``, ``n_head``, ``head_dim``); each key is passed to the constructor only if
            it declares a parameter of that name. None = no context (the constructor's defaults
            apply).
        **params: user parameters of the method (see ``accepted_params(name)``).

    Raises:
        ValueError: see ``check_params``; ``context`` is not a dict or has a key outside
            ``MODEL_CONTEXT``.
    """
    cls = _lookup(name)
    check_params(name, params, check_types=False)
    if context is None:
        context = {}
    if not isinstance(context, dict):
        raise ValueError(f"context must be a dict with keys from {MODEL_CONTEXT} or None; got {type(context).__name__}")
    bad = sorted(set(context) - set(MODEL_CONTEXT))
    if bad:
        raise ValueError(f"unknown model context key(s) {bad}; allowed: {', '.join(MODEL_CONTEXT)}")
    declared = _constructor_params(cls)
    passed = {k: v for k, v in context.items() if k in declared}
    return cls(**passed, **params)


def _lookup(name):
    if name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"unknown attention '{name}'{hint}; registered: {', '.join(registered())}")
    return _REGISTRY[name]


class Attention(nn.Module):
    """Base class of all registered attention mechanisms (no learnable parameters of their own
    unless the method needs them; projections live in the model). Subclasses implement
    ``forward(q, k, v, causal, attention_mask=None)`` as described in the module docstring.

    Self-exclusion (optional, per method): a method that supports it declares a constructor
    parameter ``exclude_self=False`` and stores it as ``self.exclude_self``. When True, query t
    never attends to key t: with ``causal`` it sees keys 0..t-1 only, so position 0 has no
    allowed key and its output is zero; without ``causal`` it sees every key but t. It exists for
    eval_ppl's ``casino`` protocol, which reproduces the measurement of "High Attention Scores and
    Where to Find Them" (Sec. 3; the authors' model attends to the previous tokens only). When a
    causal mechanism has ``exclude_self`` True, ``model.SelfAttention`` also zeroes position 0
    after its output projection (the authors' block adds nothing there, not even the bias).
    Methods without the parameter do not support self-exclusion (``build`` rejects it).
    """

    trainable = True  # False: inference only (forward raises InferenceOnlyError under autograd)
    causal = "exact"  # or "leaky" / "unsupported" (causal_support)

    def stats(self):
        """Counters accumulated since the last ``reset_stats`` (e.g. inner products); a dict of
        numbers that eval_ppl sums over layers. Methods without cost accounting return {}."""
        return {}

    def reset_stats(self):
        """Zero the counters returned by ``stats``."""


def needs_grad(*tensors):
    """Whether autograd records a graph for an operation on ``tensors`` (grad mode on and one of
    them requires grad): where a method picks its custom-backward path or refuses to train."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def check_qkv(q, k, v, attention_mask=None):
    """Validate q, k, v of shape (B, H, T, D) and an optional (B, T) bool ``attention_mask``
    (True = real token).

    Raises:
        ValueError: on a rank other than 4, mismatched shapes, or a bad mask.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must have shape (B, H, T, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"incompatible q, k, v shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if attention_mask is not None:
        B, _, T, _ = k.shape
        if attention_mask.dtype != torch.bool or tuple(attention_mask.shape) != (B, T):
            raise ValueError(f"attention_mask must be a bool tensor of shape (B, T) = ({B}, {T}), True = real "
                             f"token; got {attention_mask.dtype} {tuple(attention_mask.shape)}")
