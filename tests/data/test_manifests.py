"""Manifests and data errors of the language-modelling and MLM data (issue 23, items 2, 5, 6, 17):
prepared tokens are reused only when their manifest matches the source and tokenizer asked for,
``load_data`` returns the manifest's summary, malformed files are one-line ``data.DataError``s,
the four MLM data errors of item 6, and Tiny Shakespeare reads nothing beside the repository.
Every case uses a few lines of text: each test takes a fraction of a second."""
import json
import os

import numpy as np
import pytest

import data
import train
from configurator import ConfigError
from data import mlm as mlm_data
from data.shakespeare_char import prepare as shakespeare
from data.wikitext2 import prepare as wt2
from tasks import lm, mlm

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "away", "."]
CORPUS = {"train": {"text": ["the cat sat on the mat .", "", "a dog ran <unk> away ."] * 5},
          "validation": {"text": ["the dog sat on a cat ."] * 3}, "test": {"text": ["a cat ran away ."] * 3}}
DATASET = "hf:someone/corpus"


def write_vocab(path, tokens):
    path.write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
    return str(path)


@pytest.fixture
def hf_corpus(tmp_path, monkeypatch):
    """A Hugging Face corpus served by a patched ``datasets.load_dataset`` (the calls are recorded)
    and the MLM token folders under tmp_path."""
    import datasets

    calls = []
    corpus = {k: dict(v) for k, v in CORPUS.items()}
    monkeypatch.setattr(datasets, "load_dataset", lambda path, config: calls.append(path) or corpus)
    monkeypatch.setattr(mlm_data, "HERE", str(tmp_path / "mlm"))
    return corpus, calls


def mlm_cfg(vocab, **kw):
    return {**train.DEFAULTS, "task": "mlm", "dataset": DATASET, "bert_vocab": vocab, "block_size": 6, **kw}


# ---------------------------------------------------------------- MLM token caches (item 2)


def test_a_changed_vocab_txt_rebuilds_the_mlm_cache(tmp_path, hf_corpus):
    vocab = tmp_path / "vocab.txt"
    write_vocab(vocab, SPECIALS + WORDS)
    first = mlm_data.prepare(DATASET, tokenizer="bert-wordpiece", bert_vocab=str(vocab), verbose=False)
    ids_first = np.array(mlm_data.open_split("train", DATASET, tokenizer="bert-wordpiece"))
    assert ids_first[:2].tolist() == [5, 6]  # "the cat" in the first vocabulary
    assert first["vocab_sha256"] == data.file_sha256(str(vocab)) and first["lowercase"] is True
    # the same vocabulary again: reused, nothing rewritten
    folder = mlm_data.data_dir(DATASET, "", "bert-wordpiece")
    mtimes = {f: os.stat(os.path.join(folder, f)).st_mtime_ns for f in os.listdir(folder)}
    assert mlm_data.prepare(DATASET, tokenizer="bert-wordpiece", bert_vocab=str(vocab), verbose=False) == first
    assert {f: os.stat(os.path.join(folder, f)).st_mtime_ns for f in os.listdir(folder)} == mtimes
    # the same path, other contents: tokenized again with the new ids
    write_vocab(vocab, SPECIALS + ["[unused0]"] + WORDS)
    second = mlm_data.prepare(DATASET, tokenizer="bert-wordpiece", bert_vocab=str(vocab), verbose=False)
    assert second["vocab_sha256"] != first["vocab_sha256"]
    assert np.array(mlm_data.open_split("train", DATASET, tokenizer="bert-wordpiece"))[:2].tolist() == [6, 7]


def test_a_mismatch_that_cannot_be_rebuilt_names_both_values(tmp_path, hf_corpus, monkeypatch):
    import datasets

    vocab = tmp_path / "vocab.txt"
    write_vocab(vocab, SPECIALS + WORDS)
    old = data.file_sha256(mlm_data.prepare(DATASET, bert_vocab=write_vocab(vocab, SPECIALS + WORDS),
                                            verbose=False)["vocab_file"])
    write_vocab(vocab, SPECIALS + WORDS + ["mouse"])
    monkeypatch.setattr(datasets, "load_dataset", lambda path, config: (_ for _ in ()).throw(ConnectionError("x")))
    with pytest.raises(data.DataMismatch) as info:
        mlm_data.prepare(DATASET, bert_vocab=str(vocab), verbose=False)
    message = str(info.value)
    assert "vocab_sha256" in message and old[:20] in message and data.file_sha256(str(vocab))[:20] in message
    assert "\n" not in message


