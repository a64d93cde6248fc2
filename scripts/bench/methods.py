"""The methods of the attention benchmarks (a library for scripts/bench/attention.py, the CPU
benchmark, and scripts/bench/gpu.py, the GPU check): the method syntax (``parse_method``:
``name``, ``name:key=value,...``, ``@configs/attention/<file>.py``, ``sdpa``, ``authors:p=1|2``,
the old aliases), building one call (``make_call``: the module with the model context, optional
autocast and SDPA backend), what a method cannot run (``unsupported``), its analytic FLOPs
(``flop_count`` / ``flop_formula``), its estimated memory (``estimated_bytes``), the time
predicted for a longer sequence (``predicted_seconds``) and the time of one configuration
(``time_call`` / ``measure_call``, on ``scripts/bench/common.py``'s timing rule) and the peak
memory of one call (``peak_memory``, in a fresh process). The method syntax
and the FLOP formulas are described in scripts/bench/attention.py's docstring and docs/benchmark.md.
"""
import ast
import glob
import inspect
import math
import os
import resource

import torch
import torch.nn.functional as F

import attention
from attention.dense.compute import choose_regime
from attention.fastmax.authors_baseline import authors_formulation
from attention.reformer import chunk_length
from scripts.bench.common import (ROOT, cuda_event_timer, make_inputs, median_seconds, peak_added_mb, run_child, run_once,
                                  synchronize)

CONFIG_DIR = os.path.join(ROOT, "configs", "attention")
ALIASES = {
    "fastmax1_pytorch": "fastmax:p=1,implementation=pytorch",
    "fastmax2_pytorch": "fastmax:p=2,implementation=pytorch",
    "fastmax1_triton": "fastmax:p=1,implementation=triton",
    "fastmax2_triton": "fastmax:p=2,implementation=triton",
    "authors1": "authors:p=1",
    "authors2": "authors:p=2",
}
AUTHORS_PARAMS = {k: p.default for k, p in inspect.signature(authors_formulation).parameters.items()
                  if k not in ("q", "k", "v", "causal")}


# ----------------------------------------------------------------------------------------------
# methods


class Method:
    """One benchmarked method: ``kind`` "registry" (``name`` registered, ``params`` its user
    parameters), "sdpa" or "authors"; ``label`` names it in rows, tables and plots; ``spec`` is
    the canonical ``name:key=value,...`` text."""

    def __init__(self, label, kind, name, params, source=None, ignored=None):
        self.label, self.kind, self.name, self.params = label, kind, name, dict(params)
        self.source = source or label
        self.ignored = dict(ignored or {})  # a config file's keys for the model, not the attention

    @property
    def spec(self):
        items = ",".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.name}:{items}" if items else self.name

    def full_params(self):
        """The parameters with the method's defaults filled in."""
        if self.kind == "authors":
            return {**AUTHORS_PARAMS, **self.params}
        if self.kind == "sdpa":
            return {}
        defaults = {k: v for k, v in attention.accepted_params(self.name).items()
                    if v is not inspect.Parameter.empty}
        return {**defaults, **self.params}

    def trainable(self):
        return self.kind != "registry" or attention.is_trainable(self.name)

    def causal_support(self):
        return "exact" if self.kind != "registry" else attention.causal_support(self.name)

    def as_dict(self):
        return {"label": self.label, "kind": self.kind, "name": self.name, "params": self.params,
                "source": self.source, "ignored_config_keys": self.ignored}

    @classmethod
    def from_dict(cls, d):
        return cls(d["label"], d["kind"], d["name"], d["params"], d.get("source"), d.get("ignored_config_keys"))


def _value(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word: sampler=alignment


def _parse_params(text, where):
    params = {}
    for item in (text.split(",") if text else []):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"method '{where}': parameters are key=value pairs separated by commas; got '{item}'")
        params[key.strip()] = _value(value.strip())
    return params


def _unknown_method(name):
    try:
        attention.check_params(name, {})
    except ValueError as e:
        registry_message = str(e)
    return ValueError(f"{registry_message}; the benchmark also knows 'sdpa' (torch's SDPA), 'authors:p=1|2' "
                      f"(the Fastmax authors' formulation), the old names {', '.join(ALIASES)}, and "
                      f"'@configs/attention/<file>.py' (a config file)")


