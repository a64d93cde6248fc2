"""The attention registry and contract: ``register``, ``build``, ``check_params`` (the one place
that validates an attention name and its parameters, with suggestions for unknown names),
``accepted_params``, ``is_trainable``, ``attention_class``, the ``Attention`` base class with the
metadata every registered class carries (causal support, example parameters, FLOP count, decode
kind, ...) and the decode contract (``prefill``, ``step``; ``decode_kind``, ``state_nbytes``),
``check_qkv``, the allowed-pair mask ``allowed_keys``, and the parameter checkers ``check_int`` /
``check_choice`` that the families' constructors share. The contract itself is described in
``attention/__init__.py``: the forward signature, the model context (``MODEL_CONTEXT``:
``layer_idx``, ``block_size``, ``n_head``, ``head_dim``, passed to constructors that declare them,
e.g. for parameters whose shapes depend on the model's sizes), and the optional per-step method
``after_optimizer_step()`` that the model calls on every attention module defining it after each
optimizer step (e.g. Performer's feature redraw). Attention families import this module and the
shared modules (``blockwise``, ``feature_maps``, ``kernelized``), never another family or the
``attention`` package (which imports them).
"""

import difflib
import inspect

import torch
import torch.nn as nn

MODEL_CONTEXT = ("layer_idx", "block_size", "n_head", "head_dim")

_REGISTRY = {}


CAUSAL_KINDS = ("exact", "leaky", "unsupported")
# How an attention generates a token at a time (``Attention.decode``): no decode path, a cache of
# the past keys and values that grows with the context, or a state whose size does not depend on it.
DECODE_KINDS = (None, "kv_cache", "state")


def register(name):
    """Class decorator that adds an ``Attention`` subclass to the registry under ``name``.

    The class must declare its causal support, ``causal = "exact" | "leaky" | "unsupported"``
    (``causal_support``; the base class has no default, so a method cannot be taken for exactly
    causal by omission). Its other metadata have defaults (``Attention``).

    Raises:
        ValueError: ``name`` is already registered; the class declares no ``causal`` or a value
            outside ``CAUSAL_KINDS`` (the message names the class and the allowed values); it
            declares one of ``defaults_date`` and ``defaults_before`` without the other; it
            declares a ``decode`` outside ``DECODE_KINDS``, or a decode path while not exactly
            causal or without its own ``prefill`` and ``step``.
    """
    def decorator(cls):
        if name in _REGISTRY:
            raise ValueError(f"attention '{name}' is registered twice ({_REGISTRY[name].__name__} and {cls.__name__})")
        causal = getattr(cls, "causal", None)
        if causal not in CAUSAL_KINDS:
            declared = "declares none" if causal is None else f"declares causal = {causal!r}"
            raise ValueError(f"attention '{name}' ({cls.__module__}.{cls.__qualname__}) {declared}: a registered "
                             f"attention must declare its causal support as a class attribute, causal = one of "
                             f"{', '.join(map(repr, CAUSAL_KINDS))} (see attention.causal_support)")
        decode = getattr(cls, "decode", None)
        if decode not in DECODE_KINDS:
            raise ValueError(f"attention '{name}' ({cls.__module__}.{cls.__qualname__}) declares decode = {decode!r}; "
                             f"allowed: {', '.join(map(repr, DECODE_KINDS))} (see Attention.decode)")
        if decode is not None:
            if causal != "exact":
                raise ValueError(f"attention '{name}' ({cls.__module__}.{cls.__qualname__}) declares decode = "
                                 f"{decode!r} but causal = {causal!r}: only an exactly causal attention can decode "
                                 f"a token at a time")
            missing = [method for method in ("prefill", "step") if getattr(cls, method) is getattr(Attention, method)]
            if missing:
                raise ValueError(f"attention '{name}' ({cls.__module__}.{cls.__qualname__}) declares decode = "
                                 f"{decode!r} without implementing {' and '.join(missing)} (see Attention.prefill, "
                                 f"Attention.step)")
        if (getattr(cls, "defaults_date", None) is None) != (getattr(cls, "defaults_before", None) is None):
            raise ValueError(f"attention '{name}' ({cls.__module__}.{cls.__qualname__}) declares one of defaults_date "
                             f"and defaults_before: a changed default needs both, its date and the old setting")
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
    return bool(attention_class(name).trainable)


def causal_support(name):
    """How the attention ``name`` handles ``causal=True`` (its class attribute ``causal``):
    "exact" (an output depends on earlier and current tokens only), "leaky" (the pairs it scores
    are masked causally, but which pairs it scores depends on later tokens: LSH buckets and chunk
    boundaries, a top-u choice over all queries; a causal language model would see the future), or
    "unsupported" (raises).

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered names).
    """
    return attention_class(name).causal


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