def test_a_truncated_token_file_is_prepared_again_and_refused_when_opened(tmp_path, hf_corpus):
    vocab = write_vocab(tmp_path / "vocab.txt", SPECIALS + WORDS)
    meta = mlm_data.prepare(DATASET, bert_vocab=vocab, verbose=False)
    path = os.path.join(mlm_data.data_dir(DATASET, "", "bert-wordpiece"), "val.bin")
    np.zeros(3, np.uint16).tofile(path)
    recorded = meta["tokens"]["val"]
    with pytest.raises(data.DataMismatch, match=rf"val.bin holds 3 tokens but its manifest records {recorded}"):
        mlm_data.open_split("val", DATASET)
    assert mlm_data.prepare(DATASET, bert_vocab=vocab, verbose=False)["tokens"] == meta["tokens"]
    assert len(mlm_data.open_split("val", DATASET)) == meta["tokens"]["val"]


def test_mlm_load_data_returns_the_manifest_summary(tmp_path, hf_corpus):
    vocab = write_vocab(tmp_path / "vocab.txt", SPECIALS + WORDS)
    cfg = mlm_cfg(vocab)
    mlm.prepare_data(cfg)
    d = mlm.load_data(cfg)
    summary = d["manifest"]
    assert summary == {"dataset": DATASET, "config": "wikitext-2-v1", "source": "huggingface:someone/corpus/None",
                       "train_size": len(d["train"]), "train_size_unit": "tokens", "val_size": len(d["val"]),
                       "test_size": summary["test_size"], "tokenizer": "bert-wordpiece",
                       "vocab_sha256": data.file_sha256(vocab), "lowercase": True}
    json.dumps(summary)
    batch = mlm.get_batch(d, "train", cfg, [0, 0, 0, 1, 0], "cpu")  # "manifest" is not a split
    assert batch["idx"].shape == (cfg["batch_size"], 6)


# ---------------------------------------------------------------- MLM data errors (item 6)


def test_an_empty_split_is_a_clear_error(tmp_path, hf_corpus):
    corpus, _ = hf_corpus
    corpus["validation"]["text"] = ["", "  "]
    vocab = write_vocab(tmp_path / "vocab.txt", SPECIALS + WORDS)
    with pytest.raises(data.DataFormatError, match=r"split 'val' has no tokens; MLM needs text in each of train, "
                                                   r"val, test"):
        mlm.prepare_data(mlm_cfg(vocab))
    # an empty token file met when opening: not np.memmap's "cannot mmap an empty file"
    folder = tmp_path / "tokens"
    folder.mkdir()
    (folder / "val.bin").write_bytes(b"")
    with pytest.raises(data.DataFormatError, match="val.bin: the split has no tokens"):
        wt2.open_token_file(str(folder / "val.bin"), "prepare it")


def test_a_vocabulary_without_sep_fails_before_tokenizers(tmp_path, hf_corpus, monkeypatch):
    import tokenizers

    def not_called(*args, **kwargs):
        raise AssertionError("tokenizers was called before the vocabulary check")

    monkeypatch.setattr(tokenizers, "BertWordPieceTokenizer", not_called)
    vocab = write_vocab(tmp_path / "vocab.txt", [t for t in SPECIALS if t != "[SEP]"] + WORDS)
    with pytest.raises(data.DataFormatError, match=r"vocab.txt: the vocabulary lacks \[SEP\]; a BERT vocabulary "
                                                   r"must hold each of \[PAD\], \[UNK\], \[CLS\], \[SEP\], \[MASK\]"):
        mlm_data.vocab_info("bert-wordpiece", vocab)
    with pytest.raises(data.DataFormatError, match=r"lacks \[SEP\]"):  # a data error, not a ConfigError
        mlm.prepare_data(mlm_cfg(vocab))


