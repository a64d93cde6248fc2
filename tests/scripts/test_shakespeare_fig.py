"""Tests of the Tiny Shakespeare pieces of issue 8 (FAST paper Figures 2 and 4): the character-level
data (data/shakespeare_char/prepare.py), the lm task with dataset=shakespeare_char, the attention
maps of scripts/analysis/attention_maps.py and the loss curves of scripts/analysis/loss_curves.py."""
import hashlib
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import train
from configurator import ConfigError
from data.shakespeare_char import prepare as shakespeare

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py")
from scripts.analysis import attention_maps, loss_curves as plot_loss_curves

# 20 distinct lines of 40-odd characters, repeated: 4,4xx characters, enough for 64-character
# windows in the 5% val and test splits
LINES = [f"{name}: {verb} thee, {whom}, {n} times!\n" for n, (name, verb, whom) in enumerate(
    [("ROMEO", "I love", "Juliet"), ("JULIET", "I follow", "Romeo"), ("HAMLET", "Speak", "Horatio"),
     ("LEAR", "Blow", "winds"), ("OTHELLO", "Put out", "light"), ("PUCK", "Lord", "fools"),
     ("PORTIA", "Mercy", "Shylock"), ("IAGO", "Beware", "Moor"), ("KENT", "Serve", "Lear"),
     ("VIOLA", "Make", "willow")] * 2)]
TEXT = "".join(LINES) * 5


