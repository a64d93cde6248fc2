"""The mini GPT on WikiText-2 per attention (issue 26; scripts/sweeps/gpt_mini.sh): test perplexity,
best validation loss, training tokens per second and wall time of each run, and per attention the
mean and spread over seeds.

    python -m scripts.analysis.gpt_mini_table out/gpt_mini [more dirs] [--out=results/gpt_mini_baselines]

A run is a folder with train.py's ``final_metrics.json`` (task lm) and eval_ppl.py's result
``eval_test.json`` (the sweep writes both); a run without the evaluation is listed with an empty
perplexity. The attention column is the run folder's name without ``_s<seed>`` (the sweep's
naming: ``danet`` is the DANet mini model, ``dense`` the DenseAttention op in the GPT mini).

Writes to ``--out``:
- ``summary.csv``: one row per run: ``attention, seed, test_ppl, test_tokens, protocol,
  best_val_loss, best_iter, iters, tokens, train_time_s, tokens_per_s, num_threads, cpu,
  attention_params`` (perplexity per GPT-2 BPE token of the test split; tokens = training tokens,
  iters x batch x block x gradient accumulation; tokens/s = tokens / training seconds, evaluation
  excluded; cpu = the CPU model in the run's manifest.json);
- ``gpt_mini_table.md``: per attention, test perplexity mean +- standard deviation (min-max) over
  seeds, tokens/s and wall time (medians; one per CPU model where the runs differ); a run whose
  training tokens differ from the softmax runs' is marked (the issue compares at the softmax baseline's budget);
- an entry in the folder's ``manifest.json``.

Exit status 1 (SystemExit) when no lm run is found.
"""
import argparse
import csv
import io
import json
import os
import statistics
import sys

import provenance
from data import write_text
from scripts.analysis.runs import find_runs, run_cpu

COLUMNS = ("attention", "seed", "test_ppl", "test_tokens", "protocol", "best_val_loss", "best_iter", "iters",
           "tokens", "train_time_s", "tokens_per_s", "num_threads", "cpu", "attention_params")
FIRST = ("softmax", "fastmax1", "fastmax2", "dense", "danet")


def attention_name(run_dir, seed):
    """The sweep's attention name of a run folder ``<attention>_s<seed>`` (the folder name otherwise)."""
    name = os.path.basename(os.path.normpath(run_dir))
    suffix = f"_s{seed}"
    return name[: -len(suffix)] if name.endswith(suffix) else name


def read_runs(files):
    """One dict per lm run (the COLUMNS and ``path``) from final_metrics.json files and the
    ``eval_test.json`` beside each."""
    runs = []
    for path in files:
        with open(path) as f:
            metrics = json.load(f)
        cfg = metrics.get("config", {})
        if cfg.get("task") != "lm":
            continue
        run_dir = os.path.dirname(path)
        tokens = metrics["iters"] * cfg["batch_size"] * cfg["block_size"] * cfg.get("gradient_accumulation_steps", 1)
        best = metrics.get("best_metric") or {}
        row = {"attention": attention_name(run_dir, cfg["seed"]), "seed": cfg["seed"], "test_ppl": None,
               "test_tokens": None, "protocol": None, "best_val_loss": best.get("value"),
               "best_iter": metrics.get("best_iter"), "iters": metrics["iters"], "tokens": tokens,
               "train_time_s": metrics.get("train_time_s"),
               "tokens_per_s": tokens / metrics["train_time_s"] if metrics.get("train_time_s") else None,
               "num_threads": cfg.get("num_threads"), "cpu": run_cpu(run_dir),
               "attention_params": json.dumps(cfg.get("attention_params", {}), sort_keys=True), "path": run_dir}
        evaluation = os.path.join(run_dir, "eval_test.json")
        if os.path.exists(evaluation):
            with open(evaluation) as f:
                result = json.load(f)
            row.update(test_ppl=result["value"], test_tokens=result["tokens_scored"], protocol=result["protocol"])
        runs.append(row)
    return runs


def _order(names):
    return [n for n in FIRST if n in names] + sorted(n for n in names if n not in FIRST)


