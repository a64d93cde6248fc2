"""Tests of masked language modelling: data/mlm.py (masking, sequences, token files), tasks/mlm.py
(batches, loss over the chosen positions, training steps) and eval_mlm.py."""
import json
import math
import os

import numpy as np
import pytest
import torch

import attention.dense  # noqa: F401  (registers "dense")
import eval_mlm
import tasks
import train
from configurator import ConfigError
from data import mlm as mlm_data
from model import BertEncoder, ModelConfig, run_key_defaults
from tasks import mlm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_VOCAB = os.path.join(os.path.dirname(ROOT), "shared", "data", "bert-vocab", "vocab.txt")
os.environ.setdefault("BERT_VOCAB_FILE", SHARED_VOCAB)

# a small vocabulary for synthetic tests: 0 [PAD], 1 [CLS], 2 [SEP], 3 [MASK], 4 [UNK], 5..47 ordinary
TOY = mlm_data.Vocab("toy", 64, pad_id=0, cls_id=1, sep_id=2, mask_id=3, special_ids=(0, 1, 2, 3, 4),
                     random_ids=np.arange(5, 48))
MASKING = dict(mask_prob=0.15, mask_frac=0.8, random_frac=0.1)


def within_binomial(count, n, p, sigmas=5.0):
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


@pytest.fixture(scope="module")
def bert_vocab():
    path = os.environ["BERT_VOCAB_FILE"]
    if not os.path.exists(path):
        pytest.skip(f"no BERT vocab.txt at {path}")
    return mlm_data.vocab_info("bert-wordpiece", path)


# ---------------------------------------------------------------------------------------------
# masking


def test_masking_statistics_on_100k_tokens():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 48, size=(400, 250))
    ids[:, 0], ids[:, -1] = TOY.cls_id, TOY.sep_id
    ids[rng.random(ids.shape) < 0.02] = 4  # [UNK]
    ids[-20:, -50:] = TOY.pad_id
    inputs, labels = mlm_data.mask_tokens(ids, TOY, np.random.default_rng(1), **MASKING)
    special = np.isin(ids, TOY.special_ids)
    chosen = labels >= 0
    n_eligible, n_chosen = int((~special).sum()), int(chosen.sum())
    assert n_eligible > 90_000
    assert not np.any(chosen & special)  # special tokens are never chosen
    assert np.all(inputs[special] == ids[special])
    assert np.all(labels[chosen] == ids[chosen]) and np.all(labels[~chosen] == -1)
    assert np.all(inputs[~chosen] == ids[~chosen])
    assert within_binomial(n_chosen, n_eligible, 0.15)
    masked = int((inputs[chosen] == TOY.mask_id).sum())
    changed = chosen & (inputs != ids) & (inputs != TOY.mask_id)
    assert within_binomial(masked, n_chosen, 0.8)
    # a random replacement equals the original with probability 1/43; both count as "random"
    random_draws = int(changed.sum()) / (1 - 1 / 43)
    assert within_binomial(random_draws, n_chosen, 0.1)
    assert within_binomial(n_chosen - masked - random_draws, n_chosen, 0.1)
    assert np.all(np.isin(inputs[changed], TOY.random_ids))


def test_masking_parameters_are_checked():
    ids = np.full((2, 5), 7)
    for bad in (dict(mask_prob=0.0), dict(mask_prob=1.5), dict(mask_frac=0.95, random_frac=0.1),
                dict(random_frac=-0.1)):
        with pytest.raises(ValueError, match="mask_prob|mask_frac"):
            mlm_data.mask_tokens(ids, TOY, np.random.default_rng(0), **{**MASKING, **bad})


def test_vocabularies(bert_vocab):
    assert (bert_vocab.pad_id, bert_vocab.cls_id, bert_vocab.sep_id, bert_vocab.mask_id) == (0, 101, 102, 103)
    assert bert_vocab.model_vocab_size == 30528 and 100 in bert_vocab.special_ids  # [UNK]
    assert bert_vocab.random_ids.min() >= 999  # no [unusedN] or special token is drawn
    gpt2 = mlm_data.vocab_info("gpt2")
    assert gpt2.model_vocab_size == 50304 and gpt2.mask_id == 50257 and 50256 not in set(gpt2.random_ids.tolist())
    with pytest.raises(ValueError, match="unknown tokenizer 'spm'"):
        mlm_data.vocab_info("spm")


