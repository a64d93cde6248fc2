"""What the benchmarks share: seeded inputs, one timed call, medians, peak memory in a fresh process,
the machine's matmul peak, CSV rows, and train.py's own tokens/s. A library for the scripts of this
folder, not a script.

Timing rule (every benchmark): the median of ``repeats`` samples after one warm-up call; a sample
of a call shorter than MIN_SAMPLE_SECONDS is the mean over a loop of calls lasting about that
long; on CUDA, CUDA events around the calls (``cuda_event_timer``). Peak memory: VmHWM - VmRSS of a
fresh process around one call (CPU), or the growth of ``torch.cuda.max_memory_allocated`` (CUDA).
"""
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_csv(path, rows, fields, extrasaction="raise"):
    """Rows (dicts) as CSV with the header ``fields``; keys outside it raise unless extrasaction="ignore"."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction=extrasaction)
        writer.writeheader()
        writer.writerows(rows)


def parse_list(text, typ):
    return [typ(x) for x in text.split(",") if x.strip()]


def make_inputs(T, D, heads, device, requires_grad, seed=0, dtype=torch.float32):
    """Seeded standard normal q, k, v of shape (1, heads, T, D): drawn in float32 on the CPU (the
    same numbers on every device), then moved to ``device`` and cast to ``dtype``."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn(1, heads, T, D, generator=g).to(device, dtype).requires_grad_(requires_grad) for _ in range(3)]


def run_once(call, q, k, v, mode, grad_out):
    """One call of ``call(q, k, v)``: ``mode`` "forward" under ``torch.no_grad``, or
    "forward_backward" with the backward of ``grad_out`` (cast to the output's dtype); the input
    gradients are dropped."""
    if mode == "forward":
        with torch.no_grad():
            call(q, k, v)
    else:
        out = call(q, k, v)
        out.backward(grad_out.to(out.dtype))
        q.grad = k.grad = v.grad = None


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


MIN_SAMPLE_SECONDS = 0.1  # a sample of a short call times this long a loop of calls (timer and scheduler noise)


def wall_timer(sync=lambda: None):
    """A timer ``fn -> seconds`` of the wall time of ``fn()``, with ``sync()`` before and after."""
    def timed(fn):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start
    return timed


def cuda_event_timer():
    """A timer ``fn -> seconds`` measured by two CUDA events recorded around ``fn()`` on the
    current stream (the GPU time between them; waits for the second event)."""
    def timed(fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    return timed


def median_seconds(once, repeats, long_call, sync=lambda: None, timer=None, min_sample=None, max_total=None):
    """(median over ``repeats`` samples of the wall time per call of ``once``, repeats), after a
    warm-up call. A sample is one call, or for calls shorter than ``min_sample`` seconds (default
    MIN_SAMPLE_SECONDS) the mean of a loop of calls lasting about that long. A warm-up is never a
    sample (it may hold one-time costs: a kernel's JIT compilation, lazy initialisation): after a
    warm-up longer than ``long_call`` seconds one more call is timed, and if it too is longer it is
    the only sample (repeats = 1). ``max_total`` (seconds, default none) caps the samples: fewer
    than ``repeats`` (at least 1) when they would take longer, as estimated from the last call
    before them (the returned repeats say how many). ``timer`` (default ``wall_timer(sync)``)
    measures a function's time, e.g. ``cuda_event_timer()``."""
    timer = timer or wall_timer(sync)
    first = timer(once)
    if first > long_call:
        first = timer(once)
        if first > long_call:
            return first, 1
    min_sample = MIN_SAMPLE_SECONDS if min_sample is None else min_sample
    calls = max(1, math.ceil(min_sample / max(first, 1e-9)))
    if max_total is not None:
        repeats = max(1, min(repeats, int(max_total / max(first * calls, 1e-9))))

    def loop():
        for _ in range(calls):
            once()

    times = [timer(loop) / calls for _ in range(repeats)]
    return statistics.median(times), repeats


def matmul_peak(n, device="cpu", repeats=5, long_call=5.0):
    """This machine's float32 matmul rate with torch's current threads: an (n, n) @ (n, n) product
    timed as every benchmark call (``median_seconds``). Returns {"n", "seconds", "gflops"}, with
    gflops = 2 n^3 / seconds / 1e9."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(device) for _ in range(2))
    timer = cuda_event_timer() if device == "cuda" else None
    seconds, _ = median_seconds(lambda: torch.mm(a, b), repeats, long_call, lambda: synchronize(device), timer)
    return {"n": n, "seconds": seconds, "gflops": 2 * n ** 3 / seconds / 1e9}


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_added_mb(call, T, D, heads, device, mode, dtype=torch.float32):
    """Peak memory (MB) that one call adds on top of its (1, heads, T, D) inputs of ``dtype``, in
    this process, which should be fresh on the CPU: a small warm-up call first (one-time
    initialisation is not counted). CPU: VmHWM - VmRSS after resetting the high-water mark; CUDA:
    max_memory_allocated delta (exact in any process: the allocator's own count)."""
    with_grad = mode == "forward_backward"
    small = make_inputs(min(T, 32), D, heads, device, with_grad, dtype=dtype)
    run_once(call, *small, mode, torch.randn_like(small[0]))
    del small
    q, k, v = make_inputs(T, D, heads, device, with_grad, dtype=dtype)
    grad_out = torch.randn_like(q)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        run_once(call, q, k, v, mode, grad_out)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / 2 ** 20
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark VmHWM to the current RSS
    before = _status_kb("VmRSS")
    run_once(call, q, k, v, mode, grad_out)
    return (_status_kb("VmHWM") - before) / 1024


def run_child(module, spec):
    """``python -m module --_child <spec as JSON>`` in a fresh process: (the last number it prints, "")
    or (None, a note saying why it failed)."""
    proc = subprocess.run([sys.executable, "-m", module, "--_child", json.dumps(spec)],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode
        return None, f"memory child failed: {tail}"
    return float(proc.stdout.strip().splitlines()[-1]), ""


def loglog_axes(ax, title, ylabel, fontsize=9):
    """Style one benchmark panel: log2 T on x, log y, title, labels and grid (every bench plot)."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=fontsize)
    ax.set_xlabel("T")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def train_py(config_files, iters):
    """tokens/s that train.py reports for ``iters`` optimizer steps after one warm-up step, with
    logging every step and no evaluation inside the window (harmonic mean over the logged steps)."""
    import train  # here, not at the top: the fresh processes of the memory measurement skip it
    with tempfile.TemporaryDirectory() as out:
        train.main([*config_files, f"--out_dir={out}", f"--max_iters={iters + 1}", "--log_interval=1",
                    f"--eval_interval={10 ** 9}", "--eval_iters=1", "--always_save_checkpoint=False"])
        with open(os.path.join(out, "log.jsonl")) as f:
            rows = [json.loads(line) for line in f if '"tok_per_s"' in line]
    rates = [r["tok_per_s"] for r in rows[1:]]  # drop the warm-up step
    return len(rates) / sum(1.0 / r for r in rates)  # harmonic mean = total tokens / total time
