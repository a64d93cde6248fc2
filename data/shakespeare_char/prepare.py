"""Tiny Shakespeare (Karpathy's char-rnn corpus, 1,115,394 characters) as character-level tokens.

    python -m data.shakespeare_char.prepare [--source_file=PATH] [--out_dir=DIR]

The FAST paper (Gerami et al. 2024, section 3.1, Figure 4) trains small character-level
transformers on Tiny Shakespeare to compare Fastmax and softmax attention maps; this module gives
``tasks/lm.py`` that data set (``dataset = "shakespeare_char"``).

Tokens: the vocabulary is the sorted set of the distinct characters of the whole text (65 for the
real file: newline, space, ``!$&',-.3:;?``, A-Z, a-z); a character's token id is its index in that
list.

Splits, by position in the text (no shuffling): the first 90% of the characters are "train", the
next 5% "val", the last 5% "test" (n = number of characters; train = [0, a), val = [a, b),
test = [b, n) with a = floor(0.90 n), b = a + floor(0.05 n)). nanoGPT's shakespeare_char uses
90/10 train/val; our train split is the same 1,003,854 characters, its val split is cut in two
so that a held-out test split exists.

Written to ``data/shakespeare_char/prepared/`` (``DEFAULT_OUT_DIR``): ``{train,val,test}.bin``
(uint16 token ids), ``meta.json`` (vocabulary, vocab_size, characters and tokens per split,
the character ranges of the splits, the source and the sha256 of its bytes) and, last,
``manifest.json`` (``data.write_manifest``). Every file is written through ``data.atomic_write``
(temporary name, then rename).

Manifest: the fields compared before reuse are ``dataset`` ("shakespeare_char"), ``sha256`` (hex
SHA-256 of the source's bytes), ``tokenizer`` ("characters (sorted distinct characters)") and
``split_percent``; recorded besides: ``source``, ``source_lookup``, ``characters``, ``tokens``
(split -> count), ``vocab_size``, ``dtype``. Preparing again from a source with the same sha256
is a no-op; another sha256 prepares again. When no source can be found locally, a prepared folder
whose token files have the sizes its manifest records is used as it is (no download). A folder
prepared before manifests existed (``meta.json`` only) is adopted when its meta.json records the
source's sha256 (or, with no source at hand, any sha256) and its token files have the recorded
sizes; otherwise it is prepared again.

Source lookup, first match wins (nothing else is read: no path beside the repository):
1. ``source_file`` (``--source_file``; the lm task's ``data_source_file`` key);
2. the environment variable ``TINYSHAKESPEARE_FILE``;
3. a copy downloaded earlier into the output directory (``input.txt``);
4. a download from ``URL`` (saved as that copy).
A path given in 1 or 2 that does not exist is an error (``DataUnavailable`` naming the path and
the variable); it never falls through to a download. Offline with none of them:
``DataUnavailable`` saying how to supply the file.

Errors: a source that is not UTF-8 raises ``data.DataFormatError`` naming the file and the line;
an empty source, or one with more than 65,536 distinct characters, ``data.DataFormatError``.
"""
import argparse
import hashlib
import json
import os
import pathlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
import data

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
KNOWN_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"  # the char-rnn file
ENV_VAR = "TINYSHAKESPEARE_FILE"
DEFAULT_OUT_DIR = os.path.join(HERE, "prepared")
DOWNLOAD_NAME = "input.txt"
SPLITS = ("train", "val", "test")
SPLIT_PERCENT = {"train": 90, "val": 5, "test": 5}


class DataUnavailable(data.DataUnavailable):
    """Tiny Shakespeare could be found neither locally nor online."""


def data_dir():
    """Directory of the prepared files (``DEFAULT_OUT_DIR``, read at call time so tests can move it)."""
    return DEFAULT_OUT_DIR


