"""The scorecard's leaderboard (a library: ``python -m scripts.scorecard`` writes it, ``python -m
scripts.analysis.publish`` renders it into the README): one row per attention and tier from the
cards under ``results/scorecard/cards`` (``scripts/scorecard/__main__.py`` says what a card holds).

A recall cell is the mean ± sd of the test accuracy over its seeds and their number ("one seed": no
spread); where softmax and the method both have two seeds or more and the means differ by less than
two pooled standard deviations, "not separable from softmax". WikiText-2 and LRA Text are one seed
each; the swap column is the test perplexity of the method in softmax's trained model beside
softmax's own; speed is the time of one causal forward + backward call (forward only, or not causal,
where the method has no such call: said in the cell) over SDPA's, measured in the same process, and
memory (at the longest T) the peak memory such a call adds on top of its inputs over SDPA's, each
measured in a fresh process.
The papers' published LRA Text numbers follow in a table of their own.

Every attention config of ``configs/attention/`` (so every registered attention but the reference
paths) has a full-tier row: an attention without a full card gets one with every cell that applies
marked "not run (budget)" (the full leaderboard's runs stop at a time budget, issue 45), and the
cells so marked are listed under the table with the hours of new runs spent so far (``new_run_hours``).
"""
import csv
import io
import json
import math
import os
import statistics

from data import write_text
from scripts.bench.methods import CONFIG_DIR
from scripts.scorecard.testbeds import SPEED_T, TESTBEDS, Spec, applies, leaderboard_call

NOT_RUN = {"full": "not run (budget)", "quick": "not run"}
FULL_BUDGET_HOURS = 10  # of new runs for the full leaderboard, then its cells left are "not run (budget)"


def mean_sd(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None, 0
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else None), len(values)


def leaderboard_rows(cards):
    """One row per (attention, tier) card: recall cells as (mean, sd, n), speed ratios by T."""
    rows = []
    for card in cards:
        row = {"attention": card["label"], "tier": card["tier"], "not_applicable": card["not_applicable"]}
        for role, column in (("recall_reference", "recall_256_16"), ("recall_small", "recall_64_4")):
            cells = [c for c in card["cells"] if c["role"] in (role, role + "_selection")
                     and c["learning_rate"] == card.get("recall_rate", c["learning_rate"])]
            row[column] = mean_sd([c["test_accuracy"] for c in cells])
        lra = [c for c in card["cells"] if c["role"] == "lra"]
        row["lra"] = (lra[0]["test_accuracy"], lra[0]["steps_per_s"]) if lra else None
        row["lra_cpu"] = lra[0].get("cpu") if lra else None
        swap = [c for c in card["cells"] if c["role"] == "swap"]
        row["swap"] = (swap[0]["test_ppl"], swap[0]["softmax_test_ppl"]) if swap else None
        wikitext2 = [c for c in card["cells"] if c["role"] == "wikitext2"]
        row["wikitext2"] = (wikitext2[0]["test_ppl"], wikitext2[0]["tokens_per_s"]) if wikitext2 else None
        row["wikitext2_cpu"] = wikitext2[0].get("cpu") if wikitext2 else None
        speed = [c for c in card["cells"] if c["role"] == "speed"]
        causal, mode = leaderboard_call({c["causal"] for c in speed}, {c["mode"] for c in speed})
        row["speed"] = {c["T"]: c["ratio"] for c in speed if c["mode"] == mode and c["causal"] == causal}
        row["memory"] = {c["T"]: c.get("memory_ratio") for c in speed if c["mode"] == mode and c["causal"] == causal}
        row["speed_kind"] = ("causal" if causal else "not causal") + (", forward only" if mode == "forward" else "")
        rows.append(row)
    return rows


def format_cell(stat, softmax=None, missing="not run"):
    mean, sd, n = stat
    if mean is None:
        return missing
    text = f"{mean:.3f}" + (f" ± {sd:.3f}" if sd is not None else "") + f" (n={n})"
    if n < 2:
        return text + ", one seed"
    if softmax and softmax[2] >= 2 and softmax[1] is not None and sd is not None:
        pooled = math.sqrt((sd ** 2 + softmax[1] ** 2) / 2)
        if abs(mean - softmax[0]) < 2 * pooled:
            text += ", not separable from softmax"
    return text


