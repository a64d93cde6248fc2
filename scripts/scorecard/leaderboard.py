"""The scorecard's leaderboard (a library: ``python -m scripts.scorecard`` writes it, ``python -m
scripts.analysis.publish`` renders it into the README): one row per attention and tier from the
cards under ``<results>/cards`` (``scripts/scorecard/__main__.py`` says what a card holds); a
user's folder merges the committed cards (``PUBLISHED``) with its own (``read_cards``).

Recall (issue 57): a seed "solves" a cell at test accuracy ``RECALL_SOLVED`` or more, so a cell
reads "solved in k of n" beside the mean ± sd and the per-seed values of its reported seeds
(protocol 2: seeds 1-3, the rate picked on seed 0; protocol 1, the dated cells: seeds 0-2, seed 0
also the picking seed); "separable from softmax" only where the range (min..max) of the method's
seeds and softmax's do not overlap, both with two seeds or more under the same protocol. Mean ± sd
is no test for seeds that either solve the task or stay on the 1/N plateau. Softmax's cells add
its check seeds. These words, and "≈ 1" below, are the rules of ``scripts.analysis.published.verdicts``;
the CPU names and the papers' numbers come from that package's ``formatting`` and ``papers`` (its
base modules: the leaderboard imports no renderer).

Speed: the time of one causal forward + backward call (forward only, or not causal, where the
method has no such call: said in the cell) over SDPA's. Version 2 cells: the median of the
per-pair ratios of interleaved pairs with its interquartile range; a range that includes 1 reads
"≈ 1" and is not ranked. Version 1 cells (dated): one median each, no range, "(v1)". Softmax calls
SDPA: its cells are the control, and the noise floor under the table is computed from them
(``noise_floor``). Memory (at the longest T): the peak memory such a call adds on top of its inputs
over SDPA's, each measured in a fresh process.

Budgets: each column's header states what its cells spent and were scored on, read from the cells'
runs (``cell_budget``: recall's steps and test sequences, WikiText-2's steps, tokens and test
tokens, LRA Text's steps and test reviews of the test split), so a header says what ran, not what
a config meant. WikiText-2 and LRA Text are one seed each, softmax's WikiText-2 cell its seeds.
The papers' published LRA Text numbers follow in a table of their own.

The README shows a short version (``compact``: the columns whose testbed applies to most rows, short
headers that each say whether lower or higher is better, the reasons a cell does not apply under it)
and a few sentences of what the testbeds say (``findings``, through the rules of ``verdicts``); the
full table, ``leaderboard.md``, keeps every column.

Every attention config of ``configs/attention/`` (so every registered attention but the reference
paths) has a full-tier row: an attention without a full card gets one with every cell that applies
marked "not run (budget)" (the full leaderboard's runs stop at a time budget, issue 45), and the
cells so marked are listed under the table with the hours of new runs spent so far (``new_run_hours``).
"""
import csv
import io
import json
import os
import statistics

from data import write_text
from scripts.analysis.published.formatting import short_cpu
from scripts.analysis.published.papers import PUBLISHED_ACCURACY, SHORT_SOURCES, TASKS, ZOOLOGY_NOTE
from scripts.analysis.published.verdicts import ranking, ratio_verdict, ratio_words, separable, solved, solved_words
from scripts.bench.methods import CONFIG_DIR
from scripts.scorecard import testbeds as tb
from scripts.scorecard.testbeds import SPEED_T, TESTBEDS, Spec, applies, leaderboard_call

PUBLISHED = os.path.join("results", "scorecard")  # the committed results, relative to a work tree
NOT_RUN = {"full": "not run (budget)", "quick": "not run"}
FULL_BUDGET_HOURS = 10  # of new runs for the full leaderboard, then its cells left are "not run (budget)"
RECALL_COLUMNS = (("recall_reference", "recall_256_16", tb.RECALL_REFERENCE),
                  ("recall_small", "recall_64_4", tb.RECALL_SMALL))


def mean_sd(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None, 0
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else None), len(values)


def span(values, fmt=",", joiner="-"):
    """One value, or "low-high" of ``values`` (None left out) in format ``fmt``; None when there is none."""
    values = sorted({v for v in values if v is not None})
    if not values:
        return None
    return format(values[0], fmt) if len(values) == 1 else f"{values[0]:{fmt}}{joiner}{values[-1]:{fmt}}"


# -- cells ---------------------------------------------------------------------------------------

def cell_budget(cell, testbed, root=None):
    """The budget of a training cell (``testbeds.run_budget``): the card's, else read from the run
    its source names (relative to the work tree ``root``; cards made before budgets were recorded),
    else None."""
    if cell.get("budget"):
        return cell["budget"]
    source = cell.get("source")
    if root is None or not source:
        return None
    path = source if os.path.isabs(source) else os.path.join(root, source)
    if not os.path.exists(path):
        return None
    from scripts.analysis.runs import open_run

    run = open_run(path)
    if not run.final_metrics:
        return None
    evaluation = run.read_json("eval_test.json") if testbed == "wikitext2" and run.has("eval_test.json") else None
    return tb.run_budget(testbed, run.final_metrics, evaluation)


