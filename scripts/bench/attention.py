"""Benchmark of every registered attention: wall time, peak memory and FLOPs against sequence length T.

Methods (``--methods``, each ``name``, ``name:key=value,key=value`` or ``@path/to/config.py``):
  - a registered attention (``attention.registered()``) with its parameters, e.g. ``fastmax:p=2``,
    ``tree:E=0.3,sampler=alignment``, ``dense:regime=quadratic``; values are Python literals
    (bare words stay strings) checked by ``attention.check_params``;
  - ``@configs/attention/<file>.py[:key=value,...]``: the attention and parameters of an attention
    config file (its other keys, e.g. dense's ``block``, belong to the model and are ignored),
    labelled by the file's stem (``fastmax1``);
  - ``sdpa``: torch.nn.functional.scaled_dot_product_attention, the reference of every ratio;
  - ``authors:p=1|2``: the Fastmax authors' PyTorch formulation (attention/fastmax/authors_baseline.py:
    per-position cumulative sums of k (x) v and k (x) k (x) v, plain autograd);
  - the old names ``fastmax1_pytorch``, ``fastmax2_pytorch``, ``fastmax1_triton``, ``fastmax2_triton``,
    ``authors1``, ``authors2`` (kept as aliases, labelled as typed).
Several methods: separate arguments, or one comma list (a comma item with "=" and no ":" continues the
previous method's parameters: ``sdpa,fastmax:p=2,a2=0.4,linear``). Default: every file of
configs/attention/ with its parameters, then sdpa, authors:p=1 and authors:p=2 (on CUDA also fastmax
p = 1 and 2 through the Triton kernels); ``--add_methods`` appends to the list (tree at other E and
samplers, the dense op's quadratic regime). A method that cannot run a configuration gets rows with a
note, not an error: causal for an attention whose ``attention.causal_support`` is "unsupported"
(linformer), forward+backward for one that is not ``attention.is_trainable`` (tree); "leaky" causal
methods (reformer, informer: the chunking or the top-u choice sees later tokens) run and say so.

Inputs: random (1, heads, T, D) float32 q, k, v (B*H = --heads), the module built with the model
context (layer_idx 0, block_size T, n_head heads, head_dim D) and in training mode only for
forward+backward. For every T in --T, D in --D, causal and not, two modes: ``forward`` (under
torch.no_grad) and ``forward_backward`` (forward with autograd, then backward of a random output
gradient).

Time: median of --repeats samples after one warm-up call (a call longer than --long seconds is timed
once, and a warm-up is never a sample: it may hold a kernel's compilation); a sample of a call
shorter than 0.1 s is the mean over a loop of calls lasting ~0.1 s (scripts/bench/common.py); torch
threads = --threads. CUDA: CUDA events around the calls. A method stops at the first T whose call is
predicted to take more than --budget seconds (log-log extrapolation from its two previous T, slope
clamped to [1, 3]; one previous T: linear growth), whose estimated memory exceeds --max_gb, or after
a call that failed (its error in the row's note).
Peak memory (--memory subprocess, the default): each (method, T, D, causal, mode) with T in
--memory_T (default: every T) once more in a fresh Python process that makes one small warm-up call,
allocates the inputs, resets the resident-set high-water mark (5 -> /proc/self/clear_refs), runs one
call and reports VmHWM - VmRSS measured just before the call: the resident memory the call adds
(tensors, autograd buffers, allocator slack). CUDA: torch.cuda.max_memory_allocated growth.
FLOPs (analytic, ``flop_count``): 2 x the multiply-adds of the products that the method's own path
performs at its block granularity (blocks computed and then masked count, skipped blocks do not;
elementwise work, exp and normalisation are left out); forward+backward = 3 x forward (the backward
of a product is two products of its size; recomputation inside a custom backward is not counted).
A registered attention's formula is its class's (``attention.Attention.flops`` and
``flop_formula``); a module that counts its own work (tree attention, ``stats()``) reports it
after it has run (``reported_flops``), else its formula's estimate counts. The formulas are
checked against torch's FlopCounterMode on the fast paths in tests/scripts/test_bench_attention.py.
Achieved GFLOP/s = FLOPs / time, and its fraction of this machine's matmul peak: a float32
(--probe_n x --probe_n) @ (--probe_n x --probe_n) product timed with the same threads at the start
and at the end of the run (the larger of the two is the peak).

Writes <out>.csv (one row per configuration), <out>.json (settings, the probe, the methods with
their FLOP formula, the rows, and the summary: per method the linearity check of issue 26,
time(16384) / (16 x time(1024)) <= 1.5, the speed-up against SDPA at T = 16384 in the same mode,
the break-even T against SDPA, and issue 27's operator aims), <out>.png (log-log time against T per
method, one panel per (mode, causal) at --plot_D) and <out>.md (per D, mode and causal: time / SDPA
time per T, and the summary); then ``provenance.record(out)``.

``--suite layer`` (DenseAttention paper, throughput experiment): tokens/s of one encoder layer
(non-causal, model width = head dim = --D, one head) against T: a DANet block (model.DANetBlock,
global layer) with the dense mechanism in the linear, quadratic and auto regimes, and a softmax
transformer block (model.Block, SDPA). Every call processes B = max(1, --layer_tokens // T)
sequences, so all T see the same number of tokens. Time per token is seconds / (B T). Writes
<out>.csv/.json/.png with the issue's targets (linear-regime time per token at the largest T
against T = 1024; DANet linear vs softmax throughput at T = 16384; auto against the better regime).

Usage: nice -n 10 python -m scripts.bench.attention [--T 128,...,65536] [--D 32,64,128] [--threads 2]
           [--methods sdpa fastmax:p=2 @configs/attention/linear.py] [--add_methods tree:E=0.3]
       python -m scripts.bench.attention --suite layer --out results/bench_danet_layer/bench_danet_layer
       python -m scripts.bench.attention --plot_only --out results/bench_attention/all   (draws <out>.png
           again from <out>.json, no timing; the method styles: scripts/plot_style.py)
(docs/benchmark.md: the full CPU run.)
"""
import argparse
import json
import math
import os
import platform

