import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py")


def run(out_dir, *args):
    train.main([TINY, f"--out_dir={out_dir}", "--num_threads=1", *args])
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


def step_losses(log):
    return {r["iter"]: r["loss"] for r in log if "loss" in r}


def test_loss_falls_on_real_wikitext2(tmp_path, wikitext2_dir):
    log = run(tmp_path, "--max_iters=40", "--lr_decay_iters=40", "--eval_interval=20", "--log_interval=1")
    evals = [r["eval"]["val"] for r in log if "eval" in r]
    steps = step_losses(log)
    assert len(evals) == 2 and evals[-1] < 9.0 < steps[1]  # from ln(50304) = 10.8 to well below
    assert evals[1] < evals[0]
    assert os.path.exists(tmp_path / "ckpt.pt")


def test_resume_reproduces_uninterrupted_run(tmp_path, wikitext2_dir):
    common = ["--lr_decay_iters=12", "--eval_interval=6", "--log_interval=1", "--dropout=0.1"]
    full = step_losses(run(tmp_path / "a", "--max_iters=12", *common))
    run(tmp_path / "b", "--max_iters=6", *common)
    resumed = step_losses(run(tmp_path / "b", "--max_iters=12", "--init_from=resume", *common))
    assert sorted(full) == list(range(1, 13)) and sorted(resumed) == list(range(1, 13))
    assert [resumed[i] for i in range(7, 13)] == [full[i] for i in range(7, 13)]


def test_nan_loss_stops_and_keeps_last_checkpoint(tmp_path, wikitext2_dir):
    run(tmp_path, "--max_iters=2", "--eval_interval=2")
    before = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    with pytest.raises(SystemExit, match="non-finite loss"):
        run(tmp_path, "--max_iters=10", "--eval_interval=2", "--init_from=resume",
            "--learning_rate=1e30", "--min_lr=1e30", "--decay_lr=False", "--grad_clip=0.0")
    after = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert all(torch.isfinite(v).all() for v in after["model"].values())
    assert after["iter_num"] >= before["iter_num"]
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_batches_differ_per_rank_and_iteration(wikitext2_dir):
    data = np.arange(10_000, dtype=np.uint16)
    cfg = dict(seed=1)
    a = train.get_batch(data, 4, 8, train.batch_seed(cfg, 0, 5, 0), "cpu")[0]
    assert torch.equal(a, train.get_batch(data, 4, 8, train.batch_seed(cfg, 0, 5, 0), "cpu")[0])
    assert not torch.equal(a, train.get_batch(data, 4, 8, train.batch_seed(cfg, 1, 5, 0), "cpu")[0])
    assert not torch.equal(a, train.get_batch(data, 4, 8, train.batch_seed(cfg, 0, 6, 0), "cpu")[0])


def test_lr_schedule():
    cfg = dict(decay_lr=True, learning_rate=1.0, min_lr=0.1, warmup_iters=10, lr_decay_iters=110)
    assert train.get_lr(0, cfg) < train.get_lr(9, cfg) <= 1.0
    assert train.get_lr(10, cfg) == pytest.approx(1.0)
    assert train.get_lr(60, cfg) == pytest.approx(0.55)
    assert train.get_lr(500, cfg) == 0.1


def test_unknown_key_and_task_errors(tmp_path):
    with pytest.raises(ValueError, match="did you mean max_iters"):
        train.main([TINY, "--max_iter=3"])
    with pytest.raises(ValueError, match="unknown task"):
        train.main([TINY, "--task=mlm", f"--out_dir={tmp_path}"])


@pytest.mark.skipif(shutil.which("torchrun") is None and not os.path.exists(
    os.path.join(os.path.dirname(sys.executable), "torchrun")), reason="torchrun not installed")
def test_torchrun_two_processes_gloo(tmp_path, wikitext2_dir):
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [torchrun, "--standalone", "--nproc_per_node=2", os.path.join(ROOT, "train.py"), TINY,
           f"--out_dir={tmp_path}", "--max_iters=4", "--eval_interval=4", "--gradient_accumulation_steps=2",
           "--num_threads=1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 4:" in proc.stdout and os.path.exists(tmp_path / "ckpt.pt")
