"""Benchmark of tree / bud-expansion attention: wall time and inner-product count vs exact attention.

Measures, in one run and on the same random (1, H, L, D) inputs (causal):
  - ``cpu``: the compiled kernel (attention/tree/cpu.py) for every L in --L and every E in --E, with
    1 torch thread and with --threads threads (column ``threads``);
  - ``vectorized``: attention/tree/vectorized.py (PyTorch ops), 1 thread, same grid;
  - ``reference``: attention/tree/reference.py (one query at a time) for L in --slow_L, E in --slow_E;
  - ``numpy_authors``: attention/tree/numpy_baseline.py (the authors' NumPy design: batch 1, one
    query at a time, incremental array tree, sum-heap sampling), same L / E as the reference;
  - ``softmax``: exact attention (torch SDPA) for every L, 1 and --threads threads.
Fast rows are the median of --repeats calls (one call when a call takes over 2 s).
The slow implementations are timed on --slow_queries evenly spaced query positions (all keys are
still inserted) and extrapolated to all L positions: total = t_insert_only + (t_subset - t_insert_only)
* L / n_subset; such rows have extrapolated = true. A fast configuration is skipped (row with
note "skipped") when the previous E at the same L took longer than --budget seconds.

Writes results/bench_tree.csv, results/bench_tree.json (rows + speed ratios) and results/bench_tree.png.
The reference and the NumPy design are single-threaded; speed-ups are reported against the kernel at
1 thread (same resources) and at --threads threads (the whole machine).

Usage: nice -n 10 python scripts/bench_tree.py [--L 256,1024,4096] [--E 0.2,...,1.0] [--sampler alignment]
"""
import argparse
import csv
import json
import os
import platform
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import attention  # noqa: E402
from attention.tree.numpy_baseline import numpy_baseline_forward  # noqa: E402
from attention.tree.reference import reference_forward  # noqa: E402

FIELDS = ["impl", "threads", "sampler", "L", "E", "H", "D", "queries_timed", "queries_total", "seconds",
          "extrapolated", "alignment_inner_products", "full_attention_inner_products", "fraction", "note"]


def parse_list(s, typ):
    return [typ(x) for x in s.split(",") if x.strip()]


