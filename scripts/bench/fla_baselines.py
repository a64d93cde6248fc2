"""flash-linear-attention (FLA, the ``fla-core`` package) beside this repo's linear family, for the
GPU check (scripts/bench/gpu.py; docs/gpu.md). A library, not a script; FLA is optional: without
it ``available()`` says why and nothing here imports it.

The FLA kernels used (fla-core 0.6.0; inputs (B, T, H, D), "head-first" False; causal only):

- ``fla.ops.linear_attn.chunk_linear_attn(q, k, v, scale, normalize=True)``: o_t = (s q_t)^T
  sum_{j<=t} k_j v_j^T / ((s q_t)^T sum_{j<=t} k_j + 1e-10), no feature map of its own. Timed
  twice: on elu + 1 features (``linear``) and on the features under which it computes Fastmax
  p = 1 (``fastmax1_features``, the identity ``LINEAR_VS_FLA``).
- ``fla.ops.based.fused_chunk_based(q, k, v, scale)`` (D <= 16, linear in T) and
  ``fla.ops.based.parallel_based(q, k, v, scale)`` (D <= 128, quadratic in T): Based's
  second-order Taylor feature map, ``BASED_VS_FASTMAX`` below.

``CALLS`` names each timed FLA call, what it computes and the registered attention that computes
the same function; ``fla_call`` builds one for (B, H, T, D) inputs (this repo's layout);
``same_function_checks`` compares each with ours on the same inputs after the conversions the
statements give.
"""
import importlib.metadata
import importlib.util
import math

import torch
import torch.nn.functional as F

import attention
from attention.fastmax.reference import normalize_qk

BASED_VS_FASTMAX = (
    "Based (fla.ops.based, parallel_based and fused_chunk_based with use_norm=True): o_i = sum_{j<=i} f(s_ij) v_j / "
    "(sum_{j<=i} f(s_ij) + 1e-6) with s_ij = scale * (q_i . k_j), scale = D^(-1/2) by default, f(s) = 1 + s + s^2 / 2, "
    "on the raw q and k (no normalization of q or k), causal only; fused_chunk_based needs D <= 16, parallel_based "
    "D <= 128. Fastmax p = 2 (this repo's default, attention/fastmax): s_ij = q_hat_i . k_hat_j / temperature with "
    "q_hat = (q - mean_D(q)) / sqrt(var_D(q) + 1e-5) per token (the paper's Eq. 5-6, normalization='paper'; the same "
    "for k), temperature = sqrt(D) (the default for p = 2), f(s) = a0 + a1 s + a2 s^2 with a = (1, 1, 1/2), and "
    "o_i = sum_j f(s_ij) v_j / sum_j f(s_ij) exactly (no epsilon; a row without an allowed key outputs 0), causal or "
    "not, with padding masks. The kernel f is the same; the difference is the normalization of q and k and the "
    "epsilon. So Based(q, k, v) = fastmax(p=2, normalization='none', temperature='sqrt_head_dim')(q, k, v), and the "
    "default fastmax p = 2 = Based(q_hat, k_hat, v) with scale = 1/sqrt(D), both up to Based's 1e-6 (f >= 1/2, so "
    "the denominator of row i is at least (i + 1) / 2 and the 1e-6 changes it by at most 2e-6 relative).")