def test_a_split_shorter_than_a_window_speaks_of_mlm(tmp_path, hf_corpus):
    tokens = np.arange(5, 12, dtype=np.uint16)  # 7 tokens
    d = {"train": tokens, "val": tokens, "vocab": mlm_data.vocab_info("gpt2")}
    with pytest.raises(ValueError, match=r"split 'train' has 7 tokens, fewer than the 8 an MLM sequence needs "
                                         r"\(block_size - 2 = 10 - 2") as info:
        mlm.get_batch(d, "train", mlm_cfg("", block_size=10), 0, "cpu")
    assert "language modelling" not in str(info.value)
    assert mlm.get_batch(d, "train", mlm_cfg("", block_size=9, batch_size=2), 0, "cpu")["idx"].shape == (2, 9)
    # the lm task's wording is unchanged
    with pytest.raises(ValueError, match=r"block_size \+ 1 for language modelling"):
        lm.get_batch(d, "train", {**train.DEFAULTS, "block_size": 7, "batch_size": 1}, 0, "cpu")
    # found when the data is loaded, as a config error
    vocab = write_vocab(tmp_path / "vocab.txt", SPECIALS + WORDS)
    cfg = mlm_cfg(vocab, block_size=4000)
    mlm.prepare_data(cfg)
    with pytest.raises(ConfigError, match="an MLM sequence needs"):
        mlm.load_data(cfg)


def test_a_vocabulary_with_ids_above_65535_is_refused_before_the_cast(tmp_path, hf_corpus):
    big = SPECIALS + WORDS + [f"w{i}" for i in range(65_536 - len(SPECIALS) - len(WORDS) + 1)]  # 65,537 tokens
    vocab = write_vocab(tmp_path / "vocab.txt", big)
    with pytest.raises(data.DataFormatError, match=r"largest token id 65,536 .line 65,537. exceeds 65,535, the "
                                                   r"largest id the uint16 token files hold"):
        mlm.prepare_data(mlm_cfg(vocab))
    assert mlm_data.check_vocab_file(write_vocab(tmp_path / "ok.txt", big[:-1]))["w0"] == 15  # 65,536 tokens fit


def test_malformed_vocabulary_and_corpus_files_name_the_file_and_line(tmp_path, hf_corpus):
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(b"[PAD]\n[UNK]\n[CLS]\n\xff\xfe bad\n")
    with pytest.raises(data.DataFormatError, match=r"vocab.txt, line 4: not UTF-8 text") as info:
        mlm_data.check_vocab_file(str(vocab))
    assert len(str(info.value)) < 300
    src = tmp_path / "wt2"
    src.mkdir()
    for name in ("train", "valid", "test"):
        (src / f"wiki.{name}.tokens").write_text(" = A = \n\n the cat sat . \n", encoding="utf-8")
    (src / "wiki.valid.tokens").write_bytes(b" = A = \n ok \n caf\xe9 \n")
    with pytest.raises(data.DataFormatError, match=r"wiki.valid.tokens, line 3: not UTF-8 text.*got b'\\xe9 \\n'"):
        wt2.prepare(source_dir=str(src), out_dir=str(tmp_path / "out"), verbose=False)


# ---------------------------------------------------------------- WikiText-2 (GPT-2 tokens)


def small_wikitext(folder, text=" = Title = \n\n the cat sat on the mat . \n" * 20):
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train", "valid", "test"):
        (folder / f"wiki.{name}.tokens").write_text(f" = {name} = \n" + text, encoding="utf-8")
    return str(folder)


def test_wikitext2_manifest_rebuilds_for_another_copy_and_adopts_an_old_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(wt2, "HERE", str(tmp_path / "prepared"))
    monkeypatch.delenv("WIKITEXT2_DIR", raising=False)
    src = small_wikitext(tmp_path / "a")
    first = wt2.prepare(source_dir=src, verbose=False)
    assert first["tokenizer"] == "tiktoken:gpt2" and first["source"] == f"local:{src}"
    assert first["sha256"]["train"] == data.file_sha256(os.path.join(src, "wiki.train.tokens"))
    # another copy with other text: prepared again
    other = small_wikitext(tmp_path / "b", " = Other = \n\n a dog ran away . \n" * 30)
    second = wt2.prepare(source_dir=other, verbose=False)
    assert second["sha256"] != first["sha256"] and second["tokens"]["train"] != first["tokens"]["train"]
    # no source named: the prepared tokens are used as they are (no Hugging Face call)
    assert wt2.prepare(verbose=False) == second
    # a folder from before manifests is adopted without tokenizing again when meta.json verifies
    folder = wt2.data_dir()
    os.remove(os.path.join(folder, data.MANIFEST))
    meta = {"dataset": "wikitext-2", "config": "wikitext-2-v1", "source": f"local:{other}",
            "tokenizer": "tiktoken:gpt2", "dtype": "uint16", "vocab_size": 50257, "tokens": second["tokens"], "sha256": second["sha256"]}
    (tmp_path / "prepared" / "wikitext-2-v1" / "meta.json").write_text(json.dumps(meta))
    mtime = os.stat(os.path.join(folder, "train.bin")).st_mtime_ns
    adopted = wt2.prepare(source_dir=other, verbose=False)
    assert adopted["adopted_from"] == "meta.json" and adopted["tokens"] == second["tokens"]
    assert os.stat(os.path.join(folder, "train.bin")).st_mtime_ns == mtime


