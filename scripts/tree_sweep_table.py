"""Collect the JSONs of scripts/sweep_tree_ppl.sh into a CSV, a markdown table laid out like Figure 2
of "High Attention Scores and Where to Find Them" and a plot.

    python scripts/tree_sweep_table.py --in_dir results/tree_sweep [--out results/tree_sweep_table] [--L 1024]

Inputs: every *.json in --in_dir written by eval_ppl.py (keys "metric", "value", "protocol",
"attention", "attention_params", "attention_stats", "offset", "fraction", ...).
Outputs:
  <out>.csv  one row per run, then one "mean" row per configuration (mean and unbiased std over the
             slices, i.e. offsets), with the cost fraction alignment_inner_products /
             full_attention_inner_products;
  <out>.md   per (protocol, normalization): rows = samplers, columns = E with T = L^E in the header,
             cells "mean ± std" over the slices; the exact softmax baseline below each table; for
             perplexity protocols also the paired change against exact attention on the same
             slice, exp(NLL_tree - NLL_exact) - 1 in %, averaged over the slices (the slices differ
             far more from each other than the samplers do, so this is the comparison to read);
  <out>.png  value vs E per sampler (one panel per protocol x normalization), cost fraction on a
             second y-axis.
"""
import argparse
import csv
import glob
import json
import math
import os
import statistics
import sys

SAMPLER_ORDER = ["uniform", "edh", "alignment", "positive_alignment", "rff", "favor_plus", "favor_plus_relu"]
SAMPLER_LABEL = {"uniform": "Uniform", "edh": "EDH", "alignment": "Align.", "positive_alignment": "Pos. Align.",
                 "rff": "RFF", "favor_plus": "FAVOR+", "favor_plus_relu": "FAVOR+ReLU"}
TREE_DEFAULTS = {"E": 0.5, "sampler": "edh", "normalization": "consistent"}  # TreeAttention's defaults


def load_runs(in_dir):
    """Read the run JSONs of ``in_dir`` into flat dicts (skips files that are not eval results)."""
    runs = []
    for path in sorted(glob.glob(os.path.join(in_dir, "*.json"))):
        with open(path) as f:
            try:
                d = json.load(f)
            except json.JSONDecodeError:
                print(f"warning: {path} is not valid JSON, skipped", file=sys.stderr)
                continue
        if "value" not in d or "protocol" not in d:
            continue
        params = {**TREE_DEFAULTS, **(d.get("attention_params") or {})} if d.get("attention") == "tree" else {}
        st = d.get("attention_stats") or {}
        full = st.get("full_attention_inner_products") or 0
        frac = st.get("alignment_inner_products", 0) / full if full else (1.0 if d.get("attention") != "tree" else float("nan"))
        runs.append({
            "file": os.path.basename(path),
            "attention": d.get("attention") or "model_default",
            "sampler": params.get("sampler", ""),
            "E": float(params["E"]) if "E" in params else 1.0,
            "normalization": params.get("normalization", ""),
            "protocol": d["protocol"],
            "metric": d.get("metric", ""),
            "offset": float(d.get("offset", float("nan"))),
            "fraction": d.get("fraction", ""),
            "value": float(d["value"]),
            "mean_nll": d.get("mean_nll", ""),
            "tokens_scored": d.get("tokens_scored", ""),
            "seconds": d.get("seconds", ""),
            "cost_fraction": frac,
        })
    return runs


def _key(r):
    return (r["protocol"], r["attention"], r["sampler"], r["normalization"], r["E"])


def aggregate(runs):
    """Mean and unbiased std (nan for a single slice) of value and cost fraction per configuration."""
    groups = {}
    for r in runs:
        groups.setdefault(_key(r), []).append(r)
    out = {}
    for k, rs in groups.items():
        vals = [r["value"] for r in rs]
        fr = [r["cost_fraction"] for r in rs]
        out[k] = {"mean": statistics.fmean(vals), "std": statistics.stdev(vals) if len(vals) > 1 else float("nan"),
                  "n": len(vals), "cost_fraction": statistics.fmean(fr), "metric": rs[0]["metric"],
                  "offsets": sorted(r["offset"] for r in rs)}
    return out


def fmt(mean, std):
    return f"{mean:.1f} ± {std:.1f}" if not math.isnan(std) else f"{mean:.1f}"


def markdown(agg, L):
    lines = []
    protocols = sorted({k[0] for k in agg})
    for protocol in protocols:
        norms = sorted({k[3] for k in agg if k[0] == protocol and k[1] == "tree"})
        Es = sorted({k[4] for k in agg if k[0] == protocol and k[1] == "tree"})
        metric = next((v["metric"] for k, v in agg.items() if k[0] == protocol), "")
        for norm in norms:
            lines.append(f"### {protocol} ({metric}), normalization = {norm}")
            lines.append("")
            head = ["L^E (E)"] + [f"{round(L ** E)} ({E:g})" for E in Es]
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "---|" * len(head))
            samplers = sorted({k[2] for k in agg if k[0] == protocol and k[1] == "tree" and k[3] == norm},
                              key=lambda s: SAMPLER_ORDER.index(s) if s in SAMPLER_ORDER else 99)
            for s in samplers:
                cells = [SAMPLER_LABEL.get(s, s)]
                for E in Es:
                    v = agg.get((protocol, "tree", s, norm, E))
                    cells.append(fmt(v["mean"], v["std"]) if v else "–")
                lines.append("| " + " | ".join(cells) + " |")
            fr = [f"{statistics.fmean([v['cost_fraction'] for k, v in agg.items() if k[0] == protocol and k[1] == 'tree' and k[3] == norm and k[4] == E]):.3f}"
                  for E in Es]
            lines.append("| cost fraction | " + " | ".join(fr) + " |")
            lines.append("")
            for k, v in agg.items():
                if k[0] == protocol and k[1] != "tree":
                    lines.append(f"Exact {k[1]} attention: {fmt(v['mean'], v['std'])} (slices at offsets {v['offsets']}).")
            lines.append("")
    return "\n".join(lines)


