"""Associative recall (MQAR): reading recall runs and the ``recall_table`` summary (the picked learning
rate of each cell), and the renderers of docs/recall.md's tables. The table tools ``recall_table`` and
``recall_ablation_table`` use the same functions, so a tool's table and a rendered block agree.

Renderers (``RENDERERS``):

- ``recall_glance <summary.csv> cells=<T/N/width>,... [token_shift=False] [params=<folder>]``: test
  accuracy mean ± sd over the seeds at the picked learning rate per attention x cell; a cell whose
  runs are all at one learning rate says so (nothing was picked there); ``params`` names a folder of
  runs whose configurations describe the attentions' settings (BigBird's blocks, Longformer's window).
- ``recall_ablation <folder> [base=<row>] [link_root=<prefix>]``: the ablation table of
  ``recall_ablation_table`` from the runs (packed files or folders) under ``<folder>``.
"""
import os

from scripts.analysis.published.formatting import display_name, markdown_table, mean_sd, rate
from scripts.analysis.published.loading import RenderError, SourceMissing, load_csv, source
from scripts.analysis.runs import FINAL_METRICS, RunNotFound, attention_label, find_runs, open_run, run_cpu


RECALL_COLUMNS = ("attention", "seq_len", "num_pairs", "d_model", "token_shift", "seed", "test_accuracy",
                  "tokens_per_s", "learning_rate", "val_accuracy", "picked", "num_threads")


def read_recall_runs(files, label_params=()):
    """One dict per recall run (the RECALL_COLUMNS but ``picked``, plus ``path``: its final_metrics.json,
    in the run folder or the packed run; ``train_time_s`` and ``attention_params``) from train.py's final
    metrics of the runs ``files`` (``runs.find_runs``'s Runs, or anything ``runs.open_run`` takes); runs of
    other tasks are skipped. The attention column is ``runs.attention_label(config, label_params)``."""
    runs = []
    for run in map(open_run, files):
        metrics = run.final_metrics or {}
        path = os.path.join(run.path, FINAL_METRICS)
        cfg = metrics.get("config", {})
        if cfg.get("task") != "recall" or "test_accuracy" not in metrics:
            continue
        tokens = metrics["iters"] * cfg["batch_size"] * cfg["block_size"]
        runs.append({"attention": attention_label(cfg, label_params), "seq_len": cfg["block_size"],
                     "num_pairs": cfg["recall_pairs"], "d_model": cfg["n_embd"],
                     "token_shift": bool(cfg.get("token_shift", False)), "seed": cfg["seed"],
                     "test_accuracy": metrics["test_accuracy"],
                     "tokens_per_s": tokens / metrics["train_time_s"] if metrics.get("train_time_s") else None,
                     "learning_rate": cfg["learning_rate"], "val_accuracy": metrics["best_metric"]["value"],
                     "num_threads": cfg.get("num_threads"), "path": path, "train_time_s": metrics.get("train_time_s"),
                     "attention_params": cfg.get("attention_params", {})})
    return runs


def read_recall_summary(root, rel):
    """The runs of a ``summary.csv`` written by ``recall_table`` (RECALL_COLUMNS, typed: ints, floats,
    ``picked`` a bool; an empty cell None). Raises SourceMissing when the file does not exist."""
    ints, floats = ("seq_len", "num_pairs", "d_model", "seed", "num_threads"), \
        ("test_accuracy", "tokens_per_s", "learning_rate", "val_accuracy")
    runs = []
    for row in load_csv(root, rel):
        run = {"attention": row["attention"], "picked": row["picked"] == "True",
               "token_shift": row["token_shift"] == "True"}
        run.update({k: int(row[k]) if row[k] else None for k in ints})
        run.update({k: float(row[k]) if row[k] else None for k in floats})
        runs.append(run)
    return runs


def cell_key(run):
    """(attention, seq_len, num_pairs, d_model, token_shift) of a recall run: runs with and without a
    token shift are different cells (a rate is picked, and a table row is formed, within one)."""
    return run["attention"], run["seq_len"], run["num_pairs"], run["d_model"], run["token_shift"]


def pick_rate(runs, key):
    """The learning rate picked for one (attention, seq_len, num_pairs, d_model): the seed-0 run with
    the highest validation accuracy, ties to the smaller rate; None without a seed-0 run."""
    candidates = [r for r in runs if cell_key(r) == key and r["seed"] == 0]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (-r["val_accuracy"], r["learning_rate"]))["learning_rate"]