def write_text(path, text=TEXT):
    path.write_text(text, encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------- data/shakespeare_char/prepare.py


def test_prepare_vocab_splits_meta_and_idempotence(tmp_path):
    source = write_text(tmp_path / "input.txt")
    out = tmp_path / "prepared"
    meta = shakespeare.prepare(source, str(out), verbose=False)
    n = len(TEXT)
    assert meta["vocab"] == sorted(set(TEXT)) and meta["vocab_size"] == len(set(TEXT))
    a, b = n * 90 // 100, n * 90 // 100 + n * 5 // 100
    assert meta["tokens"] == {"train": a, "val": b - a, "test": n - b}
    assert meta["split_ranges"] == {"train": [0, a], "val": [a, b], "test": [b, n]}
    assert meta["sha256"] == hashlib.sha256(TEXT.encode()).hexdigest() and meta["characters"] == n
    assert meta["source"] == os.path.abspath(source) and not meta["is_char_rnn_file"]
    assert json.loads((out / "meta.json").read_text()) == meta
    splits = {s: np.fromfile(out / f"{s}.bin", dtype=np.uint16) for s in shakespeare.SPLITS}
    assert shakespeare.decode(np.concatenate(list(splits.values())), meta["vocab"]) == TEXT
    assert splits["val"][0] == meta["vocab"].index(TEXT[a])  # val starts right after train
    memmap = shakespeare.open_split("test", str(out))
    assert memmap.dtype == np.uint16 and np.array_equal(memmap, splits["test"])
    assert shakespeare.is_prepared(str(out))
    # the same source again: nothing rewritten
    mtimes = {p: os.stat(out / p).st_mtime_ns for p in os.listdir(out)}
    assert shakespeare.prepare(source, str(out), verbose=False) == meta
    assert {p: os.stat(out / p).st_mtime_ns for p in os.listdir(out)} == mtimes
    assert not [p for p in os.listdir(out) if ".tmp" in p]
    # a changed source is prepared again
    write_text(tmp_path / "input.txt", TEXT + "Zounds!\n")
    again = shakespeare.prepare(source, str(out), verbose=False)
    assert again["characters"] == n + 8 and "Z" in again["vocab"] and again["sha256"] != meta["sha256"]


def test_encode_and_split_errors(tmp_path):
    ids = shakespeare.encode("abca", ["a", "b", "c"])
    assert ids.dtype == np.uint16 and ids.tolist() == [0, 1, 2, 0]
    with pytest.raises(ValueError, match="character 'z' is not in the vocabulary"):
        shakespeare.encode("abz", ["a", "b", "c"])
    with pytest.raises(ValueError, match="unknown split 'valid'; allowed: train, val, test"):
        shakespeare.open_split("valid", str(tmp_path))
    with pytest.raises(shakespeare.DataUnavailable, match="train.bin not found; prepare it"):
        shakespeare.open_split("train", str(tmp_path))
    with pytest.raises(ValueError, match="empty"):
        shakespeare.prepare(write_text(tmp_path / "empty.txt", ""), str(tmp_path / "out"), verbose=False)


def test_missing_source_names_the_path_and_the_variable(tmp_path, monkeypatch):
    missing = str(tmp_path / "nowhere" / "input.txt")
    monkeypatch.setenv("TINYSHAKESPEARE_FILE", missing)
    with pytest.raises(shakespeare.DataUnavailable, match=rf"{missing} not found .given by the environment "
                                                          r"variable TINYSHAKESPEARE_FILE"):
        shakespeare.prepare(out_dir=str(tmp_path / "out"), verbose=False)
    with pytest.raises(shakespeare.DataUnavailable, match=rf"{missing} not found .given by --source_file"):
        shakespeare.prepare(missing, str(tmp_path / "out"), verbose=False)


def test_download_when_nothing_is_local_then_the_cached_copy(tmp_path, monkeypatch):
    import urllib.request

    class Response:
        def __init__(self, raw):
            self.raw = raw

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            return self.raw

    calls = []
    monkeypatch.delenv("TINYSHAKESPEARE_FILE", raising=False)
    monkeypatch.setattr(urllib.request, "urlopen",
                        lambda url, timeout: calls.append(url) or Response(TEXT.encode()))
    out = tmp_path / "out"
    meta = shakespeare.prepare(out_dir=str(out), verbose=False)
    assert calls == [shakespeare.URL] and meta["source"] == shakespeare.URL
    assert (out / "input.txt").read_text() == TEXT and meta["tokens"]["train"] == len(TEXT) * 90 // 100

    def offline(url, timeout):
        raise OSError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    assert shakespeare.prepare(out_dir=str(out), verbose=False) == meta  # the cached copy, no download
    with pytest.raises(shakespeare.DataUnavailable, match="could not download .* set TINYSHAKESPEARE_FILE="):
        shakespeare.prepare(out_dir=str(tmp_path / "elsewhere"), verbose=False)


# ---------------------------------------------------------------- the lm task and two tiny checkpoints


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A softmax and a Fastmax p = 2 tiny char GPT trained 3 iterations on TEXT (prepared into a
    temporary directory): (softmax out_dir, fastmax out_dir, prepared dir, text)."""
    root = tmp_path_factory.mktemp("shakespeare")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TINYSHAKESPEARE_FILE", write_text(root / "input.txt"))
        mp.setattr(shakespeare, "DEFAULT_OUT_DIR", str(root / "prepared"))
        dirs = {}
        fastmax_args = ["--attention=fastmax", "--attention.p=2", "--attention.normalization=max_norm"]
        for name, args in (("softmax", []), ("fastmax", fastmax_args)):
            dirs[name] = str(root / name)
            train.main([TINY, "--dataset=shakespeare_char", f"--out_dir={dirs[name]}", "--num_threads=1",
                        "--max_iters=3", "--lr_decay_iters=3", "--warmup_iters=1", "--eval_interval=3",
                        "--eval_iters=1", "--log_interval=1", *args])
        yield dirs["softmax"], dirs["fastmax"], str(root / "prepared")


def read_log(out_dir):
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_lm_task_trains_on_shakespeare_char(trained):
    softmax_dir, fastmax_dir, prepared = trained
    vocab_size = len(set(TEXT))
    for out_dir in (softmax_dir, fastmax_dir):
        log = read_log(out_dir)
        steps = [r["loss"] for r in log if "loss" in r]
        evals = [r for r in log if "eval" in r]
        assert len(steps) == 3 and [r["iter"] for r in evals] == [3]
        assert abs(steps[0] - math.log(vocab_size)) < 0.3  # a fresh model: about uniform over the characters
        assert steps[-1] < steps[0]
        assert set(evals[0]["eval"]) == {"train_loss", "val_loss", "val_ppl"}
        ckpt = torch.load(os.path.join(out_dir, "ckpt.pt"), weights_only=False)
        assert ckpt["model_args"]["vocab_size"] == vocab_size  # from the meta, not padded
        assert ckpt["model"]["lm_head.weight"].shape == (vocab_size, 32)
        assert ckpt["config"]["dataset"] == "shakespeare_char"
    assert json.loads(open(os.path.join(prepared, "meta.json")).read())["vocab_size"] == vocab_size


@pytest.mark.parametrize("args, message", [
    (["--dataset=tinystories"], r"task 'lm' has no dataset 'tinystories'; available: wikitext2, shakespeare_char"),
    (["--dataset=shakespeare_char", "--dataset_config=wikitext-2-raw-v1"],
     "dataset_config applies to dataset 'wikitext2' only"),
    (["--dataset=shakespeare_char", "--data_source_dir=/x"], "data_source_dir applies to dataset 'wikitext2' only"),
    (["--data_source_file=/x/input.txt"], "data_source_file applies to dataset 'shakespeare_char' only"),
])
def test_lm_dataset_errors(tmp_path, args, message):
    with pytest.raises(ConfigError, match=message):
        train.main([TINY, f"--out_dir={tmp_path}", *args])


# ---------------------------------------------------------------- scripts/analysis/attention_maps.py


def expected_maps(out_dir, tokens, head):
    """The head's (L, T, T) weights recomputed from the checkpoint's weights and the documented
    equations, without the script's hooks or the attention modules."""
    ckpt = torch.load(os.path.join(out_dir, "ckpt.pt"), weights_only=False)
    args, sd = ckpt["model_args"], {k: v.double() for k, v in ckpt["model"].items()}
    H, C = args["n_head"], args["n_embd"]
    D, T = C // H, len(tokens)
    idx = torch.as_tensor(tokens)
    x = sd["transformer.wte.weight"][idx] + sd["transformer.wpe.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    maps = []
    for layer in range(args["n_layer"]):
        p = f"transformer.h.{layer}."

        def ln(name, y):
            return torch.nn.functional.layer_norm(y, (C,), sd[p + name + ".weight"], sd[p + name + ".bias"],
                                                 eps=args.get("layer_norm_epsilon", 1e-5))

        qkv = ln("ln_1", x) @ sd[p + "attn.c_attn.weight"].T + sd[p + "attn.c_attn.bias"]
        q, k, v = (t.view(T, H, D).transpose(0, 1) for t in qkv.split(C, dim=1))
        if args["attention"] == "softmax":
            weights = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~causal, -math.inf), -1)
        else:  # fastmax p = 2, max_norm (lim 1, causal running maximum of the norms), f = 1 + s + s^2 / 2
            qh = q / torch.cummax(q.norm(dim=-1), dim=-1).values[..., None]
            kh = k / torch.cummax(k.norm(dim=-1), dim=-1).values[..., None]
            s = qh @ kh.transpose(-1, -2)
            f = (1 + s + s * s / 2) * causal
            weights = f / f.sum(-1, keepdim=True)
        maps.append(weights[head])
        y = (weights @ v).transpose(0, 1).reshape(T, C) @ sd[p + "attn.c_proj.weight"].T + sd[p + "attn.c_proj.bias"]
        x = x + y
        h = ln("ln_2", x) @ sd[p + "mlp.c_fc.weight"].T + sd[p + "mlp.c_fc.bias"]
        h = torch.nn.functional.gelu(h, approximate="tanh")
        x = x + h @ sd[p + "mlp.c_proj.weight"].T + sd[p + "mlp.c_proj.bias"]
    return torch.stack(maps).numpy()


