"""Our Fastmax (attention/fastmax/, registered ``fastmax``) against the FAST authors' own PyTorch code.

What is compared. The authors' code is never copied into this repository: it is loaded at run time
from ``--authors_dir`` (default /tmp/authors_fastmax), which holds clones of their two public
repositories (``git clone https://github.com/armingerami/fastmax <dir>/fastmax`` and
``git clone https://github.com/armingerami/reproducing_fastmax_results <dir>/reproducing_fastmax_results``):

  ``fastmax_function``      armingerami/fastmax, example.py: ``fastmax_function``, the pure-PyTorch
                            path of their released library (plain autograd; ``FASTMultiHeadAttention``
                            uses it whenever the CUDA extension is not used, i.e. always non-causal).
                            example.py imports the CUDA extension ``fastmax_cuda`` and asserts a GPU at
                            module level, so only the needed top-level definitions are compiled from the
                            file (``ast``); the CUDA extension itself cannot be built or run here.
  ``fastattention_einops``  armingerami/reproducing_fastmax_results,
                            attention_mechanisms/fastattention_einops.py: ``fastmax``, an
                            ``autograd.Function`` with hand-written factorized gradients (needs einops:
                            ``pip install einops``; without it the variant is reported missing).
  ``score_function``        same repository, attention_mechanisms/score_function.py: ``fastmax`` (the
                            earlier plain-autograd version).

Parameter mapping (ours = ``attention.build("fastmax", p=p, implementation="pytorch", **params)``;
a0, a1, a2 = 1, 1, 1/2 everywhere, which are their defaults and ours; no dropout):

  fastmax_function normalize=True, lim=1     -> normalization="max_norm", lim=1, temperature=1
      (theirs divides q and k by the largest token norm of the WHOLE sequence, also when causal;
      ours uses the running maximum over positions <= t when causal. Identical non-causal; causal
      they coincide only when token 0 has the largest norm, which the setting "normalize=True,
      token 0 longest" constructs; on plain random inputs the difference is reported, not hidden.)
  fastmax_function normalize=False           -> normalization="none", temperature=1 (their code
      overwrites temperature with 1 in both branches, so any temperature they are given is ignored;
      see findings.temperature_ignored)
  fastattention_einops normalize_term=8      -> normalization="none", temperature=8 sqrt(D)
  fastattention_einops tensors_normalized    -> normalization="none", temperature=1
  score_function normalize=0, denum_term=8   -> normalization="none", temperature=8 sqrt(D)
      (f(s) = 1 + s + s^2 / 2 with s = q.k / (8 sqrt(D)), written as / (2 denum^2))
  score_function normalize=1                 -> normalization="max_norm", lim=1, temperature=1 applied
      to q - mean_t(q), k - mean_t(k): their code subtracts each feature's mean over the SEQUENCE
      (the swapaxes make dim 3 the token axis), not the per-token mean over D of the paper's Eq. 5;
      our side does that centering with autograd before calling the module. Causal: not the same
      function (sequence mean and max both see future tokens); reported.

For "none" settings with temperature 1 the inputs q, k are divided by sqrt(D) so that scores stay
O(1) (p = 1 denominators far from 0); the other settings use plain N(0, 1) inputs.

(1) Correctness (``--check_T``, ``--check_D``, ``--check_heads``; default D = 16 and 2 heads because
their causal p = 2 backward materialises (T, D, D, D) tensors): for p = 1, 2, causal and not, in
float64 and float32, on identical inputs (``scripts.bench.common.make_inputs``) and one random upstream
gradient: max |ours - theirs| and that divided by max |theirs| for the output and the q, k, v
gradients. ``same_function`` says whether the mapping makes both sides the same mathematical
function (then the differences are rounding: ``match`` uses 1e-9 relative in float64, 1e-4 in
float32). In float32 both sides are also compared with our float64 (T, T) reference
(implementation="reference") on the same inputs. Causal rows report ``leak_*``: the largest change
of the outputs at positions < T - 1 when only the last token of q, k, v changes (0 for a causal
function up to rounding; for score_function normalize=1 our side includes their centering over the
sequence, so its leak_ours is not 0). ``findings`` in the JSON: their temperature being ignored, and their
``FASTMultiHeadAttention`` returning q itself for causal CPU inputs.

(2) Timing (skipped with ``--no_time``): float32 (1, --heads, T, --D) inputs, modes forward (no_grad)
and forward_backward, median of --repeats samples after a warm-up (``scripts.bench.common.median_seconds``,
short calls looped for ~0.1 s), methods ``ours`` (max_norm, lim 1), ``ours_reimpl`` (our
re-implementation of their formulation, attention/fastmax/authors_baseline.py), and the authors'
``fastmax_function`` (normalize=True) and ``fastattention_einops`` (normalize_term=8). Peak memory
(--memory subprocess): the resident memory one call adds, measured in a fresh process as in
scripts/bench/attention.py. A configuration is skipped when its estimated memory exceeds --max_gb or when
the same method took longer than --budget seconds at the previous T. Note: their
``fastattention_einops`` non-causal backward is quadratic in T (gradient_o_q_unmasked forms
grad v^T, (T, T); for p = 2 gradient_o_k_unmasked's 4-operand einsum is contracted left to right
into a (T, D, T) intermediate when opt_einsum is not installed), and its causal backward builds
several (T, D^p, D) tensors.

Writes <out>.csv (correctness rows), <out>_timing.csv, <out>.json (settings with our commit, torch
threads, their repositories and commits and the git blob hashes of the files used; rows; findings)
and <out>.png.

Usage: python -m scripts.bench.authors_fastmax --no_time --T 64,300 --threads 1
       nice -n 10 python -m scripts.bench.authors_fastmax --T 256,512,1024,2048,4096 --D 32 --threads 2
"""
import argparse
import ast
import hashlib
import importlib.util
import json
import math
import os
import platform
import subprocess
import types
import warnings