def recall_column(card, role, root=None):
    """One recall cell of a card: {"version", "seeds", "values" (test accuracy of the reported seeds,
    by seed), "check" (the check seeds' (seed, value)), "budgets"}, or None without cells. The cells
    of the card's newest protocol only. Protocol 2 reports ``role`` cells at the cell's own pick
    (``recall_rates``); protocol 1 the cells at the card's one pick (``recall_rate``), the
    selection seed's included (as it was published)."""
    cells = [c for c in card["cells"] if c["role"] in (role, f"{role}_selection", f"{role}_check")]
    if not cells:
        return None
    version = max(c.get("version", 1) for c in cells)
    cells = [c for c in cells if c.get("version", 1) == version]
    if version >= 2:
        rate = card.get("recall_rates", {}).get(role)
        reported = [c for c in cells if c["role"] == role and rate in (None, c["learning_rate"])]
    else:
        rate = card.get("recall_rate")
        reported = [c for c in cells if c["role"] in (role, f"{role}_selection") and rate in (None, c["learning_rate"])]
    reported.sort(key=lambda c: c["seed"])
    check = sorted((c for c in cells if c["role"] == f"{role}_check"), key=lambda c: c["seed"])
    return {"version": version, "seeds": [c["seed"] for c in reported],
            "values": [c["test_accuracy"] for c in reported], "check": [(c["seed"], c["test_accuracy"]) for c in check],
            "budgets": [b for b in (cell_budget(c, "recall", root) for c in reported + check) if b]}


def seeds_text(seeds):
    seeds = sorted(seeds)
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)) \
        else ", ".join(map(str, seeds))


def format_recall(column, softmax=None, missing="not run", mark_version=False):
    """A recall cell's text: "solved in k of n; mean ± sd (per seed)", one seed "v, one seed
    (solved | not solved)"; softmax's check seeds; ", separable from softmax" where ``separable``
    against ``softmax``'s column of the same protocol; " (protocol v)" when ``mark_version``."""
    if not column or not column["values"]:
        return missing
    values = column["values"]
    if len(values) == 1:
        text = f"{values[0]:.3f}, one seed ({solved_words(values, tb.RECALL_SOLVED)})"
    else:
        text = (f"{solved_words(values, tb.RECALL_SOLVED)}; {statistics.mean(values):.3f} ± "
                f"{statistics.stdev(values):.3f} ({' / '.join(f'{v:.3f}' for v in values)})")
    if column["check"]:
        check = [v for _, v in column["check"]]
        text += (f"; check seeds {seeds_text([s for s, _ in column['check']])}: "
                 f"{solved_words(check, tb.RECALL_SOLVED)} ({' / '.join(f'{v:.3f}' for v in check)})")
    if (softmax is not None and softmax is not column and softmax["version"] == column["version"]
            and separable(values, softmax["values"])):
        text += ", separable from softmax"
    if mark_version:
        text += f" (protocol {column['version']})"
    return text


def format_speed(cell, missing, kind=""):
    """A speed cell's text: version 2 "median (q1-q3)", "≈ 1 (q1-q3)" where the interquartile range
    includes 1 (not ranked); version 1 "median (v1)" (no range was recorded); ``kind`` (e.g. "not
    causal") inside the brackets."""
    if not cell or cell.get("ratio") is None:
        return missing
    q1, q3 = cell.get("ratio_q1"), cell.get("ratio_q3")
    more = f", {kind}" if kind else ""
    if cell.get("version", 1) >= 2 and q1 is not None and q3 is not None:
        return f"{ratio_words(cell['ratio'], q1, q3)} ({q1:.2f}-{q3:.2f}{more})"
    return f"{cell['ratio']:.2f} (v1{more})"


def speed_csv(cell):
    """A speed cell's CSV fields: ratio, first and third quartile, version (1 for the dated cells)."""
    if not cell:
        return [None] * 4
    return [cell.get("ratio"), cell.get("ratio_q1"), cell.get("ratio_q3"), cell.get("version", 1)]


def control_cells(cards):
    """(version, cells): the speed cells of softmax's full-tier card of the newest speed version
    (the control: softmax calls SDPA), every T, causal and not, every mode; (None, []) without any."""
    softmax = next((c for c in cards if c["label"] == "softmax" and c["tier"] == "full"), None)
    cells = [c for c in (softmax or {}).get("cells", []) if c["role"] == "speed" and c.get("ratio") is not None]
    if not cells:
        return None, []
    version = max(c.get("version", 1) for c in cells)
    return version, [c for c in cells if c.get("version", 1) == version]


def noise_floor(cards):
    """A sentence on the speed testbed's noise floor, computed from softmax's full-tier control cells
    (softmax calls SDPA, so each cell measures the timing noise of a ratio that is 1): their median
    ratios, for version 2 their interquartile ranges and how many include 1, and the half-width of
    the band around 1 they span."""
    version, cells = control_cells(cards)
    if not cells:
        return "Noise floor: softmax has no speed cells yet (its cells are the control)."
    medians = [c["ratio"] for c in cells]
    head = (f"Noise floor of the time / SDPA cells, from softmax's {len(cells)} control cells (softmax calls SDPA, "
            f"so each would read 1 without noise; every T, causal and not, forward and forward + backward)")
    if version >= 2:
        lows, highs = [c["ratio_q1"] for c in cells], [c["ratio_q3"] for c in cells]
        floor = max(abs(x - 1) for x in lows + highs + medians)
        inside = sum(lo <= 1 <= hi for lo, hi in zip(lows, highs))
        return (f"{head}: median ratios {min(medians):.2f}-{max(medians):.2f}, interquartile ranges within "
                f"{min(lows):.2f}-{max(highs):.2f}, {inside} of {len(cells)} of them including 1: a ratio within "
                f"1 ± {floor:.2f} is not told apart from SDPA's time on this machine.")
    floor = max(abs(x - 1) for x in medians)
    return (f"{head}, version 1 (a median of calls of each, not interleaved, no range recorded): they read "
            f"{min(medians):.2f}-{max(medians):.2f}, so a version 1 ratio within 1 ± {floor:.2f} is not told apart "
            f"from SDPA's time; version {tb.SPEED_VERSION} cells (interleaved pairs with their range) are pending.")


