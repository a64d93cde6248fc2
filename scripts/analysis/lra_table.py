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

Exit status 1 (SystemExit) when no final_metrics.json is found.
"""
import argparse
import csv
import io
import json
import os
import sys

from data import write_text
import provenance
from scripts.analysis.runs import attention_label, find_runs, run_cpu

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
TITLES = ("ListOps", "Text", "Retrieval", "Image", "Pathfinder", "Path-X")
FAST_TASKS = TASKS[:5]
PAPER_METHODS = ("softmax", "fastmax1", "fastmax2", "dense")  # their published rows always show
BASELINES = ("linear", "performer", "linformer", "longformer", "bigbird", "reformer", "informer")
ORDER = PAPER_METHODS + BASELINES  # a baseline's published rows show beside our runs of it

# (attention, source): (accuracies in TASKS order, None = not reported, "fail" = at chance; avg)
PUBLISHED_ACCURACY = [
    ("softmax", "LRA paper, Tay et al. 2021", (36.37, 64.27, 57.46, 42.44, 71.40, "fail"), 54.39),
    ("softmax", "FAST Table 1", (38.37, 61.95, 80.69, 40.57, 65.26, None), 57.37),
    ("fastmax1", "FAST Table 1", (37.20, 63.25, 78.21, 42.76, 66.67, None), 57.62),
    ("fastmax2", "FAST Table 1", (37.40, 64.30, 78.11, 43.18, 66.55, None), 57.90),
    ("dense", "DenseAttention Table 1", (50.50, 81.19, 87.51, 72.55, 87.40, 88.82), 77.99),
    # the baselines (docs/baselines.md): LRA Table 1 as quoted in DenseAttention Table 5 (and FAST
    # Table 1 for Linear Trans.), then FAST Table 1's own runs and DenseAttention's Informer row
    ("linear", "LRA paper, Tay et al. 2021", (16.13, 65.90, 53.09, 42.34, 75.30, "fail"), 50.55),
    ("performer", "LRA paper, Tay et al. 2021", (18.01, 65.40, 53.82, 42.77, 77.05, "fail"), 51.41),
    ("performer", "FAST Table 1", (37.80, 64.39, 79.05, 39.78, 67.41, None), 57.69),
    ("linformer", "LRA paper, Tay et al. 2021", (35.70, 53.94, 52.27, 38.56, 76.34, "fail"), 51.36),
    ("longformer", "LRA paper, Tay et al. 2021", (35.63, 62.85, 56.89, 42.22, 69.71, "fail"), 53.46),
    ("bigbird", "LRA paper, Tay et al. 2021", (36.05, 64.02, 59.29, 40.83, 74.87, "fail"), 55.01),
    ("reformer", "LRA paper, Tay et al. 2021", (37.27, 56.10, 53.40, 38.07, 68.50, "fail"), 50.67),
    ("reformer", "FAST Table 1", (37.00, 64.75, 78.50, 43.72, 66.40, None), 58.07),
    ("informer", "FAST Table 1", (36.95, 63.60, 75.25, 37.55, 50.33, None), 52.74),
    ("informer", "DenseAttention Table 5 (from Chen et al. 2021)", (32.53, 62.64, 77.57, 38.10, 57.83, None), 53.73),
]
PUBLISHED_STEPS = [  # FAST Table 2: training steps per second on an RTX A5000, head dim 32
    ("softmax", "FAST Table 2 (RTX A5000)", (6.4, 1.8, 1.7, 3.0, 6.1, None), 3.8),
    ("fastmax1", "FAST Table 2 (RTX A5000)", (47.4, 26.7, 24.7, 12.8, 24.4, None), 27.2),
    ("fastmax2", "FAST Table 2 (RTX A5000)", (11.6, 6.1, 6.9, 3.0, 6.8, None), 6.9),
]


def task_column(cfg):
    """Column of a run's config (one of TASKS)."""
    task = cfg.get("lra_task", "")
    if task == "pathfinder" and (cfg.get("lra_options") or {}).get("resolution", 32) == 128:
        return "pathx"
    return task


def read_runs(files):
    """One record per file: path, label, column, test/val accuracy, steps_per_s, iters, cpu (of the
    manifest.json beside the file, None without one)."""
    runs = []
    for f in files:
        with open(f) as fh:
            m = json.load(fh)
        cfg = m.get("config", {})
        if cfg.get("task", "classify") != "classify" or "test_accuracy" not in m:
            print(f"skipping {f}: not an LRA classification run", file=sys.stderr)
            continue
        runs.append({"file": f, "label": attention_label(cfg), "task": task_column(cfg),
                     "test_accuracy": m["test_accuracy"], "val_accuracy": m.get("val_accuracy"),
                     "steps_per_s": m.get("steps_per_s"), "iters": m.get("iters"), "best_iter": m.get("best_iter"),
                     "majority": m.get("test_majority"), "test_examples": m.get("test_examples"),
                     "examples_seen": (m.get("iters") or 0) * cfg.get("batch_size", 0),
                     "max_len": cfg.get("max_len"), "cpu": run_cpu(os.path.dirname(f))})
    return runs


def choose(runs):
    """The run of one cell: the most training examples seen, then the higher val accuracy, then
    the path (a rule, so the table does not depend on which file was written last)."""
    return max(runs, key=lambda r: (r["examples_seen"], r["val_accuracy"] or 0.0, r["file"]))


