"""Tokenize WikiText-2 (Merity et al. 2016) with tiktoken's "gpt2" BPE into uint16 token files.

    python -m data.wikitext2.prepare [--config=wikitext-2-v1|wikitext-2-raw-v1] [--source_dir=DIR]

Writes ``data/wikitext2/<config>/{train,val,test}.bin`` (uint16 GPT-2 token ids) and, last,
``manifest.json`` (``data.write_manifest``). Sources, in order: ``--source_dir`` (or the env var
``WIKITEXT2_DIR``) holding ``wiki.{train,valid,test}.tokens`` (``.raw`` for the raw config), else
Hugging Face ``datasets`` ("wikitext", <config>). Each split is the concatenation of the
dataset's lines, i.e. the original file's text. Files are written under temporary names unique to
the process and renamed, so concurrent preparations never see half-written files.

Manifest (``manifest.json``), the fields that identify the data and are compared before reuse:
``dataset`` ("wikitext-2"), ``config``, ``tokenizer`` ("tiktoken:gpt2", tiktoken's encoding name)
and ``sha256`` (split -> hex SHA-256 of the split's UTF-8 text); recorded besides: ``source``
("local:<dir>" or "huggingface:wikitext/<config>"), ``tokens`` (split -> token count),
``vocab_size`` and ``dtype``. The identity is the text's content, not its location: a copy of the
same files elsewhere reuses the prepared tokens.

Reuse rules (``prepare``):

- a local source is named (argument or ``WIKITEXT2_DIR``): its three files are hashed; a manifest
  with other hashes (a different copy or config) is rebuilt, tokenizing takes about a minute;
- no local source is named: prepared files with a complete manifest are used as they are (the
  manifest says where they came from); otherwise Hugging Face is asked;
- token files whose sizes differ from the manifest's counts (truncated, overwritten) are rebuilt
  when the source can be read; ``open_split`` refuses them (``data.DataMismatch``);
- a folder prepared before manifests existed (``meta.json``, no ``manifest.json``) is adopted
  without re-tokenizing when its meta.json names this config and tokenizer, its token files have
  the sizes it records and, when a source is named, its sha256 values equal the source's;
  otherwise it is rebuilt.

Errors: a source file that is not UTF-8 raises ``data.DataFormatError`` naming the file and line;
an empty or odd-sized token file raises ``data.DataFormatError`` from ``open_split``.
"""
import argparse
import hashlib
import json
import os
import time

import numpy as np

import data

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ("wikitext-2-v1", "wikitext-2-raw-v1")
SPLITS = {"train": "train", "val": "valid", "test": "test"}  # our name -> the dataset's name
CHUNK_CHARS = 1 << 20  # tokenize ~1 MB at a time (progress bar granularity)

# The config keys of the tasks trained on WikiText-2 (lm, mlm), declared here once.
CONFIG_DEFAULTS = dict(dataset_config="wikitext-2-v1", data_source_dir="")
CONFIG_HELP = dict(
    dataset_config="WikiText-2 variant: wikitext-2-v1 (<unk>-processed) or wikitext-2-raw-v1",
    data_source_dir="directory with wiki.{train,valid,test}.tokens ('' = env WIKITEXT2_DIR, else Hugging Face)",
)


class DataUnavailable(data.DataUnavailable):
    """WikiText-2 could be found neither locally nor through Hugging Face datasets."""


def data_dir(config="wikitext-2-v1"):
    """Directory holding the prepared ``.bin`` files of ``config``."""
    return os.path.join(HERE, config)


def read_text_file(path):
    """The UTF-8 text of ``path``.

    Raises:
        data.DataFormatError: the bytes are not UTF-8 (names the file, the line and the bytes).
    """
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise data.DataFormatError(path, "not UTF-8 text; the corpus files must be UTF-8", line=line,
                                   content=raw[e.start:e.start + 16]) from None


