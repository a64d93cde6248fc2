"""Masked language models on WikiText-2 (docs/mlm.md, docs/dense_attention.md): the seeds'
summary of ``scripts.analysis.mlm_summary`` against the context-free predictor, its one-seed
ablation, the first T = 512 runs' evaluations (eval_mlm.py) and the synthetic copy probe
(``scripts.analysis.mlm_copy_probe``).

Renderers (``RENDERERS``):

- ``mlm_summary <folder>``: mean ± sd over the seeds of each model and evaluation length (the
  folder's ``summary_mean.csv`` and ``summary.json``): [MASK]-input and all-selected losses, the
  context-free loss and the margin, accuracy, training wall time; lengths a model was not
  evaluated at say why.
- ``mlm_ablation <folder> runs=<folder> base=<model>``: the ablation's [MASK]-input margin per run
  at each length, each run named by the options its train command adds to the base's.
- ``mlm_eval <label@run folder> ... context_free=<json>``: eval_mlm.py's test loss and accuracy per
  length (and regime), the run's tokens/s and wall time, beside the context-free predictor.
- ``mlm_copy_probe <json>``: the copy probe's [MASK] accuracy at the last step per block and
  position encoding, a column per seed.
"""
import json
import os
import shlex
import statistics

from scripts.analysis.published.formatting import markdown_table
from scripts.analysis.published.loading import RenderError, SourceMissing, load_csv, load_json, load_jsonl, run_text

# the model names of the summary (its runs' folder names without the seed) as the tables write them
MLM_MODELS = {"bert_mini": "softmax BERT mini (window ±8)", "danet_mini": "DANet mini (LSG, w = 8, global RelPE positions)",
              "danet_mini_localpos": "DANet mini (LSG, w = 8, window-local RelPE positions: the config's default)"}
REGIMES = {"none": "", "linear": "linear", "quadratic": "quadratic"}


NUMBERS = ("loss_mean", "loss_std", "context_free_loss", "margin_mean", "margin_std", "margin_min", "margin_max",
           "accuracy_mean", "accuracy_std", "context_free_accuracy")


def _same_numbers(by, regimes):
    """Whether every regime of one model x length has the same numbers (DANet's linear and quadratic
    forms: the same sums in another order)."""
    return all(by[g, p][k] == by[regimes[0], p][k] for g in regimes for p in ("mask_input", "all_selected")
               for k in NUMBERS)


def render_mlm_summary(root, folder):
    """docs/mlm.md's results: a row per model x evaluation length (x regime where the regimes differ)
    of ``folder``'s summary_mean.csv: the [MASK]-input loss, the context-free loss and the margin
    (mean ± sd [min, max]), the [MASK]-input accuracy (context-free in brackets), the same three over
    all selected positions, the training wall time (mean over the seeds, min-max, minutes; from
    summary.json's runs) on a model's first row; a length summary.json lists as skipped says why.
    Raises SourceMissing when a file is absent or empty."""
    means = load_csv(root, os.path.join(folder, "summary_mean.csv"))
    summary = load_json(root, os.path.join(folder, "summary.json"))
    if not means:
        raise SourceMissing(f"a rendered block needs rows in {folder}/summary_mean.csv; it has none")
    seconds = {}
    for run in summary.get("runs", []):
        seconds.setdefault(run["model"], []).append(run["train_seconds"])
    keys = list(dict.fromkeys((r["model"], int(r["eval_len"])) for r in means))
    skipped = {(s["model"], int(s["eval_len"])): s["why"] for s in summary.get("skipped", [])}
    keys += [k for k in dict.fromkeys(skipped) if k not in keys]
    order = list(dict.fromkeys(m for m, _ in keys))
    keys.sort(key=lambda k: (order.index(k[0]), k[1]))
    f = lambda x: f"{float(x):.3f}"  # noqa: E731
    table, timed = [], set()
    for model, length in keys:
        name = MLM_MODELS.get(model, model)
        if (model, length) in skipped and not any(r["model"] == model and int(r["eval_len"]) == length for r in means):
            table.append([name, length, "", f"not evaluated: {skipped[model, length]}", "", "", ""])
            continue
        rows = [r for r in means if r["model"] == model and int(r["eval_len"]) == length]
        regimes = list(dict.fromkeys(r["regime"] for r in rows))
        by = {(r["regime"], r["positions"]): r for r in rows}
        merged = len(regimes) > 1 and _same_numbers(by, regimes)
        for regime in (regimes[:1] if merged else regimes):
            m, a = by[regime, "mask_input"], by[regime, "all_selected"]
            time = ""
            if model not in timed and seconds.get(model):
                s = [x / 60 for x in seconds[model]]
                time = f"{statistics.mean(s):.1f} min ({min(s):.1f}-{max(s):.1f})"
                timed.add(model)
            words = " and ".join(REGIMES.get(g, g) for g in regimes) if merged else REGIMES.get(regime, regime)
            table.append([name, length, words,
                          f"{f(m['loss_mean'])} ± {f(m['loss_std'])} / {f(m['context_free_loss'])} / "
                          f"**{f(m['margin_mean'])} ± {f(m['margin_std'])}** [{f(m['margin_min'])}, {f(m['margin_max'])}]",
                          f"{f(m['accuracy_mean'])} ± {f(m['accuracy_std'])} ({f(m['context_free_accuracy'])})",
                          f"{f(a['loss_mean'])} ± {f(a['loss_std'])} / {f(a['context_free_loss'])} / "
                          f"{f(a['margin_mean'])} ± {f(a['margin_std'])}", time])
    return markdown_table(["model", "L", "regime", "[MASK] inputs: loss / context-free / margin",
                           "[MASK] accuracy (context-free)", "all selected: loss / context-free / margin",
                           "training wall time"], table)


