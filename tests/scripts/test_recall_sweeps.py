"""scripts/sweeps/recall.sh and recall_fastmax_norm.sh end to end at a tiny cell: the runs get the
cell, the learning rate picked on seed 0 and the setting's attention parameters, and the tables
their rows; bad settings are refused."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--max_iters=2", "--lr_decay_iters=2", "--warmup_iters=1", "--eval_interval=2", "--batch_size=4",
        "--recall_vocab=32", "--recall_sizes={'train': 16, 'val': 8, 'test': 8}"]


def run(script, tmp_path, env, *args):
    env = {**os.environ, "PYTHON": sys.executable, "THREADS": "1", **env}
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "sweeps", script), *TINY,
                           f"--recall_dir={tmp_path / 'data'}", *args],
                          env=env, capture_output=True, text=True, timeout=600)


def final(path):
    with open(path) as f:
        return json.load(f)


def test_recall_sweep_picks_the_rate_on_seed_0_then_runs_the_seeds(tmp_path):
    r = run("recall.sh", tmp_path, {"ATTENTIONS": "softmax", "CELLS": "16:2:16", "LRS": "1e-3 3e-3", "SEEDS": "1",
                                    "OUT_ROOT": str(tmp_path / "runs"), "TABLE_OUT": str(tmp_path / "table")})
    assert r.returncode == 0, r.stderr
    names = sorted(os.listdir(tmp_path / "runs"))
    picked = r.stdout.split("learning rate ")[1].split()[0]
    assert names == sorted(["softmax_T16_N2_d16_lr0.001_s0", "softmax_T16_N2_d16_lr0.003_s0",
                            f"softmax_T16_N2_d16_lr{picked}_s1"])
    cfg = final(tmp_path / "runs" / f"softmax_T16_N2_d16_lr{picked}_s1" / "final_metrics.json")["config"]
    assert (cfg["block_size"], cfg["recall_pairs"], cfg["n_embd"], cfg["seed"]) == (16, 2, 16, 1)
    assert cfg["learning_rate"] == float(picked)
    assert "| softmax |" in (tmp_path / "table" / "recall_table.md").read_text()


@pytest.mark.slow  # about 30 s: a finished one-off sweep (2026-11-26); the recall sweep's test covers the loop
def test_fastmax_norm_sweep_gives_each_setting_its_parameters_and_row(tmp_path):
    r = run("recall_fastmax_norm.sh", tmp_path, {"VARIANTS": "paper_sqrtD max_norm_2", "PS": "1", "CELL": "16:2:32",
                                                 "HEADS": "2", "SEEDS": "", "OUT_ROOT": str(tmp_path / "runs"),
                                                 "TABLE_OUT": str(tmp_path / "table")})
    assert r.returncode == 0, r.stderr
    paper = final(tmp_path / "runs" / "paper_sqrtD" / "fastmax1_T16_N2_d32_lr0.01_s0" / "final_metrics.json")
    assert paper["config"]["attention_params"] == {"p": 1, "normalization": "paper", "temperature": 4.0}  # D = 16
    assert paper["config"]["n_head"] == 2
    lim = final(tmp_path / "runs" / "max_norm_2" / "fastmax1_T16_N2_d32_lr0.01_s0" / "final_metrics.json")
    assert lim["config"]["attention_params"] == {"p": 1, "normalization": "max_norm", "lim": 2}
    table = (tmp_path / "table" / "recall_table.md").read_text()
    assert "| fastmax1 normalization=paper temperature=4 |" in table
    assert "| fastmax1 normalization=max_norm lim=2 |" in table


@pytest.mark.parametrize("env, message", [
    ({"VARIANTS": "paper_half"}, "unknown setting 'paper_half'"),
    ({"CELL": "16:2:30", "HEADS": "4"}, "width 30 is not a multiple of HEADS=4"),
])
def test_fastmax_norm_sweep_refuses_bad_settings(tmp_path, env, message):
    r = run("recall_fastmax_norm.sh", tmp_path, {"OUT_ROOT": str(tmp_path / "runs"), **env})
    assert r.returncode == 2 and message in r.stderr
    assert not (tmp_path / "runs").exists()
