"""README.md's Results table: one short line per experiment, a row per ``README_ROWS`` entry, its
experiment and result templates filled with fields that the row's function computes from files
under ``results/`` (it names them); the detail, the caveats and the budgets stay in the linked doc.
A template types no result and no verdict: every measured number is a field, and every verdict
word a field that a rule of ``verdicts`` computes from the numbers (which settings a row
compares, and its caveats that do not depend on them, stay in the template). Where a testbed has
a scorecard card, the row reads its number from the card (softmax's WikiText-2 seeds, its recall
cells), so that the README has one softmax number per testbed, the leaderboard's.

Renderers (``RENDERERS``):

- ``readme_results``: README.md's Results table.
"""
import ast
import os
import re
import statistics

from scripts.analysis.published import verdicts
from scripts.analysis.published.benchmark import FASTMAX_AIM, bench_run, find_aim, fastmax2_runs
from scripts.analysis.published.formatting import join_words, markdown_table, median_range, number_word, sci
from scripts.analysis.published.generation import load_decode, milliseconds
from scripts.analysis.published.loading import (RenderError, SourceMissing, load_csv, load_json, read_text, run_config,
                                                run_sources, sources)
from scripts.analysis.published.lra import ORDER, at_chance, lra_chosen, read_lra_runs
from scripts.analysis.published.tree import TREE_AIM_SPEEDUP, tree_speedups
from scripts.analysis.runs import find_runs

SOFTMAX_CARD = "results/scorecard/cards/softmax_full.json"  # the leaderboard's softmax row (its full-tier card)


def _softmax_card(root):
    """The softmax card of the scorecard (SOFTMAX_CARD): the README's softmax numbers are the leaderboard's."""
    return load_json(root, SOFTMAX_CARD)


def _lm_fields(root):
    """Softmax's WikiText-2 cells of its scorecard card (SOFTMAX_CARD: test perplexity, mean ± sd over
    its seeds, and the budget its runs trained at), and the mini GPT's parameter count
    (results/gpt_mini_wikitext2/train_stdout.log)."""
    log = read_text(root, "results/gpt_mini_wikitext2/train_stdout.log")
    params = re.search(r"model: (\S+) parameters", log)
    if not params:
        raise SourceMissing("a rendered block needs the parameter count (model: ... parameters) in "
                            "results/gpt_mini_wikitext2/train_stdout.log; it has none")
    cells = [c for c in _softmax_card(root)["cells"] if c["role"] == "wikitext2"]
    if not cells:
        raise SourceMissing(f"a rendered block needs the WikiText-2 cells of {SOFTMAX_CARD}; it has none")
    values = [c["test_ppl"] for c in cells]
    budget = cells[0]["budget"]
    ppl = (f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1 else f"{values[0]:.2f}")
    return {"params": params.group(1), "ppl": ppl, "seeds": f"{len(values)} seeds" if len(values) > 1 else "one seed",
            "steps": f"{budget['steps']:,}", "tokens": f"{budget['tokens_per_step']:,}"}


