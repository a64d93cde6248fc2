"""README.md's Results table: a row per ``README_ROWS`` entry, its experiment and result templates
filled with fields that the row's function computes from files under ``results/`` (it names them).
A template types no result and no verdict: every measured number is a field, and every verdict
word a field that a rule of ``verdicts`` computes from the numbers (which settings a row
compares, and its caveats that do not depend on them, stay in the template).

Renderers (``RENDERERS``):

- ``readme_results``: README.md's Results table.
"""
import ast
import math
import os
import re
import statistics

from scripts.analysis.published import verdicts
from scripts.analysis.published.formatting import (NAMES, about, bracketed, display_name, join_words, markdown_table,
                                                   median_range, number_word, older_defaults, percent, rate, sci)
from scripts.analysis.published.benchmark import (DENSE_AIM, FASTMAX_AIM, bench_run, find_aim, dense_ratio,
                                                  fastmax2_runs)
from scripts.analysis.published.lm import context_used, read_gpt_mini_runs
from scripts.analysis.published.loading import (RenderError, SourceMissing, load_csv, load_json, load_jsonl, load_run,
                                                read_text, run_config, run_sources, run_text, source,
                                                sources)
from scripts.analysis.published.lra import ORDER, at_chance, lra_chosen, read_lra_runs
from scripts.analysis.published.recall import (cell_key, cell_label, mark_picked, one_rate, picked_runs,
                                               read_recall_runs, read_recall_summary, recall_order)
from scripts.analysis.published.tree import TREE_AIM_SPEEDUP, tree_speedups
from scripts.analysis.runs import find_runs, open_run


