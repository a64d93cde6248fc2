"""Sentences of the docs' prose that carry a verdict (an issue's aim met or not, a model at chance or
on the recall plateau), each computed from its artifact through a rule of ``verdicts`` (issue 58:
no verdict word typed in prose, where ``publish --check`` could not see it go stale). The tables of
the same numbers stay in their area's module; a sentence here reads the same files through that
module's functions, so that the two agree.

Renderers (``RENDERERS``):

- ``tree_aim <run.json> [<run.json> ...] [L=1024] [E=0.5] [float64=yes|no]``: issue 27's aim for the
  tree attention kernel (``tree.TREE_AIM_SPEEDUP`` times the authors' code on one thread, float32)
  over the runs of scripts/bench/tree.py, with the float64 factors beside (docs/tree_attention.md).
- ``bench_dense_aim <bench.json> [<bench.json> ...]``: the dense time per token aim (forward, causal)
  over the benchmark runs, each run's ratio named by its file (docs/benchmark.md).
- ``bench_fastmax2_aim``: causal fastmax p = 2 against SDPA in the re-run, and whether it is faster
  over the aims table's runs (``benchmark.FASTMAX2_RUNS``; docs/benchmark.md).
- ``mlm_acceptance <folder> [models=bert_mini,danet_mini] [L=128] [margin=0.3] [minutes=45]``: issue
  25's acceptance (every seed's [MASK]-input margin above ``margin`` nats at length L, every
  training run within ``minutes``) from the folder's summary_mean.csv and summary.json (docs/mlm.md).
- ``recall_target <summary.csv> cell=<T/N/width> [token_shift=False] [attention=softmax] [seeds=3]
  [threshold=0.99]``: issue 42's target (the attention at ``threshold`` or more in each of ``seeds``
  seeds at the picked rate) in one cell (docs/recall.md).
- ``recall_plateau <summary.csv> cell=<T/N/width> [token_shift=False] [attention=softmax] [seed=0]``:
  one seed's test accuracy at every rate of a cell against the 1/N plateau (docs/recall.md).
- ``fastmax_norm_wide <summary.csv> [head_dim=32] [p=1]``: the settings of the Fastmax normalization
  study that allow |s| > 1, every seed against the 1/N plateau (docs/recall.md).
- ``lra_chance <pattern> [task=pathfinder]``: which of our LRA runs of a task are at chance
  (``lra.at_chance``), with their accuracies and the majority rate (docs/lra.md).
- ``lra_text_aim <pattern> [<pattern> ...] [attentions=a,b] [aim=62]``: which attentions' Text runs
  reach the issue's accuracy aim (%), at the budget of each pattern's runs (docs/lra.md).
"""
import collections
import os
import statistics

from scripts.analysis.published import verdicts
from scripts.analysis.published.benchmark import (BENCH, DENSE_AIM, FASTMAX_AIM, dense_ratio, fastmax2_runs, find_aim,
                                                  method_params)
from scripts.analysis.published.formatting import display_name, join_words, number_word, rate
from scripts.analysis.published.loading import RenderError, SourceMissing, load_csv, load_json, marker_number
from scripts.analysis.published.lra import ORDER, at_chance, lra_chosen
from scripts.analysis.published.mlm import MLM_MODELS
from scripts.analysis.published.papers import TASKS, TITLES
from scripts.analysis.published.recall import cell_key, norm_setting, picked_runs, read_recall_summary
from scripts.analysis.published.tree import TREE_AIM_SPEEDUP


def _factors(values):
    """"61-77x" (the range of speed-ups, no decimals), "61x" when they round alike."""
    lo, hi = f"{min(values):.0f}", f"{max(values):.0f}"
    return f"{lo}x" if lo == hi else f"{lo}-{hi}x"


