"""The GPU check of issue 56 (docs/gpu.md), run by scripts/bench/gpu_check.sh: the environment
report, the parallel compilation of Fastmax's Triton kernels, their accuracy on the GPU (G0), the
benchmark of those kernels against SDPA's FlashAttention backend, flash-linear-attention (FLA) and
this repo's PyTorch paths, the manifest entry of the GPU tests, and the merge of the folders two
device runs bring back.

    python -m scripts.bench.gpu env                      the environment report (JSON on stdout)
    python -m scripts.bench.gpu folder [--name_only]     results/gpu/<date>_<gpu> for this machine
    python -m scripts.bench.gpu compile [--D 16,64] [--dtype bfloat16,float32] [--precision highest,high]
                                                         compile the Triton kernels, in parallel processes
    python -m scripts.bench.gpu bench --out FOLDER       the benchmark (below); --dry_run: tiny sizes on the CPU
    python -m scripts.bench.gpu record_tests --out FOLDER   manifest entry "tests" (tests_progress.jsonl)
    python -m scripts.bench.gpu plot FOLDER              draw FOLDER/bench.png again from FOLDER/bench.json
    python -m scripts.bench.gpu collect SRC... --into results/gpu/<name>   copy folders, merging manifests

Compilation (``compile_kernels``). Every configuration of ``kernel_configs`` (head dim, kernel
family (p, "chunk" | "parallel"), causal, dtype; ``scripts/bench/kernel_report.py``'s list) is one
job: a worker process (spawned, without TRITON_INTERPRET) runs one forward and one backward of
that family on small CUDA inputs (two chunks, ``warm_config``), which compiles every kernel the
configuration launches into Triton's on-disk cache, with exactly the specialization of the
benchmark's launches (the kernels' sequence lengths and chunk counts are not specialized, so two
chunks compile the kernel of every T) and PyTorch's float32 matmul precision (which sets the
kernels' constexpr DOT: the tests and train.py run under the default "highest", the benchmark
under FLOAT32_MATMUL_PRECISION). Later launches anywhere on the machine load them. Each row also
gives the compiled kernels' registers, spills and shared memory. The bench runs it first
(``--compile``), the GPU tests in their fixtures.

The benchmark. B = 1 sequence of H = 8 heads (``--heads``), D = Dv = 64 (``--D``), bfloat16 inputs
and calls under bfloat16 autocast (as train.py ``--dtype=bfloat16``; a method whose bfloat16 call
fails is measured in float32 and its row says so), T = 1024, 4096, 16384, 65536, causal unless
said, forward (no_grad) and forward + backward, every process under
``torch.set_float32_matmul_precision(FLOAT32_MATMUL_PRECISION)`` ("high": float32 products on
TF32 tensor cores, in the Triton kernels and in the PyTorch paths, which compute in float32).
Groups, each in a child process so that a broken CUDA context ends one group, not the run, in
this order:

- "accuracy", G0: each Triton kernel family (``ACCURACY_FAMILIES``: p = 1 chunk, p = 2 chunk
  forced, p = 2 parallel forced) on the GPU against the PyTorch path in float64 on the same
  (bfloat16-rounded) inputs, causal, at T = 2048 and 16384 (``--accuracy_T``): relative Frobenius
  errors of the output and of the gradients of q, k, v within C1's bounds for 16-bit inputs
  (``ACCURACY_BOUNDS``: 2e-2 and 5e-2). bench.json's ``accuracy``: every case and pass / fail per family.
- "triton", ours (``OURS``): p = 1; p = 2 with the dispatch ("auto": the parallel kernel up to
  ``kernels.PARALLEL_MAX_T``, the chunk kernels beyond), forced parallel and forced chunk, the two
  forced ones also at T = 2048 and 8192 (``--crossover_T``: the crossover of the dispatch rule);
  p = 2 at D = 16 (``--D_based``); the batch scan, time(B = 8) / time(B = 1) at T = 16384
  (``--batch``, ``--batch_T``) for p = 1 and both p = 2 kernels (is the GPU busy at B = 1?); p = 1
  and 2 non-causal. B = 8 is run as 8 x H heads of one sequence: the module flattens (B, H) to
  N = B H before any kernel, so the launches are those of (8, H, T, D) inputs.
- "baselines": SDPA forced to its FlashAttention backend (a call flash cannot run is a failed row,
  never a silent fallback); FLA's ``chunk_linear_attn`` on the features under which it computes
  Fastmax p = 1 (``fla_chunk_linear_attn_fastmax1``) and on elu + 1 (``linear``'s), its
  ``parallel_based`` (= fastmax p = 2 without normalization) at D and ``fused_chunk_based`` at
  D = 16 (``scripts/bench/fla_baselines.py`` states the identities); Fastmax's PyTorch path
  (configs/attention/fastmax1.py, fastmax2.py) and linear attention; SDPA non-causal.
- "others": every other attention of configs/attention/ with its parameters, and
  softmax_reference, causal and not.
A reference path (softmax_reference), tree attention's float64 CUDA path and Fastmax's PyTorch
path stop at T = 16384 (``slow_path``).

Per cell: the peak memory one call adds (``torch.cuda.max_memory_allocated`` growth) and the median
time of ``--repeats`` samples after a warm-up (CUDA events, samples of at least ``--min_sample``
seconds, fewer samples when they would take longer than ``--sample_s``; ``scripts/bench/methods.py``).
Before its first cell a curve makes one untimed call at its first T (``warm_up``: compilation and
CUDA's lazy loading happen there; its wall time is the rows' ``warmup_s``); ``cell_s`` is a cell's
wall time (memory, warm-up and samples), a check on the CUDA-event times. A cell is skipped when its
call is predicted longer than ``--call_s`` (log-log extrapolation from the curve's smaller T), its
estimated memory exceeds 80% of the GPU's, or its group's share of ``--budget_s`` (``GROUP_SHARES``;
time a group leaves passes on) is used up; a cell whose first full-size call (the memory
measurement's) takes longer than ``--call_s`` is timed by one more call alone (the cap per cell); a
failed cell stops its curve. Each child appends a cell's row to bench.csv as soon as it is measured
(G0: a line to a temporary file, read into bench.json); within a group the curves of the aims run
first (``curves``).

Outputs, one flat folder (``--out``; scripts/bench/gpu_check.sh: results/gpu/<date>_<gpu>):
bench.csv (the rows), bench.json (environment, settings, compilation, methods, G0, the rows, the
crossover, the aims of issue 56 (``aims``), the same-function comparisons with FLA and the
statements), bench.md (tables), bench.png (time against T) and the entry "bench" of manifest.json
(``provenance.record``), bench_profile.txt (``profile_triton``: where the Triton kernels' time
goes); with tests.log and tests_progress.jsonl of ``gpu_check.sh tests``, eight files.
"""
import argparse
import csv
import datetime
import functools
import importlib.metadata
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import torch

import attention
from attention.testing import BF16_BOUNDS, forward_and_gradients, random_qkv, relative_error
from data import write_json
import provenance
from scripts import plot_style
from scripts.bench import fla_baselines
from scripts.bench import kernel_report
from scripts.bench.common import (ROOT, loglog_axes, make_inputs, parse_list, peak_added_mb, run_once, synchronize,
                                 wall_timer)
from scripts.bench.methods import (CONFIG_DIR, estimated_bytes, first_line, flop_count, make_call, measure_call,
                                   parse_method, predicted_seconds, unsupported)

FIELDS = ["group", "method", "spec", "kind", "mode", "causal", "T", "D", "heads", "batch", "device", "dtype",
          "seconds", "repeats", "peak_mb", "gflop", "gflop_per_s", "sdpa_backend", "warmup_s", "cell_s", "note"]
