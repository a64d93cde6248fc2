"""Training and validation loss against iteration for several train.py runs in one PNG (used for
the FAST paper's Figure 2: Fastmax p = 2 without dropout and with the three dropout variants of
section 2.4), plus a CSV of every plotted point.

    python -m scripts.analysis.loss_curves out/shakespeare_dropout/none out/shakespeare_dropout/quadratic ... \\
        [--labels=none,quadratic,...] [--out=results/shakespeare_dropout/shakespeare_dropout] [--train_loss=eval|step]

Input: each run's ``log.jsonl`` as train.py writes it (its folder, or its packed file in results/:
``scripts/analysis/runs.py``), one JSON object per line:
``{"iter", "eval": {"train_loss", "val_loss", ...}, "elapsed_s"}`` at every evaluation and
``{"iter", "loss", "lr", ...}`` every ``log_interval`` steps.

Curves (left panels training loss, right panels validation loss; each run in its
``scripts/plot_style.py`` style, the legend right of the panels; a second row shows the second half
of the runs, ``--zoom``):
- validation: ``eval.val_loss`` of every evaluation;
- training, ``--train_loss=eval`` (default): ``eval.train_loss``, measured like the validation
  loss (evaluation mode, so without dropout, on the same fixed batches at every evaluation), so the
  gap between the panels is the generalization gap;
- training, ``--train_loss=step``: the logged loss of the training steps (training mode, dropout
  active, a different batch at each step, so noisier).

A log that holds several runs is read as train.py leaves it: a resumed run continues the same
curve (for an iteration logged twice the later record wins); a run started from scratch into a
directory with an old log (iterations start again from the beginning) replaces the older records,
with a warning.

Outputs: ``<out>.png`` and ``<out>.csv`` (columns label, out_dir, curve, source, iter, loss; curve
"train" or "val", source "eval" or "step").
"""
import argparse
import csv
import os
import sys

import provenance
from scripts import plot_style
from scripts.analysis.runs import LOG, RunNotFound, open_run, packed_path

TRAIN_SOURCES = ("eval", "step")


def read_log(out_dir):
    """The records of the log.jsonl of the run ``out_dir`` (a run folder, or its packed file
    ``<out_dir>.tar.xz``: ``scripts/analysis/runs.py``) in order.

    Raises:
        FileNotFoundError: no run there, or it has no log.jsonl (the message names the path).
        ValueError: a line is not JSON (names the file and the line number).
    """
    try:
        records = open_run(out_dir).log
    except RunNotFound:
        records = None
    if records is None:
        raise FileNotFoundError(f"{os.path.join(out_dir, LOG)} not found (train.py writes it into its out_dir; "
                                f"a packed run is {packed_path(out_dir)})")
    return records


def _last_run(records, kind, where=""):
    """Records of one kind whose iterations belong to the last run started from scratch."""
    start, smallest = 0, None
    for n, record in enumerate(records):
        it = record["iter"]
        if n > 0 and it < records[n - 1]["iter"] and smallest is not None and it <= smallest:
            start = n  # iterations start again from the beginning: a new run
            print(f"warning: {where}log.jsonl holds more than one run ({kind} iterations start again at {it}); "
                  f"plotting only the last one", file=sys.stderr)
        smallest = it if smallest is None else min(smallest, it)
    return records[start:]


def curves(records, train_loss="eval", where=""):
    """Training and validation curves of one log.

    Returns:
        {"train": (iters, losses), "val": (iters, losses)}: lists sorted by iteration, one value
        per iteration (the latest record wins).

    Raises:
        ValueError: unknown ``train_loss``; no evaluation record in the log.
    """
    if train_loss not in TRAIN_SOURCES:
        raise ValueError(f"train_loss must be one of {', '.join(TRAIN_SOURCES)}; got {train_loss!r}")
    evals = _last_run([r for r in records if "eval" in r], "eval", where)
    steps = _last_run([r for r in records if "loss" in r and "eval" not in r], "step", where)
    if not evals:
        raise ValueError(f"{where}log.jsonl has no evaluation record (train.py evaluates every eval_interval "
                         f"iterations and at max_iters)")

    def series(items):
        by_iter = {}
        for it, value in items:
            by_iter[it] = value
        its = sorted(by_iter)
        return its, [by_iter[i] for i in its]

    val = series((r["iter"], r["eval"]["val_loss"]) for r in evals)
    if train_loss == "eval":
        train = series((r["iter"], r["eval"]["train_loss"]) for r in evals if "train_loss" in r["eval"])
    else:
        train = series((r["iter"], r["loss"]) for r in steps)
    return {"train": train, "val": val}