# -- rows ----------------------------------------------------------------------------------------

def leaderboard_rows(cards, root=None):
    """One row per (attention, tier) card: recall columns (``recall_column``), WikiText-2 and LRA
    Text cells with their budgets, the swap cell, speed cells and memory ratios by T."""
    rows = []
    for card in cards:
        row = {"attention": card["label"], "tier": card["tier"], "not_applicable": card["not_applicable"]}
        for role, column, _ in RECALL_COLUMNS:
            row[column] = recall_column(card, role, root)
        lra = [c for c in card["cells"] if c["role"] == "lra"]
        row["lra"] = (lra[0]["test_accuracy"], lra[0]["steps_per_s"]) if lra else None
        row["lra_cpu"] = lra[0].get("cpu") if lra else None
        row["lra_budget"] = cell_budget(lra[0], "lra", root) if lra else None
        swap = [c for c in card["cells"] if c["role"] == "swap"]
        row["swap"] = (swap[0]["test_ppl"], swap[0]["softmax_test_ppl"]) if swap else None
        wikitext2 = [c for c in card["cells"] if c["role"] == "wikitext2"]  # the config's seed first
        row["wikitext2"] = (wikitext2[0]["test_ppl"], wikitext2[0]["tokens_per_s"]) if wikitext2 else None
        row["wikitext2_values"] = [c["test_ppl"] for c in wikitext2]
        row["wikitext2_cpu"] = wikitext2[0].get("cpu") if wikitext2 else None
        row["wikitext2_budgets"] = [b for b in (cell_budget(c, "wikitext2", root) for c in wikitext2) if b]
        speed = [c for c in card["cells"] if c["role"] == "speed"]
        causal, mode = leaderboard_call({c["causal"] for c in speed}, {c["mode"] for c in speed})
        row["speed"] = {c["T"]: c for c in speed if c["mode"] == mode and c["causal"] == causal}
        row["memory"] = {c["T"]: c.get("memory_ratio") for c in speed if c["mode"] == mode and c["causal"] == causal}
        row["speed_kind"] = ("causal" if causal else "not causal") + (", forward only" if mode == "forward" else "")
        rows.append(row)
    return rows


def format_wikitext2(row, cpus):
    """"ppl (tokens/s), one seed", or over several seeds "mean ± sd (n = k: per seed) (tokens/s)"
    (the speed of the config's seed's run)."""
    values = row["wikitext2_values"]
    on = f" on {short_cpu(row['wikitext2_cpu'])}" if row["wikitext2_cpu"] != cpus["wikitext2"] else ""
    speed = f"({row['wikitext2'][1]:,.0f}{on})"
    if len(values) == 1:
        return f"{values[0]:.2f} {speed}, one seed"
    return (f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} (n = {len(values)}: "
            f"{' / '.join(f'{v:.2f}' for v in values)}) {speed}")


def throughput(value, fmt, cpu, softmax_cpu):
    """A training cell's speed (tokens/s, steps/s) in brackets, with the CPU its run trained on when
    that is not the CPU of softmax's run of the same column (speeds on different CPUs do not compare:
    a 2-core Intel Xeon trained the mini GPT 2.5x faster than a 2-core AMD EPYC)."""
    on = f" on {short_cpu(cpu)}" if cpu != softmax_cpu else ""
    return f"({value:{fmt}}{on})"


def read_cards(results, base=None):
    """Every card (dict) under ``<base>/cards`` and ``<results>/cards`` by file name (a card of
    ``results`` replaces ``base``'s of the same attention and tier); [] when there is none."""
    by_name = {}
    for folder in (base, results):
        folder = os.path.join(folder, "cards") if folder else None
        for name in sorted(os.listdir(folder)) if folder and os.path.isdir(folder) else []:
            if name.endswith(".json") and name != "manifest.json":
                with open(os.path.join(folder, name)) as f:
                    by_name[name] = json.load(f)
    return [by_name[name] for name in sorted(by_name)]


def cards_to_come(cards):
    """A full-tier card without cells for every attention config of ``configs/attention/`` that has
    no full card among ``cards``, with the testbeds that do not apply to it and why."""
    have = {card["label"] for card in cards if card["tier"] == "full"}
    empty = []
    for name in sorted(os.listdir(CONFIG_DIR)):
        label = name[:-len(".py")]
        if name.endswith(".py") and label not in have:
            spec = Spec(label)
            reasons = {testbed: applies(testbed, spec) for testbed in TESTBEDS}
            empty.append({"label": label, "tier": "full", "cells": [],
                          "not_applicable": {t: why for t, why in reasons.items() if why}})
    return empty


def new_run_hours(cards, cell_rows):
    """(number of cells, hours) of the full tier's new runs: the cells of the full cards that the
    scorecard ran itself (their source is under ``results/scorecard/`` or "measured"), not runs of
    the sweeps archived under ``results/`` and reused; a swap cell adds its softmax evaluation and
    the softmax model's training (``base_train_s``). ``cell_rows``: ``cells.jsonl``'s rows by key; the
    time is each row's ``wall_s`` (seconds of wall time)."""
    keys = {key for card in cards if card["tier"] == "full" for cell in card["cells"]
            for key in (cell.get("key"), cell.get("softmax_key")) if key}
    rows = [cell_rows[key] for key in sorted(keys) if key in cell_rows
            and (cell_rows[key].get("source") == "measured" or cell_rows[key].get("source", "").startswith("results/scorecard/"))]
    seconds = sum((row.get("wall_s") or 0) + (row.get("base_train_s") or 0) for row in rows)
    return len(rows), seconds / 3600


