"""The GPU check of issue 43 (docs/gpu.md), run by scripts/bench/gpu_check.sh: the environment
report, the parallel compilation of Fastmax's Triton kernels, the benchmark of every attention
against SDPA's FlashAttention backend and flash-linear-attention (FLA), the manifest entry of the
GPU tests, and the merge of the folders two device runs bring back.

    python -m scripts.bench.gpu env                      the environment report (JSON on stdout)
    python -m scripts.bench.gpu folder [--name_only]     results/gpu/<date>_<gpu> for this machine
    python -m scripts.bench.gpu warm [--D 32,64,128]     compile the Triton kernels, one process per kernel
    python -m scripts.bench.gpu bench --out FOLDER       the benchmark (below); --dry_run: tiny sizes on the CPU
    python -m scripts.bench.gpu record_tests --out FOLDER   manifest entry "tests" (tests_progress.jsonl)
    python -m scripts.bench.gpu plot FOLDER              draw FOLDER/bench.png again from FOLDER/bench.json
    python -m scripts.bench.gpu collect SRC... --into results/gpu/<name>   copy folders, merging manifests

The benchmark. Every attention of configs/attention/ with its parameters (the default list of
scripts/bench/attention.py) plus softmax_reference, Fastmax through its Triton kernels (p = 1, 2),
SDPA forced to its FlashAttention backend (a call flash cannot run is a failed row, never a silent
fallback) and FLA's causal kernels (``scripts/bench/fla_baselines.py``): chunk_linear_attn beside
fastmax p = 1 and linear at D = 64, parallel_based beside fastmax p = 2 at D = 64, fused_chunk_based
beside fastmax p = 2 at D = 16 (``--D_based``). T = 1024, 4096, 16384, 65536; H = 8 heads of one
sequence; causal and not; forward (no_grad) and forward + backward (forward only for an
inference-only method). Inputs in bfloat16 and calls under bfloat16 autocast (as train.py
``--dtype=bfloat16``); a method whose bfloat16 call fails is measured in float32 and its row says
so. A reference path (softmax_reference) and tree attention's float64 CUDA path stop at T = 16384.

Per cell: the peak memory one call adds (``torch.cuda.max_memory_allocated`` growth) and the median
time of ``--repeats`` samples after a warm-up (CUDA events, samples of at least ``--min_sample``
seconds, fewer samples when they would take longer than ``--sample_s``; ``scripts/bench/methods.py``).
Before its first cell a curve makes one untimed call at the first T (``warm_up``: compilation and
CUDA's lazy loading happen there; its wall time is the rows' ``warmup_s``); ``cell_s`` is a cell's
wall time (memory, warm-up and samples), a check on the CUDA-event times. A cell is skipped when its
call is predicted longer than ``--call_s`` (log-log extrapolation from the method's smaller T), its
estimated memory exceeds 80% of the GPU's, or its group's share of ``--budget_s`` (``GROUP_SHARES``;
time a group leaves passes on) is used up; a cell whose first full-size call (the memory
measurement's) takes longer than ``--call_s`` is timed by one more call alone (the cap per cell); a
failed cell stops its method's curve. Groups of methods run in child processes (the Triton kernels
first, then the linear family with FLA, then the rest), so that a broken CUDA context ends one
group, not the run; each child appends a cell's row to bench.csv as soon as it is measured; within a
group the cheap curves run first (``curves``).

Outputs, one flat folder (``--out``; scripts/bench/gpu_check.sh: results/gpu/<date>_<gpu>):
bench.csv (the rows), bench.json (environment, settings, methods, the rows, the same-function
comparisons with FLA, the Based / Fastmax and linear / FLA statements, the aims of issue 43),
bench.md (tables), bench.png (time against T) and the entry "bench" of manifest.json
(``provenance.record``), bench_profile.txt (``profile_triton``: where the Triton path's time goes);
with tests.log and tests_progress.jsonl of ``gpu_check.sh tests``, eight files.
"""
import argparse
import concurrent.futures
import csv
import datetime
import importlib.metadata
import importlib.util
import json
import math
import multiprocessing
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

import torch

import attention
from data import write_json
import provenance
from scripts import plot_style
from scripts.bench import fla_baselines
from scripts.bench.common import (ROOT, loglog_axes, make_inputs, parse_list, peak_added_mb, run_once, synchronize,
                                 wall_timer)