import torch

import attention
import attention.fastmax  # noqa: F401
from attention.fastmax.authors_baseline import authors_formulation
from data import write_json
import provenance
from scripts import plot_style
from scripts.bench.common import (loglog_axes, make_inputs, median_seconds, parse_list, peak_added_mb, run_child,
                                  run_once, write_csv)

DEFAULT_AUTHORS_DIR = "/tmp/authors_fastmax"
CLONE_HINT = ("git clone https://github.com/armingerami/fastmax {d}/fastmax && "
              "git clone https://github.com/armingerami/reproducing_fastmax_results {d}/reproducing_fastmax_results")

# name -> where it lives in their repositories and how it is loaded
VARIANTS = {
    "fastmax_function": dict(repo="armingerami/fastmax", subdir="fastmax", file="example.py",
                             symbol="fastmax_function", loader="ast"),
    "fastattention_einops": dict(repo="armingerami/reproducing_fastmax_results",
                                 subdir="reproducing_fastmax_results",
                                 file="attention_mechanisms/fastattention_einops.py", symbol="fastmax",
                                 loader="import"),
    "score_function": dict(repo="armingerami/reproducing_fastmax_results", subdir="reproducing_fastmax_results",
                           file="attention_mechanisms/score_function.py", symbol="fastmax", loader="import"),
}
A012 = dict(a0=1.0, a1=1.0, a2=0.5)


def _center_over_tokens(x):
    return x - x.mean(dim=2, keepdim=True)


