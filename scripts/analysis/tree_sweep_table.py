"""Collect the JSONs of scripts/sweeps/tree_ppl.sh into a CSV, markdown tables laid out like Figure 2
of "High Attention Scores and Where to Find Them" and a plot.

    python -m scripts.analysis.tree_sweep_table --in_dir results/tree_sweep [--out results/tree_sweep/tree_sweep_table] [--L 1024]

Inputs: every *.json in --in_dir written by eval_ppl.py (keys "metric", "value", "mean_nll",
"protocol", "attention", "attention_params", "attention_stats", "offset", "seed", ...), and the lines
of --in_dir/evals.jsonl, where results/ keeps a finished sweep's JSON files merged (one line per
file: {"file": "<name>.json", ...its keys}; ``python -m scripts.analysis.runs merge`` writes it,
``scripts/analysis/runs.py`` describes it).

A configuration is (protocol, attention, sampler, normalization, E); its runs differ in the test
slice (offset) and the sampling seed. Slices differ from each other far more than configurations
do, so every number here first averages over the slices of one seed, and the ± is the unbiased
standard deviation of those per-seed values ACROSS SEEDS (the sampling noise of the method; empty
with one seed). Outputs:
  <out>.csv  one row per run, then one "config" row per configuration (mean and std across seeds,
             number of seeds and slices, cost fraction alignment_inner_products /
             full_attention_inner_products, paired change vs exact attention);
  <out>.md   per (protocol, normalization): rows = samplers, columns = E with L^E in the header,
             cells "mean ± std across seeds"; the baselines (exact softmax, windowed softmax) below;
             for perplexity protocols also the paired change against exact attention on the same
             slice, 100 (exp(NLL_tree - NLL_exact) - 1) in %, mean ± std across seeds;
  <out>.png  value vs E per sampler (one panel per protocol x normalization), cost fraction on a
             second y-axis.
"""
import argparse
import csv
import math
import os
import statistics

import provenance
from scripts.analysis.published.tree import SAMPLER_LABEL, SAMPLER_ORDER
from scripts.analysis.runs import read_evals

TREE_DEFAULTS = {"E": 0.5, "sampler": "edh", "normalization": "bud_mean"}  # TreeAttention's defaults


def _attention_label(d):
    name = d.get("attention") or "model_default"
    window = (d.get("attention_params") or {}).get("window", 0)
    return f"{name}_window{window}" if name.startswith("softmax") and window else name


def load_runs(in_dir):
    """Read the eval results of ``in_dir`` (its eval_ppl.py JSON files and the lines of its merged
    ``evals.jsonl``: ``runs.read_evals``) into flat dicts, in file name order (skips results that are
    not eval results)."""
    runs = []
    for name, d in read_evals(in_dir):
        if "value" not in d or "protocol" not in d:
            continue
        tree = d.get("attention") == "tree"
        params = {**TREE_DEFAULTS, **(d.get("attention_params") or {})} if tree else {}
        st = d.get("attention_stats") or {}
        full = st.get("full_attention_inner_products") or 0
        frac = st.get("alignment_inner_products", 0) / full if full else (float("nan") if tree else 1.0)
        runs.append({
            "file": name,
            "attention": _attention_label(d),
            "sampler": params.get("sampler", ""),
            "E": float(params["E"]) if "E" in params else 1.0,
            "normalization": params.get("normalization", ""),
            "protocol": d["protocol"],
            "metric": d.get("metric", ""),
            "offset": float(d.get("offset", float("nan"))),
            "seed": int(d.get("seed", 0)),
            "fraction": d.get("fraction", ""),
            "value": float(d["value"]),
            "mean_nll": float(d["mean_nll"]),
            "tokens_scored": d.get("tokens_scored", ""),
            "seconds": d.get("seconds", ""),
            "cost_fraction": frac,
        })
    return runs