from scripts.bench.methods import (CONFIG_DIR, estimated_bytes, first_line, flop_count, make_call, measure_call,
                                   parse_method, predicted_seconds, unsupported)

FIELDS = ["group", "method", "spec", "kind", "mode", "causal", "T", "D", "heads", "device", "dtype", "seconds",
          "repeats", "peak_mb", "gflop", "gflop_per_s", "sdpa_backend", "warmup_s", "cell_s", "note"]
# the groups' shares of the benchmark's time (a group's unused time passes on to the next)
GROUP_SHARES = {"triton": 0.3, "linear_family": 0.4, "others": 0.3}
MODES = ("forward", "forward_backward")
MAX_T_SLOW_PATHS = 16384  # issue 43: no reference path and no float64 tree path above 16k
FLOAT64_PATHS = {"tree": "tree attention's CUDA path (vectorized) computes in float64"}
STICKY = ("CUDA error", "illegal memory access", "device-side assert", "unspecified launch failure")
TRITON_METHODS = ("fastmax1_triton", "fastmax2_triton")
DRY_RUN = dict(T="32,64", D=16, D_based=16, heads=2, repeats=1, min_sample=0.0, call_s=5.0, budget_s=300.0,
               device="cpu")


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


def _compile_one(task):
    """Worker of ``warm_triton`` (a fresh process): compile one kernel; (task, seconds, shared bytes
    or None, error or None)."""
    D, p, causal, separate, chunk, kernel, device = task
    start = time.time()
    try:
        from attention.fastmax import triton_kernels
        shared = triton_kernels.compile_kernels(D, D, chunk, causal, p, device, kernels=(kernel,),
                                                separate=separate)[kernel]
        return task, time.time() - start, shared, None
    except Exception as exc:  # noqa: BLE001  (reported, the tests then compile at launch)
        return task, time.time() - start, None, first_line(exc)


def warm_triton(configs, jobs=None, device="cuda"):
    """Compile Fastmax's Triton kernels of every configuration in ``configs`` into Triton's cache,
    one process per kernel, ``jobs`` at a time (default: the CPU count), the slowest first (larger D
    and chunk, backward). Later launches anywhere on the machine load them
    (``triton_kernels.compile_kernels``).

    Args:
        configs: tuples (D, p, causal[, separate[, chunk[, kernels]]]): separate False (dropout's
            variant: True), chunk 64, kernels ("forward", "dq", "dkv") by default.
        jobs (int | None); device: a CUDA device.

    Returns:
        one dict per kernel (D, p, causal, separate, chunk, kernel, seconds, shared_bytes, error),
        printed as they finish.
    """
    tasks, defaults = set(), (False, 64, ("dkv", "dq", "forward"))
    for config in configs:
        D, p, causal, separate, chunk, kernels = (*config, *defaults[len(config) - 3:])
        tasks |= {(D, p, bool(causal), bool(separate), chunk, kernel, device) for kernel in kernels}
    tasks = sorted(tasks, key=lambda t: (-t[0] * t[4], -t[1], t[5] != "dkv", not t[2]))
    if not tasks:
        return []
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    rows = []
    context = multiprocessing.get_context("spawn")  # never fork a process that may hold a CUDA context
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_compiling_worker) as pool:
        for task, seconds, shared, error in pool.map(_compile_one, tasks):
            D, p, causal, separate, chunk, kernel = task[:6]
            rows.append(dict(D=D, p=p, causal=causal, separate=separate, chunk=chunk, kernel=kernel,
                             seconds=round(seconds, 1), shared_bytes=shared, error=error))
            print(f"compiled fastmax Triton {kernel:7s} D={D:3d} p={p} causal={causal!s:5s} chunk={chunk} "
                  f"separate={separate!s:5s} {seconds:6.1f} s shared={shared} {error or ''}", flush=True)
    return rows


def _compiling_worker():
    """A ``warm_triton`` worker compiles: TRITON_INTERPRET leaves its environment before Triton reads it."""
    os.environ.pop("TRITON_INTERPRET", None)


# ----------------------------------------------------------------------------------------------
# the benchmark: plan


