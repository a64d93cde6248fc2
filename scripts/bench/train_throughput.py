"""Training throughput (tokens/s of train.py) of several runs measured side by side in one run.

    python -m scripts.bench.train_throughput configs/wikitext2_gpt_mini.py \
        configs/wikitext2_gpt_mini.py+configs/attention/fastmax1.py \
        configs/wikitext2_gpt_mini.py+configs/attention/fastmax2.py \
        [--iters=8] [--rounds=3] [--out=results/bench_train/bench_train_throughput]

Each argument that is not an option is one run: its config layers joined by "+", given to
train.py in that order (``a.py+configs/attention/fastmax1.py`` = ``python train.py a.py
configs/attention/fastmax1.py``). Each round runs every run once for --iters timed optimizer
steps (after one warm-up step), in the order given, so slow drifts of a shared machine hit all
runs alike. The CSV and JSON name a run by its argument; the plot by its layers' out_dir name
(``wikitext2_gpt_mini_fastmax1``, training.layered_out_dir). Tokens/s per round come
from train.py's own log (scripts.bench.common.train_py: logging every step, no evaluation
inside the window); the summary is the median over rounds. Writes <out>.csv, <out>.json and a
bar plot <out>.png.
"""
import csv
import os
import statistics

import torch

import configurator
import training
from scripts.bench.common import ROOT, train_py
from data import write_json
import provenance


def main(argv):
    torch.set_flush_denormal(True)
    runs = [a.split("+") for a in argv if not a.startswith("--")]
    opts = configurator.parse(
        {"iters": 8, "rounds": 3, "out": os.path.join(ROOT, "results", "bench_train", "bench_train_throughput")},
        [a for a in argv if a.startswith("--")],
        help={"iters": "timed optimizer steps per run and round (after one warm-up step)",
              "rounds": "rounds; each runs every run once, in the order given",
              "out": "output path without extension"})
    if not runs:
        raise SystemExit("give at least one run, e.g. configs/wikitext2_gpt_mini.py+configs/attention/fastmax1.py")
    rows = []
    for r in range(opts["rounds"]):
        for files in runs:
            name = "+".join(os.path.relpath(f, ROOT) if os.path.isabs(f) else f for f in files)
            rows.append({"round": r, "config": name, "tok_per_s": train_py(files, opts["iters"]),
                         "threads": torch.get_num_threads()})
            print(rows[-1], flush=True)
    names = list(dict.fromkeys(row["config"] for row in rows))
    median = {name: statistics.median(r["tok_per_s"] for r in rows if r["config"] == name) for name in names}
    summary = {"configs": names, "iters": opts["iters"], "rounds": opts["rounds"],
               "threads": torch.get_num_threads(), "torch": torch.__version__,
               "median_tok_per_s": median,
               "ratio_to_first": {name: median[name] / median[names[0]] for name in names}, "rows": rows}
    out = opts["out"]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["round", "config", "tok_per_s", "threads"])
        writer.writeheader()
        writer.writerows(rows)
    write_json(out + ".json", summary, indent=2)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.5))
    labels = [os.path.relpath(training.layered_out_dir(n.split("+")), "out") for n in names]
    ax.bar(labels, [median[n] for n in names])
    for i, name in enumerate(names):
        rates = [r["tok_per_s"] for r in rows if r["config"] == name]
        ax.plot([i] * len(rates), rates, "k.")
    ax.set_ylabel("training tokens / s (median; dots: rounds)")
    ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=120)
    provenance.record(out)
    for name in names:
        print(f"{name}: {median[name]:,.0f} tok/s ({summary['ratio_to_first'][name]:.2f}x the first)")
    print(f"wrote {out}.{{csv,json,png}}")


if __name__ == "__main__":
    configurator.run_cli(main)
