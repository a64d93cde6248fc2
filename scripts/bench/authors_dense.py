"""DenseAttention: the paper authors' code against ours, on identical inputs (correctness and time).

Theirs: github.com/andrewargatkiny/dense-attention, loaded at run time from --authors_dir (a
checkout or ``git archive`` of it; nothing of theirs is copied here). Used: ``src/dense_attention.py``
(``DenseAttention``: queries = x W_Q^T, keys = values = x; linear Q(K^T V), quadratic (Q K^T) V,
auto; ``local`` / ``shifted_local`` windows; causal through their chunk-wise algorithm),
``src/danet_layers.py`` (``DANetLayerWithLocalAttention``, layers "l_sl_g"),
``src/positional_embeddings.py`` (``CosRelPE``), ``src/model_config.py`` (``ModelConfig``).

Ours: ``attention.build("dense", regime, window, shift, chunk_size)`` applied to q = x W^T and
k = v = x split into heads as in ``model.DenseSelfAttention``, and ``model.DANetBlock``.

Mapping (C = heads * D; x (B, T, C); W (C, C)):
  their DenseAttention(x).queries = W            <->  ours(q = F.linear(x, W), k = v = x), per head
  local=False, attention_complexity=linear|quadratic|auto  <->  regime=linear|quadratic|auto, window=0
  local="local" | "shifted_local" (their complexity forced to auto)  <->  window=w, shift=False|True, auto
  causal=True, chunk_size=c (chunk-wise: tril inside chunks + prefix K^T V states)
                                                 <->  causal, regime=linear, chunk_size=c (same algorithm)
  padding: their input rows multiplied by the 0/1 mask (as their DANet layer does)  <->  attention_mask
  DANet layer: their layer_number 0/1/2 of local_scheme "l_sl_g"  <->  our DANetBlock layer_idx 0/1/2
  of layer_scheme "LSG"; attention.queries -> attn.c_q.weight, ffn.expanding_weight (C, 4C) ->
  mlp.c_fc.weight^T, ffn.contracting_weight (4C, C) -> mlp.c_proj.weight^T; their mask tuple
  (m / w^(1/3), m / n_real^(1/3)) <-> our input_scale; MaxNorm eps 1e-3 in both.
  Cosine RelPE ("qkv" scheme: on the layer's scaled input): their factors cos(p 10000^(-i/D)) with p
  the position inside the window for local layers (inside the w/2-padded sequence for shifted ones),
  ours cos(m 10000^(-2i/D)) with global m. Variant "relpe_their_factors" feeds their factors to our
  block (must agree); "relpe_ours_eq6" uses our own (a deliberate difference, docs/dense_attention.md).

Correctness (always): for every setting, T and head count, outputs and gradients (w.r.t. x and W for
the op; x and every weight for the layer) of a random output gradient, as max |ours - theirs| and
that divided by max |theirs|; for T <= --ref_max_T also both against a float64 evaluation of the
explicit (T, T) matrix (``attention.dense.reference_forward``). Timing (unless --no_time): forward
(no_grad) and forward+backward of the op (query projection included on both sides), median of
--repeats samples (``scripts.bench.common.median_seconds``), ours and theirs back to back for
each configuration, the first of the two alternating. A configuration their code cannot run (T not
a multiple of the chunk or window, see THEIR_LIMITS) becomes a row noted "theirs failed: ...", not an abort.

Writes <out>_correctness.csv, <out>_timing.csv (with timing), <out>.json (settings incl. our commit,
torch threads, their repository and commit, the mapping, all rows) and <out>.png.

Usage (their code first: mkdir -p /tmp/authors_dense && git --git-dir=<mirror> archive HEAD | tar -x -C /tmp/authors_dense):
       python -m scripts.bench.authors_dense --authors_dir /tmp/authors_dense --threads 2 --repeats 5 \
           --out results/authors_dense/authors_dense_compare                      # correctness + timing, default grid
       python -m scripts.bench.authors_dense --T 64,100,256 --D 16 --heads 1,2 --window 16 \
           --chunk_size 32 --batch 2 --threads 1 --no_time           # correctness only, small
"""
import argparse
import importlib
import importlib.machinery
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import types
import warnings

import torch
import torch.nn.functional as F

import attention
import attention.dense  # noqa: F401  (registers "dense")
from attention.dense import reference_forward
from data import write_json
from model import DANetBlock, ModelConfig, cosine_relpe
import provenance
from scripts.bench.common import loglog_axes, median_seconds, parse_list, write_csv

AUTHORS_REPO = "andrewargatkiny/dense-attention"
AUTHORS_FILES = ("src/dense_attention.py", "src/danet_layers.py", "src/positional_embeddings.py",
                 "src/model_config.py", "src/activations.py", "src/expanded_ffn.py")