# One setting: their keyword arguments, our module parameters (a function of D), the input scaling, an
# optional differentiable pre-op on our side, and when the two sides define the same function.
SETTINGS = [
    dict(variant="fastmax_function", name="normalize=True",
         ours_text="normalization=max_norm, lim=1, temperature=1",
         theirs=dict(normalize=True, temperature=1.0, lim=1.0, dropout_rate=0.0, **A012),
         ours=lambda D: dict(normalization="max_norm", lim=1.0, temperature=1.0, **A012),
         inputs="randn", same=lambda causal: not causal,
         note="causal: theirs divides by the whole-sequence max norm, ours by the running max"),
    dict(variant="fastmax_function", name="normalize=True, token 0 longest", causal_only=True,
         ours_text="normalization=max_norm, lim=1, temperature=1",
         theirs=dict(normalize=True, temperature=1.0, lim=1.0, dropout_rate=0.0, **A012),
         ours=lambda D: dict(normalization="max_norm", lim=1.0, temperature=1.0, **A012),
         inputs="first_longest", same=lambda causal: True,
         note="token 0 has the largest q and k norms: running max = whole-sequence max"),
    dict(variant="fastmax_function", name="normalize=False",
         ours_text="normalization=none, temperature=1",
         theirs=dict(normalize=False, temperature=1.0, dropout_rate=0.0, **A012),
         ours=lambda D: dict(normalization="none", temperature=1.0, **A012),
         inputs="scaled", same=lambda causal: True, note="q, k / sqrt(D)"),
    dict(variant="fastattention_einops", name="normalize_term=8",
         ours_text="normalization=none, temperature=8*sqrt(D)",
         theirs=dict(normalize_term=8, tensors_normalized=False, dropout_rate=0.0, create_attn=False),
         ours=lambda D: dict(normalization="none", temperature=8 * math.sqrt(D), **A012),
         inputs="randn", same=lambda causal: True, note="their hand-written backward"),
    dict(variant="fastattention_einops", name="tensors_normalized=True",
         ours_text="normalization=none, temperature=1",
         theirs=dict(normalize_term=8, tensors_normalized=True, dropout_rate=0.0, create_attn=False),
         ours=lambda D: dict(normalization="none", temperature=1.0, **A012),
         inputs="scaled", same=lambda causal: True, note="q, k / sqrt(D); their hand-written backward"),
    dict(variant="score_function", name="normalize=0, denum_term=8",
         ours_text="normalization=none, temperature=8*sqrt(D)",
         theirs=dict(denum_term=8, normalize=0, create_attn_matrix=False, dropout_rate=0),
         ours=lambda D: dict(normalization="none", temperature=8 * math.sqrt(D), **A012),
         inputs="randn", same=lambda causal: True, note=""),
    dict(variant="score_function", name="normalize=1",
         ours_text="normalization=max_norm, lim=1, temperature=1 on q - mean_t(q), k - mean_t(k)",
         theirs=dict(denum_term=8, normalize=1, create_attn_matrix=False, dropout_rate=0),
         ours=lambda D: dict(normalization="max_norm", lim=1.0, temperature=1.0, **A012),
         ours_pre=_center_over_tokens, inputs="randn", same=lambda causal: not causal,
         note="ours on q - mean_t(q), k - mean_t(k) (so leak_ours includes that centering); causal: their "
              "sequence mean and max see the future"),
]

CHECK_FIELDS = ["variant", "setting", "p", "causal", "dtype", "T", "D", "heads", "same_function", "match",
                "out_abs", "out_rel", "dq_abs", "dq_rel", "dk_abs", "dk_rel", "dv_abs", "dv_rel",
                "ours_vs_ref64_rel", "theirs_vs_ref64_rel", "leak_theirs", "leak_ours", "ours_params",
                "theirs_kwargs", "note"]
TIME_FIELDS = ["method", "p", "mode", "causal", "T", "D", "heads", "threads", "seconds", "repeats", "peak_mb", "note"]
TIME_METHODS = ("ours", "ours_reimpl", "fastmax_function", "fastattention_einops")
MODES = ("forward", "forward_backward")
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4}


# ----------------------------------------------------------------------------- loading their code

def _repo_file(authors_dir, spec):
    """Path of the variant's file: <authors_dir>/<repo dir>/<file> or <authors_dir>/<file>; None if absent."""
    for base in (os.path.join(authors_dir, spec["subdir"]), authors_dir):
        path = os.path.join(base, spec["file"])
        if os.path.isfile(path):
            return base, path
    return None, None


def _git_blob_sha1(path):
    data = open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _repo_commit(base):
    try:
        return subprocess.run(["git", "-C", base, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        marker = os.path.join(base, ".source_commit")
        return open(marker).read().strip() if os.path.isfile(marker) else "unknown"


def _compile_definitions(path, names, namespace):
    """Compile only the top-level defs/classes ``names`` of the file at ``path`` into ``namespace`` (the
    file's module-level statements, e.g. importing a CUDA extension, are not run)."""
    tree = ast.parse(open(path).read(), filename=path)
    body = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names]
    missing = set(names) - {node.name for node in body}
    if missing:
        raise ImportError(f"{path} defines no {', '.join(sorted(missing))}")
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), namespace)
    return namespace


def _cuda_stub():
    def unavailable(*args, **kwargs):
        raise RuntimeError("fastmax_cuda (the authors' CUDA extension) is not available here")
    return types.SimpleNamespace(forwardpass=unavailable, backwardpass=unavailable)


def _ast_namespace():
    import numpy
    return {"__name__": "authors_fastmax_example", "math": math, "torch": torch, "np": numpy, "cuda": torch.cuda,
            "fastmax_cuda": _cuda_stub()}