# the groups' shares of the benchmark's time (a group's unused time passes on to the next)
GROUP_SHARES = {"accuracy": 0.1, "triton": 0.3, "baselines": 0.35, "others": 0.25}
MODES = ("forward", "forward_backward")
MAX_T_SLOW_PATHS = 16384  # issues 43 and 56: no reference path, no float64 tree path, no Fastmax PyTorch path above
FLOAT64_PATHS = {"tree": "tree attention's CUDA path (vectorized) computes in float64"}
STICKY = ("CUDA error", "illegal memory access", "device-side assert", "unspecified launch failure")
# Fastmax's Triton kernels as the benchmark names them: label -> method spec (scripts/bench/methods.py)
OURS = {
    "fastmax1_triton": "fastmax:p=1,implementation=triton",
    "fastmax2_triton": "fastmax:p=2,implementation=triton",
    "fastmax2_triton_parallel": "fastmax:p=2,implementation=triton,triton_kernel=parallel",
    "fastmax2_triton_chunk": "fastmax:p=2,implementation=triton,triton_kernel=chunk",
}
CROSSOVER = ("fastmax2_triton_parallel", "fastmax2_triton_chunk")  # measured also at --crossover_T
BATCH_SCAN = ("fastmax1_triton", "fastmax2_triton_chunk", "fastmax2_triton_parallel")  # measured at B = --batch
ACCURACY_FAMILIES = ("fastmax1_triton", "fastmax2_triton_chunk", "fastmax2_triton_parallel")  # G0
# G0's bounds on relative Frobenius errors: C1's for 16-bit inputs, for every dtype (float32 products run on TF32
# tensor cores under FLOAT32_MATMUL_PRECISION, with float16's 10 mantissa bits)
ACCURACY_BOUNDS = BF16_BOUNDS
FAMILIES = tuple((p, kernel) for p, kernels in kernel_report.KERNELS_OF_DEGREE.items() for kernel in kernels)
# torch.set_float32_matmul_precision of every process of the benchmark (compiling, measuring): float32 products on
# TF32 tensor cores, in the Triton kernels (their constexpr DOT, attention/fastmax/kernels/common.py) and in torch's
# matmuls alike, as kernel_report.py compiles float32 kernels offline
FLOAT32_MATMUL_PRECISION = kernel_report.FLOAT32_MATMUL_PRECISION
DRY_RUN = dict(T="32,64", D=16, D_based=16, heads=1, repeats=1, min_sample=0.0, call_s=5.0, budget_s=300.0,
               device="cpu", accuracy_T="64", crossover_T="32,64", batch=2, batch_T=64, profile_T=64)


# ----------------------------------------------------------------------------------------------
# the environment


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment():
    """This machine for the reports: GPU (name, compute capability, memory, count), NVIDIA driver
    (nvidia-smi) and CUDA (torch's runtime), Python, torch, triton, fla-core, numpy, pytest,
    matplotlib versions (None = not installed), whether Triton interprets (TRITON_INTERPRET) and
    SDPA's flash backend is enabled. A dict of strings, numbers and None."""
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
           "triton": _version("triton"), "fla_core": fla_baselines.version(), "numpy": _version("numpy"),
           "pytest": _version("pytest"), "matplotlib": _version("matplotlib"), "einops": _version("einops"),
           "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"), "cpu": provenance.machine()["cpu"],
           "cpu_count": os.cpu_count(), "gpu": None, "driver": None}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, gpu_count=torch.cuda.device_count(), capability=f"{props.major}.{props.minor}",
                   gpu_memory_gib=round(props.total_memory / 2 ** 30, 1),
                   shared_memory_per_block_optin=getattr(props, "shared_memory_per_block_optin", None),
                   flash_sdp_enabled=torch.backends.cuda.flash_sdp_enabled())
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            env["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None
        except (OSError, subprocess.TimeoutExpired):
            pass
    return env


def folder_name(env=None, date=None):
    """``<date>_<gpu>`` for this machine: the UTC date (YYYY-MM-DD) and the GPU's name in lower case
    with runs of other characters as "_" (``2026-12-01_nvidia_h100_80gb_hbm3``), "cpu" without one."""
    env = env or environment()
    day = date or env["date"][:10]
    gpu = re.sub(r"[^a-z0-9]+", "_", (env["gpu"] or "cpu").lower()).strip("_")
    return f"{day}_{gpu}"


# ----------------------------------------------------------------------------------------------
# compiling the Triton kernels in parallel


def kernel_configs(D_values=(64,), dtypes=("bfloat16",), families=FAMILIES, causal=(True, False)):
    """The kernel configurations to compile: ``kernel_report.configurations`` (dicts with D, Dv = D,
    p, kernel "chunk" | "parallel", causal, dtype name, chunk: the module's default for p) for head
    dims ``D_values`` and ``dtypes``, kept where (p, kernel) is in ``families`` and causal in
    ``causal``."""
    return [c for c in kernel_report.configurations(tuple(D_values), tuple(dtypes))
            if (c["p"], c["kernel"]) in families and c["causal"] in causal]


def compiled_kernels():
    """{id: (name, compiled kernel)} of every Fastmax kernel compiled or loaded in this process: the
    ``CompiledKernel`` objects that Triton 3.x keeps per device in the first entry of
    ``JITFunction.device_caches[device]``, named "chunk._dq_kernel" and the like. Empty under the
    interpreter (no compiled kernels)."""
    from attention.fastmax.kernels import chunk, parallel

    found = {}
    for module in (chunk, parallel):
        for name, fn in vars(module).items():
            for caches in getattr(fn, "device_caches", {}).values():
                for compiled in caches[0].values():
                    found[id(compiled)] = (f"{module.__name__.rsplit('.', 1)[-1]}.{name}", compiled)
    return found


def warm_config(config, device="cuda", precision="highest"):
    """One forward and one backward of the kernels package for ``config`` (``kernel_configs``) on
    ``kernel_report.small_inputs`` (one sequence of two chunks) moved to ``device``, under
    ``torch.set_float32_matmul_precision(precision)`` (it sets the kernels' constexpr DOT, part of
    what is compiled: "highest" as the tests and train.py run, FLOAT32_MATMUL_PRECISION as the
    benchmark does); on CUDA this compiles every kernel the configuration launches into Triton's
    cache. Returns the config with precision, seconds (wall, compilation included), error (None, or
    the exception's first line) and kernels: for each kernel the calls compiled or loaded in this
    process (none on a CPU), its name, num_warps, registers, spills (Triton's ``n_spills``: the
    function's local memory / 4 bytes) and shared_bytes (``metadata.shared``)."""
    from attention.fastmax import kernels

    start = time.time()
    error = None
    before = set(compiled_kernels())
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        x = {name: t.to(device) for name, t in kernel_report.small_inputs(config).items()}
        causal, coeffs, chunk = config["causal"], kernel_report.coefficients(config["p"]), config["chunk"]
        kernels.forward(x["q"], x["k"], x["v"], None, None, None, x["rho"], x["has_key"], causal, coeffs, chunk,
                        kernel=config["kernel"])
        kernels.backward(x["g"], x["delta"], x["q"], x["k"], x["v"], None, None, None, x["rho"], causal, coeffs,
                         chunk, kernel=config["kernel"])
        synchronize(torch.device(device).type)
    except Exception as exc:  # noqa: BLE001  (reported; the kernel then compiles, or fails, at its launch)
        error = first_line(exc)
    finally:
        torch.set_float32_matmul_precision(previous)
    found = [dict(name=name, num_warps=compiled.metadata.num_warps, registers=getattr(compiled, "n_regs", None),
                  spills=getattr(compiled, "n_spills", None), shared_bytes=compiled.metadata.shared)
             for key, (name, compiled) in compiled_kernels().items() if key not in before]  # None: never loaded
    return dict(config, precision=precision, seconds=round(time.time() - start, 1), error=error, kernels=found)


def compile_kernels(configs, jobs=None, precision="highest"):
    """Compile Fastmax's Triton kernels of every configuration in ``configs`` (``kernel_configs``)
    into Triton's on-disk cache: one ``warm_config`` per configuration on CUDA under ``precision``,
    ``jobs`` worker processes at a time (default: the CPU count), spawned without TRITON_INTERPRET
    (``kernel_report.clean_pool``, Triton's cache directory unchanged). Returns one row per
    configuration (``warm_config``), printed as they finish."""
    if not configs:
        return []
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(configs)))
    rows = []
    with kernel_report.clean_pool(jobs) as pool:
        for row in pool.map(functools.partial(warm_config, precision=precision), configs):
            rows.append(row)
            registers = max((k["registers"] for k in row["kernels"] if k["registers"] is not None), default=None)
            print(f"compiled fastmax Triton p={row['p']} {row['kernel']:8s} D={row['D']:3d} causal={row['causal']!s:5s} "
                  f"{row['dtype']:8s} {precision:7s} {row['seconds']:6.1f} s, {len(row['kernels'])} kernels, "
                  f"registers <= {registers}, {sum(bool(k['spills']) for k in row['kernels'])} spilling "
                  f"{row['error'] or ''}", flush=True)
    return rows


