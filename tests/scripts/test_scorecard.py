"""python -m scripts.scorecard (issue 45): the attention of docs/scorecard.md (cosFormer), written to a
temporary folder, goes through the quick tier at tiny sizes via --import with no file of the
repository changed, a second call runs nothing, and the protocol decides what counts as the same
cell (archived sweep runs are found). Issue 57: the documented command for an outside attention
leaves the repository consistent (its own folder, a leaderboard merging the committed cards); the
recall rule (a rate per cell picked on seed 0, seeds 1-3 reported) and its pass/fail summary; speed
cells of interleaved pairs with their range and the noise floor from softmax's cells; budgets in
the headers."""
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from scripts.scorecard import testbeds as tb
from scripts.analysis.runs import open_run
from scripts.analysis import publish
from scripts.scorecard.__main__ import (DEFAULT_SECONDS, Scorecard, Store, archived_index, base_folder, cell_commands,
                                        evaluation_args, refresh_documents, shown, work_tree_of)
from scripts.scorecard.leaderboard import (format_recall, format_speed, new_run_hours, noise_floor, read_cards,
                                           recall_column, sections, separable, tables)

ROOT = tb.ROOT
TINY = "--max_iters=3 --eval_interval=3 --eval_iters=1 --batch_size=1"


def docs_example():
    """The Python block of docs/scorecard.md (the user's attention)."""
    with open(os.path.join(ROOT, "docs", "scorecard.md")) as f:
        text = f.read()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def scorecard(*args, **env):
    proc = subprocess.run([sys.executable, "-m", "scripts.scorecard", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def tracked_changes():
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                          text=True).stdout


def test_the_docs_attention_gets_its_quick_row_from_outside_the_repository(tmp_path, imdb_dir):
    """The quick tier end to end on tiny budgets, its LRA data (the IMDB subset) converted into a
    temporary lra_dir, never into the repository's data/lra/files (which may hold the full set)."""
    (tmp_path / "cosformer.py").write_text(docs_example())
    before = tracked_changes()
    args = ["cosformer", f"--import={tmp_path / 'cosformer.py'}", f"--results={tmp_path / 'results'}",
            f"--out_root={tmp_path / 'out'}", f"--train_args={TINY}", f"--lra_dir={tmp_path / 'lra'}",
            "--eval_args=--fraction=0.004", "--speed_T=32,64", "--threads=1"]
    out = scorecard(*args, IMDB_DIR=imdb_dir)
    assert "quick tier" in out and "[11/11]" in out
    assert "[!] lra's full tier needs all of IMDB" in out and "this quick-tier cell is a smoke test" in out
    card = json.loads((tmp_path / "results" / "cards" / "cosformer_quick.json").read_text())
    recall = [c for c in card["cells"] if c["role"] == "recall_small"]
    assert len(recall) == 1 and recall[0]["seed"] == 0 and 0 <= recall[0]["test_accuracy"] <= 1
    speed = [c for c in card["cells"] if c["role"] == "speed"]
    assert {(c["T"], c["causal"], c["mode"]) for c in speed} == {
        (T, causal, mode) for T in (32, 64) for causal in (False, True) for mode in ("forward", "forward_backward")}
    assert all(c["ratio"] > 0 for c in speed)
    memory = [c for c in speed if "peak_mb" in c]  # the leaderboard's call only: causal forward + backward
    assert {(c["T"], c["causal"], c["mode"]) for c in memory} == {(T, True, "forward_backward") for T in (32, 64)}
    assert all(c["peak_mb"] is not None and c["peak_mb"] >= 0 for c in memory)
    board = (tmp_path / "results" / "leaderboard.md").read_text()
    assert "| cosformer | quick (a first look) | full tier only | " in board and "one seed" in board
    rows = (tmp_path / "results" / "cells.jsonl").read_text().splitlines()
    assert len(rows) == 11 + 2  # 2 memory cells; each training cell once, naming its packed run from the start
    assert all(c["source"].startswith(str(tmp_path / "results" / "runs" / "cosformer"))
               for c in card["cells"] if c["role"] in ("recall_small", "wikitext2", "lra"))
    wikitext2 = [c for c in card["cells"] if c["role"] == "wikitext2"]
    assert len(wikitext2) == 1 and wikitext2[0]["test_ppl"] > 1 and wikitext2[0]["tokens_per_s"] > 0
    (lra,) = [c for c in card["cells"] if c["role"] == "lra"]
    assert 0 <= lra["test_accuracy"] <= 1 and lra["steps"] == tb.LRA_ITERS["quick"]
    again = scorecard(*args, IMDB_DIR=imdb_dir)  # every cell has its result: nothing runs, nothing is added
    assert len((tmp_path / "results" / "cells.jsonl").read_text().splitlines()) == 13 and "[11/11]" in again
    os.remove(recall[0]["source"])  # a result whose run is lost is not a result
    lost = scorecard(*args, IMDB_DIR=imdb_dir)
    assert "which is gone; the cell runs again" in lost and os.path.isfile(recall[0]["source"])
    assert len((tmp_path / "results" / "cells.jsonl").read_text().splitlines()) == 14
    assert tracked_changes() == before


def documented_recall_command():
    """The first line of docs/scorecard.md that runs the scorecard's recall testbed for the outside
    attention (cosFormer), as arguments."""
    with open(os.path.join(ROOT, "docs", "scorecard.md")) as f:
        line = next(line for line in f if line.startswith("python -m scripts.scorecard cosformer")
                    and "--testbeds recall" in line)
    return shlex.split(line.split("#")[0])


def results_status():
    """git's view of results/: tracked files changed, and anything new under results/scorecard."""
    def status(*args):
        return subprocess.run(["git", "status", "--porcelain", *args], cwd=ROOT, capture_output=True, text=True).stdout
    return status("--untracked-files=no", "--", "results"), status("--", "results/scorecard")


def test_the_documented_command_for_an_outside_attention_leaves_the_repository_consistent(tmp_path):
    """Issue 57 item 6: the docs' command, run as written from a user's folder (its default results
    and run folders land there; tiny budgets added), writes the card and a leaderboard that merges
    the committed cards with the user's, and leaves the repository as it was: no tracked file under
    results/ changed, nothing new in results/scorecard, no rendered block made stale (``publish.stale``
    is empty in a clean checkout; here: no other than before, since others may be editing the tree)."""
    (tmp_path / "cosformer.py").write_text(docs_example())
    argv = documented_recall_command()
    assert argv[:3] == ["python", "-m", "scripts.scorecard"] and not any(a.startswith("--results") for a in argv)
    stale_before, status_before = publish.stale(), results_status()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, *argv[1:], f"--train_args={TINY}", "--threads=1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    user = tmp_path / "out" / "leaderboard"
    assert "your leaderboard: the committed cards of results/scorecard merged with yours" in proc.stdout
    card = json.loads((user / "cards" / "cosformer_quick.json").read_text())
    assert [(c["role"], c["seed"], c["version"]) for c in card["cells"]] == [("recall_small", 0, tb.RECALL_VERSION)]
    board = (user / "leaderboard.md").read_text()
    assert "| cosformer | quick (a first look) | full tier only | " in board and "| softmax | full | " in board
    assert (tmp_path / "out" / "scorecard" / "cosformer").is_dir()  # its training run, in the user's folder
    assert results_status() == status_before
    assert publish.stale() == stale_before


def test_a_users_leaderboard_merges_the_committed_cards_and_reuses_the_committed_cells(tmp_path):
    """A user's card replaces the committed card of the same attention and tier; the committed cells
    are read (reused where a protocol matches), never written; the committed folder has no base."""
    committed, mine = tmp_path / "committed", tmp_path / "mine"
    for folder, name, value in ((committed, "softmax_full", 1), (committed, "linear_full", 2), (mine, "linear_full", 3),
                                (mine, "x_quick", 4)):
        (folder / "cards").mkdir(parents=True, exist_ok=True)
        (folder / "cards" / f"{name}.json").write_text(json.dumps({"label": name.split("_")[0], "value": value}))
    assert [c["value"] for c in read_cards(str(mine), str(committed))] == [3, 1, 4]
    (committed / "cells.jsonl").write_text(json.dumps({"key": "a", "v": 1}) + "\n" + json.dumps({"key": "b", "v": 1}) + "\n")
    store = Store(str(mine / "cells.jsonl"), base=str(committed / "cells.jsonl"))
    store.add({"key": "b", "v": 2})
    assert {k: r["v"] for k, r in Store(str(mine / "cells.jsonl"), base=str(committed / "cells.jsonl")).rows.items()} \
        == {"a": 1, "b": 2}
    assert len((committed / "cells.jsonl").read_text().splitlines()) == 2
    assert base_folder(str(tmp_path / "out")) == os.path.join(ROOT, "results", "scorecard")  # outside a work tree
    assert base_folder(os.path.join(ROOT, "results", "scorecard")) is None


def test_writing_the_committed_results_re_renders_only_the_blocks_it_made_stale(tmp_path):
    """--results results/scorecard: after the card, the README and docs blocks that differ from their
    renderers are re-rendered, except those already stale before (named and left to their owner)."""
    (tmp_path / ".git").mkdir()
    cards = tmp_path / "results" / "scorecard" / "cards"
    cards.mkdir(parents=True)
    (cards / "softmax_full.json").write_text(json.dumps({
        "label": "softmax", "attention": "softmax", "tier": "full", "not_applicable": {},
        "cells": [{"role": "speed", "T": 1024, "causal": True, "mode": "forward_backward", "version": 2, "ratio": 1.0,
                   "ratio_q1": 0.97, "ratio_q3": 1.04}]}))
    spec = "leaderboard results/scorecard part=floor"
    block = f"<!-- rendered: {spec} -->\nold\n<!-- end rendered -->\n"
    (tmp_path / "README.md").write_text(block)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(block)
    refreshed, left = refresh_documents(str(tmp_path), {(os.path.join("docs", "a.md"), spec)})
    assert refreshed == [("README.md", spec)] and left == [(os.path.join("docs", "a.md"), spec)]
    assert "softmax's 1 control cells" in (tmp_path / "README.md").read_text()
    assert publish.stale(str(tmp_path)) == [(os.path.join("docs", "a.md"), spec)]


def test_an_inference_only_method_is_swapped_into_a_trained_softmax_model(tmp_path):
    args = ["tree:E=0.5", f"--results={tmp_path / 'results'}", f"--out_root={tmp_path / 'out'}", f"--train_args={TINY}",
            "--eval_args=--fraction=0.01", "--speed_T=32", "--threads=1"]
    out = scorecard(*args)
    assert "recall: does not apply (inference only)" in out and "[3/3]" in out
    card = json.loads((tmp_path / "results" / "cards" / "tree_E_0.5_quick.json").read_text())
    assert set(card["not_applicable"]) == {"recall", "wikitext2", "lra"}
    (swap,) = [c for c in card["cells"] if c["role"] == "swap"]
    assert swap["test_ppl"] > 1 and swap["softmax_test_ppl"] > 1 and swap["ratio"] == swap["test_ppl"] / swap["softmax_test_ppl"]
    # the softmax model's run and both evaluations of it, packed where every attention's swap cell finds them
    assert swap["source"] == str(tmp_path / "results" / "runs" / "_swap_base" / os.path.basename(swap["source"]))
    packed = open_run(swap["source"])
    assert packed.has("manifest.json") and packed.has("log.jsonl") and "done:" in packed.read_text("scorecard.log")
    assert sum(packed.has(f"eval_{row['key']}.json") for row in map(json.loads, (
        tmp_path / "results" / "cells.jsonl").read_text().splitlines()) if row["testbed"] == "swap") >= 2
    rows = Store(str(tmp_path / "results" / "cells.jsonl")).rows.values()  # each key's last row
    trained = [r["base_train_s"] for r in rows if r.get("base_train_s")]
    assert len(trained) == 1 and trained[0] > 0  # training the model is recorded once, apart from a cell's time
    speed = [c for c in card["cells"] if c["role"] == "speed"]
    assert {c["mode"] for c in speed} == {"forward"}  # it does not train
    board = (tmp_path / "results" / "leaderboard.md").read_text()
    assert "| tree:E=0.5 | quick (a first look) | does not apply (inference only) |" in board


def test_reuse_only_fills_a_card_from_archived_runs_and_runs_nothing(tmp_path):
    """--reuse_only: the archived WikiText-2 and LRA Text runs of linear fill its card, the cells that
    would need a run are reported and left, and the leaderboard has a full-tier row for every
    attention config, its missing cells marked "not run (budget)" and listed."""
    out = scorecard("linear", "--tier=full", "--reuse_only", f"--results={tmp_path / 'results'}",
                    f"--out_root={tmp_path / 'out'}")
    assert "recall: recall_T256_N16_d64_lr0.001_s0: needs a new run" in out  # no protocol 2 run of linear archived
    assert not (tmp_path / "out").exists()  # nothing trained, nothing timed
    card = json.loads((tmp_path / "results" / "cards" / "linear_full.json").read_text())
    assert {"wikitext2", "lra"} <= {c["role"] for c in card["cells"]}
    assert not {"recall_reference", "recall_small"} & {c["role"] for c in card["cells"]}
    assert all(c["source"].startswith("results/") for c in card["cells"] if c["role"] in ("wikitext2", "lra"))
    board = (tmp_path / "results" / "leaderboard.md").read_text()
    configs = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "configs", "attention")) if f.endswith(".py"))
    for label in configs:
        assert f"| {label} | full | " in board
    assert "- linear: recall 256/16, recall 64/4" in board
    assert "| tree | full | does not apply (inference only) |" in board


