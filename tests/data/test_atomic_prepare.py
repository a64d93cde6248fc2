"""Prepared data are built whole (issue 41, items 1-3): a bad source never replaces good data, a
killed build leaves nothing that is taken for a release, caches inside a rebuilt folder are kept,
and a run never regenerates LRA data made with other options (it says which options use them)."""
import os

import pytest

import data
import train
from configurator import ConfigError
from data.lra import FOUND_IN_PLACE, listops, pathfinder
from data.wikitext2 import prepare as wt2

TEXT = " = Valkyria = \n\n The game began development in 2010 , carrying over a large portion of the work . \n" * 30
SIZES = dict(num_train=6, num_val=2, num_test=2)


def write_corpus(folder, text=TEXT):
    os.makedirs(folder, exist_ok=True)
    for name in ("train", "valid", "test"):
        with open(os.path.join(folder, f"wiki.{name}.tokens"), "w", encoding="utf-8") as f:
            f.write(text)
    return str(folder)


def contents(folder):
    """relative path -> bytes of every file under ``folder``."""
    out = {}
    for d, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                out[os.path.relpath(os.path.join(d, name), folder)] = f.read()
    return out


def siblings(folder):
    return sorted(os.listdir(os.path.dirname(os.path.abspath(folder))))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setattr(wt2, "HERE", str(tmp_path / "prepared"))
    monkeypatch.delenv("WIKITEXT2_DIR", raising=False)
    return tmp_path


# ---------------------------------------------------------------- item 1: a bad source replaces nothing


def test_an_empty_wikitext2_source_leaves_the_prepared_data_as_they_were(home):
    wt2.prepare(source_dir=write_corpus(home / "good"), verbose=False)
    folder = wt2.data_dir()
    before = contents(folder)
    empty = write_corpus(home / "empty", "")
    with pytest.raises(data.DataFormatError, match=r"wiki\.train\.tokens.*empty"):
        wt2.prepare(source_dir=empty, verbose=False)
    # a source with text but fewer tokens than a window: refused after tokenizing, before the swap
    short = write_corpus(home / "short", " a b c \n")
    with pytest.raises(data.DataFormatError, match="at least 257"):
        wt2.prepare(source_dir=short, verbose=False, min_tokens=257)
    assert contents(folder) == before and siblings(folder) == ["wikitext-2-v1"]
    # through train.py: one error line naming the file, the prepared data untouched
    with pytest.raises(ConfigError, match=r"wiki\.train\.tokens"):
        train.main(["--n_layer=1", "--n_head=2", "--n_embd=16", f"--data_source_dir={empty}",
                    f"--out_dir={home / 'run'}"])
    assert contents(folder) == before
    assert wt2.open_split("train").size > 0


def test_a_rebuild_from_another_source_keeps_the_caches_inside_the_folder(home):
    wt2.prepare(source_dir=write_corpus(home / "a"), verbose=False)
    folder = wt2.data_dir()
    cache = os.path.join(folder, "bert-wordpiece")  # where data/mlm.py keeps the MLM tokens of WikiText-2
    os.makedirs(cache)
    data.write_manifest(cache, {"dataset": "wikitext2", "sha256": "of a"})
    with open(os.path.join(folder, "stale.txt"), "w") as f:
        f.write("a file the new build does not write")
    other = wt2.prepare(source_dir=write_corpus(home / "b", TEXT.replace("game", "dog")), verbose=False)
    assert data.read_manifest(folder) == other and data.read_manifest(cache) == {"dataset": "wikitext2",
                                                                                  "sha256": "of a"}
    assert not os.path.exists(os.path.join(folder, "stale.txt")) and siblings(folder) == ["wikitext-2-v1"]


# ---------------------------------------------------------------- item 2: a killed build


class Killed(BaseException):
    """Stands for a Ctrl-C or a kill in the middle of a build."""


def test_a_killed_listops_build_leaves_no_folder_that_looks_like_a_release(tmp_path, monkeypatch):
    lra_dir = str(tmp_path)
    folder = os.path.join(lra_dir, listops.FOLDER)
    real_write, written = listops.write_tsv, []

    def write_then_die(path, rows):
        real_write(path, rows)
        written.append(path)
        raise Killed()

    monkeypatch.setattr(listops, "write_tsv", write_then_die)
    with pytest.raises(Killed):
        listops.ensure(lra_dir, seed=0, workers=1, **SIZES)
    assert written and not os.path.exists(folder)
    monkeypatch.setattr(listops, "write_tsv", real_write)
    m = listops.ensure(lra_dir, seed=0, workers=1, **SIZES)  # generated, not "found in place"
    assert m["source"] == "generated" and os.listdir(lra_dir) == [listops.FOLDER]
    # killed while replacing a good set: the good set stays, with its manifest
    before = contents(folder)
    monkeypatch.setattr(listops, "write_tsv", write_then_die)
    with pytest.raises(Killed):
        listops.ensure(lra_dir, seed=1, workers=1, **SIZES)
    assert contents(folder) == before and data.read_manifest(folder)["seed"] == 0


