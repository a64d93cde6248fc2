"""scripts/analysis/gpt_mini_table.py on hand-written runs: the CPU of each run comes from its
manifest, and an attention whose runs ran on different CPUs gets one speed and time per CPU (speeds of
different CPUs do not compare), one otherwise."""
import csv
import json

from scripts.analysis import gpt_mini_table
from scripts.analysis.runs import run_cpu


def write_run(root, name, seed, train_time_s, cpu=None, ppl=120.0):
    d = root / name
    d.mkdir(parents=True)
    cfg = {"task": "lm", "seed": seed, "batch_size": 2, "block_size": 8, "num_threads": 2, "attention_params": {}}
    (d / "final_metrics.json").write_text(json.dumps({
        "config": cfg, "iters": 10, "train_time_s": train_time_s, "best_iter": 10, "best_metric": {"value": 4.5}}))
    (d / "eval_test.json").write_text(json.dumps({"value": ppl, "tokens_scored": 100, "protocol": "blocks"}))
    if cpu is not None:
        (d / "manifest.json").write_text(json.dumps({"train": {"machine": {"cpu": cpu, "cores": 2}}}))


def rows(out):
    text = (out / "gpt_mini_table.md").read_text()
    return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| ") and not line.startswith("| attention")}


def test_speeds_are_given_per_cpu_when_an_attentions_runs_differ(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "table"
    # 160 training tokens per run (10 iters x 2 x 8): 16 tokens/s in 10 s, 8 in 20 s, 4 in 40 s
    write_run(runs, "softmax_s1", 1, 10.0, cpu="Intel Xeon")
    write_run(runs, "softmax_s2", 2, 20.0, cpu="Intel Xeon")
    write_run(runs, "longformer_s1", 1, 10.0, cpu="Intel Xeon", ppl=118.0)
    write_run(runs, "longformer_s2", 2, 40.0, cpu="AMD EPYC", ppl=122.0)
    write_run(runs, "linear_s1", 1, 20.0)  # no manifest: CPU not recorded
    gpt_mini_table.main([str(runs), f"--out={out}"])
    table = rows(out)
    assert table["softmax"][2] == "12" and table["softmax"][3] == "0.2"  # one CPU: the median of 16 and 8
    assert table["longformer"][2] == "4 (AMD EPYC), 16 (Intel Xeon)"
    assert table["longformer"][3] == "0.7 (AMD EPYC), 0.2 (Intel Xeon)"
    assert table["longformer"][0].startswith("120.00 +- 2.83")  # perplexity pools the seeds whatever the CPU
    assert table["linear"][2] == "8"
    summary = {(r["attention"], r["seed"]): r for r in csv.DictReader(open(out / "summary.csv"))}
    assert summary["longformer", "2"]["cpu"] == "AMD EPYC" and summary["linear", "1"]["cpu"] == ""
    assert "CPUs: AMD EPYC, Intel Xeon, not recorded" in (out / "gpt_mini_table.md").read_text()


def test_run_cpu_names_every_cpu_of_a_resumed_run(tmp_path):
    def machine(cpu):
        return {"machine": {"cpu": cpu, "cores": 2}}

    (tmp_path / "manifest.json").write_text(json.dumps({
        "train": machine("Intel Xeon"), "train_resumed_at_400": machine("AMD EPYC"),
        "train_resumed_at_500": machine("Intel Xeon"), "eval_test": machine("Other CPU")}))
    assert run_cpu(str(tmp_path)) == "Intel Xeon + AMD EPYC"  # train entries only, each CPU once
    (tmp_path / "manifest.json").write_text(json.dumps({"train_stopped_at_122": machine("AMD EPYC")}))
    assert run_cpu(str(tmp_path)) == "AMD EPYC"
    assert run_cpu(str(tmp_path / "no_run")) is None
