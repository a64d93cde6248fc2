import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import configurator
import model as model_lib
import tasks
import train
import training
from configurator import ConfigError
from tasks import lm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py")
TORCHRUN = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")


def run(out_dir, *args):
    train.main([TINY, f"--out_dir={out_dir}", "--num_threads=1", *args])
    return read_log(out_dir)


def read_log(out_dir):
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


def last_iteration_record(log):
    """The last step or evaluation record (a final record of the task's final_evaluate may follow)."""
    return [r for r in log if "iter" in r][-1]


def step_losses(log):
    return {r["iter"]: r["loss"] for r in log if "loss" in r}


def env():
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)


# ---------------------------------------------------------------- the loop on the tiny config


def test_loss_falls_on_real_wikitext2(tmp_path, wikitext2_dir):
    log = run(tmp_path, "--max_iters=30", "--lr_decay_iters=30", "--eval_interval=15", "--log_interval=1")
    evals = [r["eval"] for r in log if "eval" in r]
    steps = step_losses(log)
    assert [r["iter"] for r in log if "eval" in r] == [15, 30]
    assert evals[-1]["val_loss"] < 9.5 < steps[1]  # from ln(50304) = 10.8 to well below
    assert evals[1]["val_loss"] < evals[0]["val_loss"]
    assert evals[1]["val_ppl"] == pytest.approx(np.exp(evals[1]["val_loss"]))
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert ckpt["task"] == "lm" and ckpt["iter_num"] == 30
    # the keys eval_ppl.py and older tools read are all there
    assert {"model", "optimizer", "model_args", "iter_num", "best_val_loss", "config", "rng_state"} <= set(ckpt)
    assert ckpt["best_val_loss"] == ckpt["best_metric"]["value"] == min(e["val_loss"] for e in evals)


def test_resume_reproduces_uninterrupted_run(tmp_path, wikitext2_dir):
    # dropout makes the loss depend on the generator state, so a wrong restore shows up
    common = ["--lr_decay_iters=8", "--eval_interval=4", "--log_interval=1", "--dropout=0.1"]
    full = step_losses(run(tmp_path / "a", "--max_iters=8", *common))
    run(tmp_path / "b", "--max_iters=4", *common)
    resumed_log = run(tmp_path / "b", "--max_iters=8", "--init_from=resume", *common)
    resumed = step_losses(resumed_log)
    assert sorted(full) == list(range(1, 9)) and sorted(resumed) == list(range(1, 9))
    assert [resumed[i] for i in range(5, 9)] == [full[i] for i in range(5, 9)]
    assert [r["iter"] for r in resumed_log if "eval" in r] == [4, 8]  # no second evaluation at the resume point
    ckpt = torch.load(tmp_path / "b" / "ckpt.pt", weights_only=False)
    assert len(ckpt["rng_states"]) == 1 and ckpt["world_size"] == 1


def test_resume_checks_task_and_model_keys(tmp_path, wikitext2_dir):
    run(tmp_path, "--max_iters=1", "--eval_interval=1", "--eval_iters=1")
    ckpt_path = tmp_path / "ckpt.pt"
    with pytest.raises(ConfigError, match="n_layer=3 differs from the checkpoint's 2"):
        run(tmp_path, "--max_iters=2", "--init_from=resume", "--n_layer=3")
    with pytest.raises(ConfigError, match=r"attention_params\['E'\]=0.5 differs from the checkpoint's '\(not set\)'"):
        run(tmp_path, "--max_iters=2", "--init_from=resume", "--attention.E=0.5")
    with pytest.raises(ConfigError, match="dataset_config='wikitext-2-raw-v1' differs from the checkpoint's 'wikitext-2-v1'"):
        run(tmp_path, "--max_iters=2", "--init_from=resume", "--dataset_config=wikitext-2-raw-v1")
    ckpt = torch.load(ckpt_path, weights_only=False)
    ckpt["task"] = "mlm"
    torch.save(ckpt, ckpt_path)
    with pytest.raises(ConfigError, match="trained on task 'mlm', not 'lm'"):
        run(tmp_path, "--max_iters=2", "--init_from=resume", "--task=lm")


