"""What a resumed run says when it starts (training.resume_message, printed by train.py's loop):
one line with out_dir, the iteration it continues from, the iterations left and the data, and a
warning when max_iters goes past the end of the cosine schedule."""
import json

import train
import training

SUMMARY = {"source": "generated (data.recall)", "train_size": 64}


def cfg_of(**changes):
    return {**training.DEFAULTS, "out_dir": "out/run", **changes}


def test_resume_message_names_out_dir_iteration_left_and_data():
    msg = training.resume_message(cfg_of(max_iters=1000, lr_decay_iters=1000), 600, SUMMARY)
    assert "\n" not in msg
    assert "out/run" in msg and "from iteration 600" in msg and "400 iterations left to max_iters=1000" in msg
    assert "data: source generated (data.recall), train_size 64" in msg
    assert "min_lr" not in msg  # the schedule covers every step left
    assert "data:" not in training.resume_message(cfg_of(), 5, None)


def test_resume_message_says_steps_past_the_cosine_schedule_run_at_min_lr():
    cfg = cfg_of(max_iters=3000, lr_decay_iters=2000, min_lr=1e-4)
    msg = training.resume_message(cfg, 2000, SUMMARY)
    assert "max_iters=3000 goes past lr_decay_iters=2000" in msg and "1000 steps from iteration 2000" in msg
    assert "min_lr=0.0001" in msg
    assert all(training.get_lr(it, cfg) == cfg["min_lr"] for it in (2000, 2500, 2999))  # what the line claims
    assert "500 steps from iteration 2500" in training.resume_message(cfg, 2500, SUMMARY)
    assert "1000 steps from iteration 2000" in training.resume_message(cfg, 1500, SUMMARY)  # 500 still decay
    for other in ("constant", "rsqrt"):  # no end to reach
        assert "min_lr" not in training.resume_message({**cfg, "lr_schedule": other}, 2000, SUMMARY)
    done = training.resume_message(cfg_of(max_iters=10), 10, None)
    assert "0 iterations left" in done and "raise --max_iters" in done
    assert "eval_only" in training.resume_message(cfg_of(eval_only=True, max_iters=3000), 2000, None)


def test_a_resumed_run_prints_the_line_once(tmp_path, capsys):
    out = tmp_path / "run"
    train.main(["--task=recall", f"--out_dir={out}", f"--recall_dir={tmp_path / 'data'}", "--block_size=16",
                "--recall_pairs=2", "--recall_vocab=32", "--recall_sizes={'train': 32, 'val': 8, 'test': 8}",
                "--n_layer=1", "--n_head=1", "--n_embd=16", "--batch_size=4", "--num_threads=1", "--max_iters=2",
                "--lr_decay_iters=2", "--warmup_iters=0", "--eval_interval=2", "--eval_iters=1", "--log_interval=1"])
    first = capsys.readouterr().out
    assert "resuming" not in first and "data: source generated (data.recall)" in first
    train.main([f"--out_dir={out}", "--init_from=resume", "--max_iters=4", "--num_threads=1"])
    lines = capsys.readouterr().out.splitlines()
    resumed = [line for line in lines if line.startswith("resuming ")]
    assert len(resumed) == 1, lines
    line = resumed[0]
    assert str(out) in line and "from iteration 2: 2 iterations left to max_iters=4" in line
    assert "data: source generated (data.recall)" in line and "train_size 32" in line
    assert "goes past lr_decay_iters=2: the 2 steps from iteration 2 on run at min_lr" in line
    assert not any(line.startswith("data:") for line in lines)  # the summary once, in the resume line
    assert json.loads((out / "final_metrics.json").read_text())["iters"] == 4