def _gpt_mini_fields(root):
    """results/gpt_mini_wikitext2: the parameter count (train_stdout.log), the training time (the last
    elapsed_s of train_log.jsonl), the test perplexity and the context used (test_blocks.json)."""
    log = read_text(root, "results/gpt_mini_wikitext2/train_stdout.log")
    params = re.search(r"model: (\S+) parameters", log)
    if not params:
        raise SourceMissing("a rendered block needs the parameter count (model: ... parameters) in "
                            "results/gpt_mini_wikitext2/train_stdout.log; it has none")
    seconds = max(r.get("elapsed_s", 0) for r in load_jsonl(root, "results/gpt_mini_wikitext2/train_log.jsonl"))
    test = load_json(root, "results/gpt_mini_wikitext2/test_blocks.json")
    return {"params": params.group(1), "minutes": int(seconds // 60), "ppl": f"{test['value']:.2f}",
            "protocol": test["protocol"], "context": about(context_used(test["per_position"]))}


def _tree_fields(root):
    """The perplexity change and cost at the smallest E of the default sampler (edh, bud_mean) in
    results/tree_sweep/tree_sweep_table.csv, with the sweep's slices (its exact-attention runs) and the
    change of its sliding-window baseline (``softmax_window<W>``) on the same slices; the swap cell of
    tree attention's scorecard card (``_tree_swap``: the whole test split); the kernel's speed-ups in
    TREE_BENCH."""
    table = load_csv(root, "results/tree_sweep/tree_sweep_table.csv")
    rows = [r for r in table if r["row"] == "config" and r["attention"] == "tree" and r["sampler"] == "edh"
            and r["normalization"] == "bud_mean"]
    windows = sorted((int(m.group(1)), r) for r in table if r["row"] == "config"
                     for m in [re.fullmatch(r"softmax_window(\d+)", r["attention"])] if m)
    exact = [r for r in table if r["row"] == "run" and r["attention"] == "softmax"]
    if not (rows and windows and exact):
        raise SourceMissing("a rendered block needs the edh rows, a softmax_window<W> row and the exact runs of "
                            "results/tree_sweep/tree_sweep_table.csv")
    row = min(rows, key=lambda r: float(r["E"]))
    window, window_row = windows[0]
    tokens = {int(r["tokens_scored"]) for r in exact}
    swap_E, swap_change = _tree_swap(root)
    one = [s[1] for s in tree_speedups(root)[0] if s[0] == 1]
    return {"change": f"{float(row['change_pct']):+.2f}", "E": f"{float(row['E']):g}",
            "cost": f"{100 * float(row['cost_fraction']):.1f}%", "slices": number_word(len({r["offset"] for r in exact})),
            "tokens": "/".join(f"{t:,}" for t in sorted(tokens)), "window": window,
            "window_change": f"{float(window_row['change_pct']):+.2f}", "swap_E": f"{swap_E:g}",
            "swap_change": f"{swap_change:+.2f}",
            "lo": f"{min(one):.0f}", "hi": f"{max(one):.0f}",
            "aim": TREE_AIM_SPEEDUP, "met": verdicts.aim_met(one, lambda v: v >= TREE_AIM_SPEEDUP)}


def _tree_swap(root):
    """(E, change of test perplexity in %) of the swap cell of tree attention's scorecard card
    (results/scorecard/cards/tree_*.json): the method in the trained softmax model, scored on the
    whole test split, against that model's own perplexity."""
    for rel in sources(root, "results/scorecard/cards/tree_*.json"):
        card = load_json(root, rel)
        cell = next((c for c in card.get("cells", []) if c.get("role") == "swap"), None)
        if card.get("attention") == "tree" and cell:
            return card["attention_params"]["E"], 100 * (cell["test_ppl"] / cell["softmax_test_ppl"] - 1)
    raise SourceMissing("a rendered block needs the swap cell of a tree card in results/scorecard/cards/")


# docs/fastmax.md's two runs of the targets (the grid, then its target cells re-timed)
FASTMAX_TARGET_RUNS = ("results/bench_attention/bench_attention_grid.json",
                       "results/bench_attention/bench_attention_scan_fix.json")


def _fastmax_fields(root):
    """Fastmax p = 1 against SDPA in the full benchmark run (BENCH["full"], its summary) beside the same
    cell in FASTMAX_TARGET_RUNS (their ``targets``, with the target), the worst float64 difference from
    the authors' code (results/authors_fastmax/authors_fastmax_compare.json), and the WikiText-2 test
    perplexities of results/fastmax_gpt_mini_wikitext2 against the softmax run of
    results/gpt_mini_wikitext2 beside softmax's seed spread in results/gpt_mini_baselines."""
    full, _ = bench_run(root, "full")
    T = int(next(k for k in full["summary"] if k.startswith("speedup_vs_sdpa_at_")).rsplit("_", 1)[1])
    entry = next(e for e in full["summary"][f"speedup_vs_sdpa_at_{T}"]
                 if e["method"] == "fastmax1" and e["mode"] == "forward" and e["causal"])
    earlier = [load_json(root, rel)["targets"][f"causal_p1_D{entry['D']}_T{T}_speedup_vs_sdpa"]["forward"]
               for rel in FASTMAX_TARGET_RUNS]
    target = earlier[0]["target"]
    speedups = [entry["speedup"]] + [e["speedup"] for e in earlier]
    authors = load_json(root, "results/authors_fastmax/authors_fastmax_compare.json")
    ppl = {p: load_json(root, f"results/fastmax_gpt_mini_wikitext2/fastmax{p}_test_blocks.json")["value"] for p in (1, 2)}
    made = load_json(root, "results/fastmax_gpt_mini_wikitext2/manifest.json")
    ppl_notes = {older_defaults("fastmax", made.get(f"fastmax{p}_test_blocks", {}).get("date")) for p in (1, 2)}
    softmax = load_json(root, "results/gpt_mini_wikitext2/test_blocks.json")["value"]
    seeds = [r["test_ppl"] for r in read_gpt_mini_runs(find_runs([source(root, "results/gpt_mini_baselines")]))
             if r["attention"] == "softmax" and r["test_ppl"] is not None]
    return {"T": T, "D": entry["D"], "p1": f"{entry['speedup']:.1f}",
            "earlier": join_words(f"{e['speedup']:.1f}x" for e in earlier), "n_earlier": number_word(len(earlier)),
            "target": f"{target:g}", "met": verdicts.aim_met(speedups, lambda v: v >= target),
            "rel": sci(authors["summary"]["worst_same_function_rel"]["float64"]),
            "ppl1": f"{ppl[1]:.2f}", "ppl2": f"{ppl[2]:.2f}", "ppl0": f"{softmax:.2f}",
            "ppl_note": "".join(map(bracketed, sorted(ppl_notes))),
            "d1": f"{ppl[1] - softmax:+.2f}", "d2": f"{ppl[2] - softmax:+.2f}",
            "sd": f"{statistics.stdev(seeds):.2f}", "n_sd": len(seeds)}


def _mlm_row(rows, model, eval_len):
    for r in rows:
        if r["model"] == model and int(r["eval_len"]) == eval_len and r["positions"] == "mask_input":
            return r
    raise SourceMissing(f"a rendered block needs the {model} row at length {eval_len} of "
                        "results/mlm_wikitext2/summary_mean.csv; it has none")


# the parts of a model configuration that the MLM comparison names when its two runs differ in them
# (``verdicts.compared_as``); a differing key outside them is named by itself
CONFIG_PARTS = (("layer pattern", ("layer_scheme", "window")),
                ("blocks", ("block", "n_layer", "n_head", "n_embd", "ffn_linf_norm", "dropout", "mlp")),
                ("schedule", ("lr_schedule", "warmup_iters", "lr_decay_iters", "learning_rate", "min_lr",
                              "weight_decay", "grad_clip", "max_iters", "batch_size")),
                ("positions", ("pos_emb", "relpe_local_positions")))
NOT_COMPARED = ("attention", "attention_params", "out_dir", "seed", "num_threads")  # the attention, and where it ran


def config_differences(a, b):
    """The parts (``CONFIG_PARTS``, then other keys by name) in which the configurations ``a`` and
    ``b`` differ, the attention and where the runs ran (``NOT_COMPARED``) left out."""
    keys = sorted(k for k in a.keys() | b.keys() if k not in NOT_COMPARED and a.get(k) != b.get(k))
    parts = [name for name, members in CONFIG_PARTS if any(k in members for k in keys)]
    named = {k for _, members in CONFIG_PARTS for k in members}
    return parts + [k for k in keys if k not in named]


def _danet_fields(root):
    """results/authors_dense (the op's worst difference), the DANet mini and GPT mini test perplexities
    (test_blocks.json), results/mlm_wikitext2 (summary_mean.csv margins, summary.json's split, the
    softmax BERT mini's window in its seed-0 train.log, and what the seed-0 runs' configurations of
    the two compared models differ in, ``run_config``: the config files their manifests name)."""
    dense = load_json(root, "results/authors_dense/authors_dense_compare.json")
    danet = load_json(root, "results/danet_gpt_mini_wikitext2/test_blocks.json")
    gpt = load_json(root, "results/gpt_mini_wikitext2/test_blocks.json")
    mlm = load_csv(root, "results/mlm_wikitext2/summary_mean.csv")
    split = load_json(root, "results/mlm_wikitext2/summary.json")["settings"]["split"]
    short = min(int(r["eval_len"]) for r in mlm)
    bert, danet_mlm = _mlm_row(mlm, "bert_mini", short), _mlm_row(mlm, "danet_mini", short)
    local = _mlm_row(mlm, "danet_mini_localpos", short)
    runs = {model: f"results/mlm_wikitext2/runs/{model}_seed0" for model in ("bert_mini", "danet_mini_localpos")}
    differences = config_differences(*(run_config(root, run) for run in runs.values()))
    log = run_text(root, runs["bert_mini"], "train.log")
    window = re.search(r"attention=softmax \{'window': (\d+)\}", log)
    if not window:
        raise SourceMissing("a rendered block needs the softmax window in "
                            "results/mlm_wikitext2/runs/bert_mini_seed0/train.log; it has none")
    return {"dense_rel": sci(dense["summary"]["op_max_rel"]), "danet_ppl": f"{danet['value']:.2f}",
            "gpt_ppl": f"{gpt['value']:.2f}", "seeds": danet_mlm["seeds"], "split": split, "L": short,
            "danet_margin": f"{float(danet_mlm['margin_mean']):.2f}",
            "bert_margin": f"{float(bert['margin_mean']):.2f} ± {float(bert['margin_std']):.2f}",
            "bert_seeds": bert["seeds"],
            "window": int(window.group(1)) - 1,  # |i - j| < window: +-(window - 1) keys (attention/softmax.py)
            "local": f"{float(local['margin_mean']):.2f} ± {float(local['margin_std']):.2f}",
            "local_seeds": local["seeds"], "compared": verdicts.compared_as(differences)}


LRA_LISTOPS_SOFTMAX = "results/lra/extra_listops_softmax_cpu_b32_5000"  # softmax at LRA's 5,000 steps x 32 (docs/lra.md)


def _lra_fields(root):
    """The LRA runs results/lra/*_cpu (``lra_chosen``): Text accuracies, whether they rank (``verdicts.ranking``
    of each attention's Text runs at its chosen run's budget) and the standard errors of
    the DANet - softmax difference (test-set sampling only: binomial, one seed each), ListOps (with its
    steps x batch) and Pathfinder against chance (``at_chance``); softmax's ListOps run at LRA's steps
    x batch (LRA_LISTOPS_SOFTMAX)."""
    chosen = lra_chosen(root, "results/lra/*_cpu")
    text = {label: run for (label, task), run in chosen.items() if task == "text"}
    every = read_lra_runs(find_runs([os.path.join(root, p) for p in run_sources(root, "results/lra/*_cpu")]))
    seeds = [[r["test_accuracy"] for r in every if (r["label"], r["task"]) == (label, "text")
              and r["examples_seen"] == run["examples_seen"]] for label, run in sorted(text.items())]

    def pct(label, task="text"):
        return f"{100 * chosen[(label, task)]['test_accuracy']:.1f}"

    a, b = text["dense"], text["softmax"]
    se = math.sqrt(sum(r["test_accuracy"] * (1 - r["test_accuracy"]) / r["test_examples"] for r in (a, b)))
    listops = [label for label in ORDER if (label, "listops") in chosen]
    learned = [label for label in listops if not at_chance(chosen[(label, "listops")])]
    chance = [label for label in listops if at_chance(chosen[(label, "listops")])]
    names = {"dense": "DANet", "fastmax1": "fastmax p = 1", "fastmax2": "fastmax p = 2"}
    listops_text = ", ".join(f"{names.get(label, label)} {pct(label, 'listops')}%" for label in learned)
    majority = f"{100 * chosen[(listops[0], 'listops')]['majority']:.1f}"
    listops_text = (f"{listops_text} against a {majority}% majority" if learned else f"a {majority}% majority") + (
        f", {join_words(names.get(label, label) for label in chance)} at chance" if chance else "")
    pathfinder = [label for label in ORDER if (label, "pathfinder") in chosen]
    at = [label for label in pathfinder if at_chance(chosen[(label, "pathfinder")])]
    pathfinder_text = (f"at chance for all {number_word(len(pathfinder))}" if len(at) == len(pathfinder) else
                       f"{join_words(names.get(label, label) for label in at)} at chance" if at else "above chance")
    fastmax_notes = {text[label]["older_defaults"] for label in ("fastmax1", "fastmax2")}
    def budget(task):
        budgets = {(r["iters"], r["examples_seen"] // r["iters"]) for (label, t), r in chosen.items()
                   if t == task and r["iters"]}
        if len(budgets) != 1:
            raise SourceMissing(f"a rendered block needs one steps x batch for the {task} runs of results/lra/*_cpu")
        (steps, batch), = budgets
        return f"{steps:,} steps x {batch}"

    long_runs = read_lra_runs(find_runs([os.path.join(root, p) for p in run_sources(root, LRA_LISTOPS_SOFTMAX)]))
    if len(long_runs) != 1 or long_runs[0]["label"] != "softmax" or long_runs[0]["task"] != "listops":
        raise SourceMissing(f"a rendered block needs one softmax ListOps run at {LRA_LISTOPS_SOFTMAX}")
    long = long_runs[0]
    return {"dense": pct("dense"), "f1": pct("fastmax1"), "f2": pct("fastmax2"), "softmax": pct("softmax"),
            "listops_budget": budget("listops"), "pathfinder_budget": budget("pathfinder"),
            "x_steps": f"{long['iters']:,}",
            "x_batch": long["examples_seen"] // long["iters"], "x_acc": f"{100 * long['test_accuracy']:.1f}",
            "fastmax_note": "".join(map(bracketed, sorted(fastmax_notes))),  # both runs are fastmax's: one note
            "n_se": f"{(a['test_accuracy'] - b['test_accuracy']) / se:.0f}", "reviews": f"{int(a['test_examples']):,}",
            "listops": listops_text, "pathfinder": pathfinder_text, "ranking": verdicts.ranking(seeds)}


def _baselines_fields(root):
    """Test perplexities of the runs in results/gpt_mini_baselines (softmax and Longformer: mean +- sd
    over their seeds; a one-seed run made under an older default of its method says so), and whether
    linear, Performer, BigBird and fastmax p = 1 rank (``verdicts.ranking`` of their seeds)."""
    runs = read_gpt_mini_runs(find_runs([source(root, "results/gpt_mini_baselines")]))
    ppl, notes = {}, {}
    for r in runs:
        if r["test_ppl"] is not None:
            ppl.setdefault(r["attention"], []).append(r["test_ppl"])
            notes[r["attention"]] = notes.get(r["attention"]) or r["older_defaults"]
    fields = {a: f"{ppl[a][0]:.2f}{bracketed(notes[a])}" for a in ("linear", "performer", "bigbird", "fastmax1", "dense", "danet")}
    fields["ranking"] = verdicts.ranking([ppl[a] for a in ("linear", "performer", "bigbird", "fastmax1")])
    for a in ("softmax", "longformer"):
        fields.update({a: f"{statistics.mean(ppl[a]):.2f} +- {statistics.stdev(ppl[a]):.2f}", f"{a}_n": len(ppl[a])})
    return fields


# The recall sweep's protocol (scripts/sweeps/recall.sh's defaults): its attentions and reference cell.
RECALL_SWEEP_ATTENTIONS = ("softmax", "fastmax1", "fastmax2", "dense", "linear", "performer", "longformer", "bigbird")
RECALL_REFERENCE_CELL = (256, 16, 64)
RECALL_SMALL_CELL = (64, 4)  # length, pairs of the small cell (every width)
RECALL_GPT2_RUN = "results/recall/ablation_64_4/gpt"  # softmax with GPT-2's initialisation (docs/recall.md's ablation)


def _recall_noshift_fields(root):
    """The runs without a token shift in results/recall/summary.csv at the reference cell: test accuracy
    (mean ± sd in %, seeds at the picked rate) of each attention run there, how many rates were tried,
    the sweep's attentions not yet run; softmax with GPT-2's initialisation against the 1/N plateau
    (``verdicts.plateau_words`` of RECALL_GPT2_RUN). Raises SourceMissing when no such run exists."""
    runs = read_recall_summary(root, "results/recall/summary.csv")
    cell = (*RECALL_REFERENCE_CELL, False)
    present = [a for a in recall_order({r["attention"] for r in runs}) if picked_runs(runs, a, cell)]
    if not present:
        raise SourceMissing("a rendered block needs runs without a token shift at "
                            f"{cell_label(*RECALL_REFERENCE_CELL)} in results/recall/summary.csv")
    parts = []
    for a in present:
        values = [r["test_accuracy"] for r in picked_runs(runs, a, cell)]
        seeds = f"{len(values)} seed{'s' if len(values) > 1 else ''}"
        per_seed = " / ".join(f"{100 * v:.1f}" for v in values)
        parts.append(f"{display_name(a)} {percent(values)}% ({seeds}: {per_seed}; rate {rate(runs_rate(runs, a, cell))})")
    missing = [NAMES.get(a, a) for a in RECALL_SWEEP_ATTENTIONS if a not in present]
    counts = {len({r["learning_rate"] for r in runs if cell_key(r) == (a, *cell)}) for a in present}
    gpt2 = load_run(root, RECALL_GPT2_RUN).final_metrics or {}
    if gpt2.get("config", {}).get("attention", "softmax") != "softmax" or "test_accuracy" not in gpt2:
        raise SourceMissing(f"a rendered block needs the softmax run {RECALL_GPT2_RUN} with its test accuracy")
    return {"T": cell[0], "N": cell[1], "W": cell[2], "methods": "; ".join(parts),
            "missing": f"; not run yet: {join_words(missing)}" if missing else "",
            "rates": "-".join(map(str, sorted({min(counts), max(counts)}))),
            "gpt2_init": verdicts.plateau_words(gpt2["test_accuracy"], gpt2["config"]["recall_pairs"])}


def runs_rate(runs, attention, cell):
    """The learning rate of ``attention``'s picked runs in ``cell`` (T, N, width, token_shift)."""
    return picked_runs(runs, attention, cell)[0]["learning_rate"]


def _recall_fields(root):
    """results/recall/summary.csv (picked runs of each attention x cell), the reference cell (the runs
    in results/recall/sweep_256_16): each attention's mean ± sd, or its seeds one by one where they
    are ``verdicts.bimodal``."""
    runs = read_recall_summary(root, "results/recall/summary.csv")
    reference = read_recall_runs(find_runs([source(root, "results/recall/sweep_256_16")]))
    ref = {cell_key(r)[1:] for r in reference}
    if len(ref) != 1:
        raise SourceMissing("a rendered block needs the runs of one cell under results/recall/sweep_256_16")
    cell = ref.pop()
    picked = {a: picked_runs(runs, a, cell) for a in recall_order({r["attention"] for r in runs})}
    acc = {a: [r["test_accuracy"] for r in rs] for a, rs in picked.items() if rs}

    def note(a):
        lr = one_rate(runs, a, cell)
        return f" (one rate, {rate(lr)})" if lr is not None else ""

    small = sorted({k[1:] for k in map(cell_key, runs) if k[1:3] == RECALL_SMALL_CELL and k[4]})
    small_means = [statistics.mean(r["test_accuracy"] for r in picked_runs(runs, a, c))
                   for a in recall_order({r["attention"] for r in runs}) for c in small if picked_runs(runs, a, c)]
    seeds = {len(v) for v in acc.values()}
    return {
        "seeds": f"{min(seeds)} seeds each" if len(seeds) == 1 else f"{min(seeds)}-{max(seeds)} seeds",
        **{f"acc_{a}": (" / ".join(f"{100 * x:.1f}" for x in v) if verdicts.bimodal(v) else percent(v))
           + f"%{note(a)}" for a, v in acc.items()},
        **{f"mean_{a}": f"{100 * statistics.mean(v):.1f}%{note(a)}" for a, v in acc.items()},
        "window": next(r["attention_params"]["window"] for r in reference if r["attention"] == "longformer"),
        "sT": small[0][0], "sN": small[0][1],
        "lo": f"{100 * min(small_means):.0f}", "hi": f"{100 * max(small_means):.0f}"}


def fastmax_setting(params, head_dim):
    """What fastmax computes with the attention parameters ``params`` at ``head_dim``: (p,
    normalization, temperature, lim), the temperature resolved as the method resolves it."""
    import attention

    keys = ("p", "normalization", "temperature", "lim")
    module = attention.attention_class("fastmax")(**{k: v for k, v in params.items() if k in keys})
    return module.p, module.normalization, module.temperature_for(head_dim), module.lim


def fastmax_default_words(params, head_dim):
    """``verdicts.default_words`` of fastmax with ``params`` against its default today and the one
    before it changed (the ``key="value"`` words of its ``defaults_before``), at ``head_dim``."""
    import attention

    before = attention.attention_class("fastmax").defaults_before
    old = {}
    for key, value in re.findall(r'(\w+)=("[^"]*"|[\w.]+)', before or ""):
        try:
            old[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            old[key] = value
    p = {"p": params.get("p", 2)}
    return verdicts.default_words(fastmax_setting(params, head_dim), fastmax_setting(p, head_dim),
                                  fastmax_setting({**p, **old}, head_dim) if before else None)


FASTMAX_WIDE_SETTINGS = ("paper_sqrtD", "none_8sqrtD", "max_norm_2")  # the settings that allow |s| > 1 (docs/recall.md)


def _fastmax_norm_fields(root):
    """The runs of results/recall/fastmax_norm/<setting> (paper_D, paper_sqrtD, max_norm_1), test
    accuracy at the picked rate, and which setting is fastmax's default or its old one
    (``fastmax_default_words``)."""
    folder = "results/recall/fastmax_norm"

    def setting(name, attention):
        runs = mark_picked(read_recall_runs(find_runs([source(root, f"{folder}/{name}")])))
        rs = [r for r in runs if r["attention"].split()[0] == attention and r["picked"]]
        if not rs:
            raise SourceMissing(f"a rendered block needs {attention} runs under {folder}/{name}; there are none")
        return rs

    used = {name: setting(*name.split(":")) for name in ("paper_D:fastmax1", "max_norm_1:fastmax1",
                                                          "paper_sqrtD:fastmax2", "max_norm_1:fastmax2")}
    p1_paper = used["paper_D:fastmax1"]

    def is_default(name, before="", after=""):
        words = fastmax_default_words(used[name][0]["attention_params"], W // H)
        return f"{before}{words}{after}" if words else ""

    every = [r for rs in used.values() for r in rs]
    heads = {open_run(os.path.dirname(r["path"])).final_metrics["config"]["n_head"] for r in every}
    shifts, rates = {r["token_shift"] for r in every}, {r["learning_rate"] for r in every}
    if len(heads) != 1 or len(shifts) != 1:
        raise RenderError(f"the runs under {folder} differ in heads ({heads}) or token shift ({shifts})")
    T, N, W = cell_key(p1_paper[0])[1:4]
    H = heads.pop()
    wide = [r["test_accuracy"] for name in FASTMAX_WIDE_SETTINGS for r in setting(name, "fastmax1")]
    return {"T": T, "N": N, "W": W, "seeds": len(p1_paper), "H": H, "hd": W // H,
            "n_wide": number_word(len(FASTMAX_WIDE_SETTINGS)), "p1_wide": f"{100 * max(wide):.1f}",
            "shift": "with the token shift" if shifts.pop() else "no token shift",
            "rates": "rate " + join_words(rate(x) for x in sorted(rates)) + (" for every setting" if len(rates) == 1 else ""),
            "p1_paper": percent([r["test_accuracy"] for r in used["paper_D:fastmax1"]]),
            "p1_max": percent([r["test_accuracy"] for r in used["max_norm_1:fastmax1"]]),
            "p2_paper": percent([r["test_accuracy"] for r in used["paper_sqrtD:fastmax2"]]),
            "p2_max": percent([r["test_accuracy"] for r in used["max_norm_1:fastmax2"]]),
            "p1_max_is": is_default("max_norm_1:fastmax1", after=" "),
            "p2_paper_is": is_default("paper_sqrtD:fastmax2", before=": ")}


def _bench_fields(root):
    """The T range of the full benchmark run, fastmax p = 2 against SDPA over FASTMAX2_RUNS (median
    and range) and the dense aim in the re-run (BENCH)."""
    full, _ = bench_run(root, "full")
    rerun, _ = bench_run(root, "rerun")
    runs, D, T = fastmax2_runs(root)
    fwd, bwd = [r[2] for r in runs], [r[3] for r in runs]
    (fmed, frange), (bmed, brange) = median_range(fwd), median_range(bwd)
    _, (t1, t0), _ = find_aim(rerun["summary"], DENSE_AIM)
    dense, target = dense_ratio(rerun)
    Ts = [int(t) for t in str(full["settings"]["T"]).split(",")]
    fast_target = find_aim(full["summary"], FASTMAX_AIM)[2]["forward"]["target"]
    return {"tmin": min(Ts), "tmax": max(Ts), "T": T, "n": len(runs), "fmed": fmed, "frange": frange,
            "bmed": bmed, "brange": brange,
            "verdict": verdicts.reliably_faster({"forward": fwd, "forward + backward": bwd}, fast_target, short=True),
            "dense": f"{dense:.2f}", "t0": t0, "t1": t1, "target": f"{target:g}",
            "met": verdicts.aim_met([dense], lambda v: v <= target, cause=": fresh pages and memory bandwidth")}


# (experiment template, result template, page, fields function): every {field} of a row is computed
# by its function from files under results/ (the function names them)
README_ROWS = [
    ("GPT mini on WikiText-2 ({params} parameters, {minutes} min)",
     "test perplexity {ppl} (`{protocol}`); uses about {context} tokens of context",
     "[gpt_mini_wikitext2](docs/gpt_mini_wikitext2.md)", _gpt_mini_fields),
    ("Tree attention swapped into the GPT mini",
     "{change}% perplexity at E = {E} ({cost} of the inner products) on the sweep's {slices} test slices ({tokens} "
     "tokens scored each), where a {window}-key sliding window gives {window_change}%; the leaderboard's swap cell "
     "(E = {swap_E}, the whole test split) {swap_change}%; CPU kernel {lo}-{hi}x the authors' NumPy code on one "
     "thread (aim {aim}x {met})",
     "[tree_attention](docs/tree_attention.md)", _tree_fields),
    ("Fastmax vs SDPA and the authors' code",
     "causal T = {T}, D = {D}, forward: p = 1 {p1}x faster than SDPA in the latest full benchmark run, {earlier} in "
     "the {n_earlier} earlier runs of the doc (aim ≥ {target}x: {met}); matches the authors' code "
     "to {rel}; WikiText-2 test perplexity p = 1 {ppl1}, p = 2 {ppl2}{ppl_note} vs softmax {ppl0}, one seed each: "
     "{d1} and {d2}, beside softmax's seed sd of {sd} ({n_sd} seeds, the baselines row)", "[fastmax](docs/fastmax.md)", _fastmax_fields),
    ("DANet / DenseAttention",
     "matches the authors' code ({dense_rel}); causal DANet mini GPT {danet_ppl} vs softmax {gpt_ppl}; MLM "
     "({split}, L = {L}): [MASK]-input margin over a context-free predictor {local} nats for the DANet mini "
     "(window-local RelPE positions, {local_seeds} seeds; {danet_margin} with global ones) vs {bert_margin} for a "
     "softmax BERT mini (±{window} window, {bert_seeds} seeds): {compared}",
     "[dense_attention](docs/dense_attention.md), [mlm](docs/mlm.md)", _danet_fields),
    ("Long Range Arena, CPU sizes",
     "Text: DANet {dense}%, fastmax {f1} / {f2}%{fastmax_note}, softmax {softmax}% ({dense} vs {softmax} is about "
     "{n_se} standard errors of test-set sampling on {reviews} reviews, seed variance not counted; {ranking}); "
     "ListOps at the CPU budget ({listops_budget}): {listops}, while softmax reaches {x_acc}% at LRA's {x_steps} "
     "steps x {x_batch}; Pathfinder at the CPU budget ({pathfinder_budget}) {pathfinder}",
     "[lra](docs/lra.md)", _lra_fields),
    ("Baselines of the survey",
     "implemented and tested, attention maps of every method; mini GPT on WikiText-2 at one budget, test "
     "perplexity: softmax {softmax} ({softmax_n} seeds), Longformer {longformer} ({longformer_n} seeds), linear "
     "{linear}, Performer {performer}, BigBird {bigbird}, fastmax p = 1 {fastmax1} ({ranking}), "
     "dense {dense}, the DANet mini {danet}; LRA Text: the leaderboard below",
     "[baselines](docs/baselines.md)", _baselines_fields),
    ("Associative recall (MQAR), {T} tokens, {N} pairs, width {W}, no token shift (the reference setting)",
     "test accuracy, rate picked from {rates} on seed 0: {methods}{missing}. An attention-only model on a CPU "
     "budget, not Zoology's (with GPT-2's initialisation softmax {gpt2_init}: ablation in the doc)",
     "[recall](docs/recall.md)", _recall_noshift_fields),
    ("Associative recall, the same cell with a token shift (the ablation layer, the sweeps before 2026-11-27)",
     "{seeds}: fastmax p = 2 {acc_fastmax2}, softmax {acc_softmax}, BigBird {acc_bigbird}, DANet {acc_dense}, "
     "linear {acc_linear}, fastmax p = 1 {acc_fastmax1}, Performer {acc_performer}, a {window}-key "
     "Longformer {mean_longformer}; at {sT} tokens / {sN} pairs every method {lo}-{hi}%", "[recall](docs/recall.md)", _recall_fields),
    ("Fastmax normalization on recall ({T}/{N}, width {W} as {H} heads of {hd}, {shift}, {seeds} seeds, {rates})",
     "p = 1: `paper` at temperature D {p1_paper}% vs {p1_max_is}`max_norm` {p1_max}%, the {n_wide} settings "
     "allowing \\|s\\| > 1 at most {p1_wide}% in any seed; p = 2: `paper` at sqrt(D) {p2_paper}% vs "
     "{p2_max}%{p2_paper_is}",
     "[recall](docs/recall.md#fastmax-normalization-with-the-score-scale-controlled-2026-11-26)",
     _fastmax_norm_fields),
    ("Benchmark of every attention",
     "every method, T = {tmin} ... {tmax}, against SDPA and this CPU's matmul peak; causal fastmax p = 2 against "
     "SDPA at T = {T}: forward {fmed}x (median of {n} runs, {frange}x), with backward {bmed}x ({brange}x), "
     "{verdict}; dense causal time per token {dense}x from T = {t0} to {t1} (aim {target}x {met})",
     "[benchmark](docs/benchmark.md)", _bench_fields),
]


def readme_row(root, row):
    """[experiment, result, page] of one README_ROWS entry: its templates filled with the fields its
    function computes from files under results/. Raises SourceMissing when a file is absent."""
    experiment, result, page, fields = row
    try:
        values = fields(root)
    except (KeyError, IndexError, StopIteration) as e:
        raise SourceMissing(f"a rendered block (README row {experiment.split(' (')[0]!r}) needs an entry its "
                            f"results files lack: {e!r}") from None
    return [experiment.format(**values), result.format(**values), page]


def render_readme_results(root):
    """README.md's Results table: a row per README_ROWS entry (``readme_row``). Raises SourceMissing
    when a file is absent."""
    return markdown_table(["experiment", "result", "page"], [readme_row(root, row) for row in README_ROWS])


RENDERERS = {"readme_results": render_readme_results}
