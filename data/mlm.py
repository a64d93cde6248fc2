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

Token files: ``<dir>/{train,val,test}.bin`` (uint16) and, last, ``manifest.json``; the directory is
``data/wikitext2/<config>/`` for WikiText-2 with gpt2 (shared with the lm task),
``data/wikitext2/<config>/bert-wordpiece/`` for WikiText-2 with WordPiece and
``data/hf/<path>[__<config>]/<tokenizer>/`` for Hugging Face corpora. The token stream of a split
is its lines' tokens concatenated; sequences are windows of it (they may cross article borders,
as in the lm task).

Manifest (``manifest.json``; WikiText-2 with gpt2 uses ``data/wikitext2/prepare.py``'s). The
fields compared before the tokens are reused: ``dataset``, ``config``, ``tokenizer``, for
WordPiece ``vocab_sha256`` (hex SHA-256 of vocab.txt's bytes, or "hub:bert-base-uncased") and
``lowercase`` (True), and, when the text was read for the check, ``sha256`` (split -> SHA-256 of
the split's lines joined by newlines). Recorded besides: ``source``, ``vocab_file``, ``tokens``
(split -> count), ``dtype``. Reuse rules (``prepare``): a manifest whose tokenizer fields differ
(a changed vocab.txt, another file) is rebuilt; the text is read and hashed when a local copy is
named (``source_dir`` / ``WIKITEXT2_DIR``) and a manifest with other hashes is rebuilt; with no
local copy named, a complete manifest with the same tokenizer is reused as it is (Hugging Face is
not asked again). Token files whose sizes differ from the manifest are rebuilt, and refused by
``open_split``. A rebuild that needs a source which cannot be read raises ``data.DataMismatch``
naming the prepared and the asked values. A folder from before manifests (``meta.json`` only)
recorded the vocabulary's path, not its hash, so it cannot be verified: it is rebuilt.

Vocabulary checks, before ``tokenizers`` sees the file (``check_vocab_file``): UTF-8 text, one
token per line, not empty, holding [PAD] [UNK] [CLS] [SEP] [MASK], at most 65,536 lines (ids
must fit the uint16 token files); each failure is a ``data.DataFormatError`` naming the file.

Masking (``mask_tokens``): each token that is not special is chosen independently with
probability ``mask_prob`` (0.15); a chosen token becomes [MASK] with probability ``mask_frac``
(0.8), a random ordinary token with probability ``random_frac`` (0.1), and stays as it is
otherwise. Special tokens are never chosen. The labels hold the original ids of the chosen
tokens and -1 elsewhere.
"""
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


MAX_TOKEN_ID = (1 << 16) - 1  # the token files are uint16


def check_vocab_file(path):
    """Read and check a WordPiece vocab.txt (one token per line, id = line number - 1) before the
    ``tokenizers`` library sees it.

    Returns:
        dict token -> id.

    Raises:
        DataUnavailable: the file does not exist.
        data.DataFormatError: not UTF-8, empty, a special token missing (all of [PAD] [UNK]
            [CLS] [SEP] [MASK] are needed), or its largest id exceeds 65,535 (uint16 token files).
    """
    if not os.path.exists(path):
        raise DataUnavailable(f"BERT vocabulary {path} not found (bert_vocab / BERT_VOCAB_FILE)")
    text = wt2.read_text_file(path)
    tokens = text.splitlines()
    if not tokens:
        raise data.DataFormatError(path, "empty vocabulary; a WordPiece vocab.txt has one token per line")
    ids = {}
    for i, token in enumerate(tokens):
        ids.setdefault(token.strip(), i)
    missing = [t for t in BERT_SPECIAL_TOKENS if t not in ids]
    if missing:
        raise data.DataFormatError(path, f"the vocabulary lacks {', '.join(missing)}; a BERT vocabulary must hold "
                                   f"each of {', '.join(BERT_SPECIAL_TOKENS)} on a line of its own")
    largest = len(tokens) - 1
    if largest > MAX_TOKEN_ID:
        raise data.DataFormatError(path, f"largest token id {largest:,} (line {largest + 1:,}) exceeds "
                                   f"{MAX_TOKEN_ID:,}, the largest id the uint16 token files hold; use a "
                                   f"vocabulary of at most {MAX_TOKEN_ID + 1:,} tokens")
    return ids


def vocab_identity(tokenizer, bert_vocab=""):
    """The manifest fields that identify ``tokenizer``'s token ids (see the module docstring).

    Raises:
        DataUnavailable / data.DataFormatError: see ``check_vocab_file``.
    """
    if tokenizer == "gpt2":
        return {"tokenizer": "gpt2", "encoding": "tiktoken:gpt2"}
    path = _bert_vocab_source(bert_vocab)
    if not path:
        return {"tokenizer": tokenizer, "vocab_sha256": f"hub:{BERT_HUB_NAME}", "lowercase": True}
    check_vocab_file(path)
    return {"tokenizer": tokenizer, "vocab_sha256": data.file_sha256(path), "lowercase": True}


def bert_tokenizer(bert_vocab=""):
    """The uncased BERT WordPiece tokenizer (``tokenizers`` library) from ``bert_vocab`` (a
    vocab.txt, checked by ``check_vocab_file`` first), else env ``BERT_VOCAB_FILE``, else
    bert-base-uncased from the Hugging Face hub.

    Raises:
        DataUnavailable: the file does not exist, or the hub cannot be reached.
        data.DataFormatError: a malformed vocab.txt (see ``check_vocab_file``).
    """
    from tokenizers import BertWordPieceTokenizer, Tokenizer

    path = _bert_vocab_source(bert_vocab)
    if path:
        check_vocab_file(path)
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
        data.DataFormatError: a malformed vocab.txt (see ``check_vocab_file``).
    """
    if tokenizer == "gpt2":
        return Vocab("gpt2", GPT2_MODEL_VOCAB, GPT2_SPECIAL["pad"], GPT2_SPECIAL["cls"], GPT2_SPECIAL["sep"],
                     GPT2_SPECIAL["mask"], tuple(sorted(GPT2_SPECIAL.values())),
                     np.arange(50256, dtype=np.int64))  # every GPT-2 id but <|endoftext|> (50256)
    if tokenizer != "bert-wordpiece":
        raise ValueError(f"unknown tokenizer {tokenizer!r}; allowed: {', '.join(TOKENIZERS)}")
    ids = bert_tokenizer(bert_vocab).get_vocab()  # token -> id
    missing = [t for t in BERT_SPECIAL_TOKENS if t not in ids]
    if missing:  # the hub's vocabulary (a file was checked by check_vocab_file)
        raise data.DataFormatError(f"hub:{BERT_HUB_NAME}", f"the vocabulary lacks {', '.join(missing)}")
    if max(ids.values()) > MAX_TOKEN_ID:
        raise data.DataFormatError(f"hub:{BERT_HUB_NAME}", f"largest token id {max(ids.values()):,} exceeds "
                                   f"{MAX_TOKEN_ID:,} (uint16 token files)")
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
        data.DataFormatError: a local file is not UTF-8.
    """
    hf = _parse_dataset(dataset)
    if hf is None:
        if dataset_config not in wt2.CONFIGS:
            raise ValueError(f"unknown dataset_config {dataset_config!r}; allowed: {', '.join(wt2.CONFIGS)}")
        texts, source = wt2._read_texts(dataset_config, source_dir or os.environ.get("WIKITEXT2_DIR", ""),
                                         "--data_source_dir" if source_dir else "WIKITEXT2_DIR")
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
    special tokens added; gpt2: tiktoken's ``encode_ordinary`` of the lines joined by newlines.

    Raises:
        data.DataFormatError: a token id above 65,535 (the vocabulary checks should have caught it).
    """
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
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and ids.max() > MAX_TOKEN_ID:  # checked before the cast: NumPy 1.x would wrap silently
        raise data.DataFormatError(_bert_vocab_source(bert_vocab) or f"hub:{BERT_HUB_NAME}",
                                   f"token id {int(ids.max()):,} exceeds {MAX_TOKEN_ID:,}, the largest id the "
                                   f"uint16 token files hold")
    return ids.astype(np.uint16)


def _local_source(dataset, source_dir):
    """The local WikiText-2 directory named by ``source_dir`` or ``WIKITEXT2_DIR`` ("" if none or
    not WikiText-2)."""
    if _parse_dataset(dataset) is not None:
        return ""
    return source_dir or os.environ.get("WIKITEXT2_DIR", "")


def is_prepared(dataset, dataset_config, tokenizer):
    """True if the folder has a manifest and every split's token file of the recorded size."""
    out = data_dir(dataset, dataset_config, tokenizer)
    if _parse_dataset(dataset) is None and tokenizer == "gpt2":
        return wt2.is_prepared(dataset_config, out)
    manifest = data.read_manifest(out)
    return manifest is not None and wt2.files_match(out, manifest, SPLITS)


def prepare(dataset="wikitext2", dataset_config="wikitext-2-v1", tokenizer="bert-wordpiece", source_dir="",
            bert_vocab="", verbose=True):
    """Write the token files of ``dataset`` with ``tokenizer`` unless the folder already holds
    them from the same text and vocabulary (rules in the module docstring); return the manifest.
    WikiText-2 with gpt2 is ``data/wikitext2/prepare.py``'s job (called here).

    Returns:
        dict: the manifest (keys in the module docstring; "tokens": split -> count).

    Raises:
        ValueError: unknown dataset, dataset_config or tokenizer.
        DataUnavailable: the corpus or the BERT vocabulary cannot be found.
        data.DataFormatError: a malformed vocab.txt or source file, or a split without tokens.
        data.DataMismatch: the prepared tokens differ from what is asked and the source cannot be read.
    """
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; allowed: {', '.join(TOKENIZERS)}")
    out = data_dir(dataset, dataset_config, tokenizer)
    if _parse_dataset(dataset) is None:
        if dataset_config not in wt2.CONFIGS:
            raise ValueError(f"unknown dataset_config {dataset_config!r}; allowed: {', '.join(wt2.CONFIGS)}")
        if tokenizer == "gpt2":
            manifest = wt2.prepare(dataset_config, source_dir or None, verbose=verbose, source_key="--data_source_dir")
            _check_no_empty_split(manifest, dataset, wt2.data_dir(dataset_config))
            return manifest
    expected = {"dataset": dataset, "config": dataset_config, **vocab_identity(tokenizer, bert_vocab)}
    stored = data.read_manifest(out)
    if stored is not None and not wt2.files_match(out, stored, SPLITS):
        stored = None  # token files changed since: prepare again
    local = _local_source(dataset, source_dir)
    texts = None
    if local or stored is None or data.manifest_differences(stored, expected):
        try:
            texts = read_texts(dataset, dataset_config, local)
        except DataUnavailable as e:
            if stored is None:
                raise
            raise data.DataMismatch(
                f"MLM tokens in {out} were prepared with other options "
                f"({data.describe_differences(data.manifest_differences(stored, expected))}) and the corpus "
                f"needed to prepare them again cannot be read ({e})") from None
        lines, source = texts
        expected["sha256"] = {split: wt2.text_sha256("\n".join(lines[split])) for split in SPLITS}
    elif "sha256" in stored:
        expected["sha256"] = stored["sha256"]  # no local copy named: reuse (module docstring)
    stale = stored is None and data.read_manifest(out) is not None  # a manifest whose files changed since

    def build(directory):
        lines, source = texts
        counts = {}  # (a meta.json from before manifests is not carried into the new folder)
        for split in SPLITS:
            ids = encode_lines(lines[split], tokenizer, bert_vocab)
            if ids.size == 0:
                raise data.DataFormatError(wt2.source_name(source, split, dataset_config), f"split {split!r} has no tokens; MLM "
                                           f"needs text in each of {', '.join(SPLITS)}")
            data.atomic_write(os.path.join(directory, f"{split}.bin"), ids.tofile)
            counts[split] = int(ids.size)
            if verbose:
                print(f"{dataset} {split}: {len(lines[split]):,} lines -> {ids.size:,} {tokenizer} tokens")
        return {"source": source, "vocab_file": _bert_vocab_source(bert_vocab) or f"hub:{BERT_HUB_NAME}",
                "tokens": counts, "dtype": "uint16"}

    return data.ensure_manifest(out, expected, build, what=f"MLM tokens ({dataset}, {tokenizer})", stale=stale)


def _check_no_empty_split(manifest, dataset, directory):
    for split in SPLITS:
        if not manifest.get("tokens", {}).get(split):
            raise data.DataFormatError(os.path.join(directory, f"{split}.bin"), f"split {split!r} of {dataset} has "
                                       f"no tokens; MLM needs text in each of {', '.join(SPLITS)}")


def summary(manifest):
    """The run log's summary of an MLM token folder's manifest: source, sizes in tokens,
    tokenizer identity (small and JSON-serialisable)."""
    tokens = manifest.get("tokens", {})
    out = {"dataset": manifest.get("dataset"), "config": manifest.get("config"), "source": str(manifest.get("source")),
           "train_size": int(tokens.get("train", 0)), "train_size_unit": "tokens",
           "val_size": int(tokens.get("val", 0)), "test_size": int(tokens.get("test", 0)),
           "tokenizer": manifest.get("tokenizer")}
    for key in ("vocab_sha256", "lowercase", "encoding"):
        if key in manifest:
            out[key] = manifest[key]
    return out


def manifest(dataset="wikitext2", dataset_config="wikitext-2-v1", tokenizer="bert-wordpiece"):
    """The manifest of a prepared token folder.

    Raises:
        DataUnavailable: not prepared.
        data.DataFormatError: manifest.json is not JSON.
    """
    out = data_dir(dataset, dataset_config, tokenizer)
    found = data.read_manifest(out)
    if found is None:
        raise DataUnavailable(f"{os.path.join(out, data.MANIFEST)} not found; prepare it first "
                              f"(python train.py --task=mlm does so)")
    if _parse_dataset(dataset) is None and tokenizer == "gpt2":
        found = {**found, "dataset": dataset, "tokenizer": "gpt2", "encoding": found.get("tokenizer")}
    return found


def open_split(split, dataset="wikitext2", dataset_config="wikitext-2-v1", tokenizer="bert-wordpiece"):
    """Read-only uint16 memmap of a prepared split (nothing is prepared here).

    Returns:
        np.memmap of shape (tokens,), dtype uint16.

    Raises:
        ValueError: unknown split.
        DataUnavailable: the file is missing (run ``prepare`` first).
        data.DataFormatError: the file is empty (a split without tokens) or has an odd size.
        data.DataMismatch: its size differs from the manifest's count.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    directory = data_dir(dataset, dataset_config, tokenizer)
    path = os.path.join(directory, f"{split}.bin")
    how = "prepare it first (python train.py --task=mlm does so)"
    if not os.path.exists(path):
        raise DataUnavailable(f"{path} not found; {how}")
    return wt2.open_token_file(path, how, data.read_manifest(directory), split)


def check_window_fits(tokens, block_size, name="split"):
    """Raise ValueError unless ``tokens`` (a split) holds one MLM window: block_size - 2 tokens
    ([CLS] and [SEP] are added around them)."""
    need = block_size - 2
    if len(tokens) < need:
        raise ValueError(f"{name} has {len(tokens):,} tokens, fewer than the {need:,} an MLM sequence needs "
                         f"(block_size - 2 = {block_size} - 2, beside [CLS] and [SEP]); use a smaller block_size "
                         f"or more data")


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