def find_source(source_file=None, out_dir=None):
    """The local text file to read, following the lookup order of the module docstring.

    Returns:
        (path, how): path of an existing file and "argument", "env" or "downloaded";
        (None, "download") when nothing local exists and the text must be downloaded.

    Raises:
        DataUnavailable: ``source_file`` or ``$TINYSHAKESPEARE_FILE`` names a missing file.
    """
    for path, how in ((source_file, "argument"), (os.environ.get(ENV_VAR), "env")):
        if path:
            if not os.path.isfile(path):
                given = "--source_file / data_source_file" if how == "argument" else f"the environment variable {ENV_VAR}"
                raise DataUnavailable(f"Tiny Shakespeare source {path} not found (given by {given}); point "
                                      f"{ENV_VAR} or data_source_file at char-rnn's tinyshakespeare/input.txt")
            return path, how
    cached = os.path.join(out_dir or data_dir(), DOWNLOAD_NAME)
    if os.path.isfile(cached):
        return cached, "downloaded"
    return None, "download"


def download(path, url=URL, timeout=60):
    """Download the text from ``url`` to ``path`` (atomically); return its bytes.

    Raises:
        DataUnavailable: the download failed (offline); the message says how to supply the file.
    """
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            raw = response.read()
    except Exception as e:  # URLError, timeouts, HTTP errors: all mean "not reachable"
        raise DataUnavailable(
            f"could not download Tiny Shakespeare from {url} ({type(e).__name__}: {e}). Offline, set "
            f"{ENV_VAR}=/path/to/input.txt (char-rnn's data/tinyshakespeare/input.txt), pass "
            f"--source_file=PATH (the lm task's data_source_file)") from e
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(raw)

    data.atomic_write(path, write)
    return raw


def split_ranges(n):
    """Character ranges {split: (start, end)} of a text of ``n`` characters (90/5/5, in order)."""
    a = n * SPLIT_PERCENT["train"] // 100
    b = a + n * SPLIT_PERCENT["val"] // 100
    return {"train": (0, a), "val": (a, b), "test": (b, n)}


def build_vocab(text):
    """Sorted list of the distinct characters of ``text``.

    Raises:
        ValueError: empty text, or more than 65,536 distinct characters (ids must fit uint16).
    """
    vocab = sorted(set(text))
    if not vocab:
        raise ValueError("the Tiny Shakespeare source is empty")
    if len(vocab) > 1 << 16:
        raise ValueError(f"{len(vocab):,} distinct characters do not fit uint16 token ids (at most 65,536)")
    return vocab


def encode(text, vocab):
    """Token ids of ``text``: index of each character in ``vocab`` (a sorted list of characters).

    Returns:
        np.ndarray of shape (len(text),), dtype uint16.

    Raises:
        ValueError: ``text`` holds a character that is not in ``vocab`` (the first one is named).
    """
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    table = np.array([ord(c) for c in vocab], dtype=np.uint32)
    ids = np.searchsorted(table, codes)
    bad = (ids >= len(table)) | (table[np.minimum(ids, len(table) - 1)] != codes)
    if bad.any():
        first = chr(int(codes[np.argmax(bad)]))
        raise ValueError(f"character {first!r} is not in the vocabulary of {len(vocab)} characters")
    return ids.astype(np.uint16)


def decode(ids, vocab):
    """The text of token ids ``ids`` (any integer sequence) under ``vocab``."""
    return "".join(vocab[int(i)] for i in ids)


TOKENIZER = "characters (sorted distinct characters)"


def _files_match(out_dir, counts):
    return all(os.path.isfile(os.path.join(out_dir, f"{s}.bin"))
               and os.path.getsize(os.path.join(out_dir, f"{s}.bin")) == 2 * counts.get(s, -1) for s in SPLITS)


def is_prepared(out_dir=None):
    """True if the three ``.bin`` files and ``meta.json`` exist in ``out_dir`` (default ``data_dir()``)."""
    out_dir = out_dir or data_dir()
    return all(os.path.exists(os.path.join(out_dir, name)) for name in [f"{s}.bin" for s in SPLITS] + ["meta.json"])


def load_meta(out_dir=None):
    """The prepared ``meta.json`` as a dict.

    Raises:
        DataUnavailable: not prepared (the message says how to prepare it).
        data.DataFormatError: meta.json is not JSON.
    """
    path = os.path.join(out_dir or data_dir(), "meta.json")
    if not os.path.exists(path):
        raise DataUnavailable(f"{path} not found; prepare it with python -m data.shakespeare_char.prepare")
    with open(path) as f:
        try:
            return json.load(f)
        except ValueError as e:
            raise data.DataFormatError(path, f"not valid JSON ({e.msg}); prepare the data again",
                                       line=getattr(e, "lineno", None)) from None


