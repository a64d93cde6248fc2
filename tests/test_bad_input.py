"""Bad input from a new user (issue 41): each command below exits with status 2 after one
``error:`` line on stderr that names the bad value, prints no traceback, and leaves the prepared
data and checkpoints it touches byte-identical.

The fixtures live under the test's temporary folder: a small WikiText-2 copy prepared into a
redirected ``data/wikitext2`` (``wt2.HERE``), a two-step language-model run, a tiny ListOps set,
a damaged checkpoint. The commands run in this process through the same entry points as their
``__main__`` (``configurator.run_cli(main)`` or the data module's ``main``); three of them also run
as real subprocesses, so that "no traceback" is checked on the command line itself.
"""
import hashlib
import os
import subprocess
import sys

import pytest

import configurator
import eval_mlm
import eval_ppl
import train
from data.lra import listops
from data.wikitext2 import prepare as wt2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = " = Valkyria = \n\n The game began development in 2010 , carrying over a large portion of the work . \n" * 40


def write_corpus(folder, text=TEXT):
    os.makedirs(folder, exist_ok=True)
    for name in ("train", "valid", "test"):
        with open(os.path.join(folder, f"wiki.{name}.tokens"), "w", encoding="utf-8") as f:
            f.write(text)
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Paths of the fixtures (see the module docstring), made once for the module."""
    root = tmp_path_factory.mktemp("bad_input")
    w = {k: str(root / k) for k in ("home", "corpus", "empty_source", "no_files", "scratch", "run", "empty_run",
                                    "damaged", "lra")}
    write_corpus(w["corpus"])
    write_corpus(w["empty_source"], "")
    for k in ("no_files", "scratch", "empty_run", "damaged"):
        os.makedirs(w[k])
    with open(os.path.join(w["damaged"], "ckpt.pt"), "wb") as f:
        f.write(b"PK\x03\x04 this is not a checkpoint")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wt2, "HERE", w["home"])
        mp.delenv("WIKITEXT2_DIR", raising=False)
        wt2.prepare(source_dir=w["corpus"], verbose=False)
        train.main(["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=2", "--max_iters=2",
                    "--eval_interval=2", "--eval_iters=1", "--warmup_iters=0", f"--out_dir={w['run']}"])
    listops.ensure(w["lra"], num_train=6, num_val=2, num_test=2, seed=0, workers=1)
    return w


@pytest.fixture(autouse=True)
def prepared_home(world, monkeypatch):
    monkeypatch.setattr(wt2, "HERE", world["home"])
    monkeypatch.delenv("WIKITEXT2_DIR", raising=False)  # else every command would re-hash the shared copy
    monkeypatch.delenv("LRA_DIR", raising=False)


def tree_digest(*folders):
    """path -> SHA-256 of every file under ``folders``."""
    out = {}
    for folder in folders:
        for d, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(d, name)
                with open(path, "rb") as f:
                    out[path] = hashlib.sha256(f.read()).hexdigest()
    return out


TRAIN, EVAL_PPL, EVAL_MLM = "train.py", "eval_ppl.py", "eval_mlm.py"
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--out_dir={scratch}/x"]
LISTOPS = ["--task=classify", "--lra_task=listops", "--lra_dir={lra}", "--out_dir={scratch}/lra"]

# (program, argv, what the one error line must contain)
CASES = [
    (TRAIN, [*TINY, "--attention=fastmax", "--attention.p=7"], "p=7"),
    (TRAIN, [*TINY, "--attention=longformer", "--attention.window=-3"], "window=-3"),
    (TRAIN, [*TINY, "--attention=performer", "--attention.kernel='cosh'"], "'cosh'"),
    (TRAIN, [*TINY, "--attention=tree", "--attention.E=2.0", "--eval_only=True"], "E=2.0"),
    (TRAIN, [*TINY, "--attention=performer", "--attention.nb_features=8"], "nb_features"),
    (TRAIN, [*TINY, "--attention=softmaxx"], "softmaxx"),
    (TRAIN, [*TINY, "--device=cuda"], "device=cuda"),
    (TRAIN, [*TINY, "--device=mps"], "device=mps"),
    (TRAIN, [*TINY, "--device=gpu"], "'gpu'"),
    (TRAIN, ["max_iters=10"], "--max_iters=10"),
    (TRAIN, ["--max_iters=ten"], "'ten'"),
    (TRAIN, ["--max_iter=10"], "max_iter"),
    (TRAIN, ["configs/no_such_config.py"], "configs/no_such_config.py"),
    (TRAIN, [*TINY, "--data_source_dir={no_files}"], "--data_source_dir={no_files}"),
    (TRAIN, [*TINY, "--data_source_dir={empty_source}"], "wiki.train.tokens"),
    (TRAIN, [*TINY, "--block_size=0"], "block_size"),
    (TRAIN, ["--task=classify", "--block_size=256"], "'block_size' is not read by task 'classify'"),
    (TRAIN, [*TINY, "--recall_pairs=4"], "'recall_pairs' belongs to task(s) recall, not to task 'lm'"),
    (TRAIN, [*TINY, "--lr_schedule=linear"], "'linear'"),
    (TRAIN, [*TINY, "--init_from=pretrained"], "'pretrained'"),
    (TRAIN, [*TINY, "--dtype=bfloat16"], "dtype=bfloat16"),
    (TRAIN, ["--init_from=resume", "--out_dir={empty_run}"], "{empty_run}"),
    (TRAIN, ["--init_from=resume", "--out_dir={damaged}"], "{damaged}"),
    (TRAIN, ["--init_from=resume", "--out_dir={run}", "--n_layer=3"], "n_layer=3"),
    (TRAIN, [*LISTOPS], "--lra_options="),
    (TRAIN, [*LISTOPS, "--lra_options={{'nums': 1}}"], "'nums'"),
    (EVAL_PPL, ["--out_dir={empty_run}"], "needs the network"),
    (EVAL_PPL, ["--out_dir={damaged}"], "{damaged}"),
    (EVAL_PPL, ["--out_dir={run}", "--attention=fastmax", "--attention.p=7"], "p=7"),
    (EVAL_PPL, ["--out_dir={run}", "--device=cuda"], "device=cuda"),
    (EVAL_PPL, ["--out_dir={run}", "--split=dev"], "'dev'"),
    (EVAL_PPL, ["--out_dir={run}", "--protocol=sliding"], "'sliding'"),
    (EVAL_PPL, ["--out_dir={run}", "--stride=0"], "stride"),
    (EVAL_PPL, ["--out_dir={run}", "--block_size=1000"], "1000"),
    (EVAL_MLM, ["--out_dir={empty_run}"], "{empty_run}"),
    (EVAL_MLM, ["--out_dir={run}"], "'lm'"),
    (EVAL_MLM, ["--out_dir={run}", "--seq_lens=abc"], "'abc'"),
    ("data.wikitext2.prepare", ["--source_dir={no_files}"], "--source_dir={no_files}"),
    ("data.wikitext2.prepare", ["--source_dir={empty_source}"], "wiki.train.tokens"),
    ("data.wikitext2.prepare", ["--config=wikitext-103"], "'wikitext-103'"),
    ("data.lra.listops", ["--lra_dir={lra}", "--num_train=8", "--workers=1"], "'train': 8"),
    ("data.lra.listops", ["--lra_dir={lra}", "--num_train=0"], "--num_train"),
    ("data.lra.pathfinder", ["--lra_dir={scratch}", "--difficulty=hard"], "'hard'"),
    ("data.recall", ["--sizes=1,2"], "'1,2'"),
]


def run_in_process(program, argv):
    """Run ``program`` on ``argv`` as its ``__main__`` does; return its exit status (0 if it returned)."""
    import importlib

    try:
        if program == TRAIN:
            configurator.run_cli(train.main, argv)
        elif program == EVAL_PPL:
            configurator.run_cli(eval_ppl.main, argv)
        elif program == EVAL_MLM:
            configurator.run_cli(eval_mlm.main, argv)
        else:
            importlib.import_module(program).main(argv)
    except SystemExit as e:
        return e.code
    return 0


def check_one_error_line(err, expected):
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1, f"expected one error line, got:\n{err}"
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]


def test_the_table_has_at_least_25_commands_over_every_program():
    assert len(CASES) >= 25
    assert {program for program, _, _ in CASES} >= {TRAIN, EVAL_PPL, EVAL_MLM, "data.wikitext2.prepare",
                                                     "data.lra.listops"}


@pytest.mark.parametrize("program, argv, expected", CASES, ids=[f"{p}:{' '.join(a)}"[:90] for p, a, _ in CASES])
def test_a_bad_command_is_one_error_line_and_changes_nothing(world, program, argv, expected, capsys):
    argv = [a.format(**world) for a in argv]
    before = tree_digest(world["home"], world["run"], world["lra"], world["damaged"])
    capsys.readouterr()
    status = run_in_process(program, argv)
    err = capsys.readouterr().err
    assert status == 2, f"exit status {status}; stderr:\n{err}"
    check_one_error_line(err, expected.format(**world))
    assert tree_digest(world["home"], world["run"], world["lra"], world["damaged"]) == before


SUBPROCESS_CASES = [
    (["train.py", "--attention=fastmax", "--attention.p=7", "--out_dir={scratch}/s"], "p=7"),
    (["eval_ppl.py", "--out_dir={empty_run}"], "needs the network"),
    (["-m", "data.wikitext2.prepare", "--source_dir={empty_source}", "--out_dir={home}/wikitext-2-v1"],
     "wiki.train.tokens"),
]


@pytest.mark.parametrize("argv, expected", SUBPROCESS_CASES, ids=["train", "eval_ppl", "prepare"])
def test_on_the_command_line_there_is_no_traceback(world, argv, expected):
    argv = [a.format(**world) for a in argv]
    before = tree_digest(world["home"], world["run"])
    env = {k: v for k, v in os.environ.items() if k != "WIKITEXT2_DIR"}
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    check_one_error_line(proc.stderr, expected.format(**world))
    assert tree_digest(world["home"], world["run"]) == before