def test_resume_needs_only_out_dir_and_keeps_the_checkpoints_settings(tmp_path, wikitext2_dir):
    # the scratch run sets a learning rate, a schedule and a model size away from the defaults;
    # the resume names nothing but init_from and out_dir (not even the config file)
    run(tmp_path, "--max_iters=2", "--eval_interval=2", "--eval_iters=1", "--learning_rate=2e-3",
        "--n_embd=16", "--lr_schedule=constant", "--warmup_iters=0", "--log_interval=1")
    train.main([f"--out_dir={tmp_path}", "--init_from=resume", "--max_iters=4", "--num_threads=1"])
    log = read_log(tmp_path)
    starts = [r for r in log if "start" in r]
    assert [r["start"]["init_from"] for r in starts] == ["scratch", "resume"] and starts[1]["start"]["iter"] == 2
    assert {r["iter"]: r["lr"] for r in log if "lr" in r} == {1: 2e-3, 2: 2e-3, 3: 2e-3, 4: 2e-3}  # not the defaults
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert ckpt["iter_num"] == 4 and ckpt["config"]["n_embd"] == 16 and ckpt["config"]["max_iters"] == 4


def test_resume_config_rules():
    cfg = dict(train.DEFAULTS, task="classify", lra_task="listops", lra_options={"num_train": 64, "workers": 1},
               max_iters=10)
    ckpt = {"task": "classify", "config": {k: v for k, v in cfg.items() if k != "adam_eps"}}  # an older checkpoint
    parsed = dict(train.DEFAULTS, lra_options={"workers": 2}, max_iters=20, init_from="resume", out_dir="o")
    out = training.resume_config(parsed, {"lra_options": {"workers"}, "max_iters": True, "init_from": True}, ckpt)
    assert out["lra_task"] == "listops" and out["lra_options"] == {"num_train": 64, "workers": 2}
    assert out["max_iters"] == 20 and out["adam_eps"] == train.DEFAULTS["adam_eps"] and out["out_dir"] == "o"
    with pytest.raises(ConfigError, match=r"lra_options\['num_train'\]=32 differs from the checkpoint's 64"):
        training.resume_config(dict(parsed, lra_options={"num_train": 32}), {"lra_options": {"num_train"}}, ckpt)
    with pytest.raises(ConfigError, match="lra_task='text' differs from the checkpoint's 'listops'"):
        training.resume_config(dict(parsed, lra_task="text"), {"lra_task": True}, ckpt)
    # the same value given explicitly is fine (a repeated config file)
    assert training.resume_config(dict(parsed, lra_task="listops"), {"lra_task": True}, ckpt)["lra_task"] == "listops"


def test_a_scratch_run_into_a_used_out_dir_keeps_the_old_log(tmp_path, wikitext2_dir, capsys):
    run(tmp_path, "--max_iters=1", "--eval_interval=1", "--eval_iters=1")
    first = read_log(tmp_path)
    log = run(tmp_path, "--max_iters=1", "--eval_interval=1", "--eval_iters=1", "--overwrite=True")
    assert sum("start" in r for r in log) == 1 and [r for r in log if "start" in r][0]["start"]["init_from"] == "scratch"
    assert read_log_file(tmp_path / "log.1.jsonl") == first
    assert "kept its files as log.jsonl -> log.1.jsonl" in capsys.readouterr().out
    run(tmp_path, "--max_iters=1", "--eval_interval=1", "--eval_iters=1", "--overwrite=True")
    assert os.path.exists(tmp_path / "log.2.jsonl")