DEFAULT_AUTHORS_GIT_DIR = "/work/.mirror/andrewargatkiny+dense-attention/repo"
MODES = ("forward", "forward_backward")


# (their local, their attention_complexity, causal, our regime, windowed, shift, padded, timed)
SETTINGS = {
    "global_linear": ("global", "linear", False, "linear", False, False, False, True),
    "global_quadratic": ("global", "quadratic", False, "quadratic", False, False, False, True),
    "global_auto": ("global", "auto", False, "auto", False, False, False, False),
    "global_linear_padded": ("global", "linear", False, "linear", False, False, True, False),
    "local": ("local", "auto", False, "auto", True, False, False, True),
    "shifted_local": ("shifted_local", "auto", False, "auto", True, True, False, True),
    "causal_global": ("global", "auto", True, "linear", False, False, False, True),
    "causal_global_ours_quadratic": ("global", "auto", True, "quadratic", False, False, False, False),
    "causal_local": ("local", "auto", True, "auto", True, False, False, True),
    "causal_shifted_local": ("shifted_local", "auto", True, "auto", True, True, False, True),
}
SETTING_KEYS = ("local", "complexity", "causal", "regime", "windowed", "shift", "padded", "timed")
QUADRATIC_SETTINGS = ("global_quadratic", "causal_global_ours_quadratic")
LAYER_KINDS = (("local", 0), ("shifted_local", 1), ("global", 2))  # their layer_number in "l_sl_g" = our idx in "LSG"
LAYER_VARIANTS = ("no_relpe", "no_relpe_padded", "relpe_their_factors", "relpe_ours_eq6")
DELIBERATE = ("relpe_ours_eq6",)

MAPPING = {
    "op": "their DenseAttention(config, local).forward(x, None) with .queries = W  <->  "
          "ours = attention.build('dense', regime, window, shift, chunk_size)(q, kv, kv, causal), "
          "q = F.linear(x, W) and kv = x, both split (B, T, H, D) -> (B, H, T, D) as their multi-head view",
    "settings": {name: dict(zip(SETTING_KEYS, spec)) for name, spec in SETTINGS.items()},
    "layer_weights": {"attention.queries": "attn.c_q.weight", "ffn.expanding_weight (C, 4C)": "mlp.c_fc.weight.T",
                      "ffn.contracting_weight (4C, C)": "mlp.c_proj.weight.T"},
    "layer_kinds": "their DANetLayerWithLocalAttention layer_number 0/1/2 of local_scheme 'l_sl_g' <-> our "
                   "DANetBlock layer_idx 0/1/2 of layer_scheme 'LSG'",
    "layer_masks": "their (m / window^(1/3), m / sum(m)^(1/3)) <-> our DANetBlock.input_scale and attention_mask",
    "relpe": "their CosRelPE, relpe_scheme 'qkv', local_relpe=True: cos(p * 10000^(-i/D)), p = position inside "
             "the window (local; inside the w/2-padded sequence for shifted_local), global position otherwise; "
             "ours (model.cosine_relpe): cos(m * 10000^(-2i/D)), m = global position",
}
DIFFERENCES = [
    "Cosine RelPE: their theta_i = 10000^(-i/D) and in-window positions in local layers; ours 10000^(-2i/D) "
    "(paper Eq. 6) with global positions (docs/dense_attention.md). Row variant relpe_ours_eq6 measures it.",
    "FFN l_inf rescaling: theirs only scales weights down (min(1, target / max|W|)) and only with "
    "scale_ffn_weights; ours sets exactly the target. Not exercised here (both layers use plain weights).",
]
THEIR_LIMITS = [
    "Chunk-wise path (causal global: chunk_size; local and shifted_local: window) fails with a view/reshape "
    "RuntimeError unless T % chunk is 0 or chunk / 2: _forward_chunked appends T % chunk zero rows instead of "
    "chunk - T % chunk. Shows as 'theirs failed' rows; ours pads correctly.",
    "CosRelPE.apply_relpe multiplies by the whole (max_position_embeddings, C) table, so T must equal "
    "max_position_embeddings; local layers assert max_position_embeddings % window == 0. The RelPE layer "
    "rows use max_position_embeddings = T, hence 'AssertionError' rows when T % window != 0.",
]


# ---------------------------------------------------------------------------------------------
# loading their code