def at_chance(run):
    """True when the run's test accuracy is within two binomial standard errors of (or below) the
    majority-class rate of its test examples."""
    m, n = run["majority"], run["test_examples"]
    if m is None or not n:
        return False
    return run["test_accuracy"] <= m + 2 * (m * (1 - m) / n) ** 0.5


def _cell(run):
    """Our accuracy cell: the test accuracy in %, or "fail (majority m)" at chance (``at_chance``)."""
    if run is None:
        return None
    if at_chance(run):
        return f"fail ({100 * run['test_accuracy']:.2f}; majority {100 * run['majority']:.2f})"
    return 100 * run["test_accuracy"]


def _fmt(v):
    if v is None:
        return ""
    return v if isinstance(v, str) else f"{v:.2f}"


def build_tables(runs):
    """(accuracy rows, steps rows, chosen runs, common tasks): rows are (attention, source, values
    in TASKS order, avg) with accuracies in %; ``chosen`` maps (label, task) -> run; our accuracy
    avg is over ``common``, the tasks (TASKS order) that every one of our rows has."""
    cells = {}
    for r in runs:
        cells.setdefault((r["label"], r["task"]), []).append(r)
    chosen = {cell: choose(rs) for cell, rs in cells.items()}
    ours = {k[0] for k in chosen}
    common = [t for t in TASKS if all((label, t) in chosen for label in ours)]
    every = ours | set(PAPER_METHODS)
    acc_rows, steps_rows = [], []
    for label in [a for a in ORDER if a in every] + sorted(every - set(ORDER)):
        if label in ours:
            vals = [_cell(chosen.get((label, t))) for t in TASKS]
            complete = all((label, t) in chosen for t in FAST_TASKS)
            avg = sum(100 * chosen[(label, t)]["test_accuracy"] for t in FAST_TASKS) / 5 if complete else None
            acc_rows.append((label, "ours", vals, avg))
            steps = [chosen[(label, t)]["steps_per_s"] if (label, t) in chosen else None for t in TASKS]
            five = steps[:5]
            avg = sum(five) / 5 if all(s is not None for s in five) else None
            steps_rows.append((label, "ours", steps, avg))
        for a, source, vals, avg in PUBLISHED_ACCURACY:
            if a == label:
                acc_rows.append((a, f"published: {source}", list(vals), avg))
        for a, source, vals, avg in PUBLISHED_STEPS:
            if a == label:
                steps_rows.append((a, f"published: {source}", list(vals), avg))
    return acc_rows, steps_rows, chosen, common


def markdown(rows, title):
    """A markdown table of ``rows`` (see ``build_tables``); '-' for an empty cell."""
    lines = [f"| {title} | " + " | ".join(TITLES) + " | Avg |", "|---" * (len(TITLES) + 2) + "|"]
    for label, source, vals, avg in rows:
        name = f"{label} (ours)" if source == "ours" else f"{label} ({source})"
        cells = [_fmt(v) or "-" for v in vals] + [_fmt(avg) or "-"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_csv(rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["attention", "source", *TASKS, "avg"])
    for label, source, vals, avg in rows:
        w.writerow([label, source, *[_fmt(v) for v in vals], _fmt(avg)])
    return buf.getvalue()


def runs_markdown(runs, chosen):
    used = {id(r) for r in chosen.values()}
    lines = ["| run | task | attention | max_len | test acc % | majority class % | val acc % | best iter / iters | "
             "steps/s | CPU | in table |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r["task"], r["label"], r["file"])):
        val = "-" if r["val_accuracy"] is None else f"{100 * r['val_accuracy']:.2f}"
        steps = "-" if r["steps_per_s"] is None else f"{r['steps_per_s']:.3f}"
        majority = "-" if r["majority"] is None else f"{100 * r['majority']:.2f}"
        lines.append(f"| {os.path.dirname(r['file'])} | {r['task']} | {r['label']} | {r['max_len'] or 'default'} | "
                     f"{100 * r['test_accuracy']:.2f} | {majority} | {val} | {r['best_iter']} / {r['iters']} | "
                     f"{steps} | {r['cpu'] or 'not recorded'} | "
                     f"{'yes' if id(r) in used else 'no (another run of the cell saw more examples)'} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="run directories (searched recursively) or final_metrics.json files")
    p.add_argument("--out", default="results/lra", help="output directory")
    args = p.parse_args(argv)
    runs = read_runs(find_runs(args.paths))
    if not runs:
        raise SystemExit(f"error: no final_metrics.json of an LRA run under {', '.join(args.paths)}")
    acc_rows, steps_rows, chosen, _ = build_tables(runs)
    md = "\n\n".join([
        "## LRA test accuracy (%)",
        markdown(acc_rows, "attention"),
        "Ours: reduced runs on CPUs (each run's CPU under Runs); Avg only for a row with all five tasks ListOps to Pathfinder. "
        "'fail' = at chance: test accuracy at most the majority-class rate plus two binomial standard errors "
        "(ours: the accuracy and the majority rate in brackets). Published: full-size GPU runs, the papers' "
        "own averages.",
        "## Training steps per second",
        markdown(steps_rows, "attention"),
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