import torch

import configurator
from data import write_json
import provenance
from scripts import plot_style
from scripts.bench.common import loglog_axes, matmul_peak, median_seconds, parse_list, write_csv
# the method syntax, calls, FLOPs, estimates and timing live in the library scripts/bench/methods.py
# (shared with scripts/bench/gpu.py); re-exported here, where tests and scripts/analysis/attention_maps.py
# have always found them
from scripts.bench.methods import (  # noqa: F401
    ALIASES, AUTHORS_FLOP_FORMULA, AUTHORS_PARAMS, CONFIG_DIR, SDPA_FLOP_FORMULA, Method, default_methods,
    estimated_bytes, first_line, flop_count, flop_formula, load_config, make_call, parse_method, peak_memory,
    predicted_seconds, resolve_methods, split_methods, time_call, unsupported,
)

FIELDS = ["method", "spec", "mode", "causal", "T", "D", "heads", "threads", "device", "seconds", "repeats",
          "peak_mb", "minor_faults_per_call", "gflop", "flop_source", "gflop_per_s", "peak_fraction", "note"]
MODES = ("forward", "forward_backward")
LINEARITY_LIMIT = 1.5  # issue 26: time(16384) within 1.5x of 16 x time(1024)
REFERENCE_STYLE = {"color": "black", "marker": "s", "linestyle": "--"}  # the plot's reference (SDPA)