def read_log_file(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_training_lines_give_progress_eta_and_wall_time(tmp_path, wikitext2_dir, capsys):
    run(tmp_path, "--max_iters=4", "--eval_interval=4", "--eval_iters=1", "--log_interval=2")
    out = capsys.readouterr().out
    assert re.search(r"iter 2/4: loss [0-9.]+, lr .*, elapsed \d+s, ETA \d+s", out), out
    assert re.search(r"done: 4 iterations \(0 -> 4\) in \d+s wall time", out), out
    assert training.format_duration(3725) == "1h02m05s" and training.format_duration(65) == "1m05s"


def test_resume_from_a_checkpoint_of_the_previous_train_py(tmp_path, wikitext2_dir):
    # before tasks: no "task", "rng_states", "best_metric" or "scaler"; must still resume
    run(tmp_path, "--max_iters=2", "--eval_interval=2", "--eval_iters=1")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    old = {k: ckpt[k] for k in ("model", "optimizer", "model_args", "iter_num", "best_val_loss", "config")}
    old["rng_state"] = ckpt["rng_states"][0]["torch"]
    del old["config"]["task"]
    torch.save(old, tmp_path / "ckpt.pt")
    log = run(tmp_path, "--max_iters=3", "--eval_interval=2", "--eval_iters=1", "--init_from=resume")
    assert last_iteration_record(log)["iter"] == 3 and torch.load(tmp_path / "ckpt.pt", weights_only=False)["task"] == "lm"


def test_nan_loss_stops_and_keeps_last_checkpoint(tmp_path, wikitext2_dir, capsys):
    run(tmp_path, "--max_iters=2", "--eval_interval=2", "--eval_iters=1")
    before = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    with pytest.raises(SystemExit) as exc:
        run(tmp_path, "--max_iters=10", "--eval_interval=2", "--eval_iters=1", "--init_from=resume",
            "--learning_rate=1e30", "--min_lr=1e30", "--lr_schedule=constant", "--grad_clip=0.0")
    assert exc.value.code == 1 and "error: non-finite loss" in capsys.readouterr().err
    after = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert all(torch.isfinite(v).all() for v in after["model"].values())
    assert after["iter_num"] >= before["iter_num"]
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]
    # the stopped run's manifest entry says how it was made and why it stopped
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    stopped = [name for name in manifest if name.startswith("train_stopped_at_")]
    assert len(stopped) == 1 and "non-finite loss" in manifest[stopped[0]]["stopped"]
    assert "--learning_rate=1e30" in manifest[stopped[0]]["command"]