def test_the_protocol_is_the_resolved_configuration():
    spec = tb.Spec("softmax")
    argv = [tb.RECALL_CONFIG, *spec.layers("recall"), *tb.recall_cell_args(tb.RECALL_SMALL, 3e-3, 0)]
    key, fields = tb.protocol(tb.resolved_config(argv), "recall", tb.RECALL_VERSION)
    same, _ = tb.protocol(tb.resolved_config(argv + ["--num_threads=1", "--out_dir=elsewhere"]), "recall",
                          tb.RECALL_VERSION)
    assert same == key and fields["block_size"] == 64 and fields["token_shift"] is False
    for change in ("--seed=1", "--max_iters=10", "--attention.implementation='reference'"):
        assert tb.protocol(tb.resolved_config(argv + [change]), "recall", tb.RECALL_VERSION)[0] != key, change
    assert tb.protocol(tb.resolved_config(argv), "recall", tb.RECALL_VERSION + 1)[0] != key
    # an attention parameter left at its default and the same parameter given explicitly are one protocol
    fastmax = [tb.RECALL_CONFIG, "--attention=fastmax", "--attention.p=2"]
    explicit = fastmax + [f"--attention.normalization={tb.attention.accepted_params('fastmax')['normalization']!r}"]
    assert tb.protocol(tb.resolved_config(fastmax), "recall", 1)[0] == \
        tb.protocol(tb.resolved_config(explicit), "recall", 1)[0]