def write_csv(path, runs, train_loss):
    """One row per plotted point: label, out_dir, curve, source, iter, loss."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["label", "out_dir", "curve", "source", "iter", "loss"])
        for label, out_dir, run in runs:
            for curve in ("train", "val"):
                source = train_loss if curve == "train" else "eval"
                for it, loss in zip(*run[curve]):
                    writer.writerow([label, out_dir, curve, source, it, repr(float(loss))])


def plot(path, runs, train_loss, title=None, zoom=0.5):
    """Training and validation loss against iteration, each run in its ``scripts.plot_style``
    style (a run labelled by its attention, e.g. ``fastmax1``, has that method's color and marker
    in every figure); one legend right of the panels gives each run's lowest validation loss.
    Top row: the whole runs. Bottom row (``zoom`` > 0): the same curves from iteration zoom x
    (last iteration) on, with the y axis fitted to that part, where runs that differ by a few
    hundredths of a nat can be told apart."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 2 if zoom > 0 else 1
    fig, axes = plt.subplots(rows, 2, figsize=(11, 4.2 * rows), squeeze=False)
    last = max(max(run[curve][0][-1] for curve in ("train", "val") if run[curve][0]) for _, _, run in runs)
    styles = plot_style.figure_styles([label for label, _, _ in runs])
    for row in range(rows):
        start = zoom * last if row == 1 else -1
        ax_train, ax_val = axes[row]
        for label, _, run in runs:
            style = styles[label]
            for ax, curve, text in ((ax_train, "train", label),
                                    (ax_val, "val", f"{label} (lowest {min(run['val'][1]):.4f})")):
                points = [(i, v) for i, v in zip(*run[curve]) if i >= start]
                if points:
                    marker = style["marker"] if curve == "val" or train_loss == "eval" else None
                    ax.plot(*zip(*points), color=style["color"], linestyle=style["linestyle"], marker=marker, ms=3,
                            label=text)
        where = "" if row == 0 else f", from iteration {start:g}"
        ax_train.set_title("training loss" + (" (evaluation mode, fixed batches" if train_loss == "eval"
                                              else " (training steps") + where + ")", fontsize=10)
        ax_val.set_title(f"validation loss{' (' + where[2:] + ')' if where else ''}", fontsize=10)
        for ax in (ax_train, ax_val):
            ax.set_xlabel("iteration")
            ax.grid(alpha=0.3)
        ax_train.set_ylabel("cross-entropy (nats per prediction)")
        if row == 0:
            low = min(ax.get_ylim()[0] for ax in (ax_train, ax_val))
            high = max(ax.get_ylim()[1] for ax in (ax_train, ax_val))
            for ax in (ax_train, ax_val):
                ax.set_ylim(low, high)
    if title:
        fig.suptitle(title, fontsize=11)
    plot_style.legend_outside(fig, axes=[axes[0][1]], fontsize=8)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dirs", nargs="+", help="train.py out_dirs (each with log.jsonl) or packed runs")
    ap.add_argument("--labels", default="", help="comma-separated labels (default: the directory names)")
    ap.add_argument("--out", default="results/loss_curves/loss_curves", help="output path without extension")
    ap.add_argument("--train_loss", default="eval", choices=TRAIN_SOURCES,
                    help="eval: train_loss of each evaluation; step: the logged training-step loss")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--zoom", type=float, default=0.5,
                    help="second row from this fraction of the last iteration on (0 = no second row)")
    args = ap.parse_args(argv)
    labels = args.labels.split(",") if args.labels else [os.path.basename(os.path.normpath(d)) for d in args.out_dirs]
    if len(labels) != len(args.out_dirs):
        ap.error(f"--labels has {len(labels)} names for {len(args.out_dirs)} out_dirs")
    try:
        runs = [(label, d, curves(read_log(d), args.train_loss, where=f"{d}/"))
                for label, d in zip(labels, args.out_dirs)]
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_csv(f"{args.out}.csv", runs, args.train_loss)
    if not 0 <= args.zoom < 1:
        ap.error(f"--zoom must be in [0, 1); got {args.zoom}")
    plot(f"{args.out}.png", runs, args.train_loss, args.title or None, args.zoom)
    provenance.record(args.out)
    for label, _, run in runs:
        (its, val), last_train = run["val"], run["train"][1][-1] if run["train"][1] else float("nan")
        print(f"{label}: last train {last_train:.4f}, last val {val[-1]:.4f} (iter {its[-1]}), lowest val {min(val):.4f}")
    print(f"wrote {args.out}.png and {args.out}.csv")
    return runs


if __name__ == "__main__":
    main()