def test_attention_maps_are_causal_row_stochastic_and_match_the_equations(trained, tmp_path, monkeypatch):
    import matplotlib.image

    softmax_dir, fastmax_dir, prepared = trained
    monkeypatch.setattr(shakespeare, "DEFAULT_OUT_DIR", prepared)
    out = str(tmp_path / "maps")
    T, head = 48, 1
    weights, errors = attention_maps.main([softmax_dir, fastmax_dir, f"--out={out}", f"--length={T}",
                                           f"--head={head}", "--labels=softmax,fastmax2", "--num_threads=1"])
    assert weights.shape == (2, 2, T, T) and weights.dtype == np.float64
    upper = np.triu(np.ones((T, T), dtype=bool), 1)
    for m in range(2):
        for layer in range(2):
            A = weights[m, layer]
            np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-12)  # rows sum to one over keys j <= i
            assert (A[upper] == 0).all() and (A >= 0).all()
    assert errors.shape == (2, 2) and errors.max() < 1e-5  # A @ v is what the modules returned
    saved = np.load(f"{out}.npz")
    assert saved["weights"].dtype == np.float32  # stored as float32 (issue 44), returned in float64
    np.testing.assert_array_equal(saved["weights"], weights.astype(np.float32))
    assert list(saved["labels"]) == ["softmax", "fastmax2"] and list(saved["attention"]) == ["softmax", "fastmax"]
    # the input is the first T characters of the val split
    start = len(TEXT) * 90 // 100
    assert str(saved["text"]) == TEXT[start:start + T]
    vocab = sorted(set(TEXT))
    assert saved["tokens"].tolist() == [vocab.index(c) for c in TEXT[start:start + T]]
    for m, out_dir in enumerate((softmax_dir, fastmax_dir)):
        np.testing.assert_allclose(weights[m], expected_maps(out_dir, saved["tokens"], head), atol=1e-6)
    assert not np.allclose(weights[0], weights[1], atol=1e-4)  # softmax and Fastmax weights differ
    image = matplotlib.image.imread(f"{out}.png")
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200 and image.std() > 0.05