def full_ips(L, H, exclude_self):
    return H * sum((t if exclude_self else t + 1) for t in range(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--L", default="256,1024,4096")
    ap.add_argument("--E", default="0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0")
    ap.add_argument("--slow_L", default="256,1024")
    ap.add_argument("--slow_E", default="0.5")
    ap.add_argument("--slow_queries", type=int, default=32)
    ap.add_argument("--sampler", default="alignment")
    ap.add_argument("--H", type=int, default=12)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--out", default="results/bench_tree")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch threads for the second cpu/softmax run")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_flush_denormal(True)
    torch.set_num_threads(1)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    rows = []
    # warm-up (kernel build / load, first-call allocations) on a tiny input
    w = torch.randn(1, args.H, 64, args.D)
    for impl in ("cpu", "vectorized"):
        attention.build("tree", E=0.5, sampler=args.sampler, implementation=impl)(w, w, w, True)
    attention.build("softmax")(w, w, w, True)

    def emit(**r):
        row = {f: r.get(f, "") for f in FIELDS}
        rows.append(row)
        print(" ".join(f"{k}={row[k]}" for k in FIELDS if row[k] != ""), flush=True)

    def timed(fn, threads):
        """(median wall time, number of calls) of fn() over --repeats calls (one call if the first
        takes > 2 s)."""
        torch.set_num_threads(threads)
        try:
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
                if times[0] > 2.0:
                    break
            return float(np.median(times)), len(times)
        finally:
            torch.set_num_threads(1)

    thread_counts = sorted({1, args.threads})
    for L in parse_list(args.L, int):
        g = torch.Generator().manual_seed(args.seed)
        q, k, v = (torch.randn(1, args.H, L, args.D, generator=g) for _ in range(3))
        sm = attention.build("softmax")
        sm(q, k, v, True)
        for th in thread_counts:
            emit(impl="softmax", threads=th, L=L, E=1.0, H=args.H, D=args.D, queries_timed=L, queries_total=L,
                 seconds=round(timed(lambda: sm(q, k, v, True), th)[0], 6), extrapolated=False,
                 alignment_inner_products=full_ips(L, args.H, False),
                 full_attention_inner_products=full_ips(L, args.H, False), fraction=1.0)
        for impl, threads in [("cpu", th) for th in thread_counts] + [("vectorized", 1)]:
            last = 0.0
            for E in parse_list(args.E, float):
                if last > args.budget:
                    emit(impl=impl, threads=threads, sampler=args.sampler, L=L, E=E, H=args.H, D=args.D,
                         note=f"skipped: previous E took {last:.0f} s > budget {args.budget:.0f} s")
                    continue
                m = attention.build("tree", E=E, sampler=args.sampler, seed=args.seed, implementation=impl)
                last, calls = timed(lambda: m(q, k, v, True), threads)
                # every call makes the same draws, so the counters of one call are the total / calls
                st = {key: n // calls for key, n in m.stats().items()}
                emit(impl=impl, threads=threads, sampler=args.sampler, L=L, E=E, H=args.H, D=args.D,
                     queries_timed=L, queries_total=L, seconds=round(last, 6), extrapolated=False,
                     alignment_inner_products=st["alignment_inner_products"],
                     full_attention_inner_products=st["full_attention_inner_products"],
                     fraction=round(st["alignment_inner_products"] / st["full_attention_inner_products"], 6))
        if L not in parse_list(args.slow_L, int):
            continue
        n = min(args.slow_queries, L)
        subset = sorted({int(round(x)) for x in np.linspace(0, L - 1, n)})
        m = attention.build("tree", E=0.5, sampler=args.sampler, seed=args.seed)
        fmap = m.feature_map(args.D)
        qf = kf = None
        if fmap is not None:
            qf, kf = fmap(q.double()), fmap(k.double())
        for E in parse_list(args.slow_E, float):
            for impl in ("reference", "numpy_authors"):
                def run(pos):
                    t0 = time.perf_counter()
                    if impl == "reference":
                        stats = {key: 0 for key in ("queries", "alignment_inner_products", "feature_inner_products",
                                                    "full_attention_inner_products", "terms")}
                        reference_forward(q, k, v, True, False, E, None, args.sampler, "consistent", 0.99,
                                          args.seed, qf=qf, kf=kf, stats=stats, positions=pos)
                        ips = stats["alignment_inner_products"]
                    else:
                        _, ips = numpy_baseline_forward(q, k, v, E, args.sampler, seed=args.seed, qf=qf, kf=kf,
                                                        positions=pos)
                    return time.perf_counter() - t0, ips
                run([])  # warm-up
                t_ins, _ = run([])
                t_sub, ips_sub = run(subset)
                est = t_ins + max(0.0, t_sub - t_ins) * L / len(subset)
                full_sub = args.H * sum(((t + 1) if impl == "reference" else t) for t in subset)
                emit(impl=impl, threads=1, sampler=args.sampler, L=L, E=E, H=args.H, D=args.D,
                     queries_timed=len(subset),
                     queries_total=L, seconds=round(est, 6), extrapolated=True,
                     alignment_inner_products=ips_sub, full_attention_inner_products=full_sub,
                     fraction=round(ips_sub / max(1, full_sub), 6),
                     note=f"measured {t_sub:.2f} s on {len(subset)} queries (insert-only {t_ins:.2f} s); "
                          f"inner products counted on the timed queries only")

    # speed ratios (slow / fast) for every (L, E) where both exist
    ratios = []
    for r in rows:
        if r["impl"] not in ("reference", "numpy_authors"):
            continue
        for f in rows:
            if f["impl"] in ("cpu", "vectorized") and (f["L"], f["E"]) == (r["L"], r["E"]) and f["seconds"] != "":
                ratios.append({"L": r["L"], "E": r["E"], "slow": r["impl"], "slow_seconds": r["seconds"],
                               "fast": f["impl"], "fast_threads": f["threads"], "fast_seconds": f["seconds"],
                               "speedup": round(r["seconds"] / f["seconds"], 1)})
    for x in ratios:
        print(f"speedup {x['fast']} ({x['fast_threads']} thread(s)) vs {x['slow']} at L={x['L']} E={x['E']}: "
              f"{x['speedup']}x ({x['slow_seconds']:.3f} s extrapolated vs {x['fast_seconds']:.4f} s)")
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    meta = {"sampler": args.sampler, "H": args.H, "D": args.D, "batch": 1, "causal": True,
            "threads": thread_counts, "repeats": args.repeats, "torch": torch.__version__,
            "slow_queries": args.slow_queries, "cpu": platform.processor() or platform.machine(),
            "note": "slow implementations timed on a subset of query positions and extrapolated"}
    with open(args.out + ".json", "w") as f:
        json.dump({"config": meta, "rows": rows, "speedups": ratios}, f, indent=1)
    plot(rows, args.out + ".png", args.sampler)
    print("wrote", args.out + ".csv", args.out + ".json", args.out + ".png")


def plot(rows, path, sampler):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    Ls = sorted({r["L"] for r in rows})
    for i, L in enumerate(Ls):
        col = f"C{i}"
        for impl, th, style in [("cpu", 1, "o-"), ("vectorized", 1, "x--")]:
            pts = [r for r in rows if r["impl"] == impl and r["threads"] == th and r["L"] == L and r["seconds"] != ""]
            a1.plot([r["E"] for r in pts], [r["seconds"] for r in pts], style, color=col, label=f"{impl} L={L}")
            if impl == "cpu":
                a2.plot([r["E"] for r in pts], [r["fraction"] for r in pts], "o-", color=col, label=f"L={L}")
        for r in rows:
            if r["L"] == L and r["impl"] == "softmax" and r["threads"] == 1:
                a1.axhline(r["seconds"], color=col, ls=":", lw=1)
            if r["L"] == L and r["impl"] in ("reference", "numpy_authors"):
                a1.plot([r["E"]], [r["seconds"]], "s" if r["impl"] == "reference" else "^", color=col,
                        label=f"{r['impl']} L={L} (extrap.)")
    a1.set_yscale("log")
    a1.set_xlabel("E  (T = ceil(l^E) terms)")
    a1.set_ylabel("wall time per block [s] (dotted: exact softmax)")
    a1.set_title(f"tree attention, sampler={sampler}, batch 1, 1 thread")
    a1.legend(fontsize=7)
    a2.set_yscale("log")
    a2.set_xlabel("E")
    a2.set_ylabel("inner products / exact attention's")
    a2.set_title("cost fraction")
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
