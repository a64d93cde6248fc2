import json
import os
import statistics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scripts.bench import common, train_throughput as bench_train_throughput

TINY = os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py")


def test_side_by_side_summary(tmp_path, monkeypatch):
    """Two configs, two rounds: one row per (round, config), medians and ratios taken from the rows."""
    fake_rates = iter([100.0, 50.0, 300.0, 70.0])  # round 0: a, b; round 1: a, b
    monkeypatch.setattr(bench_train_throughput, "train_py", lambda files, iters: next(fake_rates))
    other = tmp_path / "other.py"
    other.write_text(f"exec(open({TINY!r}).read())\n")
    out = tmp_path / "tp"
    bench_train_throughput.main([TINY, str(other), "--iters=1", "--rounds=2", f"--out={out}"])
    summary = json.loads((tmp_path / "tp.json").read_text())
    assert [(r["round"], r["tok_per_s"]) for r in summary["rows"]] == [(0, 100.0), (0, 50.0), (1, 300.0), (1, 70.0)]
    a, b = summary["configs"]
    assert summary["median_tok_per_s"] == {a: statistics.median([100.0, 300.0]), b: statistics.median([50.0, 70.0])}
    assert summary["ratio_to_first"][b] == 60.0 / 200.0
    assert (tmp_path / "tp.csv").read_text().count("\n") == 5
    assert (tmp_path / "tp.png").stat().st_size > 0


def test_train_py_reads_throughput_from_the_log(monkeypatch):
    """The real measurement on the tiny config: a positive rate from train.py's own log."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert common.train_py([TINY, "--num_threads=1"], iters=1) > 0