def render_tree_aim(root, *files, L="1024", E="0.5", float64="yes"):
    """Issue 27's aim for the tree attention CPU kernel, one bold sentence: TREE_AIM_SPEEDUP times the
    authors' ``np_attention.py`` on one thread in float32 at block length ``L`` and ``E``, judged over
    the runs ``files`` (scripts/bench/tree.py JSONs, their ``speedups``) by ``verdicts.aim_met``,
    the range of the float32 factors and (``float64=yes``) of the float64 ones. Raises
    SourceMissing when a file is absent or has no float32 one-thread factor at (L, E)."""
    L, E = marker_number("tree_aim", L), marker_number("tree_aim", E, float)
    if not files or float64 not in ("yes", "no"):
        raise RenderError("tree_aim: give one scripts/bench/tree.py JSON or more, and float64=yes or no")
    found = {"float32": [], "float64": []}
    for rel in files:
        rows = [s for s in load_json(root, rel)["speedups"]
                if s["slow"] == "casinoformer" and s["fast"] == "cpu" and s["fast_threads"] == 1
                and s["L"] == L and s["E"] == E and s["fast_dtype"] in found]
        if not any(s["fast_dtype"] == "float32" for s in rows):
            raise SourceMissing(f"a rendered block needs the kernel's float32 factor at L = {L}, E = {E:g} in {rel}")
        for s in rows:
            found[s["fast_dtype"]].append(s["speedup"])
    verdict = verdicts.aim_met(found["float32"], lambda v: v >= TREE_AIM_SPEEDUP)
    beside = f"; in float64 {_factors(found['float64'])}" if float64 == "yes" and found["float64"] else ""
    return (f"**The aim, {TREE_AIM_SPEEDUP}x over the authors' code on one thread in float32, is {verdict}: "
            f"{_factors(found['float32'])}{beside}.**\n")


def render_bench_dense_aim(root, *benches):
    """The dense linear-regime aim in one sentence: time per token at the long T over that at the
    short one, forward and causal, at most the target of the first run's summary (``dense_ratio``),
    judged over the runs ``benches`` (scripts/bench/attention.py JSONs) by ``verdicts.aim_met``, each
    run's ratio named by its file. Raises SourceMissing when a file or its dense aim is absent."""
    if not benches:
        raise RenderError("bench_dense_aim: give one benchmark JSON or more")
    ratios, target = [], None
    for rel in benches:
        data = load_json(root, rel)
        ratio, run_target = dense_ratio(data)
        target = run_target if target is None else target
        ratios.append((os.path.basename(rel), ratio))
    _, (long, short), _ = find_aim(load_json(root, benches[0])["summary"], DENSE_AIM)
    verdict = verdicts.aim_met([r for _, r in ratios], lambda v: v <= target)
    return (f"The aim (time per token at T = {long} at most {target:g} times that at {short}, causal forward) is "
            f"**{verdict}**: " + ", ".join(f"{r:.2f} in `{name}`" for name, r in ratios) + ".\n")


def render_bench_fastmax2_aim(root):
    """Causal fastmax p = 2 against SDPA (SDPA's time over fastmax's) in the re-run (BENCH["rerun"]),
    then whether it is faster over every run of the aims table (``benchmark.fastmax2_runs``: the
    runs FASTMAX2_RUNS), ``verdicts.reliably_faster`` of both calls against the aim's target. Raises
    SourceMissing when a file or an entry is absent."""
    runs, D, T = fastmax2_runs(root)
    by = {key: (f, b, data) for key, _, f, b, data in runs}
    if "rerun" not in by or "full" not in by:
        raise SourceMissing("a rendered block needs the re-run and the full run of the benchmark (BENCH)")
    forward, backward, rerun = by["rerun"]
    chunk = method_params(rerun, BENCH["rerun"][2])["chunk_size"]
    target = find_aim(by["full"][2]["summary"], FASTMAX_AIM)[2]["forward"]["target"]
    verdict = verdicts.reliably_faster({"forward": [r[2] for r in runs], "forward + backward": [r[3] for r in runs]},
                                       target)
    return (f"In the re-run, chunks of {chunk} against causal SDPA at T = {T:,}, D = {D} (SDPA's time / fastmax's): "
            f"forward {forward:.2f}, forward + backward {backward:.2f}. Faster than SDPA over the "
            f"{number_word(len(runs))} runs of the aims table above: {verdict}.\n")