def test_lm_load_data_returns_the_manifest_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(wt2, "HERE", str(tmp_path / "prepared"))
    src = small_wikitext(tmp_path / "a")
    cfg = {**train.DEFAULTS, "task": "lm", "dataset": "wikitext2", "data_source_dir": src}
    lm.prepare_data(cfg)
    d = lm.load_data(cfg)
    assert d["manifest"] == {"dataset": "wikitext-2", "config": "wikitext-2-v1", "source": f"local:{src}",
                             "train_size": len(d["train"]), "train_size_unit": "tokens", "val_size": len(d["val"]),
                             "test_size": d["manifest"]["test_size"], "tokenizer": "tiktoken:gpt2",
                             "train_sha256": data.file_sha256(os.path.join(src, "wiki.train.tokens"))}
    assert set(d) == {"train", "val", "manifest"}
    # Tiny Shakespeare
    text = "ROMEO: I love thee, Juliet!\n" * 200
    (tmp_path / "input.txt").write_text(text, encoding="utf-8")
    monkeypatch.setattr(shakespeare, "DEFAULT_OUT_DIR", str(tmp_path / "chars"))
    cfg = {**train.DEFAULTS, "task": "lm", "dataset": "shakespeare_char",
           "data_source_file": str(tmp_path / "input.txt")}
    lm.prepare_data(cfg)
    d = lm.load_data(cfg)
    n = len(text)
    assert d["manifest"] == {"dataset": "shakespeare_char", "source": str(tmp_path / "input.txt"),
                             "train_size": n * 90 // 100, "train_size_unit": "tokens", "val_size": n * 5 // 100,
                             "test_size": n - n * 90 // 100 - n * 5 // 100, "tokenizer": shakespeare.TOKENIZER,
                             "vocab_size": len(set(text)), "sha256": data.file_sha256(str(tmp_path / "input.txt"))}
    json.dumps(d["manifest"])


# ---------------------------------------------------------------- Tiny Shakespeare (items 2 and 17)


def test_shakespeare_without_env_argument_or_network_is_unavailable(tmp_path, monkeypatch):
    import urllib.request

    def offline(url, timeout):
        raise OSError("network unreachable")

    monkeypatch.delenv("TINYSHAKESPEARE_FILE", raising=False)
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(shakespeare.DataUnavailable, match="could not download Tiny Shakespeare.*TINYSHAKESPEARE_FILE"):
        shakespeare.prepare(out_dir=str(tmp_path / "out"), verbose=False)
    assert not os.path.exists(tmp_path / "out" / "meta.json")
    source = open(shakespeare.__file__, encoding="utf-8").read()
    assert "shared" not in source.replace("shared with", "")  # no path beside the repository


def test_shakespeare_manifest_folds_in_the_source_sha256(tmp_path):
    text = "To be, or not to be: that is the question.\n" * 50
    (tmp_path / "input.txt").write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    meta = shakespeare.prepare(str(tmp_path / "input.txt"), str(out), verbose=False)
    manifest = data.read_manifest(str(out))
    assert manifest["sha256"] == meta["sha256"] == data.file_sha256(str(tmp_path / "input.txt"))
    assert manifest["tokens"] == meta["tokens"] and manifest["tokenizer"] == shakespeare.TOKENIZER
    # a folder from before manifests (meta.json only) is adopted, not re-tokenized
    os.remove(out / data.MANIFEST)
    assert shakespeare.prepare(str(tmp_path / "input.txt"), str(out), verbose=False) == meta
    assert data.read_manifest(str(out))["adopted_from"] == "meta.json"
    # a source that is not UTF-8: one line naming the file and the line
    (tmp_path / "bad.txt").write_bytes(b"ok\nfine\n\xff\xfe\n")
    with pytest.raises(data.DataFormatError, match=r"bad.txt, line 3: not UTF-8 text"):
        shakespeare.prepare(str(tmp_path / "bad.txt"), str(tmp_path / "o2"), verbose=False)