def _read_texts(config, source_dir, source_key="--source_dir"):
    """dict split -> text and the source ("local:<dir>" or "huggingface:wikitext/<config>").
    ``source_key`` is how the user named ``source_dir`` (a flag, a config key, an environment
    variable), for the message about a missing file.

    Raises:
        DataUnavailable: a local file is missing, or Hugging Face is unreachable.
        data.DataFormatError: a local file is not UTF-8.
    """
    if source_dir:
        ext = "raw" if "raw" in config else "tokens"
        texts = {}
        for ours, theirs in SPLITS.items():
            path = os.path.join(source_dir, f"wiki.{theirs}.{ext}")
            if not os.path.exists(path):
                raise DataUnavailable(f"{path} not found; {source_key}={source_dir} must be a folder holding "
                                      f"wiki.train.{ext}, wiki.valid.{ext} and wiki.test.{ext} (WikiText-2, {config})")
            texts[ours] = read_text_file(path)
        return texts, f"local:{os.path.abspath(source_dir)}"
    try:
        from datasets import load_dataset

        ds = load_dataset("wikitext", config)
    except Exception as e:  # network, hub or cache failures all mean "not reachable"
        raise DataUnavailable(
            f"could not load WikiText-2 ({config}) from Hugging Face datasets ({type(e).__name__}: {e}). "
            f"Offline, pass --source_dir=DIR or set WIKITEXT2_DIR=DIR to a directory with "
            f"wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens") from e
    return {ours: "".join(ds[theirs]["text"]) for ours, theirs in SPLITS.items()}, f"huggingface:wikitext/{config}"


