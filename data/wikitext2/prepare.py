"""Tokenize WikiText-2 (Merity et al. 2016) with tiktoken's "gpt2" BPE into uint16 token files.

    python data/wikitext2/prepare.py [--config=wikitext-2-v1|wikitext-2-raw-v1] [--source_dir=DIR]

Writes ``data/wikitext2/<config>/{train,val,test}.bin`` (uint16 GPT-2 token ids) and
``meta.json`` (token counts, source, config name, sha256 of the text). Sources, in order:
``--source_dir`` (or the env var ``WIKITEXT2_DIR``) holding ``wiki.{train,valid,test}.tokens``
(``.raw`` for the raw config), else Hugging Face ``datasets`` ("wikitext", <config>).
Each split is the concatenation of the dataset's lines, i.e. the original file's text.
Rerunning with the same source is a no-op.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = ("wikitext-2-v1", "wikitext-2-raw-v1")
SPLITS = {"train": "train", "val": "valid", "test": "test"}  # our name -> the dataset's name


class DataUnavailable(RuntimeError):
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
        ids = np.array(enc.encode_ordinary(text), dtype=np.uint16)  # GPT-2 vocab 50257 < 2**16
        tmp = os.path.join(out_dir, f"{split}.bin.tmp")
        ids.tofile(tmp)
        os.replace(tmp, os.path.join(out_dir, f"{split}.bin"))
        counts[split] = int(ids.size)
        if verbose:
            print(f"{split}: {len(text):,} characters -> {ids.size:,} tokens")
    meta = {"dataset": "wikitext-2", "config": config, "source": source, "tokenizer": "tiktoken:gpt2",
            "dtype": "uint16", "vocab_size": enc.n_vocab, "tokens": counts, "sha256": digests}
    tmp = meta_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(meta, f, indent=2)
    os.replace(tmp, meta_path)
    return meta


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