def test_a_run_stopped_by_any_exception_keeps_a_manifest_entry(tmp_path, wikitext2_dir, monkeypatch):
    get_batch = lm.get_batch

    def interrupted(data, split, cfg, seed, device):  # Ctrl-C during the third optimizer step
        if seed == tasks.batch_seed(cfg, 0, 2, 0):
            raise KeyboardInterrupt
        return get_batch(data, split, cfg, seed, device)

    monkeypatch.setattr(lm, "get_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, "--max_iters=5", "--eval_interval=5", "--eval_iters=1")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["train_stopped_at_2"]["stopped"] == "KeyboardInterrupt" and "train" not in manifest
    assert "--max_iters=5" in manifest["train_stopped_at_2"]["command"]


def test_constant_lr_schedule_in_the_loop(tmp_path, wikitext2_dir):
    log = run(tmp_path, "--max_iters=4", "--eval_interval=4", "--eval_iters=1", "--log_interval=1",
              "--lr_schedule=constant", "--warmup_iters=2", "--learning_rate=0.002")
    lrs = [r["lr"] for r in log if "lr" in r]  # lr of the step that led to each logged iteration
    assert lrs == pytest.approx([0.002 / 3, 0.002 * 2 / 3, 0.002, 0.002])


def test_stop_at_ends_training_at_the_first_evaluation_that_reaches_it(tmp_path, wikitext2_dir, capsys):
    """stop_at (the recall protocol's early stop): the lm task's best metric is val_loss (min), so
    a stop_at above the first evaluation's loss stops there; one below every loss trains to
    max_iters; the stop is logged and printed, and no step runs after it."""
    log = run(tmp_path, "--max_iters=8", "--eval_interval=2", "--eval_iters=1", "--log_interval=1", "--stop_at=1000")
    stops = [r["stopped_early"] for r in log if "stopped_early" in r]
    assert len(stops) == 1 and stops[0]["iter"] == 2 and stops[0]["metric"] == "val_loss"
    assert last_iteration_record(log)["iter"] == 2 and "stopping early: val_loss" in capsys.readouterr().out
    log = run(tmp_path / "never", "--max_iters=4", "--eval_interval=2", "--eval_iters=1", "--stop_at=0.001")
    assert not any("stopped_early" in r for r in log) and last_iteration_record(log)["iter"] == 4
    assert training.reached(0.996, 0.995, "max") and not training.reached(0.994, 0.995, "max")
    assert training.reached(2.0, 2.5, "min") and not training.reached(3.0, 2.5, "min")


def test_post_step_hook_runs_after_every_optimizer_step(tmp_path, wikitext2_dir, monkeypatch):
    calls = []

    def after_optimizer_step(self):
        assert not torch.is_grad_enabled() and self.training
        calls.append(self.transformer.wpe.weight.grad)
        self.transformer.wpe.weight.zero_()  # visible in the checkpoint only if run after the last step

    monkeypatch.setattr(model_lib.GPT, "after_optimizer_step", after_optimizer_step, raising=False)
    run(tmp_path, "--max_iters=3", "--eval_interval=3", "--eval_iters=1", "--gradient_accumulation_steps=2")
    assert len(calls) == 3 and all(g is None for g in calls)  # once per step, after zero_grad
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert torch.count_nonzero(ckpt["model"]["transformer.wpe.weight"]) == 0


def test_evaluation_runs_on_the_model_without_grad_and_leaves_training_mode(tmp_path, wikitext2_dir,
                                                                              monkeypatch):
    seen = []
    evaluate = lm.evaluate

    def spy(model, data, cfg, device):
        seen.append((type(model).__name__, model.training, torch.is_grad_enabled()))
        return evaluate(model, data, cfg, device)

    monkeypatch.setattr(lm, "evaluate", spy)
    run(tmp_path, "--max_iters=2", "--eval_interval=1", "--eval_iters=1")
    assert seen == [("GPT", False, False)] * 2


def test_eval_only_writes_no_checkpoint(tmp_path, wikitext2_dir):
    run(tmp_path, "--max_iters=1", "--eval_interval=1", "--eval_iters=1")
    mtime = os.stat(tmp_path / "ckpt.pt").st_mtime_ns
    log = run(tmp_path, "--init_from=resume", "--eval_only=True", "--eval_iters=1")
    assert "eval" in last_iteration_record(log) and last_iteration_record(log)["iter"] == 1
    assert os.stat(tmp_path / "ckpt.pt").st_mtime_ns == mtime


# ---------------------------------------------------------------- batches and the schedule


def test_batches_differ_per_rank_and_iteration():
    data = {"train": np.arange(10_000, dtype=np.uint16)}
    cfg = dict(seed=1, batch_size=4, block_size=8)

    def idx(rank, it):
        return lm.get_batch(data, "train", cfg, tasks.batch_seed(cfg, rank, it, 0), "cpu")["idx"]

    assert torch.equal(idx(0, 5), idx(0, 5))
    assert not torch.equal(idx(0, 5), idx(1, 5))
    assert not torch.equal(idx(0, 5), idx(0, 6))
    batch = lm.get_batch(data, "train", cfg, 0, "cpu")
    assert batch["idx"].shape == (4, 8) and batch["idx"].dtype == torch.int64
    assert torch.equal(batch["targets"], batch["idx"] + 1)  # targets are the inputs shifted by one


def test_get_batch_reaches_the_last_window_and_rejects_a_short_split():
    block = 8
    cfg = dict(batch_size=64, block_size=block)
    data = {"val": np.arange(block + 3, dtype=np.uint16)}  # 3 possible starts: 0, 1, 2
    starts = set()
    for seed in range(20):
        starts |= set(lm.get_batch(data, "val", cfg, seed, "cpu")["idx"][:, 0].tolist())
    assert starts == {0, 1, 2}  # the last window (targets ending at the last token) is drawn
    exact = {"val": np.arange(block + 1, dtype=np.uint16)}
    assert lm.get_batch(exact, "val", cfg, 0, "cpu")["targets"][0, -1] == block
    with pytest.raises(ValueError, match=r"split 'val' has 8 tokens, fewer than the 9 a window needs"):
        lm.get_batch({"val": np.arange(block, dtype=np.uint16)}, "val", cfg, 0, "cpu")


def test_lr_schedule():
    cfg = dict(lr_schedule="cosine", learning_rate=1.0, min_lr=0.1, warmup_iters=10, lr_decay_iters=110)
    assert training.get_lr(0, cfg) < training.get_lr(9, cfg) <= 1.0
    assert training.get_lr(10, cfg) == pytest.approx(1.0)
    assert training.get_lr(60, cfg) == pytest.approx(0.55)
    assert training.get_lr(500, cfg) == 0.1
    const = dict(cfg, lr_schedule="constant")
    assert training.get_lr(5, const) == training.get_lr(5, cfg)  # the same warmup
    assert training.get_lr(10, const) == training.get_lr(60, const) == training.get_lr(500, const) == 1.0
    with pytest.raises(ValueError, match="cosine, constant, rsqrt"):
        training.get_lr(0, dict(cfg, lr_schedule="linear"))
    # LRA's constant * linear_warmup * rsqrt_decay with base = learning_rate * sqrt(warmup)
    rsqrt = dict(cfg, lr_schedule="rsqrt")
    assert training.get_lr(5, rsqrt) == training.get_lr(5, cfg)
    assert training.get_lr(10, rsqrt) == pytest.approx(1.0) and training.get_lr(40, rsqrt) == pytest.approx(0.5)
    base = 1.0 * math.sqrt(10)
    assert training.get_lr(1000, rsqrt) == pytest.approx(base / math.sqrt(1000))


def test_adam_eps_reaches_the_optimizer_and_schedules_are_checked_once(tmp_path):
    model = torch.nn.Linear(2, 2)
    opt = training.configure_optimizer(model, dict(train.DEFAULTS, adam_eps=1e-9), "cpu")
    assert all(group["eps"] == 1e-9 for group in opt.param_groups)
    with pytest.raises(ConfigError, match="unknown lr_schedule 'linear'; allowed: cosine, constant, rsqrt"):
        train.main([f"--out_dir={tmp_path}", "--lr_schedule=linear"])
    with pytest.raises(ConfigError, match="adam_eps must be positive"):
        train.main([f"--out_dir={tmp_path}", "--adam_eps=0.0"])


@pytest.mark.parametrize("stage", ["prepare_data", "load_data"])
def test_a_data_error_is_one_config_error_line(tmp_path, monkeypatch, stage):
    import data

    def broken(cfg):
        raise data.DataFormatError("/d/basic_train.tsv", "expected the header 'Source\\tTarget'", line=1,
                                   content="x" * 5000)

    monkeypatch.setattr(lm, "prepare_data", lambda cfg: None)
    monkeypatch.setattr(lm, stage, broken)
    with pytest.raises(ConfigError) as info:  # run_cli prints it as one `error:` line, exit 2
        train.main([TINY, f"--out_dir={tmp_path}"])
    message = str(info.value)
    assert message.startswith("/d/basic_train.tsv, line 1: expected the header") and len(message) < 200


# ---------------------------------------------------------------- config and command line


def test_every_key_has_a_help_line():
    assert list(train.HELP) == list(train.DEFAULTS)
    assert all(train.HELP[k].strip() for k in train.DEFAULTS)
    for key in lm.DEFAULTS:  # task keys are merged in and their help names the task(s)
        owners = train.HELP[key][1:train.HELP[key].index("] ")].split(", ")
        assert train.DEFAULTS[key] == lm.DEFAULTS[key] and "lm" in owners


def test_help_exits_0_and_lists_every_key():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--help"], capture_output=True,
                          text=True, env=env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    entries, key = {}, None  # key -> its lines joined (the meaning is wrapped at 100 columns)
    for line in proc.stdout.splitlines():
        if line.startswith("  --"):
            key = line.split()[0][2:]
            entries[key] = line.strip()
        elif key and line.startswith("    "):
            entries[key] += " " + line.strip()
    for key, default in train.DEFAULTS.items():
        assert repr(default) in entries[key] and entries[key].endswith(" ".join(train.HELP[key].split()))


def test_bad_key_exits_2_without_traceback():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), TINY, "--max_iter=3"],
                          capture_output=True, text=True, env=env(), timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown config key 'max_iter'; did you mean max_iters")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("arg, message", [
    ("--lr_schedule=linear", "unknown lr_schedule 'linear'; allowed: cosine, constant"),
    ("--init_from=gpt2", "init_from must be one of scratch, resume"),
    ("--dtype=bfloat16", "needs a GPU"),
    ("--eval_iters=0", "eval_iters must be at least 1"),
    ("--dataset=openwebtext", "no dataset 'openwebtext'; available: wikitext2"),
    ("--attention=nope", "unknown attention 'nope'"),
])
def test_bad_values_are_config_errors(tmp_path, arg, message):
    with pytest.raises(ConfigError, match=message):
        train.main([TINY, f"--out_dir={tmp_path}", arg])