def test_archived_sweep_runs_stand_in_for_their_cells():
    """The archived runs of the protocol before RECALL_VERSION 2 match the cells of its ablation
    layer (configs/recall/no_warmup.py: their optimizer settings), not the current protocol's."""
    folder = "results/recall/noshift_256_16"
    index = archived_index((folder,))
    assert index and all(path.startswith(folder) for path, _ in index.values())
    spec = tb.Spec("softmax")
    cell = tb.recall_cell_args(tb.RECALL_REFERENCE, 1e-3, 0)
    current = [tb.RECALL_CONFIG, *spec.layers("recall"), *cell]
    assert tb.protocol(tb.resolved_config(current), "recall", tb.RECALL_VERSION)[0] not in index
    argv = [tb.RECALL_CONFIG, "configs/recall/no_warmup.py", *spec.layers("recall"), *cell]
    key, _ = tb.protocol(tb.resolved_config(argv), "recall", tb.RECALL_VERSION)
    path, run = index[key]
    assert os.path.basename(path) == "softmax_T256_N16_d64_lr0.001_s0.tar.xz" and "test_accuracy" in run.final_metrics


def test_runs_older_than_a_methods_default_change_are_not_reused():
    """fastmax's LRA Text run predates normalization="paper" (Fastmax.defaults_date): its
    configuration reads the same as today's, so only the date tells them apart."""
    index = archived_index(tb.LRA_ARCHIVES, "lra")
    names = {os.path.basename(path) for path, _ in index.values()}
    assert "text_softmax_cpu.tar.xz" in names and "text_fastmax2_cpu.tar.xz" not in names
    assert tb.attention.attention_class("fastmax").defaults_date is not None