def _manifest_of_meta(meta):
    """The manifest fields of a meta dict (identity first, then what is recorded besides)."""
    return {"dataset": "shakespeare_char", "sha256": meta["sha256"], "tokenizer": TOKENIZER,
            "split_percent": meta.get("split_percent", dict(SPLIT_PERCENT)), "source": meta.get("source"),
            "source_lookup": meta.get("source_lookup"), "characters": meta.get("characters"),
            "tokens": meta["tokens"], "vocab_size": meta["vocab_size"], "dtype": "uint16"}


def read_manifest(out_dir=None):
    """The manifest of the prepared folder; a folder from before manifests whose meta.json and
    token files agree is adopted (a manifest is written from its meta.json). None if neither.

    Raises:
        data.DataFormatError: manifest.json or meta.json is not JSON.
    """
    out_dir = out_dir or data_dir()
    path = os.path.join(out_dir, data.MANIFEST)
    try:
        manifest = data.read_manifest(out_dir)
    except ValueError as e:
        raise data.DataFormatError(path, f"not valid JSON ({e.msg}); delete it to prepare the data again",
                                   line=getattr(e, "lineno", None)) from None
    if manifest is not None or not is_prepared(out_dir):
        return manifest
    meta = load_meta(out_dir)
    if not isinstance(meta, dict) or not {"sha256", "tokens", "vocab_size"} <= set(meta) \
            or not _files_match(out_dir, meta["tokens"]):
        return None
    manifest = {**_manifest_of_meta(meta), "adopted_from": "meta.json"}
    data.write_manifest(out_dir, manifest)
    return manifest


def summary(out_dir=None):
    """The run log's summary of the prepared data: source, sizes in characters (= tokens),
    tokenizer, vocab_size, sha256 (small, JSON-serialisable).

    Raises:
        DataUnavailable: not prepared.
    """
    manifest = read_manifest(out_dir)
    if manifest is None:
        raise DataUnavailable(f"{os.path.join(out_dir or data_dir(), data.MANIFEST)} not found; prepare it with "
                              f"python -m data.shakespeare_char.prepare")
    tokens = manifest["tokens"]
    return {"dataset": "shakespeare_char", "source": str(manifest.get("source")), "train_size": int(tokens["train"]),
            "train_size_unit": "tokens", "val_size": int(tokens["val"]), "test_size": int(tokens["test"]),
            "tokenizer": TOKENIZER, "vocab_size": int(manifest["vocab_size"]), "sha256": manifest["sha256"]}


