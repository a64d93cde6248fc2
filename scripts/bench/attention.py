"""Benchmark of attention mechanisms: wall time and peak memory against sequence length T.

Measures, in one run, on the same random (1, H, T, D) float32 inputs (B*H = --heads):
  - ``fastmax1_<impl>`` / ``fastmax2_<impl>``: Fastmax p = 1 / p = 2 (attention/fastmax/, default
    parameters) through each fast path: ``pytorch`` (chunked.py) always, ``triton`` on CUDA only
    (on CPU the Triton interpreter is a correctness tool, not a fast path);
  - ``authors1`` / ``authors2``: the authors' PyTorch formulation (authors_baseline.py: per-position
    cumulative sums of k (x) v and k (x) k (x) v, plain autograd);
  - ``sdpa``: torch.nn.functional.scaled_dot_product_attention (exact softmax attention);
for every T in --T, D in --D, causal and not, in two modes: ``forward`` (under torch.no_grad) and
``forward_backward`` (forward with autograd, then backward of a random output gradient).

Time: median of --repeats samples after one warm-up call (one call when a call takes over --long
seconds); a sample of a call shorter than 0.1 s is the mean over a loop of calls lasting ~0.1 s, torch threads = --threads (stated in every row). A configuration is skipped (row with a
note) when the same method at the previous T took longer than --budget seconds, or when its
estimated memory exceeds --max_gb.
Peak memory (--memory subprocess, the default on CPU): every (method, T, D, causal, mode) is run
once in a fresh Python process that makes one small warm-up call (one-time library
initialisation is not counted), allocates the inputs, resets the kernel's resident-set
high-water mark (writes 5 to /proc/self/clear_refs), runs one call and reports VmHWM - VmRSS
measured just before the call: the peak of the resident memory the call adds (tensors, autograd
buffers, allocator slack). On CUDA: torch.cuda.max_memory_allocated minus the allocation before
the call. --memory none skips it.

Writes <out>.csv, <out>.json (rows, settings and the issue's targets: linearity in T, speed-ups
against SDPA, memory against the authors' formulation, break-even T per configuration) and a
log-log <out>.png (time and memory against T).

``--suite layer`` (DenseAttention paper, throughput experiment): tokens/s of one encoder layer
(non-causal, model width = head dim = --D, one head) against T: a DANet block (model.DANetBlock,
global layer) with the dense mechanism in the linear, quadratic and auto regimes, and a softmax
transformer block (model.Block, SDPA). Every call processes B = max(1, --layer_tokens // T)
sequences, so all T see the same number of tokens. Time per token is seconds / (B T). Writes
<out>.csv/.json/.png with the issue's targets (linear-regime time per token at the largest T
against T = 1024; DANet linear vs softmax throughput at T = 16384; auto against the better regime).

Usage: nice -n 10 python -m scripts.bench.attention [--T 256,...,32768] [--D 32,64] [--threads 2]
       python -m scripts.bench.attention --suite layer --out results/bench_danet_layer/bench_danet_layer
"""
import argparse
import json
import math
import os
import platform

import torch
import torch.nn.functional as F

import attention
import attention.fastmax  # noqa: F401
from attention.fastmax.authors_baseline import authors_formulation
from data import write_json
import provenance
from scripts.bench.common import (loglog_axes, make_inputs, median_seconds, parse_list, peak_added_mb, run_child,
                                  run_once, synchronize, write_csv)

FIELDS = ["method", "mode", "causal", "T", "D", "heads", "threads", "device", "seconds", "repeats",
          "peak_mb", "note"]
MODES = ("forward", "forward_backward")


def methods_for(device, wanted):
    names = ["fastmax1_pytorch", "fastmax2_pytorch", "authors1", "authors2", "sdpa"]
    if device == "cuda":
        names[2:2] = ["fastmax1_triton", "fastmax2_triton"]
    return [m for m in names if wanted is None or m in wanted]


