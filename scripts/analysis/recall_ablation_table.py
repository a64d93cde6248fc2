"""The MQAR ablation table (issue 42, item 1; ``scripts/sweeps/recall_ablation.sh``): one row per run,
what it changes from its base row, and how far it got.

    python -m scripts.analysis.recall_ablation_table out/recall_ablation --out=results/recall/ablation_64_4

A row is a run folder ``<root>/<row>/`` with train.py's ``final_metrics.json`` and ``log.jsonl``. Its
base is the row named by the part of its name before the first "_" (``zoology_mlp`` -> ``zoology``),
or the row ``--base`` names for every row;
"changes" lists the configuration keys (``COMPARED``) whose values differ from the base's, read
from both runs' ``final_metrics.json`` (nothing typed by hand). Columns: test accuracy (the whole
test split, weights of the best validation step), the best validation accuracy and its step, the
first evaluated step with validation accuracy >= 0.5 ("-" if none: the plateau), the last
training loss logged, the run's CPU, and the run folder (its logs, linked from the markdown).

Writes ``<out>/summary.csv``, ``<out>/table.md`` and their entry ``table`` in ``<out>/manifest.json``;
prints the markdown.

Raises SystemExit (status 2) when the root holds no run.
"""
import argparse
import csv
import io
import json
import os
import sys

import provenance
from scripts.analysis.runs import find_runs, run_cpu

COMPARED = ("mlp", "tie_lm_head", "embedding_init_std", "pos_embedding_init_std", "linear_init",
            "scale_residual_init", "token_shift", "beta2", "lr_schedule", "warmup_iters", "grad_clip",
            "learning_rate", "weight_decay", "max_iters", "recall_sizes", "seed")
COLUMNS = ("row", "base", "changes", "test_accuracy", "best_val_accuracy", "best_iter", "first_iter_val_acc_0.5",
           "last_train_loss", "cpu", "run")


def read_log(path):
    """(evaluations [(iter, val_accuracy)], last logged training loss or None) of a log.jsonl."""
    evals, last = [], None
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if "eval" in record and "val_accuracy" in record["eval"]:
                evals.append((record["iter"], record["eval"]["val_accuracy"]))
            elif "loss" in record:
                last = record["loss"]
    return evals, last


def describe(value):
    if isinstance(value, dict):  # recall_sizes: {'train': 100000, ...} -> train=100000,val=1000,test=1000
        return ",".join(f"{k}={v}" for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


def rows(root, base_row=""):
    """The table's rows (dicts of ``COLUMNS``), base rows first, then by name; ``base_row`` (a row
    name) is the base of every row instead of the name's first part."""
    runs = {}
    for path in find_runs([root]):
        run_dir = os.path.dirname(path)
        with open(path) as f:
            runs[os.path.basename(run_dir)] = (run_dir, json.load(f))
    out = []
    for name, (run_dir, final) in runs.items():
        base = base_row or name.split("_", 1)[0]
        cfg, base_cfg = final["config"], runs.get(base, (None, {"config": {}}))[1]["config"]
        changes = [f"{k}={describe(cfg.get(k))}" for k in COMPARED if base != name and base_cfg
                   and cfg.get(k) != base_cfg.get(k)]
        evals, last = read_log(os.path.join(run_dir, "log.jsonl"))
        best_iter, best = max(evals, key=lambda e: (e[1], -e[0])) if evals else (None, None)
        first = next((it for it, acc in evals if acc >= 0.5), None)
        out.append({"row": name, "base": base if base in runs else "", "changes": " ".join(changes) or
                    ("(the base)" if base == name else "(none)"), "test_accuracy": final.get("test_accuracy"),
                    "best_val_accuracy": best, "best_iter": best_iter,
                    "first_iter_val_acc_0.5": first if first is not None else "-", "last_train_loss": last,
                    "cpu": run_cpu(run_dir) or "", "run": run_dir})
    return sorted(out, key=lambda r: (r["base"], r["row"] != r["base"], r["row"]))


def markdown(table, link_root=""):
    """The table as markdown; each row links its run folder (``link_root`` + folder name)."""
    head = ("| row | changes from its base | test acc. | best val acc. (step) | val acc. >= 0.5 from step "
            "| last train loss | run |")
    lines = [head, "|---|---|---:|---:|---:|---:|---|"]
    for r in table:
        link = f"[{os.path.basename(r['run'])}]({link_root}{os.path.basename(r['run'])}/)"
        lines.append(f"| {r['row']} | {r['changes']} | {r['test_accuracy']:.4f} | {r['best_val_accuracy']:.4f} "
                     f"({r['best_iter']}) | {r['first_iter_val_acc_0.5']} | {r['last_train_loss']:.3f} | {link} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="folder of the run folders (OUT_ROOT of recall_ablation.sh, or the archive)")
    ap.add_argument("--out", default="", help="folder for summary.csv and table.md ('' = print only)")
    ap.add_argument("--link_root", default="", help="prefix of the run links in the markdown")
    ap.add_argument("--base", default="", help="the row every row is compared with ('' = its name's first part)")
    a = ap.parse_args(argv)
    table = rows(a.root, a.base)
    if not table:
        print(f"error: no run (final_metrics.json) under {a.root}", file=sys.stderr)
        raise SystemExit(2)
    text = markdown(table, a.link_root)
    if a.out:
        from data import write_text

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(table)
        write_text(os.path.join(a.out, "summary.csv"), buffer.getvalue())
        write_text(os.path.join(a.out, "table.md"), text)
        provenance.record(os.path.join(a.out, "table"), extra={"outputs": ["summary.csv", "table.md"]})
    print(text, end="")
    return table


if __name__ == "__main__":
    main()
