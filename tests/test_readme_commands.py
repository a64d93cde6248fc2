"""The README's commands fit together: every ``python eval_ppl.py`` command of its code blocks that
reads one of our checkpoints reads the folder that one of its ``python train.py`` commands writes.
Only the arguments are parsed (config files included), as train.py and eval_ppl.py parse them;
nothing is trained or evaluated."""
import os
import re
import shlex

import configurator
import eval_ppl
import training

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_commands(text, script):
    """The argument lists of the ``python <script>`` commands in the fenced code blocks of ``text``."""
    commands = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():  # continued lines joined
            if f"python {script}" not in line:
                continue
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # VAR=value python ...
                words.pop(0)
            if words[:2] == ["python", script]:
                commands.append(words[2:])
    return commands


def train_out_dir(argv):
    """The folder ``python train.py <argv>`` writes (train.main's out_dir)."""
    cfg, explicit = configurator.parse_explicit(training.DEFAULTS, argv, help=training.HELP)
    return training.resolve_out_dir(cfg, explicit, argv)


def eval_checkpoint_dir(argv):
    """The folder whose ckpt.pt ``python eval_ppl.py <argv>`` reads (None: a Hugging Face model)."""
    cfg = configurator.parse(eval_ppl.DEFAULTS, argv, help=eval_ppl.HELP)
    return cfg["out_dir"] if cfg["init_from"] == "resume" else None


def check_readme(text):
    trains, evals = readme_commands(text, "train.py"), readme_commands(text, "eval_ppl.py")
    assert trains and evals, "the README shows no train.py or eval_ppl.py command"
    written = {os.path.normpath(train_out_dir(argv)) for argv in trains}
    for argv in evals:
        read = eval_checkpoint_dir(argv)
        assert read is None or os.path.normpath(read) in written, (
            f"README: `python eval_ppl.py {' '.join(argv)}` reads {read}/ckpt.pt, but its train.py commands write "
            f"{sorted(written)}")


def test_readme_eval_command_reads_what_its_train_command_writes(monkeypatch):
    monkeypatch.chdir(ROOT)  # the commands' config files are relative to the repository
    with open(os.path.join(ROOT, "README.md")) as f:
        check_readme(f.read())


def test_train_out_dir_is_named_from_the_config_layers(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert train_out_dir(["configs/wikitext2_gpt_mini.py", "configs/attention/fastmax1.py"]) == os.path.join(
        "out", "wikitext2_gpt_mini_fastmax1")
    assert train_out_dir(["configs/wikitext2_gpt_mini.py", "--attention=linear"]) == os.path.join(
        "out", "wikitext2_gpt_mini_linear")
    assert train_out_dir(["configs/wikitext2_gpt_mini.py", "--out_dir=elsewhere"]) == "elsewhere"
    assert train_out_dir(["--max_iters=2"]) == training.DEFAULTS["out_dir"]
    # a mismatch is caught
    text = "```bash\npython train.py configs/wikitext2_gpt_mini.py configs/attention/fastmax1.py  # a comment\n" \
           "python eval_ppl.py --out_dir=out/wikitext2_gpt_mini --split=test\n```\n"
    try:
        check_readme(text)
    except AssertionError as e:
        assert "reads out/wikitext2_gpt_mini/ckpt.pt" in str(e)
    else:
        raise AssertionError("a README whose eval reads another folder passed")
