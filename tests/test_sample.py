"""sample.py end to end: on a run that train.py makes here (configs/wikitext2_gpt_tiny.py, a few
steps), on the tiny Hugging Face GPT-2 (``GPT2_TINY_HF_DIR``) and on a hand-made character-level
run: it prints the samples and the speed line, the same seed gives the same text, learned
positions stop at block_size unless --crop=True, and every bad input is one line."""
import json
import os
import re

import pytest
import torch

import attention
import configurator
import sample
from data.shakespeare_char import prepare as shakespeare
from model import GPT, ModelConfig, config_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py")
SPEED = re.compile(r"^prefill [\d,]+ tokens/s, decode [\d,]+ tokens/s \(.*; decode; attention=")
SEPARATOR = "---------------"


@pytest.fixture(scope="module")
def run(tmp_path_factory, wikitext2_dir):
    import train
    out = tmp_path_factory.mktemp("tiny_run")
    train.main([TINY, f"--out_dir={out}", "--max_iters=2", "--eval_interval=2", "--eval_iters=1", "--num_threads=1"])
    return str(out)


def sample_cli(capsys, *args):
    """sample.py with ``args`` in this process: (texts, stdout lines, stderr lines)."""
    texts = configurator.run_cli(sample.main, list(args))
    out, err = capsys.readouterr()
    return texts, out.splitlines(), err.splitlines()


def test_samples_a_trained_run_and_the_seed_fixes_the_text(run, capsys):
    args = [f"--out_dir={run}", "--start=The tower", "--num_samples=2", "--max_new_tokens=12"]
    texts, out, err = sample_cli(capsys, *args, "--seed=7")
    assert len(texts) == 2 and all(t.startswith("The tower") and len(t) > len("The tower") for t in texts)
    assert out.count(SEPARATOR) == 2 and SPEED.match(out[-1]) and "attention=softmax" in out[-1]
    assert texts[0] != texts[1]  # one generator across the samples
    assert sample_cli(capsys, *args, "--seed=7")[0] == texts
    assert sample_cli(capsys, *args, "--seed=8")[0] != texts


def test_swapped_attention_and_prompt_file(run, tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("In 1998 the album", encoding="utf-8")
    texts, out, _ = sample_cli(capsys, f"--out_dir={run}", f"--start=FILE:{prompt}", "--num_samples=1",
                               "--max_new_tokens=5", "--attention=fastmax", "--attention.p=1", "--temperature=0")
    assert texts[0].startswith("In 1998 the album") and "attention=fastmax {'p': 1}" in out[-1]


def test_learned_positions_stop_at_block_size_unless_cropped(run, capsys):
    args = [f"--out_dir={run}", "--start=x", "--num_samples=1", "--max_new_tokens=70"]
    _, out, err = sample_cli(capsys, *args)
    assert len(err) == 1 and "stopped at block_size 64" in err[0] and "(64 new tokens)" in err[0]
    assert "64 new tokens" in out[-1]
    _, out, err = sample_cli(capsys, *args, "--crop=True")
    assert err == [] and "70 new tokens; decode, then recompute" in out[-1]


def test_tiny_hugging_face_gpt2(capsys):
    path = os.environ.get("GPT2_TINY_HF_DIR", "")
    if not os.path.exists(os.path.join(path, "config.json")):
        pytest.skip(f"no tiny Hugging Face GPT-2 at {path!r} (GPT2_TINY_HF_DIR)")
    args = [f"--init_from={path}", "--start=Hello, my name is", "--num_samples=1", "--max_new_tokens=8"]
    texts, out, _ = sample_cli(capsys, *args)
    assert texts[0].startswith("Hello, my name is") and SPEED.match(out[-1])
    assert sample_cli(capsys, *args)[0] == texts


@pytest.fixture
def char_run(tmp_path, monkeypatch):
    """A random character-level GPT saved as a shakespeare_char run, and the prepared meta.json of
    its vocabulary in a temporary data folder."""
    vocab = sorted(set("\n !',.?abcdefghijklmnopqrstuvwxyz"))
    data_dir = tmp_path / "prepared"
    data_dir.mkdir()
    (data_dir / "meta.json").write_text(json.dumps({"vocab": vocab, "vocab_size": len(vocab)}))
    monkeypatch.setattr(shakespeare, "DEFAULT_OUT_DIR", str(data_dir))
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=32, vocab_size=len(vocab), n_layer=1, n_head=2, n_embd=16, attention="linear"))
    out = tmp_path / "char_run"
    out.mkdir()
    torch.save({"model": model.state_dict(), "model_args": config_dict(model.config),
                "config": {"task": "lm", "dataset": "shakespeare_char"}}, out / "ckpt.pt")
    return str(out), vocab


def test_a_character_level_run_samples_its_own_characters(char_run, capsys):
    out_dir, vocab = char_run
    texts, out, _ = sample_cli(capsys, f"--out_dir={out_dir}", "--start=to be", "--num_samples=1",
                               "--max_new_tokens=20", "--top_k=0")
    assert texts[0].startswith("to be") and len(texts[0]) == 25 and set(texts[0]) <= set(vocab)
    assert "attention=linear" in out[-1]


def bad_inputs(run, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    return [
        ([f"--out_dir={tmp_path / 'no_run'}"], "no checkpoint at"),
        ([f"--out_dir={run}", "--start="], "empty prompt"),
        ([f"--out_dir={run}", f"--start=FILE:{empty}"], "empty prompt (the file"),
        ([f"--out_dir={run}", f"--start=FILE:{tmp_path / 'missing.txt'}"], "cannot read the prompt file"),
        ([f"--out_dir={run}", "--attention=reformer"], attention.causal_refusal("reformer")),
        ([f"--out_dir={run}", "--start=" + "word " * 70], "more than the model's block_size 64"),
        ([f"--out_dir={run}", "--temperature=-1.0"], "temperature must be >= 0"),
        ([f"--out_dir={run}", "--num_sample=2"], "unknown config key 'num_sample'"),
    ]


def test_bad_input_is_one_line(run, tmp_path, capsys):
    for args, message in bad_inputs(run, tmp_path):
        with pytest.raises(SystemExit) as exit_info:
            configurator.run_cli(sample.main, args)
        out, err = capsys.readouterr()
        assert exit_info.value.code == 2, args
        assert err.startswith("error: ") and err.count("\n") == 1 and message in err, (args, err)
        assert out == ""


def test_a_character_outside_the_vocabulary_is_one_line(char_run, capsys):
    with pytest.raises(SystemExit):
        configurator.run_cli(sample.main, [f"--out_dir={char_run[0]}", "--start=TO BE"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "character 'T' is not in the vocabulary of" in err