def config_key(r):
    return (r["protocol"], r["attention"], r["sampler"], r["normalization"], r["E"])


def _mean_std(values):
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else float("nan"))


def _per_seed(runs, quantity):
    """{seed: mean over the seed's slices of quantity(run)}."""
    by_seed = {}
    for r in runs:
        by_seed.setdefault(r["seed"], []).append(quantity(r))
    return {s: statistics.fmean(v) for s, v in by_seed.items()}


def aggregate(runs):
    """Per configuration: value and paired change (vs exact softmax attention on the same slice and
    protocol; perplexity protocols only), each as mean and std across seeds of the slice means."""
    exact = {}
    for r in runs:
        if r["attention"] in ("softmax", "softmax_reference", "model_default"):
            exact.setdefault((r["protocol"], r["offset"]), []).append(r["mean_nll"])
    exact = {k: statistics.fmean(v) for k, v in exact.items()}
    groups = {}
    for r in runs:
        groups.setdefault(config_key(r), []).append(r)
    out = {}
    for key, rs in groups.items():
        value = _mean_std(list(_per_seed(rs, lambda r: r["value"]).values()))
        entry = {"mean": value[0], "std": value[1], "n_seeds": len({r["seed"] for r in rs}),
                 "offsets": sorted({r["offset"] for r in rs}), "metric": rs[0]["metric"],
                 "cost_fraction": statistics.fmean([r["cost_fraction"] for r in rs]),
                 "change_mean": float("nan"), "change_std": float("nan")}
        if rs[0]["metric"] == "perplexity" and all((r["protocol"], r["offset"]) in exact for r in rs):
            change = _per_seed(rs, lambda r: 100.0 * math.expm1(r["mean_nll"] - exact[(r["protocol"], r["offset"])]))
            entry["change_mean"], entry["change_std"] = _mean_std(list(change.values()))
        out[key] = entry
    return out


def fmt(mean, std, digits=1, sign=""):
    text = f"{mean:{sign}.{digits}f}"
    return text if math.isnan(std) else f"{text} ± {std:.{digits}f}"


def _samplers(keys):
    return sorted({k[2] for k in keys}, key=lambda s: SAMPLER_ORDER.index(s) if s in SAMPLER_ORDER else 99)


def markdown(agg, L):
    lines = []
    for protocol in sorted({k[0] for k in agg}):
        tree_keys = [k for k in agg if k[0] == protocol and k[1] == "tree"]
        metric = next((v["metric"] for k, v in agg.items() if k[0] == protocol), "")
        for norm in sorted({k[3] for k in tree_keys}):
            keys = [k for k in tree_keys if k[3] == norm]
            Es = sorted({k[4] for k in keys})
            n_seeds = max(agg[k]["n_seeds"] for k in keys)
            lines += [f"### {protocol} ({metric}), normalization = {norm}: mean ± std across {n_seeds} seed(s)", ""]
            head = ["sampler \\ L^E (E)"] + [f"{round(L ** E)} ({E:g})" for E in Es]
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for s in _samplers(keys):
                cells = [fmt(agg[k]["mean"], agg[k]["std"]) if (k := (protocol, "tree", s, norm, E)) in agg else "–"
                         for E in Es]
                lines.append(f"| {SAMPLER_LABEL.get(s, s)} | " + " | ".join(cells) + " |")
            fr = [statistics.fmean([agg[k]["cost_fraction"] for k in keys if k[4] == E]) for E in Es]
            lines += ["| cost fraction | " + " | ".join(f"{f:.3f}" for f in fr) + " |", ""]
            for k, v in sorted(agg.items()):
                if k[0] == protocol and k[1] != "tree":
                    lines.append(f"- {k[1]}: {fmt(v['mean'], v['std'])} (slices at offsets {v['offsets']}, "
                                 f"{v['n_seeds']} seed(s)" + (f"; paired change {fmt(v['change_mean'], v['change_std'], 2, '+')}%"
                                                              if not math.isnan(v["change_mean"]) and k[1] != "softmax" else "") + ")")
            lines.append("")
            if metric == "perplexity":
                lines += [f"Paired change of perplexity vs exact attention on the same tokens, % "
                          f"({protocol}, {norm}; mean ± std across seeds):", ""]
                lines += ["| sampler | " + " | ".join(f"E={E:g}" for E in Es) + " |", "|" + "---|" * (len(Es) + 1)]
                for s in _samplers(keys):
                    cells = [fmt(agg[k]["change_mean"], agg[k]["change_std"], 2, "+")
                             if (k := (protocol, "tree", s, norm, E)) in agg else "–" for E in Es]
                    lines.append(f"| {s} | " + " | ".join(cells) + " |")
                lines.append("")
    return "\n".join(lines)