def test_unknown_task_lists_the_available_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown task 'nope'; available tasks: lm"):
        train.main([TINY, "--task=nope", f"--out_dir={tmp_path}"])


def test_resume_without_checkpoint_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no checkpoint at"):
        train.main([TINY, "--init_from=resume", f"--out_dir={tmp_path}"])


def test_registered_tasks_implement_the_interface():
    for name in tasks.available():
        module = tasks.get(name)
        assert all(hasattr(module, attr) for attr in tasks.REQUIRED)
        assert set(module.MODEL_KEYS) <= set(train.DEFAULTS)
        assert set(module.HELP) == set(module.DEFAULTS)


class FakeTask:
    """A stand-in task module for the key-merging rules."""

    def __init__(self, defaults):
        self.DEFAULTS, self.HELP = defaults, {k: f"meaning of {k}" for k in defaults}
        self.MODEL_KEYS, self.DATA_KEYS, self.BEST_METRIC = (), (), ("val_loss", "min")
        for attr in tasks.REQUIRED:
            if not hasattr(self, attr):
                setattr(self, attr, None)


def with_fake_tasks(monkeypatch, **modules):
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, f"fake_task_{name}", module)
        monkeypatch.setitem(tasks.REGISTRY, name, f"fake_task_{name}")


def test_task_keys_merge_share_and_conflict(monkeypatch):
    monkeypatch.setattr(tasks, "REGISTRY", {})  # only the fake tasks below
    with_fake_tasks(monkeypatch, a=FakeTask(dict(shared=1, only_a="x")), b=FakeTask(dict(shared=1)))
    defaults, help = tasks.merge_defaults(dict(lr=0.1), dict(lr="rate"))
    assert list(defaults) == ["lr", "shared", "only_a"]
    assert help["shared"] == "[a, b] meaning of shared" and help["lr"] == "rate"
    tasks.check_task_keys({"only_a": True, "lr": True}, "a")
    with pytest.raises(ConfigError, match="'only_a' belongs to task.s. a, not to task 'b'"):
        tasks.check_task_keys({"only_a": True}, "b")
    with_fake_tasks(monkeypatch, c=FakeTask(dict(shared=2)))
    with pytest.raises(ValueError, match="'shared' has default 1 in task.s. a, b but 2 in task 'c'"):
        tasks.merge_defaults(dict(lr=0.1), dict(lr="rate"))
    monkeypatch.delitem(tasks.REGISTRY, "c")
    with pytest.raises(ValueError, match="task 'a' declares config key 'only_a', which train.py already defines"):
        tasks.merge_defaults(dict(lr=0.1, only_a=3), dict(lr="rate"))