def test_attention_maps_errors(trained, tmp_path, monkeypatch):
    softmax_dir, _, prepared = trained
    monkeypatch.setattr(shakespeare, "DEFAULT_OUT_DIR", prepared)
    with pytest.raises(SystemExit, match="the model has 2 heads"):
        attention_maps.main([softmax_dir, "--head=2", f"--out={tmp_path / 'm'}"])
    with pytest.raises(SystemExit, match="longer than the model's block_size 64"):
        attention_maps.main([softmax_dir, "--length=65", f"--out={tmp_path / 'm'}"])
    with pytest.raises(SystemExit, match="no checkpoint at"):
        attention_maps.main([str(tmp_path / "none"), f"--out={tmp_path / 'm'}"])
    class Squared(torch.nn.Module):  # not linear in v: no attention matrix
        def forward(self, q, k, v, causal, attention_mask=None):
            return v * v

    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="it is not linear in v"):
        attention_maps.attention_weights(Squared(), q, q, True)


# ---------------------------------------------------------------- scripts/analysis/loss_curves.py


def write_log(out_dir, records):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "log.jsonl"), "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def run_records(evals, steps, offset=0.0):
    """train.py-like records: steps {iter: loss}, evals {iter: (train_loss, val_loss)}, by iteration."""
    records = []
    for it in sorted(set(steps) | set(evals)):
        if it in steps:
            records.append({"iter": it, "loss": steps[it] + offset, "lr": 1e-3})
        if it in evals:
            tr, va = evals[it]
            records.append({"iter": it, "eval": {"train_loss": tr + offset, "val_loss": va + offset,
                                                 "val_ppl": math.exp(va)}, "elapsed_s": 1.0})
    return records


