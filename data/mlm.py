"""Data for masked language modelling (BERT, Devlin et al. 2019, section 3.1 "Task #1: Masked LM"):
a tokenized corpus, fixed-length sequences [CLS] t_1 ... t_{L-2} [SEP], and the masking.

Corpora (``dataset``): "wikitext2" (``data/wikitext2/prepare.py`` finds the text: a local
directory or Hugging Face) or "hf:<path>" / "hf:<path>:<config>", any Hugging Face ``datasets``
corpus with a "text" column and train / validation / test splits (needs network or a cache).

Tokenizers (``tokenizer``):

- "bert-wordpiece": BERT's uncased WordPiece through the ``tokenizers`` library, from a
  ``vocab.txt`` (``bert_vocab``, else the env var ``BERT_VOCAB_FILE``) or, when neither is set,
  bert-base-uncased from the Hugging Face hub. WikiText's "<unk>" becomes BERT's [UNK]. Special
  tokens [PAD] [UNK] [CLS] [SEP] [MASK]; the model's vocabulary is 30522 padded to 30528.
- "gpt2": GPT-2 BPE (tiktoken), the lm task's token files for WikiText-2; the special tokens are
  new ids after GPT-2's 50257: [MASK] 50257, [CLS] 50258, [SEP] 50259, [PAD] 50260 (the model's
  vocabulary is 50304, as for the lm task). GPT-2 has no [UNK].

Token files: ``<dir>/{train,val,test}.bin`` (uint16) and ``meta.json``; the directory is
``data/wikitext2/<config>/`` for WikiText-2 with gpt2 (shared with the lm task),
``data/wikitext2/<config>/bert-wordpiece/`` for WikiText-2 with WordPiece and
``data/hf/<path>[__<config>]/<tokenizer>/`` for Hugging Face corpora. The token stream of a split
is its lines' tokens concatenated; sequences are windows of it (they may cross article borders,
as in the lm task).

Masking (``mask_tokens``): each token that is not special is chosen independently with
probability ``mask_prob`` (0.15); a chosen token becomes [MASK] with probability ``mask_frac``
(0.8), a random ordinary token with probability ``random_frac`` (0.1), and stays as it is
otherwise. Special tokens are never chosen. The labels hold the original ids of the chosen
tokens and -1 elsewhere.
"""
import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np

import data
from data.wikitext2 import prepare as wt2

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZERS = ("bert-wordpiece", "gpt2")
SPLITS = ("train", "val", "test")
HF_SPLITS = {"train": "train", "val": "validation", "test": "test"}
BERT_HUB_NAME = "bert-base-uncased"
GPT2_SPECIAL = {"mask": 50257, "cls": 50258, "sep": 50259, "pad": 50260}
GPT2_MODEL_VOCAB = 50304
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class DataUnavailable(data.DataUnavailable):
    """A corpus or the BERT vocabulary can be found neither locally nor online."""


@dataclass(frozen=True)
class Vocab:
    """Token ids of one tokenizer as the MLM task uses them.

    Attributes:
        tokenizer: "bert-wordpiece" or "gpt2".
        model_vocab_size: rows of the model's embedding (the tokenizer's size padded to a
            multiple of 64).
        pad_id, cls_id, sep_id, mask_id: the special tokens' ids.
        special_ids: every id that is never chosen for masking ([UNK] included for WordPiece).
        random_ids: the ordinary ids a chosen token may be replaced by (no special or unused ids).
    """
    tokenizer: str
    model_vocab_size: int
    pad_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    special_ids: tuple
    random_ids: np.ndarray


def _pad64(n):
    return (n + 63) // 64 * 64


def _bert_vocab_source(bert_vocab):
    return bert_vocab or os.environ.get("BERT_VOCAB_FILE", "")


