"""scripts/analysis/runs.py: a run read the same from its folder and from its packed file, packing that
keeps every byte (and gives the same bytes again), unpacking, the merged eval results of a sweep, and
one error line for a missing or malformed run."""
import io
import json
import lzma
import os
import subprocess
import tarfile

import pytest

from scripts.analysis import runs
from scripts.analysis.runs import RunFormatError, RunNotFound, find_runs, open_run

MANIFEST = {"train": {"command": "python train.py", "commit": "abc", "machine": {"cpu": "Intel Xeon"},
                      "date": "2026-11-27", "versions": {}}}
FINAL = {"test_accuracy": 0.5, "config": {"task": "recall"}}
LOG = [{"start": {"iter": 0}}, {"iter": 10, "loss": 2.0}, {"iter": 20, "eval": {"val_loss": 1.5}}]


def make_run(folder, final=True, extra=None):
    """A run folder as train.py leaves it (manifest, log, printed output, final metrics)."""
    os.makedirs(folder)
    files = {"manifest.json": json.dumps(MANIFEST, indent=1), "log.jsonl": "".join(json.dumps(r) + "\n" for r in LOG),
             "train.log": "model: 1.2M parameters\nsaved checkpoint\n", **(extra or {})}
    if final:
        files["final_metrics.json"] = json.dumps(FINAL, indent=1)
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    return {name: text.encode() for name, text in files.items()}


def test_a_packed_run_reads_as_its_folder_did(tmp_path):
    folder = str(tmp_path / "sweep" / "softmax_s0")
    files = make_run(folder)
    before = open_run(folder)
    assert not before.packed and before.files() == sorted(files)
    view = (before.manifest, before.final_metrics, before.log, before.read_text("train.log"))
    assert runs.main(["pack", str(tmp_path / "sweep")]) == 0
    assert not os.path.exists(folder) and os.path.isfile(folder + ".tar.xz")
    for path in (folder, folder + ".tar.xz"):  # the run path, or the packed file itself
        run = open_run(path)
        assert run.packed and run.path == folder and run.name == "softmax_s0"
        assert (run.manifest, run.final_metrics, run.log, run.read_text("train.log")) == view
        assert {n: run.read_bytes(n) for n in run.files()} == files
    assert [r.path for r in find_runs([str(tmp_path)])] == [folder]
    assert runs.run_cpu(folder) == "Intel Xeon"


def test_packing_is_deterministic_and_any_tar_unpacks_it(tmp_path):
    files = make_run(str(tmp_path / "a" / "r_s1"))
    make_run(str(tmp_path / "b" / "r_s1"))
    os.utime(tmp_path / "b" / "r_s1" / "log.jsonl", (0, 12345))  # other times, same bytes
    runs.main(["pack", str(tmp_path / "a"), str(tmp_path / "b")])
    assert (tmp_path / "a" / "r_s1.tar.xz").read_bytes() == (tmp_path / "b" / "r_s1.tar.xz").read_bytes()
    subprocess.run(["tar", "-xJf", str(tmp_path / "a" / "r_s1.tar.xz"), "-C", str(tmp_path)], check=True)
    assert {n: (tmp_path / "r_s1" / n).read_bytes() for n in os.listdir(tmp_path / "r_s1")} == files
    runs.main(["unpack", str(tmp_path / "a" / "r_s1.tar.xz"), "--to", str(tmp_path / "again")])
    assert {n: (tmp_path / "again" / "r_s1" / n).read_bytes() for n in os.listdir(tmp_path / "again" / "r_s1")} == files
    assert runs.main(["unpack", str(tmp_path / "a" / "r_s1.tar.xz"), "--to", str(tmp_path / "again")]) == 2  # no overwrite
    runs.main(["pack", str(tmp_path / "again")])  # packing the unpacked folder gives the same bytes
    assert (tmp_path / "again" / "r_s1.tar.xz").read_bytes() == (tmp_path / "a" / "r_s1.tar.xz").read_bytes()


