"""The multi-query associative recall (MQAR) table: test accuracy per attention x cell (sequence
length, key-value pairs, width), mean and spread over seeds at the learning rate picked on seed 0,
and training tokens per second (issue 25; tasks/recall.py, scripts/sweeps/recall.sh).

    python -m scripts.analysis.recall_table table out/recall [more dirs] [--out=results/recall]
    python -m scripts.analysis.recall_table pick out/recall --attention=softmax --seq_len=256 \\
        --num_pairs=16 --d_model=64            # prints the picked learning rate (%g)
    python -m scripts.analysis.recall_table table out/recall_fastmax_norm --label_params=normalization,temperature,lim \\
        --out=results/recall/fastmax_norm      # a row per option setting (scripts/sweeps/recall_fastmax_norm.sh)
    python -m scripts.analysis.recall_table table out/old_runs --note="Fastmax's old default: max_norm" \\
        --out=results/recall/old              # --note: a paragraph under the first heading

Reads every ``final_metrics.json`` under the paths (train.py's final metrics of task "recall").
A cell is (length, pairs, width, token shift or not): runs with a token shift form cells of their own.
Picking: among the seed-0 runs of one attention and cell, the highest validation accuracy of the
selected checkpoint (``best_metric``; test accuracy never decides), ties to the smaller rate. The
cell's entry is then every seed's run at that rate. Reading, picking and the spread are
``scripts/analysis/published/recall.py``'s (docs/recall.md's table at a glance is rendered from summary.csv
by the same functions, ``python -m scripts.analysis.publish``).

Writes to ``--out``:
- ``summary.csv``: one row per run, columns ``attention, seq_len, num_pairs, d_model, token_shift, seed,
  test_accuracy, tokens_per_s`` (accuracy a fraction over query positions; tokens/s = training
  tokens (iters x batch x length) per second of training, evaluation excluded), then
  ``learning_rate, val_accuracy, picked`` (whether the run is at its cell's picked rate), ``num_threads``;
- ``recall_table.md``: accuracy mean +- standard deviation (min-max, seeds) per attention x cell,
  tokens/s per attention x cell (median over the cell's runs with the most threads: a run with
  fewer threads is not comparable), and Zoology's numbers where the
  setting matches (Arora et al. 2023, "Zoology: Measuring and Improving Recall in Efficient
  Language Models", Figure 2: attention about 1.0 in every cell; their models have no MLP).

Exit status 1 (SystemExit) when no recall run is found, or (pick) no seed-0 run of the cell.
"""
import argparse
import csv
import io
import os
import statistics
import sys

import provenance
from data import write_text
from scripts.analysis.published.formatting import spread
from scripts.analysis.published.papers import ZOOLOGY_NOTE
from scripts.analysis.published.recall import (RECALL_COLUMNS, cell_key, cell_label, mark_picked, pick_rate, picked_runs,
                                               read_recall_runs, recall_order)
from scripts.analysis.runs import find_runs



def tables(runs):
    """(accuracy rows, tokens/s rows, cell labels) for the markdown: rows per attention, a column per cell."""
    cells = sorted({k[1:] for k in map(cell_key, runs)})
    labels = [cell_label(*c) for c in cells]
    accuracy, speed = [], []
    for attention in recall_order({r["attention"] for r in runs}):
        acc_row, speed_row = [attention], [attention]
        for cell in cells:
            values = [r["test_accuracy"] for r in picked_runs(runs, attention, cell)]
            acc_row.append(spread(values, ".3f") if values else "-")
            speed_row.append(_speed(r for r in runs if cell_key(r) == (attention, *cell) and r["tokens_per_s"]))
        accuracy.append(acc_row)
        speed.append(speed_row)
    return accuracy, speed, labels


def _speed(runs):
    """Median tokens/s of the runs with the most threads (runs with fewer are not comparable), as
    "37,876 (2 threads)"; "-" without runs."""
    runs = list(runs)
    if not runs:
        return "-"
    threads = max(r["num_threads"] or 0 for r in runs)
    rates = [r["tokens_per_s"] for r in runs if (r["num_threads"] or 0) == threads]
    return f"{statistics.median(rates):,.0f} ({threads} thread{'s' if threads != 1 else ''})" if threads \
        else f"{statistics.median(rates):,.0f}"


def _markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def markdown(runs, note=""):
    """The two tables as markdown; ``note`` (if any) is a paragraph under the first heading."""
    accuracy, speed, labels = tables(runs)
    return "\n\n".join([
        "# MQAR test accuracy (fraction of query positions), mean +- std over seeds at the picked learning rate",
        *([note] if note else []),
        _markdown_table(["attention", *labels], accuracy),
        "# Training tokens per second (median over the cell's runs with the most threads; this machine, see the "
        "manifest; runs that shared the cores with other work are slower: a quiet measurement is "
        "scripts/bench/train_throughput.py)",
        _markdown_table(["attention", *labels], speed),
        ZOOLOGY_NOTE, ""])


def summary_csv(runs):
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=RECALL_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in sorted(runs, key=lambda r: (*cell_key(r), r["learning_rate"], r["seed"])):
        writer.writerow(r)
    return buffer.getvalue()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("table", "pick"))
    ap.add_argument("paths", nargs="+", help="run dirs or final_metrics.json files (searched recursively)")
    ap.add_argument("--out", default="results/recall", help="table: output folder")
    ap.add_argument("--attention", help="pick: attention label (softmax, fastmax1, fastmax2, dense, linear, ...)")
    ap.add_argument("--seq_len", type=int)
    ap.add_argument("--num_pairs", type=int)
    ap.add_argument("--d_model", type=int)
    ap.add_argument("--token_shift", choices=("True", "False"),
                    help="pick: the runs with or without a token shift (needed only when PATHS hold both)")
    ap.add_argument("--label_params", default="",
                    help="comma list of attention parameters appended to the attention label when a run sets them "
                         "(a study of one method's options: normalization,temperature,lim)")
    ap.add_argument("--note", default="", help="table: a paragraph under the first heading of recall_table.md "
                                               "(e.g. which defaults the runs used)")
    args = ap.parse_args(argv)
    label_params = tuple(p for p in args.label_params.split(",") if p)
    runs = read_recall_runs(find_runs(args.paths), label_params)
    if not runs:
        sys.exit(f"no recall run (final_metrics.json of task recall) under {', '.join(args.paths)}")
    if args.command == "pick":
        key = (args.attention, args.seq_len, args.num_pairs, args.d_model)
        if None in key:
            sys.exit("pick needs --attention, --seq_len, --num_pairs and --d_model")
        shifts = {r["token_shift"] for r in runs if cell_key(r)[:4] == key}
        if args.token_shift is not None:
            shifts = {args.token_shift == "True"}
        elif len(shifts) > 1:
            sys.exit(f"runs of {key} with and without a token shift under {', '.join(args.paths)}: "
                     "pass --token_shift=True or False")
        key = (*key, shifts.pop() if shifts else False)
        rate = pick_rate(runs, key)
        if rate is None:
            sys.exit(f"no seed-0 run of {key} under {', '.join(args.paths)}")
        print(f"{rate:g}")
        return
    mark_picked(runs)
    os.makedirs(args.out, exist_ok=True)
    for name, text in (("summary.csv", summary_csv(runs)), ("recall_table.md", markdown(runs, args.note))):
        write_text(os.path.join(args.out, name), text)
        print(f"wrote {os.path.join(args.out, name)}")
    provenance.record(os.path.join(args.out, "recall_table"), extra={"outputs": ["summary.csv", "recall_table.md"]})


if __name__ == "__main__":
    main()