def load_config(path):
    """(attention name, attention_params, the file's other keys) of an attention config file, read
    as train.py reads it (``configurator.parse_explicit`` against ``training.DEFAULTS``); the other
    keys (dense's ``block``, ``pos_emb``) configure the model, not the operation.

    Raises:
        ValueError (configurator.ConfigError): an unreadable file, an unknown key or a bad type;
            a file that sets no ``attention``.
    """
    import configurator  # here: the fresh processes of the memory measurement do not read configs
    import training
    full = path if os.path.isabs(path) or os.path.exists(path) else os.path.join(ROOT, path)
    config, explicit = configurator.parse_explicit(training.DEFAULTS, [full])
    if "attention" not in explicit:
        raise ValueError(f"attention config '{path}' sets no 'attention'")
    others = {k: config[k] for k in explicit if k not in ("attention", "attention_params")}
    return config["attention"], dict(config["attention_params"]), others


def parse_method(text):
    """A ``Method`` from ``name``, ``name:key=value,...``, ``@config.py[:key=value,...]`` or an old
    alias.

    Raises:
        ValueError: unknown name (the message lists the registered attentions and the benchmark's
            own names), bad parameter syntax, a parameter the method does not accept or of the
            wrong type, an unreadable config file.
    """
    text = text.strip()
    if text in ALIASES:
        method = parse_method(ALIASES[text])
        method.label = method.source = text
        return method
    if text.startswith("@"):
        path, _, overrides = text[1:].partition(".py:")
        path = path if path.endswith(".py") else path + ".py"
        name, params, others = load_config(path)
        params.update(_parse_params(overrides, text))
        label = os.path.splitext(os.path.basename(path))[0] + (f":{overrides}" if overrides else "")
        method = Method(label, "registry", name, params, source=text, ignored=others)
    else:
        name, _, rest = text.partition(":")
        params = _parse_params(rest, text)
        kind = name if name in ("sdpa", "authors") else "registry"
        method = Method(text, kind, name, params)
    if method.kind == "sdpa" and method.params:
        raise ValueError(f"method 'sdpa' takes no parameters; got {sorted(method.params)}")
    if method.kind == "authors":
        unknown = sorted(set(method.params) - set(AUTHORS_PARAMS))
        if unknown:
            raise ValueError(f"method 'authors' got unknown parameter(s) {unknown}; accepted: {', '.join(AUTHORS_PARAMS)}")
        if method.params.get("p", AUTHORS_PARAMS["p"]) not in (1, 2):
            raise ValueError(f"method 'authors': p must be 1 or 2; got {method.params['p']!r}")
    if method.kind == "registry":
        if method.name not in attention.registered():
            raise _unknown_method(method.name)
        attention.check_params(method.name, method.params)
    return method


def split_methods(text):
    """Method texts of one comma list: an item with "=" and no ":" continues the previous
    method's parameters (``tree:E=0.3,sampler=alignment,sdpa`` is two methods)."""
    items = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if items and "=" in item and ":" not in item and not item.startswith("@"):
            items[-1] += "," + item
        else:
            items.append(item)
    return items


def default_methods(device):
    """Every attention config file (sorted), then sdpa, authors:p=1, authors:p=2; on CUDA the
    Fastmax Triton kernels too."""
    texts = ["@" + os.path.relpath(path, ROOT) for path in sorted(glob.glob(os.path.join(CONFIG_DIR, "*.py")))]
    texts += ["sdpa", "authors:p=1", "authors:p=2"]
    if device == "cuda":
        texts += ["fastmax1_triton", "fastmax2_triton"]
    return texts


def resolve_methods(methods, add_methods, device):
    """The ``Method`` list of the command line (duplicates by label dropped)."""
    texts = default_methods(device) if not methods else [t for arg in methods for t in split_methods(arg)]
    texts += [t for arg in (add_methods or []) for t in split_methods(arg)]
    out, seen = [], set()
    for text in texts:
        method = parse_method(text)
        if method.label not in seen:
            seen.add(method.label)
            out.append(method)
    return out


def unsupported(method, mode, causal):
    """Why ``method`` cannot run (mode, causal), or None."""
    if causal and method.causal_support() == "unsupported":
        return f"n/a: {method.name} cannot run causal (attention.causal_support)"
    if mode == "forward_backward" and not method.trainable():
        return f"n/a: {method.name} is inference-only (attention.is_trainable): no forward+backward"
    return None