def write_csv(path, runs, agg):
    fields = ["row", "file", "attention", "sampler", "E", "normalization", "protocol", "metric", "offset",
              "seed", "fraction", "value", "std", "n_seeds", "change_pct", "change_pct_std", "mean_nll",
              "tokens_scored", "seconds", "cost_fraction"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in runs:
            w.writerow({"row": "run", **{k: r[k] for k in fields if k in r}})
        for k, v in sorted(agg.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
            protocol, att, sampler, norm, E = k
            w.writerow({"row": "config", "attention": att, "sampler": sampler, "E": E, "normalization": norm,
                        "protocol": protocol, "metric": v["metric"], "value": v["mean"], "std": v["std"],
                        "n_seeds": v["n_seeds"], "change_pct": v["change_mean"], "change_pct_std": v["change_std"],
                        "cost_fraction": v["cost_fraction"]})


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
        for i, s in enumerate(_samplers(keys)):
            ks = sorted((k for k in keys if k[2] == s), key=lambda k: k[4])
            ax.errorbar([k[4] for k in ks], [agg[k]["mean"] for k in ks],
                        yerr=[0 if math.isnan(agg[k]["std"]) else agg[k]["std"] for k in ks],
                        marker="o", capsize=2, label=SAMPLER_LABEL.get(s, s), color=f"C{i}")
        for j, (k, v) in enumerate(sorted((k, v) for k, v in agg.items() if k[0] == protocol and k[1] != "tree")):
            ax.axhline(v["mean"], color="k", ls=[":", "-."][j % 2], lw=1, label=k[1])
        Es = sorted({k[4] for k in keys})
        ax2 = ax.twinx()
        ax2.plot(Es, [statistics.fmean([agg[k]["cost_fraction"] for k in keys if k[4] == E]) for E in Es],
                 "k--", lw=1, label="cost fraction")
        ax2.set_ylabel("inner products / exact attention's")
        ax2.set_ylim(0, 1.05)
        ax.set_yscale("log")
        ax.set_xlabel("E  (ceil(l^E) terms)")
        ax.set_ylabel(next((agg[k]["metric"] for k in keys), ""))
        ax.set_title(f"{protocol}, {norm}")
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description="tables and plot of the tree attention sweep")
    ap.add_argument("--in_dir", default="results/tree_sweep")
    ap.add_argument("--out", default="", help="output prefix (default <in_dir>/table)")
    ap.add_argument("--L", type=int, default=1024, help="block length for the L^E header")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(args.in_dir, "table")
    runs = load_runs(args.in_dir)
    if not runs:
        raise SystemExit(f"no eval_ppl JSON files in {args.in_dir}")
    agg = aggregate(runs)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_csv(out + ".csv", runs, agg)
    md = markdown(agg, args.L)
    with open(out + ".md", "w") as f:
        f.write(md + "\n")
    plot(out + ".png", agg)
    provenance.record(out)
    print(md)
    print(f"wrote {out}.csv {out}.md {out}.png ({len(runs)} runs)")


if __name__ == "__main__":
    main()
