"""Long Range Arena: reading our LRA classification runs, the choice of one run per attention x task,
the papers' rows beside ours (from ``papers``), and the renderers of docs/lra.md's and
docs/baselines.md's LRA tables. The ``lra_table`` tool builds its tables from the same functions.
A run at chance (``verdicts.at_chance``) reads "fail".

Renderers (``RENDERERS``):

- ``lra_text <folder>``: our LRA Text runs under ``<folder>`` beside the published Text numbers.
- ``lra_tasks <pattern>``: our reduced LRA runs matching ``<pattern>``, a row per task (accuracy,
  steps/s and the majority rate; docs/lra.md's results table).
- ``lra_text_budgets <pattern> <pattern> [attentions=a,b]``: each attention's Text accuracy in the
  runs of the first pattern beside the second's, with the step of the weights kept.
- ``lra_text_cells <folder>``: the scorecard's LRA Text cells (the cards under ``<folder>/cards``):
  each attention's accuracy with its steps, the test reviews scored of the split's, the CPU and the
  commit each run was made at (its manifest's, "not recorded" where it has none), and its file.
- ``published_lra [attentions=a,b]``: the papers' LRA rows of those attentions (``PUBLISHED_ACCURACY``,
  the one copy of them in the repository; docs/baselines.md).
- ``listops_baselines <test.json> <val.json>``: what ListOps offers without evaluating the expression
  (``scripts.analysis.listops``' predictors on the test and validation splits).
- ``listops_runs <run> [<run> ...]``: single ListOps runs side by side: steps x batch, the validation
  loss and accuracy over the evaluations (grouped where they stay level), the test accuracy and loss
  with the step of the weights kept, the run's file.
- ``listops_by_operator <json>``: test accuracy per outermost operator of each run in
  ``scripts.analysis.listops``' per-operator JSON, beside the first-operator rule.
"""
import os
import shlex

from scripts.analysis.published import verdicts
from scripts.analysis.published.formatting import (bracketed, display_name, fmt_cell, markdown_table, older_defaults,
                                                   short_cpu)
from scripts.analysis.published.loading import RenderError, SourceMissing, load_json, load_run, run_sources
from scripts.analysis.published.loading import source as loading_source
from scripts.analysis.published.papers import (PUBLISHED_ACCURACY, PUBLISHED_NOTES, PUBLISHED_STEPS, SHORT_SOURCES,
                                               TASKS, TITLES)
from scripts.analysis.runs import FINAL_METRICS, attention_label, find_runs, open_run, run_cpu, run_date


FAST_TASKS = TASKS[:5]
PAPER_METHODS = ("softmax", "fastmax1", "fastmax2", "dense")  # their published rows always show
BASELINES = ("linear", "performer", "linformer", "longformer", "bigbird", "reformer", "informer")
ORDER = PAPER_METHODS + BASELINES  # a baseline's published rows show beside our runs of it


def render_published_lra(root, attentions=""):
    """The papers' LRA accuracies (%) of the attentions in ``attentions`` (a comma list of labels;
    default every one), a row per published row of PUBLISHED_ACCURACY in its order: ListOps, Text,
    Retrieval, Image, Pathfinder and the average as printed (Path-X left out: failed or not
    reported), the source with PUBLISHED_NOTES. Reads no file; ``root`` is unused. Raises RenderError
    for a label without a published row."""
    wanted = [a for a in attentions.split(",") if a] or list(dict.fromkeys(a for a, *_ in PUBLISHED_ACCURACY))
    unknown = sorted(set(wanted) - {a for a, *_ in PUBLISHED_ACCURACY})
    if unknown:
        raise RenderError(f"published_lra: no published LRA row for {', '.join(unknown)}")
    rows = []
    for label, source, accuracies, average in PUBLISHED_ACCURACY:
        if label in wanted:
            note = PUBLISHED_NOTES.get((label, source))
            rows.append([display_name(label), SHORT_SOURCES.get(source, source) + (f" ({note})" if note else ""),
                         *(f"{a:.2f}" for a in accuracies[:5]), f"{average:.2f}"])
    return markdown_table(["method", "source", "ListOps", "Text", "Retrieval", "Image", "Pathfinder", "Avg"], rows)