def load_authors(authors_dir):
    """{variant: dict(fn=callable or None, error=str, repo, commit, file, blob_sha1)} for the variants found.

    Raises:
        FileNotFoundError: the directory does not exist or holds none of their files.
    """
    if not os.path.isdir(authors_dir):
        raise FileNotFoundError(f"--authors_dir {authors_dir} does not exist. Get the authors' code with: "
                                + CLONE_HINT.format(d=authors_dir))
    loaded = {}
    for name, spec in VARIANTS.items():
        base, path = _repo_file(authors_dir, spec)
        if path is None:
            continue
        info = dict(repo=spec["repo"], commit=_repo_commit(base), file=spec["file"], path=os.path.abspath(path),
                    blob_sha1=_git_blob_sha1(path), symbol=spec["symbol"], fn=None, error="")
        try:
            if spec["loader"] == "ast":
                info["fn"] = _compile_definitions(path, [spec["symbol"]], _ast_namespace())[spec["symbol"]]
            else:
                module_name = f"authors_{name}"
                module_spec = importlib.util.spec_from_file_location(module_name, path)
                module = importlib.util.module_from_spec(module_spec)
                module_spec.loader.exec_module(module)
                info["fn"] = getattr(module, spec["symbol"])
        except Exception as exc:  # a missing dependency (einops) skips that variant, with the reason
            info["error"] = f"{type(exc).__name__}: {exc}"
        loaded[name] = info
    if not loaded:
        expected = ", ".join(os.path.join(authors_dir, s["subdir"], s["file"]) for s in VARIANTS.values())
        raise FileNotFoundError(f"--authors_dir {authors_dir} holds none of the authors' files (expected {expected}). "
                                "Get them with: " + CLONE_HINT.format(d=authors_dir))
    return loaded