def load_authors(authors_dir):
    """Import their ``src`` package from ``authors_dir``; a namespace with dense_attention, model_config,
    positional_embeddings, danet_layers (None if it does not import: danet_error).

    Raises:
        FileNotFoundError: ``authors_dir`` has no src/dense_attention.py (the message says how to get it).
    """
    path = os.path.abspath(authors_dir)
    if not os.path.isfile(os.path.join(path, "src", "dense_attention.py")):
        raise FileNotFoundError(
            f"--authors_dir {authors_dir!r} does not hold the authors' code (no src/dense_attention.py). Get it "
            f"with: git clone https://github.com/{AUTHORS_REPO} {authors_dir}  (or: mkdir -p {authors_dir} && "
            f"git --git-dir=<mirror of {AUTHORS_REPO}> archive HEAD | tar -x -C {authors_dir})")
    ours = {n: m for n, m in sys.modules.items() if n == "src" or n.startswith("src.")}
    for n in ours:
        del sys.modules[n]
    # their modules import each other as ``src.<name>``: a package ``src`` rooted at their folder
    # (found through its __path__, not sys.path)
    package = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(
        "src", None, is_package=True))
    package.__path__ = [os.path.join(path, "src")]
    sys.modules["src"] = package
    ns = types.SimpleNamespace(path=path, danet_layers=None, danet_error=None)
    try:
        for name in ("model_config", "positional_embeddings", "dense_attention"):
            setattr(ns, name, importlib.import_module(f"src.{name}"))
        origin = os.path.abspath(ns.dense_attention.__file__)
        if not origin.startswith(path + os.sep):
            raise ImportError(f"src.dense_attention came from {origin}, not from {path}")
        try:
            ns.danet_layers = importlib.import_module("src.danet_layers")
        except Exception as e:  # the layer comparison is skipped, the op comparison still runs
            ns.danet_error = f"{type(e).__name__}: {e}"
    finally:
        for n in [n for n in sys.modules if n == "src" or n.startswith("src.")]:
            del sys.modules[n]
        sys.modules.update(ours)
    return ns


def _git(args, cwd=None):
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def authors_provenance(authors_dir, git_dir, commit=None):
    """Their repository, commit and the git blob ids of the files used (``git hash-object``).

    The commit is --authors_commit if given, else the HEAD of ``authors_dir`` if it is a git work tree,
    else the HEAD of ``git_dir`` (a bare mirror) when every used file equals its blob at that HEAD.
    """
    files = {rel: _git(["hash-object", os.path.join(authors_dir, rel)])
             for rel in AUTHORS_FILES if os.path.isfile(os.path.join(authors_dir, rel))}
    source = "--authors_commit" if commit else None
    if not commit and os.path.exists(os.path.join(authors_dir, ".git")):
        commit, source = _git(["rev-parse", "HEAD"], cwd=authors_dir), "git work tree of --authors_dir"
    if not commit and git_dir and os.path.isdir(git_dir):
        head = _git(["--git-dir", git_dir, "rev-parse", "HEAD"])
        blobs = {rel: _git(["--git-dir", git_dir, "rev-parse", f"HEAD:{rel}"]) for rel in files}
        differ = sorted(rel for rel in files if blobs[rel] != files[rel])
        if head and not differ:
            commit, source = head, f"HEAD of {git_dir} (all used files equal its blobs)"
        else:
            source = f"unknown: files {differ} differ from HEAD {head} of {git_dir}"
    return {"repo": AUTHORS_REPO, "url": f"https://github.com/{AUTHORS_REPO}", "commit": commit,
            "commit_source": source or "unknown (give --authors_commit)", "dir": os.path.abspath(authors_dir),
            "files": files}


def their_config(authors, C, H, T, window, chunk, causal, complexity="auto", local_attention=False, relpe=False):
    """Their ModelConfig for one layer. max_position_embeddings: T with RelPE (their CosRelPE multiplies by
    the whole table, so T must equal it), else the smallest multiple of the window >= T (their assert)."""
    max_pos = T if relpe else window * math.ceil(T / window)
    return authors.model_config.ModelConfig(
        vocab_size_or_config_json_file=64, hidden_size=C, num_hidden_layers=3, num_attention_heads=H,
        intermediate_size=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attention_complexity=complexity,
        pre_attn_ln_type="max_norm", post_attn_ln_type="max_norm", max_position_embeddings=max_pos, causal=causal,
        chunk_size=chunk, local_attention=local_attention, window_size=window, local_relpe=True,
        local_scheme="l_sl_g", relpe_scheme="qkv" if relpe else None,
        pos_emb_type="relpe" if relpe else "learned", relpe_type="cosine" if relpe else None)


# ---------------------------------------------------------------------------------------------
# the op


def spec_of(name):
    return types.SimpleNamespace(name=name, **dict(zip(SETTING_KEYS, SETTINGS[name])))