def prepare(source_file=None, out_dir=None, verbose=True):
    """Write the token files, meta.json and manifest.json unless they already hold this source
    (reuse rules in the module docstring); return the meta.

    Args:
        source_file: path of the text (None = ``$TINYSHAKESPEARE_FILE``, then the lookup of the
            module docstring).
        out_dir: output directory (None = ``data_dir()``).
        verbose: print what is done.

    Returns:
        dict: the meta (keys "dataset", "source", "sha256", "vocab", "vocab_size", "characters",
        "tokens", "split_ranges", "dtype", ...).

    Raises:
        DataUnavailable: a named source file is missing, or nothing local exists and the download
            fails.
        data.DataFormatError: the text is not UTF-8, is empty or has too many distinct characters.
    """
    out_dir = out_dir or data_dir()
    path, how = find_source(source_file, out_dir)
    if path is None:
        stored = read_manifest(out_dir)
        if stored is not None and _files_match(out_dir, stored["tokens"]):
            # prepared earlier from a source that is gone (e.g. a copied directory): use it as it is
            if verbose:
                print(f"{out_dir}: prepared from {stored.get('source')}, source not available to re-check; using it")
            return load_meta(out_dir)
        path = os.path.join(out_dir, DOWNLOAD_NAME)
        if verbose:
            print(f"downloading Tiny Shakespeare from {URL}")
        raw, how = download(path), "downloaded"
    else:
        with open(path, "rb") as f:
            raw = f.read()
    digest = hashlib.sha256(raw).hexdigest()
    stored = read_manifest(out_dir)
    stale = stored is not None and not _files_match(out_dir, stored["tokens"])  # token files changed since
    source = URL if how == "downloaded" and path == os.path.join(out_dir, DOWNLOAD_NAME) else os.path.abspath(path)
    built = {}

    def build(directory):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise data.DataFormatError(path, "not UTF-8 text; Tiny Shakespeare must be a UTF-8 text file",
                                       line=raw.count(b"\n", 0, e.start) + 1,
                                       content=raw[e.start:e.start + 16]) from None
        try:
            vocab = build_vocab(text)
        except ValueError as e:
            raise data.DataFormatError(path, f"{e}; a non-empty text file is needed") from None
        if path == os.path.join(out_dir, DOWNLOAD_NAME):  # the downloaded text stays beside its tokens
            data.atomic_write(os.path.join(directory, DOWNLOAD_NAME), lambda tmp: pathlib.Path(tmp).write_bytes(raw))
        ids = encode(text, vocab)
        ranges = split_ranges(len(text))
        counts = {}
        for split in SPLITS:
            start, end = ranges[split]
            part = np.ascontiguousarray(ids[start:end])
            data.atomic_write(os.path.join(directory, f"{split}.bin"), part.tofile)
            counts[split] = int(part.size)
            if verbose:
                print(f"{split}: {part.size:,} characters")
        meta = {"dataset": "shakespeare_char", "source": source, "source_lookup": how, "sha256": digest,
                "is_char_rnn_file": digest == KNOWN_SHA256, "tokenizer": TOKENIZER,
                "dtype": "uint16", "vocab": vocab, "vocab_size": len(vocab), "characters": len(text),
                "tokens": counts, "split_percent": dict(SPLIT_PERCENT),
                "split_ranges": {s: list(r) for s, r in ranges.items()}}
        data.write_json(os.path.join(directory, "meta.json"), meta, indent=2)
        built["meta"] = meta
        if verbose:
            print(f"vocabulary: {len(vocab)} characters; written to {out_dir}")
        manifest = _manifest_of_meta(meta)
        return {k: manifest[k] for k in ("source", "source_lookup", "characters", "tokens", "vocab_size", "dtype")}

    expected = {"dataset": "shakespeare_char", "sha256": digest, "tokenizer": TOKENIZER,
                "split_percent": dict(SPLIT_PERCENT)}
    data.ensure_manifest(out_dir, expected, build, what="Tiny Shakespeare", stale=stale)
    if "meta" in built:
        return built["meta"]
    if verbose:
        print(f"{out_dir}: already prepared")
    return load_meta(out_dir)


def open_split(split, out_dir=None):
    """Memory-map the prepared uint16 token file of ``split`` ("train", "val", "test") read-only,
    without preparing anything (safe on every DDP rank).

    Returns:
        np.memmap of shape (tokens,), dtype uint16.

    Raises:
        ValueError: unknown split.
        DataUnavailable: the file is missing (run ``prepare`` first).
        data.DataFormatError: the file is empty (the text was too short for this split).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    path = os.path.join(out_dir or data_dir(), f"{split}.bin")
    if not os.path.exists(path):
        raise DataUnavailable(f"{path} not found; prepare it with python -m data.shakespeare_char.prepare")
    if os.path.getsize(path) == 0:
        raise data.DataFormatError(path, f"the {split} split has no characters; the source text must be long enough "
                                   f"for each of the 90/5/5 splits to hold a window")
    return np.memmap(path, dtype=np.uint16, mode="r")


def main(argv=None):
    parser = data.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source_file", default=None, help=f"the text file (default: ${ENV_VAR}, then the lookup above)")
    parser.add_argument("--out_dir", default=None, help=f"output directory (default {DEFAULT_OUT_DIR})")
    args = parser.parse_args(argv)
    with data.command_errors():
        prepare(args.source_file, args.out_dir)


if __name__ == "__main__":
    main()