def decode_kind(name):
    """How the attention ``name`` generates a token at a time (its class attribute ``decode``):
    None (no decode path: a model recomputes its window at every step), "kv_cache" (its state
    keeps the past keys and values and grows with the context) or "state" (a state whose size does
    not depend on the context). See ``Attention.prefill`` and ``Attention.step``.

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered names).
    """
    return attention_class(name).decode


def state_nbytes(state):
    """Bytes held by the tensors of a decode state (``Attention.prefill``): tensors found in
    ``state`` itself, in dicts, lists and tuples, and in the attributes of other objects, at any
    depth, each tensor counted once (its whole storage: a preallocated cache counts with its
    spare room). Numbers and None count nothing."""
    seen, total, todo = set(), 0, [state]
    while todo:
        x = todo.pop()
        if isinstance(x, torch.Tensor):
            storage = x.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(x, dict):
            todo.extend(x.values())
        elif isinstance(x, (list, tuple)):
            todo.extend(x)
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            todo.extend(vars(x).values())
    return total


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
    return {k: v for k, v in _constructor_params(attention_class(name)).items() if k not in MODEL_CONTEXT}


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
    cls = attention_class(name)
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


def attention_class(name):
    """The class registered as ``name``: its metadata (``Attention``: ``causal``, ``trainable``,
    ``example_params``, ``flops``, ...) for the benchmark and the tests.

    Raises:
        ValueError: ``name`` is not registered (the message lists the registered names and the
            closest).
    """
    if name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"unknown attention '{name}'{hint}; registered: {', '.join(registered())}")
    return _REGISTRY[name]