def test_find_runs_requires_final_metrics_and_orders_as_the_folders_did(tmp_path):
    make_run(str(tmp_path / "x" / "a-1"))
    make_run(str(tmp_path / "x" / "a"))
    make_run(str(tmp_path / "x" / "unfinished"), final=False)
    folders = [r.path for r in find_runs([str(tmp_path / "x")])]
    runs.main(["pack", str(tmp_path / "x" / "a")])  # one packed, one a folder: found alike, in the same order
    assert [r.path for r in find_runs([str(tmp_path / "x")])] == folders == [str(tmp_path / "x" / "a-1"),
                                                                             str(tmp_path / "x" / "a")]
    assert len(find_runs([str(tmp_path / "x")], require=None)) == 3
    assert [r.path for r in find_runs([str(tmp_path / "x" / "a")])] == [str(tmp_path / "x" / "a")]  # by run path


def test_pack_refuses_checkpoints_and_sub_folders(tmp_path, capsys):
    make_run(str(tmp_path / "r"), extra={"ckpt.pt": "weights"})
    assert runs.main(["pack", str(tmp_path / "r")]) == 2
    assert "checkpoints (ckpt.pt)" in capsys.readouterr().err and os.path.isdir(tmp_path / "r")
    assert runs.main(["pack", str(tmp_path / "nothing_here")]) == 2


@pytest.mark.parametrize("damage", ["not xz", "outside", "bad json"])
def test_a_malformed_packed_run_is_one_error_line(tmp_path, capsys, damage):
    path = tmp_path / "r_s0.tar.xz"
    if damage == "not xz":
        path.write_bytes(b"this is not an archive")
    elif damage == "outside":
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo("other/final_metrics.json")
            tar.addfile(info, io.BytesIO(b""))
        path.write_bytes(lzma.compress(buffer.getvalue()))
    else:
        path.write_bytes(runs.pack_bytes("r_s0", {"final_metrics.json": b'{"test_accuracy": 0.5,\n oops}'}))
    with pytest.raises(RunFormatError) as e:
        open_run(tmp_path / "r_s0").final_metrics
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    if damage == "bad json":  # the archive is sound: cat prints the file as it is
        assert "final_metrics.json, line 2: not valid JSON" in str(e.value)
        return
    assert runs.main(["cat", str(tmp_path / "r_s0"), "final_metrics.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_a_missing_run_names_both_places_it_looked(tmp_path, capsys):
    with pytest.raises(RunNotFound, match=r"neither a run folder nor a packed run .*nowhere\.tar\.xz"):
        open_run(tmp_path / "nowhere")
    make_run(str(tmp_path / "r"))
    with pytest.raises(RunNotFound, match="the run has no eval_test.json"):
        open_run(tmp_path / "r").read_text("eval_test.json")
    assert open_run(tmp_path / "r").read_json("eval_test.json") is None
    assert runs.main(["cat", str(tmp_path / "nowhere"), "train.log"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_a_sweeps_eval_files_merge_into_one_table_and_come_back_byte_for_byte(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    texts = {f"tree_E0.{i}_s0.json": json.dumps({"metric": "perplexity", "value": 40.0 + i / 3, "protocol": "blocks",
                                                  "attention_params": {"E": i / 10}}, indent=2) for i in (2, 5)}
    for name, text in texts.items():
        (sweep / name).write_text(text)
    (sweep / "manifest.json").write_text(json.dumps(MANIFEST))
    expected = [(n, json.loads(t)) for n, t in sorted(texts.items())]
    assert runs.read_evals(str(sweep)) == expected
    assert runs.main(["merge", str(sweep)]) == 0
    assert sorted(os.listdir(sweep)) == ["evals.jsonl", "manifest.json"]
    lines = (sweep / "evals.jsonl").read_text().splitlines()
    assert [json.loads(line)["file"] for line in lines] == sorted(texts)
    assert runs.read_evals(str(sweep)) == expected
    runs.main(["unpack", str(sweep / "evals.jsonl"), "--to", str(tmp_path / "back")])
    assert {n: (tmp_path / "back" / n).read_text() for n in os.listdir(tmp_path / "back")} == texts
    (sweep / "tree_E0.2_s0.json").write_text(texts["tree_E0.2_s0.json"])  # in both forms: ambiguous
    with pytest.raises(RunFormatError, match="also a file"):
        runs.read_evals(str(sweep))


def test_merge_refuses_a_file_it_could_not_give_back(tmp_path):
    (tmp_path / "a.json").write_text('{"value": 1}\n')  # not as eval_ppl.py writes it: the bytes would change
    assert runs.main(["merge", str(tmp_path)]) == 2
    assert os.listdir(tmp_path) == ["a.json"]