def test_a_full_tier_cell_needs_the_protocols_data(tmp_path, imdb_dir):
    """LRA Text trains without an error on the tests' IMDB subset; the full tier refuses it with
    one sentence (the sizes found, what to set), and an archived run whose data summary shows
    other data does not stand in for the cell."""
    assert tb.data_problem("lra", {**tb.FULL_DATA["lra"][0], "source": "aclImdb tarball"}) is None
    assert tb.data_problem("recall", {}) is None
    proc = subprocess.run([sys.executable, "-m", "scripts.scorecard", "fastmax1", "--tier=full", "--testbeds=lra",
                           f"--results={tmp_path / 'results'}", f"--out_root={tmp_path / 'out'}",
                           "--train_args=--seed=4242", f"--lra_dir={tmp_path / 'lra'}"],  # a seed nothing archived has
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "IMDB_DIR": imdb_dir})
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
    assert re.fullmatch(r"error: lra's full tier needs all of IMDB, 25,000 train and 25,000 test reviews \(set "
                        r"IMDB_DIR.*\); the prepared data \(aclImdb directory\) have train_size \d+, val_size \d+, "
                        r"test_size \d+", errors[0]), errors[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("ckpt.pt"))

    archived = next(run for path, run in archived_index(tb.LRA_ARCHIVES, "lra").values()
                    if path.endswith("text_softmax_cpu.tar.xz"))
    for name, sizes in (("full", tb.FULL_DATA["lra"][0]), ("subset", {"train_size": 180, "val_size": 20,
                                                                       "test_size": 200})):
        run_dir = tmp_path / "archive" / name
        run_dir.mkdir(parents=True)
        (run_dir / "final_metrics.json").write_text(json.dumps({**archived.final_metrics, "data": sizes}))
        (run_dir / "manifest.json").write_text(json.dumps(archived.manifest))
    found = {os.path.basename(path) for path, _ in archived_index((str(tmp_path / "archive"),), "lra").values()}
    assert found == {"full"}


def test_spec_forms_and_what_applies():
    assert tb.Spec("fastmax2").layers("recall") == ["configs/attention/fastmax2.py"]
    assert tb.Spec("longformer").layers("recall") == ["configs/recall/attention/longformer.py"]
    assert tb.Spec("fastmax:p=2").layers("recall") == ["--attention=fastmax", "--attention.p=2"]
    assert tb.applies("recall", tb.Spec("reformer")) == "not exactly causal"
    assert tb.applies("recall", tb.Spec("tree")) == "inference only"
    assert tb.applies("speed", tb.Spec("tree")) is None
    assert tb.applies("lra", tb.Spec("reformer")) is None and tb.applies("swap", tb.Spec("softmax"))
    assert tb.Spec("dense").layers("lra") == ["configs/attention/dense.py", "configs/lra/dense/text_cpu.py"]
    # scripts/sweeps/lra.sh layers every task by the same rule
    assert tb.Spec("dense").lra_layers("configs/lra/image_cpu.py") == ["configs/attention/dense.py",
                                                                      "configs/lra/dense/image_cpu.py"]
    assert tb.Spec("softmax").lra_layers("configs/lra/listops.py") == ["configs/attention/softmax.py"]


def column(values, version=2, check=()):
    return {"version": version, "seeds": list(range(1, len(values) + 1)), "values": list(values),
            "check": list(check), "budgets": []}


def test_recall_cells_count_solved_seeds_and_separate_only_by_ranges():
    """Seeds that solve the task or stay on the plateau: "solved in k of n" beside mean ± sd and the
    per-seed values; "separable from softmax" only where the two ranges do not overlap (issue 57:
    softmax 0.999 / 0.980 / 0.025 left every method "not separable" under the old 2-sd rule, DANet's
    0.013 ± 0.001 included), never across protocols or with one seed."""
    softmax = column([0.999, 0.980, 0.025])
    assert format_recall(column([0.5]), softmax) == "0.500, one seed (not solved)"
    assert format_recall(column([0.014, 0.012, 0.012]), softmax) == (
        "solved in 0 of 3; 0.013 ± 0.001 (0.014 / 0.012 / 0.012), separable from softmax")
    assert not format_recall(column([0.030, 0.029, 0.023]), softmax).endswith("softmax")  # 0.023-0.030 overlaps
    assert format_recall(column([0.014, 0.012, 0.012], version=1), softmax).endswith("(0.014 / 0.012 / 0.012)")
    assert format_recall(column([0.995, 0.991]), column([0.2, 0.3])).startswith("solved in 2 of 2; ")
    assert separable([0.1, 0.2], [0.3, 0.9]) and not separable([0.1], [0.9, 0.95]) and not separable([0.1, 0.5], [0.4, 1])
    baseline = column([0.996, 0.995, 0.992], check=[(4, 0.997), (5, 0.98)])
    assert format_recall(baseline, baseline, mark_version=True) == (
        "solved in 3 of 3; 0.994 ± 0.002 (0.996 / 0.995 / 0.992); check seeds 4, 5: solved in 1 of 2 "
        "(0.997 / 0.980) (protocol 2)")
    assert format_recall(None) == "not run"


def recall_card(label, rows, **extra):
    """A card of recall cells from (role, lr, seed, test accuracy[, version])."""
    cells = [{"role": role, "learning_rate": lr, "seed": seed, "test_accuracy": acc, "version": v[0] if v else 2,
              "cell": [64, 4, 64]} for role, lr, seed, acc, *v in rows]
    return {"label": label, "attention": label, "tier": "full", "not_applicable": {"swap": "it trains"},
            "cells": cells, **extra}


