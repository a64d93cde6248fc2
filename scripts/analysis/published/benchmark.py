"""Benchmarks of the attentions (scripts/bench/attention.py and its suites, the authors' Fastmax
beside ours, the offline compilation of the Triton kernels): issue 27's performance aims
(docs/benchmark.md), docs/fastmax.md's benchmark tables, docs/baselines.md's linearity table,
docs/dense_attention.md's layer table and docs/gpu.md's kernel report. Whether an aim is met is
``verdicts.aim_met``'s and ``verdicts.reliably_faster``'s word.

Renderers (``RENDERERS``):

- ``bench_aims``: issue 27's performance aims (``BENCH`` and ``tree.TREE_BENCH`` name the files).
- ``fastmax_grid <grid.json> <memory.json> [retimed=<json>] [latest=<json>]``: docs/fastmax.md's
  benchmark tables (seconds per causal call, the targets, the break-even T against SDPA) from the
  attention benchmark's JSONs; ``retimed``: a later run of the target cells, ``latest``: a later full
  benchmark run (its summary), each shown beside them and counted in the verdict where it has the cell.
- ``bench_layer <layer suite .json> [methods=a,b]``: tokens/s of the DANet and softmax layers per T,
  forward and forward + backward (docs/dense_attention.md).
- ``bench_pair <bench.json> first=<spec> second=<spec> cells=D:mode:causal,... T=t,... [base=sdpa]``: two
  methods' times over the base's in one benchmark run, "first / second" per cell (docs/fastmax.md).
- ``authors_fastmax <compare.json> cells=p:causal:mode:T,...``: our Fastmax beside the authors'
  PyTorch paths, time and peak memory per cell (docs/fastmax.md).
- ``bench_linearity <bench.json> methods=a,b``: per method and call, time(16384) / (16 time(1024))
  and SDPA's time over the method's at 16384, misses in bold (docs/baselines.md).
- ``bench_per_token <bench.json> [<bench.json> ...] [method=dense] [T=1024,32768]``: a method's
  time per token at the long T over that at the short one, per call, a column per benchmark run,
  with the microseconds per token and the page faults of a long call (docs/benchmark.md).
- ``bench_speedups <bench.json> methods=a;b [T=16384] [D=64] [causal=true] [base=sdpa]``: the base's
  time over each method's at one T, forward and forward + backward (docs/benchmark.md).
- ``kernel_report <report.json>``: the offline sm_90 compilation of Fastmax's Triton kernels
  (scripts/bench/kernel_report.py's table: registers, stack, shared memory, tensor cores, compile
  time, the verdict per kernel), with a line naming Triton's version, the target and the count of
  kernels missing a limit (docs/gpu.md).
"""
import os
import re
import statistics

from scripts.analysis.published import verdicts
from scripts.analysis.published.formatting import (display_name, factor, markdown_table, median_range, number_word,
                                                   thousands)
from scripts.analysis.published.loading import RenderError, SourceMissing, load_json, marker_cells, marker_number, \
    marker_numbers
from scripts.analysis.published.tree import TREE_AIM_SPEEDUP, tree_speedups
from scripts.bench.kernel_report import markdown_table as kernel_report_table


# ----------------------------------------------------------------------------- benchmarks (issue 27's aims)

# the benchmark runs the aims table and the README read: (name in the table, file, method label of
# fastmax p = 2 with chunks of 128 in it, a note on the run)
BENCH = {
    "full": ("the full run", "results/bench_attention/all.json", "fastmax2", "while the machine slowed"),
    "rerun": ("the re-run", "results/bench_attention/rerun_dense_fastmax_tree.json", "fastmax:p=2,chunk_size=128",
              "alone"),
    "no_mmap": ("the re-run with glibc's mmap off", "results/bench_attention/rerun_malloc_no_mmap.json",
                "fastmax:p=2,chunk_size=128", "alone"),
    "check": ("the check", "results/bench_attention/fastmax2_causal_check.json", "fastmax:p=2", "alone"),
}
FASTMAX2_RUNS = ("rerun", "check", "full")  # the measurements of fastmax p = 2 with the default allocator
OLD_CHUNK_LABEL = "fastmax:p=2"  # in the re-run: fastmax p = 2 at the chunk default before ce5898c
BENCH_MANIFEST = "results/bench_attention/manifest.json"