# ---------------------------------------------------------------- inference-only attention


class FailsUnderGradAttention(torch.nn.Module):
    """Softmax attention whose forward raises ``error`` with gradients enabled and runs without
    them: an out-of-memory error looks like this, and must not be reported as inference-only.
    Put into the registry directly (not ``register``), so it carries the metadata the registry
    reads itself."""

    error = RuntimeError("inference only: call under torch.no_grad()")
    causal = "exact"
    trainable = True

    def forward(self, q, k, v, causal, attention_mask=None):
        if torch.is_grad_enabled():
            raise self.error
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


class RaisesInferenceOnlyAttention(FailsUnderGradAttention):
    """Declares nothing up front but raises the registry's InferenceOnlyError under autograd."""

    def __init__(self):
        super().__init__()
        import attention
        self.error = attention.InferenceOnlyError("needs torch.no_grad()")


@pytest.mark.parametrize("error", [RuntimeError("some kernel failed"), torch.OutOfMemoryError("out of memory")])
def test_a_runtime_error_in_training_propagates_unchanged(tmp_path, wikitext2_dir, monkeypatch, error):
    import attention

    class Failing(FailsUnderGradAttention):
        pass

    Failing.error = error
    monkeypatch.setitem(attention._REGISTRY, "failing", Failing)
    with pytest.raises(type(error), match=str(error)) as info:
        run(tmp_path, "--attention=failing", "--max_iters=2")
    assert not isinstance(info.value, ConfigError)
    manifest = json.loads((tmp_path / "manifest.json").read_text())  # the stopped run keeps its provenance
    assert manifest["train_stopped_at_0"]["stopped"] == f"{type(error).__name__}: {error}"


def test_an_attention_raising_inference_only_error_is_a_clear_error(tmp_path, wikitext2_dir, monkeypatch):
    import attention
    monkeypatch.setitem(attention._REGISTRY, "inference_only", RaisesInferenceOnlyAttention)
    with pytest.raises(ConfigError, match=r"attention='inference_only' cannot be trained: .*eval_ppl.py "
                                          r"--attention=inference_only.*needs torch.no_grad"):
        run(tmp_path, "--attention=inference_only", "--max_iters=2")
    # raised inside the loop, but a configuration error: nothing trained, so no stopped-run entry
    assert not (tmp_path / "manifest.json").exists()


