"""The rules of scripts/analysis/published/verdicts.py, one test each: a fixture holds the numbers a
rendered verdict is made from, a number in it changes, and the verdict follows. Where the words
reach a table through a renderer or the leaderboard, the test goes through that path."""
import json

from scripts.analysis.published import loading, readme, verdicts
from scripts.analysis.published.lra import render_lra_tasks
from scripts.scorecard import testbeds as tb
from scripts.scorecard.leaderboard import findings, format_recall, format_speed, leaderboard_rows


def recall_column(values, version=2):
    return {"version": version, "seeds": list(range(1, len(values) + 1)), "values": values, "check": [],
            "budgets": []}


def test_separable_follows_the_seed_ranges():
    softmax = recall_column([0.99, 0.995, 0.999])
    method = recall_column([0.40, 0.50, 0.60])
    assert format_recall(method, softmax).endswith(", separable from softmax")
    method["values"][2] = 0.992  # its best seed now inside softmax's range
    assert "separable" not in format_recall(method, softmax)
    assert not verdicts.separable([0.1], [0.9, 0.95])  # one seed never separates


def test_ranking_follows_the_number_of_seeds_and_their_ranges():
    groups = [[125.8], [125.6]]
    assert verdicts.ranking(groups) == "not ranked: one seed each"
    groups = [[125.8, 125.9], [125.6]]
    assert verdicts.ranking(groups) == "not ranked: one seed of some"
    groups = [[125.8, 125.9], [125.6, 125.7]]
    assert verdicts.ranking(groups) == "ranked: no two seed ranges overlap"
    groups[1][1] = 125.85
    assert verdicts.ranking(groups) == "not ranked: seed ranges overlap"


def test_solved_in_k_of_n_follows_the_seeds():
    column = recall_column([0.999, 0.98, 0.5])
    assert format_recall(column).startswith("solved in 1 of 3;")
    column["values"][1] = tb.RECALL_SOLVED
    assert format_recall(column).startswith("solved in 2 of 3;")
    assert format_recall(recall_column([0.98])) == "0.980, one seed (not solved)"
    assert format_recall(recall_column([0.995])) == "0.995, one seed (solved)"


def test_bimodal_seeds_are_shown_one_by_one():
    dense = [0.0743, 0.9217, 0.8812]  # the token-shift cell's DANet seeds: two groups far apart
    assert verdicts.bimodal(dense)
    dense[0] = 0.80  # the low seed joins the others
    assert not verdicts.bimodal(dense)
    fastmax1 = [0.1694, 0.2839, 0.0198]  # spread, but no step of a quarter of the scale
    assert not verdicts.bimodal(fastmax1)
    fastmax1[1] = 0.60
    assert verdicts.bimodal(fastmax1)


def test_the_1_over_n_plateau_follows_the_accuracy():
    gpt = {"test_accuracy": 0.246, "recall_pairs": 4}  # results/recall/ablation_64_4/gpt
    assert verdicts.plateau_words(gpt["test_accuracy"], gpt["recall_pairs"]) == "stays at 1/N"
    gpt["test_accuracy"] = 0.0737
    assert verdicts.plateau_words(gpt["test_accuracy"], gpt["recall_pairs"]) == "stays below 1/N"
    gpt["test_accuracy"] = 0.8768
    assert verdicts.plateau_words(gpt["test_accuracy"], gpt["recall_pairs"]) == "reaches 87.7%"


def fake_lra_run(root, name, accuracy, majority, task="listops"):
    folder = root / "results" / "lra" / name
    folder.mkdir(parents=True)
    config = {"task": "classify", "lra_task": task, "attention": "softmax", "attention_params": {}, "batch_size": 8}
    (folder / "final_metrics.json").write_text(json.dumps({
        "test_accuracy": accuracy, "val_accuracy": accuracy, "steps_per_s": 1.6, "iters": 1200, "best_iter": 1200,
        "test_majority": majority, "test_examples": 2000, "config": config}))


def test_at_chance_reads_fail_in_the_lra_table(tmp_path):
    fake_lra_run(tmp_path, "listops_softmax_cpu", 0.173, 0.174)
    assert "| fail (17.3) (1.6 steps/s) |" in render_lra_tasks(str(tmp_path), "results/lra/*_cpu")
    (tmp_path / "results" / "lra" / "listops_softmax_cpu" / "final_metrics.json").unlink()
    (tmp_path / "results" / "lra" / "listops_softmax_cpu").rmdir()
    fake_lra_run(tmp_path, "listops_softmax_cpu", 0.20, 0.174)  # 2.6 points over: more than two standard errors
    assert "| 20.0 (1.6 steps/s) |" in render_lra_tasks(str(tmp_path), "results/lra/*_cpu")
    assert verdicts.at_chance(0.19, 0.174, 2000) and not verdicts.at_chance(0.19, 0.174, 20000)


def test_a_time_ratio_whose_range_includes_1_reads_about_1():
    cell = {"ratio": 0.97, "ratio_q1": 0.93, "ratio_q3": 1.02, "version": 2}
    assert format_speed(cell, "not run") == "≈ 1 (0.93-1.02)"
    cell["ratio_q3"] = 0.99
    assert format_speed(cell, "not run") == "0.97 (0.93-0.99)"