def paired_changes(runs):
    """{(protocol, sampler, normalization, E): mean over slices of 100 (exp(NLL_tree - NLL_exact) - 1)}
    for perplexity runs whose slice (offset) also has an exact-attention run with the same protocol."""
    exact = {(r["protocol"], r["offset"]): float(r["mean_nll"]) for r in runs
             if r["attention"] != "tree" and r["metric"] == "perplexity" and r["mean_nll"] != ""}
    changes = {}
    for r in runs:
        ref = exact.get((r["protocol"], r["offset"]))
        if r["attention"] == "tree" and r["metric"] == "perplexity" and r["mean_nll"] != "" and ref is not None:
            key = (r["protocol"], r["sampler"], r["normalization"], r["E"])
            changes.setdefault(key, []).append(100.0 * math.expm1(float(r["mean_nll"]) - ref))
    return {k: statistics.fmean(v) for k, v in changes.items()}


def paired_markdown(changes):
    lines = []
    for protocol, norm in sorted({(k[0], k[2]) for k in changes}):
        keys = [k for k in changes if k[0] == protocol and k[2] == norm]
        Es = sorted({k[3] for k in keys})
        lines.append(f"### {protocol}, normalization = {norm}: paired change of perplexity vs exact attention "
                     "(%, same tokens, mean over slices)")
        lines.append("")
        lines.append("| sampler | " + " | ".join(f"E={E:g}" for E in Es) + " |")
        lines.append("|" + "---|" * (len(Es) + 1))
        for s in sorted({k[1] for k in keys}, key=lambda s: SAMPLER_ORDER.index(s) if s in SAMPLER_ORDER else 99):
            cells = [f"{changes[(protocol, s, norm, E)]:+.2f}" if (protocol, s, norm, E) in changes else "–" for E in Es]
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def write_csv(path, runs, agg):
    fields = ["row", "file", "attention", "sampler", "E", "normalization", "protocol", "metric", "offset",
              "fraction", "value", "std", "n_slices", "mean_nll", "tokens_scored", "seconds", "cost_fraction"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in runs:
            w.writerow({"row": "run", **{k: r.get(k, "") for k in fields if k in r}})
        for k, v in sorted(agg.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
            protocol, att, sampler, norm, E = k
            w.writerow({"row": "mean", "attention": att, "sampler": sampler, "E": E, "normalization": norm,
                        "protocol": protocol, "metric": v["metric"], "value": v["mean"], "std": v["std"],
                        "n_slices": v["n"], "cost_fraction": v["cost_fraction"]})


def plot(path, agg):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = sorted({(k[0], k[3]) for k in agg if k[1] == "tree"})
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (protocol, norm) in zip(axes[0], panels):
        keys = [k for k in agg if k[0] == protocol and k[1] == "tree" and k[3] == norm]
        for i, s in enumerate(sorted({k[2] for k in keys}, key=lambda s: SAMPLER_ORDER.index(s) if s in SAMPLER_ORDER else 99)):
            ks = sorted((k for k in keys if k[2] == s), key=lambda k: k[4])
            ax.errorbar([k[4] for k in ks], [agg[k]["mean"] for k in ks],
                        yerr=[0 if math.isnan(agg[k]["std"]) else agg[k]["std"] for k in ks],
                        marker="o", capsize=2, label=SAMPLER_LABEL.get(s, s), color=f"C{i}")
        for k, v in agg.items():
            if k[0] == protocol and k[1] != "tree":
                ax.axhline(v["mean"], color="k", ls=":", lw=1, label=f"exact {k[1]}")
        Es = sorted({k[4] for k in keys})
        ax2 = ax.twinx()
        ax2.plot(Es, [statistics.fmean([agg[k]["cost_fraction"] for k in keys if k[4] == E]) for E in Es],
                 "k--", lw=1, label="cost fraction")
        ax2.set_ylabel("inner products / exact attention's")
        ax2.set_ylim(0, 1.05)
        ax.set_yscale("log")
        ax.set_xlabel("E  (T = ceil(l^E) terms)")
        metric = next((agg[k]["metric"] for k in keys), "")
        ax.set_ylabel(metric)
        ax.set_title(f"{protocol}, {norm}")
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description="tables and plot of the tree attention sweep")
    ap.add_argument("--in_dir", default="results/tree_sweep")
    ap.add_argument("--out", default="", help="output prefix (default <in_dir>/table)")
    ap.add_argument("--L", type=int, default=1024, help="block length for the T = L^E header")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(args.in_dir, "table")
    runs = load_runs(args.in_dir)
    if not runs:
        raise SystemExit(f"no eval_ppl JSON files in {args.in_dir}")
    agg = aggregate(runs)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_csv(out + ".csv", runs, agg)
    md = markdown(agg, args.L)
    changes = paired_changes(runs)
    if changes:
        md += "\n" + paired_markdown(changes)
    with open(out + ".md", "w") as f:
        f.write(md + "\n")
    plot(out + ".png", agg)
    print(md)
    print(f"wrote {out}.csv {out}.md {out}.png ({len(runs)} runs)")


if __name__ == "__main__":
    main()