def render_mlm_acceptance(root, folder, models="bert_mini,danet_mini", L="128", margin="0.3", minutes="45"):
    """Issue 25's acceptance (part 1) in two sentences, from ``folder``'s summary_mean.csv (each model's
    lowest seed's [MASK]-input margin over the context-free predictor at length ``L``) and summary.json
    (each run's training seconds): met (``verdicts.aim_met``) when every model's lowest margin is above
    ``margin`` nats and every run of those models trained within ``minutes``. Raises SourceMissing
    when a model has no row at L or no run."""
    L, bound = marker_number("mlm_acceptance", L), marker_number("mlm_acceptance", margin, float)
    limit = marker_number("mlm_acceptance", minutes, float)
    wanted = [m for m in models.split(",") if m]
    rows = load_csv(root, os.path.join(folder, "summary_mean.csv"))
    runs = load_json(root, os.path.join(folder, "summary.json")).get("runs", [])
    lowest, longest = {}, []
    for model in wanted:
        row = next((r for r in rows if r["model"] == model and int(r["eval_len"]) == L
                    and r["positions"] == "mask_input"), None)
        seconds = [r["train_seconds"] for r in runs if r["model"] == model]
        if row is None or not seconds:
            raise SourceMissing(f"a rendered block needs {model}'s [MASK]-input row at L = {L} and its runs "
                                f"in {folder}")
        lowest[model] = float(row["margin_min"])
        longest += seconds
    longest = max(longest) / 60
    met = verdicts.aim_met([all(v > bound for v in lowest.values()) and longest <= limit], bool)
    margins = join_words(f"{v:.3f} nats for the {MLM_MODELS.get(m, m)}" for m, v in lowest.items())
    return (f"**Acceptance (issue 25, part 1): {met}.** The issue asks for a margin over the context-free "
            f"predictor above {bound:g} nats in every seed on the [MASK]-input test positions at L = {L}, and "
            f"training within {limit:g} min: the lowest seed's margin is {margins}; the longest training run "
            f"took {longest:.1f} min.\n")


def _cell(renderer, cell, token_shift):
    """(T, N, width, token shift) of a ``cell`` "T/N/width" marker argument."""
    if token_shift not in ("True", "False"):
        raise RenderError(f"{renderer}: token_shift={token_shift}: expected True or False")
    try:
        T, N, W = (int(x) for x in cell.split("/"))
    except ValueError:
        raise RenderError(f"{renderer}: cell={cell!r}: expected T/N/width (e.g. 256/16/64)") from None
    return T, N, W, token_shift == "True"


def _accuracy(v):
    return f"{v:.4f}" if v < 0.01 else f"{v:.3f}"


def render_recall_target(root, summary, cell="", token_shift="False", attention="softmax", seeds="3",
                         threshold="0.99"):
    """Issue 42's target in one cell of a recall summary.csv: ``attention`` at ``threshold`` or more in
    each of ``seeds`` seeds at the picked rate, met or not (``verdicts.aim_met``), with the seeds
    solved (``verdicts.solved_words``) and their accuracies. Raises SourceMissing when the cell has no
    run of ``attention`` at its picked rate."""
    key = _cell("recall_target", cell, token_shift)
    n, bound = marker_number("recall_target", seeds), marker_number("recall_target", threshold, float)
    picked = picked_runs(read_recall_summary(root, summary), attention, key)
    if not picked:
        raise SourceMissing(f"a rendered block needs {attention}'s runs of the cell {cell} in {summary}")
    values = [r["test_accuracy"] for r in picked]
    met = verdicts.aim_met([len(values) >= n and all(v >= bound for v in values)], bool)
    return (f"Issue 42's target ({display_name(attention)} at {bound:g} or more in each of {n} seeds at the picked "
            f"rate) is {met} in this cell as it stands: {verdicts.solved_words(values, bound)} at "
            f"{rate(picked[0]['learning_rate'])} (" + ", ".join(f"seed {r['seed']} {_accuracy(r['test_accuracy'])}"
                                                            for r in picked) + ").\n")