def throughput(value, fmt, cpu, softmax_cpu):
    """A training cell's speed (tokens/s, steps/s) in brackets, with the CPU its run trained on when
    that is not the CPU of softmax's run of the same column (speeds on different CPUs do not compare:
    a 2-core Intel Xeon trained the mini GPT 2.5x faster than a 2-core AMD EPYC)."""
    from scripts.analysis.published import short_cpu

    on = f" on {short_cpu(cpu)}" if cpu != softmax_cpu else ""
    return f"({value:{fmt}}{on})"


def read_cards(results):
    """Every card (dict) under ``<results>/cards``, by file name; [] when there is none."""
    folder = os.path.join(results, "cards")
    cards = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".json") and name != "manifest.json":
            with open(os.path.join(folder, name)) as f:
                cards.append(json.load(f))
    return cards


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


def tables(cards, cell_rows=None):
    """(markdown, csv) of the leaderboard of ``cards`` and of ``cards_to_come``: one row per
    attention and tier, softmax first within a tier, the cells not run within the budget listed
    with the hours of new runs so far (``new_run_hours``, when ``cell_rows``, ``cells.jsonl``'s rows
    by key, are given), then the published rows (never mixed with ours)."""
    rows = leaderboard_rows(cards + cards_to_come(cards))
    Ts = sorted({T for r in rows for T in r.get("speed", {})} | set(SPEED_T["full"]))
    softmax = {r["tier"]: r for r in rows if r["attention"] == "softmax"}
    header = ["attention", "tier", "recall 256/16 w64", "recall 64/4 w64", "WikiText-2 test ppl (tokens/s)",
              "LRA Text test accuracy (steps/s)", "swapped into softmax's model: test ppl (softmax's)",
              *(f"time / SDPA, T={T} (causal, forward + backward)" for T in Ts),
              f"peak memory / SDPA, T={Ts[-1]} (causal, forward + backward)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    csv_rows = [["attention", "tier", "recall_256_16_mean", "recall_256_16_sd", "recall_256_16_n",
                 "recall_64_4_mean", "recall_64_4_sd", "recall_64_4_n", "wikitext2_test_ppl",
                 "wikitext2_tokens_per_s", "wikitext2_cpu", "lra_text_test_accuracy", "lra_text_steps_per_s",
                 "lra_text_cpu", "swap_test_ppl", "swap_softmax_test_ppl",
                 *(f"speed_ratio_T{T}" for T in Ts), *(f"memory_ratio_T{T}" for T in Ts)]]
    not_run = []
    for r in sorted(rows, key=lambda r: (r["tier"], r["attention"] != "softmax", r["attention"])):
        base = softmax.get(r["tier"])
        missing = NOT_RUN[r["tier"]]
        cpus = {column: base.get(column + "_cpu") if base else None for column in ("wikitext2", "lra")}
        cells = []
        for column in ("recall_256_16", "recall_64_4"):
            if "recall" in r["not_applicable"]:
                cells.append(f"does not apply ({r['not_applicable']['recall']})")
            elif r["tier"] == "quick" and column == "recall_256_16":
                cells.append("full tier only")
            else:
                cells.append(format_cell(r[column], base[column] if base and base is not r else None, missing))
        if "wikitext2" in r["not_applicable"]:
            cells.append(f"does not apply ({r['not_applicable']['wikitext2']})")
        else:
            cells.append(f"{r['wikitext2'][0]:.2f} {throughput(r['wikitext2'][1], ',.0f', r['wikitext2_cpu'], cpus['wikitext2'])}"
                         ", one seed" if r["wikitext2"] else missing)
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
        speed = [f"{r['speed'][T]:.2f}{kind}" if r["speed"].get(T) else missing for T in Ts]
        speed.append(f"{r['memory'][Ts[-1]]:.2f}{kind}" if r["memory"].get(Ts[-1]) else missing)
        if r["tier"] == "full":
            short = ["recall 256/16", "recall 64/4", "WikiText-2", "LRA Text", "swap", *(f"speed T={T}" for T in Ts),
                     f"peak memory T={Ts[-1]}"]
            left = [name for name, cell in zip(short, [*cells, *speed]) if cell == missing]
            if left:
                not_run.append(f"{r['attention']}: {', '.join(left)}")
        tier = r["tier"] + (" (a first look)" if r["tier"] == "quick" else "")
        lines.append("| " + " | ".join([r["attention"], tier, *cells, *speed]) + " |")
        csv_rows.append([r["attention"], r["tier"], *r["recall_256_16"], *r["recall_64_4"],
                         *(r["wikitext2"] or (None, None)), r["wikitext2_cpu"], *(r["lra"] or (None, None)), r["lra_cpu"],
                         *(r["swap"] or (None, None)), *(r.get("speed", {}).get(T) for T in Ts),
                         *(r.get("memory", {}).get(T) for T in Ts)])
    if not_run:
        lines += ["", "Not run (budget): the full tier's cells still to run, by attention "
                  "(`python -m scripts.scorecard <attention> --tier full` runs them):", "",
                  *(f"- {entry}" for entry in not_run)]
    if cell_rows is not None:
        count, hours = new_run_hours(cards, cell_rows)
        lines += ["", f"New runs of the full tier (cells the scorecard ran itself, not the sweeps' archived runs it "
                  f"reused; the swap cell with its softmax model's training): {count} cells, {hours:.1f} h of wall time. "
                  f"The full leaderboard's new runs stop at about {FULL_BUDGET_HOURS} h."]
    from scripts.analysis.published import short_cpu

    full = softmax.get("full") or {}
    on = "; ".join(f"softmax's {name} run on {short_cpu(full[column + '_cpu'])}"
                   for column, name in (("wikitext2", "WikiText-2"), ("lra", "LRA Text")) if full.get(column + "_cpu"))
    lines += ["", f"Speeds in brackets are the training runs' own (2 CPU cores{'; ' + on if on else ''}); a run on "
              "another CPU than softmax's run of the same column names its CPU, and its speed does not compare with "
              "softmax's (the time / SDPA columns do: both calls measured in one process).", ""]
    lines += [*published_rows(cards)]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(csv_rows)  # None as an empty field
    return "\n".join(lines) + "\n", out.getvalue()