def run_curve(method, mode, causal, D, Ts, args, max_bytes, probe_gflops):
    """The rows of one method, mode, causal and D over every T (stops as the module docstring says),
    each printed when it is done."""
    reason = unsupported(method, mode, causal)
    leaky = causal and method.causal_support() == "leaky"
    memory_T = None if args.memory_T is None else set(parse_list(args.memory_T, int))
    points, stop = [], [None]  # measured (T, seconds); why the larger T are skipped

    def one(T):
        row = dict(method=method.label, spec=method.spec, mode=mode, causal=causal, T=T, D=D, heads=args.heads,
                   threads=args.threads, device=args.device, seconds=None, repeats=0, peak_mb=None, minor_faults_per_call=None,
                   gflop=None, flop_source="", gflop_per_s=None, peak_fraction=None, note="")
        if reason:
            row["note"] = reason
            return row
        flops = flop_count(method, T, D, args.heads, causal)
        if flops is not None:
            row["gflop"] = flops * (3 if mode == "forward_backward" else 1) / 1e9
            row["flop_source"] = "formula"
        if stop[0] is None:
            need = estimated_bytes(method, T, D, args.heads, causal, mode)
            predicted = predicted_seconds(points, T)
            if need > max_bytes:
                stop[0] = f"skipped: estimated memory {need / 2 ** 30:.1f} GB > {max_bytes / 2 ** 30:.1f} GB (--max_gb)"
            elif predicted is not None and predicted > args.budget:
                stop[0] = f"skipped: predicted {predicted:.1f} s per call > --budget {args.budget:g} s"
        if stop[0] is not None:
            row["note"] = stop[0]
            return row
        try:
            row["seconds"], row["repeats"], module, row["minor_faults_per_call"] = time_call(
                method, mode, causal, T, D, args.heads, args.device, args.repeats, args.long)
        except Exception as exc:  # noqa: BLE001  (a method's failure is a row, not the end of the run)
            row["note"] = f"failed: {first_line(exc)}"
            stop[0] = f"skipped: failed at T={T}"
            return row
        points.append((T, row["seconds"]))
        if module is not None:
            reported = module.reported_flops(T, D, args.heads)
            if reported is not None:
                row["gflop"], row["flop_source"] = reported / 1e9, "reported"
        if row["gflop"] is not None:
            row["gflop_per_s"] = row["gflop"] / row["seconds"]
            row["peak_fraction"] = row["gflop_per_s"] / probe_gflops if probe_gflops else None
        if leaky:
            row["note"] = "leaky causal (attention.causal_support)"
        if args.memory == "subprocess" and (memory_T is None or T in memory_T):
            row["peak_mb"], note = peak_memory(method, mode, causal, T, D, args.heads, args.device, args.threads,
                                               args.imports)
            row["note"] = "; ".join(x for x in (row["note"], note) if x)
        return row

    rows = []
    for T in Ts:
        row = one(T)
        rows.append(row)
        print(f"{row['method']:28s} {mode:16s} causal={causal!s:5s} D={D:3d} T={T:6d} "
              f"t={row['seconds'] if row['seconds'] is None else round(row['seconds'], 5)} "
              f"GFLOP/s={row['gflop_per_s'] if row['gflop_per_s'] is None else round(row['gflop_per_s'], 2)} "
              f"peak_mb={row['peak_mb'] if row['peak_mb'] is None else round(row['peak_mb'], 1)} "
              f"faults/call={row['minor_faults_per_call'] if row['minor_faults_per_call'] is None else round(row['minor_faults_per_call'])} "
              f"{row['note']}", flush=True)
    return rows


# ----------------------------------------------------------------------------------------------
# summaries


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


def summarize(rows, labels, reference="sdpa"):
    """Per (method, mode, causal, D): issue 26's linearity check, the speed-up against SDPA at
    T = 16384, the break-even T against SDPA; and issue 27's operator aims (None = not measured)."""
    out = {"linearity_16384_vs_16x1024": [], "speedup_vs_sdpa_at_16384": [], "break_even_T_vs_sdpa": []}
    for D in sorted({r["D"] for r in rows}):
        for causal in (False, True):
            for mode in MODES:
                for label in labels:
                    where = dict(method=label, mode=mode, causal=causal, D=D)
                    if lookup(rows, "method", **where) is None:
                        continue
                    long_, short = lookup(rows, "seconds", T=16384, **where), lookup(rows, "seconds", T=1024, **where)
                    ratio = long_ / (16 * short) if long_ and short else None
                    out["linearity_16384_vs_16x1024"].append(
                        {**where, "ratio": ratio, "ok": None if ratio is None else ratio <= LINEARITY_LIMIT})
                    if label == reference:
                        continue
                    ref = lookup(rows, "seconds", method=reference, mode=mode, causal=causal, D=D, T=16384)
                    speedup = ref / long_ if ref and long_ else None
                    out["speedup_vs_sdpa_at_16384"].append(
                        {**where, "seconds": long_, "sdpa_seconds": ref, "speedup": speedup,
                         "faster": None if speedup is None else speedup > 1})
                    out["break_even_T_vs_sdpa"].append({**where, "T": break_even(rows, label, reference, mode, causal, D)})

    def per_token_ratio(label, mode, causal, D, T):
        a, b = (lookup(rows, "seconds", method=label, mode=mode, causal=causal, D=D, T=t) for t in (T, 1024))
        return a / (T / 1024 * b) if a and b else None

    def faster(label, mode, D):
        ours = lookup(rows, "seconds", method=label, mode=mode, causal=True, D=D, T=16384)
        ref = lookup(rows, "seconds", method=reference, mode=mode, causal=True, D=D, T=16384)
        return {"speedup": ref / ours if ours and ref else None, "target": 1.0}

    Ds = sorted({r["D"] for r in rows})
    out["aims"] = {
        "dense_linear_time_per_token_32768_over_1024": {
            f"{mode} causal={causal} D={D}": {"ratio": per_token_ratio("dense", mode, causal, D, 32768), "target": 1.2}
            for mode in MODES for causal in (True, False) for D in Ds},
        "fastmax2_causal_D64_speedup_vs_sdpa_at_16384": {mode: faster("fastmax2", mode, 64) for mode in MODES},
    }
    return out