FEATURE_MULTIPLE = 16  # fastmax1_features pads its D + 1 features with zeros to a multiple of this (LINEAR_VS_FLA)
LINEAR_VS_FLA = (
    "FLA's chunk_linear_attn (normalize=True) computes o_t = phi_q(t)^T sum_{j<=t} phi_k(j) v_j^T / (phi_q(t)^T "
    "sum_{j<=t} phi_k(j) + 1e-10) of whatever features phi_q, phi_k it is given as q and k (scale s multiplies "
    "phi_q). This repo's linear attention is that with phi = elu + 1 on q and k and s = 1 (Katharopoulos et al.): "
    "the row fla_chunk_linear_attn. Fastmax p = 1 has the weights w_ij = c0 rho_j + c1 q_hat_i . k_hat_j over the "
    "allowed keys and o_i = sum_j w_ij v_j / sum_j w_ij (attention/fastmax/function.py: c0 = a0, c1 = a1 / "
    "temperature, rho_j = 1 for a real key and 0 for a padded one, k_hat zero at padded keys; the module's defaults, "
    "normalization 'paper' and temperature D, give c0 = 1, c1 = 1 / D). With phi_q(i) = [sqrt(c0), sqrt(c1) "
    "q_hat_i] and phi_k(j) = [sqrt(c0) rho_j, sqrt(c1) k_hat_j] (D + 1 features; c0, c1 >= 0), phi_q(i) . phi_k(j) "
    "= w_ij, so chunk_linear_attn(phi_q, phi_k, v, scale=1, normalize=True) is causal Fastmax p = 1 exactly, up to "
    "the 1e-10 in its denominator: the row fla_chunk_linear_attn_fastmax1 (default coefficients and no padding: "
    "[1, q_hat / sqrt(D)] and [1, k_hat / sqrt(D)]). FLA needs no power of two: its chunk kernels tile the feature "
    "dim in autotuned blocks of 32 to 128 with boundary checks (fla/ops/common/chunk_h.py and chunk_o.py, as read, "
    "not run here), so 65 features run as two blocks of 64 or one of 128 either way. The features are padded with "
    f"zeros to a multiple of {FEATURE_MULTIPLE} (80 at D = 64), so that every head's rows start 16-byte aligned in "
    "bfloat16 (65 x 2 bytes do not); zeros change no product and no block count. Both sides normalize q and k and "
    "build their features inside the timed call.")

# label -> (FLA function, head dims it accepts, what it computes, the registered attention with the same function)
CALLS = {
    "fla_chunk_linear_attn": ("linear_attn.chunk_linear_attn", None, "phi = elu + 1 on q and k, scale 1, normalize",
                              "linear"),
    "fla_chunk_linear_attn_fastmax1": ("linear_attn.chunk_linear_attn", None,
                                       "phi = [1, x_hat / sqrt(D)] on q and k, zero-padded, scale 1, normalize",
                                       "fastmax:p=1"),
    "fla_fused_chunk_based": ("based.fused_chunk_based", 16, "Based, scale D^-1/2",
                              "fastmax:p=2,normalization=none,temperature=sqrt_head_dim"),
    "fla_parallel_based": ("based.parallel_based", 128, "Based, scale D^-1/2",
                           "fastmax:p=2,normalization=none,temperature=sqrt_head_dim"),
}


def version():
    """The installed fla-core version (str), or None when fla is not importable."""
    if importlib.util.find_spec("fla") is None:
        return None
    for dist in ("fla-core", "flash-linear-attention"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def available(device):
    """None when FLA's kernels can run on ``device`` ("cpu", "cuda"), else why not, as a row note
    ("skipped: fla not installed", "skipped: fla's Triton kernels need CUDA")."""
    if version() is None:
        return "skipped: fla not installed"
    if torch.device(device).type != "cuda":
        return "skipped: fla's Triton kernels need CUDA"
    return None


def unsupported(label, D, causal, mode):
    """Why the FLA call ``label`` cannot run (D, causal, mode), or None: every FLA kernel used is
    causal only; fused_chunk_based takes D <= 16, parallel_based D <= 128."""
    if not causal:
        return "n/a: the FLA kernels used are causal only"
    limit = CALLS[label][1]
    if limit is not None and D > limit:
        return f"n/a: {label} takes head dims up to {limit}"
    return None


def _function(path):
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(f"fla.ops.{module}"), name)


def elu_features(x):
    """elu(x) + 1, linear attention's feature map (attention/linear.py)."""
    return F.elu(x) + 1