def _spread(values, fmt):
    if len(values) == 1:
        return f"{values[0]:{fmt}} (1 seed)"
    return (f"{statistics.mean(values):{fmt}} +- {statistics.stdev(values):{fmt}} "
            f"({min(values):{fmt}}-{max(values):{fmt}}, {len(values)} seeds)")


def _median_per_cpu(runs, value, fmt):
    """The median of ``value(run)`` over ``runs`` (None values left out), formatted with ``fmt``; one median
    per CPU model when the runs ran on more than one (speeds and times of different CPUs do not compare)."""
    by_cpu = {}
    for r in runs:
        v = value(r)
        if v is not None:
            by_cpu.setdefault(r["cpu"] or "CPU not recorded", []).append(v)
    if len(by_cpu) <= 1:
        values = next(iter(by_cpu.values()), [])
        return f"{statistics.median(values):{fmt}}" if values else "-"
    return ", ".join(f"{statistics.median(values):{fmt}} ({cpu})" for cpu, values in sorted(by_cpu.items()))


def table_rows(runs):
    """Markdown rows per attention: name, test perplexity, best val loss, tokens/s, wall time, tokens, note."""
    softmax_tokens = {r["tokens"] for r in runs if r["attention"] == "softmax"}
    rows = []
    for name in _order({r["attention"] for r in runs}):
        mine = [r for r in runs if r["attention"] == name]
        ppl = [r["test_ppl"] for r in mine if r["test_ppl"] is not None]
        val = [r["best_val_loss"] for r in mine if r["best_val_loss"] is not None]
        tokens = sorted({r["tokens"] for r in mine})
        note = "" if not softmax_tokens or set(tokens) <= softmax_tokens else "other budget than softmax"
        rows.append([name, _spread(ppl, ".2f") if ppl else "not evaluated", _spread(val, ".4f") if val else "-",
                     _median_per_cpu(mine, lambda r: r["tokens_per_s"] or None, ",.0f"),
                     _median_per_cpu(mine, lambda r: r["train_time_s"] / 60 if r["train_time_s"] else None, ".1f"),
                     "/".join(f"{t:,}" for t in tokens), note])
    return rows


def markdown(runs):
    header = ["attention", "test perplexity", "best val loss (nats)", "tokens/s (median)", "training min (median)",
              "training tokens", "note"]
    threads = sorted({r["num_threads"] for r in runs if r["num_threads"]})
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in table_rows(runs)]
    return "\n".join([
        "# Mini GPT on WikiText-2 per attention (configs/wikitext2_gpt_mini.py + configs/attention/<name>.py)", "",
        "Test perplexity per GPT-2 BPE token (eval_ppl.py, the protocol in summary.csv), mean +- std over seeds; "
        f"training threads: {', '.join(map(str, threads)) or 'not recorded'}; CPUs: "
        f"{', '.join(sorted({r['cpu'] or 'not recorded' for r in runs}))} (per run in summary.csv; tokens/s and times per "
        "CPU where an attention's runs ran on more than one). "
        "Wall times of runs that shared the cores with other work are not benchmark numbers.", "",
        *lines, ""])


def summary_csv(runs):
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in sorted(runs, key=lambda r: (_order({x["attention"] for x in runs}).index(r["attention"]), r["seed"])):
        writer.writerow(r)
    return buffer.getvalue()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="run dirs or final_metrics.json files (searched recursively)")
    ap.add_argument("--out", default="results/gpt_mini_baselines", help="output folder")
    args = ap.parse_args(argv)
    runs = read_runs(find_runs(args.paths))
    if not runs:
        sys.exit(f"no lm run (final_metrics.json of task lm) under {', '.join(args.paths)}")
    os.makedirs(args.out, exist_ok=True)
    for name, text in (("summary.csv", summary_csv(runs)), ("gpt_mini_table.md", markdown(runs))):
        write_text(os.path.join(args.out, name), text)
        print(f"wrote {os.path.join(args.out, name)}")
    provenance.record(os.path.join(args.out, "gpt_mini_table"),
                      extra={"outputs": ["summary.csv", "gpt_mini_table.md"],
                             "runs": sorted(os.path.relpath(r["path"]) for r in runs)})


if __name__ == "__main__":
    main()