def task_column(cfg):
    """Column of a run's config (one of TASKS): its ``lra_task``, Pathfinder at resolution 128 is Path-X."""
    task = cfg.get("lra_task", "")
    if task == "pathfinder" and (cfg.get("lra_options") or {}).get("resolution", 32) == 128:
        return "pathx"
    return task


def read_lra_runs(files, skipped=None):
    """One record per LRA classification run of ``files`` (``runs.find_runs``'s Runs, or anything
    ``runs.open_run`` takes): file (its final_metrics.json, in the run folder or the packed run), run (the
    run path), label, task, test/val accuracy, steps_per_s, iters, best_iter, majority, test_examples,
    examples_seen, max_len, cpu (of the run's manifest.json, None without one), older_defaults (the
    note of a run made under an older default of its method, else ""). Other runs are left out,
    and their final_metrics.json paths appended to ``skipped`` if given."""
    runs = []
    for run in map(open_run, files):
        m = run.final_metrics or {}
        f = os.path.join(run.path, FINAL_METRICS)
        cfg = m.get("config", {})
        if cfg.get("task", "classify") != "classify" or "test_accuracy" not in m:
            if skipped is not None:
                skipped.append(f)
            continue
        runs.append({"file": f, "run": run.path, "label": attention_label(cfg), "task": task_column(cfg),
                     "test_accuracy": m["test_accuracy"], "val_accuracy": m.get("val_accuracy"),
                     "steps_per_s": m.get("steps_per_s"), "iters": m.get("iters"), "best_iter": m.get("best_iter"),
                     "majority": m.get("test_majority"), "test_examples": m.get("test_examples"),
                     "examples_seen": (m.get("iters") or 0) * cfg.get("batch_size", 0),
                     "max_len": cfg.get("max_len"), "cpu": run_cpu(run),
                     "older_defaults": older_defaults(cfg.get("attention"), run_date(run))})
    return runs


def choose(runs):
    """The run of one cell: the most training examples seen, then the higher val accuracy, then
    the path (a rule, so the table does not depend on which file was written last)."""
    return max(runs, key=lambda r: (r["examples_seen"], r["val_accuracy"] or 0.0, r["file"]))


def at_chance(run):
    """Whether an LRA run is at chance: ``verdicts.at_chance`` of its test accuracy against the
    majority-class rate of its test examples."""
    return verdicts.at_chance(run["test_accuracy"], run["majority"], run["test_examples"])


def lra_cell(run):
    """Our accuracy cell: the test accuracy in %, or "fail (acc; majority m)" at chance (``at_chance``)."""
    if run is None:
        return None
    if at_chance(run):
        return f"fail ({100 * run['test_accuracy']:.2f}; majority {100 * run['majority']:.2f})"
    return 100 * run["test_accuracy"]


def build_tables(runs):
    """(accuracy rows, steps rows, chosen runs, common tasks): rows are (attention, source, values
    in TASKS order, avg) with accuracies in %; ``chosen`` maps (label, task) -> run (``choose``); our
    accuracy avg is over FAST_TASKS when a row has all five; ``common`` lists the tasks (TASKS order)
    that every one of our rows has."""
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
            vals = [lra_cell(chosen.get((label, t))) for t in TASKS]
            complete = all((label, t) in chosen for t in FAST_TASKS)
            avg = sum(100 * chosen[(label, t)]["test_accuracy"] for t in FAST_TASKS) / 5 if complete else None
            acc_rows.append((label, "ours", vals, avg))
            steps = [chosen[(label, t)]["steps_per_s"] if (label, t) in chosen else None for t in TASKS]
            five = steps[:5]
            avg = sum(five) / 5 if all(s is not None for s in five) else None
            steps_rows.append((label, "ours", steps, avg))
        for a, src, vals, avg in PUBLISHED_ACCURACY:
            if a == label:
                acc_rows.append((a, f"published: {src}", list(vals), avg))
        for a, src, vals, avg in PUBLISHED_STEPS:
            if a == label:
                steps_rows.append((a, f"published: {src}", list(vals), avg))
    return acc_rows, steps_rows, chosen, common