# -- headers -------------------------------------------------------------------------------------

def recall_protocol(version, budgets):
    """A recall protocol in words: its budget, read from the cells' runs, and its selection rule."""
    steps = span(b.get("max_steps") for b in budgets)
    stops = span((b.get("stop_at") or None for b in budgets), "g")
    trains = span(b.get("train_sequences") for b in budgets)
    tests = span(b.get("test_sequences") for b in budgets)
    budget = ", ".join(part for part in (
        steps and f"{steps} steps" + (f" (stopped at validation accuracy {stops})" if stops else ""),
        trains and f"{trains} training sequences", tests and f"{tests} test sequences") if part)
    if version >= 2:
        rule = (f"seeds {seeds_text(tb.RECALL_SEEDS)} at the rate seed {tb.RECALL_SELECTION_SEED} picked for this "
                f"cell (the earliest stop, else the best validation accuracy; "
                f"{', '.join(f'{r:g}' for r in tb.RECALL_RATES)})")
    else:
        rule = "seeds 0-2 at the rate seed 0 picked at 256/16 (validation accuracy)"
    dated = " (dated)" if version < tb.RECALL_VERSION else ""
    return f"protocol {version}{dated}: " + "; ".join(part for part in (budget, rule) if part)


def headers(rows, Ts):
    """The leaderboard's column headers: what each column measures, whether lower or higher is
    better, and the budget and rule of the full tier's cells (from the cells themselves)."""
    full = [r for r in rows if r["tier"] == "full"]
    out = ["attention", "tier"]
    for _, column, (T, N, W) in RECALL_COLUMNS:
        columns = [r[column] for r in full if r[column]]
        versions = sorted({c["version"] for c in columns}, reverse=True)
        protocols = [recall_protocol(v, [b for c in columns if c["version"] == v for b in c["budgets"]])
                     for v in versions]
        if tb.RECALL_VERSION not in versions:
            protocols.append(f"protocol {tb.RECALL_VERSION} cells pending")
        out.append(f"recall {T}/{N} w{W}, test accuracy (higher is better): solved (>= {tb.RECALL_SOLVED:g}) in "
                   f"k of n seeds; mean ± sd (per seed); " + "; ".join(protocols))
    budgets = [b for r in full for b in r["wikitext2_budgets"]]
    softmax = next((r for r in full if r["attention"] == "softmax"), None)
    parts = [span(b.get("steps") for b in budgets) and
             f"{span(b.get('steps') for b in budgets)} steps of {span(b.get('tokens_per_step') for b in budgets)} tokens",
             span(b.get("test_tokens") for b in budgets) and
             f"{span(b.get('test_tokens') for b in budgets)} of {span(b.get('split_tokens') for b in budgets)} "
             f"test tokens scored",
             "one seed" + (f", softmax mean ± sd of {len(softmax['wikitext2_values'])}"
                           if softmax and len(softmax["wikitext2_values"]) > 1 else "")]
    out.append(f"WikiText-2 test ppl (lower is better; {'; '.join(p for p in parts if p)}) (training tokens/s)")
    budgets = [r["lra_budget"] for r in full if r["lra_budget"]]
    parts = [span(b.get("steps") for b in budgets) and f"{span(b.get('steps') for b in budgets)} steps",
             span(b.get("test_examples") for b in budgets) and
             f"{span(b.get('test_examples') for b in budgets)} of {span(b.get('test_size') for b in budgets)} "
             f"test reviews", "one seed"]
    out.append(f"LRA Text test accuracy (higher is better; {'; '.join(p for p in parts if p)}) (training steps/s)")
    out.append("swapped into softmax's model: test ppl (softmax's) (lower is better)")
    for T in Ts:
        cells = [r["speed"][T] for r in full if r["speed"].get(T) and r["speed"][T].get("ratio") is not None]
        versions = {c.get("version", 1) for c in cells}
        pairs = span(c.get("pairs") for c in cells if c.get("version", 1) >= 2)
        how = []
        if pairs:
            how.append(f"median of {pairs} interleaved pairs (interquartile range), ≈ 1 where it includes 1")
        if 1 in versions:
            how.append("(v1): a dated version 1 cell, one median, no range")
        if tb.SPEED_VERSION not in versions:
            how.append(f"version {tb.SPEED_VERSION} cells pending")
        out.append(f"time / SDPA, T={T} (causal, forward + backward; lower is better; {'; '.join(how)})")
    out.append(f"peak memory / SDPA, T={Ts[-1]} (causal, forward + backward; lower is better)")
    return out