def _plateau_phrase(values, pairs, where):
    """``verdicts.plateau_words`` of each value, "<words> <where[0]> every <where[1]>" when they agree
    (``where``: e.g. ("at", "rate")), else "<words> <where[0]> k of n <where[1]>s; ..."."""
    (preposition, noun), words = where, collections.Counter(verdicts.plateau_words(v, pairs) for v in values)
    if len(words) == 1:
        return f"{next(iter(words))} {preposition} every {noun}" if len(values) > 1 else next(iter(words))
    return "; ".join(f"{w} {preposition} {k} of {len(values)} {noun}s" for w, k in words.items())


def render_recall_plateau(root, summary, cell="", token_shift="False", attention="softmax", seed="0"):
    """One seed of ``attention`` at every learning rate of a recall cell against the 1/N plateau
    (``verdicts.plateau_words``), with each rate's test accuracy. Raises SourceMissing when the cell
    has no such run."""
    key, s = _cell("recall_plateau", cell, token_shift), marker_number("recall_plateau", seed)
    runs = sorted((r for r in read_recall_summary(root, summary)
                   if cell_key(r) == (attention, *key) and r["seed"] == s), key=lambda r: r["learning_rate"])
    if not runs:
        raise SourceMissing(f"a rendered block needs {attention}'s seed {s} in the cell {cell} of {summary}")
    values = [r["test_accuracy"] for r in runs]
    return (f"{display_name(attention)} {_plateau_phrase(values, key[1], ('at', 'rate'))} (1/N = {1 / key[1]:.3f}): "
            f"test accuracy {' / '.join(map(_accuracy, values))} at "
            f"{' / '.join(rate(r['learning_rate']) for r in runs)} (seed {s}).\n")


def render_fastmax_norm_wide(root, summary, head_dim="32", p="1"):
    """The settings of the Fastmax normalization study (``recall.render_fastmax_norm_study``'s
    summary.csv) that allow |s| > 1 at ``head_dim`` (bound above 1, or none), fastmax ``p``: every
    seed against the 1/N plateau (``verdicts.plateau_words``) and the highest accuracy. Raises
    SourceMissing when the summary has no such setting."""
    D = marker_number("fastmax_norm_wide", head_dim)
    runs = [r for r in read_recall_summary(root, summary) if r["attention"].split(" ", 1)[0] == f"fastmax{p}"]
    wide = {}
    for r in runs:
        words, bound = norm_setting(r["attention"], D)
        if bound == "none" or float(bound) > 1:
            wide.setdefault(words, []).append(r)
    if not wide:
        raise SourceMissing(f"a rendered block needs fastmax p = {p} settings with |s| > 1 in {summary}")
    values = [r["test_accuracy"] for rs in wide.values() for r in rs]
    pairs = {r["num_pairs"] for rs in wide.values() for r in rs}
    if len(pairs) != 1:
        raise RenderError(f"fastmax_norm_wide: the settings of {summary} differ in their number of pairs")
    N = pairs.pop()
    return (f"Every setting of p = {p} that allows |s| > 1 ({'; '.join(wide)}) "
            f"{_plateau_phrase(values, N, ('in', 'seed'))} (1/N = {1 / N:.2f}): test accuracy at most "
            f"{max(values):.3f}.\n")


