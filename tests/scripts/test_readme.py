"""README.md a newcomer reads in two minutes (issue 57, item 7): the committed README stays short,
keeps its commands, and its leaderboard is the short version (every header says whether lower or
higher is better, only the columns that apply to most rows); the sentences of what the testbeds say
(``leaderboard FOLDER part=findings``) and the README's rows follow the numbers of the cards they
are computed from (a number changed in a fixture, the sentence follows)."""
import json
import os
import re

from scripts.analysis import published
from scripts.analysis.published import readme
from scripts.scorecard.leaderboard import compact, leaderboard_rows

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README_MAX_BYTES = 10_000  # about 8.3 KB when the short README landed (16.5 KB before it)
COMPACT = "leaderboard results/scorecard part=compact"
FINDINGS = "leaderboard results/scorecard part=findings"


def readme_text():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def block(text, spec):
    """The rendered block of ``text`` whose marker says ``spec``."""
    match = re.search(rf"<!-- rendered: {re.escape(spec)} -->\n(.*?)<!-- end rendered -->", text, flags=re.S)
    assert match, f"README.md has no block {spec!r}"
    return match.group(1)


# ----------------------------------------------------------------------------- the committed README


def test_the_readme_stays_short():
    size = len(readme_text().encode("utf-8"))
    assert size < README_MAX_BYTES, (f"README.md is {size:,} bytes (at most {README_MAX_BYTES - 1:,}): the detail "
                                     "goes to the linked docs")


def test_the_readme_keeps_its_commands_and_figure():
    text = readme_text()
    code = "\n".join(re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M))
    for command in ("pip install", "python train.py", "python eval_ppl.py", "python sample.py", "python -m pytest",
                    "python -m scripts.scorecard"):
        assert command in code, f"README.md's code blocks lack `{command}`"
    assert "![" in block(text, "leaderboard_figure results/scorecard")
    assert block(text, FINDINGS).strip()


def test_every_header_of_the_readmes_leaderboard_says_which_way_is_better():
    table = block(readme_text(), COMPACT)
    header = [h.strip() for h in table.splitlines()[0].strip("|").split("|")]
    assert header[0] == "attention"
    worse = [h for h in header[1:] if "higher is better" not in h and "lower is better" not in h]
    assert not worse, f"headers that do not say whether lower or higher is better: {worse}"
    assert "tier" not in header and not any(h.startswith("swapped") for h in header)
    assert len(header) <= 8 and all(len(h) <= 60 for h in header)
    assert "does not apply" not in table.split("\n\n")[0]  # one short mark, the reasons under the table
    assert "[results/scorecard/leaderboard.md](results/scorecard/leaderboard.md)" in table


def test_the_full_leaderboard_keeps_every_column():
    with open(os.path.join(ROOT, "results", "scorecard", "leaderboard.md"), encoding="utf-8") as f:
        header = f.readline()
    for column in ("tier", "swapped into softmax's model", "time / SDPA, T=4096", "protocol"):
        assert column in header


# ----------------------------------------------------------------------------- fixtures


def recall_cells(role, values, version=2, T=256, N=16):
    return [{"role": role, "version": version, "seed": seed, "learning_rate": 1e-2, "test_accuracy": v,
             "cell": [T, N, 64]} for seed, v in enumerate(values, 1)]


def speed_cells(ratios, version=2):
    """{T: (ratio, q1, q3)} as the leaderboard's call (causal, forward + backward)."""
    return [{"role": "speed", "T": T, "causal": True, "mode": "forward_backward", "version": version, "ratio": r,
             "ratio_q1": q1, "ratio_q3": q3, "memory_ratio": 2.0} for T, (r, q1, q3) in ratios.items()]


def card(label, reference=(), small=(), ppl=(), lra=None, speed=None, version=2, not_applicable=None,
         speed_version=2):
    cells = recall_cells("recall_reference", reference, version) + recall_cells("recall_small", small, version, 64, 4)
    cells += [{"role": "wikitext2", "test_ppl": p, "tokens_per_s": 2000.0, "cpu": "c"} for p in ppl]
    if lra is not None:
        cells.append({"role": "lra", "test_accuracy": lra, "steps_per_s": 3.0, "cpu": "c"})
    cells += speed_cells(speed or {}, speed_version)
    return {"label": label, "attention": label, "tier": "full", "cells": cells,
            "not_applicable": {"swap": "it trains", **(not_applicable or {})}}


CONTROL = {1024: (1.0, 0.96, 1.03), 16384: (1.02, 0.98, 1.05)}


def write_cards(root, *cards):
    folder = root / "results" / "scorecard" / "cards"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    for c in cards:
        (folder / f"{c['label']}_{c['tier']}.json").write_text(json.dumps(c))