def test_a_declared_inference_only_attention_is_refused_before_the_data(tmp_path, monkeypatch):
    import attention

    class Declared(FailsUnderGradAttention):
        trainable = False

    monkeypatch.setitem(attention._REGISTRY, "declared", Declared)
    assert not attention.is_trainable("declared") and attention.is_trainable("softmax")
    # no wikitext2_dir fixture: the refusal must come before any data is prepared
    with pytest.raises(ConfigError, match="attention='declared' cannot be trained: it is an inference-only"):
        run(tmp_path, "--attention=declared", "--max_iters=2", "--dataset_config=wikitext-2-raw-v1",
            "--data_source_dir=/nonexistent")


def test_training_with_tree_attention_is_a_clear_error(tmp_path, wikitext2_dir):
    import attention
    impl = "vectorized"  # the PyTorch implementation: no C++ kernel build in this test
    mech = attention.build("tree", context={"layer_idx": 0, "block_size": 64}, implementation=impl)
    q = torch.randn(1, 1, 8, 4, requires_grad=True)
    with pytest.raises(attention.InferenceOnlyError):  # the module refuses gradients; train.py must say so
        mech(q, q, q, True)
    with pytest.raises(ConfigError, match="attention='tree' cannot be trained"):
        run(tmp_path, "--attention=tree", f"--attention.implementation={impl}", "--max_iters=1")


# ---------------------------------------------------------------- DDP through torchrun (gloo, CPU)

needs_torchrun = pytest.mark.skipif(not os.path.exists(TORCHRUN), reason="torchrun not installed")

# Runs train.py's main under torchrun with two test-only patches: the task's loss returns NaN on
# one rank at one call (NAN_RANK, NAN_CALL), and evaluation asserts it gets the unwrapped model.
DDP_SCRIPT = textwrap.dedent("""
    import os, sys
    import torch
    import configurator, train
    from tasks import lm

    rank, calls = int(os.environ["RANK"]), [0]
    nan_rank, nan_call = int(os.environ.get("NAN_RANK", -1)), int(os.environ.get("NAN_CALL", -1))
    loss, evaluate = lm.loss, lm.evaluate

    def patched_loss(model, batch):
        value, metrics = loss(model, batch)
        if torch.is_grad_enabled():
            calls[0] += 1
            if rank == nan_rank and calls[0] == nan_call:
                value = value * float("nan")
        return value, metrics

    def checked_evaluate(model, data, cfg, device):
        assert type(model).__name__ == "GPT" and not model.training and not torch.is_grad_enabled()
        return evaluate(model, data, cfg, device)

    lm.loss, lm.evaluate = patched_loss, checked_evaluate
    configurator.run_cli(train.main)
""")


def torchrun(tmp_path, out_dir, *args, extra_env=None, timeout=240):
    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_SCRIPT)
    cmd = [TORCHRUN, "--standalone", "--nproc_per_node=2", str(script), TINY, f"--out_dir={out_dir}",
           "--gradient_accumulation_steps=2", "--num_threads=1", "--eval_iters=1", "--log_interval=1", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dict(env(), **(extra_env or {})))


@needs_torchrun
def test_torchrun_non_finite_loss_on_one_rank_stops_every_rank(tmp_path, wikitext2_dir):
    proc = torchrun(tmp_path, tmp_path / "out", "--max_iters=6", "--eval_interval=2",
                    extra_env={"NAN_RANK": "1", "NAN_CALL": "3"}, timeout=180)  # 1 micro-step per rank: call 3 = iteration 2
    assert proc.returncode != 0
    for rank in (0, 1):  # both ranks stopped with the message, none hung (timeout) or crashed otherwise
        assert f"error: non-finite loss (nan) at iteration 2 (mean over 2 processes; rank {rank} stops)" \
            in proc.stderr, proc.stderr[-3000:]
    ckpt = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=False)
    assert ckpt["iter_num"] == 2 and all(torch.isfinite(v).all() for v in ckpt["model"].values())