DENSE_AIM = "dense_linear_time_per_token_(\\d+)_over_(\\d+)"
FASTMAX_AIM = "fastmax2_causal_D(\\d+)_speedup_vs_sdpa_at_(\\d+)"


def bench_run(root, key):
    """(data, date) of a BENCH run: its JSON and the day of its manifest entry."""
    path = BENCH[key][1]
    data = load_json(root, path)
    entry = load_json(root, BENCH_MANIFEST).get(os.path.basename(path)[: -len(".json")], {})
    return data, (entry.get("date") or "")[:10]


def find_aim(summary, pattern):
    """(key, numbers in the key, value) of the aim whose name matches ``pattern`` in a bench summary."""
    for key, value in summary["aims"].items():
        m = re.fullmatch(pattern, key)
        if m:
            return key, [int(x) for x in m.groups()], value
    raise SourceMissing(f"a rendered block needs the aim {pattern} in a benchmark summary; it has none")


def dense_ratio(data, mode="forward", causal=True):
    """(ratio, target) of the dense aim (time per token at the long T over the short one) of a bench
    JSON in ``mode`` and ``causal`` (the D its summary measured)."""
    _, _, aims = find_aim(data["summary"], DENSE_AIM)
    for key, value in aims.items():
        m = re.fullmatch(r"(\w+) causal=(True|False) D=(\d+)", key)
        if m and m.group(1) == mode and m.group(2) == str(causal):
            return value["ratio"], value["target"]
    raise SourceMissing(f"a rendered block needs the dense aim in {mode} causal={causal}; the summary has none")


def bench_seconds(data, label, mode, T, D, causal=True):
    """The median seconds of ``label`` in one configuration of a bench JSON (None when not measured)."""
    for r in data["rows"]:
        if (r["method"], r["mode"], r["causal"], r["D"], r["T"]) == (label, mode, causal, D, T):
            return r["seconds"]
    return None


def sdpa_speedup(data, label, mode, T, D, causal=True):
    """SDPA's seconds over ``label``'s at T (None when either is missing)."""
    ours, ref = bench_seconds(data, label, mode, T, D, causal), bench_seconds(data, "sdpa", mode, T, D, causal)
    return ref / ours if ours and ref else None


def fastmax2_runs(root):
    """[(run key, date, forward speedup, forward + backward speedup, data)] of causal fastmax p = 2
    against SDPA in the FASTMAX2_RUNS (D and T those of the bench summary's aim)."""
    out = []
    for key in FASTMAX2_RUNS:
        data, date = bench_run(root, key)
        _, (D, T), _ = find_aim(data["summary"], FASTMAX_AIM)
        label = BENCH[key][2]
        out.append((key, date, sdpa_speedup(data, label, "forward", T, D),
                    sdpa_speedup(data, label, "forward_backward", T, D), data))
    return out, D, T


LAYER_METHODS = {"danet_linear": "DANet linear", "danet_quadratic": "DANet quadratic", "danet_auto": "DANet auto",
                 "softmax_layer": "softmax"}
MODE_SHORT = {"forward": "fwd", "forward_backward": "fwd+bwd"}


def render_bench_layer(root, bench_json, methods="danet_linear,danet_quadratic,softmax_layer"):
    """docs/dense_attention.md's layer table: tokens/s of each layer method (``methods``, LAYER_METHODS
    names) per T, forward then forward + backward, from the layer suite's JSON of
    scripts/bench/attention.py (``--suite layer``); a cell the run skipped says why in short
    ("skipped (memory)"). Raises SourceMissing when the file is absent or has none of ``methods``."""
    rows = load_json(root, bench_json)["rows"]
    wanted = [m for m in methods.split(",") if m]
    by = {(r["method"], r["mode"], r["T"]): r for r in rows if r["method"] in wanted}
    if not by:
        raise SourceMissing(f"a rendered block needs the methods {methods} in {bench_json}; it has none")
    modes = [m for m in MODE_SHORT if any(k[1] == m for k in by)]
    columns = [(method, mode) for mode in modes for method in wanted]
    table = []
    for T in sorted({k[2] for k in by}):
        cells = []
        for method, mode in columns:
            r = by.get((method, mode, T))
            if r is None:
                cells.append("-")
            elif r.get("tokens_per_s") is None:
                cells.append("skipped" + (" (memory)" if "memory" in r.get("note", "") else ""))
            else:
                cells.append(thousands(r["tokens_per_s"]))
        table.append([f"{T:,}", *cells])
    return markdown_table(["T", *(f"{LAYER_METHODS.get(m, m)} {MODE_SHORT[mode]}" for m, mode in columns)], table)


