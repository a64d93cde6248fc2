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

Reading the runs and the table rows are ``scripts/analysis/published/lm.py``'s (docs/baselines.md renders
the same table from the runs, ``python -m scripts.analysis.publish``).

Exit status 1 (SystemExit) when no lm run is found.
"""
import argparse
import csv
import io
import os
import sys

import provenance
from data import write_text
from scripts.analysis.published.lm import GPT_MINI_COLUMNS, gpt_mini_order, gpt_mini_table, read_gpt_mini_runs
from scripts.analysis.runs import find_runs


def markdown(runs):
    threads = sorted({r["num_threads"] for r in runs if r["num_threads"]})
    return "\n".join([
        "# Mini GPT on WikiText-2 per attention (configs/wikitext2_gpt_mini.py + configs/attention/<name>.py)", "",
        "Test perplexity per GPT-2 BPE token (eval_ppl.py, the protocol in summary.csv), mean +- std over seeds; "
        f"training threads: {', '.join(map(str, threads)) or 'not recorded'}; CPUs: "
        f"{', '.join(sorted({r['cpu'] or 'not recorded' for r in runs}))} (per run in summary.csv; tokens/s and times per "
        "CPU where an attention's runs ran on more than one). "
        "Wall times of runs that shared the cores with other work are not benchmark numbers.", "",
        gpt_mini_table(runs)])


def summary_csv(runs):
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=GPT_MINI_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    order = gpt_mini_order({r["attention"] for r in runs})
    for r in sorted(runs, key=lambda r: (order.index(r["attention"]), r["seed"])):
        writer.writerow(r)
    return buffer.getvalue()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="run dirs or final_metrics.json files (searched recursively)")
    ap.add_argument("--out", default="results/gpt_mini_baselines", help="output folder")
    args = ap.parse_args(argv)
    runs = read_gpt_mini_runs(find_runs(args.paths))
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