IGNORED_OPTIONS = ("out_dir", "num_threads", "seed")  # options of a train command that change no model


def _options(root, run):
    """{key: value} of the ``--key=value`` options of the train command in ``run``'s manifest.json."""
    command = json.loads(run_text(root, run, "manifest.json")).get("train", {}).get("command", "")
    return dict(a[2:].split("=", 1) for a in shlex.split(command) if a.startswith("--") and "=" in a)


def render_mlm_ablation(root, folder, runs="", base=""):
    """docs/mlm.md's ablation: a row per run of ``folder``'s summary.json (the base model ``base``
    first), the [MASK]-input margin at each evaluation length (3 decimals; regimes equal, else the
    first), each run named by the options its train command (the manifest of its packed run
    ``<runs>/<run name>``) adds to the base run's (``IGNORED_OPTIONS`` aside). Raises SourceMissing
    when a file or run is absent, RenderError without ``runs`` and ``base``."""
    if not (runs and base):
        raise RenderError("mlm_ablation: give runs=<folder of the packed runs> base=<model>")
    means = load_csv(root, os.path.join(folder, "summary_mean.csv"))
    names = [os.path.basename(r["run"]) for r in load_json(root, os.path.join(folder, "summary.json"))["runs"]]
    models = list(dict.fromkeys(r["model"] for r in means))
    if base not in models:
        raise SourceMissing(f"a rendered block needs the model {base} in {folder}/summary_mean.csv; it has {models}")
    lengths = sorted({int(r["eval_len"]) for r in means})
    run_of = {m: next((n for n in names if n.startswith(m + "_seed") and n[len(m) + 5:].isdigit()), None) for m in models}
    base_options = _options(root, os.path.join(runs, run_of[base])) if run_of[base] else {}
    table = []
    for model in sorted(models, key=lambda m: (m != base, models.index(m))):
        if model == base:
            label = f"`{model}` (the base)"
        else:
            if not run_of[model]:
                raise SourceMissing(f"a rendered block needs the run of {model} in {folder}/summary.json")
            options = _options(root, os.path.join(runs, run_of[model]))
            added = [f"`{k}={v}`" for k, v in options.items() if k not in IGNORED_OPTIONS and base_options.get(k) != v]
            label = f"`{model}`: + " + ", ".join(added) if added else f"`{model}` (no option added)"
        cells = []
        for length in lengths:
            rows = [r for r in means if r["model"] == model and int(r["eval_len"]) == length
                    and r["positions"] == "mask_input"]
            cells.append(f"{float(rows[0]['margin_mean']):.3f}" if rows else "-")
        table.append([label, *cells])
    return markdown_table(["run (seed 0)", *(f"margin at L = {n}" for n in lengths)], table)


