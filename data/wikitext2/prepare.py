"""Tokenize WikiText-2 (Merity et al. 2016) with tiktoken's "gpt2" BPE into uint16 token files.

    python data/wikitext2/prepare.py [--config=wikitext-2-v1|wikitext-2-raw-v1] [--source_dir=DIR]

Writes ``data/wikitext2/<config>/{train,val,test}.bin`` (uint16 GPT-2 token ids) and
``meta.json`` (token counts, source, config name, sha256 of the text). Sources, in order:
``--source_dir`` (or the env var ``WIKITEXT2_DIR``) holding ``wiki.{train,valid,test}.tokens``
(``.raw`` for the raw config), else Hugging Face ``datasets`` ("wikitext", <config>).
Each split is the concatenation of the dataset's lines, i.e. the original file's text.
Rerunning with the same source is a no-op. Files are written under temporary names unique to
the process and renamed, so concurrent preparations never see half-written files.
"""
import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import data  # noqa: E402

CONFIGS = ("wikitext-2-v1", "wikitext-2-raw-v1")
SPLITS = {"train": "train", "val": "valid", "test": "test"}  # our name -> the dataset's name
CHUNK_CHARS = 1 << 20  # tokenize ~1 MB at a time (progress bar granularity)


class DataUnavailable(data.DataUnavailable):
    """WikiText-2 could be found neither locally nor through Hugging Face datasets."""


def data_dir(config="wikitext-2-v1"):
    """Directory holding the prepared ``.bin`` files of ``config``."""
    return os.path.join(HERE, config)


def _read_texts(config, source_dir):
    if source_dir:
        ext = "raw" if "raw" in config else "tokens"
        texts = {}
        for ours, theirs in SPLITS.items():
            path = os.path.join(source_dir, f"wiki.{theirs}.{ext}")
            if not os.path.exists(path):
                raise DataUnavailable(f"{path} not found (expected wiki.{{train,valid,test}}.{ext} in --source_dir)")
            with open(path, encoding="utf-8") as f:
                texts[ours] = f.read()
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


def is_prepared(config="wikitext-2-v1", out_dir=None):
    """True if the three ``.bin`` files and ``meta.json`` of ``config`` exist."""
    out_dir = out_dir or data_dir(config)
    return all(os.path.exists(os.path.join(out_dir, name)) for name in [f"{s}.bin" for s in SPLITS] + ["meta.json"])


def prepare(config="wikitext-2-v1", source_dir=None, out_dir=None, verbose=True):
    """Tokenize the three splits if not already done; return the meta dict.

    Raises:
        ValueError: unknown config.
        DataUnavailable: no local copy and Hugging Face unreachable (message says how to supply it).
    """
    if config not in CONFIGS:
        raise ValueError(f"unknown WikiText-2 config {config!r}; allowed: {', '.join(CONFIGS)}")
    source_dir = source_dir or os.environ.get("WIKITEXT2_DIR")
    out_dir = out_dir or data_dir(config)
    meta_path = os.path.join(out_dir, "meta.json")
    texts, source = _read_texts(config, source_dir)
    digests = {s: hashlib.sha256(t.encode("utf-8")).hexdigest() for s, t in texts.items()}
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        complete = all(os.path.exists(os.path.join(out_dir, f"{s}.bin")) for s in SPLITS)
        if complete and meta.get("sha256") == digests:
            if verbose:
                print(f"{out_dir}: already prepared ({meta['tokens']})")
            return meta
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    os.makedirs(out_dir, exist_ok=True)
    counts = {}
    for split, text in texts.items():
        ids = encode(text, enc, desc=f"tokenizing {split}")
        data.atomic_write(os.path.join(out_dir, f"{split}.bin"), ids.tofile)
        counts[split] = int(ids.size)
        if verbose:
            print(f"{split}: {len(text):,} characters -> {ids.size:,} tokens")
    meta = {"dataset": "wikitext-2", "config": config, "source": source, "tokenizer": "tiktoken:gpt2",
            "dtype": "uint16", "vocab_size": enc.n_vocab, "tokens": counts, "sha256": digests}
    data.write_json(meta_path, meta, indent=2)
    return meta


def open_split(split, config="wikitext-2-v1"):
    """Memory-map the prepared uint16 token file of ``split`` without preparing anything
    (read-only; safe on every DDP rank).

    Raises:
        ValueError: unknown split.
        DataUnavailable: the file is missing (run ``prepare`` first).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    path = os.path.join(data_dir(config), f"{split}.bin")
    if not os.path.exists(path):
        raise DataUnavailable(f"{path} not found; prepare it with python data/wikitext2/prepare.py --config={config}")
    return np.memmap(path, dtype=np.uint16, mode="r")


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
    return np.memmap(path, dtype=np.uint16, mode="r")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="wikitext-2-v1", choices=CONFIGS)
    parser.add_argument("--source_dir", default=None, help="directory with wiki.{train,valid,test}.tokens")
    parser.add_argument("--out_dir", default=None)
    args = parser.parse_args(argv)
    try:
        prepare(args.config, args.source_dir, args.out_dir)
    except DataUnavailable as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
