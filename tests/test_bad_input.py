"""Bad input from a new user (issue 41, issue 58 items 6 and 7): each command below exits with
status 2 after one ``error:`` line on stderr that names the bad value, prints no traceback, and
leaves the prepared data and checkpoints it touches byte-identical. The other first impressions of
issue 58 item 7 close the file: a re-run over a run, the learning-rate schedule of --max_iters
alone, progress and ETA lines, --help texts.

The fixtures live under the test's temporary folder: a small WikiText-2 copy prepared into a
redirected ``data/wikitext2`` (``wt2.HERE``; 100,000 tokens and more per split, so that
``--block_size=100000`` gets past the data to the memory estimate), a two-step language-model
run, a tiny ListOps set, a damaged checkpoint, a config file and an ``--import`` file with a
syntax error, a plain file where a folder is expected. The commands run in this process through the same entry points as their
``__main__`` (``configurator.run_cli(main)`` or the data module's ``main``); three of them also run
as real subprocesses, so that "no traceback" is checked on the command line itself.
"""
import hashlib
import os
import re
import subprocess
import sys

import pytest
import torch

import configurator
import eval_mlm
import eval_ppl
import tasks
import train
import training
from data.lra import listops
from data.wikitext2 import prepare as wt2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = " = Valkyria = \n\n The game began development in 2010 , carrying over a large portion of the work . \n" * 5000


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
    w.update(bad_config=str(root / "bad_config.py"), bad_import=str(root / "bad_import_58.py"),
             a_file=str(root / "a_file"))
    (root / "bad_config.py").write_text("max_iters = 10\nn_layer = = 2\n")
    (root / "bad_import_58.py").write_text("import attention\n\n\nclass Broken(attention.Attention:\n    pass\n")
    (root / "a_file").write_text("not a folder\n")
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
    # issue 58 item 6: a config file or an --import file that Python cannot read
    (TRAIN, ["{bad_config}"], "{bad_config}, line 2: invalid syntax: n_layer = = 2"),
    (TRAIN, ["--import={bad_import}", *TINY], "--import={bad_import}: line 4:"),
    # issue 58 item 7: a folder that holds a run, an out_dir that cannot be a folder, a step too big
    (TRAIN, ["configs/wikitext2_gpt_mini.py", "--out_dir={run}"], "--init_from=resume, or start a new run over "
                                                                   "it with --overwrite=True"),
    (TRAIN, [*TINY, "--out_dir={a_file}"], "out_dir={a_file} is a file"),
    (TRAIN, [*TINY, "--out_dir={a_file}/run"], "is inside {a_file}, a file"),
    (TRAIN, [*TINY, "--block_size=100000"], "block_size=100000 needs at least"),
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
    (["train.py", "--import={bad_import}", "--out_dir={scratch}/s"], "invalid syntax"),
    (["eval_ppl.py", "--out_dir={empty_run}"], "needs the network"),
    (["-m", "data.wikitext2.prepare", "--source_dir={empty_source}", "--out_dir={home}/wikitext-2-v1"],
     "wiki.train.tokens"),
]


@pytest.mark.parametrize("argv, expected", SUBPROCESS_CASES, ids=["train", "import", "eval_ppl", "prepare"])
def test_on_the_command_line_there_is_no_traceback(world, argv, expected):
    argv = [a.format(**world) for a in argv]
    before = tree_digest(world["home"], world["run"])
    env = {k: v for k, v in os.environ.items() if k != "WIKITEXT2_DIR"}
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    check_one_error_line(proc.stderr, expected.format(**world))
    assert tree_digest(world["home"], world["run"]) == before


# ---------------------------------------------------------------- first impressions (issue 58 item 7)


def test_a_rerun_over_a_run_keeps_both_checkpoints_byte_identical(world, capsys):
    """The README's training command again on a folder that holds a run: refused in one line that
    names --init_from=resume and --overwrite=True, ckpt.pt and best.pt untouched."""
    files = [os.path.join(world["run"], name) for name in ("ckpt.pt", "best.pt")]
    before = tree_digest(world["run"])
    assert all(path in before for path in files)
    argv = ["configs/wikitext2_gpt_mini.py", "configs/attention/fastmax1.py", f"--out_dir={world['run']}"]
    assert run_in_process(TRAIN, argv) == 2
    check_one_error_line(capsys.readouterr().err, "--init_from=resume")
    assert tree_digest(world["run"]) == before


def test_overwrite_deletes_nothing_before_the_new_run_has_written_its_own(world, tmp_path, monkeypatch):
    """--overwrite=True: a new run stopped before its first evaluation leaves the old checkpoints as
    they were; one that finishes has replaced both with its own."""
    import shutil

    from tasks import lm

    run = str(tmp_path / "run")
    shutil.copytree(world["run"], run)
    old = tree_digest(run)
    argv = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=2", "--max_iters=2",
            "--eval_interval=2", "--eval_iters=1", "--warmup_iters=0", "--seed=7", f"--out_dir={run}", "--overwrite=True"]

    def stopped(data, split, cfg, seed, device):
        if seed == tasks.batch_seed(cfg, 0, 1, 0):  # Ctrl-C in the second step, before any evaluation
            raise KeyboardInterrupt
        return get_batch(data, split, cfg, seed, device)

    get_batch = lm.get_batch
    monkeypatch.setattr(lm, "get_batch", stopped)
    with pytest.raises(KeyboardInterrupt):
        train.main(argv)
    now = tree_digest(run)
    for name in ("ckpt.pt", "best.pt"):
        path = os.path.join(run, name)
        assert now[path] == old[path], name
    monkeypatch.setattr(lm, "get_batch", get_batch)
    train.main(argv)
    now = tree_digest(run)
    for name in ("ckpt.pt", "best.pt"):
        path = os.path.join(run, name)
        assert now[path] != old[path], name
    assert torch.load(os.path.join(run, "ckpt.pt"), weights_only=False)["config"]["seed"] == 7


