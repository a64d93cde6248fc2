import json
import os

import pytest

from scripts.analysis import archive_runs
from scripts.analysis.runs import find_runs, open_run


def make_run(root, name, files):
    run = root / name
    run.mkdir(parents=True)
    for f in files:
        (run / f).write_text(json.dumps({"file": f}))
    return run


def test_packs_logs_and_provenance_but_never_checkpoints(tmp_path, capsys):
    run = make_run(tmp_path / "out", "linear_s1337", ["manifest.json", "final_metrics.json", "log.jsonl",
                                                     "eval_test.json", "ckpt.pt", "best.pt"])
    dest = tmp_path / "results" / "baselines"
    archive_runs.main([str(dest), str(run)])
    assert os.listdir(dest) == ["linear_s1337.tar.xz"]
    packed = open_run(dest / "linear_s1337")
    assert packed.packed and packed.files() == ["eval_test.json", "final_metrics.json", "log.jsonl", "manifest.json"]
    for name in packed.files():  # byte for byte
        assert packed.read_bytes(name) == (run / name).read_bytes()
    assert packed.log == [{"file": "log.jsonl"}] and packed.final_metrics == {"file": "final_metrics.json"}
    assert [r.path for r in find_runs([str(dest)])] == [str(dest / "linear_s1337")]
    line = capsys.readouterr().out.strip()
    assert line.startswith("- `linear_s1337`: [linear_s1337.tar.xz](")
    assert line.endswith("/linear_s1337.tar.xz) (manifest.json, final_metrics.json, log.jsonl, eval_test.json)")
    assert "ckpt.pt" not in line


def test_archiving_again_replaces_the_packed_run_with_the_same_bytes_for_the_same_files(tmp_path):
    run = make_run(tmp_path / "out", "r_s0", ["manifest.json", "log.jsonl"])
    dest = tmp_path / "results"
    archive_runs.main([str(dest), str(run)])
    first = (dest / "r_s0.tar.xz").read_bytes()
    archive_runs.main([str(dest), str(run)])
    assert (dest / "r_s0.tar.xz").read_bytes() == first
    (run / "final_metrics.json").write_text("{}")  # the run finished since
    archive_runs.main([str(dest), str(run)])
    assert open_run(dest / "r_s0").final_metrics == {}


def test_links_are_relative_to_docs():
    lines = archive_runs.link_lines("results/x", [("run_s0", ["manifest.json", "train.log"])])
    assert lines == ["  - `run_s0`: [run_s0.tar.xz](../results/x/run_s0.tar.xz) (manifest.json, train.log)"]


def test_a_run_without_manifest_is_refused(tmp_path):
    run = make_run(tmp_path / "out", "broken", ["log.jsonl"])
    with pytest.raises(SystemExit, match="no manifest.json"):
        archive_runs.main([str(tmp_path / "dest"), str(run)])
    with pytest.raises(SystemExit):
        archive_runs.main([str(tmp_path / "dest"), str(tmp_path / "nowhere")])


def test_an_old_run_folder_in_the_way_is_refused(tmp_path):
    run = make_run(tmp_path / "out", "r_s0", ["manifest.json", "log.jsonl"])
    make_run(tmp_path / "results", "r_s0", ["manifest.json"])
    with pytest.raises(SystemExit, match="is a run folder already"):
        archive_runs.main([str(tmp_path / "results"), str(run)])
    assert not (tmp_path / "results" / "r_s0.tar.xz").exists()