def curves(D_main, D_based):
    """The benchmark's curves by group, in the order they run: dicts with group, label, kind
    ("registry", "sdpa" or "fla"), spec (a ``parse_method`` text or an FLA label), D, causal, mode.
    Within a group the cheap curves come first (SDPA and FLA, the comparisons of issue 43's aims,
    then p = 1 before p = 2 and the small head dim before the large), and causal before non-causal
    (the aims are causal), so that a group stopped by its time box has measured what matters most."""
    configs = ["@" + os.path.relpath(os.path.join(CONFIG_DIR, f), ROOT)
               for f in sorted(os.listdir(CONFIG_DIR)) if f.endswith(".py")]
    groups = {
        "triton": ([("fastmax1_triton", D_main, c) for c in (True, False)] + [("fastmax2_triton", D_based, True)]
                   + [("fastmax2_triton", D_main, c) for c in (True, False)]),
        "linear_family": ([(m, D_main, True) for m in ("sdpa", "fla_chunk_linear_attn", "@configs/attention/fastmax1.py",
                                                        "@configs/attention/linear.py")]
                          + [(m, D_based, True) for m in ("sdpa", "fla_fused_chunk_based",
                                                          "@configs/attention/fastmax2.py")]
                          + [(m, D_main, True) for m in ("fla_parallel_based", "@configs/attention/fastmax2.py")]),
    }
    done = {(m, D, c) for entries in groups.values() for m, D, c in entries}
    groups["others"] = [(m, D_main, c) for c in (True, False) for m in ["sdpa", *configs, "softmax_reference"]
                        if (m, D_main, c) not in done]
    out = []
    for group, entries in groups.items():
        for spec, D, causal in dict.fromkeys(entries):  # D_based = D (the dry run) repeats entries
            for mode in MODES:
                if spec in fla_baselines.CALLS:
                    label, kind = spec, "fla"
                else:
                    method = parse_method(spec)
                    label, kind = method.label, method.kind
                out.append(dict(group=group, label=label, kind=kind, spec=spec, D=D, causal=causal, mode=mode))
    return out


def slow_path(method):
    """Why ``method`` (a ``Method``) stops at T = MAX_T_SLOW_PATHS, or None: a reference path (a
    registered reference, ``attention.Attention.reference_name``, or implementation="reference") or
    a path that computes in float64 on CUDA (``FLOAT64_PATHS``)."""
    if method.kind != "registry":
        return None
    references = {attention.attention_class(n).reference_name for n in attention.registered()}
    if method.name in references or method.params.get("implementation") == "reference":
        return "a reference path"
    return FLOAT64_PATHS.get(method.name)


# ----------------------------------------------------------------------------------------------
# the benchmark: one group (in a child process)


def empty_row(curve, T, settings, note=""):
    """A bench.csv row of one cell of ``curve`` at ``T``, not (yet) measured, with ``note``."""
    return dict(group=curve["group"], method=curve["label"], spec=curve["spec"], kind=curve["kind"], mode=curve["mode"],
                causal=curve["causal"], T=T, D=curve["D"], heads=settings["heads"], device=settings["device"],
                dtype=settings["dtype"], seconds=None, repeats=0, peak_mb=None, gflop=None, gflop_per_s=None,
                sdpa_backend="", warmup_s=None, cell_s=None, note=note)


class StickyCudaError(RuntimeError):
    """A CUDA error that leaves the process's context unusable: the group ends."""


def _call(curve, T, heads, device, dtype):
    """(call(q, k, v), sdpa_backend) of ``curve`` at ``T``."""
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
    """One untimed call of ``curve`` at ``T`` (the first T of the run), so that what a first call
    costs once (a kernel's compilation, CUDA's lazy loading of a kernel module, autotuning) is never
    inside a cell's time. Returns its wall seconds, or None when it failed (the cell then says why)."""
    try:
        call, _ = _call(curve, T, settings["heads"], settings["device"], dtype)
        return call_seconds(call, T, curve["D"], settings["heads"], settings["device"], curve["mode"], dtype)
    except Exception:  # noqa: BLE001  (the cell's own call reports the failure)
        return None


