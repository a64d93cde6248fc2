"""Benchmark of tree / bud-expansion attention: wall time and inner-product count vs exact attention.

Measures, in one run and on the same random (1, H, L, D) inputs (causal):
  - ``cpu``: the compiled kernel (attention/tree/cpu.py) for every L in --L and every E in --E, with
    1 torch thread and with --threads threads (column ``threads``);
  - ``vectorized``: attention/tree/vectorized.py (PyTorch ops), 1 thread, same grid;
  - ``reference``: attention/tree/reference.py (one query at a time) for L in --slow_L, E in --slow_E;
  - ``numpy_authors``: attention/tree/numpy_baseline.py (the authors' NumPy design: batch 1, one
    query at a time, incremental array tree, sum-heap sampling), same L / E as the reference;
  - ``softmax``: exact attention (torch SDPA) for every L, 1 and --threads threads;
  - ``casinoformer``: with --casino_dir=DIR, the AUTHORS' code itself: ``np_attention.attention_kernel``
    imported from a checkout of choijacky/casinoformer that the user provides (nothing of it is in
    this repo), run over the whole block one query at a time as their nanoGPT/model.py does, with
    their P = floor_pow2(L^(E/2)); for L in --slow_L and E in --slow_E. Their fast sampling needs
    the ``arsenal`` package (``pip install arsenal``); without it they fall back to
    ``numpy.random.choice`` (column ``note`` says which).
All tree rows use the authors' setting: causal without the current token (exclude_self), descent
"authors", "paper" normalization. The kernel is timed on float32 and on float64 inputs (column
``dtype``; the authors' code and the NumPy design compute in float64).
Fast rows are the median of --repeats calls (one call when a call takes over 2 s).
The slow implementations are timed on --slow_queries evenly spaced query positions (all keys are
still inserted) and extrapolated to all L positions: total = t_insert_only + (t_subset - t_insert_only)
* L / n_subset; such rows have extrapolated = true. A fast configuration is skipped (row with
note "skipped") when the previous E at the same L took longer than --budget seconds.

Writes results/bench_tree/bench_tree.csv, results/bench_tree/bench_tree.json (rows + speed ratios) and results/bench_tree/bench_tree.png.
The reference and the NumPy design are single-threaded; speed-ups are reported against the kernel at
1 thread (same resources) and at --threads threads (the whole machine).

Usage: nice -n 10 python -m scripts.bench.tree [--L 256,1024,4096] [--E 0.2,...,1.0] [--sampler alignment]
"""
import argparse
import csv
import importlib.util
import math
import os
import platform
import time

import numpy as np
import torch

import attention
from attention.tree.numpy_baseline import numpy_baseline_forward
from attention.tree.reference import reference_forward
from data import write_json
import provenance
from scripts.bench.common import parse_list