def render_bench_pair(root, bench_json, first="", second="", cells="", T="", base="sdpa"):
    """Two methods' times over ``base``'s in one run of scripts/bench/attention.py (``bench_json``),
    as "first / second" per cell (one decimal), a row per ``cells`` entry ("D:mode:causal",
    mode forward or forward_backward, causal true or false; comma list) and a column per ``T`` (comma
    list); e.g. docs/fastmax.md's chunked / explicit table. Raises SourceMissing when a cell has no
    time of a method or of ``base`` in the run, RenderError when an argument is missing (the methods
    are key=value arguments: their specs hold "=")."""
    if not (first and second and cells and T):
        raise RenderError("bench_pair: give first=<spec> second=<spec> cells=D:mode:causal,... T=t,...")
    rows = load_json(root, bench_json)["rows"]
    seconds = {(r["spec"], r["D"], r["mode"], r["causal"], r["T"]): r["seconds"] for r in rows if r.get("seconds")}
    Ts = marker_numbers("bench_pair", T)
    table = []
    for D, mode, causal in marker_cells("bench_pair", cells, ("D", "mode", "causal")):
        cell = f"{D}:{mode}:{causal}"
        key = (marker_number("bench_pair", D), mode, causal == "true")
        ratios = []
        for t in Ts:
            try:
                ratios.append(" / ".join(f"{seconds[(m, *key, t)] / seconds[(base, *key, t)]:.1f}" for m in (first, second)))
            except KeyError:
                raise SourceMissing(f"a rendered block needs {first}, {second} and {base} at D = {D}, {mode}, "
                                    f"causal {causal}, T = {t} in {bench_json}") from None
        table.append([D, f"{mode.replace('_', '+')}, {'causal' if key[2] else 'non-causal'}", *ratios])
    return markdown_table(["D", "mode", *(f"T = {t}" for t in Ts)], table)


def render_authors_fastmax(root, compare_json, cells=""):
    """docs/fastmax.md's speed and memory table against the authors' PyTorch paths, from the
    ``timing_rows`` of scripts/bench/authors_fastmax.py's JSON: a row per ``cells`` entry
    ("p:causal:mode:T", causal yes or no, mode forward or forward_backward; comma list), our time and
    peak memory, their ``fastmax_function``'s, their einops variant's time (3 significant digits),
    and their time over ours (``factor``; "skipped (memory)" where the run skipped a call). Raises SourceMissing when
    a cell has no row of ours or of ``fastmax_function``, RenderError without ``cells``."""
    if not cells:
        raise RenderError("authors_fastmax: give cells=p:causal:mode:T,...")
    rows = load_json(root, compare_json)["timing_rows"]
    by = {(r["method"], r["p"], r["causal"], r["mode"], r["T"]): r for r in rows}

    def timed(method, key, memory=True):
        r = by.get((method, *key))
        if r is None or r.get("seconds") is None:
            return "skipped" + (" (memory)" if r is not None and "memory" in r.get("note", "") else "")
        return f"{r['seconds']:#.3g} s" + (f", {r['peak_mb']:,.0f} MB" if memory and r.get("peak_mb") is not None else "")

    table = []
    for p, causal, mode, T in marker_cells("authors_fastmax", cells, ("p", "causal", "mode", "T")):
        cell = f"{p}:{causal}:{mode}:{T}"
        key = (marker_number("authors_fastmax", p), causal == "yes", mode, marker_number("authors_fastmax", T))
        ours, theirs = by.get(("ours", *key)), by.get(("fastmax_function", *key))
        if not (ours and theirs and ours.get("seconds") and theirs.get("seconds")):
            raise SourceMissing(f"a rendered block needs ours and fastmax_function at {cell} in {compare_json}")
        table.append([p, causal, mode.replace("_", " + "), f"{int(T):,}", timed("ours", key),
                      timed("fastmax_function", key), timed("fastattention_einops", key, memory=False),
                      factor(theirs["seconds"] / ours["seconds"])])
    return markdown_table(["p", "causal", "mode", "T", "ours", "their `fastmax_function`", "their einops",
                      "theirs / ours"], table)