def _tree_fields(root):
    """The swap cell of tree attention's scorecard card (``_tree_swap``: the whole test split) and the
    kernel's speed-ups on one thread over the authors' code (TREE_BENCH) against the aim."""
    swap_E, swap_change = _tree_swap(root)
    one = [s[1] for s in tree_speedups(root)[0] if s[0] == 1]
    return {"swap_E": f"{swap_E:g}", "swap_change": f"{swap_change:+.2f}", "lo": f"{min(one):.0f}",
            "hi": f"{max(one):.0f}", "aim": TREE_AIM_SPEEDUP,
            "met": verdicts.aim_met(one, lambda v: v >= TREE_AIM_SPEEDUP)}


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
    """Fastmax p = 1 against SDPA in the full benchmark run (BENCH["full"], its summary), the aim met
    over it and the same cell in FASTMAX_TARGET_RUNS (their ``targets``, with the target), and the
    worst float64 difference from the authors' code (results/authors_fastmax/authors_fastmax_compare.json)."""
    full, _ = bench_run(root, "full")
    T = int(next(k for k in full["summary"] if k.startswith("speedup_vs_sdpa_at_")).rsplit("_", 1)[1])
    entry = next(e for e in full["summary"][f"speedup_vs_sdpa_at_{T}"]
                 if e["method"] == "fastmax1" and e["mode"] == "forward" and e["causal"])
    earlier = [load_json(root, rel)["targets"][f"causal_p1_D{entry['D']}_T{T}_speedup_vs_sdpa"]["forward"]
               for rel in FASTMAX_TARGET_RUNS]
    target = earlier[0]["target"]
    speedups = [entry["speedup"]] + [e["speedup"] for e in earlier]
    authors = load_json(root, "results/authors_fastmax/authors_fastmax_compare.json")
    return {"T": f"{T:,}", "D": entry["D"], "p1": f"{entry['speedup']:.1f}", "target": f"{target:g}",
            "met": verdicts.aim_met(speedups, lambda v: v >= target),
            "rel": sci(authors["summary"]["worst_same_function_rel"]["float64"])}


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
    """results/authors_dense (the op's worst difference) and results/mlm_wikitext2 (summary_mean.csv's
    [MASK]-input margins of the DANet mini with window-local positions and of the softmax BERT mini,
    and what the seed-0 runs' configurations of the two compared models differ in, ``run_config``:
    the config files their manifests name)."""
    dense = load_json(root, "results/authors_dense/authors_dense_compare.json")
    mlm = load_csv(root, "results/mlm_wikitext2/summary_mean.csv")
    short = min(int(r["eval_len"]) for r in mlm)
    bert, local = _mlm_row(mlm, "bert_mini", short), _mlm_row(mlm, "danet_mini_localpos", short)
    runs = [f"results/mlm_wikitext2/runs/{model}_seed0" for model in ("bert_mini", "danet_mini_localpos")]
    differences = config_differences(*(run_config(root, run) for run in runs))
    return {"dense_rel": sci(dense["summary"]["op_max_rel"]), "L": short,
            "local": f"{float(local['margin_mean']):.2f} ± {float(local['margin_std']):.2f}",
            "bert": f"{float(bert['margin_mean']):.2f} ± {float(bert['margin_std']):.2f}",
            "seeds": join_words(sorted({local["seeds"], bert["seeds"]})), "compared": verdicts.compared_as(differences)}


LRA_LISTOPS_SOFTMAX = "results/lra/extra_listops_softmax_cpu_b32_5000"  # softmax at LRA's 5,000 steps x 32 (docs/lra.md)


def _lra_fields(root):
    """The ListOps and Pathfinder runs of results/lra/*_cpu (``lra_chosen``) against chance
    (``at_chance``), with their steps x batch, and softmax's ListOps run at LRA's steps x batch
    (LRA_LISTOPS_SOFTMAX). (Text is the leaderboard's column.)"""
    chosen = lra_chosen(root, "results/lra/*_cpu")

    def pct(label, task):
        return f"{100 * chosen[(label, task)]['test_accuracy']:.1f}"

    names = {"dense": "DANet", "fastmax1": "fastmax p = 1", "fastmax2": "fastmax p = 2"}
    listops = [label for label in ORDER if (label, "listops") in chosen]
    learned = [label for label in listops if not at_chance(chosen[(label, "listops")])]
    chance = [label for label in listops if at_chance(chosen[(label, "listops")])]
    listops_text = ", ".join(f"{names.get(label, label)} {pct(label, 'listops')}%" for label in learned)
    majority = f"{100 * chosen[(listops[0], 'listops')]['majority']:.1f}"
    listops_text = (f"{listops_text} against a {majority}% majority" if learned else f"a {majority}% majority") + (
        f", {join_words(names.get(label, label) for label in chance)} at chance" if chance else "")
    pathfinder = [label for label in ORDER if (label, "pathfinder") in chosen]
    at = [label for label in pathfinder if at_chance(chosen[(label, "pathfinder")])]
    pathfinder_text = (f"at chance for all {number_word(len(pathfinder))}" if len(at) == len(pathfinder) else
                       f"{join_words(names.get(label, label) for label in at)} at chance" if at else "above chance")

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
    return {"listops_budget": budget("listops"), "pathfinder_budget": budget("pathfinder"),
            "x_budget": f"{long['iters']:,} x {long['examples_seen'] // long['iters']}",
            "x_acc": f"{100 * long['test_accuracy']:.1f}", "listops": listops_text, "pathfinder": pathfinder_text}