def _measure(curve, T, heads, device, dtype, settings):
    """(seconds, repeats, peak_mb, sdpa_backend) of one cell in ``dtype``."""
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
    """Measure one curve over settings["T"] (module docstring: skips, fallback to float32, stops),
    calling ``write(row)`` for every T as soon as its row is known.

    Raises:
        StickyCudaError: a CUDA error that breaks the context (after writing its row).
    """
    device, heads = settings["device"], settings["heads"]
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
        warmup = warm_up(curve, settings["T"][0], settings, dtype)
    for T in settings["T"]:
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
        q, k, v = make_inputs(T, curve["D"], settings["heads"], settings["device"], True, dtype=dtype)
        run_once(fla_baselines.fla_call(curve["label"]), q, k, v, "forward_backward", torch.randn_like(q))
        return None
    except Exception as exc:  # noqa: BLE001  (the curve's rows say why)
        return f"failed: FLA autotuning at T = {T}: {first_line(exc)}"


def _fill(row, curve, T, dtype, settings):
    """Measure one cell into ``row``: in ``dtype``, else (a failure that is neither out of memory nor
    a CUDA error) in float32, noting why."""
    try:
        row["seconds"], row["repeats"], row["peak_mb"], row["sdpa_backend"] = _measure(
            curve, T, settings["heads"], settings["device"], dtype, settings)
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
            curve, T, settings["heads"], settings["device"], torch.float32, settings)
        row["dtype"], row["note"] = "float32", f"float32: {settings['dtype']} failed ({error})"
    except Exception as exc:  # noqa: BLE001
        row["note"] = f"failed: {error}; in float32: {first_line(exc)}"