def test_max_iters_alone_moves_the_cosine_schedule_and_the_first_line_says_so(world, capsys):
    readme = ["configs/wikitext2_gpt_mini.py", "configs/attention/fastmax1.py"]
    cfg = configurator.parse(train.DEFAULTS, [*readme, "--max_iters=60"])
    assert cfg["lr_decay_iters"] == 650 and training.get_lr(59, cfg) > 1.9e-3  # the config's schedule, cut
    line = training.follow_max_iters(cfg, [*readme, "--max_iters=60"])
    assert cfg["lr_decay_iters"] == 60 and training.get_lr(59, cfg) < 2e-4 and "lr_decay_iters=60" in line
    for argv in ([*readme, "--max_iters=60", "--lr_decay_iters=600"],  # set on the command line: kept
                 [*readme, "--max_iters=60", "--init_from=resume"],  # a resumed run keeps its checkpoint's
                 [*readme, "--max_iters=60", "--lr_schedule=constant"],
                 readme):  # config files alone: their own schedule
        cfg = configurator.parse(train.DEFAULTS, argv)
        assert training.follow_max_iters(cfg, argv) is None and cfg["lr_decay_iters"] != 60, argv
    capsys.readouterr()
    train.main(["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=2", "--max_iters=2",
                "--eval_interval=2", "--eval_iters=1", f"--out_dir={world['scratch']}/schedule"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("lr_decay_iters=2 follows --max_iters (it was 2000)"), first


def test_the_eta_counts_the_evaluations_to_come():
    # step 10 of 100, 1 s per step so far, evaluations at 50, 100 and the final one
    assert training.eta(10, 0, 100, 50, 10.0, 0.0, 0, final=True) == (90.0, 3)  # none timed yet: named
    assert training.eta(60, 0, 100, 50, 60.0, 8.0, 2, final=True) == (40.0 + 2 * 4.0, 0)  # 100 and the final
    assert training.eta(50, 0, 100, 50, 50.0, 4.0, 1) == (50.0 + 2 * 4.0, 0)  # 50 (not yet run) and 100
    assert training.eta(30, 20, 100, 40, 5.0, 0.0, 0) == (70.0 * 0.5, 3)  # a resumed run: 40, 80, 100


def test_eval_ppl_prints_a_progress_line_every_few_percent_when_not_on_a_terminal(capsys):
    import io

    import numpy as np

    from model import GPT, ModelConfig

    log = io.StringIO()
    bar = eval_ppl.ProgressLines(200, "blocks L=16", log)
    for _ in range(200):
        bar.set_postfix_str("9 tokens/s")
        bar.update(1)
    lines = log.getvalue().splitlines()
    assert len(lines) == 20 and lines[0].startswith("blocks L=16: 5% (10/200 windows), 9 tokens/s, elapsed ")
    assert lines[-1].startswith("blocks L=16: 100% (200/200 windows)") and "ETA 0s" in lines[-1]
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=64, dropout=0.0)).eval()
    cfg = dict(eval_ppl.DEFAULTS, protocol="blocks", batch_size=2, device="cpu")
    capsys.readouterr()
    with torch.no_grad():
        eval_ppl.score(model, np.arange(16 * 40) % 64, cfg, 16)  # stderr is captured: not a terminal
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("blocks L=16: ")]
    assert len(progress) == 20 and "100% (40/40 windows)" in progress[-1]


def test_help_texts(capsys):
    """``python -m attention --help`` exits 0 with its usage; scorecard's --help names no issue and
    explains --tier and --threads; train.py's --help fits in 100 columns."""
    from attention import __main__ as attention_main
    from scripts.scorecard import __main__ as scorecard

    capsys.readouterr()
    assert run_in_process_main(attention_main.main, ["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m attention")
    assert run_in_process_main(scorecard.main, ["--help"]) == 0
    text = capsys.readouterr().out
    assert not re.search(r"issue \d", text), text
    for flag in ("--tier {quick,full}", "--threads THREADS"):
        line = next(line for line in text.splitlines() if line.strip().startswith(flag))
        assert len(line.strip()) > len(flag) + 10, line  # a help text beside the flag
    lines = configurator.format_help(train.DEFAULTS, train.HELP, prog="train.py").splitlines()
    assert max(len(line) for line in lines) <= configurator.HELP_COLUMNS == 100
    assert "--overwrite" in "\n".join(lines)


def run_in_process_main(main, argv):
    try:
        configurator.run_cli(main, argv)
    except SystemExit as e:
        return e.code
    return 0