def text_sha256(text):
    """Hex SHA-256 of ``text``'s UTF-8 bytes (for a local file: the file's own sha256)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _is_cut_point(text, p):
    # GPT-2's pre-tokenizer (the regex in tiktoken's "gpt2" encoding) always starts a new piece
    # at a space or newline that follows a visible ASCII character: no pattern ends in trailing
    # whitespace, and the whitespace patterns only look ahead inside the whitespace run. Cutting
    # the text there and encoding the pieces separately therefore gives the same tokens.
    return text[p] in " \n" and 33 <= ord(text[p - 1]) <= 126


def text_chunks(text, size=CHUNK_CHARS):
    """Consecutive pieces of about ``size`` characters whose concatenation is ``text``, cut only
    where the GPT-2 BPE pre-tokenizer has a piece boundary (so per-piece encoding equals the
    encoding of the whole text; tests/test_data.py checks this)."""
    start = 0
    while start < len(text):
        end = start + size
        while end < len(text) and not _is_cut_point(text, end):
            end += 1
        yield text[start:end]
        start = end


def encode(text, enc, desc="tokenizing"):
    """GPT-2 BPE ids of ``text`` (``enc.encode_ordinary``, no special tokens) as a uint16 array,
    piece by piece with a tqdm progress bar (characters done, tokens/s) on stderr."""
    from tqdm import tqdm

    ids, n_tokens, t0 = [], 0, time.perf_counter()
    with tqdm(total=len(text), desc=desc, unit="char", unit_scale=True, disable=None, leave=False) as bar:
        for piece in text_chunks(text):
            ids.append(np.array(enc.encode_ordinary(piece), dtype=np.uint16))  # GPT-2 vocab 50257 < 2**16
            n_tokens += ids[-1].size
            bar.update(len(piece))
            bar.set_postfix(tok_per_s=f"{n_tokens / max(time.perf_counter() - t0, 1e-9):,.0f}")
    return np.concatenate(ids) if ids else np.zeros(0, dtype=np.uint16)


TOKENIZER = "tiktoken:gpt2"
DTYPE_BYTES = 2  # uint16


def files_match(out_dir, manifest, splits=SPLITS):
    """True if every split's ``.bin`` in ``out_dir`` exists with the size the manifest's
    ``tokens`` counts give (2 bytes per token)."""
    tokens = (manifest or {}).get("tokens") or {}
    for split in splits:
        path = os.path.join(out_dir, f"{split}.bin")
        if split not in tokens or not os.path.exists(path) or os.path.getsize(path) != DTYPE_BYTES * tokens[split]:
            return False
    return True


def _adopt_legacy(out_dir, config, digests=None):
    """Write a manifest for a folder prepared before manifests existed (see the module docstring)
    when its meta.json verifies; return the manifest or None."""
    path = os.path.join(out_dir, "meta.json")
    if data.read_manifest(out_dir) is not None or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            meta = json.load(f)
    except ValueError:
        return None
    if not isinstance(meta, dict) or meta.get("config") != config or meta.get("tokenizer") != TOKENIZER:
        return None
    if not isinstance(meta.get("sha256"), dict) or (digests is not None and meta["sha256"] != digests):
        return None
    if not files_match(out_dir, meta):
        return None
    manifest = {"dataset": "wikitext-2", "config": config, "tokenizer": TOKENIZER, "sha256": meta["sha256"],
                "source": meta.get("source", "unknown"), "tokens": meta["tokens"], "vocab_size": meta.get("vocab_size"),
                "dtype": "uint16", "adopted_from": "meta.json"}
    data.write_manifest(out_dir, manifest)
    return manifest


def is_prepared(config="wikitext-2-v1", out_dir=None):
    """True if ``out_dir`` (default ``data_dir(config)``) holds a manifest of ``config`` and the
    three ``.bin`` files of the sizes it records (a folder from before manifests: its meta.json
    verifies, see the module docstring)."""
    out_dir = out_dir or data_dir(config)
    manifest = data.read_manifest(out_dir) or _adopt_legacy(out_dir, config)
    return bool(manifest) and manifest.get("config") == config and files_match(out_dir, manifest)


def prepare(config="wikitext-2-v1", source_dir=None, out_dir=None, verbose=True, min_tokens=2,
            source_key="--source_dir"):
    """Tokenize the three splits unless ``out_dir`` already holds them from the same text (rules
    in the module docstring); return the manifest.

    Returns:
        dict: the manifest ("dataset", "config", "tokenizer", "sha256", "source", "tokens",
        "vocab_size", "dtype").

    Args:
        source_key (str): how the caller's user names ``source_dir`` (train.py: "data_source_dir"),
            for messages.
        min_tokens (int): the fewest tokens a split may have (a language-model window of block
            size T needs T + 1); a source with a shorter split is refused.

    The source is checked (every split non-empty, at least ``min_tokens`` tokens) before anything
    is written, and the new token files are written into a temporary folder that replaces
    ``out_dir`` only when complete (``data.build_folder``): a bad source or a killed run never
    replaces good prepared data; caches inside ``out_dir`` (the MLM tokens) are kept.

    Raises:
        ValueError: unknown config.
        DataUnavailable: no local copy and Hugging Face unreachable (message says how to supply it).
        data.DataFormatError: a source file is not UTF-8 or a split is empty or shorter than
            ``min_tokens`` (names the file), or manifest.json is not JSON.
    """
    if config not in CONFIGS:
        raise ValueError(f"unknown WikiText-2 config {config!r}; allowed: {', '.join(CONFIGS)}")
    source_key = source_key if source_dir else "WIKITEXT2_DIR"
    source_dir = source_dir or os.environ.get("WIKITEXT2_DIR")
    out_dir = out_dir or data_dir(config)
    if not source_dir and is_prepared(config, out_dir):
        manifest = data.read_manifest(out_dir)
        if verbose:
            print(f"{out_dir}: already prepared from {manifest.get('source')} ({manifest['tokens']})")
        return manifest
    texts, source = _read_texts(config, source_dir, source_key)
    for split, text in texts.items():  # before anything is written: a bad source never replaces good data
        if not text.strip():
            raise data.DataFormatError(source_name(source, split, config), f"the {split} split is empty; every "
                                       f"split needs text (the prepared data in {out_dir} are left as they were)")
    digests = {s: text_sha256(t) for s, t in texts.items()}
    _adopt_legacy(out_dir, config, digests)
    stored = data.read_manifest(out_dir)
    expected = {"dataset": "wikitext-2", "config": config, "tokenizer": TOKENIZER, "sha256": digests}
    stale = stored is not None and not files_match(out_dir, stored)
    if stale and verbose:
        print(f"{out_dir}: token files differ from the manifest's counts; preparing again")

    def build(directory):
        import tiktoken

        enc = tiktoken.get_encoding("gpt2")
        ids = {}
        for split, text in texts.items():  # every split is tokenized and checked before any is written
            ids[split] = encode(text, enc, desc=f"tokenizing {split}")
            if ids[split].size < min_tokens:
                raise data.DataFormatError(source_name(source, split, config), f"the {split} split has {ids[split].size:,} "
                                           f"tokens; every split needs at least {min_tokens:,} (one window of "
                                           f"block_size + 1); the prepared data in {out_dir} are left as they were")
            if verbose:
                print(f"{split}: {len(text):,} characters -> {ids[split].size:,} tokens")
        for split, split_ids in ids.items():
            data.atomic_write(os.path.join(directory, f"{split}.bin"), split_ids.tofile)
        return {"source": source, "tokens": {s: int(a.size) for s, a in ids.items()}, "vocab_size": enc.n_vocab,
                "dtype": "uint16"}

    before = data.read_manifest(out_dir)
    manifest = data.ensure_manifest(out_dir, expected, build, what=f"WikiText-2 ({config})", stale=stale)
    if verbose and before is not None and manifest == before:
        print(f"{out_dir}: already prepared ({manifest['tokens']})")
    return manifest


def source_name(source, split, config):
    """The file a split of ``config`` was read from (``source`` "local:<dir>"), or the data set id
    and the split (another source), for messages; data/mlm.py names its sources with it too."""
    if source.startswith("local:"):
        ext = "raw" if "raw" in config else "tokens"
        return os.path.join(source[len("local:"):], f"wiki.{SPLITS[split]}.{ext}")
    return f"{source} [{split}]"


def summary(manifest):
    """The run log's summary of a WikiText-2 manifest: source, train / val / test sizes in tokens,
    tokenizer (JSON-serialisable, small)."""
    tokens = manifest.get("tokens", {})
    return {"dataset": "wikitext-2", "config": manifest.get("config"), "source": str(manifest.get("source")),
            "train_size": int(tokens.get("train", 0)), "train_size_unit": "tokens",
            "val_size": int(tokens.get("val", 0)), "test_size": int(tokens.get("test", 0)),
            "tokenizer": manifest.get("tokenizer"), "train_sha256": manifest.get("sha256", {}).get("train")}


def open_token_file(path, how_to_prepare, manifest=None, split=None):
    """Read-only uint16 memmap of the token file ``path``.

    Args:
        path: the ``.bin`` file.
        how_to_prepare: the sentence telling the user how to make it (for a missing file).
        manifest: the folder's manifest, if any: the file's size must match ``tokens[split]``.
        split: the split name in the manifest.

    Returns:
        np.memmap of shape (tokens,), dtype uint16.

    Raises:
        data.DataUnavailable: the file is missing.
        data.DataFormatError: the file is empty (a split without tokens) or has an odd size.
        data.DataMismatch: its size differs from the manifest's count.
    """
    if not os.path.exists(path):
        raise data.DataUnavailable(f"{path} not found; {how_to_prepare}")
    size = os.path.getsize(path)
    if size == 0:
        raise data.DataFormatError(path, "the split has no tokens; every split needs at least one window of "
                                   "tokens (is its source text empty?)")
    if size % DTYPE_BYTES:
        raise data.DataFormatError(path, f"{size:,} bytes is not a whole number of uint16 tokens (2 bytes each); "
                                   f"{how_to_prepare}")
    recorded = (manifest or {}).get("tokens") or {}
    if split in recorded and size != DTYPE_BYTES * recorded[split]:
        raise data.DataMismatch(f"{path} holds {size // DTYPE_BYTES:,} tokens but its manifest records "
                                f"{manifest['tokens'][split]:,}; {how_to_prepare}")
    return np.memmap(path, dtype=np.uint16, mode="r")


def open_split(split, config="wikitext-2-v1"):
    """Memory-map the prepared uint16 token file of ``split`` without preparing anything
    (read-only; safe on every DDP rank).

    Raises:
        ValueError: unknown split.
        DataUnavailable: the file is missing (run ``prepare`` first).
        data.DataFormatError / data.DataMismatch: see ``open_token_file``.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    path = os.path.join(data_dir(config), f"{split}.bin")
    how = f"prepare it with python -m data.wikitext2.prepare --config={config}"
    if not os.path.exists(path):
        raise DataUnavailable(f"{path} not found; {how}")
    return open_token_file(path, how, data.read_manifest(data_dir(config)), split)


def load_split(split, config="wikitext-2-v1", source_dir=None):
    """Memory-map the uint16 token file of ``split`` ("train", "val", "test"), preparing the
    dataset first if it is missing.

    Raises:
        ValueError: unknown split or config.
        DataUnavailable: the data is missing and cannot be prepared (message says how to supply it).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    path = os.path.join(data_dir(config), f"{split}.bin")
    if not os.path.exists(path):
        print(f"{path} missing: preparing WikiText-2 ({config})")
        try:
            prepare(config, source_dir)
        except DataUnavailable as e:
            raise DataUnavailable(f"no WikiText-2 data at {path}: {e}") from e
    return open_split(split, config)


def main(argv=None):
    parser = data.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="wikitext-2-v1", choices=CONFIGS)
    parser.add_argument("--source_dir", default=None, help="directory with wiki.{train,valid,test}.tokens")
    parser.add_argument("--out_dir", default=None)
    args = parser.parse_args(argv)
    with data.command_errors():
        prepare(args.config, args.source_dir, args.out_dir)


if __name__ == "__main__":
    main()