def test_a_recall_column_reports_the_seeds_its_protocol_reports():
    """Protocol 2: the cell's own pick, seeds 1-3, the selection runs left out, softmax's check seeds
    apart; protocol 1 (the committed cards): the one pick with its selection seed, as published."""
    v2 = recall_card("x", [("recall_small_selection", 1e-3, 0, 0.1), ("recall_small_selection", 3e-3, 0, 0.99),
                           ("recall_small", 3e-3, 1, 0.98), ("recall_small", 3e-3, 2, 0.995), ("recall_small", 3e-3, 3, 0.2),
                           ("recall_small_check", 3e-3, 4, 0.999)],
                     recall_rates={"recall_small": 3e-3})
    col = recall_column(v2, "recall_small")
    assert col["seeds"] == [1, 2, 3] and col["values"] == [0.98, 0.995, 0.2] and col["check"] == [(4, 0.999)]
    v1 = recall_card("y", [("recall_small_selection", 1e-2, 0, 0.5, 1), ("recall_small_selection", 1e-3, 0, 0.1, 1),
                           ("recall_small", 1e-2, 1, 0.6, 1)], recall_rate=1e-2)
    assert recall_column(v1, "recall_small")["values"] == [0.5, 0.6] and recall_column(v1, "recall_reference") is None
    mixed = recall_card("z", [*((r, lr, s, a, 1) for r, lr, s, a in [("recall_small", 1e-2, 1, 0.6)]),
                              ("recall_small", 1e-3, 1, 0.9)], recall_rate=1e-2, recall_rates={"recall_small": 1e-3})
    assert recall_column(mixed, "recall_small")["values"] == [0.9]  # the newest protocol's cells only


class FakeRows:
    """Stands in for Scorecard.recall_run: records (role, cell, lr, seed) and returns a row whose
    validation accuracy is a table's, so that the pick is known."""

    def __init__(self, val):
        self.val, self.calls = val, []

    def __call__(self, role, cell, lr, seed):
        self.calls.append((role, cell, lr, seed))
        return {"val_accuracy": self.val[cell][lr] if seed == tb.RECALL_SELECTION_SEED else 0.5}


def test_the_full_tier_picks_each_cells_rate_on_seed_0_and_reports_seeds_1_to_3(tmp_path):
    """At 256/16 and at 64/4 separately: the three rates on seed 0, the best validation accuracy
    (ties: the smaller rate), then seeds 1-3 at that cell's pick; softmax adds seeds 4 and 5."""
    val = {tb.RECALL_REFERENCE: {1e-3: 0.02, 3e-3: 0.02, 1e-2: 0.01},  # a tie at chance: the smaller rate
           tb.RECALL_SMALL: {1e-3: 0.5, 3e-3: 0.9, 1e-2: 0.95}}
    args = type("Args", (), {"results": str(tmp_path / "results"), "tier": "full", "out_root": str(tmp_path / "out"),
                             "train_args": [], "imports": [], "eval_args": []})()
    for label, check in (("linear", ()), ("softmax", tb.RECALL_CHECK_SEEDS)):
        card = Scorecard(tb.Spec(label), args)
        card.recall_run = fake = FakeRows(val)
        card.recall()
        assert card.card["recall_rates"] == {"recall_reference": 1e-3, "recall_small": 1e-2}
        for role, cell, lr in (("recall_reference", tb.RECALL_REFERENCE, 1e-3), ("recall_small", tb.RECALL_SMALL, 1e-2)):
            calls = [c for c in fake.calls if c[1] == cell]
            assert calls == [*((f"{role}_selection", cell, r, 0) for r in tb.RECALL_RATES),
                             *((role, cell, lr, s) for s in (1, 2, 3)), *((f"{role}_check", cell, lr, s) for s in check)]
        per_cell = len(tb.RECALL_RATES) + 3 + len(check)
        assert [n for _, n in card.kinds("recall")] == [per_cell, per_cell]
    assert tb.pick_rate([0.3, 0.3, 0.2]) == 1e-3 and tb.pick_rate([0.1, 0.2, 0.9]) == 1e-2


def test_the_recall_pick_prefers_the_earliest_early_stop_then_the_best_validation_accuracy():
    """Runs that stopped at stop_at beat runs that did not, whatever their accuracy; among them the
    earliest stop wins (a 4th-decimal accuracy difference above the threshold is noise); without an
    early stop the best validation accuracy; rows give their step through ``stopped_step``."""
    assert tb.pick_rate([0.9955, 0.9962, 0.9958], stopped_at=[None, 1800, 1100]) == 1e-2
    assert tb.pick_rate([0.9980, 0.9951, 0.9952], stopped_at=[None, 1200, 1200]) == 1e-2  # same step: accuracy
    assert tb.pick_rate([0.9980, 0.9952, 0.9952], stopped_at=[None, 1200, 1200]) == 3e-3  # full tie: smaller rate
    assert tb.pick_rate([0.99, 0.98, 0.97], stopped_at=[None, None, None]) == 1e-3
    budget = {"max_steps": 3000, "stop_at": 0.995}
    assert tb.stopped_step({"budget": {**budget, "steps_run": 1100}}) == 1100
    assert tb.stopped_step({"budget": {**budget, "steps_run": 3000}}) is None  # ran its whole budget
    assert tb.stopped_step({"budget": {**budget, "stop_at": 0.0, "steps_run": 1100}}) is None
    assert tb.stopped_step({"budget": budget}) is None and tb.stopped_step({}) is None
    assert tb.shell_values()["recall_seeds"] == "1 2 3"  # the sweep script reports the same seeds


def test_interleaved_pairs_alternate_the_two_calls_and_summarise_their_ratios():
    """A B A B ...: each ratio is a pair's, taken in turn (fake calls, no clock); the cell is their
    median with the inclusive quartiles."""
    order = []
    own = iter([2.0, 2.2, 1.8, 2.0, 4.0, 2.0, 2.1])  # a slow spell in pair 5 hits both samples
    base = iter([1.0, 1.0, 1.0, 1.0, 2.0, 0.8, 1.0])

    def first():
        order.append("A")
        return next(own)

    def second():
        order.append("B")
        return next(base)

    ratios = tb.interleaved_ratios(first, second, 7)
    assert order == ["A", "B"] * 7 and ratios == [2.0, 2.2, 1.8, 2.0, 2.0, 2.5, 2.1]
    assert tb.ratio_summary(ratios) == pytest.approx((2.0, 2.0, 2.15))
    assert tb.ratio_summary([1.5]) == (1.5, 1.5, 1.5)
    assert tb.SPEED_PAIRS >= 7 and tb.SPEED_VERSION >= 2