LINEARITY_BOUND = 1.5  # issue 26: time(16384) / (16 time(1024)) at most this, and faster than SDPA at 16384


def render_bench_linearity(root, bench_json, methods="", bold="misses"):
    """docs/baselines.md's speed table from the full benchmark's summary (``bench_json``): per method
    and call (forward, causal forward, forward + backward, causal forward + backward),
    time(16384) / (16 time(1024)) and SDPA's time over the method's at 16384, a miss of the issue's
    bounds (LINEARITY_BOUND, faster than SDPA) in bold unless ``bold`` is "none", "n/a" where the
    method has no such call; methods named as the docs name them (``display_name``). Raises
    SourceMissing when the summary lacks a method of ``methods`` (a comma list, or a semicolon list
    when a method's spec holds commas)."""
    summary = load_json(root, bench_json)["summary"]
    linear = {(r["method"], r["mode"], r["causal"]): r["ratio"] for r in summary["linearity_16384_vs_16x1024"]}
    speed = {(r["method"], r["mode"], r["causal"]): r["speedup"] for r in summary["speedup_vs_sdpa_at_16384"]}
    calls = [("forward", False), ("forward", True), ("forward_backward", False), ("forward_backward", True)]
    table = []
    for method in [m for m in methods.split(";" if ";" in methods else ",") if m]:
        if not any(k[0] == method for k in linear):
            raise SourceMissing(f"a rendered block needs {method} in the summary of {bench_json}; it has none")
        cells = []
        for mode, causal in calls:
            ratio, up = linear.get((method, mode, causal)), speed.get((method, mode, causal))
            if ratio is None or up is None:
                cells.append("n/a")
                continue
            text_ratio = f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.2f}"
            text_up = factor(up)
            if bold != "none":
                text_ratio = text_ratio if ratio <= LINEARITY_BOUND else f"**{text_ratio}**"
                text_up = text_up if up > 1 else f"**{text_up}**"
            cells.append(f"{text_ratio} / {text_up}")
        table.append([display_name(method), *cells])
    return markdown_table(["method", "forward", "causal forward", "forward + backward", "causal forward + backward"], table)


def method_params(data, label):
    """The attention parameters of the method ``label`` in a bench JSON ({} when it has none)."""
    for m in data["methods"]:
        if m["label"] == label:
            return m["params"]
    raise SourceMissing(f"a rendered block needs the method {label} in a benchmark file; it has none")


AIMS_WORDS = ("yes", "no")  # the aims table's "met" column (``verdicts.aim_met``)


def _dense_aim_row(root):
    full, full_date = bench_run(root, "full")
    rerun, rerun_date = bench_run(root, "rerun")
    no_mmap, _ = bench_run(root, "no_mmap")
    _, (t1, t0), _ = find_aim(full["summary"], DENSE_AIM)

    def dense(data, mode="forward", causal=True):
        return dense_ratio(data, mode, causal)[0]

    target = dense_ratio(full)[1]
    return [
        f"dense, linear regime: time per token at T = {t1} over that at {t0} (forward, causal)", f"<= {target:g}",
        f"{dense(full):.2f} in the full run of {full_date} (non-causal {dense(full, causal=False):.2f}; forward + "
        f"backward {dense(full, 'forward_backward'):.2f} causal, {dense(full, 'forward_backward', False):.2f} "
        f"non-causal); {dense(rerun):.2f} in the re-run of {rerun_date} after fb0ec13 ({dense(no_mmap):.2f} with "
        "glibc's mmap off)",
        verdicts.aim_met([dense(full), dense(rerun), dense(no_mmap)], lambda v: v <= target, AIMS_WORDS,
                         cause=": see the re-run (the output's fresh pages and the memory bandwidth)")]


