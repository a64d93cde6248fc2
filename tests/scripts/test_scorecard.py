"""python -m scripts.scorecard (issue 45): the attention of docs/scorecard.md (cosFormer), written to a
temporary folder, goes through the quick tier at tiny sizes via --import with no file of the
repository changed, a second call runs nothing, and the protocol decides what counts as the same
cell (archived sweep runs are found)."""
import json
import os
import re
import subprocess
import sys

from scripts.scorecard import testbeds as tb
from scripts.analysis.runs import open_run
from scripts.scorecard.__main__ import (DEFAULT_SECONDS, Scorecard, Store, archived_index, cell_commands, evaluation_args,
                                        shown, work_tree_of)
from scripts.scorecard.leaderboard import format_cell, new_run_hours, tables

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
    assert "speed: T=1024 causal=False forward: needs a new run" in out  # timings are never archived
    assert not (tmp_path / "out").exists()  # nothing trained, nothing timed
    card = json.loads((tmp_path / "results" / "cards" / "linear_full.json").read_text())
    assert {"wikitext2", "lra"} <= {c["role"] for c in card["cells"]}
    assert "speed" not in {c["role"] for c in card["cells"]}
    assert all(c["source"].startswith("results/") for c in card["cells"])  # archived runs only
    board = (tmp_path / "results" / "leaderboard.md").read_text()
    configs = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "configs", "attention")) if f.endswith(".py"))
    for label in configs:
        assert f"| {label} | full | " in board
    assert "- linear: " in board and "speed T=1024, speed T=4096, speed T=16384" in board
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


def test_cells_say_how_many_seeds_and_whether_they_separate():
    assert format_cell((0.5, None, 1)) == "0.500 (n=1), one seed"
    assert format_cell((0.9, 0.01, 3), softmax=(0.91, 0.01, 3)).endswith("not separable from softmax")
    assert format_cell((0.5, 0.01, 3), softmax=(0.91, 0.01, 3)) == "0.500 ± 0.010 (n=3)"
    assert format_cell((None, None, 0)) == "not run"


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
    reference, small = len(tb.RECALL_RATES) + len(tb.RECALL_SEEDS) - 1, len(tb.RECALL_SEEDS)
    assert planned_minutes("bigbird") == round((reference * 600 + small * 120) / 60)
    assert planned_minutes("performer") == round((reference * 1500 + small * 90) / 60)  # 64/4: all attentions' median


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