def make_call(method, causal, T, D, heads, device, mode="forward", dtype=torch.float32, sdpa_backends=None):
    """(call (q, k, v) -> out, the module or None) for one method and input size.

    Args:
        method (Method); causal (bool); T, D, heads (int): the inputs' sizes (the model context
            of a registered attention); device (str): "cpu" or "cuda"; mode (str): "forward"
            (the module in evaluation mode) or "forward_backward" (training mode).
        dtype (torch.dtype): the inputs' dtype. bfloat16 or float16: the call runs under
            ``torch.autocast(device, dtype)``, as train.py's ``--dtype`` runs a model (the module's
            own tensors stay float32); float32 / float64: no autocast.
        sdpa_backends (list | None): for "sdpa", the ``torch.nn.attention.SDPBackend`` members it
            may use (``sdpa_kernel``; e.g. ``[SDPBackend.FLASH_ATTENTION]``, so that a call flash
            cannot run raises instead of falling back); None = torch's choice. Ignored otherwise.
    """
    if method.kind == "sdpa":
        call, module = (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)), None
        if sdpa_backends:
            call = _within(call, lambda: torch.nn.attention.sdpa_kernel(sdpa_backends))
    elif method.kind == "authors":
        params = method.params
        call, module = (lambda q, k, v: authors_formulation(q, k, v, causal, **params)), None
    else:
        context = {"layer_idx": 0, "block_size": T, "n_head": heads, "head_dim": D}
        module = attention.build(method.name, context, **method.params).to(device)
        module.train(mode == "forward_backward")
        call = lambda q, k, v: module(q, k, v, causal)  # noqa: E731
    if dtype in (torch.bfloat16, torch.float16):
        device_type = torch.device(device).type
        call = _within(call, lambda: torch.autocast(device_type, dtype=dtype))
    return call, module


def _within(call, context):
    """``call`` run inside a fresh ``context()`` (a context manager factory) at every call."""
    def wrapped(q, k, v):
        with context():
            return call(q, k, v)
    return wrapped


# ----------------------------------------------------------------------------------------------
# FLOPs (a registered attention's formula is its class's: ``Attention.flops`` / ``flop_formula``)

SDPA_FLOP_FORMULA = "4 D H T^2 (causal: 4 D H T(T+1)/2, the CPU and CUDA kernels skip blocks above the diagonal)"
AUTHORS_FLOP_FORMULA = ("H (4 T D^2 + 2 T D) (+ H (4 T D^3 + 2 T D^2) for p = 2); causal: the outer products and "
                        "their cumulative sums counted as one multiply-add per element")


def _authors_flops(p, T, D):
    out = 4 * T * D * D + 2 * T * D
    if p["p"] == 2:
        out += 4 * T * D ** 3 + 2 * T * D * D
    return out


def flop_count(method, T, D, heads, causal):
    """Analytic forward FLOPs of one call on (1, heads, T, D) inputs (module docstring), or None
    for an attention without a formula: a registered attention's ``flops`` (``attention.Attention``),
    SDPA's as the fused softmax's, the authors' formulation's here."""
    if method.kind == "sdpa":
        flops = attention.attention_class("softmax").flops({"window": 0, "exclude_self": False}, T, D, causal, heads)
    elif method.kind == "authors":
        flops = heads * _authors_flops(method.full_params(), T, D)
    else:
        flops = attention.attention_class(method.name).flops(method.full_params(), T, D, causal, heads)
    return None if flops is None else float(flops)


def flop_formula(method):
    """The FLOP formula of ``method`` in words ("no formula" for an attention without one)."""
    if method.kind == "sdpa":
        return SDPA_FLOP_FORMULA
    if method.kind == "authors":
        return AUTHORS_FLOP_FORMULA
    return attention.attention_class(method.name).flop_formula or "no formula"


# ----------------------------------------------------------------------------------------------
# measuring


def estimated_bytes(method, T, D, heads, causal, mode):
    """Rough float32 memory of the largest tensors of a call (for skipping, not reported)."""
    base = 8 * heads * T * D * 4
    backward = mode == "forward_backward"
    p = method.full_params()
    if method.kind == "authors":
        features = D ** p["p"]
        if not causal:  # p = 2 holds q (x) q and k (x) k, (T, D^2) each
            return base + (heads * T * features * 4 * 2 * (2 if backward else 1) if p["p"] == 2 else 0)
        return base + heads * T * features * D * 4 * (3 if backward else 2)
    if method.kind == "sdpa":
        return base  # flash backends (CPU and CUDA) keep O(T) state, no (T, T) weights
    name = method.name
    quadratic = ((p.get("implementation") == "reference" and name != "tree") or name == "softmax_reference"
                 or (name == "softmax" and (p["window"] or p["exclude_self"]))
                 or (name == "dense" and not p["window"]
                     and choose_regime(p["regime"], T, D, causal, 0, p["chunk_size"]) == "quadratic"))
    if quadratic:
        return base + heads * T * T * 4 * (3 if backward else 1)
    if backward and name in ("longformer", "bigbird", "reformer", "informer"):
        # autograd keeps per query and scored key: scores, weights, mask, gathered keys and values
        if name == "reformer":
            keys_per_query = 2 * chunk_length(T, p["bucket_size"], p["chunk_size"]) * p["n_hashes"]
        else:
            keys_per_query = flop_count(method, T, D, 1, causal) / (4 * D * T)
        return base + 4 * heads * T * keys_per_query * 4
    return base