def _fastmax_aim_row(root):
    runs, D, T = fastmax2_runs(root)
    by = {key: data for key, _, _, _, data in runs}
    full, check, rerun = by["full"], by["check"], by["rerun"]
    target = find_aim(full["summary"], FASTMAX_AIM)[2]["forward"]["target"]
    fwd, bwd = [r[2] for r in runs], [r[3] for r in runs]
    (fmed, frange), (bmed, brange) = median_range(fwd), median_range(bwd)
    chunk = method_params(rerun, BENCH["rerun"][2])["chunk_size"]
    per_run = []
    for key, date, f, b, _ in runs:
        text = f"{BENCH[key][0]} of {date}: {f:.2f} / {b:.2f}"
        if key == "check":
            text += f" (medians of {check['settings']['repeats']} calls, {BENCH[key][3]}"
            for m in check["methods"]:
                if "normalization" in m["params"]:
                    text += (f"; `normalization={m['params']['normalization']}` beside it "
                             f"{sdpa_speedup(check, m['label'], 'forward', T, D):.2f} / "
                             f"{sdpa_speedup(check, m['label'], 'forward_backward', T, D):.2f}: "
                             + verdicts.cost_words("the normalization", [f, b],
                                                   [sdpa_speedup(check, m["label"], call, T, D)
                                                    for call in ("forward", "forward_backward")]))
            text += ")"
        elif key == "full":
            text += (f" {BENCH[key][3]} (fastmax's forward took "
                     f"{bench_seconds(full, BENCH['full'][2], 'forward', T, D):.2f} s there, "
                     f"{bench_seconds(check, BENCH['check'][2], 'forward', T, D):.2f} s in the check; SDPA's "
                     f"{bench_seconds(full, 'sdpa', 'forward', T, D):.2f} s and "
                     f"{bench_seconds(check, 'sdpa', 'forward', T, D):.2f} s)")
        else:
            text += f" ({BENCH[key][3]})"
        per_run.append(text)
    old = OLD_CHUNK_LABEL
    return [
        f"causal fastmax p = 2, D = {D}: SDPA time / fastmax time at T = {T}", f"> {target:g}",
        f"chunks of {chunk} (the default since ce5898c), {number_word(len(runs))} runs: forward {fmed} (median; "
        f"range {frange}), forward + backward {bmed} (range {brange}); forward / forward + backward per run: "
        + "; ".join(per_run) + f". The old default chunk (the re-run's `{old}`): "
        f"{sdpa_speedup(rerun, old, 'forward', T, D):.2f} / {sdpa_speedup(rerun, old, 'forward_backward', T, D):.2f}",
        verdicts.reliably_faster({"forward": fwd, "forward + backward": bwd}, target,
                                 detail=f" (median {statistics.median(fwd):.2f} / {statistics.median(bwd):.2f})")]


def _tree_aim_row(root):
    speedups, (L, E, H, D) = tree_speedups(root)
    one = sorted(s for s in speedups if s[0] == 1)
    two = sorted(s[1] for s in speedups if s[0] == 2)
    return [
        f"tree attention CPU kernel vs the authors' `np_attention.py`, L = {L}, E = {E:g}, H = {H}, D = {D}, one "
        "thread, float32", f">= {TREE_AIM_SPEEDUP}x",
        ", ".join(f"{s[1]:.1f}x" for s in one) + f" in {number_word(len(one))} runs of `scripts/bench/tree.py` "
        f"({1e3 * min(s[2] for s in one):.1f}-{1e3 * max(s[2] for s in one):.1f} ms against "
        f"{min(s[3] for s in one):.2f}-{max(s[3] for s in one):.2f} s); {min(two):.0f}-{max(two):.0f}x on 2 threads",
        verdicts.aim_met([s[1] for s in one], lambda v: v >= TREE_AIM_SPEEDUP, AIMS_WORDS,
                         cause=", see `docs/tree_attention.md`")]