def render_lra_chance(root, pattern, task="pathfinder"):
    """Which of our LRA runs of ``task`` (``lra.lra_chosen``: one per attention) are at chance
    (``lra.at_chance``), with each run's test accuracy against the majority-class rate of its test
    examples. Raises SourceMissing when no run of the task matches ``pattern``."""
    if task not in TASKS:
        raise RenderError(f"lra_chance: task={task!r}: one of {', '.join(TASKS)}")
    chosen = lra_chosen(root, pattern)
    runs = [(label, chosen[(label, task)]) for label in ORDER if (label, task) in chosen]
    if not runs:
        raise SourceMissing(f"a rendered block needs {task} runs under {pattern}; there are none")
    at = [display_name(label) for label, run in runs if at_chance(run)]
    other = [display_name(label) for label, run in runs if not at_chance(run)]
    if not other:
        verdict = f"all {number_word(len(runs))} models stay at chance" if len(runs) > 1 else f"{at[0]} stays at chance"
    elif not at:
        verdict = "none of our models is at chance"
    else:
        verdict = f"{join_words(at)} at chance, {join_words(other)} not"
    majority = statistics.mean(run["majority"] for _, run in runs)
    examples = {run["test_examples"] for _, run in runs}
    return (f"{TITLES[TASKS.index(task)]}: {verdict} (within two binomial standard errors of the majority rate, or "
            "below): test accuracy " + ", ".join(f"{100 * run['test_accuracy']:.1f}% ({display_name(label)})"
                                                for label, run in runs)
            + f" against the majority class's {100 * majority:.1f}%"
            + (f" of {int(examples.pop()):,} test examples" if len(examples) == 1 else "") + ".\n")


def render_lra_text_aim(root, *patterns, attentions="", aim="62"):
    """Which attentions' Text runs (``lra.lra_chosen`` of each glob of ``patterns``, one budget each)
    reach ``aim`` % test accuracy (``verdicts.aim_met`` of the run), a clause per budget with the
    accuracies; ``attentions``: a comma list of labels (default: those with a Text run in the first
    pattern). Raises SourceMissing when a pattern has no Text run of an attention."""
    if not patterns:
        raise RenderError("lra_text_aim: give one glob of LRA runs or more")
    target = marker_number("lra_text_aim", aim, float)
    clauses = []
    for pattern in patterns:
        chosen = lra_chosen(root, pattern)
        wanted = [a for a in attentions.split(",") if a] or [a for a in ORDER if (a, "text") in chosen]
        missing = [a for a in wanted if (a, "text") not in chosen]
        if not wanted or missing:
            raise SourceMissing(f"a rendered block needs the Text runs of {', '.join(missing or ['an attention'])} "
                                f"under {pattern}")
        runs = {a: chosen[(a, "text")] for a in wanted}
        reached = {a: verdicts.aim_met([100 * r["test_accuracy"]], lambda v: v >= target, ("reached", "missed"))
                   for a, r in runs.items()}
        steps = {r["iters"] for r in runs.values()}

        def named(group):
            return join_words(f"{display_name(a)} ({100 * runs[a]['test_accuracy']:.1f}%)" for a in group)

        yes, no = [a for a in wanted if reached[a] == "reached"], [a for a in wanted if reached[a] != "reached"]
        budget = f"at {steps.pop():,} steps" if len(steps) == 1 else f"in `{pattern}`"
        if yes and no:
            clauses.append(f"{budget} {named(yes)} {'reaches' if len(yes) == 1 else 'reach'} it, {named(no)} "
                           f"{'does' if len(no) == 1 else 'do'} not")
        else:
            clauses.append(f"{budget} {'every attention reaches' if yes else 'none reaches'} it: {named(yes or no)}")
    return f"Text, the issue's {target:g}%: " + "; ".join(clauses) + ".\n"


RENDERERS = {"tree_aim": render_tree_aim, "bench_dense_aim": render_bench_dense_aim,
             "bench_fastmax2_aim": render_bench_fastmax2_aim, "mlm_acceptance": render_mlm_acceptance,
             "recall_target": render_recall_target, "recall_plateau": render_recall_plateau,
             "fastmax_norm_wide": render_fastmax_norm_wide, "lra_chance": render_lra_chance,
             "lra_text_aim": render_lra_text_aim}
