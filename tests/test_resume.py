"""Resuming a classify run with only ``--init_from=resume --out_dir=DIR`` (training.resume_config):
the resumed run must train and test on the checkpoint's data, not on the defaults' (issue: an
Image run resumed this way trained on IMDB; a ListOps run converted IMDB and crashed)."""
import json
import os

import pytest

import train
from configurator import ConfigError

SMALL = ["--task=classify", "--n_layer=1", "--n_head=2", "--n_embd=16", "--batch_size=4", "--num_threads=1",
         "--eval_interval=2", "--eval_max_batches=2", "--test_max_batches=2", "--log_interval=1"]


def read_log(out):
    with open(out / "log.jsonl") as f:
        return [json.loads(line) for line in f]


def resume_and_check(out, lra_task, max_len):
    before = json.load(open(out / "final_metrics.json"))
    train.main([f"--out_dir={out}", "--init_from=resume", "--max_iters=4", "--num_threads=1"])
    final = json.load(open(out / "final_metrics.json"))
    assert final["config"]["lra_task"] == lra_task and final["config"]["max_len"] == max_len
    assert final["iters"] == 4 and final["config"]["init_from"] == "resume"
    # the same data as the first run: its manifest summary and the test examples it was scored on
    assert final["data"] == before["data"] and final["data"] is not None
    assert final["test_examples"] == before["test_examples"]
    starts = [r for r in read_log(out) if "start" in r]
    assert [r["start"]["init_from"] for r in starts] == ["scratch", "resume"]
    assert starts[0]["data"] == starts[1]["data"] == final["data"]
    return final


def test_resume_a_listops_run_with_only_out_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("LRA_DIR", raising=False)
    out = tmp_path / "run"
    options = "--lra_options={'num_train': 64, 'num_val': 16, 'num_test': 16, 'workers': 1}"
    train.main([*SMALL, "--lra_task=listops", "--max_len=128", options, f"--lra_dir={tmp_path / 'lra'}",
                f"--out_dir={out}", "--max_iters=2"])
    # lra_dir is where the files are (a run-only key): it must be given again, or LRA_DIR set
    monkeypatch.setenv("LRA_DIR", str(tmp_path / "lra"))
    final = resume_and_check(out, "listops", 128)
    assert final["config"]["lra_options"]["num_train"] == 64
    assert final["data"]["train_size"] == 64
    # an explicit data key that differs from the checkpoint's is refused, naming both values
    with pytest.raises(ConfigError, match="lra_task='text' differs from the checkpoint's 'listops'"):
        train.main([f"--out_dir={out}", "--init_from=resume", "--lra_task=text"])
    with pytest.raises(ConfigError, match=r"lra_options\['num_train'\]=32 differs from the checkpoint's 64"):
        train.main([f"--out_dir={out}", "--init_from=resume", "--lra_options={'num_train': 32}"])
    # a run-only entry may change
    train.main([f"--out_dir={out}", "--init_from=resume", "--max_iters=5", "--lra_options={'workers': 2}"])
    assert json.load(open(out / "final_metrics.json"))["config"]["lra_options"] == {
        "num_train": 64, "num_val": 16, "num_test": 16, "workers": 2}


def test_resume_an_image_run_with_only_out_dir(tmp_path, monkeypatch, cifar10_dir):
    monkeypatch.setenv("CIFAR10_DIR", cifar10_dir)  # $CIFAR10_DIR, else ../shared's subset (tests/conftest.py)
    monkeypatch.setenv("LRA_DIR", str(tmp_path / "lra"))
    out = tmp_path / "run"
    train.main([*SMALL, "--lra_task=image", f"--out_dir={out}", "--max_iters=2"])
    final = resume_and_check(out, "image", 0)
    assert final["data"]["source"] != "" and not os.path.exists(tmp_path / "lra" / "imdb")  # no IMDB touched