def test_plot_loss_curves_png_and_csv(tmp_path, capsys):
    import csv

    import matplotlib.image

    a, b = str(tmp_path / "none"), str(tmp_path / "quadratic")
    evals = {10: (3.0, 3.1), 20: (2.5, 2.7), 30: (2.0, 2.4)}
    steps = {5: 3.5, 10: 3.2, 15: 2.9, 20: 2.6, 25: 2.3, 30: 2.1}
    write_log(a, run_records(evals, steps))
    # b: an older run, then a run from scratch (replaces it) that stops after iteration 25 and is
    # resumed from its checkpoint at 20 (steps 25 logged twice: the later record wins)
    first = run_records(evals, steps, offset=5.0)
    second = run_records({10: (3.0, 3.0), 20: (2.2, 2.3)}, {5: 3.4, 10: 3.1, 15: 2.8, 20: 2.5, 25: 9.9})
    resumed = run_records({30: (1.8, 2.0)}, {25: 2.2, 30: 1.9})
    write_log(b, first + second + resumed)
    out = str(tmp_path / "fig2")
    runs = plot_loss_curves.main([a, b, "--labels=no dropout,quadratic 0.1", f"--out={out}"])
    assert "holds more than one run" in capsys.readouterr().err
    assert runs[0][2] == {"train": ([10, 20, 30], [3.0, 2.5, 2.0]), "val": ([10, 20, 30], [3.1, 2.7, 2.4])}
    assert runs[1][2] == {"train": ([10, 20, 30], [3.0, 2.2, 1.8]), "val": ([10, 20, 30], [3.0, 2.3, 2.0])}
    with open(f"{out}.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 and rows[0] == {"label": "no dropout", "out_dir": a, "curve": "train", "source": "eval",
                                           "iter": "10", "loss": "3.0"}
    assert [float(r["loss"]) for r in rows if r["label"] == "quadratic 0.1" and r["curve"] == "val"] == [3.0, 2.3, 2.0]
    image = matplotlib.image.imread(f"{out}.png")
    assert image.shape[0] > 300 and image.shape[1] > 600 and image.std() > 0.05
    steps_run = plot_loss_curves.main([b, "--train_loss=step", f"--out={out}_step"])
    assert steps_run[0][2]["train"] == ([5, 10, 15, 20, 25, 30], [3.4, 3.1, 2.8, 2.5, 2.2, 1.9])
    with pytest.raises(SystemExit, match="log.jsonl not found"):
        plot_loss_curves.main([str(tmp_path / "missing"), f"--out={out}"])
    write_log(str(tmp_path / "noeval"), run_records({}, steps))
    with pytest.raises(SystemExit, match="has no evaluation record"):
        plot_loss_curves.main([str(tmp_path / "noeval"), f"--out={out}"])


def test_dropout_script_runs_the_four_variants_then_plots():
    env = dict(os.environ, DRY_RUN="1", RATE="0.2", OUT="out/x", PYTHON=sys.executable)
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "sweeps", "shakespeare_dropout.sh"), "--num_threads=2"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if line.startswith("+ ")]
    assert len(commands) == 5
    for command, variant in zip(commands, ["none", "standard", "1d", "quadratic"]):
        assert "train.py configs/shakespeare_char_gpt.py configs/attention/fastmax2.py --out_dir" in command
        assert f"--out_dir=out/x/{variant}" in command and command.endswith("--num_threads=2")
        if variant == "none":
            assert "--attention.dropout=0.0" in command and "dropout_variant" not in command
        else:
            assert f"--attention.dropout=0.2 --attention.dropout_variant={variant}" in command
    assert "-m scripts.analysis.loss_curves out/x/none out/x/standard out/x/1d out/x/quadratic" in commands[-1]
    assert "--labels=no dropout,standard 0.2,1d 0.2,quadratic 0.2" in commands[-1]