def make_call(method, causal):
    """A function (q, k, v) -> out for the method."""
    if method.startswith("fastmax"):
        p, impl = int(method[7]), method.split("_")[1]
        module = attention.build("fastmax", p=p, implementation=impl)
        return lambda q, k, v: module(q, k, v, causal)
    if method.startswith("authors"):
        p = int(method[7])
        return lambda q, k, v: authors_formulation(q, k, v, causal, p=p)
    if method == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    raise ValueError(f"unknown method {method}")


def estimated_bytes(method, T, D, heads, causal, mode):
    """Rough float32 memory of the largest tensors of a call (for skipping, not reported)."""
    base = 8 * heads * T * D * 4
    if method.startswith("authors") and causal:
        features = D ** int(method[7])
        return base + heads * T * features * D * 4 * (3 if mode == "forward_backward" else 2)
    return base  # SDPA's flash backends (CPU and CUDA) keep O(T) state, no (T, T) weights


def time_call(method, mode, causal, T, D, heads, device, repeats, long_call):
    call = make_call(method, causal)
    q, k, v = make_inputs(T, D, heads, device, mode == "forward_backward")
    grad_out = torch.randn(1, heads, T, D, generator=torch.Generator().manual_seed(1)).to(device)
    return median_seconds(lambda: run_once(call, q, k, v, mode, grad_out), repeats, long_call,
                          lambda: synchronize(device))


def measure_peak_child(spec):
    """In a fresh process: peak memory (MB) that one call adds on top of its inputs."""
    torch.set_num_threads(spec["threads"])
    call = make_call(spec["method"], spec["causal"])
    return peak_added_mb(call, spec["T"], spec["D"], spec["heads"], spec["device"], spec["mode"])


def measure_peak(spec):
    return run_child("scripts.bench.attention", spec)


def break_even(rows, method, sdpa, mode, causal, D):
    """Smallest T (log-log interpolation on the grid) from which ``method`` is faster than SDPA at
    every measured larger T; None if never, "below grid" if already at the smallest T."""
    pairs = []
    for r in rows:
        if r["mode"] == mode and r["causal"] == causal and r["D"] == D and r["seconds"] is not None:
            pairs.append((r["T"], r["method"], r["seconds"]))
    ours = {T: s for T, m, s in pairs if m == method}
    theirs = {T: s for T, m, s in pairs if m == sdpa}
    grid = sorted(set(ours) & set(theirs))
    if not grid:
        return None
    faster = [ours[T] <= theirs[T] for T in grid]
    if not faster[-1]:
        return None
    i = len(grid) - 1
    while i > 0 and faster[i - 1]:
        i -= 1
    if i == 0:
        return "below grid" if faster[0] else None
    t0, t1 = grid[i - 1], grid[i]
    r0 = math.log(ours[t0] / theirs[t0])
    r1 = math.log(ours[t1] / theirs[t1])
    frac = r0 / (r0 - r1) if r0 != r1 else 0.0
    return round(math.exp(math.log(t0) + frac * (math.log(t1) - math.log(t0))))


def lookup(rows, key, **where):
    for r in rows:
        if all(r[k] == v for k, v in where.items()):
            return r[key]
    return None