def _fmt(x, digits=3):
    if x is None:
        return "—"
    return f"{x:.{digits}g}"


def markdown(rows, labels, summary, settings, probe, reference="sdpa"):
    """The <out>.md text: per D, mode and causal, time / SDPA time per T, then the summary."""
    lines = [f"# Attention benchmark: time / SDPA time per T ({settings['device']}, {settings['threads']} threads)",
             "",
             f"Inputs (1, {settings['heads']}, T, D) float32; median of {settings['repeats']} samples; "
             f"matmul peak {probe['gflops']:.1f} GFLOP/s (float32 {probe['n']}^3 product, same threads). "
             "A cell is the method's time divided by SDPA's at the same T, D, mode and causal (below 1: faster "
             "than SDPA); the first row is SDPA's time in seconds. — : not measured (over the time budget or "
             "the memory cap, or SDPA missing); n/a: the method cannot run the configuration.",
             ""]
    Ts = sorted({r["T"] for r in rows})
    lin = {(e["method"], e["mode"], e["causal"], e["D"]): e for e in summary["linearity_16384_vs_16x1024"]}
    spd = {(e["method"], e["mode"], e["causal"], e["D"]): e for e in summary["speedup_vs_sdpa_at_16384"]}
    for D in sorted({r["D"] for r in rows}):
        for mode in MODES:
            for causal in (False, True):
                sel = [r for r in rows if r["D"] == D and r["mode"] == mode and r["causal"] == causal]
                if not sel:
                    continue
                lines += [f"## D = {D}, {mode}, {'causal' if causal else 'non-causal'}", "",
                          "| method | " + " | ".join(f"T={T}" for T in Ts)
                          + " | linearity 16384 / (16 x 1024) | speed-up vs SDPA at 16384 | best % of matmul peak |",
                          "|---|" + "---|" * (len(Ts) + 3)]
                ref = {r["T"]: r["seconds"] for r in sel if r["method"] == reference}
                if ref:
                    lines.append(f"| {reference} (seconds) | " + " | ".join(_fmt(ref.get(T)) for T in Ts) + " | "
                                 + _fmt((lin.get((reference, mode, causal, D)) or {}).get("ratio")) + " | "
                                 + ("1" if ref.get(16384) else "—") + " | "
                                 + _fmt(_best_fraction(sel, reference)) + " |")
                for label in labels:
                    if label == reference:
                        continue
                    mine = {r["T"]: r for r in sel if r["method"] == label}
                    if not mine:
                        continue
                    cells = []
                    for T in Ts:
                        r = mine.get(T)
                        if r is None:
                            cells.append("")
                        elif r["note"].startswith("n/a"):
                            cells.append("n/a")
                        else:
                            cells.append(_fmt(r["seconds"] / ref[T] if r["seconds"] and ref.get(T) else None))
                    key = (label, mode, causal, D)
                    lines.append(f"| {label} | " + " | ".join(cells) + " | "
                                 + _fmt((lin.get(key) or {}).get("ratio")) + " | "
                                 + _fmt((spd.get(key) or {}).get("speedup")) + " | "
                                 + _fmt(_best_fraction(sel, label)) + " |")
                lines.append("")
    return "\n".join(lines)


def _best_fraction(rows, label):
    fractions = [r["peak_fraction"] for r in rows if r["method"] == label and r["peak_fraction"] is not None]
    return 100 * max(fractions) if fractions else None