# ----------------------------------------------------------------------------------------------
# the benchmark: plan


def curves(settings):
    """The benchmark's curves by group, in the order they run: dicts with group, label, kind
    ("registry", "sdpa" or "fla"), spec (a ``parse_method`` text or an FLA label), D, causal, mode,
    batch and T (the list of sequence lengths). Within a group the curves of the aims come first
    (causal, D before D_based), so that a group stopped by its time box has measured what matters
    most. ``settings``: T, D, D_based, crossover_T, batch, batch_T."""
    D, D_based, Ts = settings["D"], settings["D_based"], list(settings["T"])
    crossover_T = sorted(set(Ts) | set(settings["crossover_T"]))
    configs = ["@" + os.path.relpath(os.path.join(CONFIG_DIR, f), ROOT)
               for f in sorted(os.listdir(CONFIG_DIR)) if f.endswith(".py")]
    groups = {  # entries (spec, D, causal, T list, batch)
        "triton": ([("fastmax1_triton", D, True, Ts, 1), ("fastmax2_triton", D, True, Ts, 1)]
                   + [(label, D, True, crossover_T, 1) for label in CROSSOVER]
                   + [("fastmax2_triton", D_based, True, Ts, 1)]
                   + [(label, D, True, [settings["batch_T"]], settings["batch"]) for label in BATCH_SCAN]
                   + [(label, D, False, Ts, 1) for label in ("fastmax1_triton", "fastmax2_triton")]),
        "baselines": ([(m, D, True, Ts, 1) for m in ("sdpa", "fla_chunk_linear_attn_fastmax1", "fla_parallel_based",
                                                     "@configs/attention/fastmax1.py",
                                                     "@configs/attention/fastmax2.py")]
                      + [(m, D_based, True, Ts, 1) for m in ("sdpa", "fla_fused_chunk_based")]
                      + [(m, D, True, Ts, 1) for m in ("fla_chunk_linear_attn", "@configs/attention/linear.py")]
                      + [("sdpa", D, False, Ts, 1)]),
    }
    done = {(m, D_, c) for m, D_, c, _, _ in groups["baselines"]}
    groups["others"] = [(m, D, c, Ts, 1) for c in (True, False) for m in ["sdpa", *configs, "softmax_reference"]
                        if (m, D, c) not in done]
    out = []
    for group, entries in groups.items():
        seen = set()
        for spec, D_, causal, Ts_, batch in entries:
            if (spec, D_, causal, batch) in seen:  # D_based = D (the dry run) repeats entries
                continue
            seen.add((spec, D_, causal, batch))
            if spec in fla_baselines.CALLS:
                label, kind = spec, "fla"
            elif spec in OURS:
                label, kind, spec = spec, "registry", OURS[spec]
            else:
                method = parse_method(spec)
                label, kind = method.label, method.kind
            for mode in MODES:
                out.append(dict(group=group, label=label, kind=kind, spec=spec, D=D_, causal=causal, mode=mode,
                                batch=batch, T=list(Ts_)))
    return out


def slow_path(method):
    """Why ``method`` (a ``Method``) stops at T = MAX_T_SLOW_PATHS, or None: a reference path (a
    registered reference, ``attention.Attention.reference_name``, or implementation="reference"),
    a path that computes in float64 on CUDA (``FLOAT64_PATHS``), or Fastmax's PyTorch path (issue
    56 measures it up to 16k beside the kernels)."""
    if method.kind != "registry":
        return None
    references = {attention.attention_class(n).reference_name for n in attention.registered()}
    implementation = method.full_params().get("implementation")
    if method.name in references or implementation == "reference":
        return "a reference path"
    if method.name == "fastmax" and implementation in ("auto", "pytorch"):
        return "Fastmax's PyTorch path"
    return FLOAT64_PATHS.get(method.name)


# ----------------------------------------------------------------------------------------------
# the benchmark: one group (in a child process)


def empty_row(curve, T, settings, note=""):
    """A bench.csv row of one cell of ``curve`` at ``T``, not (yet) measured, with ``note``."""
    return dict(group=curve["group"], method=curve["label"], spec=curve["spec"], kind=curve["kind"], mode=curve["mode"],
                causal=curve["causal"], T=T, D=curve["D"], heads=settings["heads"], batch=curve["batch"],
                device=settings["device"], dtype=settings["dtype"], seconds=None, repeats=0, peak_mb=None, gflop=None,
                gflop_per_s=None, sdpa_backend="", warmup_s=None, cell_s=None, note=note)


class StickyCudaError(RuntimeError):
    """A CUDA error that leaves the process's context unusable: the group ends."""


def _heads(curve, settings):
    """The heads of one input sequence for ``curve``: H x B (module docstring: B sequences as B x H
    heads of one)."""
    return settings["heads"] * curve["batch"]


def _call(curve, T, heads, device, dtype):
    """(call(q, k, v), sdpa_backend) of ``curve`` at ``T`` on (1, heads, T, D) inputs."""
    if curve["kind"] == "fla":
        return fla_baselines.fla_call(curve["label"]), ""
    method = parse_method(curve["spec"])
    backends, backend = None, ""
    if method.kind == "sdpa":
        from torch.nn.attention import SDPBackend
        backends, backend = [SDPBackend.FLASH_ATTENTION], "flash (forced)"
    elif method.kind == "registry" and method.name == "softmax":
        backend = "torch's choice"
    call, _ = make_call(method, curve["causal"], T, curve["D"], heads, device, curve["mode"], dtype, backends)
    return call, backend


def call_seconds(call, T, D, heads, device, mode, dtype):
    """Wall seconds of one ``run_once`` of ``call`` on fresh (1, heads, T, D) inputs (``common.wall_timer``,
    synchronized before and after)."""
    q, k, v = make_inputs(T, D, heads, device, mode == "forward_backward", dtype=dtype)
    grad = torch.randn_like(q) if mode == "forward_backward" else None
    return wall_timer(lambda: synchronize(device))(lambda: run_once(call, q, k, v, mode, grad))


def warm_up(curve, T, settings, dtype):
    """One untimed call of ``curve`` at ``T`` (its first T), so that what a first call costs once
    (a kernel's compilation, CUDA's lazy loading of a kernel module, autotuning) is never inside a
    cell's time. Returns its wall seconds, or None when it failed (the cell then says why)."""
    heads = _heads(curve, settings)
    try:
        call, _ = _call(curve, T, heads, settings["device"], dtype)
        return call_seconds(call, T, curve["D"], heads, settings["device"], curve["mode"], dtype)
    except Exception:  # noqa: BLE001  (the cell's own call reports the failure)
        return None


def _measure(curve, T, heads, device, dtype, settings):
    """(seconds, repeats, peak_mb, sdpa_backend) of one cell in ``dtype`` on (1, heads, T, D) inputs."""
    D, mode = curve["D"], curve["mode"]
    call, backend = _call(curve, T, heads, device, dtype)
    if device == "cuda":
        torch.cuda.empty_cache()
    peak = None
    if settings["memory"]:
        start = time.perf_counter()
        peak = peak_added_mb(call, T, D, heads, device, mode, dtype)
        first = time.perf_counter() - start  # the cell's first full-size call (and a small one)
        if first > settings["call_s"]:  # the cap per cell: at most one more call of this size
            return call_seconds(call, T, D, heads, device, mode, dtype), 1, peak, backend
    seconds, repeats, _ = measure_call(call, mode, T, D, heads, device, settings["repeats"], settings["call_s"], dtype,
                                       settings["min_sample"], settings.get("sample_s"))
    return seconds, repeats, peak, backend