def render_mlm_eval(root, *runs, context_free=""):
    """docs/dense_attention.md's first MLM table: a row per run "label@folder" (the folder holds
    eval_mlm.py's ``eval_mlm_test.json`` and train.py's ``train_log.jsonl``) and regime: the test
    loss (3 decimals) and accuracy (%, 2 decimals) at each evaluated length, the median of the log's
    tokens/s and the wall time (the log's last ``elapsed_s``) on the run's first row; then the
    context-free predictor (``context_free``: scripts/analysis/mlm_context_free.py's JSON) at every
    length. Raises SourceMissing when a file is absent, RenderError for a malformed argument."""
    if not runs or not context_free:
        raise RenderError("mlm_eval: give label@folder ... context_free=<json>")
    table, lengths, evaluated = [], [], []
    for run in runs:
        label, _, folder = run.partition("@")
        if not folder:
            raise RenderError(f"mlm_eval: {run!r} is not label@folder")
        rows = load_json(root, os.path.join(folder, "eval_mlm_test.json"))["rows"]
        records = load_jsonl(root, os.path.join(folder, "train_log.jsonl"))
        lengths += [r["seq_len"] for r in rows if r["seq_len"] not in lengths]
        evaluated.append((label.replace("_", " "), rows, records))
    lengths.sort()
    for label, rows, records in evaluated:
        speeds = [r["tok_per_s"] for r in records if "tok_per_s" in r]
        seconds = round(max((r.get("elapsed_s", 0) for r in records), default=0))
        for i, regime in enumerate(dict.fromkeys(r["regime"] for r in rows)):
            by = {r["seq_len"]: r for r in rows if r["regime"] == regime}
            cells = []
            for n in lengths:
                cells += [f"{by[n]['mlm_loss']:.3f}", f"{100 * by[n]['mlm_accuracy']:.2f}%"] if n in by else ["-", "-"]
            first = i == 0
            table.append([label + (f", {regime} regime" if regime else ""), *cells,
                          f"{statistics.median(speeds):,.0f}" if first and speeds else "",
                          f"{seconds // 60} min {seconds % 60} s ({seconds:,} s)" if first and seconds else ""])
    cf = load_json(root, context_free)
    table.append(["best context-free predictor", *[c for _ in lengths for c in (f"{cf['loss']:.3f}",
                                                                               f"{100 * cf['accuracy']:.2f}%")], "", ""])
    header = ["model"]
    for n in lengths:
        header += [f"test loss, L = {n}", f"test acc., L = {n}"]
    return markdown_table(header + ["training tokens/s (median)", "wall time"], table)


def render_mlm_copy_probe(root, probe_json):
    """The copy probe (``probe_json``: scripts/analysis/mlm_copy_probe.py's rows): a row per block and
    position encoding in the run's order, the [MASK] accuracy (%, 1 decimal) at the last step of each
    seed. Raises SourceMissing when the file is absent or has no rows."""
    rows = load_json(root, probe_json).get("rows") or []
    if not rows:
        raise SourceMissing(f"a rendered block needs rows in {probe_json}; it has none")
    last = {}
    for r in rows:
        key = (r["block"], r["pos_emb"], r["seed"])
        if key not in last or r["step"] > last[key]["step"]:
            last[key] = r
    settings = list(dict.fromkeys((b, p) for b, p, _ in last))
    seeds = sorted({s for _, _, s in last})
    table = [[f"{b} + {p}", *(f"{100 * last[b, p, s]['mask_accuracy']:.1f}%" if (b, p, s) in last else "-" for s in seeds)]
             for b, p in settings]
    step = max(r["step"] for r in rows)
    return markdown_table(["block + position encoding", *(f"seed {s} (step {step})" for s in seeds)], table)


RENDERERS = {"mlm_summary": render_mlm_summary, "mlm_ablation": render_mlm_ablation, "mlm_eval": render_mlm_eval,
             "mlm_copy_probe": render_mlm_copy_probe}