def targets(rows, methods):
    """The issue's performance targets, evaluated on the measured rows (None = not measured)."""
    out = {"linearity_16384_vs_16x1024": [], "break_even_T_vs_sdpa": []}
    for method in methods:
        if not method.startswith("fastmax"):
            continue
        for D in sorted({r["D"] for r in rows}):
            for causal in (False, True):
                for mode in MODES:
                    where = dict(method=method, mode=mode, causal=causal, D=D)
                    t_long, t_short = lookup(rows, "seconds", T=16384, **where), lookup(rows, "seconds", T=1024, **where)
                    if t_long is not None and t_short is not None:
                        ratio = t_long / (16 * t_short)
                        out["linearity_16384_vs_16x1024"].append({**where, "ratio": ratio, "ok": ratio <= 1.2})
                    out["break_even_T_vs_sdpa"].append(
                        {**where, "T": break_even(rows, method, "sdpa", mode, causal, D)})

    def speedup(method, D, mode):
        ours = lookup(rows, "seconds", method=method, mode=mode, causal=True, D=D, T=16384)
        sdpa = lookup(rows, "seconds", method="sdpa", mode=mode, causal=True, D=D, T=16384)
        return None if ours is None or sdpa is None else sdpa / ours

    out["causal_p1_D64_T16384_speedup_vs_sdpa"] = {
        mode: {"speedup": speedup("fastmax1_pytorch", 64, mode), "target": 10.0} for mode in MODES}
    out["causal_p2_D32_T16384_speedup_vs_sdpa"] = {
        mode: {"speedup": speedup("fastmax2_pytorch", 32, mode), "target": 1.0} for mode in MODES}
    ours = lookup(rows, "peak_mb", method="fastmax2_pytorch", mode="forward_backward", causal=True, D=32, T=4096)
    theirs = lookup(rows, "peak_mb", method="authors2", mode="forward_backward", causal=True, D=32, T=4096)
    out["causal_p2_D32_T4096_memory_authors_over_ours"] = {
        "ratio": None if not ours or theirs is None else theirs / ours, "target": 10.0, "ours_mb": ours,
        "authors_mb": theirs}
    return out