def run_curve(curve, settings, write):
    """Measure one curve over its T (module docstring: skips, fallback to float32, stops), calling
    ``write(row)`` for every T as soon as its row is known.

    Raises:
        StickyCudaError: a CUDA error that breaks the context (after writing its row).
    """
    device, heads = settings["device"], _heads(curve, settings)
    dtype = getattr(torch, settings["dtype"])
    if curve["kind"] == "fla":
        reason = fla_baselines.available(device) or fla_baselines.unsupported(
            curve["label"], curve["D"], curve["causal"], curve["mode"])
        method, slow = None, None
    else:
        method = parse_method(curve["spec"])
        reason, slow = unsupported(method, curve["mode"], curve["causal"]), slow_path(method)
    points, stop, warmup = [], None, None
    if curve["kind"] == "fla" and not reason:
        stop = _autotune_fla(curve, settings, dtype)
    if not reason and not stop and time.time() < settings["deadline"]:
        warmup = warm_up(curve, curve["T"][0], settings, dtype)
    for T in curve["T"]:
        row = empty_row(curve, T, settings)
        row["warmup_s"] = warmup
        flops = flop_count(method, T, curve["D"], heads, curve["causal"]) if method is not None else None
        if flops is not None:
            row["gflop"] = flops * (3 if curve["mode"] == "forward_backward" else 1) / 1e9
        predicted = predicted_seconds(points, T)
        if reason:
            row["note"] = reason
        elif stop:
            row["note"] = stop
        elif slow and T > MAX_T_SLOW_PATHS:
            row["note"] = f"skipped: {slow}, not run above T = {MAX_T_SLOW_PATHS}"
        elif time.time() > settings["deadline"]:
            row["note"] = (f"skipped: the group's share of the run's time (--budget_s {settings['budget_s']:g}, "
                           f"GROUP_SHARES) is used up")
        elif predicted is not None and predicted > settings["call_s"]:
            row["note"] = f"skipped: predicted {predicted:.2f} s per call > --call_s {settings['call_s']:g}"
        elif method is not None and estimated_bytes(method, T, curve["D"], heads, curve["causal"],
                                                    curve["mode"]) > settings["max_bytes"]:
            row["note"] = f"skipped: estimated memory above {settings['max_bytes'] / 2 ** 30:.0f} GiB"
        else:
            start = time.perf_counter()
            _fill(row, curve, T, dtype, settings)
            row["cell_s"] = time.perf_counter() - start  # memory, warm-up and samples: check of the timer
            if row["seconds"] is None:
                stop = f"skipped: failed at T = {T}"
            else:
                points.append((T, row["seconds"]))
                if row["gflop"] is not None:
                    row["gflop_per_s"] = row["gflop"] / row["seconds"]
        write(row)
        if any(marker in row["note"] for marker in STICKY):
            raise StickyCudaError(row["note"])


def _autotune_fla(curve, settings, dtype):
    """One forward + backward of an FLA call at the largest T <= 16384 of the run, so that FLA's
    autotuned kernels, whose keys leave out T, pick their configurations on a long sequence rather
    than on the first cell's small warm-up. None, or a note that stops the curve."""
    T = max([t for t in settings["T"] if t <= MAX_T_SLOW_PATHS] or settings["T"][:1])
    try:
        q, k, v = make_inputs(T, curve["D"], _heads(curve, settings), settings["device"], True, dtype=dtype)
        run_once(fla_baselines.fla_call(curve["label"]), q, k, v, "forward_backward", torch.randn_like(q))
        return None
    except Exception as exc:  # noqa: BLE001  (the curve's rows say why)
        return f"failed: FLA autotuning at T = {T}: {first_line(exc)}"


def _fill(row, curve, T, dtype, settings):
    """Measure one cell into ``row``: in ``dtype``, else (a failure that is neither out of memory nor
    a CUDA error) in float32, noting why."""
    heads = _heads(curve, settings)
    try:
        row["seconds"], row["repeats"], row["peak_mb"], row["sdpa_backend"] = _measure(
            curve, T, heads, settings["device"], dtype, settings)
        return
    except Exception as exc:  # noqa: BLE001  (a method's failure is a row)
        error = first_line(exc)
    if settings["device"] == "cuda":
        torch.cuda.empty_cache()
    if dtype == torch.float32 or "out of memory" in error.lower() or any(m in error for m in STICKY):
        row["note"] = f"failed: {error}"
        return
    try:
        row["seconds"], row["repeats"], row["peak_mb"], row["sdpa_backend"] = _measure(
            curve, T, heads, settings["device"], torch.float32, settings)
        row["dtype"], row["note"] = "float32", f"float32: {settings['dtype']} failed ({error})"
    except Exception as exc:  # noqa: BLE001
        row["note"] = f"failed: {error}; in float32: {first_line(exc)}"


