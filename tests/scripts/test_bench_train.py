import json
import os
import statistics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scripts.bench import common, train_throughput as bench_train_throughput

TINY = os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py")
FASTMAX1 = os.path.join(ROOT, "configs", "attention", "fastmax1.py")


def test_side_by_side_summary(tmp_path, monkeypatch):
    """Two runs (one config; a config + an attention layer joined by "+"), two rounds: one row per
    (round, run), medians and ratios taken from the rows, the layers handed to train.py in order."""
    fake_rates = iter([100.0, 50.0, 300.0, 70.0])  # round 0: a, b; round 1: a, b
    calls = []
    monkeypatch.setattr(bench_train_throughput, "train_py", lambda files, iters: calls.append(files) or next(fake_rates))
    layered = f"{TINY}+{FASTMAX1}"
    out = tmp_path / "tp"
    bench_train_throughput.main([TINY, layered, "--iters=1", "--rounds=2", f"--out={out}"])
    assert calls == [[TINY], [TINY, FASTMAX1]] * 2
    summary = json.loads((tmp_path / "tp.json").read_text())
    assert [(r["round"], r["tok_per_s"]) for r in summary["rows"]] == [(0, 100.0), (0, 50.0), (1, 300.0), (1, 70.0)]
    a, b = summary["configs"]
    assert (a, b) == ("configs/wikitext2_gpt_tiny.py", "configs/wikitext2_gpt_tiny.py+configs/attention/fastmax1.py")
    assert summary["median_tok_per_s"] == {a: statistics.median([100.0, 300.0]), b: statistics.median([50.0, 70.0])}
    assert summary["ratio_to_first"][b] == 60.0 / 200.0
    assert (tmp_path / "tp.csv").read_text().count("\n") == 5
    assert (tmp_path / "tp.png").stat().st_size > 0


def test_train_py_reads_throughput_from_the_log(monkeypatch):
    """The real measurement on the tiny config: a positive rate from train.py's own log."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert common.train_py([TINY, "--num_threads=1"], iters=1) > 0