# ---------------------------------------------------------------------------------------------
# batches and the loss


def cfg_for(**kw):
    return {**train.DEFAULTS, "task": "mlm", **kw}


def test_batches_are_framed_masked_and_reproducible():
    tokens = np.random.default_rng(0).integers(5, 48, size=5000).astype(np.uint16)
    data = {"train": tokens, "val": tokens, "vocab": TOY}
    cfg = cfg_for(batch_size=4, block_size=20)
    a = mlm.get_batch(data, "train", cfg, [1, 0, 0, 3, 0], "cpu")
    b = mlm.get_batch(data, "train", cfg, [1, 0, 0, 3, 0], "cpu")
    c = mlm.get_batch(data, "train", cfg, [1, 0, 0, 4, 0], "cpu")
    assert a["idx"].shape == a["labels"].shape == (4, 20) and a["idx"].dtype == torch.int64
    assert torch.equal(a["idx"], b["idx"]) and torch.equal(a["labels"], b["labels"])
    assert not torch.equal(a["idx"], c["idx"])
    assert torch.all(a["idx"][:, 0] == TOY.cls_id) and torch.all(a["idx"][:, -1] == TOY.sep_id)
    assert torch.all(a["labels"][:, [0, -1]] == -1)
    windows = mlm_data.consecutive_windows(np.arange(23), 5, max_windows=3)
    assert windows.tolist() == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]


def toy_model(block="transformer", **kw):
    extra = dict(attention="dense", pos_emb="cosine_relpe", n_head=1) if block == "danet" else {}
    return BertEncoder(ModelConfig(**{**dict(block_size=24, vocab_size=64, n_layer=2, n_head=2, n_embd=32,
                                             pad_token_id=0, block=block), **extra, **kw}))


def test_loss_and_accuracy_over_chosen_positions_only():
    torch.manual_seed(0)
    model = toy_model().eval()
    idx = torch.randint(5, 48, (3, 24))
    labels = torch.full((3, 24), -1)
    labels[0, 3], labels[1, 7], labels[2, 20] = 9, int(idx[1, 7]), 11
    batch = {"idx": idx, "labels": labels}
    with torch.no_grad():
        value, metrics = mlm.loss(model, batch)
        logits = model.mlm_logits(model(idx))  # every position, for the check
    chosen = labels >= 0
    expected = torch.nn.functional.cross_entropy(logits[chosen], labels[chosen])
    torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)
    accuracy = (logits[chosen].argmax(-1) == labels[chosen]).float().mean()
    assert metrics["accuracy"].item() == pytest.approx(accuracy.item())
    # the vocabulary projection runs only at the chosen positions
    with torch.no_grad():
        assert model(idx, mlm_mask=chosen).shape == (3, 64)
    # no chosen position: loss 0 with a gradient path, not NaN
    value, metrics = mlm.loss(model.train(), {"idx": idx, "labels": torch.full((3, 24), -1)})
    assert value.item() == 0.0 and value.requires_grad and metrics["accuracy"].item() == 0.0