def test_the_speed_cell_measures_interleaved_pairs_after_a_warm_up(monkeypatch):
    """``interleaved_cell`` with its samplers faked: one warm-up call each before the pairs (the
    samplers are made first), SPEED_PAIRS pairs, the medians of each side's samples."""
    from scripts.scorecard import __main__ as scorecard_main

    made, times = [], {"m": iter([3.0, 3.0, 3.3, 2.7, 3.0, 3.0, 3.0]), "s": iter([1.0] * 7)}

    def fake_sampler(method, mode, causal, T, inputs, grad_out):
        made.append(method)
        return lambda: next(times[method])

    monkeypatch.setattr(scorecard_main, "sampler", fake_sampler)
    ratios, own_s, sdpa_s = scorecard_main.interleaved_cell("m", "s", "forward", True, 16)
    assert made == ["m", "s"] and len(ratios) == tb.SPEED_PAIRS and own_s == 3.0 and sdpa_s == 1.0


def test_speed_cells_show_their_range_and_the_floor_comes_from_softmaxs_cells():
    v2 = {"version": 2, "ratio": 0.82, "ratio_q1": 0.78, "ratio_q3": 0.86}
    assert format_speed(v2, "not run") == "0.82 (0.78-0.86)"
    assert format_speed({**v2, "ratio": 0.98, "ratio_q1": 0.95, "ratio_q3": 1.03}, "x", "not causal") == \
        "≈ 1 (0.95-1.03, not causal)"
    assert format_speed({"ratio": 1.48}, "x") == "1.48 (v1)" and format_speed(None, "not run") == "not run"

    def card(*cells):
        return {"label": "softmax", "tier": "full", "cells": [{"role": "speed", **c} for c in cells]}
    floor = noise_floor([card({**v2, "ratio": 0.97, "ratio_q1": 0.95, "ratio_q3": 1.02},
                              {**v2, "ratio": 1.05, "ratio_q1": 1.01, "ratio_q3": 1.08}, {"ratio": 1.48})])
    assert "softmax's 2 control cells" in floor and "median ratios 0.97-1.05" in floor
    assert "interquartile ranges within 0.95-1.08, 1 of 2 of them including 1" in floor and "1 ± 0.08" in floor
    old = noise_floor([card({"ratio": 0.79}, {"ratio": 1.48})])
    assert "version 1" in old and "0.79-1.48" in old and "1 ± 0.48" in old and "pending" in old


def test_headers_state_each_columns_budget_and_softmaxs_seeds():
    """Budgets from the cells (their runs, or the card's record): WikiText-2 steps and test tokens,
    LRA Text's test reviews of the split, recall's steps and rule by protocol; softmax's WikiText-2
    cell over its seeds."""
    wt = {"steps": 650, "tokens_per_step": 4096, "test_tokens": 295588, "split_tokens": 295877}

    def card(label, ppls, recall_version=2):
        cells = [{"role": "wikitext2", "test_ppl": p, "tokens_per_s": 2000.0, "cpu": "c", "budget": wt} for p in ppls]
        cells.append({"role": "lra", "test_accuracy": 0.6, "steps_per_s": 3.0, "cpu": "c",
                      "budget": {"steps": 8000, "test_examples": 4000, "test_size": 25000}})
        cells += [{"role": "recall_small", "learning_rate": 1e-2, "seed": s, "test_accuracy": 0.99, "cell": [64, 4, 64],
                   "version": recall_version, "budget": {"max_steps": 3000, "stop_at": 0.995, "test_sequences": 1000}}
                  for s in (1, 2, 3)]
        return {"label": label, "attention": label, "tier": "full", "not_applicable": {"swap": "it trains"},
                "cells": cells}
    table = sections([card("softmax", [126.02, 127.22, 126.89]), card("linear", [125.80])])["table"]
    header = table.splitlines()[0]
    assert "650 steps of 4,096 tokens; 295,588 of 295,877 test tokens scored; one seed, softmax mean ± sd of 3" in header
    assert "8,000 steps; 4,000 of 25,000 test reviews; one seed" in header
    assert ("protocol 2: 3,000 steps (stopped at validation accuracy 0.995), 1,000 test sequences; seeds 1-3 at the "
            "rate seed 0 picked for this cell") in header and "lower is better" in header and "higher is better" in header
    assert "| 126.71 ± 0.62 (n = 3: 126.02 / 127.22 / 126.89) (2,000) |" in table
    assert "| 125.80 (2,000), one seed |" in table
    dated = sections([card("softmax", [126.0], recall_version=1)])["table"].splitlines()[0]
    assert "protocol 1 (dated): 3,000 steps" in dated and "protocol 2 cells pending" in dated


def test_the_committed_lra_cells_used_4000_of_the_25000_test_reviews():
    """Read from the committed cells' runs (cards made before budgets were recorded)."""
    header = sections(read_cards(os.path.join(ROOT, "results", "scorecard")), root=ROOT)["table"].splitlines()[0]
    assert "4,000 of 25,000 test reviews" in header and "295,588 of 295,877 test tokens" in header


def test_time_estimates_come_from_cells_of_the_same_tier(tmp_path):
    """A quick LRA cell (hundreds of steps) is not estimated from full ones (8,000 steps): a row
    records its tier, a row without one counts as the full tier's, and before a tier's first cell
    the estimate is that tier's default."""
    path = tmp_path / "cells.jsonl"
    path.write_text(json.dumps({"key": "a", "testbed": "lra", "wall_s": 3000.0}) + "\n")  # an older row: full
    quick = Store(str(path), "quick")
    assert quick.seconds("lra") is None
    quick.add({"key": "b", "testbed": "lra", "wall_s": 200.0})
    assert json.loads(path.read_text().splitlines()[-1])["tier"] == "quick"
    assert quick.seconds("lra") == 200.0
    assert Store(str(path), "full").seconds("lra") == 3000.0
    assert DEFAULT_SECONDS["quick"]["lra"] < DEFAULT_SECONDS["full"]["lra"]


