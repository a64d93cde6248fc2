"""The Long Range Arena accuracy table of our runs beside the published numbers, and the training
steps per second per task and attention (FAST paper, Table 2).

    python -m scripts.analysis.lra_table out/lra [more run dirs or final_metrics.json files] [--out=results/lra]

Reads every ``final_metrics.json`` under the given paths (written by train.py for task
"classify": ``test_accuracy``, ``steps_per_s``, ``config``). A run's column comes from its
``lra_task`` (Pathfinder with ``lra_options["resolution"] == 128`` is Path-X), its row from the
attention: ``softmax``, ``fastmax<p>`` (``attention_params["p"]``, default 2), ``dense`` (DANet),
else the registered name. When several runs fill one cell, ``choose`` picks one by a rule: the run
that saw the most training examples (iters x batch_size), then the higher validation accuracy
(model selection never looks at test), then the path; the runs table lists every run and which
one fills the cell.

Writes to ``--out``: ``lra_table.md`` (accuracy table in the papers' layout, rows = attention,
columns ListOps / Text / Retrieval / Image / Pathfinder / Path-X / Avg, test accuracy in %; our
rows "(ours)", the published rows labelled with their source; then steps per second; then every
run with the CPU model of its manifest.json), ``lra_accuracy.csv`` and ``lra_steps_per_s.csv`` (columns attention, source, the six tasks,
avg). Our Avg (accuracy and steps per second) only for a row that has all five tasks
ListOps .. Pathfinder, as the papers average ('-' otherwise; the published averages are the
papers' own: LRA and FAST over five tasks, DenseAttention over six). A cell at chance is marked as
the papers mark Path-X, "fail", with the majority-class rate beside it: test accuracy at most
the majority rate plus two binomial standard errors, sqrt(m (1 - m) / n) on the n test examples.
Published numbers: the LRA paper (Tay et al. 2021, "Long Range Arena: A Benchmark for Efficient
Transformers", Table 1), FAST ("FAST: Factorizable Attention for Speeding up Transformers",
Tables 1 and 2) and DenseAttention (Table 1). Our numbers come from CPUs with reduced models
and steps (see each run's config), the published ones from full-size GPU runs: compare them as
reference points, not as a reproduction.

Reading the runs, the choice rule, the chance marks and the published rows are
``scripts/analysis/published/lra.py``'s (docs/baselines.md and the README render from the same functions,
``python -m scripts.analysis.publish``).

Exit status 1 (SystemExit) when no final_metrics.json is found.
"""
import argparse
import csv
import io
import os
import sys

from data import write_text
import provenance
from scripts.analysis.published.formatting import bracketed, fmt_cell
from scripts.analysis.published.lra import build_tables, read_lra_runs
from scripts.analysis.published.papers import TASKS, TITLES
from scripts.analysis.runs import find_runs


def markdown(rows, title, chosen):
    """A markdown table of ``rows`` (see ``build_tables``); '-' for an empty cell; our row of an
    attention says so when a chosen run of it (``chosen``) was made under an older default."""
    lines = [f"| {title} | " + " | ".join(TITLES) + " | Avg |", "|---" * (len(TITLES) + 2) + "|"]
    for label, source, vals, avg in rows:
        notes = "".join(f"; {note}" for note in sorted({r["older_defaults"] for (a, _), r in chosen.items()
                                                        if a == label} - {""}))
        name = f"{label} (ours{notes})" if source == "ours" else f"{label} ({source})"
        cells = [fmt_cell(v) or "-" for v in vals] + [fmt_cell(avg) or "-"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_csv(rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["attention", "source", *TASKS, "avg"])
    for label, source, vals, avg in rows:
        w.writerow([label, source, *[fmt_cell(v) for v in vals], fmt_cell(avg)])
    return buf.getvalue()


def runs_markdown(runs, chosen):
    used = {id(r) for r in chosen.values()}
    lines = ["| run | task | attention | max_len | test acc % | majority class % | val acc % | best iter / iters | "
             "steps/s | CPU | in table |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r["task"], r["label"], r["file"])):
        val = "-" if r["val_accuracy"] is None else f"{100 * r['val_accuracy']:.2f}"
        steps = "-" if r["steps_per_s"] is None else f"{r['steps_per_s']:.3f}"
        majority = "-" if r["majority"] is None else f"{100 * r['majority']:.2f}"
        lines.append(f"| {os.path.dirname(r['file'])} | {r['task']} | {r['label']}{bracketed(r['older_defaults'])} | {r['max_len'] or 'default'} | "
                     f"{100 * r['test_accuracy']:.2f} | {majority} | {val} | {r['best_iter']} / {r['iters']} | "
                     f"{steps} | {r['cpu'] or 'not recorded'} | "
                     f"{'yes' if id(r) in used else 'no (another run of the cell saw more examples)'} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="run directories (searched recursively) or final_metrics.json files")
    p.add_argument("--out", default="results/lra", help="output directory")
    args = p.parse_args(argv)
    skipped = []
    runs = read_lra_runs(find_runs(args.paths), skipped)
    for f in skipped:
        print(f"skipping {f}: not an LRA classification run", file=sys.stderr)
    if not runs:
        raise SystemExit(f"error: no final_metrics.json of an LRA run under {', '.join(args.paths)}")
    acc_rows, steps_rows, chosen, _ = build_tables(runs)
    md = "\n\n".join([
        "## LRA test accuracy (%)",
        markdown(acc_rows, "attention", chosen),
        "Ours: reduced runs on CPUs (each run's CPU under Runs); Avg only for a row with all five tasks ListOps to Pathfinder. "
        "'fail' = at chance: test accuracy at most the majority-class rate plus two binomial standard errors "
        "(ours: the accuracy and the majority rate in brackets). Published: full-size GPU runs, the papers' "
        "own averages.",
        "## Training steps per second",
        markdown(steps_rows, "attention", chosen),
        "Ours: optimizer steps per second of training (evaluation excluded) with each run's batch and model, on the CPU "
        "named under Runs (steps/s of different CPUs do not compare); published: FAST Table 2 (RTX A5000, the LRA models).",
        "## Runs",
        runs_markdown(runs, chosen),
    ]) + "\n"
    os.makedirs(args.out, exist_ok=True)
    for name, text in (("lra_table.md", md), ("lra_accuracy.csv", to_csv(acc_rows)),
                       ("lra_steps_per_s.csv", to_csv(steps_rows))):
        write_text(os.path.join(args.out, name), text)
    try:
        print(md)
    except BrokenPipeError:  # `| head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    provenance.record(os.path.join(args.out, "lra_table"))
    print(f"wrote {args.out}/lra_table.md, lra_accuracy.csv, lra_steps_per_s.csv")


if __name__ == "__main__":
    main()