@pytest.mark.parametrize("block", ["transformer", "danet"])
def test_a_few_mlm_steps_reduce_the_loss(block):
    torch.manual_seed(0)
    tokens = np.tile(np.arange(5, 25), 300).astype(np.uint16)  # a predictable stream
    data = {"train": tokens, "val": tokens, "vocab": TOY}
    cfg = cfg_for(batch_size=8, block_size=24)
    model = toy_model(block, ffn_linf_norm=0.1 if block == "danet" else 0.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(40):
        value, _ = mlm.loss(model, mlm.get_batch(data, "train", cfg, [0, 0, 0, step, 0], "cpu"))
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        model.after_optimizer_step()
        losses.append(value.item())
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses  # 4.2 = ln 64 at the start


# ---------------------------------------------------------------------------------------------
# token files


def test_huggingface_corpus_prepared_through_datasets(tmp_path, monkeypatch, bert_vocab):
    import datasets

    corpus = {"train": {"text": ["the cat sat on the mat .", "", "a dog ran <unk> away ."]},
              "validation": {"text": ["the dog sat ."]}, "test": {"text": ["a cat ran ."]}}
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda path, config: calls.append((path, config)) or corpus)
    monkeypatch.setattr(mlm_data, "HERE", str(tmp_path))
    meta = mlm_data.prepare("hf:someone/corpus:clean", tokenizer="bert-wordpiece", verbose=False)
    assert calls == [("someone/corpus", "clean")]
    assert mlm_data.data_dir("hf:someone/corpus:clean", "", "bert-wordpiece") == \
        str(tmp_path / "hf" / "someone__corpus__clean" / "bert-wordpiece")
    train_ids = mlm_data.open_split("train", "hf:someone/corpus:clean", tokenizer="bert-wordpiece")
    assert meta["tokens"]["train"] == len(train_ids) and 100 in train_ids.tolist()  # <unk> -> [UNK]
    assert train_ids[:2].tolist() == [1996, 4937]  # "the cat"
    with pytest.raises(ValueError, match="unknown MLM dataset 'books'"):
        mlm_data.prepare("books")
    monkeypatch.setattr(datasets, "load_dataset", lambda path, config: (_ for _ in ()).throw(ConnectionError("x")))
    with pytest.raises(mlm_data.DataUnavailable, match="could not load hf:other"):
        mlm_data.prepare("hf:other", tokenizer="bert-wordpiece")


# ---------------------------------------------------------------------------------------------
# the task in train.py, and eval_mlm.py


def test_task_is_registered_with_the_model_keys():
    assert tasks.get("mlm") is mlm and mlm.MODEL is BertEncoder
    assert set(mlm.HELP) == set(mlm.DEFAULTS)
    defaults, _ = run_key_defaults()
    assert {k: train.DEFAULTS[k] for k in defaults} == defaults  # every task reads the model's keys
    config = ModelConfig()
    assert {k: getattr(config, k) for k in defaults} == defaults


def tiny_run(out_dir, *args):
    return train.main(["--task=mlm", f"--out_dir={out_dir}", "--num_threads=1", "--n_layer=2", "--n_embd=32",
                       "--batch_size=2", "--block_size=64", "--max_iters=3", "--eval_interval=3", "--eval_iters=1",
                       "--log_interval=1", "--warmup_iters=0", *args])


@pytest.fixture(scope="module")
def danet_checkpoint(tmp_path_factory, wikitext2_dir, bert_vocab):
    out = tmp_path_factory.mktemp("danet_mlm")
    metrics = tiny_run(out, "--block=danet", "--attention=dense", "--n_head=1", "--pos_emb=cosine_relpe",
                       "--layer_scheme=LSG", "--window=16", "--ffn_linf_norm=0.05")
    return out, metrics


def test_train_py_runs_the_mlm_task(danet_checkpoint):
    out, metrics = danet_checkpoint
    assert set(metrics) == {f"{split}_{name}" for split in ("train", "val")
                            for name in ("loss", "accuracy", "mask_loss", "mask_accuracy", "mask_margin")}
    assert all(math.isfinite(v) for v in metrics.values())
    with open(os.path.join(out, "log.jsonl")) as f:
        log = [json.loads(line) for line in f]
    assert any("train_accuracy" in r for r in log)
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), weights_only=False)
    assert ckpt["task"] == "mlm" and ckpt["model_args"]["block"] == "danet"
    assert ckpt["model_args"]["pad_token_id"] == 0 and ckpt["model_args"]["vocab_size"] == 30528


def test_eval_mlm_both_regimes_and_lengths(danet_checkpoint, tmp_path):
    out, _ = danet_checkpoint
    result = eval_mlm.main([f"--out_dir={out}", "--split=val", "--seq_lens=64,200", "--max_sequences=3",
                            "--num_threads=1", f"--out={tmp_path / 'r.json'}"])
    rows = result["rows"]
    assert [(r["seq_len"], r["regime"]) for r in rows] == [(64, "linear"), (64, "quadratic"), (200, "linear"),
                                                          (200, "quadratic")]
    for L in (64, 200):
        pair = [r for r in rows if r["seq_len"] == L]
        assert pair[0]["masked_tokens"] == pair[1]["masked_tokens"] > 0 and pair[0]["sequences"] == 3
        assert pair[0]["mlm_loss"] == pytest.approx(pair[1]["mlm_loss"], rel=1e-5)
        assert pair[0]["mlm_accuracy"] == pair[1]["mlm_accuracy"]
    assert json.loads((tmp_path / "r.json").read_text())["block"] == "danet"