def test_a_speed_cells_memory_row_adds_to_the_speed_estimate_not_to_the_count(tmp_path):
    """Memory is measured once per T, beside that T's time cells: its rows add their time to the
    estimate of a speed cell, they do not count as speed cells of their own."""
    store = Store(str(tmp_path / "cells.jsonl"), "full")
    for key, wall in (("t1", 2.0), ("t2", 4.0), ("t3", 6.0)):
        store.add({"key": key, "testbed": "speed", "protocol": {"T": 1024}, "wall_s": wall})
    store.add({"key": "m", "testbed": "speed", "protocol": {"T": 1024, "measure": "peak_memory"}, "wall_s": 30.0})
    assert store.seconds("speed") == 4.0 + 30.0 / 3


def test_the_plan_estimates_each_kind_of_cell_from_its_own_measured_times(tmp_path):
    """A 256/16 recall cell costs several 64/4 ones and one attention several others: the plan's
    estimate takes the median of this attention's cells of the same shape, else every attention's
    of that shape (never a median over shapes)."""
    (tmp_path / ".git").mkdir()  # a work tree of its own: no committed cells to estimate from
    store = Store(str(tmp_path / "cells.jsonl"), "full")
    def recall_row(key, attention, cell, wall):
        cfg = tb.resolved_config([tb.RECALL_CONFIG, *tb.Spec(attention).layers("recall")])
        store.add({"key": key, "testbed": "recall", "wall_s": wall,
                   "protocol": {"attention": attention, "attention_params": cfg["attention_params"],
                                "block_size": cell[0], "recall_pairs": cell[1], "n_embd": cell[2]}})
    recall_row("b1", "bigbird", tb.RECALL_REFERENCE, 600.0)
    recall_row("b2", "bigbird", tb.RECALL_SMALL, 120.0)
    recall_row("p1", "performer", tb.RECALL_REFERENCE, 1500.0)
    recall_row("l1", "linear", tb.RECALL_SMALL, 60.0)
    def planned_minutes(spec):
        out = scorecard(spec, "--tier=full", "--testbeds=recall", "--plan", f"--results={tmp_path}")
        return int(out.split("at most about ")[1].split(" min")[0])
    per_cell = len(tb.RECALL_RATES) + len(tb.RECALL_SEEDS)  # each cell picks its own rate
    assert planned_minutes("bigbird") == round(per_cell * (600 + 120) / 60)
    assert planned_minutes("performer") == round(per_cell * (1500 + 90) / 60)  # 64/4: all attentions' median


def test_the_quick_tier_evaluates_wikitext2_on_part_of_the_test_split():
    """The quick tier's WikiText-2 cell scores a fraction of the test split (a different protocol
    from the full tier's, so neither stands in for the other); testbeds evaluated by train.py
    itself have no eval_ppl.py arguments."""
    full, quick = evaluation_args("wikitext2", "full"), evaluation_args("wikitext2", "quick")
    assert full == list(tb.WIKITEXT2_EVAL)
    assert quick == [*tb.WIKITEXT2_EVAL, f"--fraction={tb.WIKITEXT2_QUICK_FRACTION}"]
    assert evaluation_args("wikitext2", "quick", ["--fraction=0.01"])[-1] == "--fraction=0.01"  # --eval_args last
    assert evaluation_args("recall", "quick") == evaluation_args("lra", "full") == []


def test_a_stopped_training_cell_continues_from_its_checkpoint(tmp_path):
    """The commands of a training cell from the state of its folder: a new run, a stopped one
    resumed (a checkpoint and no final metrics), nothing to train for one that finished."""
    folder = tmp_path / "recall_T64_N4_d64_lr0.003_s0_0123abcd"
    folder.mkdir()
    args = ["configs/recall/mqar.py", "--num_threads=1"]
    commands, started = cell_commands(str(folder), args)
    assert not started and len(commands) == 1 and commands[0][1:] == ["train.py", *args, f"--out_dir={folder}"]
    (folder / "ckpt.pt").write_bytes(b"")
    commands, started = cell_commands(str(folder), args)
    assert started and commands[0][-2:] == [f"--out_dir={folder}", "--init_from=resume"]
    (folder / "final_metrics.json").write_text("{}")
    assert cell_commands(str(folder), args) == ([], True)