def call_theirs(fn, variant, q, k, v, causal, p, kwargs):
    """Their function on (B, H, T, D) tensors; mask=causal is their causal flag in all three."""
    out = fn(q, k, v, mask=bool(causal), p=p, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def our_module(p, params, implementation="pytorch"):
    module = attention.build("fastmax", p=p, implementation=implementation, **params)
    return module.eval()


def call_ours(module, q, k, v, causal, pre=None):
    if pre is not None:
        q, k = pre(q), pre(k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "none" with p = 1 may allow negative weights
        return module(q, k, v, causal)


# ----------------------------------------------------------------------------- correctness

def setting_inputs(kind, T, D, heads, seed=0):
    """float64 (1, heads, T, D) q, k, v and an upstream gradient; ``kind``: randn, scaled (q, k / sqrt(D))
    or first_longest (token 0 of q and of k rescaled to 1.5 x the largest norm of its sequence)."""
    q, k, v = (x.double() for x in make_inputs(T, D, heads, "cpu", False, seed=seed))
    if kind == "scaled":
        q, k = q / math.sqrt(D), k / math.sqrt(D)
    elif kind == "first_longest":
        for x in (q, k):
            norms = x.norm(dim=-1)
            x[:, :, 0] *= (1.5 * norms.amax(dim=-1) / norms[:, :, 0]).unsqueeze(-1)
    elif kind != "randn":
        raise ValueError(f"unknown input kind {kind}")
    grad = torch.randn(1, heads, T, D, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return q, k, v, grad


def _out_and_grads(call, q, k, v, grad):
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    out = call(*leaves)
    out.backward(grad.to(out.dtype))
    return out.detach(), [x.grad.detach() for x in leaves]


def _diff(a, b):
    a, b = a.double(), b.double()
    diff = (a - b).abs().max().item()
    return diff, diff / max(b.abs().max().item(), 1e-300)


def _future_leak(call, q, k, v):
    """Largest change of the outputs at positions < T - 1 when the last token of q, k, v changes."""
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[:, :, -1] *= 3.0
    k2[:, :, -1] *= 3.0
    v2[:, :, -1] = -v2[:, :, -1] + 1.0
    with torch.no_grad():
        a, b = call(q, k, v), call(q2, k2, v2)
    return (a[:, :, :-1].double() - b[:, :, :-1].double()).abs().max().item()


def compare_setting(fn, setting, p, causal, dtype, T, D, heads, seed=0):
    """One correctness row: their ``fn`` against our module under ``setting`` (an entry of SETTINGS)."""
    q, k, v, grad = setting_inputs(setting["inputs"], T, D, heads, seed)
    q, k, v, grad = (x.to(dtype) for x in (q, k, v, grad))
    params = setting["ours"](D)
    module = our_module(p, params)
    pre = setting.get("ours_pre")
    theirs = lambda a, b, c: call_theirs(fn, setting["variant"], a, b, c, causal, p, setting["theirs"])  # noqa: E731
    ours = lambda a, b, c: call_ours(module, a, b, c, causal, pre)  # noqa: E731
    out_t, grads_t = _out_and_grads(theirs, q, k, v, grad)
    out_o, grads_o = _out_and_grads(ours, q, k, v, grad)
    same = bool(setting["same"](causal))
    row = dict(variant=setting["variant"], setting=setting["name"], p=p, causal=causal, dtype=str(dtype).split(".")[-1],
               T=T, D=D, heads=heads, same_function=same, ours_params=json.dumps(params),
               theirs_kwargs=json.dumps(setting["theirs"]), note=setting.get("note", ""))
    row["out_abs"], row["out_rel"] = _diff(out_o, out_t)
    for name, a, b in zip(("dq", "dk", "dv"), grads_o, grads_t):
        row[name + "_abs"], row[name + "_rel"] = _diff(a, b)
    row["match"] = all(row[f + "_rel"] <= TOLERANCE[dtype] for f in ("out", "dq", "dk", "dv"))
    row["ours_vs_ref64_rel"] = row["theirs_vs_ref64_rel"] = None
    if dtype == torch.float32 and same:
        reference = our_module(p, params, implementation="reference")
        with torch.no_grad():
            ref = call_ours(reference, *(x.double() for x in (q, k, v)), causal, pre)
        row["ours_vs_ref64_rel"] = _diff(out_o, ref)[1]
        row["theirs_vs_ref64_rel"] = _diff(out_t, ref)[1]
    row["leak_theirs"] = row["leak_ours"] = None
    if causal:
        row["leak_theirs"] = _future_leak(theirs, q, k, v)
        row["leak_ours"] = _future_leak(ours, q, k, v)
    return row


def run_checks(loaded, Ts, D, heads, ps=(1, 2), dtypes=(torch.float64, torch.float32), log=print):
    """Correctness rows for every loaded variant, setting, p, causal flag, dtype and T."""
    rows = []
    for setting in SETTINGS:
        info = loaded.get(setting["variant"])
        if info is None or info["fn"] is None:
            continue
        for p in ps:
            for causal in ((True,) if setting.get("causal_only") else (False, True)):
                for dtype in dtypes:
                    for T in Ts:
                        row = compare_setting(info["fn"], setting, p, causal, dtype, T, D, heads)
                        rows.append(row)
                        leak = ("" if not causal else
                                f" leak theirs={row['leak_theirs']:.2e} ours={row['leak_ours']:.2e}")
                        log(f"{row['variant']:21s} {row['setting']:32s} p={p} causal={causal!s:5s} {row['dtype']:7s} "
                            f"T={T:5d} same={row['same_function']!s:5s} match={row['match']!s:5s} "
                            f"out_rel={row['out_rel']:.2e} dq={row['dq_rel']:.2e} dk={row['dk_rel']:.2e} "
                            f"dv={row['dv_rel']:.2e}{leak}")
    return rows


def findings(loaded, D=16, T=64):
    """Checks of their code's behaviour beyond the comparison (executed here)."""
    out = {}
    info = loaded.get("fastmax_function")
    if info and info["fn"] is not None:
        q, k, v, _ = setting_inputs("scaled", T, D, 2)
        fn = info["fn"]
        for normalize in (False, True):
            a = fn(q, k, v, mask=False, normalize=normalize, temperature=1.0, p=2)
            b = fn(q, k, v, mask=False, normalize=normalize, temperature=4.0, p=2)
            out[f"temperature_ignored_normalize_{normalize}"] = dict(
                max_abs_change_temperature_1_vs_4=(a - b).abs().max().item(),
                meaning="0 means their temperature argument has no effect (overwritten with 1)")
        try:
            ns = _compile_definitions(info["path"], ["FASTMultiHeadAttention_Function", "FASTMultiHeadAttention",
                                                     "fastmax_function"], _ast_namespace())
            module = ns["FASTMultiHeadAttention"]()
            qq = q.clone().requires_grad_(True)
            o = module(qq, k, v, torch.zeros_like(q), mask=True)
            o.sum().backward()
            out["cpu_causal_module_returns_q"] = dict(
                output_equals_q=bool(torch.equal(o.detach(), q)),
                grad_q_equals_q=bool(torch.equal(qq.grad, q)),
                meaning="FASTMultiHeadAttention(use_custom_gradient=True)(q, k, v, mask=True) on CPU tensors: the "
                        "CUDA Function returns q unchanged (and q as the gradients) when q.get_device() == -1")
        except Exception as exc:
            out["cpu_causal_module_returns_q"] = dict(error=f"{type(exc).__name__}: {exc}")
    return out


# ----------------------------------------------------------------------------- timing

def time_method(name, loaded, p, causal):
    """A function (q, k, v) -> out for the timed method."""
    if name == "ours":
        module = our_module(p, {"normalization": "max_norm"})  # the setting of their normalize=True
        return lambda q, k, v: module(q, k, v, causal)
    if name == "ours_reimpl":
        return lambda q, k, v: authors_formulation(q, k, v, causal, p=p)
    setting = {"fastmax_function": SETTINGS[0], "fastattention_einops": SETTINGS[3]}[name]
    fn = loaded[name]["fn"]
    return lambda q, k, v: call_theirs(fn, name, q, k, v, causal, p, setting["theirs"])


def estimated_bytes(name, p, T, D, heads, causal, mode):
    """Rough float32 memory of the largest tensors of a call (for skipping, not reported)."""
    base = 8 * heads * T * D * 4
    if name == "ours":
        return base
    if not causal:
        extra = 4 * heads * T * D ** p * 4  # q2, k2 (T, D^p) features and their gradients
        if name == "fastattention_einops" and mode == "forward_backward":
            # its non-causal backward forms grad v^T (T, T) and, for p = 2, a (T, D, T) einsum intermediate
            extra += 2 * heads * T * T * (D if p == 2 else 1) * 4
        return base + extra
    per = heads * T * D ** (p + 1) * 4  # one per-position cumulative state (T, D^p, D)
    if name == "fastattention_einops" and mode == "forward_backward":
        return base + 6 * per  # its causal backward builds several (T, D^p, D) tensors at once
    return base + per * (3 if mode == "forward_backward" else 2)


def measure_peak_child(spec):
    """In a fresh process: peak resident memory (MB) one call adds (scripts.bench.common.peak_added_mb)."""
    torch.set_num_threads(spec["threads"])
    loaded = load_authors(spec["authors_dir"]) if spec["method"] not in ("ours", "ours_reimpl") else {}
    call = time_method(spec["method"], loaded, spec["p"], spec["causal"])
    return peak_added_mb(call, spec["T"], spec["D"], spec["heads"], "cpu", spec["mode"])


def measure_peak(spec):
    return run_child("scripts.bench.authors_fastmax", spec)


def run_timing(args, loaded, methods, log=print):
    rows = []
    max_bytes = (args.max_gb * 2 ** 30 if args.max_gb is not None
                 else 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for p in (1, 2):
        for causal in (False, True):
            for mode in MODES:
                for method in methods:
                    previous = None
                    for T in args.T:
                        row = dict(method=method, p=p, mode=mode, causal=causal, T=T, D=args.D, heads=args.heads,
                                   threads=args.threads, seconds=None, repeats=0, peak_mb=None, note="")
                        if previous is not None and previous > args.budget:
                            row["note"] = f"skipped: previous T took {previous:.1f} s > budget"
                        elif estimated_bytes(method, p, T, args.D, args.heads, causal, mode) > max_bytes:
                            row["note"] = "skipped: estimated memory above limit"
                        else:
                            call = time_method(method, loaded, p, causal)
                            q, k, v = make_inputs(T, args.D, args.heads, "cpu", mode == "forward_backward")
                            grad_out = torch.randn(1, args.heads, T, args.D, generator=torch.Generator().manual_seed(1))
                            row["seconds"], row["repeats"] = median_seconds(
                                lambda: run_once(call, q, k, v, mode, grad_out), args.repeats, args.long)
                            previous = row["seconds"]
                            del q, k, v, grad_out
                            if args.memory == "subprocess":
                                spec = dict(method=method, p=p, mode=mode, causal=causal, T=T, D=args.D,
                                            heads=args.heads, threads=args.threads, authors_dir=args.authors_dir)
                                row["peak_mb"], row["note"] = measure_peak(spec)
                        rows.append(row)
                        log(f"{method:21s} p={p} {mode:16s} causal={causal!s:5s} T={T:6d} "
                            f"t={row['seconds'] if row['seconds'] is None else round(row['seconds'], 5)} "
                            f"peak_mb={row['peak_mb'] if row['peak_mb'] is None else round(row['peak_mb'], 1)} "
                            f"{row['note']}")
    return rows


def speedups(rows):
    """theirs / ours time and memory per (their method, p, mode, causal, T) where both were measured."""
    ours = {(r["p"], r["mode"], r["causal"], r["T"]): r for r in rows if r["method"] == "ours" and r["seconds"]}
    out = []
    for r in rows:
        key = (r["p"], r["mode"], r["causal"], r["T"])
        if r["method"] == "ours" or not r["seconds"] or key not in ours:
            continue
        o = ours[key]
        out.append(dict(method=r["method"], p=r["p"], mode=r["mode"], causal=r["causal"], T=r["T"],
                        time_ratio_theirs_over_ours=r["seconds"] / o["seconds"],
                        memory_ratio_theirs_over_ours=(r["peak_mb"] / o["peak_mb"]
                                                       if r["peak_mb"] and o["peak_mb"] else None)))
    return out


# ----------------------------------------------------------------------------- output

def plot(check_rows, time_rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [(p, causal) for p in (1, 2) for causal in (False, True)]
    first = 1 if check_rows else 0  # row of the first timing panel
    n_rows = first + (len(MODES) if time_rows else 0)
    fig, axes = plt.subplots(n_rows, len(panels), figsize=(4.4 * len(panels), 3.4 * n_rows), squeeze=False)
    T_max = max((r["T"] for r in check_rows), default=None)
    for pi, (p, causal) in enumerate(panels if check_rows else ()):
        ax = axes[0][pi]
        sel = [r for r in check_rows if r["p"] == p and r["causal"] == causal and r["T"] == T_max]
        labels = [f"{r['variant'][:14]}|{r['setting'][:18]}|{r['dtype'][-2:]}" for r in sel]
        values = [max(r["out_rel"], r["dq_rel"], r["dk_rel"], r["dv_rel"], 1e-18) for r in sel]
        colors = ["tab:blue" if r["same_function"] else "tab:red" for r in sel]
        ax.barh(range(len(sel)), values, color=colors)
        ax.set_yticks(range(len(sel)), labels, fontsize=5)
        ax.set_xscale("log")
        ax.set_xlim(1e-17, 10)
        ax.set_title(f"max rel diff (out, dq, dk, dv) p={p} {'causal' if causal else 'non-causal'}"
                     + (f" T={sel[0]['T']}" if sel else ""), fontsize=7)
        ax.tick_params(axis="x", labelsize=6)
    methods = list(dict.fromkeys(r["method"] for r in time_rows))
    styles = plot_style.figure_styles(methods)
    for mi, mode in enumerate(MODES if time_rows else ()):
        for pi, (p, causal) in enumerate(panels):
            ax = axes[first + mi][pi]
            for method in methods:
                pts = sorted((r["T"], r["seconds"]) for r in time_rows if r["method"] == method and r["p"] == p
                             and r["causal"] == causal and r["mode"] == mode and r["seconds"])
                if pts:
                    ax.plot(*zip(*pts), ms=3, label=method, **styles[method])
            loglog_axes(ax, f"p={p} {'causal' if causal else 'non-causal'} {mode}", "time (s)", fontsize=8)
    fig.suptitle("blue: same function (rounding only); red: different semantics (reported)", fontsize=8)
    plot_style.legend_outside(fig, axes=[ax for row in axes[first:] for ax in row], fontsize=7)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--authors_dir", default=DEFAULT_AUTHORS_DIR,
                    help="holds fastmax/ and reproducing_fastmax_results/ (clones of the authors' repositories)")
    ap.add_argument("--T", default="256,512,1024,2048,4096", help="comma list of sequence lengths (timing; "
                    "also the correctness lengths with --no_time)")
    ap.add_argument("--D", type=int, default=32, help="head dim of the timing")
    ap.add_argument("--heads", type=int, default=8, help="B*H of the timing (inputs are (1, heads, T, D))")
    ap.add_argument("--check_T", default=None, help="correctness lengths (default: --T with --no_time, else 64,300)")
    ap.add_argument("--check_D", type=int, default=16, help="head dim of the correctness part")
    ap.add_argument("--check_heads", type=int, default=2, help="B*H of the correctness part")
    ap.add_argument("--no_check", action="store_true", help="skip the correctness part")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no_time", action="store_true", help="correctness only")
    ap.add_argument("--methods", default=",".join(TIME_METHODS), help="timed methods")
    ap.add_argument("--long", type=float, default=5.0, help="a call longer than this is timed once")
    ap.add_argument("--budget", type=float, default=60.0, help="skip larger T after a call this long (s)")
    ap.add_argument("--max_gb", type=float, default=None,
                    help="skip calls estimated above this (default: half the RAM)")
    ap.add_argument("--memory", default="subprocess", choices=["subprocess", "none"])
    ap.add_argument("--out", default="results/authors_fastmax/authors_fastmax_compare")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        print(measure_peak_child(json.loads(args._child)))
        return None
    commit = provenance.git_commit()  # when the run starts (not in the memory children)
    try:
        loaded = load_authors(args.authors_dir)
    except FileNotFoundError as exc:
        ap.error(str(exc))
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    args.T = parse_list(args.T, int)
    check_T = parse_list(args.check_T, int) if args.check_T else (args.T if args.no_time else [64, 300])
    for name, info in loaded.items():
        print(f"authors' {name}: {info['repo']}@{info['commit'][:12]} {info['file']} "
              f"{'loaded' if info['fn'] else 'NOT loaded: ' + info['error']}", flush=True)

    def log(message):
        print(message, flush=True)

    check_rows = [] if args.no_check else run_checks(loaded, check_T, args.check_D, args.check_heads, log=log)
    found = findings(loaded)
    time_rows = []
    methods = [m for m in parse_list(args.methods, str)
               if m in ("ours", "ours_reimpl") or (m in loaded and loaded[m]["fn"] is not None)]
    if not args.no_time:
        time_rows = run_timing(args, loaded, methods, log=log)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if check_rows:
        write_csv(args.out + ".csv", check_rows, CHECK_FIELDS)
    if time_rows:
        write_csv(args.out + "_timing.csv", time_rows, TIME_FIELDS)
    authors = {name: {k: v for k, v in info.items() if k != "fn"} for name, info in loaded.items()}
    settings = dict({k: v for k, v in vars(args).items() if k != "_child"}, check_T=check_T, torch=torch.__version__,
                    torch_threads=torch.get_num_threads(), machine=platform.processor() or platform.machine(),
                    cpus=os.cpu_count(), cuda_available=torch.cuda.is_available(), commit=commit,
                    opt_einsum=torch.backends.opt_einsum.is_available(),
                    authors=authors, timed_methods=methods if time_rows else [],
                    authors_cuda_extension="not built or run: needs a GPU and nvcc (fastmax_cuda.cpp + .cu)",
                    mapping={s["variant"] + " | " + s["name"]: dict(
                        theirs=s["theirs"], ours=s["ours_text"] + ", a0=1, a1=1, a2=0.5", inputs=s["inputs"],
                        note=s.get("note", "")) for s in SETTINGS},
                    memory_method="peak resident memory added by one call, fresh process per measurement "
                                  "(VmHWM - VmRSS after clear_refs)")
    summary = dict(
        same_function_rows=sum(r["same_function"] for r in check_rows),
        same_function_mismatches=[{k: r[k] for k in ("variant", "setting", "p", "causal", "dtype", "T", "out_rel",
                                                     "dq_rel", "dk_rel", "dv_rel")}
                                  for r in check_rows if r["same_function"] and not r["match"]],
        worst_same_function_rel={dt: max((max(r["out_rel"], r["dq_rel"], r["dk_rel"], r["dv_rel"]) for r in check_rows
                                          if r["same_function"] and r["dtype"] == dt), default=None)
                                 for dt in ("float64", "float32")},
        different_semantics=[{k: r[k] for k in ("variant", "setting", "p", "causal", "dtype", "T", "out_rel",
                                                "leak_theirs", "leak_ours")}
                             for r in check_rows if not r["same_function"] and r["dtype"] == "float64"],
        speedups=speedups(time_rows))
    write_json(args.out + ".json", {"settings": settings, "summary": summary, "findings": found,
                                    "check_rows": check_rows, "timing_rows": time_rows}, default=str)
    if check_rows or time_rows:
        plot(check_rows, time_rows, args.out + ".png")
    provenance.record(args.out, commit=commit)
    print(json.dumps({"summary": {k: v for k, v in summary.items() if k != "speedups"}, "findings": found},
                     indent=1, default=str))
    return dict(check_rows=check_rows, time_rows=time_rows, findings=found, summary=summary)


if __name__ == "__main__":
    main()