def test_eval_mlm_skips_lengths_beyond_learned_positions_and_checks_settings(tmp_path, wikitext2_dir, bert_vocab):
    tiny_run(tmp_path, "--max_iters=1", "--eval_interval=1")
    result = eval_mlm.main([f"--out_dir={tmp_path}", "--split=val", "--seq_lens=32,100", "--max_sequences=2",
                            "--num_threads=1"])
    assert result["rows"][0]["seq_len"] == 32 and result["rows"][0]["regime"] is None
    assert "skipped" in result["rows"][1]
    assert os.path.exists(tmp_path / "eval_mlm_val.json")
    with pytest.raises(ConfigError, match="regimes apply to DANet models only"):
        eval_mlm.main([f"--out_dir={tmp_path}", "--regimes=linear"])
    with pytest.raises(ConfigError, match="seq_lens needs at least one length >= 3"):
        eval_mlm.main([f"--out_dir={tmp_path}", "--seq_lens=2"])
    with pytest.raises(ConfigError, match="no checkpoint"):
        eval_mlm.main([f"--out_dir={tmp_path / 'nothing'}"])


@pytest.mark.parametrize("args,message", [
    (["--tokenizer=spm"], "unknown tokenizer 'spm'"),
    (["--mask_prob=0.0"], "mask_prob must be in"),
    (["--dataset=books"], "unknown MLM dataset 'books'"),
    (["--block=danet"], "block='danet' needs attention='dense'"),
    (["--block=danet", "--attention=dense", "--attention.window=4"], "come from layer_scheme and window"),
])
def test_bad_mlm_settings_are_config_errors(tmp_path, args, message):
    with pytest.raises(ConfigError, match=message):
        tiny_run(tmp_path, *args)


def test_configs_have_equal_budgets():
    import configurator

    parsed = {name: configurator.parse(train.DEFAULTS, [os.path.join(ROOT, "configs", *name.split("/"))])
              for name in ("mlm/wikitext2_bert_mini.py", "mlm/wikitext2_danet_mini.py")}
    bert, danet = parsed["mlm/wikitext2_bert_mini.py"], parsed["mlm/wikitext2_danet_mini.py"]
    for key in ("task", "dataset", "tokenizer", "block_size", "batch_size", "gradient_accumulation_steps",
                "max_iters", "n_embd"):
        assert bert[key] == danet[key], key
    assert (bert["block"], bert["attention"], danet["block"], danet["attention"]) == \
        ("transformer", "softmax", "danet", "dense")
    sizes = {}
    for name, cfg in parsed.items():
        model = BertEncoder(mlm.model_config(cfg, mlm_data.Vocab("toy", 64, 0, 1, 2, 3, (0, 1, 2, 3), np.arange(4, 60))))
        sizes[name] = sum(p.numel() for n, p in model.named_parameters() if ".h." in n)
    ratio = sizes["mlm/wikitext2_danet_mini.py"] / sizes["mlm/wikitext2_bert_mini.py"]
    assert 0.9 < ratio < 1.0, sizes  # block parameters within 10%


