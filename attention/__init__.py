"""Attention registry: every attention mechanism of the repo behind one interface.

All registered modules share the call signature

    forward(q, k, v, causal: bool, attention_mask=None) -> out

with q, k, v and out of shape (B, H, T, D) (batch, heads, sequence length, head dim), any float
dtype; out has the dtype of v (under autocast: v's or the autocast dtype, ``Attention``'s "Output
dtype"). ``attention_mask`` is an optional bool tensor of shape (B, T) that is True for real
tokens and False for padding (the Hugging Face / flash-linear-attention convention, the opposite
of PyTorch's ``key_padding_mask``); padded keys receive no attention.

Construction: ``build(name, context=None, **params)``; ``registered()`` lists the names,
``accepted_params(name)`` the user parameters of one and ``attention_class(name)`` its class,
whose metadata (``Attention``: causal support, example parameters for tests, reference
implementation, FLOP count, ...) the benchmark and the tests read. ``params`` are the user's choices (from a
config file or ``--attention.<param>=value``). ``context`` is what the model knows and supplies
itself, a dict with the keys in ``MODEL_CONTEXT``:

- ``layer_idx`` (int): 0-based index of the transformer block that owns the module;
- ``block_size`` (int): the model's maximum sequence length;
- ``n_head`` (int): the number of heads H of the layer;
- ``head_dim`` (int): the head dim D (n_embd / n_head).

A method whose parameters or buffers have shapes that depend on the model's sizes declares the
keys it needs (``linformer``: E, F of length block_size, per head with n_head; ``performer``: its
(m, head_dim) projection, seeded with layer_idx).

``build`` passes a context key to the constructor only if ``__init__`` declares a parameter of
that name, so methods that need neither ignore the context. Context names are never user
parameters: ``accepted_params`` leaves them out and ``build`` rejects them in ``params``.

Training: a method whose forward pass cannot be differentiated (tree attention's bud sampling)
sets the class attribute ``trainable = False`` and raises ``InferenceOnlyError`` when called with
gradients enabled; ``is_trainable(name)`` reads the flag, so train.py refuses such a method before
it prepares any data and reports no other error as "inference-only".

Per optimizer step (optional method): a module that defines ``after_optimizer_step()`` gets it
called by the model's ``after_optimizer_step`` (which train.py runs under ``torch.no_grad()``
after every optimizer step, once per step whatever the gradient accumulation) in layer order.
Only training runs it, so evaluation and inference never see a change made there. Performer's
feature redraw uses it (counted in optimizer steps, never in forward calls).

Decoding (optional, per method): an exactly causal method that can generate a token at a time
declares how in its class attribute ``decode`` ("kv_cache": the past keys and values, growing with
the context; "state": a summary of fixed size; None, the default: no decode path) and implements

    prefill(q, k, v, attention_mask=None) -> (out, state)   q, k, v (B, H, T, D); out as forward's
                                                            causal output (B, H, T, Dv)
    step(q_t, k_t, v_t, state) -> (o_t, state)              q_t, k_t, v_t (B, H, 1, D); o_t the
                                                            last row of the causal forward over
                                                            tokens 0..t, (B, H, 1, Dv)

(``Attention.prefill`` / ``Attention.step`` give the details; the base class's defaults raise
NotImplementedError naming the method). ``model.GPT.generate`` keeps one state per layer and
falls back to recomputing its window for a method without a decode path.
``tests/attention/test_decode.py`` checks every method that declares one against its own causal
forward, and that a "state" does not grow (``state_nbytes``). A method's decode code lives in its
family (``fastmax/decode.py``) or in a shared module (``kv_cache.py``: the preallocated, growing
cache of past keys and values; ``kernelized.py``: the running sums of feature-map attention).

Layout. ``registry.py`` holds the contract's code (``register``, ``build``, ``check_params``,
``Attention`` and its metadata, ``check_qkv``, ``allowed_keys``, the parameter checkers
``check_int`` / ``check_choice``); this module only re-exports it and imports the families so that
they register. The shared modules register nothing: ``blockwise.py`` (what the sparse methods
share), ``kernelized.py`` (kernelized, i.e. feature-map, attention), ``feature_maps.py`` (random
features), ``kv_cache.py`` (the decode cache of past keys and values), ``testing.py`` (test inputs).
A method (a family) is one file (``softmax.py``) or, when it has several implementations, a folder
(``tree/``, ``fastmax/``, ``dense/``) whose
``__init__.py`` holds the registered module and the backend choice, with one file per
implementation named by one rule:

- ``reference.py``: the readable implementation that follows the paper's equations (tests
  compare every other implementation with it);
- ``<name>.py`` for each fast path (e.g. ``vectorized.py``, ``chunked.py``, ``compute.py``), and
  a ``kernels/`` folder (Triton) or ``*.cpp`` for kernels, each with its reference beside it;
- ``decode.py``: the token-at-a-time path (``prefill`` / ``step``) when the family has one;
- ``authors_baseline.py`` / ``numpy_baseline.py``: the authors' own algorithm, kept to compare with.

Families import ``attention.registry`` and the shared modules, never this package or another
family (tests/attention/test_family_imports.py). A new method adds its file or folder, decorates
its class with ``@register("name")``, declares ``causal`` (and the other metadata that differ from
``Attention``'s defaults) on the class, and is imported at the bottom of this module.
"""
from attention.registry import (  # noqa: F401  (the public interface)
    CAUSAL_KINDS, DECODE_KINDS, MODEL_CONTEXT, Attention, InferenceOnlyError, accepted_params, attention_class, build,
    causal_refusal, causal_support, check_params, check_qkv, decode_kind, is_trainable, register, registered,
    state_nbytes,
)
from attention.registry import _REGISTRY  # noqa: F401  (tests register probes)

from attention import softmax  # noqa: E402,F401  (registers softmax, softmax_reference)
from attention import tree  # noqa: E402,F401
from attention import fastmax  # noqa: E402,F401
from attention import dense  # noqa: E402,F401
from attention import linear  # noqa: E402,F401
from attention import performer  # noqa: E402,F401
from attention import linformer  # noqa: E402,F401
from attention import longformer  # noqa: E402,F401
from attention import bigbird  # noqa: E402,F401
from attention import reformer  # noqa: E402,F401
from attention import informer  # noqa: E402,F401
