"""Test NLL by context length, bucketed, for several models side by side.

Reads the JSON that ``eval_ppl.py --per_position=True`` writes (its "per_position" entry holds,
for every context length c = 1 ... L, the number of scored tokens and their mean NLL) and
averages it over buckets of context lengths: 1, 2, 3-4, 5-8, ... (powers of two). A model that
uses long context has a lower NLL in the late buckets than in the early ones.

    python -m scripts.analysis.per_position_table results/gpt_mini_wikitext2/test_blocks.json \
        out/wikitext2_gpt_mini_fastmax1/eval_test_blocks_fastmax.json --labels=softmax,fastmax1 \
        --out=results/per_position

Writes OUT.md (markdown table), OUT.csv and OUT.png (mean NLL per bucket, nats per token).
"""
import argparse
import csv
import json
import math

import numpy as np

import provenance
from scripts import plot_style


def load_per_position(path):
    """(context_length, count, mean_nll) int / int / float arrays of one eval JSON.

    Raises:
        ValueError: the file has no per-position entry (eval_ppl.py was run without --per_position).
    """
    with open(path) as f:
        result = json.load(f)
    pp = result.get("per_position")
    if not pp:
        raise ValueError(f"{path} has no 'per_position' entry; run eval_ppl.py with --per_position=True")
    return (np.asarray(pp["context_length"], dtype=np.int64), np.asarray(pp["count"], dtype=np.int64),
            np.asarray(pp["mean_nll"], dtype=np.float64))


def buckets_for(max_context):
    """[(lo, hi)] inclusive context-length buckets 1, 2, 3-4, 5-8, ... up to max_context."""
    edges, lo = [], 1
    while lo <= max_context:
        hi = 1 if lo == 1 else min(max_context, 2 * (lo - 1))
        edges.append((lo, hi))
        lo = hi + 1
    return edges


def bucket_means(context, count, mean_nll, buckets):
    """Token-weighted mean NLL (nats) and token count of each bucket."""
    means, counts = [], []
    for lo, hi in buckets:
        sel = (context >= lo) & (context <= hi)
        n = int(count[sel].sum())
        counts.append(n)
        means.append(float((count[sel] * mean_nll[sel]).sum() / n) if n else math.nan)
    return means, counts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="eval JSONs written with --per_position=True")
    ap.add_argument("--labels", default=None, help="comma-separated names, one per path (default: the paths)")
    ap.add_argument("--out", required=True, help="output prefix: OUT.md, OUT.csv, OUT.png")
    args = ap.parse_args(argv)
    labels = args.labels.split(",") if args.labels else args.paths
    if len(labels) != len(args.paths):
        raise SystemExit(f"--labels has {len(labels)} names for {len(args.paths)} files")
    data = [load_per_position(p) for p in args.paths]
    buckets = buckets_for(min(int(c.max()) for c, _, _ in data))
    names = [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in buckets]
    table = [bucket_means(*d, buckets) for d in data]

    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "context_lo", "context_hi", "tokens", "mean_nll"])
        for label, (means, counts) in zip(labels, table):
            for (lo, hi), m, n in zip(buckets, means, counts):
                w.writerow([label, lo, hi, n, f"{m:.6f}"])
    lines = ["| context length | " + " | ".join(labels) + " | tokens per model |",
             "|---|" + "---|" * (len(labels) + 1)]
    for i, name in enumerate(names):
        lines.append(f"| {name} | " + " | ".join(f"{t[0][i]:.3f}" for t in table) + f" | {table[0][1][i]:,} |")
    with open(args.out + ".md", "w") as f:
        f.write("Mean test NLL (nats per token) by context length\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    mid = [math.sqrt(lo * hi) for lo, hi in buckets]
    styles = plot_style.figure_styles(labels)
    for label, (means, _) in zip(labels, table):
        ax.plot(mid, means, label=label, **styles[label])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (tokens the prediction sees), bucket geometric mean")
    ax.set_ylabel("mean test NLL (nats / token)")
    ax.grid(True, alpha=0.3)
    plot_style.legend_outside(fig, fontsize=8)
    fig.savefig(args.out + ".png", dpi=120, bbox_inches="tight")
    provenance.record(args.out)
    print(f"wrote {args.out}.md, .csv, .png")


if __name__ == "__main__":
    main()