def plot(rows, methods, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    Ds = sorted({r["D"] for r in rows})
    panels = [(causal, mode) for causal in (False, True) for mode in MODES]
    metrics = [("seconds", "time (s)"), ("peak_mb", "peak memory (MB)")]
    fig, axes = plt.subplots(len(Ds) * len(metrics), len(panels), figsize=(4.2 * len(panels), 3.2 * len(Ds) * 2),
                             squeeze=False)
    for di, D in enumerate(Ds):
        for mi, (key, label) in enumerate(metrics):
            for pi, (causal, mode) in enumerate(panels):
                ax = axes[di * len(metrics) + mi][pi]
                for method in methods:
                    pts = sorted((r["T"], r[key]) for r in rows if r["method"] == method and r["D"] == D
                                 and r["causal"] == causal and r["mode"] == mode and r[key])
                    if pts:
                        ax.plot(*zip(*pts), marker="o", ms=3, label=method)
                loglog_axes(ax, f"D={D} {'causal' if causal else 'non-causal'} {mode}", label)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


LAYER_METHODS = ("danet_linear", "danet_quadratic", "danet_auto", "softmax_layer")
LAYER_FIELDS = ["method", "mode", "T", "batch", "D", "threads", "device", "seconds", "repeats", "tokens_per_s",
                "regime", "note"]


def make_layer(method, D):
    """One non-causal encoder layer of width D with one head: a DANet block (global, ``dense`` in
    the regime named by ``method``) or a softmax transformer block."""
    import model as model_lib
    if method == "softmax_layer":
        config = model_lib.ModelConfig(n_layer=1, n_head=1, n_embd=D, block_size=1, attention="softmax",
                                       pos_emb="none")
        return model_lib.Block(config, causal=False)
    regime = method.split("_")[1]
    config = model_lib.ModelConfig(n_layer=1, n_head=1, n_embd=D, block_size=1, block="danet", attention="dense",
                                   attention_params={"regime": regime}, pos_emb="none", bias=False)
    return model_lib.DANetBlock(config, causal=False)


def layer_estimated_bytes(regime, T, batch, D):
    """Rough float32 memory of the largest tensors (for skipping): the quadratic regime keeps a
    (B, T, T) score matrix; the rest is O(B T D)."""
    if regime == "quadratic":
        return 3 * batch * T * T * 4
    return 64 * batch * T * D * 4


def time_layer(layer, mode, T, batch, D, repeats, long_call):
    x = torch.randn(batch, T, D, generator=torch.Generator().manual_seed(0)).requires_grad_(mode == "forward_backward")

    def once():
        if mode == "forward":
            with torch.no_grad():
                layer(x)
        else:
            layer(x).square().mean().backward()
            x.grad = None
            layer.zero_grad(set_to_none=True)

    return median_seconds(once, repeats, long_call)


def layer_targets(rows):
    """The DenseAttention issue's throughput targets on the measured rows (None = not measured)."""
    out = {}
    for mode in MODES:
        def per_token(method, T):
            r = [r for r in rows if r["method"] == method and r["mode"] == mode and r["T"] == T and r["seconds"]]
            return r[0]["seconds"] / (r[0]["batch"] * T) if r else None

        Ts = sorted({r["T"] for r in rows if r["method"] == "danet_linear" and r["mode"] == mode and r["seconds"]})
        t_max = Ts[-1] if Ts else None
        a, b = (per_token("danet_linear", t_max), per_token("danet_linear", 1024)) if t_max else (None, None)
        lin, soft = per_token("danet_linear", 16384), per_token("softmax_layer", 16384)
        auto_vs_best = []
        for T in sorted({r["T"] for r in rows}):
            auto = per_token("danet_auto", T)
            best = [t for t in (per_token("danet_linear", T), per_token("danet_quadratic", T)) if t]
            if auto and best:
                auto_vs_best.append({"T": T, "ratio": auto / min(best), "ok": auto / min(best) <= 1.10})
        out[mode] = {
            "linear_time_per_token_Tmax_over_T1024": {"T_max": t_max, "ratio": a / b if a and b else None,
                                                       "target": 1.5},
            "linear_over_softmax_throughput_T16384": {"ratio": soft / lin if lin and soft else None,
                                                      "target": 10.0},
            "auto_over_best_regime": auto_vs_best,
        }
    return out


def plot_layers(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(MODES), figsize=(5.5 * len(MODES), 4), squeeze=False)
    for ax, mode in zip(axes[0], MODES):
        for method in LAYER_METHODS:
            pts = sorted((r["T"], r["tokens_per_s"]) for r in rows
                         if r["method"] == method and r["mode"] == mode and r["tokens_per_s"])
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=method)
        loglog_axes(ax, f"one encoder layer, {mode}", "tokens / s")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run_layer_suite(args):
    """The ``--suite layer`` benchmark (see the module docstring); writes <out>.csv/.json/.png."""
    max_bytes = (args.max_gb * 2 ** 30 if args.max_gb is not None
                 else 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    Ts, (D,) = parse_list(args.T, int), parse_list(args.D, int)
    rows = []
    for mode in parse_list(args.modes, str):
        for method in LAYER_METHODS:
            torch.manual_seed(0)
            layer = make_layer(method, D)
            previous = None
            for T in Ts:
                batch = max(1, args.layer_tokens // T)
                regime = layer.attn.mechanism.regime_for(T, D, False) if method.startswith("danet") else "softmax"
                row = dict(method=method, mode=mode, T=T, batch=batch, D=D, threads=args.threads, device="cpu",
                           seconds=None, repeats=0, tokens_per_s=None, regime=regime, note="")
                if previous is not None and previous > args.budget:
                    row["note"] = f"skipped: T={T // 2} took {previous:.1f} s > budget"
                elif layer_estimated_bytes(regime, T, batch, D) > max_bytes:
                    row["note"] = "skipped: estimated memory above limit"
                else:
                    row["seconds"], row["repeats"] = time_layer(layer, mode, T, batch, D, args.repeats, args.long)
                    row["tokens_per_s"] = batch * T / row["seconds"]
                    previous = row["seconds"]
                rows.append(row)
                print(f"{method:16s} {mode:16s} T={T:6d} B={batch:4d} regime={regime:9s} "
                      f"tok/s={row['tokens_per_s'] and round(row['tokens_per_s'])} {row['note']}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_csv(args.out + ".csv", rows, LAYER_FIELDS)
    summary = layer_targets(rows)
    settings = dict(vars(args), torch=torch.__version__, machine=platform.processor() or platform.machine(),
                    cpus=os.cpu_count())
    settings.pop("_child", None)
    write_json(args.out + ".json", {"settings": settings, "targets": summary, "rows": rows})
    plot_layers(rows, args.out + ".png")
    provenance.record(args.out, commit=args.commit)
    print(json.dumps(summary, indent=1))
    return rows, summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", default=None, help="comma list (default: 256 ... 32768; --suite layer: 128 ... 65536)")
    ap.add_argument("--D", default=None, help="comma list (default: 32,64; --suite layer: 64)")
    ap.add_argument("--heads", type=int, default=8, help="B*H (inputs are (1, heads, T, D))")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--long", type=float, default=5.0, help="a call longer than this is timed once")
    ap.add_argument("--budget", type=float, default=120.0, help="skip larger T after a call this long (s)")
    ap.add_argument("--max_gb", type=float, default=None, help="skip calls estimated above this (default: half the RAM)")
    ap.add_argument("--methods", default=None, help="comma list (default: all for the device)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--causal", default="False,True")
    ap.add_argument("--memory", default="subprocess", choices=["subprocess", "none"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default="results/bench_attention")
    ap.add_argument("--suite", default="attention", choices=["attention", "layer"],
                    help="attention: the mechanisms on (1, heads, T, D); layer: one encoder layer's tokens/s")
    ap.add_argument("--layer_tokens", type=int, default=16384, help="--suite layer: tokens per call (B = this // T)")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        print(measure_peak_child(json.loads(args._child)))
        return None

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    args.commit = provenance.git_commit()
    layer_suite = args.suite == "layer"
    args.T = args.T or ",".join(str(2 ** i) for i in (range(7, 17) if layer_suite else range(8, 16)))
    args.D = args.D or ("64" if layer_suite else "32,64")
    if layer_suite:
        return run_layer_suite(args)
    max_bytes = (args.max_gb * 2 ** 30 if args.max_gb is not None
                 else 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    methods = methods_for(args.device, None if args.methods is None else parse_list(args.methods, str))
    Ts, Ds = parse_list(args.T, int), parse_list(args.D, int)
    modes = parse_list(args.modes, str)
    causals = [c.strip() == "True" for c in args.causal.split(",") if c.strip()]
    rows = []
    for D in Ds:
        for causal in causals:
            for mode in modes:
                for method in methods:
                    previous = None
                    for T in Ts:
                        row = dict(method=method, mode=mode, causal=causal, T=T, D=D, heads=args.heads,
                                   threads=args.threads, device=args.device, seconds=None, repeats=0, peak_mb=None,
                                   note="")
                        if previous is not None and previous > args.budget:
                            row["note"] = f"skipped: T={T // 2} took {previous:.1f} s > budget"
                        elif estimated_bytes(method, T, D, args.heads, causal, mode) > max_bytes:
                            row["note"] = "skipped: estimated memory above limit"
                        else:
                            row["seconds"], row["repeats"] = time_call(method, mode, causal, T, D, args.heads,
                                                                       args.device, args.repeats, args.long)
                            previous = row["seconds"]
                            if args.memory == "subprocess":
                                spec = dict(method=method, mode=mode, causal=causal, T=T, D=D, heads=args.heads,
                                            threads=args.threads, device=args.device)
                                row["peak_mb"], row["note"] = measure_peak(spec)
                        rows.append(row)
                        print(f"{method:18s} {mode:16s} causal={causal!s:5s} D={D:3d} T={T:6d} "
                              f"t={row['seconds'] if row['seconds'] is None else round(row['seconds'], 5)} "
                              f"peak_mb={row['peak_mb'] if row['peak_mb'] is None else round(row['peak_mb'], 1)} "
                              f"{row['note']}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_csv(args.out + ".csv", rows, FIELDS)
    summary = targets(rows, methods)
    settings = dict(vars(args), torch=torch.__version__, threads=args.threads, machine=platform.processor() or
                    platform.machine(), cpus=os.cpu_count(), memory_method=(
                        "peak resident memory added by one call, fresh process per measurement (VmHWM - VmRSS "
                        "after clear_refs)" if args.device == "cpu" else "torch.cuda.max_memory_allocated delta"))
    settings.pop("_child", None)
    write_json(args.out + ".json", {"settings": settings, "targets": summary, "rows": rows})
    plot(rows, methods, args.out + ".png")
    provenance.record(args.out, commit=args.commit)
    print(json.dumps(summary, indent=1))
    return rows, summary


if __name__ == "__main__":
    main()