FIELDS = ["impl", "threads", "dtype", "sampler", "L", "E", "H", "D", "queries_timed", "queries_total", "seconds",
          "extrapolated", "alignment_inner_products", "full_attention_inner_products", "fraction", "note"]


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
    ap.add_argument("--out", default="results/bench_tree/bench_tree")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch threads for the second cpu/softmax run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--casino_dir", default="", help="checkout of choijacky/casinoformer to time the authors' code")
    args = ap.parse_args()
    casino = load_casinoformer(args.casino_dir) if args.casino_dir else None
    torch.set_flush_denormal(True)
    torch.set_num_threads(1)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    rows = []
    def tree(impl, E):
        """Tree attention in the authors' setting (see the module docstring)."""
        return attention.build("tree", E=E, sampler=args.sampler, seed=args.seed, implementation=impl,
                               exclude_self=True, normalization="paper", descent="authors")

    # warm-up (kernel build / load, first-call allocations) on a tiny input
    w = torch.randn(1, args.H, 64, args.D)
    for impl in ("cpu", "vectorized"):
        tree(impl, 0.5)(w, w, w, True)
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
        runs = [("cpu", th, torch.float32) for th in thread_counts] + [("cpu", 1, torch.float64), ("vectorized", 1, torch.float32)]
        for impl, threads, dtype in runs:
            last = 0.0
            qd, kd, vd = (x.to(dtype) for x in (q, k, v))
            for E in parse_list(args.E, float):
                if last > args.budget:
                    emit(impl=impl, threads=threads, dtype=str(dtype)[6:], sampler=args.sampler, L=L, E=E, H=args.H,
                         D=args.D, note=f"skipped: previous E took {last:.0f} s > budget {args.budget:.0f} s")
                    continue
                m = tree(impl, E)
                last, calls = timed(lambda: m(qd, kd, vd, True), threads)
                # every call makes the same draws, so the counters of one call are the total / calls
                st = {key: n // calls for key, n in m.stats().items()}
                emit(impl=impl, threads=threads, dtype=str(dtype)[6:], sampler=args.sampler, L=L, E=E, H=args.H, D=args.D,
                     queries_timed=L, queries_total=L, seconds=round(last, 6), extrapolated=False,
                     alignment_inner_products=st["alignment_inner_products"],
                     full_attention_inner_products=st["full_attention_inner_products"],
                     fraction=round(st["alignment_inner_products"] / st["full_attention_inner_products"], 6))
        if L not in parse_list(args.slow_L, int):
            continue
        n = min(args.slow_queries, L)
        subset = sorted({int(round(x)) for x in np.linspace(0, L - 1, n)})
        m = tree("reference", 0.5)
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
                        reference_forward(q, k, v, True, True, E, None, args.sampler, "paper", 0.99,
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
                full_sub = args.H * sum(t for t in subset)
                emit(impl=impl, threads=1, dtype="float64", sampler=args.sampler, L=L, E=E, H=args.H, D=args.D,
                     queries_timed=len(subset),
                     queries_total=L, seconds=round(est, 6), extrapolated=True,
                     alignment_inner_products=ips_sub, full_attention_inner_products=full_sub,
                     fraction=round(ips_sub / max(1, full_sub), 6),
                     note=f"measured {t_sub:.2f} s on {len(subset)} queries (insert-only {t_ins:.2f} s); "
                          f"inner products counted on the timed queries only")
            if casino is not None:
                seconds, note = time_casinoformer(casino, q, k, v, E, args.sampler)
                emit(impl="casinoformer", threads=1, dtype="float64", sampler=args.sampler, L=L, E=E, H=args.H,
                     D=args.D, queries_timed=L, queries_total=L, seconds=round(seconds, 6), extrapolated=False,
                     note=note)

    # speed ratios (slow / fast) for every (L, E) where both exist
    ratios = []
    for r in rows:
        if r["impl"] not in ("reference", "numpy_authors", "casinoformer"):
            continue
        for f in rows:
            if f["impl"] in ("cpu", "vectorized") and (f["L"], f["E"]) == (r["L"], r["E"]) and f["seconds"] != "":
                ratios.append({"L": r["L"], "E": r["E"], "slow": r["impl"], "slow_seconds": r["seconds"],
                               "fast": f["impl"], "fast_threads": f["threads"], "fast_dtype": f["dtype"],
                               "fast_seconds": f["seconds"],
                               "speedup": round(r["seconds"] / f["seconds"], 1)})
    for x in ratios:
        print(f"speedup {x['fast']} ({x['fast_threads']} thread(s), {x['fast_dtype']}) vs {x['slow']} at L={x['L']} E={x['E']}: "
              f"{x['speedup']}x ({x['slow_seconds']:.3f} s vs {x['fast_seconds']:.4f} s)")
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    meta = {"sampler": args.sampler, "H": args.H, "D": args.D, "batch": 1, "causal": True,
            "threads": thread_counts, "repeats": args.repeats, "torch": torch.__version__,
            "slow_queries": args.slow_queries, "cpu": platform.processor() or platform.machine(),
            "note": "slow implementations timed on a subset of query positions and extrapolated"}
    write_json(args.out + ".json", {"config": meta, "rows": rows, "speedups": ratios})
    plot(rows, args.out + ".png", args.sampler)
    provenance.record(args.out)
    print("wrote", args.out + ".csv", args.out + ".json", args.out + ".png")


CASINO_METHODS = {"uniform": "uniform", "edh": "exponentially_decaying_horizon", "alignment": "alignment",
                  "positive_alignment": "positive_alignment", "rff": "RandomFourierFeatures",
                  "favor_plus": "FAVOR+", "favor_plus_relu": "FAVOR+ReLU"}


def load_casinoformer(casino_dir):
    """Import np_attention.py from a user's checkout of choijacky/casinoformer.

    Raises:
        SystemExit: the file is missing (message says what to pass).
    """
    path = os.path.join(casino_dir, "np_attention.py")
    if not os.path.exists(path):
        raise SystemExit(f"error: --casino_dir={casino_dir} has no np_attention.py; pass a checkout of "
                         "https://github.com/choijacky/casinoformer")
    spec = importlib.util.spec_from_file_location("np_attention", path)  # loaded from the file: no sys.path edit
    np_attention = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(np_attention)
    if np.lib.NumpyVersion(np.__version__) >= "2.1.0":
        np_attention.np = _NumpyCompat()  # their code calls np.reshape(x, newshape=...)
    return np_attention


class _NumpyCompat:
    """numpy for the authors' module, with the ``newshape=`` keyword of np.reshape that NumPy 2.1
    deprecated and later releases removed (their code was written for older NumPy)."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def reshape(a, newshape=None, **kw):
        return np.reshape(a, newshape, **kw)


def time_casinoformer(mod, q, k, v, E, sampler):
    """Seconds for the authors' attention_kernel over one (1, H, L, D) block, one query at a time as
    in their nanoGPT/model.py (their argument T = the number of terms ceil(l^E), l = the number of earlier tokens), and a note."""
    _, H, L, D = q.shape
    try:
        from arsenal.datastructures.heap.sumheap import SumHeap  # noqa: F401
        fast = True
    except ImportError:
        fast = False
    P = 2 ** int(math.floor(math.log2(L ** (E / 2))))
    extra = {"R": 2 * D if sampler in ("favor_plus", "favor_plus_relu") else D, "base": 0.99}
    kernel = mod.attention_kernel(D=D, S=D ** -0.5, P=P, L=L, H=H, method=CASINO_METHODS[sampler],
                                  fast_sampling=fast, **extra)
    qs, ks, vs = (x[0].float() for x in (q, k, v))
    t0 = time.perf_counter()
    for t in range(L):
        kernel.forward(T=math.ceil(kernel.l ** E), k=ks[:, t], q=qs[:, t], v=vs[:, t])
    seconds = time.perf_counter() - t0
    return seconds, f"authors' np_attention.py, P={P}, fast_sampling={fast} ({'arsenal SumHeap' if fast else 'numpy.random.choice'})"


def plot(rows, path, sampler):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    Ls = sorted({r["L"] for r in rows})
    for i, L in enumerate(Ls):
        col = f"C{i}"
        for impl, th, style in [("cpu", 1, "o-"), ("vectorized", 1, "x--")]:
            pts = [r for r in rows if r["impl"] == impl and r["threads"] == th and r["dtype"] == "float32"
                   and r["L"] == L and r["seconds"] != ""]
            a1.plot([r["E"] for r in pts], [r["seconds"] for r in pts], style, color=col, label=f"{impl} L={L}")
            if impl == "cpu":
                a2.plot([r["E"] for r in pts], [r["fraction"] for r in pts], "o-", color=col, label=f"L={L}")
        for r in rows:
            if r["L"] == L and r["impl"] == "softmax" and r["threads"] == 1:
                a1.axhline(r["seconds"], color=col, ls=":", lw=1)
            if r["L"] == L and r["impl"] in ("reference", "numpy_authors", "casinoformer"):
                marker = {"reference": "s", "numpy_authors": "^", "casinoformer": "*"}[r["impl"]]
                a1.plot([r["E"]], [r["seconds"]], marker, color=col, label=f"{r['impl']} L={L}")
    a1.set_yscale("log")
    a1.set_xlabel("E  (n_terms = ceil(l^E) terms)")
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