def test_configs_follow_issue_25():
    """The reworked minis (issue 25, part 1): BERT's phase-1 length 128, 32 sequences per batch,
    lr 2e-3 after 20 warmup steps, output bias at the log unigram, local attention."""
    import configurator

    def parse(*names):
        return configurator.parse(train.DEFAULTS, [os.path.join(ROOT, "configs", *n.split("/")) for n in names])

    for name in ("wikitext2_bert_mini.py", "wikitext2_danet_mini.py"):
        cfg = parse(f"mlm/{name}")
        assert (cfg["block_size"], cfg["batch_size"], cfg["learning_rate"], cfg["warmup_iters"]) == (128, 32, 2e-3, 20)
        assert cfg["mlm_bias_init"] == "log_unigram" and cfg["max_iters"] == 3500, name
        if name.startswith("wikitext2_bert"):
            assert (cfg["attention"], cfg["attention_params"], cfg["pos_emb"]) == ("softmax", {}, "learned")
            local = parse(f"mlm/{name}", "mlm/softmax_window8.py")  # the issue's run: keys within +-8 positions
            assert (local["attention"], local["attention_params"]) == ("softmax", {"window": 9})
            assert {k: v for k, v in local.items() if k != "attention_params"} == \
                {k: v for k, v in cfg.items() if k != "attention_params"}
            assert parse(f"mlm/{name}", "attention/linformer.py")["attention_params"] == {"proj_len": 256}
        else:
            assert (cfg["layer_scheme"], cfg["window"], cfg["pos_emb"]) == ("LSG", 8, "cosine_relpe")
            # the ablation's choice (docs/mlm.md): window-local positions on, the other two options off
            assert not cfg["embedding_maxnorm"] and cfg["relpe_local_positions"] and cfg["relpe_freqs"] == "paper"


def test_context_free_baseline_equals_brute_force_bayes():
    """scripts/analysis/mlm_context_free.py against an explicit enumeration of the joint of
    (original token, input token) under the 80/10/10 rule on a 6-token vocabulary."""
    import importlib
    baseline = importlib.import_module("scripts.analysis.mlm_context_free").context_free_baseline
    rng = np.random.default_rng(0)
    ordinary = np.array([2, 3, 4, 5, 6, 7])
    train = rng.choice(ordinary, size=500, p=[0.4, 0.25, 0.15, 0.1, 0.07, 0.03])
    evals = np.concatenate([rng.choice(ordinary, size=200), [0, 1]])  # 0, 1: special ids, never chosen
    m, r = 0.8, 0.1
    k = 1 - m - r
    counts = np.array([1.0 + (train == t).sum() for t in ordinary])
    p = counts / counts.sum()
    MASK = -1
    inputs = [MASK] + list(ordinary)
    # joint P(original = a, input = x) for a chosen position
    joint = np.zeros((len(ordinary), len(inputs)))
    for i in range(len(ordinary)):
        joint[i, 0] += m * p[i]
        joint[i, 1 + i] += k * p[i]
        joint[i, 1:] += r * p[i] / len(ordinary)
    posterior = joint / joint.sum(0, keepdims=True)
    loss = acc = 0.0
    chosen = [t for t in evals if t in ordinary]
    for t in chosen:
        i = int(np.where(ordinary == t)[0][0])
        cond = joint[i] / joint[i].sum()  # P(input | original = t)
        loss += sum(cond[j] * -np.log(posterior[i, j]) for j in range(len(inputs)))
        acc += sum(cond[j] * (posterior[:, j].argmax() == i) for j in range(len(inputs)))
    result = baseline(train, evals, ordinary, mask_frac=m, random_frac=r)
    assert result["eval_tokens"] == len(chosen)
    assert result["loss"] == pytest.approx(loss / len(chosen), rel=1e-9)
    assert result["accuracy"] == pytest.approx(acc / len(chosen), rel=1e-9)


def test_copy_probe_stream_and_smoke(tmp_path):
    import importlib
    probe = importlib.import_module("scripts.analysis.mlm_copy_probe")
    stream = probe.make_stream(period=6, repeats=4, n_patterns=10, seed=0)
    blocks = stream.reshape(10, 4, 6)
    assert (blocks == blocks[:, :1]).all() and stream.min() >= 5 and stream.max() <= 47  # repeated patterns
    out = str(tmp_path / "probe")
    rows = probe.main(["--runs", "danet:cosine_relpe", "--seeds", "0", "--steps", "4", "--eval_every", "2",
                       "--out", out])
    assert [r["step"] for r in rows] == [2, 4] and all(0 <= r["mask_accuracy"] <= 1 for r in rows)
    for ext in (".csv", ".json", ".png"):
        assert os.path.getsize(out + ext) > 0