def lra_chosen(root, pattern):
    """``build_tables``'s chosen runs {(label, task): run} of the LRA runs matching the glob ``pattern``
    (``run_sources``; folders searched recursively). Raises SourceMissing when none holds an LRA run."""
    runs = read_lra_runs(find_runs([os.path.join(root, p) for p in run_sources(root, pattern)]))
    if not runs:
        raise SourceMissing(f"a rendered block needs LRA runs (final_metrics.json) under {pattern}; there are none")
    return build_tables(runs)[2]


def render_lra_text(root, folder):
    """Our LRA Text runs under ``folder`` (one row per attention, ``ORDER``): test accuracy %, steps/s,
    the CPU (``short_cpu``), and the published Text accuracies of the attention (PUBLISHED_ACCURACY,
    a run made under an older default of its method named so, ``older_defaults``;
    sources shortened by SHORT_SOURCES). Raises SourceMissing when ``folder`` holds no LRA run."""
    chosen = lra_chosen(root, folder)
    labels = [a for a in ORDER if (a, "text") in chosen] + sorted(
        a for a, t in chosen if t == "text" and a not in ORDER)
    rows = []
    for label in labels:
        run = chosen[(label, "text")]
        published = ", ".join(f"{fmt_cell(vals[1])} ({SHORT_SOURCES.get(src, src)})"
                              for a, src, vals, _ in PUBLISHED_ACCURACY if a == label and vals[1] is not None)
        rows.append([display_name(label) + bracketed(run["older_defaults"]), fmt_cell(lra_cell(run)),
                     f"{run['steps_per_s']:.2f}",
                     short_cpu(run["cpu"]), published or "-"])
    return markdown_table(["attention", "test acc % (ours, one seed)", "steps/s (ours)", "CPU",
                      "published Text accuracy %"], rows)


def starred(run, notes):
    """The stars that footnote a run made under an older default of its method ("" for none):
    one star for the first such note of a table, two for the second...; ``notes`` (note -> stars)
    collects them for ``star_notes``."""
    return "*" * notes.setdefault(run["older_defaults"], len(notes) + 1) if run["older_defaults"] else ""


def star_notes(notes):
    """The footnote lines of ``starred``'s ``notes``: "* <note>."."""
    return [f"{'*' * n} {note}." for note, n in notes.items()]