def bert_tokenizer(bert_vocab=""):
    """The uncased BERT WordPiece tokenizer (``tokenizers`` library) from ``bert_vocab`` (a
    vocab.txt), else env ``BERT_VOCAB_FILE``, else bert-base-uncased from the Hugging Face hub.

    Raises:
        DataUnavailable: the file does not exist, or the hub cannot be reached.
    """
    from tokenizers import BertWordPieceTokenizer, Tokenizer

    path = _bert_vocab_source(bert_vocab)
    if path:
        if not os.path.exists(path):
            raise DataUnavailable(f"BERT vocabulary {path} not found (bert_vocab / BERT_VOCAB_FILE)")
        return BertWordPieceTokenizer(path, lowercase=True)
    try:
        return Tokenizer.from_pretrained(BERT_HUB_NAME)
    except Exception as e:  # network or hub failures all mean "not reachable"
        raise DataUnavailable(f"could not load {BERT_HUB_NAME} from the Hugging Face hub ({type(e).__name__}: {e}); "
                              f"offline, pass --bert_vocab=PATH/vocab.txt or set BERT_VOCAB_FILE") from e


def vocab_info(tokenizer, bert_vocab=""):
    """The ``Vocab`` of ``tokenizer`` ("bert-wordpiece" or "gpt2").

    Raises:
        ValueError: unknown tokenizer.
        DataUnavailable: the BERT vocabulary cannot be found.
    """
    if tokenizer == "gpt2":
        return Vocab("gpt2", GPT2_MODEL_VOCAB, GPT2_SPECIAL["pad"], GPT2_SPECIAL["cls"], GPT2_SPECIAL["sep"],
                     GPT2_SPECIAL["mask"], tuple(sorted(GPT2_SPECIAL.values())),
                     np.arange(50256, dtype=np.int64))  # every GPT-2 id but <|endoftext|> (50256)
    if tokenizer != "bert-wordpiece":
        raise ValueError(f"unknown tokenizer {tokenizer!r}; allowed: {', '.join(TOKENIZERS)}")
    ids = bert_tokenizer(bert_vocab).get_vocab()  # token -> id
    missing = [t for t in BERT_SPECIAL_TOKENS if t not in ids]
    if missing:
        raise DataUnavailable(f"the BERT vocabulary lacks {missing}")
    ordinary = sorted(i for t, i in ids.items() if not (t.startswith("[") and t.endswith("]") and len(t) > 2))
    return Vocab("bert-wordpiece", _pad64(len(ids)), ids["[PAD]"], ids["[CLS]"], ids["[SEP]"], ids["[MASK]"],
                 tuple(sorted(ids[t] for t in BERT_SPECIAL_TOKENS)), np.asarray(ordinary, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# corpora and token files


def _parse_dataset(dataset):
    if dataset == "wikitext2":
        return None
    if dataset.startswith("hf:") and len(dataset) > 3:
        path, _, config = dataset[3:].partition(":")
        return path, (config or None)
    raise ValueError(f"unknown MLM dataset {dataset!r}; allowed: wikitext2, hf:<path> or hf:<path>:<config> "
                     f"(a Hugging Face datasets corpus with a 'text' column)")


def data_dir(dataset, dataset_config, tokenizer):
    """Directory of the token files of a corpus and tokenizer (see the module docstring).

    Raises:
        ValueError: unknown dataset.
    """
    hf = _parse_dataset(dataset)
    if hf is None:
        base = wt2.data_dir(dataset_config)
        return base if tokenizer == "gpt2" else os.path.join(base, tokenizer)
    path, config = hf
    name = path.replace("/", "__") + (f"__{config}" if config else "")
    return os.path.join(HERE, "hf", name, tokenizer)


def read_texts(dataset, dataset_config="wikitext-2-v1", source_dir=""):
    """dict split ("train", "val", "test") -> list of text lines, and a description of the source.

    Raises:
        ValueError: unknown dataset.
        DataUnavailable: the corpus cannot be found locally or online (message says how to supply it).
    """
    hf = _parse_dataset(dataset)
    if hf is None:
        if dataset_config not in wt2.CONFIGS:
            raise ValueError(f"unknown dataset_config {dataset_config!r}; allowed: {', '.join(wt2.CONFIGS)}")
        texts, source = wt2._read_texts(dataset_config, source_dir or os.environ.get("WIKITEXT2_DIR"))
        return {split: text.splitlines() for split, text in texts.items()}, source
    path, config = hf
    try:
        from datasets import load_dataset

        ds = load_dataset(path, config)
        return {ours: list(ds[theirs]["text"]) for ours, theirs in HF_SPLITS.items()}, f"huggingface:{path}/{config}"
    except Exception as e:  # network, hub, cache or missing split / column
        raise DataUnavailable(f"could not load {dataset} through Hugging Face datasets with splits "
                              f"{', '.join(HF_SPLITS.values())} and a 'text' column ({type(e).__name__}: {e})") from e


def encode_lines(lines, tokenizer, bert_vocab=""):
    """Token ids of ``lines`` concatenated, a uint16 array. WordPiece: "<unk>" -> [UNK], no
    special tokens added; gpt2: tiktoken's ``encode_ordinary`` of the lines joined by newlines."""
    if tokenizer == "gpt2":
        import tiktoken

        return wt2.encode("\n".join(lines), tiktoken.get_encoding("gpt2"))
    tok = bert_tokenizer(bert_vocab)
    ids = []
    batch = 4096
    for start in range(0, len(lines), batch):
        chunk = [line.replace("<unk>", "[UNK]") for line in lines[start:start + batch]]
        for enc in tok.encode_batch(chunk, add_special_tokens=False):
            ids.extend(enc.ids)
    return np.asarray(ids, dtype=np.uint16)  # BERT's 30522 ids fit in 16 bits


def is_prepared(dataset, dataset_config, tokenizer):
    """True if every split's token file and meta.json exist."""
    out = data_dir(dataset, dataset_config, tokenizer)
    return all(os.path.exists(os.path.join(out, f)) for f in [f"{s}.bin" for s in SPLITS] + ["meta.json"])


def prepare(dataset="wikitext2", dataset_config="wikitext-2-v1", tokenizer="bert-wordpiece", source_dir="",
            bert_vocab="", verbose=True):
    """Write the token files of ``dataset`` with ``tokenizer`` unless they are already there;
    return the meta dict. WikiText-2 with gpt2 is ``data/wikitext2/prepare.py``'s job (called here).

    Raises:
        ValueError: unknown dataset, dataset_config or tokenizer.
        DataUnavailable: the corpus or the BERT vocabulary cannot be found.
    """
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; allowed: {', '.join(TOKENIZERS)}")
    out = data_dir(dataset, dataset_config, tokenizer)
    if _parse_dataset(dataset) is None and tokenizer == "gpt2":
        if dataset_config not in wt2.CONFIGS:
            raise ValueError(f"unknown dataset_config {dataset_config!r}; allowed: {', '.join(wt2.CONFIGS)}")
        return wt2.prepare(dataset_config, source_dir or None, verbose=verbose)
    meta_path = os.path.join(out, "meta.json")
    if is_prepared(dataset, dataset_config, tokenizer):
        with open(meta_path) as f:
            return json.load(f)
    lines, source = read_texts(dataset, dataset_config, source_dir)
    os.makedirs(out, exist_ok=True)
    counts = {}
    for split in SPLITS:
        ids = encode_lines(lines[split], tokenizer, bert_vocab)
        data.atomic_write(os.path.join(out, f"{split}.bin"), ids.tofile)
        counts[split] = int(ids.size)
        if verbose:
            print(f"{dataset} {split}: {len(lines[split]):,} lines -> {ids.size:,} {tokenizer} tokens")
    digest = hashlib.sha256("\n".join(lines["train"]).encode("utf-8")).hexdigest()
    meta = {"dataset": dataset, "config": dataset_config, "source": source, "tokenizer": tokenizer,
            "bert_vocab": _bert_vocab_source(bert_vocab) or BERT_HUB_NAME, "dtype": "uint16", "tokens": counts,
            "train_sha256": digest}
    data.write_json(meta_path, meta, indent=2)
    return meta


def open_split(split, dataset="wikitext2", dataset_config="wikitext-2-v1", tokenizer="bert-wordpiece"):
    """Read-only uint16 memmap of a prepared split (nothing is prepared here).

    Raises:
        ValueError: unknown split.
        DataUnavailable: the file is missing (run ``prepare`` first).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    path = os.path.join(data_dir(dataset, dataset_config, tokenizer), f"{split}.bin")
    if not os.path.exists(path):
        raise DataUnavailable(f"{path} not found; prepare it first (python train.py --task=mlm does so)")
    return np.memmap(path, dtype=np.uint16, mode="r")


# ---------------------------------------------------------------------------------------------
# sequences and masking


def add_special_tokens(windows, vocab):
    """(n, L - 2) token ids -> (n, L) int64 sequences [CLS] tokens [SEP]."""
    n = windows.shape[0]
    cls = np.full((n, 1), vocab.cls_id, dtype=np.int64)
    sep = np.full((n, 1), vocab.sep_id, dtype=np.int64)
    return np.concatenate([cls, windows.astype(np.int64), sep], axis=1)


def consecutive_windows(tokens, length, max_windows=0):
    """The non-overlapping windows [0, length), [length, 2 length), ... of a token array that fit
    entirely (the remainder is dropped), at most ``max_windows`` of them (0 = all): (n, length) int64.

    Raises:
        ValueError: fewer than ``length`` tokens (no window fits).
    """
    n = len(tokens) // length
    if n == 0:
        raise ValueError(f"{len(tokens):,} tokens are fewer than one window of {length:,}")
    if max_windows:
        n = min(n, max_windows)
    return np.asarray(tokens[:n * length], dtype=np.int64).reshape(n, length)


def mask_tokens(ids, vocab, rng, mask_prob=0.15, mask_frac=0.8, random_frac=0.1):
    """BERT's masking of (n, L) int64 sequences (rules in the module docstring).

    Args:
        ids: (n, L) int64 token ids (with their special tokens).
        vocab: the tokenizer's ``Vocab``.
        rng: ``numpy.random.Generator`` (all draws come from it).
        mask_prob: probability that an ordinary token is chosen, in (0, 1].
        mask_frac, random_frac: of the chosen tokens, the fractions replaced by [MASK] and by a
            random ordinary token (the rest keep their id); each >= 0, sum <= 1.

    Returns:
        (inputs, labels): (n, L) int64 each; labels = original id where chosen, -1 elsewhere.

    Raises:
        ValueError: a probability outside its range.
    """
    check_masking(mask_prob, mask_frac, random_frac)
    eligible = ~np.isin(ids, np.asarray(vocab.special_ids))
    chosen = eligible & (rng.random(ids.shape) < mask_prob)
    action = rng.random(ids.shape)
    to_mask = chosen & (action < mask_frac)
    to_random = chosen & (action >= mask_frac) & (action < mask_frac + random_frac)
    inputs = ids.copy()
    inputs[to_mask] = vocab.mask_id
    inputs[to_random] = vocab.random_ids[rng.integers(0, len(vocab.random_ids), size=int(to_random.sum()))]
    labels = np.where(chosen, ids, -1)
    return inputs, labels


def check_masking(mask_prob, mask_frac, random_frac):
    """Raises ValueError unless 0 < mask_prob <= 1, mask_frac, random_frac >= 0, their sum <= 1."""
    if not 0 < mask_prob <= 1:
        raise ValueError(f"mask_prob must be in (0, 1]; got {mask_prob}")
    if mask_frac < 0 or random_frac < 0 or mask_frac + random_frac > 1:
        raise ValueError(f"mask_frac and random_frac must be >= 0 with a sum <= 1 (the rest keep their token); "
                         f"got {mask_frac} and {random_frac}")
