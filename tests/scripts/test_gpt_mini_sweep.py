"""scripts/sweeps/gpt_mini.sh and scripts/analysis/gpt_mini_table.py end to end with a tiny model:
every attention and seed is trained with its layers, evaluated on the test split, and tabled; a
second call skips what exists; the lm task writes final_metrics.json."""
import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--max_iters=2", "--lr_decay_iters=2", "--warmup_iters=1", "--eval_interval=2", "--eval_iters=1",
        "--n_layer=1", "--n_embd=32", "--n_head=2", "--block_size=32", "--batch_size=2"]


def sweep(tmp_path, env):
    env = {**os.environ, "PYTHON": sys.executable, "THREADS": "1", "OUT_ROOT": str(tmp_path / "runs"),
           "TABLE_OUT": str(tmp_path / "table"), "EVAL_ARGS": "--protocol=blocks --fraction=0.002 --batch_size=2",
           **env}
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "sweeps", "gpt_mini.sh"), *TINY],
                          env=env, capture_output=True, text=True, timeout=600)


def test_gpt_mini_sweep_trains_evaluates_and_tables_every_attention_and_seed(tmp_path):
    r = sweep(tmp_path, {"ATTENTIONS": "softmax danet", "SEEDS": "1 2"})
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "runs")) == ["danet_s1", "danet_s2", "softmax_s1", "softmax_s2"]
    final = json.load(open(tmp_path / "runs" / "danet_s2" / "final_metrics.json"))
    assert final["config"]["block"] == "danet" and final["config"]["seed"] == 2  # the DANet model config
    assert set(final) >= {"val_loss", "val_ppl", "iters", "train_time_s", "best_iter"}
    assert final["iters"] == 2 and final["config"]["block_size"] == 32
    evaluation = json.load(open(tmp_path / "runs" / "softmax_s1" / "eval_test.json"))
    assert evaluation["split"] == "test" and evaluation["protocol"] == "blocks"

    rows = list(csv.DictReader(open(tmp_path / "table" / "summary.csv")))
    assert [(row["attention"], row["seed"]) for row in rows] == [("softmax", "1"), ("softmax", "2"),
                                                                 ("danet", "1"), ("danet", "2")]
    by_run = {(row["attention"], row["seed"]): row for row in rows}
    assert float(by_run["softmax", "1"]["test_ppl"]) == evaluation["value"]
    assert int(by_run["danet", "1"]["tokens"]) == 2 * 2 * 32
    table = (tmp_path / "table" / "gpt_mini_table.md").read_text()
    assert "| softmax |" in table and "2 seeds" in table
    assert "gpt_mini_table" in json.load(open(tmp_path / "table" / "manifest.json"))

    again = sweep(tmp_path, {"ATTENTIONS": "softmax", "SEEDS": "1"})
    assert again.returncode == 0, again.stderr
    assert "softmax_s1: trained, skipped" in again.stdout and "done" not in again.stdout


def test_gpt_mini_sweep_reports_an_unknown_attention(tmp_path):
    r = sweep(tmp_path, {"ATTENTIONS": "nosuch", "SEEDS": "1"})
    assert r.returncode == 1
    assert "no configs/attention/nosuch.py" in r.stderr