def findings(root):
    return published.render(FINDINGS, str(root))


# ----------------------------------------------------------------------------- the sentences


def test_recall_sentences_follow_the_seeds(tmp_path):
    softmax = card("softmax", [0.995, 0.996, 0.997], [0.99, 0.995, 0.999], [126.0, 127.0, 126.5], 0.6, CONTROL)
    linear = card("linear", [0.02, 0.03, 0.025], [0.5, 0.6, 0.55], [125.8], 0.61, CONTROL)
    write_cards(tmp_path, softmax, linear)
    text = findings(tmp_path)
    assert "At 256/16, softmax solved in 3 of 3 and linear solved in 0 of 3 (protocol 2)." in text
    assert "Separable from softmax (seed ranges apart, same protocol): linear at 256/16, linear at 64/4." in text
    linear["cells"][2]["test_accuracy"] = 0.996  # one of linear's 256/16 seeds solves the cell, inside softmax's range
    write_cards(tmp_path, softmax, linear)
    text = findings(tmp_path)
    assert "softmax solved in 3 of 3 and linear solved in 1 of 3 (protocol 2)" in text
    assert "Separable from softmax (seed ranges apart, same protocol): linear at 64/4; not separable: linear at " \
           "256/16." in text
    # a dated protocol is reported as such and compared with nothing of softmax's protocol
    write_cards(tmp_path, softmax, card("linear", [0.02, 0.03, 0.025], [0.5, 0.6, 0.55], version=1))
    text = findings(tmp_path)
    assert "linear solved in 0 of 3 (protocol 1, dated)" in text
    assert "No other attention has a protocol 2 cell yet, so none is compared with softmax's seeds." in text


def test_wikitext2_lra_and_speed_sentences_follow_the_cells(tmp_path):
    softmax = card("softmax", ppl=[126.0, 127.0, 126.5], lra=0.6, speed=CONTROL)
    linear = card("linear", ppl=[125.8], lra=0.61, speed={1024: (0.5, 0.45, 0.55), 16384: (0.98, 0.9, 1.1)})
    write_cards(tmp_path, softmax, linear)
    text = findings(tmp_path)
    assert ("WikiText-2 test perplexity: softmax 126.50 ± 0.50 over 3 seeds; one seed, so not compared with "
            "softmax's seeds: linear (125.80); not ranked: one seed of some.") in text
    assert "LRA Text accuracy: 2 attentions, 60.00-61.00% (not ranked: one seed each)" in text
    assert "1 of 2 cells of the other attentions ranked; faster than SDPA: linear at T = 1,024; not ranked: 1 read " \
           "≈ 1 (their interquartile range includes 1)" in text
    assert "Softmax's 2 control cells (softmax calls SDPA) read 1.00-1.02." in text
    # a second seed far from softmax's: separable; the long call's range now above 1: slower
    linear = card("linear", ppl=[140.0, 141.0], lra=0.61, speed={1024: (0.5, 0.45, 0.55), 16384: (1.3, 1.2, 1.4)})
    write_cards(tmp_path, softmax, linear)
    text = findings(tmp_path)
    assert "softmax 126.50 ± 0.50 over 3 seeds; separable from it: linear; ranked: no two seed ranges overlap." in text
    linear = card("linear", ppl=[126.2, 127.4], lra=0.61, speed={1024: (0.5, 0.45, 0.55), 16384: (1.3, 1.2, 1.4)})
    write_cards(tmp_path, softmax, linear)
    assert ("softmax 126.50 ± 0.50 over 3 seeds; not separable from it (seed ranges overlap): linear (126.20-127.40); "
            "not ranked: seed ranges overlap.") in findings(tmp_path)
    assert "2 of 2 cells of the other attentions ranked; faster than SDPA: linear at T = 1,024; slower than SDPA: " \
           "linear at T = 16,384." in text
    # version 1 cells (one median, no range) are never ranked
    linear = card("linear", ppl=[125.8], speed={1024: (0.5, None, None)}, speed_version=1)
    write_cards(tmp_path, softmax, linear)
    assert "0 of 1 cells of the other attentions ranked; not ranked: 1 are dated version 1 cells" in findings(tmp_path)


# ----------------------------------------------------------------------------- the short table