class Attention(nn.Module):
    """Base class of all registered attention mechanisms (no learnable parameters of their own
    unless the method needs them; projections live in the model). Subclasses implement
    ``forward(q, k, v, causal, attention_mask=None)`` as described in the module docstring.

    Output dtype: the output has v's dtype; under ``torch.autocast`` it may have the autocast
    dtype instead (as PyTorch's own products and ``scaled_dot_product_attention`` do), and no
    other. So bfloat16 q, k, v under bfloat16 autocast (what the model's ``c_attn`` hands the
    attention under ``--dtype=bfloat16``) give a bfloat16 output; float32 ones give float32 or
    bfloat16 (``attention.testing.allowed_output_dtypes``; tests/attention/test_contract.py
    asserts it for every registered attention, also with its accuracy under autocast).

    Metadata (class attributes and class methods; what the benchmark, the tests and the docs read
    from the registry, ``attention_class(name)``, instead of keeping lists of their own):

    - ``causal`` (str, required, no default): "exact", "leaky" or "unsupported"
      (``causal_support``); ``register`` refuses a class without it.
    - ``trainable`` (bool, default True): False for an inference-only method, whose forward
      raises ``InferenceOnlyError`` under autograd (``is_trainable``).
    - ``supports_attention_mask`` (bool, default True): False for a method whose forward refuses
      an ``attention_mask`` (ValueError).
    - ``example_params`` (dict, default {}): user parameters for tests at small sizes (B, H about
      2, T about 20, D about 8): small blocks, chunks and feature counts, so that a sparse method
      is sparse and a chunked path has several chunks (``tests/attention/test_contract.py``).
    - ``reference_name`` (str | None) and ``reference_params`` (dict | None): the registered name
      and the parameters (over ``example_params``) of the readable reference that this method's
      fast path must equal; both None (default): no second implementation. ``reference_name``
      None with ``reference_params`` set: the same name (e.g. ``{"implementation": "reference"}``).
    - ``float32_tolerance`` (dict, default rtol 1e-5, atol 1e-6): ``torch.testing.assert_close``'s
      tolerance of float32 outputs against float64 ones on the contract test's inputs (standard
      normal q, k, v); a method that computes in lower precision declares a wider one.
    - ``defaults_date`` (str | None, ISO 8601): when a default of the method last changed what it
      computes (a new parameter whose default differs from the earlier behaviour, a new default
      value); a run made before it is not the same protocol as one made after, although their
      configurations read the same (the scorecard reuses archived runs only from after it).
      ``defaults_before`` (str | None): what the method computed before that date, in a few
      words naming the old setting (e.g. ``normalization="max_norm"``); set with
      ``defaults_date``, so that tables can say which runs were made under it
      (``made_before_defaults``).
    - ``flops(params, T, D, causal, heads=1)`` (class method) and ``flop_formula`` (str): the
      analytic forward FLOPs of one call and their formula in words (scripts/bench/attention.py);
      required of an attention in the repository (tests/scripts/test_bench_attention.py); None (the
      default) only for one passed with ``--import``: no formula. ``reported_flops(T, D, heads)``: FLOPs of one call from the module's own
      counters after it has run (``stats``), None without counters.

    - ``decode`` (None | "kv_cache" | "state", default None): how the method generates a token at
      a time (``decode_kind``), through ``prefill`` and ``step``: "kv_cache" keeps the past keys
      and values (memory and time per token grow with the context), "state" a fixed-size summary
      of them (``state_nbytes`` does not depend on the context; the tests assert it). None: no
      decode path; a model recomputes its window at every step instead (``model.GPT.generate``).
      ``register`` checks that a class with a decode path is exactly causal and overrides both
      methods; ``tests/attention/test_decode.py`` checks every such class against its forward.
    - ``rows_depend_on_length`` (bool, default False): a row's output depends on the sequence's
      length, not only on its own and earlier tokens (BigBird: which block is last, hence global,
      and its random draw); its decode path equals the forward's last row but not its earlier
      rows, so a model decodes with it only in its last layer and recomputes otherwise
      (``model.GPT.decode_unsupported``).

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

    # causal: declared by every registered class, deliberately without a default here (register)
    trainable = True
    supports_attention_mask = True
    example_params = {}
    reference_name = None
    reference_params = None
    float32_tolerance = {"rtol": 1e-5, "atol": 1e-6}
    flop_formula = None
    defaults_date = None
    defaults_before = None
    decode = None
    rows_depend_on_length = False

    @classmethod
    def made_before_defaults(cls, date):
        """Whether a run started at ``date`` (ISO 8601 str, e.g. a manifest's ``train`` ``date``;
        None: unknown) was made under an older default of this method: True when the method
        declares ``defaults_date`` and ``date`` is None or earlier; False otherwise."""
        from datetime import datetime

        if cls.defaults_date is None:
            return False
        return date is None or datetime.fromisoformat(date) < datetime.fromisoformat(cls.defaults_date)

    @classmethod
    def flops(cls, params, T, D, causal, heads=1):
        """Analytic forward FLOPs of one call on ``heads`` (B x H) sequences of length T and head
        dim D: 2 x the multiply-adds of the products that the method's path performs (elementwise
        work, exp and normalisation left out), or None for a method without a formula.

        Args:
            params (dict): every user parameter of the constructor, defaults filled in.
            T, D (int); causal (bool); heads (int): B x H.
        """
        return None

    def reported_flops(self, T, D, heads):
        """Forward FLOPs of one call on ``heads`` sequences of length T, head dim D, from the
        module's own counters (``stats``) since the last reset; None when the method keeps none
        or nothing has run."""
        return None

    def stats(self):
        """Counters accumulated since the last ``reset_stats`` (e.g. inner products); a dict of
        numbers that eval_ppl sums over layers. Methods without cost accounting return {}."""
        return {}

    def reset_stats(self):
        """Zero the counters returned by ``stats``."""

    def prefill(self, q, k, v, attention_mask=None):
        """Causal attention over a prompt, and the decode state that continues it (``decode``).

        Args:
            q, k (torch.Tensor): (B, H, T, D), T >= 1; v (B, H, T, Dv); one float dtype, any device.
            attention_mask (torch.Tensor | None): (B, T) bool, True = real token; padded keys get
                no attention now nor at any later step.

        Returns:
            (out, state): out (B, H, T, Dv) in v's dtype, the causal forward's output,
            ``forward(q, k, v, causal=True, attention_mask=attention_mask)``; state: the method's
            own object (tensors on the inputs' device, accumulated in float32 or wider, or in the
            inputs' dtype for a cache), to be handed to ``step`` and to nothing else; one state per
            layer and sequence batch. The decode path computes the evaluation-mode output (no
            dropout or other training noise).

        Raises:
            NotImplementedError: the method has no decode path (``decode`` None: this default).
        """
        raise NotImplementedError(self._no_decode_path("prefill"))

    def step(self, q_t, k_t, v_t, state):
        """Attention of one new token (position t = the number of tokens seen so far) over every
        real token before it and itself.

        Args:
            q_t, k_t (torch.Tensor): (B, H, 1, D); v_t (B, H, 1, Dv); the dtype and device of the
                prefill's inputs. The new token is real (no padding).
            state: what ``prefill`` or the previous ``step`` returned; it may be updated in place,
                so only the returned state may be used afterwards.

        Returns:
            (o_t, state): o_t (B, H, 1, Dv) in v_t's dtype, the last row of the causal forward over
            the tokens 0..t (the prefill's mask extended by True), up to rounding; the state after
            token t.

        Raises:
            NotImplementedError: the method has no decode path (``decode`` None: this default).
        """
        raise NotImplementedError(self._no_decode_path("step"))

    def _no_decode_path(self, method):
        cls = type(self)
        name = getattr(cls, "registry_name", cls.__qualname__)
        return (f"attention '{name}' ({cls.__module__}.{cls.__qualname__}) has no decode path: {method}() is not "
                f"implemented (class attribute decode = {cls.decode!r}); a model recomputes its window at every "
                f"step instead (model.GPT.generate)")


def matrix_flops(T, D):
    """Forward FLOPs per sequence of attention through the (T, T) matrix: scores and their product
    with the values, 2 D multiply-adds per pair, 4 D T^2 (causal or not: every pair is computed)."""
    return 4 * D * T * T


def step_budget(x, cpu_budget, cuda_budget):
    """Elements a step of a loop over a long sequence may hold, for tensors like ``x`` (any shape):
    ``cuda_budget`` on a GPU, else ``cpu_budget``. The CPU's budgets keep a step's temporaries in
    its caches (or the allocator's heap); on a GPU steps that small are a few kernel launches each
    and the GPU waits on the launches (the first H100 run, docs/gpu.md), so its budgets are larger.
    Callers pass their module's constants, read at the call so that tests can shrink them."""
    return cuda_budget if x.is_cuda else cpu_budget


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


def check_step(q_t, k_t, v_t):
    """Validate the inputs of ``Attention.step``: q_t, k_t of shape (B, H, 1, D), v_t (B, H, 1, Dv).

    Raises:
        ValueError: a rank other than 4, mismatched shapes, or more than one token.
    """
    check_qkv(q_t, k_t, v_t)
    if q_t.shape[2] != 1 or k_t.shape[2] != 1:
        raise ValueError(f"step takes one token: q_t, k_t, v_t of shape (B, H, 1, D); got {tuple(q_t.shape)}, "
                         f"{tuple(k_t.shape)}, {tuple(v_t.shape)}")


def allowed_keys(T, causal, attention_mask=None, exclude_self=False, window=0, device=None):
    """Bool mask of the allowed (query, key) pairs, positions 0..T-1, the conjunction of:

    - ``causal``: j <= i;
    - ``window`` = w > 0 (sliding window; 0 = no limit): causal, j > i - w, i.e. the last w keys up
      to and including i; non-causal, |i - j| < w, i.e. up to w - 1 keys on each side and i itself;
    - ``exclude_self``: j != i (causal: keys 0..i-1, so query 0 has no key; see ``Attention``);
    - ``attention_mask`` (B, T) bool, True = real token: key j must be real.

    Args:
        T (int): sequence length (queries and keys).
        causal (bool), exclude_self (bool), window (int >= 0): the pair rules.
        attention_mask (torch.Tensor | None): (B, T) bool, True = real token.
        device: device of the mask.

    Returns:
        None if every pair is allowed; else a bool tensor of shape (T, T) without
        ``attention_mask`` or (B, 1, T, T) / (B, 1, 1, T) with it, broadcastable to (B, H, T, T)
        with True = allowed.
    """
    mask = None
    if causal or window or exclude_self:
        i = torch.arange(T, device=device)[:, None]
        j = torch.arange(T, device=device)[None, :]
        mask = torch.ones(T, T, dtype=torch.bool, device=device)
        if causal:
            mask &= j <= i
        if window:
            mask &= (j > i - window) if causal else ((i - j).abs() < window)
        if exclude_self:
            mask &= j != i
    if attention_mask is not None:
        real_key = attention_mask[:, None, None, :]
        mask = real_key if mask is None else (mask & real_key)
    return mask


def check_int(name, value, minimum, meaning):
    """Check a constructor's integer parameter.

    Raises:
        ValueError: ``value`` is not an int (a bool is not) or is below ``minimum``; the message
            names the parameter, the minimum and ``meaning``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} ({meaning}); got {name}={value!r}")


def check_choice(name, value, allowed):
    """Check a constructor's parameter that takes one of a few values.

    Raises:
        ValueError: ``value`` is not in ``allowed``; the message lists the allowed values.
    """
    if value not in allowed:
        raise ValueError(f"{name} {value!r} unknown; allowed: {', '.join(map(repr, allowed))}")
