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
- ``recall_seeds <summary.csv> cell=<T/N/width> [token_shift=True] [old=<summary.csv>] [params=<folder>]``:
  one cell's test accuracy at the picked rate per attention, mean ± sd and every seed, with each
  seed's training tokens/s; ``old`` adds the rows of a second summary (runs made under a method's
  older default, labelled so).
- ``recall_sweep <summary.csv> cell=<T/N/width> [token_shift=True] [old=<summary.csv>]
  [beside=<T/N/width>] [params=<folder>]``: one cell's sweep: seed 0 at each rate, the picked rate,
  the seeds there, mean ± sd (and the same attention's mean ± sd in the cell ``beside``), tokens/s.
- ``fastmax_norm_study <summary.csv> [head_dim=32] [form=seeds|means]``: the Fastmax normalization
  study (a row per setting, p = 1 and p = 2 side by side; ``means`` without the seeds).
- ``recall_tree <csv> [E=0.7,0.8,0.9] [descent=authors]``: tree attention swapped into a trained
  recall model (``recall_tree``'s CSV): accuracy and matched-key fraction per sampler and E.
- ``attention_map_stats <npz>``: the weights of each method's lookup layer at the queries
  (``attention_maps``' ``stat_*`` arrays).
"""
import os
import statistics

from scripts.analysis.published.formatting import display_name, markdown_table, mean_sd, rate
from scripts.analysis.published.loading import (RenderError, SourceMissing, load_csv, marker_numbers, source)
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


# ----------------------------------------------------------------------------- one cell: seeds and the sweep

OLD_DEFAULT = "old default"  # the label of ``old=`` rows: runs made under a method's earlier default


def _cell_arg(renderer, cell, token_shift):
    if token_shift not in ("True", "False"):
        raise RenderError(f"{renderer}: token_shift={token_shift}: expected True or False")
    try:
        T, N, W = (int(x) for x in cell.split("/"))
    except ValueError:
        raise RenderError(f"{renderer}: cell={cell!r}: expected T/N/width (e.g. 256/16/64)") from None
    return T, N, W, token_shift == "True"


def _cell_rows(root, summary, old, cell):
    """[(row label, attention, runs of the summary)] of the attentions with runs in ``cell``: those of
    ``summary`` (``recall_order``), each followed by its rows of ``old`` (labelled OLD_DEFAULT)."""
    sets = [("", read_recall_summary(root, summary))] + ([(OLD_DEFAULT, read_recall_summary(root, old))] if old else [])
    out = []
    for attention in recall_order({r["attention"] for _, runs in sets for r in runs if cell_key(r)[1:] == cell}):
        for note, runs in sets:
            if any(cell_key(r) == (attention, *cell) for r in runs):
                out.append((note, attention, runs))
    return out


def _label(attention, note, described):
    return display_name(attention, described.get(attention)) + (f", {note}" if note else "")


def median_speed(runs):
    """"37,876" (the median tokens/s of the runs with the most threads: fewer threads are not
    comparable), "-" without a measured run; ``recall_table``'s speed cell without its thread count."""
    runs = [r for r in runs if r["tokens_per_s"]]
    if not runs:
        return "-"
    threads = max(r["num_threads"] or 0 for r in runs)
    return f"{statistics.median(r['tokens_per_s'] for r in runs if (r['num_threads'] or 0) == threads):,.0f}"


def render_recall_seeds(root, summary, cell, token_shift="True", old="", params=""):
    """One cell of the sweep (``cell`` "T/N/width", the runs with ``token_shift``) per attention:
    the picked learning rate ("one rate" where the cell ran at one), the test accuracy's mean ± sd
    and each seed's (3 decimals), each seed's training tokens/s. ``old``: a second recall_table
    summary whose rows follow the same attention's, labelled OLD_DEFAULT; ``params``: a folder of runs
    whose configurations name BigBird's and Longformer's settings. Raises SourceMissing (a file is
    absent, or no run is in the cell), RenderError (a malformed argument)."""
    cell = _cell_arg("recall_seeds", cell, token_shift)
    described = _recall_params(root, params) if params else {}
    table = []
    for note, attention, runs in _cell_rows(root, summary, old, cell):
        picked = picked_runs(runs, attention, cell)
        if not picked:
            continue
        accs = [r["test_accuracy"] for r in picked]
        lr = picked[0]["learning_rate"]
        table.append([_label(attention, note, described),
                      rate(lr) + (" (one rate)" if one_rate(runs, attention, cell) is not None else " (picked)"),
                      mean_sd(accs, ".3f"), ", ".join(f"s{r['seed']} {r['test_accuracy']:.3f}" for r in picked),
                      ", ".join(f"s{r['seed']} {r['tokens_per_s']:,.0f}" if r["tokens_per_s"] else f"s{r['seed']} -"
                                for r in picked)])
    if not table:
        raise SourceMissing(f"a rendered block needs runs of the cell {cell_label(*cell)} in {summary}; it has none")
    return markdown_table(["attention", "learning rate", "test accuracy, mean ± sd", "per seed",
                           "training tokens/s per seed"], table)


def render_recall_sweep(root, summary, cell, token_shift="True", old="", beside="", params=""):
    """One cell's sweep (``cell`` "T/N/width", the runs with ``token_shift``), a row per attention
    (``old``: rows of a second summary, labelled OLD_DEFAULT), by mean test accuracy, highest first:
    seed 0's test accuracy at each rate of the cell ("-" where it has none: not run, or no result),
    the picked rate, each seed's test accuracy there, their mean ± sd, the same attention's mean ± sd
    in the cell ``beside`` (same token shift; optional) and the median training tokens/s of the cell's
    runs (``median_speed``). Raises SourceMissing (a file is absent, or no run is in the cell),
    RenderError (a malformed argument)."""
    cell = _cell_arg("recall_sweep", cell, token_shift)
    other = _cell_arg("recall_sweep", beside, token_shift) if beside else None
    described = _recall_params(root, params) if params else {}
    found = _cell_rows(root, summary, old, cell)
    rates = sorted({r["learning_rate"] for _, a, runs in found for r in runs if cell_key(r) == (a, *cell)})
    rows = []
    for note, attention, runs in found:
        picked = picked_runs(runs, attention, cell)
        if not picked:
            continue
        accs = [r["test_accuracy"] for r in picked]
        seed0 = {r["learning_rate"]: r["test_accuracy"] for r in runs if cell_key(r) == (attention, *cell) and r["seed"] == 0}
        row = [_label(attention, note, described),
               " / ".join(f"{seed0[lr]:.3f}" if lr in seed0 else "-" for lr in rates), rate(picked[0]["learning_rate"]),
               ", ".join(f"{a:.3f}" for a in accs), mean_sd(accs, ".3f")]
        if other:
            near = [r["test_accuracy"] for r in picked_runs(runs, attention, other)]
            row.append(mean_sd(near, ".3f") if near else "-")
        row.append(median_speed(r for r in runs if cell_key(r) == (attention, *cell)))
        rows.append((-statistics.mean(accs), row))
    if not rows:
        raise SourceMissing(f"a rendered block needs runs of the cell {cell_label(*cell)} in {summary}; it has none")
    header = ["attention", f"seed 0 at {' / '.join(rate(lr) for lr in rates)}", "picked", "seeds at the picked rate",
              "mean ± sd", *([f"{cell_label(*other[:3])} (mean ± sd)"] if other else []), "tokens/s (median)"]
    return markdown_table(header, [row for _, row in sorted(rows, key=lambda x: x[0])])


# ----------------------------------------------------------------------------- the Fastmax normalization study


def norm_setting(label, head_dim):
    """(setting words, the bound on |s|) of a study row's label "fastmax<p> normalization=<n> [temperature=<t>]
    [lim=<l>]": temperatures written against D (D, sqrt(D), 8 sqrt(D)); the bound of ``paper`` is
    D / temperature, of ``max_norm`` lim^2, of ``none`` nothing."""
    params = dict(t.split("=", 1) for t in label.split()[1:] if "=" in t)
    norm = params.get("normalization", "")
    words = f"`{norm}`"
    if "temperature" in params:
        t = float(params["temperature"])
        k = t / head_dim ** 0.5
        scale = "D" if abs(t - head_dim) < 1e-3 else "sqrt(D)" if abs(k - 1) < 1e-3 else \
            f"{k:.0f} sqrt(D)" if abs(k - round(k)) < 1e-3 else f"{t:g}"
        words += f", temperature {scale}"
        bound = f"{head_dim / t:.2g}" if norm == "paper" else "none"
    else:
        lim = float(params.get("lim", 1))
        words += f", lim {lim:g}"
        bound = f"{lim * lim:g}" if norm == "max_norm" else "none"
    return words, bound


def render_fastmax_norm_study(root, summary, head_dim="32", form="seeds"):
    """The Fastmax normalization study (``recall_table --label_params=normalization,temperature,lim``'s
    summary.csv): a row per setting (normalization with its temperature or lim, in the summary's
    order of settings), the bound on |s| it gives at head dimension ``head_dim``, and for p = 1 and
    p = 2 the test accuracy of each seed (``form=seeds``) and their mean ± sd, the highest mean of
    each p in bold; ``form=means``: the means only. Raises SourceMissing (the file is absent or holds
    no fastmax run), RenderError (a malformed argument)."""
    if form not in ("seeds", "means"):
        raise RenderError(f"fastmax_norm_study: form={form!r}: expected seeds or means")
    D = int(head_dim) if head_dim.isdigit() else None
    if not D:
        raise RenderError(f"fastmax_norm_study: head_dim={head_dim!r} is not a positive integer")
    runs = [r for r in read_recall_summary(root, summary) if r["attention"].startswith("fastmax")]
    if not runs:
        raise SourceMissing(f"a rendered block needs fastmax runs in {summary}; it has none")
    settings, by = [], {}
    for r in runs:
        name, rest = r["attention"].split(" ", 1) if " " in r["attention"] else (r["attention"], "")
        key = (name[len("fastmax"):], rest)
        by.setdefault(key, []).append(r)
        if rest not in settings:
            settings.append(rest)
    ps = sorted({p for p, _ in by})
    means = {k: statistics.mean(r["test_accuracy"] for r in v) for k, v in by.items()}
    best = {p: max(means[k] for k in means if k[0] == p) for p in ps}
    table = []
    for rest in settings:
        words, bound = norm_setting(f"x {rest}", D)
        row = [words, bound]
        for p in ps:
            values = [r["test_accuracy"] for r in sorted(by.get((p, rest), []), key=lambda r: r["seed"])]
            if not values:
                row += ["-"] * (2 if form == "seeds" else 1)
                continue
            text = mean_sd(values, ".3f")
            text = f"**{text}**" if means[(p, rest)] == best[p] else text
            row += ([", ".join(f"{v:.3f}" for v in values)] if form == "seeds" else []) + [text]
        table.append(row)
    header = ["setting", "\\|s\\| bounded by"]
    for p in ps:
        header += ([f"p = {p}: seeds"] if form == "seeds" else []) + [f"p = {p}: mean ± sd"]
    return markdown_table(header, table)


# ----------------------------------------------------------------------------- tree attention in a recall model


def render_recall_tree(root, table_csv, E="0.7,0.8,0.9", descent="authors"):
    """Tree attention swapped into a trained recall model (``scripts.analysis.recall_tree``'s CSV):
    a row per sampler (highest accuracy at the first E first), the test accuracy and the matched-key
    fraction at each of ``E``, means over the draw seeds, 3 decimals, the highest of each column in
    bold; a last row with the range over the samplers of the chance fraction (exact keys / history).
    Raises SourceMissing (the file is absent or lacks an E of ``E`` for ``descent``)."""
    from scripts.analysis.published.tree import SAMPLER_LABEL

    Es = marker_numbers("recall_tree", E, float)
    rows = [r for r in load_csv(root, table_csv) if r["descent"] == descent]
    samplers = sorted({r["sampler"] for r in rows})
    mean = {}
    for s in samplers:
        for e in Es:
            cell = [r for r in rows if r["sampler"] == s and float(r["E"]) == e]
            if not cell:
                raise SourceMissing(f"a rendered block needs sampler {s} at E = {e:g}, descent {descent} in {table_csv}")
            for field in ("test_accuracy", "matched_key_fraction", "chance_fraction"):
                mean[s, e, field] = statistics.mean(float(r[field]) for r in cell)
    if not samplers:
        raise SourceMissing(f"a rendered block needs rows of descent {descent} in {table_csv}; it has none")
    fields = ("test_accuracy", "matched_key_fraction")
    best = {(e, f): max(mean[s, e, f] for s in samplers) for e in Es for f in fields}

    def cell(s, e, f):
        text = f"{mean[s, e, f]:.3f}"
        return f"**{text}**" if mean[s, e, f] == best[e, f] else text

    ordered = sorted(samplers, key=lambda s: (-mean[s, Es[0], "test_accuracy"], s))
    table = [[SAMPLER_LABEL.get(s, s), *(cell(s, e, f) for f in fields for e in Es)] for s in ordered]
    chance = [f"{min(mean[s, e, 'chance_fraction'] for s in samplers):.2f}-"
              f"{max(mean[s, e, 'chance_fraction'] for s in samplers):.2f}" for e in Es]
    table.append(["chance (exact keys / history; range over the samplers)", *([""] * len(Es)), *chance])
    return markdown_table(["sampler", *(f"acc. E = {e:g}" for e in Es), *(f"matched E = {e:g}" for e in Es)], table)


# ----------------------------------------------------------------------------- attention maps of the recall models

MAP_STATS = (("stat_value_weight", "weight j+1"), ("stat_value_share", "share j+1"),
             ("stat_argmax_value", "argmax at j+1"), ("stat_key_weight", "weight j"))


def render_attention_map_stats(root, npz):
    """The weights of each model's layers at the recall queries (``scripts.analysis.attention_maps``'
    npz, its ``labels`` and ``stat_*`` arrays of shape (models, layers)): per layer the mean weight
    on the value position j+1, the same as a share of the row's |weight|, the fraction of queries
    whose largest |weight| is there, the mean weight on the key position j (3 decimals). Raises
    SourceMissing when the file or one of the arrays is absent."""
    import numpy as np

    with np.load(source(root, npz), allow_pickle=False) as z:
        missing = [k for k, _ in MAP_STATS if k not in z.files] + (["labels"] if "labels" not in z.files else [])
        if missing:
            raise SourceMissing(f"a rendered block needs {', '.join(missing)} in {npz}; it has none")
        labels = [str(x) for x in z["labels"]]
        stats = {k: z[k] for k, _ in MAP_STATS}
    layers = stats[MAP_STATS[0][0]].shape[1]
    header = ["attention", *(f"L{layer} {name}" for layer in range(layers) for _, name in MAP_STATS)]
    table = [[label, *(f"{stats[k][i, layer]:.3f}" for layer in range(layers) for k, _ in MAP_STATS)]
             for i, label in enumerate(labels)]
    return markdown_table(header, table)


RENDERERS = {"recall_glance": render_recall_glance, "recall_ablation": render_recall_ablation,
             "recall_seeds": render_recall_seeds, "recall_sweep": render_recall_sweep,
             "fastmax_norm_study": render_fastmax_norm_study, "recall_tree": render_recall_tree,
             "attention_map_stats": render_attention_map_stats}