def test_a_time_ratio_is_ranked_only_when_its_range_leaves_1():
    assert verdicts.ratio_verdict(0.93, 1.02) == "not ranked"
    assert verdicts.ratio_verdict(None, None) == "not ranked"  # a version 1 cell: one median, no range
    cell = {"role": "speed", "T": 16384, "causal": True, "mode": "forward_backward", "version": 2, "ratio": 0.82,
            "ratio_q1": 0.78, "ratio_q3": 1.01}
    cards = [{"label": "softmax", "tier": "full", "not_applicable": {}, "cells": [dict(cell, ratio=1.0)]},
             {"label": "fastmax2", "tier": "full", "not_applicable": {}, "cells": [cell]}]
    assert "0 of 1 cells of the other attentions ranked; not ranked: 1 read ≈ 1" in findings(leaderboard_rows(cards), cards)
    cell["ratio_q3"] = 0.86  # the whole range below 1 now
    assert verdicts.ratio_verdict(cell["ratio_q1"], cell["ratio_q3"]) == "faster"
    assert "1 of 1 cells of the other attentions ranked; faster than SDPA: fastmax2 at T = 16,384" in \
        findings(leaderboard_rows(cards), cards)
    assert verdicts.ratio_verdict(1.02, 1.10) == "slower"


def test_an_aim_is_met_in_the_runs_that_reach_it():
    speedups = [9.5, 26.4, 18.7]  # fastmax p = 1 over SDPA in three runs, aim 10x
    assert verdicts.aim_met(speedups, lambda v: v >= 10) == "met in 2 of 3 runs"
    speedups[0] = 10.2
    assert verdicts.aim_met(speedups, lambda v: v >= 10) == "met in every run"
    assert verdicts.aim_met(speedups[:2], lambda v: v >= 10) == "met in both runs"
    dense = [1.47]  # time per token ratio, aim at most 1.2, with the cause of the miss
    cause = ": fresh pages and memory bandwidth"
    assert verdicts.aim_met(dense, lambda v: v <= 1.2, cause=cause) == "not met: fresh pages and memory bandwidth"
    dense[0] = 1.15
    assert verdicts.aim_met(dense, lambda v: v <= 1.2, cause=cause) == "met"  # the cause goes with the miss
    assert verdicts.aim_met([60.7, 67.7], lambda v: v >= 100, ("yes", "no"), ", see the doc") == "no, see the doc"


def test_reliably_faster_needs_every_run_of_every_call():
    runs = {"forward": [1.43, 1.30, 0.70], "forward + backward": [1.12, 1.01, 1.35]}
    assert verdicts.reliably_faster(runs, 1.0) == ("not reliably: faster forward in 2 of 3 runs, "
                                                   "forward + backward in 3 of 3")
    assert verdicts.reliably_faster(runs, 1.0, short=True) == "so not reliably faster"
    runs["forward"][2] = 1.05
    assert verdicts.reliably_faster(runs, 1.0) == "**yes** in every run"
    assert verdicts.reliably_faster(runs, 1.0, short=True) == "faster in every run"


def test_a_part_is_the_cost_only_when_changing_it_is_faster_in_every_call():
    paper, max_norm = [1.30, 1.01], [1.20, 1.12]  # the check run: fastmax p = 2 and normalization=max_norm
    assert verdicts.cost_words("the normalization", paper, max_norm) == "the normalization is not the cost"
    max_norm[0] = 1.35
    assert verdicts.cost_words("the normalization", paper, max_norm) == "the normalization is a cost"


def test_the_default_setting_follows_the_registry():
    paper_sqrt_d = {"p": 2, "normalization": "paper", "temperature": 5.656854249492381, "implementation": "reference"}
    assert readme.fastmax_default_words(paper_sqrt_d, 32) == "the new default"
    assert readme.fastmax_default_words(paper_sqrt_d, 64) == ""  # sqrt(32) is not the default at head dim 64
    max_norm = {"p": 1, "normalization": "max_norm", "lim": 1}
    assert readme.fastmax_default_words(max_norm, 32) == "the old default"
    max_norm["lim"] = 2
    assert readme.fastmax_default_words(max_norm, 32) == ""
    assert verdicts.default_words((1, 2), (1, 2)) == "the default"  # a default that never changed


def fake_mlm_run(root, name, *args):
    folder = root / "runs" / name
    folder.mkdir(parents=True)
    command = "python train.py " + " ".join(args)
    (folder / "manifest.json").write_text(json.dumps({"train": {"command": command}}))
    return f"runs/{name}"


def test_two_runs_compare_two_attentions_only_when_nothing_else_differs(tmp_path):
    (tmp_path / "base.py").write_text('block = "transformer"\nn_layer = 4\nlr_schedule = "cosine"\n')
    (tmp_path / "softmax.py").write_text('attention = "softmax"\nattention_params = {"window": 9}\n')
    (tmp_path / "dense.py").write_text('attention = "dense"\n')
    a = loading.run_config(str(tmp_path), fake_mlm_run(tmp_path, "a", "base.py", "softmax.py", "--seed=0"))
    b = loading.run_config(str(tmp_path), fake_mlm_run(tmp_path, "b", "base.py", "dense.py", "--seed=1"))
    assert verdicts.compared_as(readme.config_differences(a, b)) == "the two attentions alone"
    b = loading.run_config(str(tmp_path), fake_mlm_run(tmp_path, "c", "base.py", "dense.py", "--n_layer=5",
                                                      "--lr_schedule=constant", "--beta2=0.99"))
    assert verdicts.compared_as(readme.config_differences(a, b)) == \
        "two model configurations (blocks, schedule, beta2), not the two attentions alone"