def render_bench_aims(root):
    """Issue 27's performance aims (docs/benchmark.md) from the BENCH runs and TREE_BENCH: the dense
    time per token ratio (target from the bench summary), fastmax p = 2 against SDPA (median and range
    over FASTMAX2_RUNS, then each run; never the best alone), the tree attention kernel against the
    authors' code (TREE_AIM_SPEEDUP). Raises SourceMissing when a file or an entry is absent."""
    return markdown_table(["aim", "target", "measured", "met"], [_dense_aim_row(root), _fastmax_aim_row(root),
                                                             _tree_aim_row(root)])


# ----------------------------------------------------------------------------- docs/fastmax.md's benchmark

FASTMAX_METHODS = (("fastmax1_pytorch", "fastmax p = 1"), ("fastmax2_pytorch", "fastmax p = 2"), ("sdpa", "SDPA"))
MODES = (("forward", "forward"), ("forward_backward", "forward + backward"))


def _seconds(x):
    return f"{x:.2g}" if x < 0.01 else f"{x:.3g}"


def summary_target(summary, key):
    """The grid's speed target ``key`` ("causal_p<p>_D<D>_T<T>_speedup_vs_sdpa") read from a full benchmark
    run's ``summary`` (its ``speedup_vs_sdpa_at_<T>`` entries of ``fastmax<p>``) as {mode: {"speedup":
    ...}}, or None when that run did not measure both modes of the cell."""
    p, D, T = (int(x) for x in re.fullmatch(r"causal_p(\d+)_D(\d+)_T(\d+)_speedup_vs_sdpa", key).groups())
    found = {e["mode"]: {"speedup": e["speedup"]} for e in summary.get(f"speedup_vs_sdpa_at_{T}", [])
             if e["method"] == f"fastmax{p}" and e["causal"] and e["D"] == D}
    return found if all(m in found for m, _ in MODES) else None