def their_op(authors, spec, C, H, T, window, chunk, dtype):
    cfg = their_config(authors, C, H, T, window, chunk, spec.causal, spec.complexity,
                       local_attention=spec.local != "global")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overrode local attention complexity ... to 'auto'"
        mod = authors.dense_attention.DenseAttention(cfg, local=spec.local)
    return mod.to(dtype).eval()


def our_op(spec, H, window, chunk):
    mech = attention.build("dense", regime=spec.regime, window=window if spec.windowed else 0, shift=spec.shift,
                           chunk_size=chunk)

    def run(x, w, mask=None):
        B, T, C = x.shape
        q = F.linear(x, w).view(B, T, H, C // H).transpose(1, 2)
        kv = x.view(B, T, H, C // H).transpose(1, 2)
        return mech(q, kv, kv, causal=spec.causal, attention_mask=mask).transpose(1, 2).reshape(B, T, C)
    return run, mech


def their_regime(spec, T, D, window, chunk):
    """The kernel their DenseAttention runs (read off src/dense_attention.py's dispatch)."""
    if spec.local == "global":
        if spec.causal:
            return "quadratic_tril" if T <= chunk else f"chunked(c={chunk})"
        return spec.complexity if spec.complexity != "auto" else ("linear" if D <= T else "quadratic")
    # local: one global call when T <= w; shifted_local: when T <= w / 2, else windows of w (zero-padded)
    whole = T <= (window if spec.local == "local" else window // 2)
    n = T if whole else window
    if spec.causal:
        return f"quadratic_tril(L={n})"
    return f"{'linear' if D <= n else 'quadratic'}(L={n})"


def op_inputs(B, T, C, dtype, padded, seed=0):
    """x uniform in [-1, 1] * T^(-1/3) (the DANet input range), W ~ N(0, 1/C), a random output gradient
    and, if ``padded``, a (B, T) mask with right padding in the first and left padding in the last sequence."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(B, T, C, generator=g, dtype=torch.float64) * 2 - 1).to(dtype) * T ** (-1 / 3)
    w = (torch.randn(C, C, generator=g, dtype=torch.float64) / math.sqrt(C)).to(dtype)
    grad_out = torch.randn(B, T, C, generator=g, dtype=torch.float64).to(dtype)
    mask = None
    if padded:
        mask = torch.ones(B, T, dtype=torch.bool)
        mask[0, T - max(1, T // 4):] = False
        if B > 1:
            mask[-1, :max(1, T // 8)] = False
    return x, w, grad_out, mask


def _theirs_call(mod, x, mask):
    if mask is not None:
        x = x * mask[..., None].to(x.dtype)  # their DANet layer zeroes padded rows before the attention
    return mod(x, None)


def run_theirs(mod, x, w, grad_out, mask):
    with torch.no_grad():
        mod.queries.copy_(w)
    mod.zero_grad(set_to_none=True)
    xx = x.clone().requires_grad_(True)
    out = _theirs_call(mod, xx, mask)
    out.backward(grad_out)
    return out.detach(), xx.grad, mod.queries.grad.clone()


def run_ours(fn, x, w, grad_out, mask):
    xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    out = fn(xx, ww, mask)
    out.backward(grad_out)
    return out.detach(), xx.grad, ww.grad


def run_reference(spec, H, window, x, w, grad_out, mask):
    """Float64 explicit-matrix evaluation (attention.dense.reference_forward) with gradients."""
    xx, ww = x.double().clone().requires_grad_(True), w.double().clone().requires_grad_(True)
    B, T, C = xx.shape
    q = F.linear(xx, ww).view(B, T, H, C // H).transpose(1, 2)
    kv = xx.view(B, T, H, C // H).transpose(1, 2)
    out = reference_forward(q, kv, kv, spec.causal, mask, window if spec.windowed else 0, spec.shift)
    out = out.transpose(1, 2).reshape(B, T, C)
    out.backward(grad_out.double())
    return out.detach(), xx.grad, ww.grad


def diff(a, b):
    """(max |a - b|, that / max |b|) in float64."""
    a, b = a.double(), b.double()
    err = (a - b).abs().max().item()
    return err, err / max(b.abs().max().item(), 1e-300)


def quadratic_bytes(name, B, H, T, itemsize):
    """Rough peak of the (B, H, T, T) score matrices (forward + backward) of the global quadratic settings."""
    return 4 * B * H * T * T * itemsize if name in QUADRATIC_SETTINGS else 0


def op_correctness(authors, names, Ts, D, heads_list, B, window, chunk, dtype, ref_max_T, max_bytes):
    rows = []
    itemsize = torch.tensor([], dtype=dtype).element_size()
    for H in heads_list:
        C = H * D
        for name in names:
            spec = spec_of(name)
            for T in Ts:
                row = dict(part="op", setting=name, variant="", T=T, D=D, heads=H, batch=B, window=window,
                           chunk_size=chunk, causal=spec.causal, dtype=str(dtype).replace("torch.", ""), note="")
                if quadratic_bytes(name, B, H, T, itemsize) > max_bytes:
                    row["note"] = "skipped: (T, T) matrices above --max_gb"
                    rows.append(row)
                    print(_fmt(row), flush=True)
                    continue
                fn, mech = our_op(spec, H, window, chunk)
                row["our_regime"] = mech.regime_for(T, D, spec.causal)
                row["their_regime"] = their_regime(spec, T, D, window, chunk)
                x, w, grad_out, mask = op_inputs(B, T, C, dtype, spec.padded)
                try:
                    mod = their_op(authors, spec, C, H, T, window, chunk, dtype)
                    theirs = run_theirs(mod, x, w, grad_out, mask)
                except Exception as e:  # recorded, not fatal: a limitation of theirs is a result
                    row["note"] = f"theirs failed: {type(e).__name__}: {e}"[:300]
                    rows.append(row)
                    print(_fmt(row), flush=True)
                    continue
                ours = run_ours(fn, x, w, grad_out, mask)
                for key, a, b in zip(("out", "grad_x", "grad_w"), ours, theirs):
                    row[f"{key}_max_abs"], row[f"{key}_rel"] = diff(a, b)
                if T <= ref_max_T:
                    ref = run_reference(spec, H, window, x, w, grad_out, mask)
                    row["ours_vs_ref64_rel"] = max(diff(a, r)[1] for a, r in zip(ours, ref))
                    row["theirs_vs_ref64_rel"] = max(diff(b, r)[1] for b, r in zip(theirs, ref))
                rows.append(row)
                print(_fmt(row), flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# the DANet layer


def their_relpe_factors(table, T, D, kind, window):
    """Their Cosine RelPE factors per position as a (T, D) table for our block (see MAPPING['relpe'])."""
    m = torch.arange(T)
    if kind == "local" and T > window:
        pos = m % window
    elif kind == "shifted_local" and T > window // 2:
        pos = (m + window // 2) % window  # positions inside the windows of the sequence padded by w/2 in front
    else:
        pos = m
    return table[pos, :D]


def layer_masks(mask, B, T, window, dtype):
    m = torch.ones(B, T, dtype=dtype) if mask is None else mask.to(dtype)
    return (m / window ** (1.0 / 3.0)).unsqueeze(-1), (m / m.sum(-1, keepdim=True).pow(1.0 / 3.0)).unsqueeze(-1)


def layer_correctness(authors, Ts, D, heads_list, B, window, chunk, dtype, causal_list):
    rows = []
    for H in heads_list:
        C = H * D
        for causal in causal_list:
            for kind, number in LAYER_KINDS:
                for variant in LAYER_VARIANTS:
                    for T in Ts:
                        rows.append(_layer_row(authors, kind, number, variant, T, D, H, C, B, window, chunk, causal,
                                               dtype))
                        print(_fmt(rows[-1]), flush=True)
    return rows


def _layer_row(authors, kind, number, variant, T, D, H, C, B, window, chunk, causal, dtype):
    relpe, padded = variant.startswith("relpe"), variant.endswith("padded")
    row = dict(part="layer", setting=f"{'causal_' if causal else ''}{kind}", variant=variant, T=T, D=D, heads=H,
               batch=B, window=window, chunk_size=chunk, causal=causal, dtype=str(dtype).replace("torch.", ""),
               note="deliberate difference (RelPE theta and positions)" if variant in DELIBERATE else "")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, C, generator=g, dtype=torch.float64).to(dtype)
    w_q = (torch.randn(C, C, generator=g, dtype=torch.float64) / math.sqrt(C)).to(dtype)
    grad_out = torch.randn(B, T, C, generator=g, dtype=torch.float64).to(dtype)
    mask = op_inputs(B, T, C, dtype, True)[3] if padded else None
    try:
        cfg = their_config(authors, C, H, T, window, chunk, causal, "auto", local_attention=True, relpe=relpe)
        torch.manual_seed(2)  # their FFN initialisation
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            layer = authors.danet_layers.DANetLayerWithLocalAttention(cfg, layer_number=number)
        layer = layer.to(dtype).eval()
        with torch.no_grad():
            layer.attention.queries.copy_(w_q)  # their init (std 0.02 / sqrt(2 L C)) would hide the attention
        cache = authors.positional_embeddings.CosRelPE(T, D, num_heads=H).to(dtype) if relpe else None
        xx = x.clone().requires_grad_(True)
        out = layer(xx, layer_masks(mask, B, T, window, dtype), cache)
        out.backward(grad_out)
    except Exception as e:
        row["note"] = f"theirs failed: {type(e).__name__}: {e}"[:300]
        return row
    theirs = [out.detach(), xx.grad, layer.attention.queries.grad, layer.ffn.expanding_weight.grad.T,
              layer.ffn.contracting_weight.grad.T]

    cfg = ModelConfig(block_size=T, vocab_size=64, n_layer=3, n_head=H, n_embd=C, bias=False, attention="dense",
                      attention_params={"regime": "auto", "chunk_size": chunk}, block="danet", pos_emb="none",
                      layer_scheme="LSG", window=window, maxnorm_eps=layer.activation.eps)
    block = DANetBlock(cfg, causal, number).to(dtype)
    with torch.no_grad():
        block.attn.c_q.weight.copy_(layer.attention.queries)
        block.mlp.c_fc.weight.copy_(layer.ffn.expanding_weight.T)
        block.mlp.c_proj.weight.copy_(layer.ffn.contracting_weight.T)
    factors = None
    if variant == "relpe_their_factors":
        factors = their_relpe_factors(cache.rel_pos_emb[0], T, D, kind, window)
    elif variant == "relpe_ours_eq6":
        factors = cosine_relpe(T, D, dtype=dtype)
    xx = x.clone().requires_grad_(True)
    out = block(xx, mask, factors)
    out.backward(grad_out)
    ours = [out.detach(), xx.grad, block.attn.c_q.weight.grad, block.mlp.c_fc.weight.grad, block.mlp.c_proj.weight.grad]
    row["out_max_abs"], row["out_rel"] = diff(ours[0], theirs[0])
    row["grad_x_max_abs"], row["grad_x_rel"] = diff(ours[1], theirs[1])
    weights = [diff(a, b) for a, b in zip(ours[2:], theirs[2:])]
    row["grad_w_max_abs"], row["grad_w_rel"] = max(e[0] for e in weights), max(e[1] for e in weights)
    row["our_regime"] = block.attn.mechanism.regime_for(T, D, causal)
    return row


# ---------------------------------------------------------------------------------------------
# timing


def time_pair(authors, name, T, D, H, B, window, chunk, dtype, mode, repeats, long_call, theirs_first):
    """{"ours": (s, repeats), "theirs": (s, repeats)} for one configuration, in the given order."""
    spec = spec_of(name)
    C = H * D
    x, w, grad_out, _ = op_inputs(B, T, C, dtype, False)
    fn, _ = our_op(spec, H, window, chunk)
    mod = their_op(authors, spec, C, H, T, window, chunk, dtype)
    with torch.no_grad():
        mod.queries.copy_(w)
    train = mode == "forward_backward"
    xs = x.clone().requires_grad_(train)
    ws = w.clone().requires_grad_(train)
    mod.queries.requires_grad_(train)

    def ours_once():
        if not train:
            with torch.no_grad():
                return fn(xs, ws)
        xs.grad = ws.grad = None
        fn(xs, ws).backward(grad_out)

    def theirs_once():
        if not train:
            with torch.no_grad():
                return mod(xs, None)
        xs.grad = mod.queries.grad = None
        mod(xs, None).backward(grad_out)

    order = [("theirs", theirs_once), ("ours", ours_once)]
    if not theirs_first:
        order.reverse()
    return {impl: median_seconds(once, repeats, long_call) for impl, once in order}


def timing(authors, names, Ts, D, heads_list, B, window, chunk, dtype, repeats, long_call, budget, max_bytes):
    rows = []
    itemsize = torch.tensor([], dtype=dtype).element_size()
    k = 0
    for H in heads_list:
        for name in names:
            for mode in MODES:
                too_slow = None
                for T in Ts:
                    row = dict(setting=name, mode=mode, T=T, D=D, heads=H, batch=B, window=window, chunk_size=chunk,
                               dtype=str(dtype).replace("torch.", ""), threads=torch.get_num_threads(),
                               ours_seconds=None, theirs_seconds=None, theirs_over_ours=None, ours_repeats=0,
                               theirs_repeats=0, first="", note="")
                    if too_slow is not None:
                        row["note"] = f"skipped: T={too_slow[0]} took {too_slow[1]:.1f} s > --budget"
                    elif quadratic_bytes(name, B, H, T, itemsize) > max_bytes:
                        row["note"] = "skipped: (T, T) matrices above --max_gb"
                    else:
                        theirs_first = k % 2 == 0
                        k += 1
                        res = time_pair(authors, name, T, D, H, B, window, chunk, dtype, mode, repeats, long_call,
                                        theirs_first)
                        row.update(first="theirs" if theirs_first else "ours",
                                   ours_seconds=res["ours"][0], ours_repeats=res["ours"][1],
                                   theirs_seconds=res["theirs"][0], theirs_repeats=res["theirs"][1],
                                   theirs_over_ours=res["theirs"][0] / res["ours"][0])
                        slowest = max(res["ours"][0], res["theirs"][0])
                        if slowest > budget:
                            too_slow = (T, slowest)
                    rows.append(row)
                    print(f"{name:30s} {mode:16s} H={H} T={T:6d} ours={_num(row['ours_seconds'])} "
                          f"theirs={_num(row['theirs_seconds'])} theirs/ours={_num(row['theirs_over_ours'])} "
                          f"{row['note']}", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# output


def _num(v):
    return "-" if v is None else f"{v:.3g}"


def _fmt(row):
    return (f"{row['part']:5s} {row['setting']:30s} {row['variant']:20s} H={row['heads']} T={row['T']:6d} "
            f"out_rel={_num(row.get('out_rel'))} grad_x_rel={_num(row.get('grad_x_rel'))} "
            f"grad_w_rel={_num(row.get('grad_w_rel'))} {row['note']}")


CORRECTNESS_FIELDS = ["part", "setting", "variant", "T", "D", "heads", "batch", "window", "chunk_size", "causal",
                      "dtype", "our_regime", "their_regime", "out_max_abs", "out_rel", "grad_x_max_abs", "grad_x_rel",
                      "grad_w_max_abs", "grad_w_rel", "ours_vs_ref64_rel", "theirs_vs_ref64_rel", "note"]
TIMING_FIELDS = ["setting", "mode", "T", "D", "heads", "batch", "window", "chunk_size", "dtype", "threads",
                 "ours_seconds", "theirs_seconds", "theirs_over_ours", "ours_repeats", "theirs_repeats", "first", "note"]


def summarize(correctness):
    """Largest relative difference per part (op, layer without the deliberate variants, deliberate)."""
    def worst(rows):
        vals = [max(r[k] for k in ("out_rel", "grad_x_rel", "grad_w_rel")) for r in rows if "out_rel" in r]
        return max(vals) if vals else None
    op = [r for r in correctness if r["part"] == "op"]
    layer = [r for r in correctness if r["part"] == "layer" and r["variant"] not in DELIBERATE]
    deliberate = [r for r in correctness if r["part"] == "layer" and r["variant"] in DELIBERATE]
    return {"op_max_rel": worst(op), "layer_max_rel": worst(layer), "deliberate_relpe_max_rel": worst(deliberate),
            "failed": [f"{r['part']} {r['setting']} {r['variant']} T={r['T']} H={r['heads']}: {r['note']}"
                       for r in correctness if r["note"].startswith("theirs failed")]}


def plot(correctness, timing_rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = 2 + (2 if timing_rows else 0)
    fig, axes = plt.subplots(1, n, figsize=(6 * n, 5.5), squeeze=False)
    axes = axes[0]
    floor = 1e-17  # bit-identical results (difference 0) are drawn at this value
    for ax, part in zip(axes[:2], ("op", "layer")):
        worst = {}
        for r in correctness:
            if r["part"] == part and "out_rel" in r:
                key = r["setting"] + (f" / {r['variant']}" if r["variant"] else "")
                val = max(r["out_rel"], r["grad_x_rel"], r["grad_w_rel"], floor)
                worst[key] = max(worst.get(key, floor), val)
        keys = sorted(worst)
        colors = ["C3" if any(d in k for d in DELIBERATE) else "C0" for k in keys]
        ax.barh(range(len(keys)), [worst[k] for k in keys], color=colors, left=floor / 10)
        ax.set_yticks(range(len(keys)), keys, fontsize=5 if part == "layer" else 6)
        ax.set_xscale("log")
        ax.set_xlabel("max over T, heads of max |ours - theirs| / max |theirs| (out, grads)", fontsize=7)
        Ts = sorted({r["T"] for r in correctness if r["part"] == part})
        ax.set_title(f"{part}: ours vs theirs, T in {Ts} (0 drawn at {floor:g}; red = deliberate)", fontsize=7)
        ax.grid(True, axis="x", which="both", alpha=0.3)
    for ax, mode in zip(axes[2:], MODES):
        names = sorted({r["setting"] for r in timing_rows})
        for i, name in enumerate(names):
            color = f"C{i % 10}"
            for impl, ls in (("ours", "-"), ("theirs", "--")):
                pts = sorted((r["T"], r[f"{impl}_seconds"]) for r in timing_rows
                             if r["setting"] == name and r["mode"] == mode and r[f"{impl}_seconds"])
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, color=color, marker="o", ms=3,
                            label=f"{name} {impl}")
        loglog_axes(ax, f"{mode} (solid ours, dashed theirs)", "seconds per call (median)")
        ax.legend(fontsize=5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--authors_dir", default="/tmp/authors_dense", help="checkout / archive of " + AUTHORS_REPO)
    ap.add_argument("--authors_git_dir", default=DEFAULT_AUTHORS_GIT_DIR,
                    help="bare mirror of their repository, used to name the commit of --authors_dir")
    ap.add_argument("--authors_commit", default=None, help="their commit (default: found from git, see JSON)")
    ap.add_argument("--T", default="256,1024,4096,16384", help="comma list of sequence lengths")
    ap.add_argument("--D", type=int, default=64, help="head dimension")
    ap.add_argument("--heads", default="1", help="comma list of head counts (model width C = heads * D)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--window", type=int, default=64, help="window of the local settings (even)")
    ap.add_argument("--chunk_size", type=int, default=64, help="chunk of the causal chunk-wise algorithm (both)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma list of op settings")
    ap.add_argument("--no_layer", action="store_true", help="skip the DANet layer comparison")
    ap.add_argument("--layer_T", default=None, help="comma list of T for the layer comparison (default: --T up to 4096)")
    ap.add_argument("--ref_max_T", type=int, default=2048, help="float64 explicit-matrix reference up to this T")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--long", type=float, default=5.0, help="a call longer than this is timed once")
    ap.add_argument("--budget", type=float, default=60.0, help="skip larger T of a setting after a call this long (s)")
    ap.add_argument("--max_gb", type=float, default=4.0, help="skip quadratic settings whose (T, T) matrices exceed this")
    ap.add_argument("--no_time", action="store_true", help="correctness only")
    ap.add_argument("--out", default="results/authors_dense/authors_dense_compare")
    args = ap.parse_args(argv)
    commit = provenance.git_commit()  # when the run starts

    try:
        authors = load_authors(args.authors_dir)
    except FileNotFoundError as e:
        raise SystemExit(f"scripts.bench.authors_dense: {e}")
    if args.window <= 0 or args.window % 2:
        raise SystemExit(f"--window must be even and > 0 (their local layers assert it); got {args.window}")
    names = parse_list(args.settings, str)
    unknown = sorted(set(names) - set(SETTINGS))
    if unknown:
        raise SystemExit(f"unknown --settings {unknown}; allowed: {', '.join(SETTINGS)}")
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    dtype = getattr(torch, args.dtype)
    Ts, heads_list = parse_list(args.T, int), parse_list(args.heads, int)
    layer_Ts = parse_list(args.layer_T, int) if args.layer_T else [T for T in Ts if T <= 4096] or Ts[:1]
    max_bytes = args.max_gb * 2 ** 30

    correctness = op_correctness(authors, names, Ts, args.D, heads_list, args.batch, args.window, args.chunk_size,
                                 dtype, args.ref_max_T, max_bytes)
    layer_note = None
    if args.no_layer:
        layer_note = "skipped (--no_layer)"
    elif authors.danet_layers is None:
        layer_note = f"skipped: src/danet_layers.py did not import ({authors.danet_error})"
        print(layer_note)
    else:
        correctness += layer_correctness(authors, layer_Ts, args.D, heads_list, args.batch, args.window,
                                         args.chunk_size, dtype, (False, True))
    timing_rows = []
    if not args.no_time:
        timed = [n for n in names if SETTINGS[n][SETTING_KEYS.index("timed")]]
        timing_rows = timing(authors, timed, Ts, args.D, heads_list, args.batch, args.window, args.chunk_size, dtype,
                             args.repeats, args.long, args.budget, max_bytes)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
    write_csv(args.out + "_correctness.csv", correctness, CORRECTNESS_FIELDS, extrasaction="ignore")
    if timing_rows:
        write_csv(args.out + "_timing.csv", timing_rows, TIMING_FIELDS, extrasaction="ignore")
    settings = dict(vars(args), commit=commit, torch=torch.__version__, torch_threads=torch.get_num_threads(),
                    machine=platform.processor() or platform.machine(), cpus=os.cpu_count(),
                    authors=authors_provenance(args.authors_dir, args.authors_git_dir, args.authors_commit),
                    layer=layer_note or "compared")
    summary = summarize(correctness)
    write_json(args.out + ".json", {"settings": settings, "mapping": MAPPING, "differences": DIFFERENCES,
                                    "their_limitations": THEIR_LIMITS, "summary": summary,
                                    "correctness": correctness, "timing": timing_rows})
    plot(correctness, timing_rows, args.out + ".png")
    provenance.record(args.out, commit=commit)
    print(json.dumps(summary, indent=1))
    return correctness, timing_rows, summary


if __name__ == "__main__":
    main()