def predicted_seconds(points, T):
    """Time predicted for T from the measured (T, seconds) of smaller T: log-log extrapolation of
    the last two (slope clamped to [1, 3]), linear growth from a single one; None without any."""
    if not points:
        return None
    T1, s1 = points[-1]
    slope = 1.0
    if len(points) > 1:
        T0, s0 = points[-2]
        slope = min(3.0, max(1.0, math.log(s1 / s0) / math.log(T1 / T0))) if s0 > 0 and s1 > 0 else 1.0
    return s1 * (T / T1) ** slope


def time_call(method, mode, causal, T, D, heads, device, repeats, long_call, dtype=torch.float32, sdpa_backends=None,
              min_sample=None):
    """(median seconds, repeats, the module or None, minor page faults per call) of one
    configuration: ``make_call`` (``dtype``, ``sdpa_backends``) timed by ``measure_call``."""
    call, module = make_call(method, causal, T, D, heads, device, mode, dtype, sdpa_backends)
    seconds, n, faults = measure_call(call, mode, T, D, heads, device, repeats, long_call, dtype, min_sample)
    return seconds, n, module, faults


def measure_call(call, mode, T, D, heads, device, repeats, long_call, dtype=torch.float32, min_sample=None,
                 max_total=None):
    """(median seconds, repeats, minor page faults per call) of ``call(q, k, v)`` on seeded
    (1, heads, T, D) inputs of ``dtype`` (``common.make_inputs``; forward_backward: the backward of
    a seeded output gradient), timed by ``common.median_seconds`` (``min_sample``: its shortest
    sample; ``max_total``: its cap on the samples' seconds; CUDA: CUDA events). The faults (``getrusage``, this process) are averaged over every
    call of the measurement, warm-up included; each is a fresh 4 KB page the kernel zero-fills,
    which is what a temporary above the C allocator's mmap threshold (32 MB in glibc) costs on
    every call."""
    q, k, v = make_inputs(T, D, heads, device, mode == "forward_backward", dtype=dtype)
    grad_out = torch.randn(1, heads, T, D, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    timer = cuda_event_timer() if device == "cuda" else None
    calls = [0]

    def once():
        calls[0] += 1
        run_once(call, q, k, v, mode, grad_out)

    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    seconds, n = median_seconds(once, repeats, long_call, lambda: synchronize(device), timer=timer,
                                min_sample=min_sample, max_total=max_total)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before) / calls[0]
    return seconds, n, faults


def first_line(exc):
    """``Type: first line of the message`` of an exception, at most 200 characters (a row's note)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def peak_memory(method, mode, causal, T, D, heads, device, threads, imports=()):
    """(MB, note) of one call: the peak memory it adds on top of its (1, heads, T, D) inputs
    (``common.peak_added_mb``), measured in a fresh process (``python -m scripts.bench.methods
    --_child SPEC``: on the CPU the high-water mark of a process that ran nothing else); (None, why)
    when that process fails. ``imports``: files that register attentions (``--import``)."""
    spec = dict(method=method.as_dict(), mode=mode, causal=causal, T=T, D=D, heads=heads, threads=threads,
                device=device, imports=list(imports))
    return run_child("scripts.bench.methods", spec)


def _peak_memory_child(spec):
    """The fresh process of ``peak_memory``: MB that one call adds on top of its inputs."""
    import configurator
    configurator.import_files([f"--import={path}" for path in spec.get("imports", [])])
    torch.set_num_threads(spec["threads"])
    method = Method.from_dict(spec["method"])
    call, _ = make_call(method, spec["causal"], spec["T"], spec["D"], spec["heads"], spec["device"], spec["mode"])
    return peak_added_mb(call, spec["T"], spec["D"], spec["heads"], spec["device"], spec["mode"])


if __name__ == "__main__":
    import json
    import sys
    if sys.argv[1:2] != ["--_child"] or len(sys.argv) != 3:
        sys.exit("usage: python -m scripts.bench.methods --_child SPEC (the fresh process of peak_memory)")
    print(_peak_memory_child(json.loads(sys.argv[2])))