def notes(rows, cards):
    """The paragraphs under the table: how recall cells summarise their seeds and when they separate,
    how speed cells read (with the noise floor, ``noise_floor``), and the quick rows' budgets."""
    lines = [f"Recall: a seed solves a cell at test accuracy {tb.RECALL_SOLVED:g} or more; a cell is \"separable "
             f"from softmax\" only where the range (lowest to highest) of its reported seeds and softmax's do not "
             f"overlap, both with two seeds or more under the same protocol (every other cell overlaps softmax's or "
             f"has too few seeds). Protocol {tb.RECALL_VERSION} picks each cell's rate on seed "
             f"{tb.RECALL_SELECTION_SEED} and reports seeds {seeds_text(tb.RECALL_SEEDS)} only, softmax also its "
             f"check seeds {seeds_text(tb.RECALL_CHECK_SEEDS)}; protocol 1 cells (dated) report the seed that "
             f"picked the rate with two more, and their 64/4 cells ran at the rate picked at 256/16."]
    lines += ["", "Speed: version 2 cells interleave the method's call and SDPA's (A B A B ...) in one process, after "
              "a warm-up call of each, and show the median of the per-pair ratios with their interquartile range; "
              "\"≈ 1\" marks a range that includes 1 (not ranked). \"(v1)\" marks a dated version 1 cell: the median "
              "of calls of the method, then of SDPA, with no range; not ranked either. " + noise_floor(cards)]
    if any(r["tier"] == "quick" for r in rows):
        lines += ["", "Quick rows (\"a first look\") ran the quick tier's budgets (`scripts/scorecard/testbeds.py`), "
                  "not the headers'."]
    return lines


# -- the README's short leaderboard and what the testbeds say ------------------------------------

NOT_APPLICABLE = "–"  # a cell of the short leaderboard that does not apply (the reason under the table)


def low_high(values, fmt=".3f"):
    """"low-high" of ``values`` as written in ``fmt``, one value where both read alike."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}-{high}"


def compact_recall(column, softmax, missing):
    """A recall cell of the short leaderboard: "k of n (low-high)" (seeds solved, ``solved``, and the
    range of the reported seeds' accuracies), one seed "value (solved | not solved)"; ", separable"
    where ``separable`` from ``softmax``'s column of the same protocol; "; p<v>" for a dated protocol."""
    if not column or not column["values"]:
        return missing
    values = column["values"]
    if len(values) == 1:
        text = f"{values[0]:.3f} ({solved_words(values, tb.RECALL_SOLVED)}"
    else:
        text = f"{solved(values, tb.RECALL_SOLVED)} of {len(values)} ({low_high(values)}"
    if column["version"] < tb.RECALL_VERSION:
        text += f"; p{column['version']}"
    text += ")"
    if (softmax is not None and softmax is not column and softmax["version"] == column["version"]
            and separable(values, softmax["values"])):
        text += ", separable"
    return text


def compact_wikitext2(row):
    """WikiText-2's test perplexity: one seed's, or "mean ± sd (n seeds)"."""
    values = row["wikitext2_values"]
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} ({len(values)} seeds)"


def compact_columns(Ts):
    """The short leaderboard's candidate columns: (header, testbed, cell function of (row, softmax's
    row, the "not run" word)); every header says whether lower or higher is better. Speed at the
    shortest and the longest T, memory at the longest."""
    columns = []
    for _, column, (T, N, _) in RECALL_COLUMNS:
        columns.append((f"recall {T}/{N}, seeds solved (higher is better)", "recall",
                        lambda r, base, missing, column=column:
                        "full tier only" if r["tier"] == "quick" and column == "recall_256_16"
                        else compact_recall(r[column], base[column] if base else None, missing)))
    columns.append(("WikiText-2 test ppl (lower is better)", "wikitext2",
                    lambda r, base, missing: compact_wikitext2(r) if r["wikitext2"] else missing))
    columns.append(("LRA Text accuracy (higher is better)", "lra",
                    lambda r, base, missing: f"{100 * r['lra'][0]:.2f}%" if r["lra"] else missing))
    columns.append(("swapped into softmax's model: test ppl (lower is better)", "swap",
                    lambda r, base, missing: f"{r['swap'][0]:.2f} ({r['swap'][1]:.2f})" if r["swap"] else missing))

    def kind(r):
        return "" if r["speed_kind"] == "causal" else r["speed_kind"]

    for T in sorted({Ts[0], Ts[-1]}):
        columns.append((f"time / SDPA, T = {T:,} (lower is better)", "speed",
                        lambda r, base, missing, T=T: format_speed(r["speed"].get(T), missing, kind(r))))
    columns.append((f"memory / SDPA, T = {Ts[-1]:,} (lower is better)", "speed",
                    lambda r, base, missing: f"{r['memory'][Ts[-1]]:.2f}" + (f" ({kind(r)})" if kind(r) else "")
                    if r["memory"].get(Ts[-1]) else missing))
    return columns


