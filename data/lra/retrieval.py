"""LRA "Retrieval": AAN citation-link matching of two documents (Tay et al., 2021, section 3.3;
Radev et al., 2013), byte level, 4000 bytes per document, 2 classes, two-tower.

Release files (``../shared/data/lra-spec/SPEC.md``, "Retrieval"; upstream
``matching/input_pipeline.py``): ``lra_dir/tsv_data/new_aan_pairs.{train,eval,test}.tsv``, one
pair per line, tab-separated, no header, no quoting, 5 columns: label (a float, 0.0 / 1.0), id1,
id2, text1, text2. Split "val" reads the ``eval`` file. These files exist only in the LRA release
(``lra_release.gz``, https://storage.googleapis.com/long-range-arena/lra_release.gz, folder
``lra_release/tsv_data/``); nothing here builds them, so ``ensure`` only checks that they exist.

Tokens: the UTF-8 bytes of each text, id = byte + 1 (0 = PAD), truncated to ``max_len``, as LRA's
byte-level encoder. Checks (``load``): exactly 5 fields per line, a label that parses as 0 or 1,
UTF-8, non-empty texts, both classes present; errors name the file and line.

Memory: ``load`` returns int64 (N, max_len) arrays for both documents (the interface of
``data/lra/__init__.py``): the release's ~147k training pairs at 4000 bytes take about 9.4 GB
while loading; ``tasks/classify.py`` then keeps them as uint16.
"""
import os

import numpy as np

NUM_CLASSES = 2
VOCAB_SIZE = 257  # byte b -> id b + 1; 0 = PAD
MAX_LEN = 4000  # per document
TWO_TOWER = True
FOLDER = "tsv_data"
FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}
SPLITS = ("train", "val", "test")
RELEASE_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"


def path(lra_dir, split):
    """``lra_dir/tsv_data/new_aan_pairs.{train,eval,test}.tsv`` of ``split``."""
    return os.path.join(lra_dir, FOLDER, FILES[split])


def ensure(lra_dir):
    """Check that the three release files exist (they cannot be built here).

    Raises:
        FileNotFoundError: names the missing files and where to get them.
    """
    missing = [path(lra_dir, s) for s in SPLITS if not os.path.exists(path(lra_dir, s))]
    if missing:
        raise FileNotFoundError(f"AAN retrieval files missing: {', '.join(missing)}. They come only from the LRA "
                                f"release ({RELEASE_URL}, folder lra_release/tsv_data/); put tsv_data/ under "
                                f"{lra_dir} (or set LRA_DIR)")


def _encode(text, max_len):
    b = text.encode("utf-8")[:max_len]
    return np.frombuffer(b, dtype=np.uint8).astype(np.int64) + 1


def load(lra_dir, split, max_len=MAX_LEN):
    """One split of pairs.

    Args:
        split: "train", "val" (the ``eval`` file) or "test".
        max_len (int): each document truncated to / right-padded (PAD 0) to this many bytes.

    Returns:
        dict ``tokens``, ``tokens2`` int64 (N, max_len) (byte + 1) of text1 and text2,
        ``lengths``, ``lengths2`` int64 (N,), ``labels`` int64 (N,) in {0, 1}.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: bad split, a line without exactly 5 tab-separated fields, a label other
            than 0 / 1, an empty text, or a class without pairs (file and line in the message).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; available: {', '.join(SPLITS)}")
    file = path(lra_dir, split)
    if not os.path.exists(file):
        ensure(lra_dir)
    docs1, docs2, labels = [], [], []
    with open(file, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise ValueError(f"{file}, line {line_no}: not UTF-8 ({e.reason} at byte {e.start})") from None
            if not line:
                continue
            fields = line.split("\t")
            if len(fields) != 5:
                raise ValueError(f"{file}, line {line_no}: expected 5 tab-separated fields (label, id1, id2, text1, "
                                 f"text2), got {len(fields)}")
            try:
                value = float(fields[0])
            except ValueError:
                raise ValueError(f"{file}, line {line_no}: label {fields[0]!r} is not a number") from None
            if value not in (0.0, 1.0):
                raise ValueError(f"{file}, line {line_no}: label {fields[0]!r} is not 0 or 1")
            if not fields[3] or not fields[4]:
                raise ValueError(f"{file}, line {line_no}: empty text")
            labels.append(int(value))
            docs1.append(_encode(fields[3], max_len))
            docs2.append(_encode(fields[4], max_len))
    counts = np.bincount(np.array(labels, dtype=np.int64), minlength=NUM_CLASSES)
    if (counts == 0).any():
        raise ValueError(f"{file}: {counts[0]} pairs of class 0 and {counts[1]} of class 1; both classes are needed")
    out = {"labels": np.array(labels, dtype=np.int64)}
    for key, docs in (("", docs1), ("2", docs2)):
        tokens = np.zeros((len(docs), max_len), dtype=np.int64)
        for i, d in enumerate(docs):
            tokens[i, :len(d)] = d
        out["tokens" + key] = tokens
        out["lengths" + key] = np.array([len(d) for d in docs], dtype=np.int64)
    return out