def render_fastmax_grid(root, grid, memory, retimed="", latest=""):
    """docs/fastmax.md's benchmark tables from the attention benchmark's JSONs ``grid`` (the T x D
    grid of fastmax p = 1, p = 2 and SDPA, with its ``targets``) and ``memory`` (fastmax p = 2 beside
    the authors' formulation at T = 4096): seconds per causal call at T = 1,024 and 16,384, the
    issue's targets met or not, and the break-even T against SDPA. A speed target is judged over every
    run that measured its cell (``verdicts.aim_met``: met in both modes): the grid, ``retimed`` (a
    later run of the target cells) and ``latest`` (a later full benchmark run, ``summary_target``), the
    later runs' values beside the grid's. Raises SourceMissing when a file or an entry is absent."""
    data, mem = load_json(root, grid), load_json(root, memory)
    again = load_json(root, retimed)["targets"] if retimed else None
    last = load_json(root, latest)["summary"] if latest else None
    seconds = {(r["method"], r["mode"], r["causal"], r["D"], r["T"]): r["seconds"] for r in data["rows"]}
    rows = []
    for D in sorted({r["D"] for r in data["rows"]}):
        for mode, mode_name in MODES:
            for T in (1024, 16384):
                try:
                    rows.append([D, mode_name, f"{T:,}", *(_seconds(seconds[m, mode, True, D, T]) for m, _ in FASTMAX_METHODS)])
                except KeyError as e:
                    raise SourceMissing(f"{grid} has no cell {e.args[0]}") from None
    out = ["Seconds per call, causal (the GPT's case):", "",
           markdown_table(["D", "mode", "T", *(name for _, name in FASTMAX_METHODS)], rows).rstrip("\n")]

    targets = data["targets"]
    def speedup_row(key, label):
        later = [(run, words) for run, words in ((again and again[key], "re-timed"), (
            last and summary_target(last, key), f"in `{os.path.basename(latest)}`")) if run]
        def values(m):
            beside = ", ".join(f"{run[m]['speedup']:.1f}x {words}" for run, words in later)
            return f"{targets[key][m]['speedup']:.1f}x" + (f" ({beside})" if later else "")
        target = {m: targets[key][m]["target"] for m, _ in MODES}
        return [label, f"forward {values('forward')}, forward + backward {values('forward_backward')}",
                verdicts.aim_met([targets[key], *(run for run, _ in later)],
                                 lambda t: all(t[m]["speedup"] >= target[m] for m, _ in MODES))]
    mem_rows = {r["method"]: r for r in mem["rows"]}
    ours, theirs = mem_rows["fastmax2_pytorch"], mem_rows["authors2"]
    ratio = theirs["peak_mb"] / ours["peak_mb"]
    forward = [t for t in targets["linearity_16384_vs_16x1024"] if t["mode"] == "forward"]
    backward = {p: [t["ratio"] for t in targets["linearity_16384_vs_16x1024"]
                    if t["mode"] == "forward_backward" and t["method"] == f"fastmax{p}_pytorch"] for p in (1, 2)}
    lo, hi = min(t["ratio"] for t in forward), max(t["ratio"] for t in forward)
    target_rows = [
        speedup_row("causal_p1_D64_T16384_speedup_vs_sdpa", "causal p = 1, D = 64, T = 16384: ≥ 10x faster than SDPA"),
        speedup_row("causal_p2_D32_T16384_speedup_vs_sdpa", "causal p = 2, D = 32, T = 16384: faster than SDPA"),
        ["p = 2 causal forward + backward, T = 4096, D = 32: ≥ 10x less peak memory than the authors' formulation",
         f"{ours['peak_mb']:,.1f} MB vs {theirs['peak_mb']:,.0f} MB: {ratio:.0f}x less (theirs takes "
         f"{theirs['seconds']:.0f} s, ours {ours['seconds']:.2f} s)", verdicts.aim_met([ratio], lambda r: r >= 10)],
        [f"forward time linear in T: t(16384) ≤ 1.2 · 16 · t(1024)",
         f"ratio t(16384) / (16 · t(1024)) between {lo:.2f} and {hi:.2f} for all {len(forward)} forward configurations",
         verdicts.aim_met([forward], lambda ts: all(t["ok"] for t in ts))],
        ["(no target) forward + backward, the same ratio",
         f"p = 1: {min(backward[1]):.2f}-{max(backward[1]):.2f}; p = 2: {min(backward[2]):.2f}-{max(backward[2]):.2f}", "-"],
    ]
    out += ["", "The issue's targets, read from the same run (`targets` in the JSON)"
            + (f", the speed targets also from the re-timed run `{retimed}`" if again else "")
            + (f" and, where it has the cell, the later full run `{latest}`" if last else "")
            + f", and for memory from `{memory}`:", "", markdown_table(["target", "measured", ""], target_rows).rstrip("\n")]

    even = {(t["method"], t["mode"], t["causal"], t["D"]): t["T"] for t in targets["break_even_T_vs_sdpa"]}
    def shown_T(T):
        return T if isinstance(T, str) else ("not within the grid" if T is None else f"{T:,}")
    even_rows = [[D, "yes" if causal else "no", mode_name,
                  *(shown_T(even[f"fastmax{p}_pytorch", mode, causal, D]) for p in (1, 2))]
                 for D in sorted({k[3] for k in even}) for causal in (False, True) for mode, mode_name in MODES]
    out += ["", "Break-even T against SDPA (the T from which fastmax is faster at every larger measured T, "
            "interpolated on the log-log grid; \"below grid\" = faster already at the smallest T):", "",
            markdown_table(["D", "causal", "mode", "p = 1", "p = 2"], even_rows)]
    return "\n".join(out)


def render_kernel_report(root, report_json):
    """docs/gpu.md's offline compilation table from scripts/bench/kernel_report.py's JSON: the
    script's own table (one format), then a line with the Triton version, the target and how many
    kernels miss a limit. Raises SourceMissing when the file is absent."""
    report = load_json(root, report_json)
    rows = report["rows"]
    missed = sum(1 for row in rows if row["failures"])
    summary = (f"{len(rows)} distinct kernels compiled for {report['target']['arch']} with Triton {report['triton']}"
               f" on {report['date'][:10]}: {missed} missing a limit.")
    return kernel_report_table(rows) + "\n\n" + summary + "\n"