def _baselines_fields(root):
    """How many attentions have a full-tier card on the scorecard (results/scorecard/cards/*_full.json)."""
    cards = sources(root, "results/scorecard/cards/*_full.json")
    if not cards:
        raise SourceMissing("a rendered block needs the full-tier cards results/scorecard/cards/*_full.json")
    return {"n": len(cards)}


def _recall_fields(root):
    """Softmax's recall cells of its scorecard card (SOFTMAX_CARD; ``scripts.scorecard.leaderboard.
    recall_column``: the newest protocol, the reported seeds and the check seeds): seeds solved per
    cell (``verdicts.solved_words``), the protocol and its step budget."""
    from scripts.scorecard import testbeds as tb
    from scripts.scorecard.leaderboard import RECALL_COLUMNS, recall_column

    card = _softmax_card(root)
    cells, versions, steps = [], set(), set()
    for role, _, (T, N, _) in RECALL_COLUMNS:
        column = recall_column(card, role)
        if not column or not column["values"]:
            raise SourceMissing(f"a rendered block needs softmax's {T}/{N} recall cells in {SOFTMAX_CARD}")
        check = [v for _, v in column["check"]]
        cells.append(f"{T}/{N} {verdicts.solved_words(column['values'], tb.RECALL_SOLVED)}"
                     + (f" (check seeds: {verdicts.solved_words(check, tb.RECALL_SOLVED)})" if check else ""))
        versions.add(column["version"])
        steps |= {b["max_steps"] for b in column["budgets"] if b.get("max_steps")}
    if len(versions) != 1 or len(steps) != 1:
        raise RenderError(f"softmax's recall cells in {SOFTMAX_CARD} differ in protocol ({versions}) or steps ({steps})")
    return {"cells": "; ".join(cells), "version": versions.pop(), "steps": f"{steps.pop():,}"}


def _bench_fields(root):
    """The T range of the full benchmark run (BENCH) and causal fastmax p = 2 against SDPA over
    FASTMAX2_RUNS (the forward speed-ups' median and range, ``verdicts.reliably_faster`` of both calls)."""
    full, _ = bench_run(root, "full")
    runs, D, T = fastmax2_runs(root)
    fwd, bwd = [r[2] for r in runs], [r[3] for r in runs]
    fmed, frange = median_range(fwd)
    Ts = [int(t) for t in str(full["settings"]["T"]).split(",")]
    fast_target = find_aim(full["summary"], FASTMAX_AIM)[2]["forward"]["target"]
    return {"tmin": f"{min(Ts):,}", "tmax": f"{max(Ts):,}", "T": f"{T:,}", "n": len(runs), "fmed": fmed,
            "frange": frange,
            "verdict": verdicts.reliably_faster({"forward": fwd, "forward + backward": bwd}, fast_target, short=True)}


DECODE_RUN = "results/decode/2026-11-29_intel-xeon/decode.json"  # the decode benchmark the README quotes
QUALITY_RUN = "results/decode_quality/wikitext2_gpt_mini/quality.json"