def compact(rows, Ts):
    """The short leaderboard (the README's): one row per attention and tier, only the columns of
    ``compact_columns`` whose testbed applies to more than half of the rows (the swap cell, which
    applies to inference-only methods, and the tier go to the full leaderboard; a quick row's
    attention is marked "(quick)"), a cell that does not apply "–"; and the short notes under it:
    how a cell reads, and why a cell does not apply."""
    softmax = {r["tier"]: r for r in rows if r["attention"] == "softmax"}
    shown = [c for c in compact_columns(Ts) if 2 * sum(c[1] not in r["not_applicable"] for r in rows) > len(rows)]
    header = ["attention", *(c[0] for c in shown)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    reasons = {}
    for r in sorted(rows, key=lambda r: (r["tier"], r["attention"] != "softmax", r["attention"])):
        cells = []
        for _, testbed, cell in shown:
            if testbed in r["not_applicable"]:
                cells.append(NOT_APPLICABLE)
                reasons.setdefault(r["not_applicable"][testbed], []).append(r["attention"])
            else:
                cells.append(cell(r, softmax.get(r["tier"]), NOT_RUN[r["tier"]]))
        name = r["attention"] + (" (quick)" if r["tier"] == "quick" else "")
        lines.append("| " + " | ".join([name, *cells]) + " |")
    versions = {r[column]["version"] for r in rows for _, column, _ in RECALL_COLUMNS if r[column]}
    dated = sorted(v for v in versions if v < tb.RECALL_VERSION)
    speeds = {c.get("version", 1) for r in rows for c in r["speed"].values() if c.get("ratio") is not None}
    notes = [f"Recall: seeds that reach test accuracy {tb.RECALL_SOLVED:g}, of the seeds a cell reports, and the "
             f"range of their accuracies"
             + "".join(f"; p{v}: a dated protocol {v} cell, compared with no protocol {tb.RECALL_VERSION} cell"
                       for v in dated) + ". WikiText-2 and LRA Text: one seed each unless said."]
    how = []
    if any(v >= 2 for v in speeds):
        how.append("≈ 1: the interquartile range of the pairs' ratios includes 1, not ranked")
    if 1 in speeds:
        how.append("(v1): a dated cell, one median, no range, not ranked")
    notes.append("Time and memory: the causal forward + backward call (where the method has it) over SDPA's"
                 + (f"; {'; '.join(how)}" if how else "") + ".")
    if reasons:
        names = sorted(reasons.items(), key=lambda item: sorted(set(item[1])))
        notes.append(f"{NOT_APPLICABLE}: does not apply ("
                     + "; ".join(f"{', '.join(sorted(set(n)))}: {why}" for why, n in names) + ").")
    return "\n".join(lines) + "\n", " ".join(notes) + "\n"


def findings(rows, cards):
    """A few sentences of what the testbeds say, from the full tier's cells through the rules of
    ``verdicts``: recall's seeds solved per cell and protocol and which cells compare with softmax's
    (``separable``), WikiText-2's cells against softmax's seeds (``separable``, ``ranking``), LRA
    Text's (``ranking``), and the speed cells that are ranked (``ratio_verdict``) beside softmax's
    control cells."""
    full = [r for r in rows if r["tier"] == "full"]
    base = next((r for r in full if r["attention"] == "softmax"), None)
    others = [r for r in full if r is not base]
    lines = []
    cells, compared = [], []
    for _, column, (T, N, _) in RECALL_COLUMNS:
        by_version = {}
        for r in full:
            if r[column] and r[column]["values"]:
                by_version.setdefault(r[column]["version"], []).append(r)
        parts = []
        for version in sorted(by_version, reverse=True):
            groups = {}
            for r in by_version[version]:
                values = r[column]["values"]
                groups.setdefault((-solved(values, tb.RECALL_SOLVED), solved_words(values, tb.RECALL_SOLVED)),
                                  []).append(r["attention"])
            dated = ", dated" if version < tb.RECALL_VERSION else ""
            parts.append(" and ".join(f"{', '.join(names)} {words}" for (_, words), names in sorted(groups.items()))
                         + f" (protocol {version}{dated})")
        if parts:
            cells.append(f"At {T}/{N}, " + "; ".join(parts) + ".")
        reference = base[column] if base else None
        if reference and reference["values"]:
            compared += [(r["attention"], f"{T}/{N}", separable(r[column]["values"], reference["values"]))
                         for r in others if r[column] and r[column]["values"]
                         and r[column]["version"] == reference["version"]]
    if cells:
        text = (f"Recall (a seed solves a cell at test accuracy {tb.RECALL_SOLVED:g} or more). "
                + " ".join(cells))
        versions = {base[c]["version"] for _, c, _ in RECALL_COLUMNS if base and base[c]}
        if base and not compared and versions:
            text += (f" No other attention has a protocol {'/'.join(map(str, sorted(versions)))} cell yet, so none "
                     f"is compared with softmax's seeds.")
        elif compared:
            apart = [f"{name} at {cell}" for name, cell, yes in compared if yes]
            close = [f"{name} at {cell}" for name, cell, yes in compared if not yes]
            text += (" Separable from softmax (seed ranges apart, same protocol): "
                     + (", ".join(apart) if apart else "none")
                     + (f"; not separable: {', '.join(close)}" if close else "") + ".")
        lines.append(text)
    if base and base["wikitext2_values"]:
        reference = base["wikitext2_values"]
        measured = [r for r in others if r["wikitext2_values"]]
        text = "WikiText-2 test perplexity: softmax " + (
            f"{statistics.mean(reference):.2f} ± {statistics.stdev(reference):.2f} over {len(reference)} seeds"
            if len(reference) > 1 else f"{reference[0]:.2f}, one seed")
        apart = [r["attention"] for r in measured if separable(r["wikitext2_values"], reference)]
        single = [r for r in measured if len(r["wikitext2_values"]) < 2]  # the rule needs two seeds a side
        close = [r for r in measured if len(r["wikitext2_values"]) >= 2 and not separable(r["wikitext2_values"], reference)]
        if apart:
            text += f"; separable from it: {', '.join(apart)}"
        if close:
            values = [v for r in close for v in r["wikitext2_values"]]
            text += (f"; not separable from it (seed ranges overlap): {', '.join(r['attention'] for r in close)} "
                     f"({low_high(values, '.2f')})")
        if single:
            values = [v for r in single for v in r["wikitext2_values"]]
            text += (f"; one seed, so not compared with softmax's seeds: {', '.join(r['attention'] for r in single)} "
                     f"({low_high(values, '.2f')})")
        lines.append(text + f"; {ranking([reference] + [r['wikitext2_values'] for r in measured])}.")
    lra = [r for r in full if r["lra"]]
    if lra:
        missing = [r["attention"] for r in full if not r["lra"] and "lra" not in r["not_applicable"]]
        lines.append(f"LRA Text accuracy: {len(lra)} attentions, {low_high([100 * r['lra'][0] for r in lra], '.2f')}% "
                     f"({ranking([[r['lra'][0]] for r in lra])})"
                     + (f"; not run: {', '.join(missing)}" if missing else "") + ".")
    speed = [(r["attention"], T, c) for r in others for T, c in sorted(r["speed"].items()) if c.get("ratio") is not None]
    if speed:
        verdict = {(a, T): ratio_verdict(c.get("ratio_q1"), c.get("ratio_q3")) if c.get("version", 1) >= 2
                   else "not ranked" for a, T, c in speed}
        ranked = [(a, T, verdict[(a, T)]) for a, T, _ in speed if verdict[(a, T)] != "not ranked"]
        dated = sum(c.get("version", 1) < 2 for _, _, c in speed)
        text = (f"Speed (time / SDPA of the leaderboard's call, T = {low_high([T for _, T, _ in speed], ',')}): "
                f"{len(ranked)} of {len(speed)} cells of the other attentions ranked")
        for word in ("faster", "slower"):
            found = {}
            for a, T, w in ranked:
                if w == word:
                    found.setdefault(a, []).append(f"{T:,}")
            if found:
                text += f"; {word} than SDPA: " + ", ".join(f"{a} at T = {', '.join(Ts)}" for a, Ts in found.items())
        unranked = len(speed) - len(ranked) - dated
        why = [f"{unranked} read ≈ 1 (their interquartile range includes 1)" if unranked else "",
               f"{dated} are dated version 1 cells (one median, no range)" if dated else ""]
        why = [w for w in why if w]
        if why:
            text += f"; not ranked: {' and '.join(why)}"
        _, control = control_cells(cards)
        if control:
            text += (f". Softmax's {len(control)} control cells (softmax calls SDPA) read "
                     f"{low_high([c['ratio'] for c in control], '.2f')}")
        lines.append(text + ".")
    return "\n\n".join(f"- {line}" for line in lines) + "\n" if lines else "No cells yet.\n"


def sections(cards, cell_rows=None, root=None):
    """The leaderboard's parts as markdown: "table", "notes" (the rules and the noise floor under the
    table), "compact" and "compact_notes" (``compact``: the README's short table and its notes),
    "findings" (``findings``: what the testbeds say), "floor" (``noise_floor`` alone), "rest" (the cells not
    run within the budget, the hours of new runs when ``cell_rows`` are given, the training speeds'
    CPUs and the published rows); and "csv"."""
    all_cards = cards + cards_to_come(cards)
    rows = leaderboard_rows(all_cards, root)
    Ts = sorted({T for r in rows for T in r.get("speed", {})} | set(SPEED_T["full"]))
    softmax = {r["tier"]: r for r in rows if r["attention"] == "softmax"}
    header = headers(rows, Ts)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    csv_rows = [["attention", "tier",
                 *(f"{c}_{f}" for _, c, _ in RECALL_COLUMNS
                   for f in ("protocol", "mean", "sd", "n", "solved", "min", "max", "seeds", "values")),
                 "wikitext2_test_ppl", "wikitext2_sd", "wikitext2_n", "wikitext2_tokens_per_s", "wikitext2_cpu",
                 "lra_text_test_accuracy", "lra_text_steps_per_s", "lra_text_cpu", "swap_test_ppl",
                 "swap_softmax_test_ppl", *(f"speed_{f}_T{T}" for T in Ts for f in ("ratio", "q1", "q3", "version")),
                 *(f"memory_ratio_T{T}" for T in Ts)]]
    not_run = []
    for r in sorted(rows, key=lambda r: (r["tier"], r["attention"] != "softmax", r["attention"])):
        base = softmax.get(r["tier"])
        missing = NOT_RUN[r["tier"]]
        cpus = {column: base.get(column + "_cpu") if base else None for column in ("wikitext2", "lra")}
        cells = []
        for _, column, _ in RECALL_COLUMNS:
            if "recall" in r["not_applicable"]:
                cells.append(f"does not apply ({r['not_applicable']['recall']})")
            elif r["tier"] == "quick" and column == "recall_256_16":
                cells.append("full tier only")
            else:
                versions = {x[column]["version"] for x in rows if x["tier"] == r["tier"] and x[column]}
                cells.append(format_recall(r[column], base[column] if base else None, missing,
                                           mark_version=len(versions) > 1))
        if "wikitext2" in r["not_applicable"]:
            cells.append(f"does not apply ({r['not_applicable']['wikitext2']})")
        else:
            cells.append(format_wikitext2(r, cpus) if r["wikitext2"] else missing)
        if "lra" in r["not_applicable"]:
            cells.append(f"does not apply ({r['not_applicable']['lra']})")
        else:
            cells.append(f"{100 * r['lra'][0]:.2f}% {throughput(r['lra'][1], '.2f', r['lra_cpu'], cpus['lra'])}"
                         ", one seed" if r["lra"] else missing)
        if "swap" in r["not_applicable"]:
            cells.append(f"does not apply ({r['not_applicable']['swap']})")
        else:
            cells.append(f"{r['swap'][0]:.2f} ({r['swap'][1]:.2f})" if r["swap"] else missing)
        kind = "" if r["speed_kind"] == "causal" else f" ({r['speed_kind']})"
        speed = [format_speed(r["speed"].get(T), missing, kind[2:-1]) for T in Ts]
        speed.append(f"{r['memory'][Ts[-1]]:.2f}{kind}" if r["memory"].get(Ts[-1]) else missing)
        if r["tier"] == "full":
            short = ["recall 256/16", "recall 64/4", "WikiText-2", "LRA Text", "swap", *(f"speed T={T}" for T in Ts),
                     f"peak memory T={Ts[-1]}"]
            left = [name for name, cell in zip(short, [*cells, *speed]) if cell == missing]
            if left:
                not_run.append(f"{r['attention']}: {', '.join(left)}")
        tier = r["tier"] + (" (a first look)" if r["tier"] == "quick" else "")
        lines.append("| " + " | ".join([r["attention"], tier, *cells, *speed]) + " |")
        recall_csv = []
        for _, column, _ in RECALL_COLUMNS:
            c = r[column]
            values = c["values"] if c else []
            recall_csv += [c and c["version"], *mean_sd(values)[:2], len(values),
                           solved(values, tb.RECALL_SOLVED) if values else None,
                           min(values, default=None), max(values, default=None),
                           "/".join(map(str, c["seeds"])) if c else None, "/".join(f"{v:.6g}" for v in values) or None]
        wikitext2 = r["wikitext2_values"]
        csv_rows.append([r["attention"], r["tier"], *recall_csv, *mean_sd(wikitext2),
                         r["wikitext2"][1] if r["wikitext2"] else None, r["wikitext2_cpu"], *(r["lra"] or (None, None)),
                         r["lra_cpu"], *(r["swap"] or (None, None)),
                         *(value for T in Ts for value in speed_csv(r["speed"].get(T))),
                         *(r.get("memory", {}).get(T) for T in Ts)])
    rest = []
    if not_run:
        rest += ["Not run (budget): the full tier's cells still to run, by attention "
                 "(`python -m scripts.scorecard <attention> --tier full` runs them):", "",
                 *(f"- {entry}" for entry in not_run), ""]
    if cell_rows is not None:
        count, hours = new_run_hours(cards, cell_rows)
        rest += [f"New runs of the full tier (cells the scorecard ran itself, not the sweeps' archived runs it "
                 f"reused; the swap cell with its softmax model's training): {count} cells, {hours:.1f} h of wall time. "
                 f"The full leaderboard's new runs stop at about {FULL_BUDGET_HOURS} h.", ""]
    full = softmax.get("full") or {}
    on = "; ".join(f"softmax's {name} run on {short_cpu(full[column + '_cpu'])}"
                   for column, name in (("wikitext2", "WikiText-2"), ("lra", "LRA Text")) if full.get(column + "_cpu"))
    rest += [f"Speeds in brackets are the training runs' own (2 CPU cores{'; ' + on if on else ''}); a run on "
             "another CPU than softmax's run of the same column names its CPU, and its speed does not compare with "
             "softmax's (the time / SDPA columns do: both calls measured in one process).", ""]
    rest += [*published_rows(cards)]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(csv_rows)  # None as an empty field
    short_table, short_notes = compact(rows, Ts)
    return {"table": "\n".join(lines) + "\n", "notes": "\n".join(notes(rows, cards)) + "\n",
            "compact": short_table, "compact_notes": short_notes, "findings": findings(rows, cards),
            "floor": noise_floor(cards) + "\n", "rest": "\n".join(rest) + "\n", "csv": out.getvalue()}


def tables(cards, cell_rows=None, root=None):
    """(markdown, csv) of the leaderboard of ``cards`` and of ``cards_to_come``: one row per
    attention and tier, softmax first within a tier, the notes under the table, the cells not run
    within the budget listed with the hours of new runs so far (``new_run_hours``, when
    ``cell_rows``, ``cells.jsonl``'s rows by key, are given), then the published rows (never mixed
    with ours). ``root``: the work tree the cards' sources are relative to (budgets of cards that
    do not record them are read from their runs)."""
    parts = sections(cards, cell_rows, root)
    return parts["table"] + "\n" + parts["notes"] + "\n" + parts["rest"], parts["csv"]


def published_rows(cards):
    """Markdown lines: the papers' LRA Text accuracies of the attentions on the leaderboard (or of
    every method when it is empty), as printed in their tables; for reference, not comparable
    (GPU, full-size models and budgets)."""
    names = {card["attention"] for card in cards} | {card["label"] for card in cards}
    text = TASKS.index("text")
    lines = ["Published LRA Text accuracies of these methods (their papers' GPU runs at full size: a reference, not "
             "a row of this leaderboard):", "", "| attention | source | LRA Text test accuracy |", "|---|---|---|"]
    for name, source, accuracies, _ in PUBLISHED_ACCURACY:
        if not names or name in names:
            lines.append(f"| {name} | {SHORT_SOURCES.get(source, source)} | {accuracies[text]:.2f}% |")
    lines += ["", f"Associative recall, published (values read from the paper's plot, not a table): {ZOOLOGY_NOTE}"]
    return lines


def write_leaderboard(results, cell_rows=None, base=None, root=None):
    """``leaderboard.md`` and ``.csv`` from every card under ``<results>/cards``, merged with those
    under ``<base>/cards`` (``read_cards``), and ``cell_rows`` (``cells.jsonl``'s rows by key, for the
    hours of new runs); ``root``: the work tree of the cards' sources. Returns the .md path."""
    md, csv_text = tables(read_cards(results, base), cell_rows, root)
    write_text(os.path.join(results, "leaderboard.csv"), csv_text)
    write_text(os.path.join(results, "leaderboard.md"), md)
    return os.path.join(results, "leaderboard.md")