CALLS = (("forward", True), ("forward", False), ("forward_backward", True), ("forward_backward", False))


def _call_name(mode, causal):
    return f"{mode.replace('_', ' + ')}, {'causal' if causal else 'non-causal'}"


def render_bench_per_token(root, *benches, method="dense", T="1024,32768"):
    """docs/benchmark.md's dense table: per call (forward and forward + backward, causal and not) and
    per benchmark run of ``benches`` (scripts/bench/attention.py JSONs, a column each, named by the
    file), ``method``'s time per token at the long T of ``T`` over that at the short one, then in
    brackets its microseconds per token (one call of the run's heads) at both and the minor page
    faults per long call. Raises SourceMissing when a file lacks a cell, RenderError for a malformed
    argument."""
    Ts = sorted(marker_numbers("bench_per_token", T))
    if not benches or len(Ts) != 2 or Ts[0] == Ts[1]:
        raise RenderError("bench_per_token: give one benchmark JSON or more and T=<short>,<long>")
    short, long = Ts
    data = [(path, {(r["method"], r["mode"], r["causal"], r["T"]): r for r in load_json(root, path)["rows"]})
            for path in benches]
    table = []
    for mode, causal in CALLS:
        row = [_call_name(mode, causal)]
        for path, rows in data:
            a, b = rows.get((method, mode, causal, short)), rows.get((method, mode, causal, long))
            if not (a and b and a.get("seconds") and b.get("seconds")):
                raise SourceMissing(f"a rendered block needs {method} at T = {short} and {long}, "
                                    f"{_call_name(mode, causal)}, in {path}")
            us_a, us_b = 1e6 * a["seconds"] / short, 1e6 * b["seconds"] / long
            faults = b.get("minor_faults_per_call")
            row.append(f"{us_b / us_a:.2f} ({us_a:.2f} -> {us_b:.2f} us" +
                       (f"; {faults:,.0f} faults)" if faults is not None else ")"))
        table.append(row)
    return markdown_table(["call", *(f"`{os.path.basename(path)}`" for path, _ in data)], table)


def render_bench_speedups(root, bench_json, methods="", T="16384", D="64", causal="true", base="sdpa"):
    """The base's time over each method's (``methods``: a semicolon list of the run's method labels)
    at one ``T`` and ``D``, causal or not, forward and forward + backward (2 decimals; above 1: the
    method is faster), from one run of scripts/bench/attention.py. Raises SourceMissing when the run
    lacks a cell, RenderError for a malformed argument."""
    wanted = [m for m in methods.split(";") if m]
    if not wanted or causal not in ("true", "false"):
        raise RenderError("bench_speedups: give methods=a;b and causal=true or false")
    t, d, is_causal = marker_number("bench_speedups", T), marker_number("bench_speedups", D), causal == "true"
    data = load_json(root, bench_json)
    table = []
    for method in wanted:
        cells = []
        for mode, _ in MODES:
            ours, ref = bench_seconds(data, method, mode, t, d, is_causal), bench_seconds(data, base, mode, t, d, is_causal)
            if not (ours and ref):
                raise SourceMissing(f"a rendered block needs {method} and {base} at T = {t}, D = {d}, {mode}, "
                                    f"causal {causal} in {bench_json}")
            cells.append(f"{ref / ours:.2f}")
        table.append([f"`{method}`", *cells])
    return markdown_table(["method", *(f"{base} time / method time, {name}" for _, name in MODES)], table)


RENDERERS = {"bench_aims": render_bench_aims, "fastmax_grid": render_fastmax_grid, "bench_layer": render_bench_layer,
             "bench_pair": render_bench_pair, "authors_fastmax": render_authors_fastmax,
             "bench_linearity": render_bench_linearity, "kernel_report": render_kernel_report,
             "bench_per_token": render_bench_per_token, "bench_speedups": render_bench_speedups}