def plot(rows, labels, path, D, reference="sdpa"):
    """Log-log time against T per method, one panel per (mode, causal) at head dim D; each method
    in its ``scripts.plot_style`` style (the reference: black, dashed), one legend right of the
    panels. Returns the figure (closed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [(mode, causal) for mode in MODES for causal in (False, True)]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9), squeeze=False)
    styles = plot_style.figure_styles([label for label in labels if label != reference])
    for ax, (mode, causal) in zip(axes.flat, panels):
        for label in labels:
            pts = sorted((r["T"], r["seconds"]) for r in rows if r["method"] == label and r["D"] == D
                         and r["mode"] == mode and r["causal"] == causal and r["seconds"])
            if pts:
                style = REFERENCE_STYLE if label == reference else styles[label]
                ax.plot(*zip(*pts), ms=4, lw=1.6 if label == reference else 1.2, label=label, **style)
        loglog_axes(ax, f"D={D} {'causal' if causal else 'non-causal'} {mode}", "time per call (s)")
    plot_style.legend_outside(fig, fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return fig


# ----------------------------------------------------------------------------------------------
# the layer suite (DenseAttention paper, throughput experiment)

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
    """Tokens/s against T per layer method, one panel per mode, one legend right of the panels.
    Returns the figure (closed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(MODES), figsize=(5.5 * len(MODES), 4), squeeze=False)
    styles = plot_style.figure_styles(LAYER_METHODS)
    for ax, mode in zip(axes[0], MODES):
        for method in LAYER_METHODS:
            pts = sorted((r["T"], r["tokens_per_s"]) for r in rows
                         if r["method"] == method and r["mode"] == mode and r["tokens_per_s"])
            if pts:
                ax.plot(*zip(*pts), ms=4, label=method, **styles[method])
        loglog_axes(ax, f"one encoder layer, {mode}", "tokens / s")
    plot_style.legend_outside(fig, fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return fig


def replot(out, plot_D=64):
    """Draw ``<out>.png`` again from the rows of ``<out>.json`` (``--plot_only``: no timing; the
    CSV, JSON, table and manifest are left as they are): the layer suite's figure when the rows
    hold tokens/s, else the attention figure of the JSON's methods (else the rows' methods in
    order) at head dim ``plot_D`` if measured, else 64, else the first D (the run's rule)."""
    with open(out + ".json") as f:
        data = json.load(f)
    rows = data["rows"]
    if rows and "tokens_per_s" in rows[0]:
        return plot_layers(rows, out + ".png")
    labels = ([m["label"] for m in data["methods"]] if data.get("methods")
              else list(dict.fromkeys(r["method"] for r in rows)))
    Ds = sorted({r["D"] for r in rows})
    D = plot_D if plot_D in Ds else (64 if 64 in Ds else Ds[0])
    return plot(rows, labels, out + ".png", D)


def memory_limit(args):
    """Bytes a call may be estimated to need: --max_gb, or half the RAM."""
    if args.max_gb is not None:
        return args.max_gb * 2 ** 30
    return 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def run_layer_suite(args):
    """The ``--suite layer`` benchmark (see the module docstring); writes <out>.csv/.json/.png."""
    max_bytes = memory_limit(args)
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
    write_json(args.out + ".json", {"settings": settings, "targets": summary, "rows": rows})
    plot_layers(rows, args.out + ".png")
    provenance.record(args.out, commit=args.commit)
    print(json.dumps(summary, indent=1))
    return rows, summary


# ----------------------------------------------------------------------------------------------
# the attention suite


def run_attention_suite(args, methods):
    """The benchmark of ``methods`` (module docstring); writes <out>.csv/.json/.png/.md."""
    labels = [m.label for m in methods]
    Ts, Ds = parse_list(args.T, int), parse_list(args.D, int)
    modes = parse_list(args.modes, str)
    causals = [c.strip() == "True" for c in args.causal.split(",") if c.strip()]
    max_bytes = memory_limit(args)
    probes = [matmul_peak(args.probe_n, args.device, args.repeats)]
    print(f"matmul probe: {probes[0]['gflops']:.1f} GFLOP/s (n = {args.probe_n}, {args.threads} threads)", flush=True)
    peak = probes[0]["gflops"]
    rows = []
    for D in Ds:
        for causal in causals:
            for mode in modes:
                for method in methods:
                    rows += run_curve(method, mode, causal, D, Ts, args, max_bytes, peak)
    probes.append(matmul_peak(args.probe_n, args.device, args.repeats))
    probe = dict(max(probes, key=lambda p: p["gflops"]), start=probes[0], end=probes[1])
    for r in rows:  # fractions of the run's peak (the larger of the two probes)
        if r["gflop_per_s"] is not None:
            r["peak_fraction"] = r["gflop_per_s"] / probe["gflops"]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_csv(args.out + ".csv", rows, FIELDS)
    summary = summarize(rows, labels)
    settings = dict(vars(args), torch=torch.__version__, machine=provenance.machine(), memory_method=(
        "peak resident memory added by one call, fresh process per measurement (VmHWM - VmRSS after clear_refs)"
        if args.device == "cpu" else "torch.cuda.max_memory_allocated delta"),
        flops_rule="analytic forward FLOPs (2 x multiply-adds of the products of the method's own path); "
                   "forward_backward = 3 x forward; tree: reported inner products when measured")
    method_info = [dict(m.as_dict(), spec=m.spec, trainable=m.trainable(), causal_support=m.causal_support(),
                        flop_formula=flop_formula(m)) for m in methods]
    write_json(args.out + ".json", {"settings": settings, "probe": probe, "methods": method_info,
                                    "summary": summary, "rows": rows})
    plot_D = args.plot_D if args.plot_D in Ds else (64 if 64 in Ds else Ds[0])
    plot(rows, labels, args.out + ".png", plot_D)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(rows, labels, summary, settings, probe))
    provenance.record(args.out, commit=args.commit)
    print(json.dumps(summary["aims"], indent=1))
    return rows, summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", default=None, help="comma list (default: 128 ... 65536, powers of 2)")
    ap.add_argument("--D", default=None, help="comma list (default: 32,64,128; --suite layer: 64)")
    ap.add_argument("--heads", type=int, default=8, help="B*H (inputs are (1, heads, T, D))")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--long", type=float, default=5.0, help="a call longer than this is timed once")
    ap.add_argument("--budget", type=float, default=120.0,
                    help="seconds per call: a method stops at the first T predicted to take longer")
    ap.add_argument("--max_gb", type=float, default=None, help="skip calls estimated above this (default: half the RAM)")
    ap.add_argument("--methods", nargs="+", default=None,
                    help="name, name:key=value,..., @configs/attention/<file>.py, sdpa, authors:p=1|2 "
                         "(default: every attention config, sdpa, authors:p=1, authors:p=2)")
    ap.add_argument("--add_methods", nargs="+", default=None, help="appended to --methods (or to the default list)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--causal", default="False,True")
    ap.add_argument("--memory", default="subprocess", choices=["subprocess", "none"])
    ap.add_argument("--memory_T", default=None, help="comma list: measure peak memory at these T only (default: all)")
    ap.add_argument("--probe_n", type=int, default=2048, help="size of the matmul peak probe")
    ap.add_argument("--plot_D", type=int, default=64, help="head dim of the plot (default 64, else the first D)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None,
                    help="output path without extension (default results/bench_attention/all; "
                         "--suite layer: results/bench_danet_layer/bench_danet_layer)")
    ap.add_argument("--suite", default="attention", choices=["attention", "layer"],
                    help="attention: the mechanisms on (1, heads, T, D); layer: one encoder layer's tokens/s")
    ap.add_argument("--layer_tokens", type=int, default=16384, help="--suite layer: tokens per call (B = this // T)")
    ap.add_argument("--plot_only", action="store_true",
                    help="only draw <out>.png again from <out>.json (no timing; --out, --plot_D apply)")
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="FILE",
                    help="a Python file that registers an attention (attention.register) to benchmark; repeatable")
    args = ap.parse_args(argv)
    try:
        _, args.imports = configurator.import_files([f"--import={path}" for path in args.imports])
    except configurator.ConfigError as e:
        ap.error(str(e))
    if args.plot_only:
        out = args.out or ("results/bench_danet_layer/bench_danet_layer" if args.suite == "layer"
                           else "results/bench_attention/all")
        replot(out, args.plot_D)
        print(f"wrote {out}.png")
        return None

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    args.commit = provenance.git_commit()
    layer_suite = args.suite == "layer"
    args.T = args.T or ",".join(str(2 ** i) for i in range(7, 17))
    args.D = args.D or ("64" if layer_suite else "32,64,128")
    if layer_suite:
        args.out = args.out or "results/bench_danet_layer/bench_danet_layer"
        return run_layer_suite(args)
    args.out = args.out or "results/bench_attention/all"
    try:
        methods = resolve_methods(args.methods, args.add_methods, args.device)
    except ValueError as e:
        ap.error(str(e))
    return run_attention_suite(args, methods)


if __name__ == "__main__":
    main()