def test_sources_are_paths_of_the_repository_that_holds_the_results(tmp_path):
    """A card made by a checkout elsewhere (a clean worktree) writing into a repository's results/
    names its runs as that repository's paths, never as one machine's absolute paths; results
    outside any work tree fall back to this repository's root (absolute paths outside it)."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    results = repo / "results" / "scorecard"
    results.mkdir(parents=True)
    assert work_tree_of(str(results)) == str(repo)
    run = results / "runs" / "softmax" / "recall_x.tar.xz"
    assert shown(str(run), str(repo)) == "results/scorecard/runs/softmax/recall_x.tar.xz"
    assert work_tree_of(str(tmp_path / "elsewhere")) == ROOT
    assert shown(str(tmp_path / "x"), ROOT) == str(tmp_path / "x")
    # the committed results: every cell's result (the last row of its key) and every card name files
    # of this repository (a row naming a run folder was superseded by the row naming its packed run)
    sources = [row["source"] for row in Store(os.path.join(ROOT, "results", "scorecard", "cells.jsonl")).rows.values()]
    cards = os.path.join(ROOT, "results", "scorecard", "cards")
    for name in os.listdir(cards):
        if name.endswith("_full.json"):
            with open(os.path.join(cards, name)) as f:
                sources += [cell["source"] for cell in json.load(f)["cells"]]
    wrong = [s for s in sources if s != "measured" and (os.path.isabs(s) or not os.path.exists(os.path.join(ROOT, s)))]
    assert len(sources) > 100 and not wrong, wrong[:3]


def test_a_training_speed_names_its_cpu_when_softmaxs_ran_on_another():
    """Tokens/s and steps/s come from each run's own training, and archived runs trained on
    different machines: a speed from another CPU than softmax's run of the column says so."""
    def card(label, cpu, tokens_per_s):
        return {"label": label, "attention": label, "tier": "full", "not_applicable": {"swap": "it trains"},
                "cells": [{"role": "wikitext2", "test_ppl": 126.0, "tokens_per_s": tokens_per_s, "cpu": cpu}]}
    md, csv = tables([card("softmax", "Intel(R) Xeon(R) Processor", 2272.0), card("linear", "Intel(R) Xeon(R) Processor", 2155.0),
                      card("bigbird", "AMD EPYC", 820.0)])
    assert "| 126.00 (2,155), one seed |" in md.split("| linear | full |")[1].split("\n")[0]
    assert "| 126.00 (820 on AMD EPYC), one seed |" in md.split("| bigbird | full |")[1].split("\n")[0]
    assert "softmax's WikiText-2 run on Intel Xeon" in md
    header, *rows = csv.splitlines()
    bigbird = dict(zip(header.split(","), next(r for r in rows if r.startswith("bigbird,")).split(",")))
    assert bigbird["wikitext2_cpu"] == "AMD EPYC" and float(bigbird["wikitext2_tokens_per_s"]) == 820.0


def test_the_hours_of_new_runs_count_the_scorecards_own_runs_and_the_swap_models_training():
    """The full leaderboard's new runs stop at a budget: the hours under the table sum the wall time
    of the full cards' cells that the scorecard ran (packed under results/scorecard/ or measured), a
    swap cell with its softmax evaluation and the softmax model's training, never a sweep's archived
    run that a cell reused nor a quick card's cells."""
    cells = {"r": {"key": "r", "source": "results/scorecard/runs/x/recall.tar.xz", "wall_s": 1800.0},
             "a": {"key": "a", "source": "results/recall/noshift_256_16/x.tar.xz"},  # archived: no wall time
             "s": {"key": "s", "source": "measured", "wall_s": 360.0},
             "w": {"key": "w", "source": "results/scorecard/runs/_swap_base/b.tar.xz", "wall_s": 400.0},
             "b": {"key": "b", "source": "results/scorecard/runs/_swap_base/b.tar.xz", "wall_s": 440.0,
                   "base_train_s": 3600.0},
             "q": {"key": "q", "source": "results/scorecard/runs/x/quick.tar.xz", "wall_s": 900.0}}
    full = {"label": "x", "attention": "x", "tier": "full", "not_applicable": {},
            "cells": [{"role": "recall_small", "key": "r"}, {"role": "recall_small", "key": "a"},
                      {"role": "speed", "key": "s"}, {"role": "swap", "key": "w", "softmax_key": "b"}]}
    quick = {**full, "tier": "quick", "cells": [{"role": "recall_small", "key": "q"}]}
    count, hours = new_run_hours([full, quick], cells)
    assert count == 4 and hours == (1800 + 360 + 400 + 440 + 3600) / 3600
    md = tables([{**full, "cells": []}], cells)[0]
    assert "New runs of the full tier" in md and "0 cells, 0.0 h" in md
    assert "New runs of the full tier" not in tables([{**full, "cells": []}])[0]


def test_a_swap_cells_estimate_adds_training_its_softmax_model_until_it_is_trained(tmp_path):
    (tmp_path / ".git").mkdir()  # a work tree of its own: no committed cells to estimate from
    store = Store(str(tmp_path / "results" / "cells.jsonl"), "full")
    store.add({"key": "e", "testbed": "swap", "protocol": {}, "wall_s": 100.0, "base_train_s": 1200.0})
    args = type("Args", (), {"results": str(tmp_path / "results"), "tier": "full", "out_root": str(tmp_path / "out"),
                             "train_args": [], "imports": [], "eval_args": []})()
    card = Scorecard(tb.Spec("tree"), args)
    assert card.estimate("swap") == 100.0 + 1200.0
    base = card.swap_base()[3]
    os.makedirs(base)
    open(os.path.join(base, "ckpt.pt"), "wb").close()
    assert card.estimate("swap") == 100.0


def test_every_recall_cell_trains_and_tests_on_as_many_tokens():
    """64/4 gets 4x the reference cell's sequences (the same tokens and queries per split); the
    reference cell keeps the config's sizes, so its arguments do not name them; the sweep script
    reads the same definition."""
    assert tb.recall_cell_sizes(256) == tb.RECALL_REFERENCE_SIZES
    assert tb.recall_cell_sizes(64) == {"train": 80000, "val": 4000, "test": 4000}
    for length in (64, 256):
        sizes = tb.recall_cell_sizes(length)
        assert all(n * length == tb.RECALL_REFERENCE_SIZES[split] * 256 for split, n in sizes.items())
    assert not any(a.startswith("--recall_sizes") for a in tb.recall_cell_args(tb.RECALL_REFERENCE, 1e-3, 0))
    small = tb.resolved_config([tb.RECALL_CONFIG, *tb.recall_cell_args(tb.RECALL_SMALL, 1e-3, 0)])
    assert small["recall_sizes"] == {"train": 80000, "val": 4000, "test": 4000}
    with pytest.raises(ValueError, match="must divide the reference cell's 256; got 100"):
        tb.recall_cell_sizes(100)
    assert tb.main(["recall_sizes", "64"]) == 0 and tb.main(["recall_sizes", "100"]) == 2
