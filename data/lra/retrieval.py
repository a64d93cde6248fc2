"""LRA "Retrieval": AAN citation-link matching of two documents (Tay et al., 2021, section 3.3;
Radev et al., 2013), byte level, 4000 bytes per document, 2 classes, two-tower.

Release files (google-research/long-range-arena ``lra_benchmarks/matching/input_pipeline.py``
reads them): ``lra_dir/tsv_data/new_aan_pairs.{train,eval,test}.tsv``, one pair per line,
tab-separated, no header, no quoting, 5 columns: label, id1, id2, text1, text2. Split "val" reads
the ``eval`` file. These files exist only in the LRA release (``lra_release.gz``,
https://storage.googleapis.com/long-range-arena/lra_release.gz, folder ``lra_release/tsv_data/``);
nothing here builds them, so ``ensure`` only checks that they exist.

What is accepted is what LRA's reader accepts (``tf.data.experimental.make_csv_dataset`` with
``field_delim='\\t'``, ``use_quote_delim=False`` and the column types float32, string x 4, each
required), with the labels restricted to the two classes:

- a line (``\\n`` or ``\\r\\n`` ended; blank lines skipped) has exactly 5 tab-separated fields;
- the label is a number (``float``: "1", "1.0", " 0.0 ", "1e0") equal to 0 or 1 (LRA casts any
  float to an int32 class; other values would be no class of the 2-way classifier here);
- id1, id2, text1 and text2 are bytes, any bytes but tab and newline, not necessarily UTF-8, and
  not empty: LRA's reader stops at an empty required field ("Field 3 is required but missing in
  record"), so the release has none;
- both classes occur in a split.

Tokens: the bytes of each text, id = byte + 1 (0 = PAD), truncated to ``max_len``, as LRA's
byte-level encoder (``tfds`` ``ByteTextEncoder``, which LRA applies to the raw bytes).

Memory: ``load`` counts the lines first and then fills preallocated uint16 (N, max_len) arrays, so
its peak is the returned arrays (the release's ~147k training pairs at 4000 bytes: 2 x 1.2 GB)
plus one line.

Manifest (``data/lra/__init__.py``): the release files are found in place; ``ensure`` writes
``tsv_data/manifest.json`` with source "release (found in place)" and the files' byte sizes
(``sizes``; hashing some GB on every start would cost more than it tells), and writes it again
when the sizes change.
"""
import os

import numpy as np

import data
from data.lra import FOUND_IN_PLACE, token_dtype, write_in_place_manifest

NUM_CLASSES = 2
VOCAB_SIZE = 257  # byte b -> id b + 1; 0 = PAD
MAX_LEN = 4000  # per document
TWO_TOWER = True
FOLDER = "tsv_data"
FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}
SPLITS = ("train", "val", "test")
FIELDS = ("label", "id1", "id2", "text1", "text2")
RELEASE_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"


def path(lra_dir, split):
    """``lra_dir/tsv_data/new_aan_pairs.{train,eval,test}.tsv`` of ``split``."""
    return os.path.join(lra_dir, FOLDER, FILES[split])


def ensure(lra_dir):
    """Check that the three release files exist (they cannot be built here) and record them in
    ``tsv_data/manifest.json``.

    Returns:
        dict: the manifest (source "release (found in place)", ``sizes`` = bytes per file).

    Raises:
        FileNotFoundError: names the missing files and where to get them.
    """
    missing = [path(lra_dir, s) for s in SPLITS if not os.path.exists(path(lra_dir, s))]
    if missing:
        raise FileNotFoundError(f"AAN retrieval files missing: {', '.join(missing)}. They come only from the LRA "
                                f"release ({RELEASE_URL}, folder lra_release/tsv_data/); put tsv_data/ under "
                                f"{lra_dir} (or set LRA_DIR)")
    directory = os.path.join(lra_dir, FOLDER)
    current = {"dataset": "LRA Retrieval (AAN)", "source": FOUND_IN_PLACE, "sizes_unit": "bytes",
               "sizes": {s: os.path.getsize(path(lra_dir, s)) for s in SPLITS}}
    stored = data.read_manifest(directory)
    if stored is not None and not data.manifest_differences(stored, current):
        return stored
    return write_in_place_manifest(directory, current, "LRA Retrieval")


