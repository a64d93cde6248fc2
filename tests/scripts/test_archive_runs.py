import json
import os

import pytest

from scripts.analysis import archive_runs


def make_run(root, name, files):
    run = root / name
    run.mkdir(parents=True)
    for f in files:
        (run / f).write_text(json.dumps({"file": f}))
    return run


def test_copies_logs_and_provenance_but_never_checkpoints(tmp_path, capsys):
    run = make_run(tmp_path / "out", "linear_s1337", ["manifest.json", "final_metrics.json", "log.jsonl",
                                                     "eval_test.json", "ckpt.pt", "best.pt"])
    dest = tmp_path / "results" / "baselines"
    archive_runs.main([str(dest), str(run)])
    assert sorted(os.listdir(dest / "linear_s1337")) == ["eval_test.json", "final_metrics.json", "log.jsonl",
                                                         "manifest.json"]
    assert json.loads((dest / "linear_s1337" / "log.jsonl").read_text()) == {"file": "log.jsonl"}
    line = capsys.readouterr().out.strip()
    assert line.startswith("- `linear_s1337/`: [manifest.json](")
    assert "[eval_test.json](" in line and "ckpt.pt" not in line


def test_links_are_relative_to_docs():
    lines = archive_runs.link_lines("results/x", [("run_s0", ["manifest.json", "train.log"])])
    assert lines == ["  - `run_s0/`: [manifest.json](../results/x/run_s0/manifest.json), "
                     "[train.log](../results/x/run_s0/train.log)"]


def test_a_run_without_manifest_is_refused(tmp_path):
    run = make_run(tmp_path / "out", "broken", ["log.jsonl"])
    with pytest.raises(SystemExit, match="no manifest.json"):
        archive_runs.main([str(tmp_path / "dest"), str(run)])
    with pytest.raises(SystemExit):
        archive_runs.main([str(tmp_path / "dest"), str(tmp_path / "nowhere")])
