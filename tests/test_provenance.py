"""provenance.py: the manifest.json of results folders and training runs."""
import json
import os
import re

import pytest

import provenance
import train
from data import DataFormatError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_record_adds_and_replaces_entries(tmp_path):
    out = tmp_path / "bench_x"
    provenance.record(str(out / "grid"), commit="abc", extra={"threads": 2}, argv=["x.py", "--T", "256"])
    provenance.record(str(out / "mem"), commit="def")
    provenance.record(str(out / "grid"), commit="ghi", argv=["x.py"])  # the same output again: replaced
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest) == ["grid", "mem"]
    grid = manifest["grid"]
    assert grid["commit"] == "ghi" and "threads" not in grid
    assert {"command", "commit", "machine", "date", "versions"} <= set(grid)
    assert grid["machine"]["cores"] == os.cpu_count() and grid["versions"]["torch"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", grid["date"])


def test_record_refuses_a_broken_manifest(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(DataFormatError, match="manifest.json"):
        provenance.record(str(tmp_path / "a"))
    assert (tmp_path / "manifest.json").read_text() == "{not json"  # left as it was


def test_command_line_names_modules_and_files():
    assert provenance.command_line([os.path.join(ROOT, "scripts", "bench", "tree.py"), "--L", "1024"]) \
        == "python -m scripts.bench.tree --L 1024"
    assert provenance.command_line([os.path.join(ROOT, "train.py"), "configs/a b.py"]) == "python train.py 'configs/a b.py'"


def test_git_commit_is_a_commit_or_unknown():
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?|unknown", provenance.git_commit())


def test_train_writes_the_run_manifest(tmp_path):
    tiny = os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py")
    train.main([tiny, f"--out_dir={tmp_path}", "--max_iters=2", "--num_threads=1", "--eval_interval=2",
                "--eval_iters=1"])
    train.main([f"--out_dir={tmp_path}", "--init_from=resume", "--max_iters=3", "--num_threads=1"])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert sorted(manifest) == ["train", "train_resumed_at_2"]
    assert manifest["train"]["command"].startswith("python train.py " + tiny)
    assert "--init_from=resume" in manifest["train_resumed_at_2"]["command"]