def fastmax1_features(q, k, c0=1.0, c1=None):
    """(phi_q, phi_k): the features of (B, T, H, D) queries and keys under which FLA's normalized
    linear attention computes causal Fastmax p = 1 without padding (``LINEAR_VS_FLA``):
    [sqrt(c0), sqrt(c1) x_hat] with x_hat the 'paper' normalization of x, zero-padded to a
    multiple of FEATURE_MULTIPLE features, in q's dtype. c1 defaults to 1 / D (the module's
    temperature D for p = 1, a1 = 1).

    Raises:
        ValueError: c0 or c1 negative (no real square root; the identity needs both >= 0).
    """
    D = q.shape[-1]
    c1 = 1.0 / D if c1 is None else c1
    if c0 < 0 or c1 < 0:
        raise ValueError(f"fastmax1_features needs c0, c1 >= 0; got c0={c0}, c1={c1}")
    width = -(-(D + 1) // FEATURE_MULTIPLE) * FEATURE_MULTIPLE
    q_hat, k_hat = normalize_qk(q, k, "paper")
    constant = torch.full_like(q_hat[..., :1], math.sqrt(c0))
    padding = torch.zeros_like(q_hat[..., :1]).expand(*q_hat.shape[:-1], width - D - 1)
    return tuple(torch.cat([constant, math.sqrt(c1) * x_hat, padding], dim=-1) for x_hat in (q_hat, k_hat))


def fla_call(label):
    """call (q, k, v) -> out for (B, H, T, D) tensors, running the FLA function of ``CALLS[label]``
    on (B, T, H, D) views (FLA's layout; its input guard makes them contiguous, a copy inside the
    timed call); out (B, H, T, D) in q's dtype.

    Raises:
        ValueError: an unknown label. ImportError: fla is not installed.
    """
    if label not in CALLS:
        raise ValueError(f"unknown FLA call {label!r}; known: {', '.join(CALLS)}")
    function = _function(CALLS[label][0])

    def call(q, k, v):
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        if label == "fla_chunk_linear_attn":
            out = function(elu_features(q), elu_features(k), v, scale=1.0, normalize=True)[0]
        elif label == "fla_chunk_linear_attn_fastmax1":
            out = function(*fastmax1_features(q, k), v, scale=1.0, normalize=True)[0]
        else:
            out = function(q, k, v)
        return out.transpose(1, 2)

    return call


def same_function_checks(device, T=512, H=2, seed=0):
    """Each FLA function against the registered attention that computes the same function, on the
    same float32 inputs (standard normal, (1, H, T, D)), causal: our side through its PyTorch
    path in float32, FLA's kernels as they run (float32 inputs; FLA's Triton dots may use TF32).

    Returns:
        list of dicts: fla (what FLA ran, with the conversion), ours (the registered spec), D, T,
        max_abs_diff, relative_error (Frobenius, against ours), max_abs_ours; or one dict with
        "skipped" when FLA cannot run on ``device``.
    """
    why = available(device)
    if why:
        return [{"skipped": why}]
    linear = _function(CALLS["fla_chunk_linear_attn"][0])
    fused, parallel = _function(CALLS["fla_fused_chunk_based"][0]), _function(CALLS["fla_parallel_based"][0])
    checks = []
    for D in (16, 64):
        g = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(1, H, T, D, generator=g).to(device) for _ in range(3))
        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        sqrt_d = math.sqrt(D)
        cases = [
            ("chunk_linear_attn(elu(q) + 1, elu(k) + 1, v, scale=1)", "linear",
             lambda: linear(elu_features(qt), elu_features(kt), vt, scale=1.0, normalize=True)[0]),
            ("chunk_linear_attn([1, q_hat / sqrt(D), 0...], [1, k_hat / sqrt(D), 0...], v, scale=1)", "fastmax:p=1",
             lambda: linear(*fastmax1_features(qt, kt), vt, scale=1.0, normalize=True)[0]),
            ("parallel_based(q, k, v)", "fastmax:p=2,normalization=none,temperature=sqrt_head_dim",
             lambda: parallel(qt, kt, vt)),
            ("parallel_based(q_hat, k_hat, v, scale=1/sqrt(D))", "fastmax:p=2",
             lambda: parallel(*normalize_qk(qt, kt, "paper"), vt, scale=1 / sqrt_d)),
        ]
        if D <= 16:
            cases.append(("fused_chunk_based(q, k, v)", "fastmax:p=2,normalization=none,temperature=sqrt_head_dim",
                          lambda: fused(qt, kt, vt)))
        for text, spec, run in cases:
            name, _, rest = spec.partition(":")
            params = dict(item.split("=") for item in rest.split(",")) if rest else {}
            params = {key: int(value) if value.isdigit() else value for key, value in params.items()}
            if name == "fastmax":
                params["implementation"] = "pytorch"
            ours = attention.build(name, {"head_dim": D, "n_head": H, "block_size": T, "layer_idx": 0}, **params)
            with torch.no_grad():
                expected = ours.to(device)(q, k, v, True)
                got = run().transpose(1, 2).float()
            diff = (got - expected).abs()
            checks.append({"fla": text, "ours": spec, "D": D, "T": T, "max_abs_diff": float(diff.max()),
                           "relative_error": float((got - expected).norm() / expected.norm()),
                           "max_abs_ours": float(expected.abs().max())})
    return checks