def run_group(group, settings):
    """The group ``group``: "accuracy" (``run_accuracy``), else every curve of it (``curves``), each
    row appended to settings["csv"] at once; after a sticky CUDA error the group's remaining cells
    are rows that say so. Runs under FLOAT32_MATMUL_PRECISION."""
    torch.manual_seed(0)
    torch.set_float32_matmul_precision(FLOAT32_MATMUL_PRECISION)
    if group == "accuracy":
        run_accuracy(settings)
        return
    planned = [c for c in curves(settings) if c["group"] == group]
    broken = None
    with open(settings["csv"], "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)

        def write(row):
            writer.writerow(row)
            f.flush()
            print(f"{row['method']:32s} {row['mode']:16s} causal={row['causal']!s:5s} D={row['D']:3d} T={row['T']:6d} "
                  f"B={row['batch']} {row['dtype']:8s} t={_short(row['seconds'])} peak_mb={_short(row['peak_mb'])} "
                  f"{row['note']}", flush=True)

        if group == "triton":
            profile_triton(settings)
        for curve in planned:
            if broken:
                for T in curve["T"]:
                    write(empty_row(curve, T, settings, f"skipped: an earlier CUDA error in this group ({broken})"))
                continue
            try:
                run_curve(curve, settings, write)
            except StickyCudaError as exc:
                broken = str(exc)[:120]


def _short(x):
    return None if x is None or x == "" else round(float(x), 5)


PROFILE_FILE = "bench_profile.txt"
PROFILE_CALLS = 3
PROFILED = (("fastmax1_triton", "D"), ("fastmax2_triton_chunk", "D"), ("fastmax2_triton_parallel", "D"),
            ("fastmax2_triton", "D_based"))  # (label, the setting that gives its head dim)


def profile_triton(settings):
    """Where Fastmax's Triton kernels spend their time: torch.profiler over PROFILE_CALLS causal
    forward + backward calls (after one untimed call; one call on a CPU, where the kernels are
    interpreted) at T = settings["profile_T"] for each of PROFILED (p = 1, p = 2 chunk and parallel
    at D, p = 2 at D_based); the table of the most expensive operations (GPU kernels on a GPU) goes
    to PROFILE_FILE beside bench.csv, each section as soon as it is measured. A section that would
    start after the group's deadline is skipped, saying so; a failure is written instead of a
    table. Measures nothing for bench.csv."""
    from torch.profiler import ProfilerActivity, profile
    device, T = settings["device"], settings["profile_T"]
    calls = PROFILE_CALLS if device == "cuda" else 1
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sort = "cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    dtype = getattr(torch, settings["dtype"])
    path = os.path.join(os.path.dirname(settings["csv"]), PROFILE_FILE)

    def write(*lines, mode="a"):
        with open(path, mode) as f:
            f.write("\n".join(lines) + "\n")

    write(f"torch.profiler of Fastmax's Triton kernels: causal forward + backward, T = {T}, "
          f"{settings['heads']} heads, {settings['dtype']} inputs, {calls} calls after a warm-up", mode="w")
    for label, key in PROFILED:
        D = settings[key]
        if time.time() > settings["deadline"]:
            write(f"\n== {label} D={D}", "skipped: the group's time is used up")
            continue
        curve = dict(kind="registry", label=label, spec=OURS[label], D=D, causal=True, mode="forward_backward")
        try:
            call, _ = _call(curve, T, settings["heads"], device, dtype)
            q, k, v = make_inputs(T, D, settings["heads"], device, True, dtype=dtype)
            grad = torch.randn_like(q)
            run_once(call, q, k, v, "forward_backward", grad)
            synchronize(device)
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    run_once(call, q, k, v, "forward_backward", grad)
                synchronize(device)
            write(f"\n== {label} D={D}", prof.key_averages().table(sort_by=sort, row_limit=12, max_name_column_width=60))
        except Exception as exc:  # noqa: BLE001  (the file says why)
            write(f"\n== {label} D={D}", f"failed: {first_line(exc)}")


# ----------------------------------------------------------------------------------------------
# G0: the kernels' accuracy on the GPU (in a child process)


def accuracy_case(label, T, settings):
    """One G0 case: the Triton kernel family ``label`` (``OURS``) on (1, heads, T, D) inputs in
    settings["dtype"] (seeded standard normal), causal, with a seeded output gradient, against the
    module's PyTorch path in float64 on the same (rounded) inputs. Returns a dict: method, p,
    kernel, T, D, heads, dtype, errors (relative Frobenius errors of output, dq, dk, dv), bounds
    (``ACCURACY_BOUNDS``), passed, seconds (wall, both calls)."""
    device, D, heads = settings["device"], settings["D"], settings["heads"]
    dtype = getattr(torch, settings["dtype"])
    params = parse_method(OURS[label]).params
    context = {"layer_idx": 0, "block_size": T, "n_head": heads, "head_dim": D}
    ours = attention.build("fastmax", context, **params).to(device)
    reference = attention.build("fastmax", context, p=params["p"], implementation="pytorch").to(device).double()
    start = time.time()
    q, k, v = (x.to(device, dtype) for x in random_qkv(1, heads, T, D, seed=0))
    grad = torch.randn(1, heads, T, D, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    out, grads = forward_and_gradients(ours, q, k, v, True, None, grad)
    out_ref, grads_ref = forward_and_gradients(reference, q.double(), k.double(), v.double(), True, None, grad.double())
    errors = {"output": relative_error(out, out_ref)}
    errors.update({name: relative_error(g, r) for name, g, r in zip(("dq", "dk", "dv"), grads, grads_ref)})
    passed = (errors["output"] <= ACCURACY_BOUNDS["output"]
              and max(errors["dq"], errors["dk"], errors["dv"]) <= ACCURACY_BOUNDS["gradients"])
    return dict(method=label, p=params["p"], kernel=params.get("triton_kernel", "auto"), T=T, D=D, heads=heads,
                dtype=settings["dtype"], errors=errors, bounds=ACCURACY_BOUNDS, passed=passed,
                seconds=round(time.time() - start, 2))


def run_accuracy(settings):
    """G0 (``accuracy_case``) for every family of ACCURACY_FAMILIES at every settings["accuracy_T"],
    each case appended as a JSON line to settings["accuracy_path"] as soon as it is known (a
    failure: a note with its error, passed False; after the group's deadline or a sticky CUDA
    error, a note that says it was not run, passed None)."""
    broken = None
    with open(settings["accuracy_path"], "a") as f:
        for T in settings["accuracy_T"]:
            for label in ACCURACY_FAMILIES:
                if broken or time.time() > settings["deadline"]:
                    why = f"an earlier CUDA error ({broken})" if broken else "the group's time is used up"
                    case = dict(method=label, T=T, passed=None, note=f"not run: {why}")
                else:
                    try:
                        case = accuracy_case(label, T, settings)
                    except Exception as exc:  # noqa: BLE001  (a failed case is a result)
                        case = dict(method=label, T=T, passed=False, note=f"failed: {first_line(exc)}")
                        if any(marker in case["note"] for marker in STICKY):
                            broken = case["note"][:120]
                f.write(json.dumps(case) + "\n")
                f.flush()
                errors = " ".join(f"{k}={v:.2e}" for k, v in case.get("errors", {}).items())
                print(f"G0 {label:26s} T={T:6d} {errors} passed={case['passed']} {case.get('note', '')}", flush=True)


def accuracy_summary(cases, settings):
    """bench.json's ``accuracy``: the T, the bounds, every case, and per family ``passed``: True
    when all its planned cases ran and passed, False when one failed, None otherwise (not run or
    incomplete)."""
    passed = {}
    for label in ACCURACY_FAMILIES:
        outcomes = [c["passed"] for c in cases if c["method"] == label]
        if False in outcomes:
            passed[label] = False
        elif len(outcomes) == len(settings["accuracy_T"]) and all(outcomes):
            passed[label] = True
        else:
            passed[label] = None
    return dict(T=list(settings["accuracy_T"]), causal=True, bounds=ACCURACY_BOUNDS,
                reference="the module's PyTorch path (attention/fastmax/chunked.py) in float64 on the same inputs",
                passed=passed, cases=cases)


# ----------------------------------------------------------------------------------------------
# the benchmark: the parent


def read_rows(path):
    """The rows of a bench.csv with numbers, booleans and empty fields (None) parsed back."""
    def parse(key, value):
        if value == "":
            return None if key not in ("note", "sdpa_backend", "spec", "kind") else ""
        if key == "causal":
            return value == "True"
        if key in ("T", "D", "heads", "batch", "repeats"):
            return int(value)
        if key in ("seconds", "peak_mb", "gflop", "gflop_per_s", "warmup_s", "cell_s"):
            return float(value)
        return value

    with open(path, newline="") as f:
        return [{k: parse(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def seconds_of(rows, method, D, causal, mode, T, batch=1):
    """The measured seconds of one cell, or None (rows of folders older than the batch field count
    as batch 1)."""
    for r in rows:
        if ((r["method"], r["D"], r["causal"], r["mode"], r["T"], r.get("batch", 1)) == (method, D, causal, mode, T, batch)
                and r["seconds"]):
            return r["seconds"]
    return None


AIM_AUTO = "implementation='auto' picks the Triton kernels on CUDA only after the GPU tests have passed on a GPU"


def aims(rows, settings):
    """Issue 56's aims on an H100 or H200 from the rows (causal, B = 1, H heads, D = settings["D"],
    bfloat16): each a dict with the aim, ours and theirs (labels; for the batch scan both are ours,
    at B = 1 and at B = batch), D, T, mode, ratio (theirs' time / ours', so above 1 = ours faster;
    the batch scan: time(B) / time(1)), need (the bound ratio must reach), strict (ratio must
    exceed it) and met (True / False / None when a time is missing); the last aim is not measured
    by the benchmark (docs/gpu.md names the GPU test run)."""
    D, D_based = settings["D"], settings["D_based"]
    out = []

    def compare(aim, ours, theirs, D_, T, mode, need, strict=False, batches=(1, 1)):
        a = seconds_of(rows, ours, D_, True, mode, T, batches[0])
        b = seconds_of(rows, theirs, D_, True, mode, T, batches[1])
        ratio = b / a if a and b else None
        met = None if ratio is None else (ratio > need if strict else ratio >= need)
        out.append(dict(aim=aim, ours=ours, theirs=theirs, D=D_, T=T, mode=mode, ratio=ratio, need=need,
                        strict=strict, met=met))

    for mode in MODES:
        for T in (16384, 65536):
            compare("p = 1 over FLA chunk_linear_attn (the same function): speed-up at least 1 / 1.5",
                    "fastmax1_triton", "fla_chunk_linear_attn_fastmax1", D, T, mode, 1 / 1.5)
    for T, need in ((16384, 2), (65536, 8)):
        compare(f"p = 1 over FlashAttention, forward: at least {need}", "fastmax1_triton", "sdpa", D, T, "forward", need)
    for T, need in ((4096, 0.7), (16384, 1.5), (65536, 5)):
        compare(f"p = 2 (auto) over FlashAttention, forward: at least {need}", "fastmax2_triton", "sdpa", D, T,
                "forward", need)
    for T, need in ((16384, 1.2), (65536, 4)):
        compare(f"p = 2 (auto) over FlashAttention, forward + backward: at least {need}", "fastmax2_triton", "sdpa", D,
                T, "forward_backward", need)
    for mode in MODES:
        for T in (1024, 4096):
            compare("p = 2 (auto) over parallel_based at T <= 4k (the same algorithm): at least 1 / 1.3",
                    "fastmax2_triton", "fla_parallel_based", D, T, mode, 1 / 1.3)
        for T in (16384, 65536):
            compare("p = 2 (auto) over parallel_based at 16k and 64k: above 1", "fastmax2_triton", "fla_parallel_based",
                    D, T, mode, 1.0, strict=True)
    for mode in MODES:
        compare(f"p = 2 at D = {D_based} over FLA fused_chunk_based, T = 16k: at least 1", "fastmax2_triton",
                "fla_fused_chunk_based", D_based, 16384, mode, 1.0)
    for label in BATCH_SCAN:
        for mode in MODES:
            compare(f"batch scan: time(B = {settings['batch']}) / time(B = 1) at least 4 (the GPU is busy at B = 1)",
                    label, label, D, settings["batch_T"], mode, 4.0, batches=(1, settings["batch"]))
    out.append(dict(aim=AIM_AUTO, ours=None, theirs=None, D=None, T=None, mode=None, ratio=None, need=None,
                    strict=False, met=None))
    return out


def crossover(rows, settings):
    """The p = 2 crossover: at each of settings["crossover_T"] and mode, the causal times at D of
    the forced parallel and chunk kernels (seconds, None when not measured), chunk / parallel and
    the faster kernel; with the dispatch's PARALLEL_MAX_T, which it measures."""
    from attention.fastmax import kernels

    cells = []
    for mode in MODES:
        for T in settings["crossover_T"]:
            parallel, chunk = (seconds_of(rows, label, settings["D"], True, mode, T) for label in CROSSOVER)
            ratio = chunk / parallel if parallel and chunk else None
            cells.append(dict(T=T, mode=mode, parallel_s=parallel, chunk_s=chunk, chunk_over_parallel=ratio,
                              faster=None if ratio is None else ("parallel" if ratio > 1 else "chunk")))
    return dict(parallel_max_t=kernels.PARALLEL_MAX_T, D=settings["D"], cells=cells)


def _ms(seconds):
    return "-" if seconds is None else f"{1000 * seconds:.3g}"


def markdown(rows, summary):
    """bench.md: per (D, causal, mode) a table of milliseconds per call (and peak MB) per method and
    T at B = 1; then G0, the crossover, the aims, the compilation, the same-function comparisons
    and the statements."""
    env, settings = summary["environment"], summary["settings"]
    lines = [f"# GPU benchmark: {env.get('gpu') or 'CPU (dry run)'}", "",
             f"{env['date']}; torch {env['torch']}, triton {env['triton']}, fla-core {env['fla_core']}; "
             f"{settings['dtype']}, one sequence of {settings['heads']} heads; milliseconds per call "
             "(peak MB one call adds); SDPA forced to FlashAttention.", ""]
    single = [r for r in rows if r.get("batch", 1) == 1]
    Ts = sorted({r["T"] for r in single})
    for D, causal, mode in sorted({(r["D"], r["causal"], r["mode"]) for r in single},
                                  key=lambda k: (-k[0], not k[1], k[2])):
        lines += [f"## D = {D}, {'causal' if causal else 'non-causal'}, {mode}", "",
                  "| method | " + " | ".join(str(T) for T in Ts) + " | note |", "|---" * (len(Ts) + 2) + "|"]
        for method in dict.fromkeys(r["method"] for r in single if (r["D"], r["causal"], r["mode"]) == (D, causal, mode)):
            cells, notes = [], []
            for T in Ts:
                row = next((r for r in single if (r["method"], r["D"], r["causal"], r["mode"], r["T"])
                            == (method, D, causal, mode, T)), None)
                if row is None or row["seconds"] is None:
                    cells.append("-")
                else:
                    peak = "" if row["peak_mb"] is None else f" ({row['peak_mb']:.0f})"
                    cells.append(f"{_ms(row['seconds'])}{peak}")
                if row is not None and row["note"] and row["note"] not in notes:
                    notes.append(row["note"])
            lines.append(f"| {method} | " + " | ".join(cells) + " | " + "; ".join(notes) + " |")
        lines.append("")
    accuracy = summary.get("accuracy") or {}
    lines += ["## G0: accuracy against the float64 PyTorch path (causal)", "",
              f"Relative Frobenius errors; bounds {accuracy.get('bounds')}. Passed per family: "
              f"{accuracy.get('passed')}.", "",
              "| method | T | output | dq | dk | dv | passed | note |", "|---|---|---|---|---|---|---|---|"]
    for case in accuracy.get("cases", []):
        errors = case.get("errors") or {}
        cells = [f"{errors[k]:.2e}" if k in errors else "-" for k in ("output", "dq", "dk", "dv")]
        lines.append(f"| {case['method']} | {case['T']} | " + " | ".join(cells)
                     + f" | {case['passed']} | {case.get('note', '')} |")
    cross = summary["crossover"]
    lines += ["", f"## p = 2: the parallel kernel against the chunk kernels (causal, D = {cross['D']})", "",
              f"Milliseconds per call; the dispatch uses the parallel kernel up to PARALLEL_MAX_T = "
              f"{cross['parallel_max_t']}.", "",
              "| T | mode | parallel | chunk | chunk / parallel | faster |", "|---|---|---|---|---|---|"]
    for c in cross["cells"]:
        ratio = "-" if c["chunk_over_parallel"] is None else f"{c['chunk_over_parallel']:.2f}"
        lines.append(f"| {c['T']} | {c['mode']} | {_ms(c['parallel_s'])} | {_ms(c['chunk_s'])} | {ratio} | "
                     f"{c['faster'] or '-'} |")
    lines += ["", "## Aims of issue 56", "", "Ratio: their time / ours (above 1: ours faster); the batch scan: "
              "time(B) / time(1).", "",
              "| aim | ours | theirs | D | T | mode | ratio | met |", "|---|---|---|---|---|---|---|---|"]
    for a in summary["aims"]:
        ratio = "-" if a["ratio"] is None else f"{a['ratio']:.2f}"
        met = "not measured by the benchmark" if a["ours"] is None else (
            "-" if a["met"] is None else ("yes" if a["met"] else "no"))
        lines.append(f"| {a['aim']} | {a['ours'] or ''} | {a['theirs'] or ''} | {a['D'] or ''} | {a['T'] or ''} | "
                     f"{a['mode'] or ''} | {ratio} | {met} |")
    compiled = summary.get("triton_compile") or {}
    lines += ["", "## Compilation of the Triton kernels", ""]
    if "skipped" in compiled:
        lines.append(compiled["skipped"])
    else:
        rows_ = compiled.get("configs", [])
        failed = [f"p={c['p']} {c['kernel']} D={c['D']} causal={c['causal']} {c['dtype']}: {c['error']}"
                  for c in rows_ if c["error"]]
        slowest = max((c["seconds"] for c in rows_), default=0)
        lines.append(f"{len(rows_)} configurations in {compiled.get('seconds')} s (parallel processes; the slowest "
                     f"{slowest} s); failures: {'; '.join(failed) or 'none'}.")
        kernels = {(k["name"], c["D"], c["p"], c["causal"], c["dtype"], k["registers"], k["spills"], k["shared_bytes"])
                   for c in rows_ for k in c["kernels"]}
        if kernels:
            lines += ["", "| kernel | D | p | causal | dtype | registers | spills | shared B |",
                      "|---|---|---|---|---|---|---|---|"]
            lines += ["| " + " | ".join(str(x) for x in k) + " |" for k in sorted(kernels, key=str)]
    lines += ["", "## The same function through FLA and through ours (float32, causal)", "",
              "| FLA | ours | D | max abs diff | relative error |", "|---|---|---|---|---|"]
    for c in summary["comparisons"]:
        if "skipped" in c or "failed" in c:
            lines.append(f"| {c.get('skipped') or c.get('failed')} | | | | |")
        else:
            lines.append(f"| {c['fla']} | {c['ours']} | {c['D']} | {c['max_abs_diff']:.2e} | {c['relative_error']:.2e} |")
    lines += ["", "Based and Fastmax: " + fla_baselines.BASED_VS_FASTMAX, "",
              "Linear attention, Fastmax p = 1 and FLA: " + fla_baselines.LINEAR_VS_FLA, ""]
    return "\n".join(lines)


def plot(rows, path, D, D_based):
    """bench.png: log-log time per call against T, one panel per (D, causal, mode) measured: D
    causal and not, D_based causal, rows at B = 1; SDPA dashed black. Returns the path, or None
    without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in rows if r.get("batch", 1) == 1]
    panels = [(D, True, m) for m in MODES] + [(D, False, m) for m in MODES] + [(D_based, True, m) for m in MODES]
    panels = [p for p in dict.fromkeys(panels) if any((r["D"], r["causal"], r["mode"]) == p and r["seconds"]
                                                      for r in rows)]
    if not panels:
        return None
    labels = list(dict.fromkeys(r["method"] for r in rows if r["seconds"]))
    styles = plot_style.figure_styles([m for m in labels if m != "sdpa"])
    cols = 2
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols, figsize=(11, 3.6 * math.ceil(len(panels) / cols)),
                             squeeze=False)
    for ax, (d, causal, mode) in zip(axes.flat, panels):
        for label in labels:
            pts = sorted((r["T"], r["seconds"]) for r in rows if r["method"] == label and r["seconds"]
                         and (r["D"], r["causal"], r["mode"]) == (d, causal, mode))
            if pts:
                style = {"color": "black", "marker": "s", "linestyle": "--"} if label == "sdpa" else styles[label]
                ax.plot(*zip(*pts), ms=4, lw=1.2, label=label, **style)
        loglog_axes(ax, f"D={d} {'causal' if causal else 'non-causal'} {mode}", "time per call (s)")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    plot_style.legend_outside(fig, fontsize=7)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def write_outputs(out, rows, summary):
    """bench.json and bench.md from the rows so far (rewritten after every group)."""
    settings = summary["settings"]
    summary = dict(summary, crossover=crossover(rows, settings), aims=aims(rows, settings))
    write_json(os.path.join(out, "bench.json"), dict(summary, rows=rows))
    with open(os.path.join(out, "bench.md"), "w") as f:
        f.write(markdown(rows, summary))
    return summary


def bench(args):
    """The benchmark (module docstring) into ``args.out``; returns the summary dict."""
    start = time.time()
    commit = os.environ.get("GPU_CHECK_COMMIT") or provenance.git_commit()
    env = environment()
    device = args.device
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "bench.csv")
    with open(csv_path, "w", newline="") as f:
        csv.DictWriter(f, fieldnames=FIELDS).writeheader()
    scratch = tempfile.mkdtemp(prefix="gpu_bench_")  # G0's lines (the folder keeps its eight files)
    max_bytes = (0.8 * torch.cuda.get_device_properties(0).total_memory if device == "cuda"
                 else 0.25 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    settings = dict(T=parse_list(args.T, int), D=args.D, D_based=args.D_based, heads=args.heads, device=device,
                    dtype=args.dtype, repeats=args.repeats, min_sample=args.min_sample, call_s=args.call_s,
                    sample_s=args.sample_s, budget_s=args.budget_s, deadline=start + args.budget_s - args.reserve_s,
                    memory=args.memory, max_bytes=max_bytes, accuracy_T=parse_list(args.accuracy_T, int),
                    crossover_T=parse_list(args.crossover_T, int), batch=args.batch, batch_T=args.batch_T,
                    profile_T=args.profile_T, csv=csv_path, accuracy_path=os.path.join(scratch, "accuracy.jsonl"),
                    dry_run=args.dry_run)
    shown = {k: v for k, v in settings.items() if k not in ("csv", "deadline", "accuracy_path")}
    summary = {"environment": env, "settings": shown, "commit": commit,
               "methods": [dict(label=c["label"], kind=c["kind"], spec=c["spec"]) for c in
                           {c["label"]: c for c in curves(settings)}.values()],
               "sdpa": "torch.nn.functional.scaled_dot_product_attention under sdpa_kernel([SDPBackend.FLASH_ATTENTION]): "
                       "a call FlashAttention cannot run fails instead of falling back",
               "float32_matmul_precision": FLOAT32_MATMUL_PRECISION,
               "batch": f"B = {args.batch} is run as {args.batch} x {args.heads} heads of one sequence (Fastmax flattens "
                        "(B, H) to B H sequences before any kernel)",
               "based_vs_fastmax": fla_baselines.BASED_VS_FASTMAX, "linear_vs_fla": fla_baselines.LINEAR_VS_FLA,
               "fla_calls": {k: {"function": f"fla.ops.{v[0]}", "computes": v[2], "same_function_as": v[3]}
                             for k, v in fla_baselines.CALLS.items()},
               "comparisons": [], "groups": {}}
    print(json.dumps(env), flush=True)
    if device != "cuda":
        summary["triton_compile"] = {"skipped": "not on a CPU: the interpreter runs the kernels from source"}
    elif args.compile:
        t0 = time.time()
        configs = kernel_configs(sorted({args.D, args.D_based}), [args.dtype])
        summary["triton_compile"] = {"configs": compile_kernels(configs, args.jobs, FLOAT32_MATMUL_PRECISION),
                                     "seconds": round(time.time() - t0, 1)}
    else:
        summary["triton_compile"] = {"skipped": "--compile 0"}
    summary["accuracy"] = accuracy_summary([], settings)
    for group in GROUP_SHARES:
        left = settings["deadline"] - time.time()
        if left <= 0:
            summary["groups"][group] = {"status": "not started: time budget used up"}
            _rows_not_measured(csv_path, group, settings, "skipped: the run's time (--budget_s) is used up")
            continue
        shares_left = list(GROUP_SHARES)[list(GROUP_SHARES).index(group):]
        share = GROUP_SHARES[group] / sum(GROUP_SHARES[g] for g in shares_left)
        spec = dict(settings, group=group, deadline=time.time() + share * left)
        t0 = time.time()
        try:
            proc = subprocess.run([sys.executable, "-m", "scripts.bench.gpu", "_group", json.dumps(spec)], cwd=ROOT,
                                  timeout=spec["deadline"] - time.time() + 30)
            status = "ok" if proc.returncode == 0 else f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired:
            status = "killed: past the time budget"
        summary["groups"][group] = {"status": status, "seconds": round(time.time() - t0, 1)}
        if status != "ok":
            _rows_not_measured(csv_path, group, settings, f"not measured: the group's process {status}")
        if group == "accuracy":
            summary["accuracy"] = accuracy_summary(_read_jsonl(settings["accuracy_path"]), settings)
        summary = write_outputs(args.out, read_rows(csv_path), summary)
    shutil.rmtree(scratch, ignore_errors=True)
    if time.time() < start + args.budget_s - 10:
        try:
            summary["comparisons"] = fla_baselines.same_function_checks(device)
        except Exception as exc:  # noqa: BLE001  (reported, the rows stand)
            summary["comparisons"] = [{"failed": first_line(exc)}]
    rows = read_rows(csv_path)
    summary = write_outputs(args.out, rows, summary)
    png = plot(rows, os.path.join(args.out, "bench.png"), args.D, args.D_based)
    summary["plot"] = png or "not drawn: matplotlib not installed (python -m scripts.bench.gpu plot FOLDER)"
    summary["seconds"] = round(time.time() - start, 1)
    summary = write_outputs(args.out, rows, summary)
    provenance.record(os.path.join(args.out, "bench"), commit=commit,
                      extra={"environment": env, "seconds": summary["seconds"]})
    print(f"bench: {sum(r['seconds'] is not None for r in rows)} of {len(rows)} cells measured in "
          f"{summary['seconds']:.0f} s; G0 passed per family: {summary['accuracy']['passed']}; {args.out}", flush=True)
    return summary


def _read_jsonl(path):
    """The JSON lines of ``path`` ([] when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _rows_not_measured(csv_path, group, settings, note):
    """Append a row with ``note`` for every planned cell of ``group`` that bench.csv lacks (a group
    killed or never started), so that every cell of the plan has its row."""
    have = {(r["method"], r["mode"], r["causal"], r["D"], r["batch"], r["T"]) for r in read_rows(csv_path)}
    with open(csv_path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        for curve in curves(settings):
            if curve["group"] != group:
                continue
            for T in curve["T"]:
                if (curve["label"], curve["mode"], curve["causal"], curve["D"], curve["batch"], T) not in have:
                    writer.writerow(empty_row(curve, T, settings, note))


# ----------------------------------------------------------------------------------------------
# the tests' manifest entry, the merge of device folders


def record_tests(out):
    """The manifest entry "tests" of ``out`` (after ``gpu_check.sh tests``): the environment and the
    counts of ``tests_progress.jsonl`` (one JSON line per test phase, written as the tests ran:
    tests/gpu/conftest.py), so a run stopped at its time box is counted too: tests (calls run),
    passed, failed, errors (setup or teardown failures), skipped, and the ids of the failed ones.
    Returns the manifest's path."""
    counts = test_counts(os.path.join(out, "tests_progress.jsonl"))
    commit = os.environ.get("GPU_CHECK_COMMIT") or provenance.git_commit()
    return provenance.record(os.path.join(out, "tests"), commit=commit, command="bash scripts/bench/gpu_check.sh tests",
                             extra={"environment": environment(), "pytest": counts})


def test_counts(path):
    """Counts of a GPU_TESTS_PROGRESS file (``record_tests``); {} when it does not exist."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    counts = {"tests": sum(r["when"] == "call" for r in rows),
              "passed": sum(r["when"] == "call" and r["outcome"] == "passed" for r in rows),
              "failed": sum(r["when"] == "call" and r["outcome"] == "failed" for r in rows),
              "errors": sum(r["when"] != "call" and r["outcome"] == "failed" for r in rows),
              "skipped": sum(r["outcome"] == "skipped" for r in rows)}
    counts["failed_tests"] = [r["test"] for r in rows if r["outcome"] == "failed"]
    return counts


def collect(sources, into):
    """Copy the files of the folders ``sources`` (what two device runs brought back) into ``into``,
    merging their manifest.json entries (a later source's entry of the same name wins). Returns the
    list of files in ``into``.

    Raises:
        ValueError: a source that is not a folder.
    """
    os.makedirs(into, exist_ok=True)
    manifest = {}
    target = os.path.join(into, "manifest.json")
    if os.path.exists(target):
        with open(target) as f:
            manifest = json.load(f)
    for source in sources:
        if not os.path.isdir(source):
            raise ValueError(f"{source} is not a folder")
        for name in sorted(os.listdir(source)):
            path = os.path.join(source, name)
            if name == "manifest.json":
                with open(path) as f:
                    manifest.update(json.load(f))
            elif os.path.isfile(path):
                shutil.copy2(path, os.path.join(into, name))
    if manifest:
        write_json(target, dict(sorted(manifest.items())))
    return sorted(os.listdir(into))


# ----------------------------------------------------------------------------------------------
# the command line


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="the environment report (JSON)")
    f = sub.add_parser("folder", help="print results/gpu/<date>_<gpu> for this machine")
    f.add_argument("--name_only", action="store_true", help="print <date>_<gpu> only")
    comp = sub.add_parser("compile", help="compile Fastmax's Triton kernels in parallel processes (CUDA)")
    comp.add_argument("--D", default="16,64", help="comma list of head dims")
    comp.add_argument("--dtype", default="bfloat16,float32", help="comma list of dtypes")
    comp.add_argument("--precision", default=f"highest,{FLOAT32_MATMUL_PRECISION}",
                      help="comma list of torch float32 matmul precisions (the tests run under 'highest', the "
                           f"benchmark under '{FLOAT32_MATMUL_PRECISION}')")
    comp.add_argument("--jobs", type=int, default=None, help="compile processes (default: the CPU count)")
    b = sub.add_parser("bench", help="the benchmark (module docstring)")
    b.add_argument("--out", required=True, help="the output folder")
    b.add_argument("--T", default="1024,4096,16384,65536")
    b.add_argument("--D", type=int, default=64)
    b.add_argument("--D_based", type=int, default=16, help="head dim of the fused_chunk_based comparison")
    b.add_argument("--heads", type=int, default=8)
    b.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    b.add_argument("--accuracy_T", default="2048,16384", help="G0's sequence lengths")
    b.add_argument("--crossover_T", default="2048,4096,8192,16384",
                   help="the forced p = 2 kernels are also measured at these T")
    b.add_argument("--batch", type=int, default=8, help="B of the batch scan")
    b.add_argument("--batch_T", type=int, default=16384, help="T of the batch scan")
    b.add_argument("--profile_T", type=int, default=16384, help="T of bench_profile.txt")
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--min_sample", type=float, default=0.02, help="seconds: shorter calls are looped")
    b.add_argument("--call_s", type=float, default=1.0, help="skip a cell predicted to take longer per call")
    b.add_argument("--sample_s", type=float, default=2.0,
                   help="the samples of one cell take about this long at most (fewer repeats for a slow call)")
    b.add_argument("--budget_s", type=float, default=255.0,
                   help="the run's seconds, compilation, warm-up and writing included")
    b.add_argument("--reserve_s", type=float, default=25.0, help="of the budget, kept for the comparisons and files")
    b.add_argument("--memory", type=int, default=1, help="1: measure peak memory per cell, 0: not")
    b.add_argument("--compile", type=int, default=1, help="1: compile the Triton kernels in parallel first (CUDA)")
    b.add_argument("--jobs", type=int, default=None, help="compile processes (default: the CPU count)")
    b.add_argument("--device", default=None, help="cuda (default) or cpu (the dry run's)")
    b.add_argument("--dry_run", action="store_true",
                   help=f"the CPU rehearsal: {', '.join(f'{k}={v}' for k, v in DRY_RUN.items())}")
    rt = sub.add_parser("record_tests", help="the manifest entry 'tests' of a folder")
    rt.add_argument("--out", required=True)
    p = sub.add_parser("plot", help="draw FOLDER/bench.png again from FOLDER/bench.json")
    p.add_argument("folder")
    c = sub.add_parser("collect", help="copy device folders into one, merging their manifests")
    c.add_argument("sources", nargs="+")
    c.add_argument("--into", required=True)
    g = sub.add_parser("_group")
    g.add_argument("spec")
    args = ap.parse_args(argv)

    if args.command == "env":
        print(json.dumps(environment(), indent=1))
    elif args.command == "folder":
        print(folder_name() if args.name_only else os.path.join("results", "gpu", folder_name()))
    elif args.command == "compile":
        if not torch.cuda.is_available():
            ap.error("compile needs a CUDA GPU (the Triton interpreter compiles nothing)")
        configs = kernel_configs(parse_list(args.D, int), parse_list(args.dtype, str))
        rows = [row for precision in parse_list(args.precision, str)
                for row in compile_kernels(configs, args.jobs, precision)]
        sys.exit(1 if any(row["error"] for row in rows) else 0)
    elif args.command == "bench":
        if args.dry_run:
            for key, value in DRY_RUN.items():
                setattr(args, key, value)
            os.environ.setdefault("TRITON_INTERPRET", "1")
        args.device = args.device or "cuda"
        if args.device == "cuda" and not torch.cuda.is_available():
            ap.error("the benchmark needs a CUDA GPU; on a CPU run its rehearsal: --dry_run "
                     "(bash scripts/bench/gpu_check.sh dry_run)")
        bench(args)
    elif args.command == "record_tests":
        print(record_tests(args.out))
    elif args.command == "plot":
        with open(os.path.join(args.folder, "bench.json")) as f:
            data = json.load(f)
        path = plot(data["rows"], os.path.join(args.folder, "bench.png"), data["settings"]["D"],
                    data["settings"]["D_based"])
        print(path or "matplotlib is not installed")
    elif args.command == "collect":
        try:
            print("\n".join(collect(args.sources, args.into)))
        except ValueError as e:
            ap.error(str(e))
    elif args.command == "_group":
        spec = json.loads(args.spec)
        run_group(spec["group"], spec)


if __name__ == "__main__":
    main()