def published_rows(cards):
    """Markdown lines: the papers' LRA Text accuracies of the attentions on the leaderboard (or of
    every method when it is empty), as printed in their tables; for reference, not comparable
    (GPU, full-size models and budgets)."""
    from scripts.analysis.published import PUBLISHED_ACCURACY, SHORT_SOURCES, TASKS, ZOOLOGY_NOTE

    names = {card["attention"] for card in cards} | {card["label"] for card in cards}
    text = TASKS.index("text")
    lines = ["Published LRA Text accuracies of these methods (their papers' GPU runs at full size: a reference, not "
             "a row of this leaderboard):", "", "| attention | source | LRA Text test accuracy |", "|---|---|---|"]
    for name, source, accuracies, _ in PUBLISHED_ACCURACY:
        if not names or name in names:
            lines.append(f"| {name} | {SHORT_SOURCES.get(source, source)} | {accuracies[text]:.2f}% |")
    lines += ["", f"Associative recall, published (values read from the paper's plot, not a table): {ZOOLOGY_NOTE}"]
    return lines


def write_leaderboard(results, cell_rows=None):
    """``leaderboard.md`` and ``.csv`` from every card under ``<results>/cards`` (and ``cell_rows``,
    ``cells.jsonl``'s rows by key, for the hours of new runs); returns the .md path."""
    md, csv = tables(read_cards(results), cell_rows)
    write_text(os.path.join(results, "leaderboard.csv"), csv)
    write_text(os.path.join(results, "leaderboard.md"), md)
    return os.path.join(results, "leaderboard.md")