def run_group(group, settings):
    """Every curve of ``group`` (``curves``), each row appended to settings["csv"] at once; after a
    sticky CUDA error the group's remaining cells are rows that say so."""
    torch.manual_seed(0)
    planned = [c for c in curves(settings["D"], settings["D_based"]) if c["group"] == group]
    broken = None
    with open(settings["csv"], "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)

        def write(row):
            writer.writerow(row)
            f.flush()
            print(f"{row['method']:32s} {row['mode']:16s} causal={row['causal']!s:5s} D={row['D']:3d} T={row['T']:6d} "
                  f"{row['dtype']:8s} t={_short(row['seconds'])} peak_mb={_short(row['peak_mb'])} {row['note']}",
                  flush=True)

        if group == "triton":
            profile_triton(settings)
        for curve in planned:
            if broken:
                for T in settings["T"]:
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
BLOCK_V_SCAN = (64, 32, 16)  # value columns per Triton program: fewer = more programs in flight


def profile_triton(settings):
    """Where Fastmax's Triton path spends its time: torch.profiler over PROFILE_CALLS causal
    forward + backward calls (after one untimed call; one call on a CPU, where the kernels are
    interpreted) at the run's first T, for p = 1 at D, p = 2 at D_based and at D; the table of the
    most expensive operations (GPU kernels on a GPU) goes to PROFILE_FILE beside bench.csv, each
    section as soon as it is measured; then ``block_v_scan``. A section that would start after the
    group's deadline is skipped, saying so; a failure is written instead of a table. Measures
    nothing for bench.csv."""
    from torch.profiler import ProfilerActivity, profile
    device, T = settings["device"], settings["T"][0]
    calls = PROFILE_CALLS if device == "cuda" else 1
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sort = "cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    dtype = getattr(torch, settings["dtype"])
    path = os.path.join(os.path.dirname(settings["csv"]), PROFILE_FILE)

    def write(*lines, mode="a"):
        with open(path, mode) as f:
            f.write("\n".join(lines) + "\n")

    write(f"torch.profiler of Fastmax's Triton path: causal forward + backward, T = {T}, "
          f"{settings['heads']} heads, {settings['dtype']} inputs, {calls} calls after a warm-up", mode="w")
    for label, D in (("fastmax1_triton", settings["D"]), ("fastmax2_triton", settings["D_based"]),
                     ("fastmax2_triton", settings["D"])):
        if time.time() > settings["deadline"]:
            write(f"\n== {label} D={D}", "skipped: the group's time is used up")
            continue
        curve = dict(kind="registry", label=label, spec=label, D=D, causal=True, mode="forward_backward")
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
    write(*block_v_scan(settings))


def block_v_scan(settings):
    """Is the Triton path short of parallel work? Its kernels launch one program per (batch x
    head, block of BLOCK_V value columns), each walking the chunks in order: at one sequence of 8
    heads and D = 64 that is 8 programs. The causal forward of p = 1 and p = 2 at D, at the run's
    second T (else its first; the first on a CPU), median of PROFILE_CALLS calls (one on a CPU)
    after an untimed one (which compiles the variant), for each BLOCK_V of BLOCK_V_SCAN: 4x the
    programs at 16 columns. Lines of text; a method whose turn comes after the group's deadline
    is skipped, saying so."""
    from attention.fastmax import triton_kernels

    device = settings["device"]
    T = settings["T"][1] if len(settings["T"]) > 1 and device == "cuda" else settings["T"][0]
    calls = PROFILE_CALLS if device == "cuda" else 1
    dtype = getattr(torch, settings["dtype"])
    lines = [f"\n== BLOCK_V (value columns per program): causal forward, T = {T}, D = {settings['D']}, "
             f"median of {calls} calls, ms"]
    default = triton_kernels.BLOCK_V
    try:
        for label in ("fastmax1_triton", "fastmax2_triton"):
            if time.time() > settings["deadline"]:
                lines.append(f"{label}: skipped: the group's time is used up")
                continue
            curve = dict(kind="registry", label=label, spec=label, D=settings["D"], causal=True, mode="forward")
            call, _ = _call(curve, T, settings["heads"], device, dtype)
            timed = []
            for block_v in BLOCK_V_SCAN:
                triton_kernels.BLOCK_V = block_v
                samples = [call_seconds(call, T, settings["D"], settings["heads"], device, "forward", dtype)
                           for _ in range(calls + 1)][1:]  # the first compiles the variant
                timed.append(f"{block_v}: {1000 * statistics.median(samples):.2f}")
            lines.append(f"{label}: " + ", ".join(timed))
    except Exception as exc:  # noqa: BLE001  (the file says why)
        lines.append(f"failed: {first_line(exc)}")
    finally:
        triton_kernels.BLOCK_V = default
    return lines


# ----------------------------------------------------------------------------------------------
# the benchmark: the parent


def read_rows(path):
    """The rows of a bench.csv with numbers, booleans and empty fields (None) parsed back."""
    def parse(key, value):
        if value == "":
            return None if key not in ("note", "sdpa_backend", "spec", "kind") else ""
        if key == "causal":
            return value == "True"
        if key in ("T", "D", "heads", "repeats"):
            return int(value)
        if key in ("seconds", "peak_mb", "gflop", "gflop_per_s", "warmup_s", "cell_s"):
            return float(value)
        return value

    with open(path, newline="") as f:
        return [{k: parse(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def seconds_of(rows, method, D, causal, mode, T):
    """The measured seconds of one cell, or None."""
    for r in rows:
        if (r["method"], r["D"], r["causal"], r["mode"], r["T"]) == (method, D, causal, mode, T) and r["seconds"]:
            return r["seconds"]
    return None


def aims(rows, D, D_based):
    """Issue 43's aims on the H100 from the rows: each a dict with the aim, the comparisons (ours,
    theirs, T, mode, time ratio theirs / ours: above 1 = ours faster) and met (True / False / None
    when a time is missing)."""
    out = []

    def compare(aim, ours, theirs, D_, T, mode, need):
        a, b = seconds_of(rows, ours, D_, True, mode, T), seconds_of(rows, theirs, D_, True, mode, T)
        ratio = b / a if a and b else None
        return dict(aim=aim, ours=ours, theirs=theirs, D=D_, T=T, mode=mode, speedup=ratio,
                    met=None if ratio is None else ratio >= need)

    for mode in MODES:
        out.append(compare("causal fastmax p = 2 (Triton) at least as fast as FLA fused_chunk_based, D = 16, T = 16k",
                           "fastmax2_triton", "fla_fused_chunk_based", D_based, 16384, mode, 1.0))
        for theirs in ("fla_parallel_based", "sdpa"):
            out.append(compare(f"causal fastmax p = 2 (Triton) faster than {theirs}, D = {D}, T = 16k",
                               "fastmax2_triton", theirs, D, 16384, mode, 1.0))
        for ours in ("fastmax1", "fastmax1_triton"):
            for T in (16384, 65536):
                out.append(compare(f"fastmax p = 1 within 1.5x of FLA chunk_linear_attn, T = {T // 1024}k",
                                   ours, "fla_chunk_linear_attn", D, T, mode, 1 / 1.5))
    subquadratic = sorted({r["method"] for r in rows if r["kind"] == "registry" and r["gflop"]
                           and _flop_growth(rows, r["method"], D) < 15})
    for mode in MODES:
        for ours in subquadratic:
            out.append(compare("every linear or sparse method faster than FlashAttention at T = 64k causal",
                               ours, "sdpa", D, 65536, mode, 1.0))
    return out


def _flop_growth(rows, method, D):
    """FLOPs at T = 65536 over those at 16384 (16 for a quadratic method, 4 for a linear one)."""
    flops = {r["T"]: r["gflop"] for r in rows if r["method"] == method and r["D"] == D and r["gflop"]}
    return flops[65536] / flops[16384] if 65536 in flops and 16384 in flops else float("inf")


def markdown(rows, summary):
    """bench.md: per (D, causal, mode) a table of milliseconds per call (and peak MB) per method and
    T; then the aims, the same-function comparisons and the statements."""
    lines = [f"# GPU benchmark: {summary['environment'].get('gpu') or 'CPU (dry run)'}", "",
             f"{summary['environment']['date']}; torch {summary['environment']['torch']}, triton "
             f"{summary['environment']['triton']}, fla-core {summary['environment']['fla_core']}; "
             f"{summary['settings']['dtype']}, {summary['settings']['heads']} heads; milliseconds per call "
             "(peak MB one call adds); SDPA forced to FlashAttention.", ""]
    Ts = summary["settings"]["T"]
    for D, causal, mode in sorted({(r["D"], r["causal"], r["mode"]) for r in rows}, key=lambda k: (-k[0], not k[1], k[2])):
        lines += [f"## D = {D}, {'causal' if causal else 'non-causal'}, {mode}", "",
                  "| method | " + " | ".join(str(T) for T in Ts) + " | note |", "|---" * (len(Ts) + 2) + "|"]
        for method in dict.fromkeys(r["method"] for r in rows if (r["D"], r["causal"], r["mode"]) == (D, causal, mode)):
            cells, notes = [], []
            for T in Ts:
                row = next((r for r in rows if (r["method"], r["D"], r["causal"], r["mode"], r["T"])
                            == (method, D, causal, mode, T)), None)
                if row is None or row["seconds"] is None:
                    cells.append("-")
                else:
                    peak = "" if row["peak_mb"] is None else f" ({row['peak_mb']:.0f})"
                    cells.append(f"{1000 * row['seconds']:.3g}{peak}")
                if row is not None and row["note"] and row["note"] not in notes:
                    notes.append(row["note"])
            lines.append(f"| {method} | " + " | ".join(cells) + " | " + "; ".join(notes) + " |")
        lines.append("")
    lines += ["## Aims of issue 43", "", "| aim | ours | theirs | mode | speed-up | met |", "|---|---|---|---|---|---|"]
    for a in summary["aims"]:
        speedup = "-" if a["speedup"] is None else f"{a['speedup']:.2f}x"
        lines.append(f"| {a['aim']} | {a['ours']} | {a['theirs']} | {a['mode']} | {speedup} | "
                     f"{'-' if a['met'] is None else ('yes' if a['met'] else 'no')} |")
    lines += ["", "## The same function through FLA and through ours (float32, causal)", "",
              "| FLA | ours | D | max abs diff | relative error |", "|---|---|---|---|---|"]
    for c in summary["comparisons"]:
        if "skipped" in c or "failed" in c:
            lines.append(f"| {c.get('skipped') or c.get('failed')} | | | | |")
        else:
            lines.append(f"| {c['fla']} | {c['ours']} | {c['D']} | {c['max_abs_diff']:.2e} | {c['relative_error']:.2e} |")
    lines += ["", "Based and Fastmax: " + fla_baselines.BASED_VS_FASTMAX, "",
              "Linear attention and FLA: " + fla_baselines.LINEAR_VS_FLA, ""]
    return "\n".join(lines)


def plot(rows, path, D, D_based):
    """bench.png: log-log time per call against T, one panel per (D, causal, mode) measured: D
    causal and not, D_based causal; SDPA dashed black. Returns the path, or None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
    summary = dict(summary, aims=aims(rows, summary["settings"]["D"], summary["settings"]["D_based"]))
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
    max_bytes = (0.8 * torch.cuda.get_device_properties(0).total_memory if device == "cuda"
                 else 0.25 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    settings = dict(T=parse_list(args.T, int), D=args.D, D_based=args.D_based, heads=args.heads, device=device,
                    dtype=args.dtype, repeats=args.repeats, min_sample=args.min_sample, call_s=args.call_s,
                    sample_s=args.sample_s,
                    budget_s=args.budget_s, deadline=start + args.budget_s - args.reserve_s, memory=args.memory,
                    max_bytes=max_bytes, csv=csv_path, dry_run=args.dry_run)
    shown = {k: v for k, v in settings.items() if k not in ("csv", "deadline")}
    summary = {"environment": env, "settings": shown, "commit": commit,
               "methods": [dict(label=c["label"], kind=c["kind"], spec=c["spec"]) for c in
                           {c["label"]: c for c in curves(args.D, args.D_based)}.values()],
               "sdpa": "torch.nn.functional.scaled_dot_product_attention under sdpa_kernel([SDPBackend.FLASH_ATTENTION]): "
                       "a call FlashAttention cannot run fails instead of falling back",
               "based_vs_fastmax": fla_baselines.BASED_VS_FASTMAX, "linear_vs_fla": fla_baselines.LINEAR_VS_FLA,
               "fla_calls": {k: {"function": f"fla.ops.{v[0]}", "computes": v[2], "same_function_as": v[3]}
                             for k, v in fla_baselines.CALLS.items()},
               "comparisons": [], "groups": {}}
    print(json.dumps(env), flush=True)
    if args.warm:
        triton_configs = [(args.D, p, c) for p in (1, 2) for c in (True, False)] + [(args.D_based, 2, True)]
        summary["triton_compile"] = warm_triton(triton_configs if device == "cuda" else triton_configs[:1],
                                                jobs=args.jobs, device=device)
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
        summary = write_outputs(args.out, read_rows(csv_path), summary)
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
          f"{summary['seconds']:.0f} s; {args.out}", flush=True)
    return summary


def _rows_not_measured(csv_path, group, settings, note):
    """Append a row with ``note`` for every planned cell of ``group`` that bench.csv lacks (a group
    killed or never started), so that every cell of the plan has its row."""
    have = {(r["method"], r["mode"], r["causal"], r["D"], r["T"]) for r in read_rows(csv_path)}
    with open(csv_path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        for curve in curves(settings["D"], settings["D_based"]):
            if curve["group"] != group:
                continue
            for T in settings["T"]:
                if (curve["label"], curve["mode"], curve["causal"], curve["D"], T) not in have:
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
    warm = sub.add_parser("warm", help="compile Fastmax's Triton kernels in parallel")
    warm.add_argument("--D", default="64", help="comma list of head dims")
    warm.add_argument("--jobs", type=int, default=None)
    b = sub.add_parser("bench", help="the benchmark (module docstring)")
    b.add_argument("--out", required=True, help="the output folder")
    b.add_argument("--T", default="1024,4096,16384,65536")
    b.add_argument("--D", type=int, default=64)
    b.add_argument("--D_based", type=int, default=16, help="head dim of the fused_chunk_based comparison")
    b.add_argument("--heads", type=int, default=8)
    b.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--min_sample", type=float, default=0.02, help="seconds: shorter calls are looped")
    b.add_argument("--call_s", type=float, default=1.0, help="skip a cell predicted to take longer per call")
    b.add_argument("--sample_s", type=float, default=2.0,
                   help="the samples of one cell take about this long at most (fewer repeats for a slow call)")
    b.add_argument("--budget_s", type=float, default=255.0, help="the run's seconds, warm-up and writing included")
    b.add_argument("--reserve_s", type=float, default=25.0, help="of the budget, kept for the comparisons and files")
    b.add_argument("--memory", type=int, default=1, help="1: measure peak memory per cell, 0: not")
    b.add_argument("--warm", type=int, default=1, help="1: compile the Triton kernels in parallel first")
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
    elif args.command == "warm":
        if not torch.cuda.is_available():
            ap.error("warm needs a CUDA GPU (the Triton interpreter compiles nothing)")
        warm_triton([(D, p, c) for D in parse_list(args.D, int) for p in (1, 2) for c in (True, False)], args.jobs)
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