def test_leftovers_of_a_dead_process_are_removed_or_put_back(tmp_path):
    folder = str(tmp_path / "set")
    dead = 2 ** 22 + 12345  # above the default pid_max: no such process
    os.makedirs(f"{folder}.partial.{dead}")
    # killed between the two renames of the swap: the previous copy is put back
    os.makedirs(f"{folder}.old.{dead}")
    data.write_manifest(f"{folder}.old.{dead}", {"dataset": "previous"})
    data.recover_folder(folder)
    assert data.read_manifest(folder) == {"dataset": "previous"} and siblings(folder) == ["set"]
    # killed after the swap: the previous copy's sub-folders are carried in, the rest removed
    os.makedirs(f"{folder}.old.{dead}/cache")
    data.write_manifest(f"{folder}.old.{dead}/cache", {"dataset": "cache"})
    data.recover_folder(folder)
    assert data.read_manifest(os.path.join(folder, "cache")) == {"dataset": "cache"} and siblings(folder) == ["set"]


def test_a_folder_found_in_place_says_how_to_rebuild(tmp_path):
    lra_dir = str(tmp_path)
    listops.ensure(lra_dir, seed=0, workers=1, **SIZES)
    os.remove(os.path.join(lra_dir, listops.FOLDER, data.MANIFEST))  # as the LRA release comes
    with pytest.raises(data.DataMismatch, match=f"found in place.*rm -r"):
        listops.ensure(lra_dir, workers=1, num_train=9, num_val=2, num_test=2)
    assert data.read_manifest(os.path.join(lra_dir, listops.FOLDER))["source"] == FOUND_IN_PLACE


# ---------------------------------------------------------------- item 3: the ListOps folder names


def test_the_generators_take_the_lra_dir_train_py_takes(tmp_path):
    lra_dir = str(tmp_path / "lra")
    listops.main([f"--lra_dir={lra_dir}", "--num_train=6", "--num_val=2", "--num_test=2", "--workers=1"])
    assert data.read_manifest(os.path.join(lra_dir, listops.FOLDER))["sizes"] == {"train": 6, "val": 2, "test": 2}
    pathfinder.main([f"--lra_dir={lra_dir}", "--num=3", "--workers=1", "--batch_size=2"])
    assert data.read_manifest(pathfinder.folder(lra_dir))["sizes"] == {"num": 3}
    # train.py reads them from the same --lra_dir (the tiny set asked for as it is)
    metrics = train.main(["configs/lra/listops_cpu.py", f"--lra_dir={lra_dir}", f"--out_dir={tmp_path / 'run'}",
                          "--lra_options={'num_train': 6, 'num_val': 2, 'num_test': 2}", "--max_iters=1",
                          "--eval_interval=1", "--batch_size=2", "--n_layer=1", "--n_embd=16", "--n_head=2",
                          "--max_len=64", "--eval_max_batches=1", "--test_max_batches=1"])
    assert metrics is not None


def test_a_run_never_regenerates_over_a_set_made_with_other_options(tmp_path):
    lra_dir = str(tmp_path)
    folder = os.path.join(lra_dir, listops.FOLDER)
    listops.ensure(lra_dir, seed=0, workers=1, **SIZES)
    before = contents(folder)
    argv = ["--task=classify", "--lra_task=listops", f"--lra_dir={lra_dir}", f"--out_dir={tmp_path / 'run'}"]
    with pytest.raises(ConfigError) as e:
        train.main(argv)
    message = str(e.value)
    assert "sizes: prepared {'train': 6, 'val': 2, 'test': 2}, asked {'train': 96000" in message and "\n" not in message
    assert """--lra_options="{'num_train': 6, 'num_val': 2, 'num_test': 2, 'seed': 0}\"""" in message
    assert contents(folder) == before
    # the command line generator refuses too (it never replaces a set); the module function rebuilds
    with pytest.raises(SystemExit) as exit_:
        listops.main([f"--lra_dir={lra_dir}", "--num_train=8", "--num_val=2", "--num_test=2", "--workers=1"])
    assert exit_.value.code == 2 and contents(folder) == before
    assert listops.ensure(lra_dir, seed=0, workers=1, num_train=8, num_val=2, num_test=2)["sizes"]["train"] == 8