def _generation_fields(root):
    """Tree attention's decode step (E = 0.5, the benchmark's layer suite) against softmax's KV cache
    at the largest context of DECODE_RUN, and the quality study's agreement with exact attention
    (QUALITY_RUN: tree at E = 0.5 with its default sampler, the 32-key window)."""
    import attention

    bench = load_decode(root, DECODE_RUN)
    rows = [r for r in bench["rows"] if r["suite"] == "layer" and r["seconds_per_token"] is not None]
    L = max(r["context"] for r in rows if r["method"] == "tree")
    tree = next(r for r in rows if r["method"] == "tree" and r["context"] == L)
    kv = next(r for r in rows if r["method"] == "softmax" and r["context"] == L)
    quality = load_json(root, QUALITY_RUN)
    sampler = attention.accepted_params("tree")["sampler"]
    by = {m["method"]: m for m in quality["methods"]}
    tree_q = by[f"tree:E=0.5,sampler={sampler}"] if f"tree:E=0.5,sampler={sampler}" in by else by["tree:E=0.5"]
    window = next(m for m in quality["methods"] if m["name"] == "softmax" and m["params"].get("window"))
    return {"L": f"{L:,}", "tree_ms": milliseconds(tree["seconds_per_token"]), "kv_ms": milliseconds(kv["seconds_per_token"]),
            "ips": f"{tree['inner_products_per_token']:.0f}", "tree_agree": f"{100 * tree_q['agreement']['mean']:.1f}",
            "window": window["params"]["window"], "window_agree": f"{100 * window['agreement']['mean']:.1f}",
            "prompts": quality["settings"]["prompts"], "steps": quality["settings"]["steps"]}


# (experiment template, result template, page, fields function): every {field} of a row is computed
# by its function from files under results/ (the function names them); one short line each
README_ROWS = [
    ("GPT mini on WikiText-2 ({params} parameters)",
     "softmax test perplexity {ppl} ({seeds}, {steps} steps of {tokens} tokens); every attention's: the leaderboard",
     "[gpt_mini_wikitext2](docs/gpt_mini_wikitext2.md)", _lm_fields),
    ("Baselines of the survey", "implemented and tested, attention maps of each; the leaderboard's {n} attentions",
     "[baselines](docs/baselines.md)", _baselines_fields),
    ("Tree attention (inference only)",
     "swapped into the trained softmax GPT mini: test perplexity {swap_change}% (E = {swap_E}, whole test split); "
     "CPU kernel {lo}-{hi}x the authors' NumPy code (aim {aim}x {met})",
     "[tree_attention](docs/tree_attention.md)", _tree_fields),
    ("Fastmax",
     "p = 1, causal T = {T}, D = {D}, forward: {p1}x faster than SDPA in the latest benchmark run (aim ≥ {target}x: {met}); "
     "matches the authors' code to {rel}", "[fastmax](docs/fastmax.md)", _fastmax_fields),
    ("DenseAttention (DANet)",
     "matches the authors' code to {dense_rel}; MLM margin over a context-free predictor (L = {L}, {seeds} seeds): "
     "DANet mini {local} nats vs softmax BERT mini {bert}, {compared}",
     "[dense_attention](docs/dense_attention.md), [mlm](docs/mlm.md)", _danet_fields),
    ("Associative recall (MQAR; a CPU-budget model, not Zoology's)",
     "softmax, protocol {version} ({steps} steps): {cells}; every attention's: the leaderboard",
     "[recall](docs/recall.md)", _recall_fields),
    ("Long Range Arena, CPU sizes",
     "at the CPU budget, ListOps ({listops_budget}): {listops} (softmax {x_acc}% at LRA's {x_budget}); "
     "Pathfinder ({pathfinder_budget}) {pathfinder}; Text: the leaderboard", "[lra](docs/lra.md)", _lra_fields),
    ("Generation (`sample.py`, a decode state for every causal attention)",
     "one layer's decode step at a {L}-token context: tree attention (E = 0.5) {tree_ms} ms per token ({ips} inner "
     "products per head), softmax's KV cache {kv_ms} ms; swapped into a trained softmax GPT mini, tree attention picks "
     "exact attention's next token in {tree_agree}% of {steps} greedy steps x {prompts} prompts, a {window}-key "
     "window in {window_agree}%",
     "[generation](docs/generation.md)", _generation_fields),
    ("Benchmark of every attention",
     "T = {tmin} ... {tmax}; causal fastmax p = 2 at T = {T}, forward: {fmed}x SDPA's speed (median of {n} runs, "
     "{frange}x), {verdict}", "[benchmark](docs/benchmark.md)", _bench_fields),
]


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