def manifest(lra_dir):
    """The manifest of ``lra_dir/tsv_data/`` (None if there is none)."""
    return data.read_manifest(os.path.join(lra_dir, FOLDER))


def _records(f):
    """(line number, line without its end) of the non-blank lines of a binary file."""
    for line_no, raw in enumerate(f, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        line = line[:-1] if line.endswith(b"\r") else line
        if line:
            yield line_no, line


def _label(file, line_no, field):
    try:
        value = float(field)
    except ValueError:
        raise data.DataFormatError(file, "the label (1st field) must be a number, 0 or 1 (e.g. 0.0, 1.0)",
                                   line=line_no, content=field) from None
    if value not in (0.0, 1.0):
        raise data.DataFormatError(file, "the label (1st field) must be 0 or 1", line=line_no, content=field)
    return int(value)


def load(lra_dir, split, max_len=MAX_LEN):
    """One split of pairs.

    Args:
        split: "train", "val" (the ``eval`` file) or "test".
        max_len (int): each document truncated to / right-padded (PAD 0) to this many bytes.

    Returns:
        dict ``tokens``, ``tokens2`` uint16 (N, max_len) (byte + 1) of text1 and text2,
        ``lengths``, ``lengths2`` int64 (N,), ``labels`` int64 (N,) in {0, 1}.

    Raises:
        ValueError: bad split.
        FileNotFoundError: the file is missing.
        data.DataFormatError: a line without exactly 5 tab-separated fields, a label other than
            0 / 1, an empty field, or a class without pairs (file and line in the message).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; available: {', '.join(SPLITS)}")
    file = path(lra_dir, split)
    if not os.path.exists(file):
        ensure(lra_dir)
    with open(file, "rb") as f:
        n = sum(1 for _ in _records(f))
    dtype = token_dtype(VOCAB_SIZE)
    out = {"tokens": np.zeros((n, max_len), dtype=dtype), "tokens2": np.zeros((n, max_len), dtype=dtype),
           "lengths": np.zeros(n, dtype=np.int64), "lengths2": np.zeros(n, dtype=np.int64),
           "labels": np.zeros(n, dtype=np.int64)}
    i = 0
    with open(file, "rb") as f:
        for line_no, line in _records(f):
            if i == n:  # the file grew while it was read
                raise data.DataFormatError(file, f"changed while it was read (more than the {n} lines counted)")
            fields = line.split(b"\t")
            if len(fields) != len(FIELDS):
                raise data.DataFormatError(file, f"expected 5 tab-separated fields ({', '.join(FIELDS)}), got "
                                           f"{len(fields)}", line=line_no, content=line)
            empty = [name for name, value in zip(FIELDS, fields) if not value]
            if empty:
                raise data.DataFormatError(file, f"empty {', '.join(empty)}: every field must be non-empty (LRA's "
                                           f"reader requires all 5)", line=line_no, content=line)
            out["labels"][i] = _label(file, line_no, fields[0])
            for key, text in (("", fields[3]), ("2", fields[4])):
                ids = np.frombuffer(text[:max_len], dtype=np.uint8)
                row = out["tokens" + key][i, :len(ids)]
                row[:] = ids
                row += 1
                out["lengths" + key][i] = len(ids)
            i += 1
    if i != n:
        raise data.DataFormatError(file, f"changed while it was read ({i} lines, {n} counted before)")
    counts = np.bincount(out["labels"], minlength=NUM_CLASSES)
    if (counts == 0).any():
        raise data.DataFormatError(file, f"{counts[0]} pairs of class 0 and {counts[1]} of class 1; both classes "
                                   f"are needed")
    return out