def test_the_short_leaderboard_keeps_the_columns_that_apply_to_most_rows():
    tree = card("tree", speed=CONTROL, not_applicable={"recall": "inference only", "wikitext2": "inference only",
                                                       "lra": "inference only"})
    tree["not_applicable"].pop("swap")
    tree["cells"].append({"role": "swap", "test_ppl": 129.4, "softmax_test_ppl": 126.0})
    softmax = card("softmax", [0.995, 0.996], [0.99, 0.995], [126.0, 127.0], 0.6, CONTROL)
    linear = card("linear", [0.02, 0.03], [0.5, 0.6], [125.8], 0.61, CONTROL)
    table, notes = compact(leaderboard_rows([softmax, linear, tree]), [1024, 16384])
    header = table.splitlines()[0]
    assert "swapped" not in header and "recall 256/16, seeds solved (higher is better)" in header
    assert "| tree | – | – | – | – |" in table and "–: does not apply (tree: inference only)." in notes
    assert "| linear | 0 of 2 (0.020-0.030), separable | 0 of 2 (0.500-0.600), separable | 125.80 | 61.00% |" in table
    # the swap cell shown once it applies to most rows
    swapped = [dict(tree, label=name, attention=name) for name in ("tree", "tree2")]
    table, _ = compact(leaderboard_rows([linear, *swapped]), [1024, 16384])
    assert "swapped into softmax's model: test ppl (lower is better)" in table.splitlines()[0]
    assert "recall" not in table.splitlines()[0]


# ----------------------------------------------------------------------------- the Results rows


def test_the_readme_recall_row_reads_softmaxs_card(tmp_path):
    softmax = card("softmax", [0.995, 0.996, 0.997], [0.99, 0.985, 0.999])
    softmax["cells"] += [dict(c, role="recall_reference_check", seed=c["seed"] + 3, budget={"max_steps": 3000})
                         for c in recall_cells("recall_reference", [0.995, 0.997])]
    for cell in softmax["cells"]:
        cell["budget"] = {"max_steps": 3000}
    write_cards(tmp_path, softmax)
    row = next(r for r in readme.README_ROWS if r[3] is readme._recall_fields)
    result = readme.readme_row(str(tmp_path), row)[1]
    assert result.startswith("softmax, protocol 2 (3,000 steps): 256/16 solved in 3 of 3 (check seeds: solved in 2 "
                             "of 2); 64/4 solved in 2 of 3;")
    softmax["cells"][0]["test_accuracy"] = 0.5
    write_cards(tmp_path, softmax)
    assert "256/16 solved in 2 of 3" in readme.readme_row(str(tmp_path), row)[1]


def test_the_short_leaderboard_states_the_budgets_its_headers_leave_out(tmp_path):
    """Under the README's leaderboard, one sentence of the cells' budgets (``leaderboard.compact_budgets``),
    read from the cells: the two recall columns once when they agree, each protocol's; WikiText-2's
    and LRA Text's test set scored of the split's. A budget changed in a card, the sentence follows."""
    softmax = card("softmax", [0.995, 0.996, 0.997], [0.99, 0.995, 0.999], [126.0, 127.0, 126.5], 0.6, CONTROL)
    linear = card("linear", [0.02, 0.03, 0.025], [0.5, 0.6, 0.55], [125.8], 0.61, CONTROL, version=1)
    budgets = {2: {"max_steps": 3000, "stop_at": 0.995, "test_sequences": 1000},
               1: {"max_steps": 1500, "stop_at": 0.0, "test_sequences": 1000}}
    for c in (softmax, linear):
        for cell in c["cells"]:
            if cell["role"].startswith("recall"):
                cell["budget"] = dict(budgets[cell["version"]])
            elif cell["role"] == "wikitext2":
                cell["budget"] = {"steps": 650, "tokens_per_step": 4096, "test_tokens": 295588, "split_tokens": 295877}
            elif cell["role"] == "lra":
                cell["budget"] = {"steps": 8000, "test_examples": 4000, "test_size": 25000}
    write_cards(tmp_path, softmax, linear)
    text = published.render(COMPACT, str(tmp_path))
    assert ("Budgets: recall 256/16 and 64/4: protocol 2 3,000 steps (stopped at validation accuracy 0.995) and "
            "1,000 test sequences, protocol 1 1,500 steps and 1,000 test sequences; WikiText-2: 650 steps of 4,096 "
            "tokens, 295,588 of 295,877 test tokens scored; LRA Text: 8,000 steps, 4,000 of 25,000 test reviews.") in text
    for cell in softmax["cells"]:
        if cell["role"] == "recall_small":
            cell["budget"]["test_sequences"] = 4000
    write_cards(tmp_path, softmax, linear)
    text = published.render(COMPACT, str(tmp_path))
    assert ("recall 256/16: protocol 2 3,000 steps (stopped at validation accuracy 0.995) and 1,000 test sequences, "
            "protocol 1 1,500 steps and 1,000 test sequences; recall 64/4: protocol 2 3,000 steps (stopped at "
            "validation accuracy 0.995) and 4,000 test sequences, protocol 1") in text