def mark_picked(runs):
    """Set ``picked`` on every run: its learning rate is the one picked for its cell. Returns ``runs``."""
    rates = {key: pick_rate(runs, key) for key in {cell_key(r) for r in runs}}
    for r in runs:
        r["picked"] = r["learning_rate"] == rates[cell_key(r)]
    return runs


def cell_label(seq_len, num_pairs, d_model, token_shift=False):
    """"256/16 w64", or "256/16 w64 shift" for runs with a token shift."""
    return f"{seq_len}/{num_pairs} w{d_model}" + (" shift" if token_shift else "")


def recall_order(attentions):
    """softmax, fastmax1, fastmax2, dense first (those present), then the others sorted."""
    first = ["softmax", "fastmax1", "fastmax2", "dense"]
    return [a for a in first if a in attentions] + sorted(a for a in attentions if a not in first)


def picked_runs(runs, attention, cell):
    """The runs of ``attention`` in ``cell`` (seq_len, num_pairs, d_model) at the picked rate, by seed."""
    return sorted((r for r in runs if cell_key(r) == (attention, *cell) and r["picked"]), key=lambda r: r["seed"])


def one_rate(runs, attention, cell):
    """The learning rate when every run of ``attention`` in ``cell`` used the same one (nothing was
    picked between rates), else None."""
    rates = {r["learning_rate"] for r in runs if cell_key(r) == (attention, *cell)}
    return rates.pop() if len(rates) == 1 else None


def _cells_arg(cells, token_shift):
    if token_shift not in ("True", "False"):
        raise RenderError(f"token_shift={token_shift}: expected True or False")
    try:
        return [(*(int(x) for x in c.split("/")), token_shift == "True") for c in cells.split(",")]
    except ValueError:
        raise RenderError(f"cells={cells}: expected T/N/width,... (e.g. 64/4/64,256/16/64)") from None


def _recall_params(root, folder):
    """{attention label: attention_params} of the recall runs under ``folder`` (the first run of each)."""
    params = {}
    for run in read_recall_runs(find_runs([source(root, folder)])):
        params.setdefault(run["attention"], run["attention_params"])
    return params


def render_recall_glance(root, summary, cells, token_shift="False", params=""):
    """The "sweep at a glance" table of docs/recall.md from ``summary`` (a recall_table summary.csv):
    a row per attention (``recall_order``) that has runs in one of the cells, a column per cell of
    ``cells`` ("T/N/width,..."; the runs with ``token_shift`` True or False, default False): test
    accuracy mean ± sd over the seeds at the picked rate (3 decimals; "(1 seed)" for one run, "(n
    seeds)" where a cell has fewer seeds than the table's most, "-" for none), "(one rate, <lr>)"
    when every run of the cell used one learning rate. ``params``: a folder of runs whose
    configurations name BigBird's and Longformer's settings in the row label.
    Raises SourceMissing (a file is absent), RenderError (malformed ``cells``)."""
    runs = read_recall_summary(root, summary)
    cells = _cells_arg(cells, token_shift)
    described = _recall_params(root, params) if params else {}
    attentions = recall_order({r["attention"] for r in runs if cell_key(r)[1:] in cells})
    values = {(a, cell): [r["test_accuracy"] for r in picked_runs(runs, a, cell)] for a in attentions for cell in cells}
    most = max(map(len, values.values()), default=0)
    rows = []
    for attention in attentions:
        row = [display_name(attention, described.get(attention))]
        for cell in cells:
            n = len(values[attention, cell])
            if not n:
                row.append("-")
                continue
            seeds = f" ({n} seed{'s' if n > 1 else ''})" if n == 1 or n < most else ""
            text = mean_sd(values[attention, cell], ".3f") + seeds
            lr = one_rate(runs, attention, cell)
            row.append(text + (f" (one rate, {rate(lr)})" if lr is not None else ""))
        rows.append(row)
    return markdown_table(["attention", *(cell_label(*c[:3]) for c in cells)], rows)


# ----------------------------------------------------------------------------- recall ablation

ABLATION_COMPARED = ("mlp", "tie_lm_head", "embedding_init_std", "pos_emb", "pos_embedding_init_std", "linear_init",
                     "scale_residual_init", "token_shift", "beta2", "lr_schedule", "warmup_iters", "grad_clip",
                     "learning_rate", "weight_decay", "max_iters", "recall_sizes", "seed")
ABLATION_COLUMNS = ("row", "base", "changes", "test_accuracy", "best_val_accuracy", "best_iter",
                    "first_iter_val_acc_0.5", "last_train_loss", "cpu", "run")