def render_lra_tasks(root, pattern):
    """docs/lra.md's table of our reduced LRA runs matching the glob ``pattern`` (``lra_chosen``):
    one row per task (its test examples and steps x batch), the majority-class rate of the test
    split, then per attention (``ORDER``) the test accuracy % with the training steps per second;
    "fail" marks a run at chance (``at_chance``), a run made under an older default of its method
    is footnoted (``older_defaults``), a cell without a run reads "not run". Raises SourceMissing
    when ``pattern`` holds no LRA run."""
    chosen = lra_chosen(root, pattern)
    labels = [a for a in ORDER if any(label == a for label, _ in chosen)] + sorted(
        {a for a, _ in chosen if a not in ORDER})
    notes = {}
    def cell(run):
        if run is None:
            return "not run"
        mark = starred(run, notes)
        accuracy = 100 * run["test_accuracy"]
        text = f"fail ({accuracy:.1f})" if at_chance(run) else f"{accuracy:.1f}"
        return f"{text}{mark} ({run['steps_per_s']:.1f} steps/s)"
    rows = []
    for task, title in zip(TASKS, TITLES):
        runs = [chosen.get((label, task)) for label in labels]
        present = [r for r in runs if r is not None]
        if not present:
            continue
        shape = {(int(r["test_examples"]), r["iters"], r["examples_seen"] // max(r["iters"] or 1, 1)) for r in present}
        examples, iters, batch = sorted(shape)[0]
        what = f"{title} ({examples:,} test examples; {iters:,} steps x {batch})" if len(shape) == 1 else \
            f"{title} (runs of different sizes: " + "; ".join(f"{e:,} test, {i:,} x {b}" for e, i, b in sorted(shape)) + ")"
        majority = {r["majority"] for r in present if r["majority"] is not None}
        rows.append([what, "/".join(f"{100 * m:.1f}" for m in sorted(majority)) or "-", *map(cell, runs)])
    out = markdown_table(["task", "majority %", *(display_name(label) for label in labels)], rows)
    cpus = sorted({short_cpu(r["cpu"]) for r in chosen.values()})
    lines = star_notes(notes)
    lines.append(f"Every run on a 2-core {cpus[0]}." if len(cpus) == 1 else
                 "Runs on different CPUs (steps/s do not compare across them): " + ", ".join(cpus) + ".")
    return out + "\n" + "\n".join(lines) + "\n"


def render_lra_text_budgets(root, short, long, attentions=""):
    """docs/lra.md's Text table at two budgets: the test accuracy % of each attention's Text run
    matching the glob ``short`` beside its run matching ``long`` with the step of the weights kept
    (``best_iter``); ``attentions``: a comma list of labels (default: those of both). A run made
    under an older default of its method is footnoted. Raises SourceMissing when a pattern holds no
    LRA run."""
    first, second = lra_chosen(root, short), lra_chosen(root, long)
    wanted = attentions.split(",") if attentions else [a for a in ORDER if (a, "text") in first and (a, "text") in second]
    notes, rows = {}, []
    def cell(run, step=False):
        if run is None:
            return "not run"
        mark = starred(run, notes)
        return f"{100 * run['test_accuracy']:.1f}{mark}" + (f" ({run['best_iter']:,})" if step else "")
    for label in wanted:
        a, b = first.get((label, "text")), second.get((label, "text"))
        rows.append([display_name(label), cell(a), cell(b, step=True)])
    steps = [f"{next(r['iters'] for (_, t), r in runs.items() if t == 'text'):,} steps" for runs in (first, second)]
    out = markdown_table(["attention", steps[0], f"{steps[1]} (weights of step)"], rows)
    return out + "".join(f"\n{line}\n" for line in star_notes(notes))


NOT_RECORDED = "not recorded"  # a run whose manifest has no commit (``"commit": "unknown"``)


def run_commits(run):
    """The commits a run was trained at, from the train.py entries of its manifest.json (``train``,
    then each ``train_resumed_at_<iter>``): each short hash (with "+dirty" where the tree was),
    "(reconstructed)" after one that an entry marked so with its ``reconstruction``, joined by " + "
    when the segments differ; NOT_RECORDED when no entry has one."""
    manifest = run.manifest or {}
    entries = [manifest[k] for k in sorted(manifest, key=lambda k: (k != "train", k))
               if k == "train" or k.startswith("train_resumed_at_")]
    commits = []
    for entry in entries:
        commit = entry.get("commit") or "unknown"
        if commit == "unknown":
            continue
        head, dirty = (commit[:-len("+dirty")], "+dirty") if commit.endswith("+dirty") else (commit, "")
        text = head[:7] + dirty + (" (reconstructed)" if entry.get("reconstructed") and entry.get("reconstruction") else "")
        if text not in commits:
            commits.append(text)
    return " + ".join(commits) or NOT_RECORDED


def render_lra_text_cells(root, folder):
    """The scorecard's LRA Text cells (``scripts.scorecard.leaderboard``: the cards under
    ``folder/cards`` and each cell's budget, ``cell_budget``), a row per card with one, softmax's first
    and then by label (the leaderboard's order): the test accuracy %, the steps, the test reviews scored of the test split's, the
    CPU (``short_cpu``), the commit of the run (``run_commits``) and its file. Raises SourceMissing
    when ``folder`` holds no card or no card an LRA Text cell."""
    from scripts.scorecard.leaderboard import cell_budget, read_cards

    loading_source(root, os.path.join(folder, "cards"))
    rows = []
    for card in sorted(read_cards(os.path.join(root, folder)), key=lambda c: (c["label"] != "softmax", c["label"])):
        for cell in (c for c in card["cells"] if c["role"] == "lra"):
            budget = cell_budget(cell, "lra", root) or {}
            run = load_run(root, cell["source"])
            reviews = (f"{budget['test_examples']:,} of {budget['test_size']:,}"
                       if budget.get("test_examples") and budget.get("test_size") else NOT_RECORDED)
            rows.append([display_name(card["label"]), f"{100 * cell['test_accuracy']:.2f}", f"{cell['steps']:,}",
                         reviews, short_cpu(cell.get("cpu")), run_commits(run), f"`{cell['source']}`"])
    if not rows:
        raise SourceMissing(f"a rendered block needs an LRA Text cell in {folder}/cards; there is none")
    return markdown_table(["attention", "test acc %", "steps", "test reviews", "CPU", "commit", "run"], rows)


# ----------------------------------------------------------------------------- ListOps: the plateau and its baselines

# scripts.analysis.listops' predictors: (field prefix in its JSON, what the table calls it)
LISTOPS_PREDICTORS = (("prior", "class frequencies (the prior; its accuracy is the majority rate)"),
                      ("first_token", "most frequent label of the first token, the outermost operator"),
                      ("bag_of_tokens", "linear probe on the bag of tokens (token frequencies and the length; "
                                        "multinomial logistic regression)"),
                      ("bag_and_first_token", "the same probe plus the first token"))


def _predictor(record, prefix):
    """(accuracy %, loss or None) of one predictor of scripts.analysis.listops' JSON (the prior's
    accuracy is the majority rate)."""
    accuracy = record["majority_accuracy"] if prefix == "prior" else record[f"{prefix}_accuracy"]
    return 100 * accuracy, record.get(f"{prefix}_loss")


def render_listops_baselines(root, test_json, val_json):
    """docs/lra.md's table of what ListOps offers without evaluating the expression: a row per
    predictor of ``LISTOPS_PREDICTORS`` (fitted on the training sequences), its accuracy (%, 2
    decimals) and loss (3 decimals; "-" for a rule without probabilities) on the test split
    (``test_json``) and on the validation split (``val_json``), and the rule itself. Raises
    SourceMissing when a file is absent."""
    test, val = load_json(root, test_json), load_json(root, val_json)
    loss = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    table = []
    for prefix, words in LISTOPS_PREDICTORS:
        if prefix == "first_token":
            rule = ", ".join(f"{op.lstrip('[')} -> {label}" for op, label in test.get("rule", {}).items())
            words += f" ({rule})" if rule else ""
        (ta, tl), (va, vl) = _predictor(test, prefix), _predictor(val, prefix)
        table.append([words, f"{ta:.2f}", loss(tl), f"{va:.2f} / {loss(vl)}"])
    return markdown_table([f"predictor ({test.get('eval_examples', 0):,} test sequences)", "test accuracy (%)",
                           "test loss", "validation accuracy (%) / loss"], table)


LISTOPS_SHOWN = ("batch_size", "max_iters", "lr_decay_iters", "eval_interval", "num_threads", "out_dir", "init_from")
LEVEL = {"val_loss": 0.1, "val_accuracy": 3.0}  # a jump larger than this between evaluations starts a new group


def _groups(evals, field):
    """The evaluations of one quantity (``field``: val_loss, or val_accuracy in %) as text: consecutive
    evaluations whose values differ by at most LEVEL[field] form one group, "lo-hi at steps a-b"
    (one evaluation: "v at step a"); a run that stays level is its range alone."""
    scale, fmt = (100, ".1f") if field == "val_accuracy" else (1, ".3f")
    groups = []
    for step, value in ((it, scale * e[field]) for it, e in evals):
        if groups and abs(value - groups[-1][-1][1]) <= LEVEL[field]:
            groups[-1].append((step, value))
        else:
            groups.append([(step, value)])

    def span(group):
        lo, hi = min(v for _, v in group), max(v for _, v in group)
        values = f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"
        if len(groups) == 1:
            return values
        steps = f"step {group[0][0]:,}" if len(group) == 1 else f"steps {group[0][0]:,}-{group[-1][0]:,}"
        return f"{values} at {steps}"

    return "; ".join(map(span, groups))


def render_listops_runs(root, *runs):
    """docs/lra.md's table of single ListOps runs, a row per run path of ``runs`` (packed or a
    folder): the attention and the options of its train command other than the schedule and the
    output (``LISTOPS_SHOWN``), steps x batch (sequences seen), the validation loss and accuracy
    over the evaluations (``_groups``), the test accuracy (%, 2 decimals) and loss with the step of the weights
    tested, the run's file. Raises SourceMissing when a run is absent or has no final metrics."""
    if not runs:
        raise RenderError("listops_runs: give one run path or more")
    table = []
    for path in runs:
        run = load_run(root, path)
        metrics = run.final_metrics
        if not metrics or "test_accuracy" not in metrics:
            raise SourceMissing(f"a rendered block needs the final metrics of {path}; it has none")
        cfg = metrics.get("config", {})
        command = (run.manifest or {}).get("train", {}).get("command", "")
        options = [a[2:] for a in shlex.split(command) if a.startswith("--") and "=" in a
                   and a[2:].split("=", 1)[0] not in LISTOPS_SHOWN]
        label = display_name(attention_label(cfg)) + (", " + " ".join(f"`{o}`" for o in options) if options else "")
        evals = [(r["iter"], r["eval"]) for r in (run.log or []) if "eval" in r]
        iters, batch = metrics["iters"], cfg.get("batch_size", 0)
        table.append([label, f"{iters:,} x {batch} ({iters * batch:,})", _groups(evals, "val_loss"),
                      _groups(evals, "val_accuracy"),
                      f"{100 * metrics['test_accuracy']:.2f} ({metrics['test_loss']:.3f}; weights of step "
                      f"{metrics['best_iter']:,})", f"`{os.path.basename(run.source)}`"])
    return markdown_table(["run", "steps x batch (sequences seen)", "validation loss over the evaluations",
                           "validation accuracy (%)", "test accuracy % (loss; weights of step)", "file in `results/lra/`"],
                          table)


def _operator_cell(part, total=False):
    """"57.8 (0: 494)": accuracy % and the class predicted most with its count ("all" when it is every
    prediction); ``total``: the accuracy with 2 decimals alone."""
    if total:
        return f"{100 * part['accuracy']:.2f}"
    counts = part["prediction_counts"]
    top = max(range(len(counts)), key=lambda c: (counts[c], -c))
    many = "all" if counts[top] == part["examples"] else f"{counts[top]:,}"
    return f"{100 * part['accuracy']:.1f} ({top}: {many})"


def render_listops_by_operator(root, operator_json):
    """docs/lra.md's ListOps accuracy by outermost operator (``operator_json``: scripts/analysis/listops.py
    with runs): the first-operator rule's row, then a row per run in the file's order (its folder name
    and the step of its weights): accuracy % per operator with the class it predicts most
    there, overall accuracy and how often it predicts what the rule does (2 decimals). Raises
    SourceMissing when the file is absent or holds no run."""
    runs = load_json(root, operator_json).get("runs") or {}
    if not runs:
        raise SourceMissing(f"a rendered block needs runs in {operator_json}; it has none")
    first = next(iter(runs.values()))
    operators = list(first["by_operator"])
    header = ["test accuracy (%)", *(f"{op.lstrip('[')} ({first['by_operator'][op]['examples']:,})" for op in operators),
              f"all ({first['overall']['examples']:,})", "same prediction as the rule"]
    table = [["first-operator rule", *(f"{100 * first['by_operator'][op]['rule_accuracy']:.1f}" for op in operators),
              f"{100 * first['overall']['rule_accuracy']:.2f}", "-"]]
    for name, run in runs.items():
        label = f"`{os.path.basename(name)}` (weights of step {run.get('iter_num', 0):,})"
        table.append([label, *(_operator_cell(run["by_operator"][op]) for op in operators),
                      _operator_cell(run["overall"], total=True), f"{100 * run['overall']['agreement']:.2f}%"])
    return markdown_table(header, table)


RENDERERS = {"lra_text": render_lra_text, "lra_tasks": render_lra_tasks, "lra_text_budgets": render_lra_text_budgets,
             "lra_text_cells": render_lra_text_cells,
             "published_lra": render_published_lra, "listops_baselines": render_listops_baselines,
             "listops_runs": render_listops_runs, "listops_by_operator": render_listops_by_operator}