@needs_torchrun
@pytest.mark.slow
def test_torchrun_resume_is_exact_with_per_rank_generators(tmp_path, wikitext2_dir):
    common = ["--eval_interval=2", "--lr_decay_iters=4", "--dropout=0.1"]
    full = torchrun(tmp_path, tmp_path / "a", "--max_iters=4", *common)
    assert full.returncode == 0, full.stderr[-3000:]
    first = torchrun(tmp_path, tmp_path / "b", "--max_iters=2", *common)
    assert first.returncode == 0, first.stderr[-3000:]
    ckpt = torch.load(tmp_path / "b" / "ckpt.pt", weights_only=False)
    assert ckpt["world_size"] == 2 and len(ckpt["rng_states"]) == 2
    assert not torch.equal(ckpt["rng_states"][0]["torch"], ckpt["rng_states"][1]["torch"])
    resumed = torchrun(tmp_path, tmp_path / "b", "--max_iters=4", "--init_from=resume", *common)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = step_losses(read_log(tmp_path / "a")), step_losses(read_log(tmp_path / "b"))
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    assert [b[i] for i in (3, 4)] == [a[i] for i in (3, 4)]


def test_out_dir_is_named_from_the_config_layers(tmp_path, monkeypatch):
    assert training.layered_out_dir(["configs/lra/text.py", "configs/attention/fastmax1.py"]) == \
        os.path.join("out", "lra", "text_fastmax1")
    assert training.layered_out_dir([os.path.join(ROOT, "configs", "wikitext2_gpt_mini.py")]) == \
        os.path.join("out", "wikitext2_gpt_mini")
    assert training.layered_out_dir(["configs/wikitext2_gpt_mini.py"], "fastmax") == \
        os.path.join("out", "wikitext2_gpt_mini_fastmax")
    assert training.layered_out_dir(["configs/lra/text_cpu.py", "configs/attention/dense.py",
                                     "configs/lra/dense/text_cpu.py"]) == os.path.join("out", "lra", "text_cpu_dense")
    assert training.layered_out_dir([]) is None
    # through train.py: the attention file's settings apply and the run lands in the layered folder
    monkeypatch.chdir(tmp_path)
    seen = {}
    monkeypatch.setattr(train, "train", lambda cfg, task, dist, ckpt=None, command=None: seen.update(cfg))
    train.main([TINY, os.path.join(ROOT, "configs", "attention", "fastmax2.py")])
    assert seen["out_dir"] == os.path.join("out", "wikitext2_gpt_tiny_fastmax2")
    assert (seen["attention"], seen["attention_params"]) == ("fastmax", {"p": 2})
    train.main([TINY, "--attention=fastmax"])
    assert seen["out_dir"] == os.path.join("out", "wikitext2_gpt_tiny_fastmax")
    train.main([TINY, "--out_dir=mine"])
    assert seen["out_dir"] == "mine"
    # a config file that sets attention (the main job's sets softmax) names no extra layer
    train.main([os.path.join(ROOT, "configs", "wikitext2_danet_gpt_mini.py")])
    assert seen["out_dir"] == os.path.join("out", "wikitext2_danet_gpt_mini")


def test_attention_config_files_build():
    import attention
    from attention.testing import in_repository
    folder = os.path.join(ROOT, "configs", "attention")
    covered = set()
    for name in sorted(os.listdir(folder)):
        cfg = configurator.parse(train.DEFAULTS, [os.path.join(folder, name)])
        attention.check_params(cfg["attention"], cfg["attention_params"])
        covered.add(cfg["attention"])
    # every method of the repository has its defaults' file; one registered from outside (--import) has none
    assert covered == {name for name in attention.registered() if in_repository(name)} - {"softmax_reference"}


@pytest.mark.parametrize("name,why", [("reformer", "depends on later tokens"), ("informer", "depends on later tokens"),
                                      ("linformer", "has no causal form")])
def test_causal_tasks_refuse_attentions_that_are_not_exactly_causal(tmp_path, name, why):
    with pytest.raises(ConfigError, match=f"causal task 'lm' cannot use it: attention='{name}' .*{why}"):
        train.main([TINY, f"--out_dir={tmp_path}", f"--attention={name}"])
    # the same attention passes the check for a non-causal task
    cfg = configurator.parse(train.DEFAULTS, ["configs/mlm/wikitext2_bert_mini.py", f"--attention={name}"])
    training.check_trainable(cfg)