def read_log(run):
    """(evaluations [(iter, val_accuracy)], last logged training loss or None) of the log.jsonl of ``run``
    (a Run or anything ``runs.open_run`` takes). Raises runs.RunNotFound when the run has no log."""
    run = open_run(run)
    records = run.log
    if records is None:
        raise RunNotFound(f"{run.source}: the run has no log.jsonl")
    evals, last = [], None
    for record in records:
        if "eval" in record and "val_accuracy" in record["eval"]:
            evals.append((record["iter"], record["eval"]["val_accuracy"]))
        elif "loss" in record:
            last = record["loss"]
    return evals, last


def describe(value):
    """A configuration value as the ablation table writes it: floats %g, dicts k=v,k=v."""
    if isinstance(value, dict):  # recall_sizes: {'train': 100000, ...} -> train=100000,val=1000,test=1000
        return ",".join(f"{k}={v}" for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


def _unused(key, cfg):
    """Whether ``key`` has no effect in a run of configuration ``cfg`` (the position embedding's init
    without learned positions), so a difference in it is not a change."""
    return key == "pos_embedding_init_std" and cfg.get("pos_emb", "learned") != "learned"


def ablation_rows(root, base_row=""):
    """The ablation table's rows (dicts of ``ABLATION_COLUMNS``, and ``link``: the run's file or folder
    name, what the markdown links) of the runs under ``root`` (run folders or packed runs, each with
    final_metrics.json and log.jsonl), base rows first, then by name. A row's base is the
    row named by its name's part before the first "_", or ``base_row`` for every row; "changes" lists
    the ``ABLATION_COMPARED`` configuration keys whose values differ from the base's (but for keys
    the row's configuration does not use, ``_unused``)."""
    runs = {}
    for run in find_runs([root]):
        runs[run.name] = (run, run.final_metrics)
    out = []
    for name, (run, final) in runs.items():
        base = base_row or name.split("_", 1)[0]
        cfg, base_cfg = final["config"], runs.get(base, (None, {"config": {}}))[1]["config"]
        changes = [f"{k}={describe(cfg.get(k))}" for k in ABLATION_COMPARED if base != name and base_cfg
                   and cfg.get(k) != base_cfg.get(k) and not _unused(k, cfg)]
        evals, last = read_log(run)
        best_iter, best = max(evals, key=lambda e: (e[1], -e[0])) if evals else (None, None)
        first = next((it for it, acc in evals if acc >= 0.5), None)
        out.append({"row": name, "base": base if base in runs else "", "changes": " ".join(changes) or
                    ("(the base)" if base == name else "(none)"), "test_accuracy": final.get("test_accuracy"),
                    "best_val_accuracy": best, "best_iter": best_iter,
                    "first_iter_val_acc_0.5": first if first is not None else "-", "last_train_loss": last,
                    "cpu": run_cpu(run) or "", "run": run.path,
                    "link": os.path.basename(run.source) + ("" if run.packed else "/")})
    return sorted(out, key=lambda r: (r["base"], r["row"] != r["base"], r["row"]))


def ablation_markdown(table, link_root=""):
    """The ablation table (rows of ``ablation_rows``) as markdown; each row links its run: ``link_root`` +
    the packed file's name, or the folder's name and "/"."""
    head = ("| row | changes from its base | test acc. | best val acc. (step) | val acc. >= 0.5 from step "
            "| last train loss | run |")
    lines = [head, "|---|---|---:|---:|---:|---:|---|"]
    for r in table:
        link = f"[{os.path.basename(r['run'])}]({link_root}{r.get('link', os.path.basename(r['run']) + '/')})"
        lines.append(f"| {r['row']} | {r['changes']} | {r['test_accuracy']:.4f} | {r['best_val_accuracy']:.4f} "
                     f"({r['best_iter']}) | {r['first_iter_val_acc_0.5']} | {r['last_train_loss']:.3f} | {link} |")
    return "\n".join(lines) + "\n"


def render_recall_ablation(root, folder, base="", link_root=""):
    """The ablation table of the run folders under ``folder`` (``ablation_rows`` with ``base``,
    ``ablation_markdown`` with ``link_root``). Raises SourceMissing when ``folder`` is absent or holds no run."""
    rows = ablation_rows(source(root, folder), base)
    if not rows:
        raise SourceMissing(f"a rendered block needs runs (final_metrics.json) under {folder}; there are none")
    return ablation_markdown(rows, link_root)


RENDERERS = {"recall_glance": render_recall_glance, "recall_ablation": render_recall_ablation}
