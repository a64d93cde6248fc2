"""LRA "Text": byte-level IMDB sentiment classification (Tay et al., 2021, section 3.2; Maas et
al., 2011), length 1000 (LRA) or 4000 (DenseAttention) through ``max_len``.

LRA (google-research/long-range-arena ``lra_benchmarks/text_classification/input_pipeline.py``)
reads ``imdb_reviews`` through TFDS (25,000 train / 25,000 test reviews, labels neg 0 / pos 1)
and encodes each review's UTF-8 bytes with ids byte + 1 (0 = PAD), truncated to ``max_length``;
there is no release folder for this task. Here:

- Source, first found of: the ``imdb_source`` option; env ``IMDB_DIR``; else the cache already in
  ``lra_dir/imdb/`` (whatever it was made from); else Hugging Face ``datasets`` "imdb" (online).
  A source is the aclImdb tarball (``*.tar.gz``, e.g. ``aclImdb_v1.tar.gz`` from
  https://ai.stanford.edu/~amaas/data/sentiment/) or an extracted directory with
  ``train/{pos,neg}/<id>_<rating>.txt`` and ``test/{pos,neg}/...`` (``aclImdb/`` itself, a folder
  holding it, or ``subset_aclImdb/``); a folder holding both a tarball and an extracted copy is
  read from the tarball (the complete set).
- ``ensure`` converts the source once into ``lra_dir/imdb/{train,test}.npz`` (atomic writes):
  ``data`` uint8 (all reviews' bytes concatenated), ``offsets`` int64 (N + 1), ``labels`` int64
  (N,), ``ids`` and ``ratings`` int64 (N,) (from the file names; -1 from ``datasets``), ``source``
  (str). Order: neg then pos, ids ascending. Reading the 50k-review tarball takes about 15 s.
- Validation split (option ``val`` of ``load``): "holdout" (default) = a fixed, class-balanced
  10% of the training reviews (per class, the first 10% of ``default_rng(0).permutation``), train =
  the other 90%; "test" = LRA's choice, val = the test set (train = all 25,000). The default keeps
  model selection off the test set; pass ``lra_options={"val": "test"}`` to reproduce LRA exactly.

Manifest (``data/lra/__init__.py``): ``imdb/manifest.json`` records ``source`` ("aclImdb
tarball", "aclImdb directory" or "Hugging Face datasets 'imdb'"), ``source_sha256`` (of the
tarball, or of the review files' names and contents), ``converter`` "data.lra.text" and
``converter_version``; ``sizes`` {"train", "test"} (reviews) and ``source_path`` are recorded, not
compared. A given source whose digest differs from the manifest's is converted again; a cache
without a manifest is converted again when a source is given, else used as found in place.

Checks: file names ``<id>_<rating>.txt`` with rating 7-10 under pos/ and 1-4 under neg/, no
duplicate ids, no empty review, both classes present in each split (counts printed); the cache
files' keys and offsets. Errors (``data.DataFormatError``) name the offending file.
"""
import os
import re
import tarfile

import numpy as np

import data
from data.lra import FOUND_IN_PLACE, ensure_cache, source_digest, token_dtype

NUM_CLASSES = 2
VOCAB_SIZE = 257  # byte b -> id b + 1; 0 = PAD
MAX_LEN = 1000  # LRA; DenseAttention uses 4000
TWO_TOWER = False
FOLDER = "imdb"
ENV = "IMDB_DIR"
SOURCE_SPLITS = ("train", "test")
SPLITS = ("train", "val", "test")
VAL_MODES = ("holdout", "test")
VAL_FRACTION = 0.1
VAL_SEED = 0
LABELS = {"neg": 0, "pos": 1}
RATINGS = {"neg": range(1, 5), "pos": range(7, 11)}
MEMBER = re.compile(r"(?:^|/)(train|test)/(pos|neg)/([^/]+)$")
NAME = re.compile(r"(\d+)_(\d+)\.txt")
CONVERTER_VERSION = 1  # raise when a change of the conversion changes the cache
SOURCE_KINDS = {"tar": "aclImdb tarball", "dir": "aclImdb directory", "hf": "Hugging Face datasets 'imdb'"}


def cache_path(lra_dir, split):
    """``lra_dir/imdb/{split}.npz`` for split "train" or "test"."""
    return os.path.join(lra_dir, FOLDER, f"{split}.npz")


def _extracted_root(path):
    """The aclImdb-style root under ``path`` (path itself, path/aclImdb, path/subset_aclImdb), or None."""
    for root in (path, os.path.join(path, "aclImdb"), os.path.join(path, "subset_aclImdb")):
        if os.path.isdir(os.path.join(root, "train", "pos")):
            return root
    return None


def find_source(imdb_source=""):
    """The IMDB source to convert.

    Returns:
        ("tar", path) or ("dir", root) for the first given location (``imdb_source``,
        ``$IMDB_DIR``), or None when neither is given. A directory with a ``*.tar.gz`` gives the
        tarball (the complete set), otherwise its extracted copy.

    Raises:
        FileNotFoundError: ``imdb_source`` or ``$IMDB_DIR`` is set but holds no IMDB data.
    """
    for path in [p for p in (imdb_source, os.environ.get(ENV, "")) if p]:
        if os.path.isfile(path) and path.endswith((".tar.gz", ".tgz")):
            return ("tar", path)
        if os.path.isdir(path):
            tars = sorted(f for f in os.listdir(path) if f.endswith((".tar.gz", ".tgz")) and "imdb" in f.lower())
            if tars:
                return ("tar", os.path.join(path, tars[0]))
            root = _extracted_root(path)
            if root:
                return ("dir", root)
        raise FileNotFoundError(f"{path} holds no IMDB data: expected an aclImdb *.tar.gz or a directory "
                                f"with train/pos, train/neg, test/pos, test/neg (aclImdb layout)")
    return None


def _parse_name(where, sentiment, name):
    m = NAME.fullmatch(name)
    if not m:
        raise data.DataFormatError(where, f"file name {data.quote(name)} is not <id>_<rating>.txt (aclImdb layout)")
    review_id, rating = int(m.group(1)), int(m.group(2))
    if rating not in RATINGS[sentiment]:
        raise data.DataFormatError(where, f"rating {rating} of a {sentiment} review outside "
                                   f"{RATINGS[sentiment].start}-{RATINGS[sentiment].stop - 1}")
    return review_id, rating


def _read_source(kind, path):
    """{split: list of (label, id, rating, bytes)} of an aclImdb tarball or directory."""
    out = {s: [] for s in SOURCE_SPLITS}
    if kind == "tar":
        try:
            with tarfile.open(path, "r:*") as tar:
                for member in tar:
                    m = MEMBER.search(member.name)
                    if not member.isfile() or not m:
                        continue
                    split, sentiment, name = m.groups()
                    where = f"{path}: {member.name}"
                    review_id, rating = _parse_name(where, sentiment, name)
                    text = tar.extractfile(member).read()
                    out[split].append((LABELS[sentiment], review_id, rating, text, where))
        except (tarfile.TarError, EOFError, OSError) as e:
            raise data.DataFormatError(path, f"unreadable tarball ({type(e).__name__}: {data.quote(str(e))}); an "
                                       f"aclImdb *.tar.gz is expected") from None
    else:
        for key, where in _source_files(kind, path).items():
            split, sentiment, name = key.split("/")
            review_id, rating = _parse_name(where, sentiment, name)
            with open(where, "rb") as f:
                out[split].append((LABELS[sentiment], review_id, rating, f.read(), where))
    return out


def _read_hf():
    """{split: rows} from Hugging Face ``datasets`` "imdb" (online).

    Raises:
        data.DataUnavailable: ``datasets`` cannot load it (the message gives the real error).
    """
    try:
        import datasets

        ds = datasets.load_dataset("imdb")
    except Exception as e:  # datasets raises many types (ImportError, ConnectionError, its own offline errors)
        raise data.DataUnavailable(
            f"no IMDB data: neither imdb_source nor ${ENV} is set, {os.path.join('lra_dir', FOLDER)} holds no cache, "
            f"and Hugging Face datasets 'imdb' failed ({type(e).__name__}: {data.quote(str(e), 300)}). Set {ENV} to "
            f"the aclImdb_v1.tar.gz tarball or its extracted aclImdb/ directory "
            f"(https://ai.stanford.edu/~amaas/data/sentiment/)") from None
    return {split: [(int(r["label"]), i, -1, r["text"].encode("utf-8"), f"datasets imdb {split}[{i}]")
                    for i, r in enumerate(ds[split])] for split in SOURCE_SPLITS}


def _check_rows(rows, split, source):
    seen = set()
    for label, review_id, _, text, where in rows:
        if (label, review_id) in seen and review_id >= 0:
            raise data.DataFormatError(where, f"duplicate review id {review_id} in {split}; ids are unique per "
                                       f"class and split")
        seen.add((label, review_id))
        if not text:
            raise data.DataFormatError(where, "empty review; every review needs at least one byte")
    counts = np.bincount([r[0] for r in rows], minlength=NUM_CLASSES)
    if (counts == 0).any():
        raise data.DataFormatError(source, f"the {split} split has {counts[0]} neg and {counts[1]} pos reviews; "
                                   f"both classes are needed")
    return counts


def _write_cache(file, rows, source):
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    lengths = np.array([len(r[3]) for r in rows], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    buf = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.uint8)

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, data=buf, offsets=offsets, labels=np.array([r[0] for r in rows], dtype=np.int64),
                     ids=np.array([r[1] for r in rows], dtype=np.int64),
                     ratings=np.array([r[2] for r in rows], dtype=np.int64), source=np.array(source))
    data.atomic_write(file, write)


def _source_files(kind, path):
    """{name: file path} of a source: the tarball itself, or every review file of an aclImdb
    directory as "split/sentiment/file" (splits, then sentiments, then sorted names).

    Raises:
        FileNotFoundError: a directory without one of train/pos, train/neg, test/pos, test/neg.
    """
    if kind == "tar":
        return {os.path.basename(path): path}
    files = {}
    for split in SOURCE_SPLITS:
        for sentiment in LABELS:
            folder = os.path.join(path, split, sentiment)
            if not os.path.isdir(folder):
                raise FileNotFoundError(f"{folder} missing (aclImdb layout: train/pos, train/neg, test/pos, "
                                        f"test/neg)")
            for name in sorted(os.listdir(folder)):
                files[f"{split}/{sentiment}/{name}"] = os.path.join(folder, name)
    return files


def expected_manifest(kind, path=None):
    """The manifest fields that identify a cache converted from source ``(kind, path)`` (kind
    "tar", "dir" or "hf"; the digest covers the contents, not the path)."""
    out = {"dataset": "LRA Text (IMDB bytes)", "source": SOURCE_KINDS[kind], "converter": "data.lra.text",
           "converter_version": CONVERTER_VERSION}
    if kind != "hf":
        out["source_sha256"] = source_digest(_source_files(kind, path))
    return out


def _convert(kind, path, directory, final):
    """Write both cache files from the source into the empty folder ``directory`` (renamed to
    ``final`` when complete); returns the manifest's extra fields."""
    files = [os.path.join(directory, os.path.basename(cache_path("", s))) for s in SOURCE_SPLITS]
    if kind == "hf":
        rows, source = _read_hf(), "datasets:imdb"
    else:
        print(f"converting IMDB from {path} to {final}/", flush=True)
        rows, source = _read_source(kind, path), path
    for split in SOURCE_SPLITS:  # check both splits before writing either
        counts = _check_rows(rows[split], split, source)
        print(f"IMDB {split}: {counts[0]} neg, {counts[1]} pos", flush=True)
    for split, file in zip(SOURCE_SPLITS, files):
        _write_cache(file, rows[split], source)
    return {"source_path": os.path.abspath(path) if path else source,
            "sizes": {split: len(rows[split]) for split in SOURCE_SPLITS}}


def _found(lra_dir):
    """Manifest of a cache written without one, or None."""
    files = [cache_path(lra_dir, s) for s in SOURCE_SPLITS]
    if not all(os.path.exists(f) for f in files):
        return None
    sizes, source = {}, ""
    for split, f in zip(SOURCE_SPLITS, files):
        sizes[split] = len(read_cache(f)["labels"])
        with np.load(f) as z:
            source = str(z["source"]) if "source" in z.files else source
    return {"dataset": "LRA Text (IMDB bytes)", "source": FOUND_IN_PLACE, "source_path": source, "sizes": sizes}


def ensure(lra_dir, imdb_source=""):
    """Make ``lra_dir/imdb/{train,test}.npz`` hold IMDB converted from the given source (see the
    module docstring for the order of the sources and the manifest).

    Returns:
        dict: the cache's manifest.

    Raises:
        FileNotFoundError: a given source holds no IMDB data or lacks a folder.
        data.DataUnavailable: nothing given, no cache, and ``datasets`` "imdb" failed (its real error).
        data.DataFormatError: a malformed source file (named in the message).
    """
    directory = os.path.join(lra_dir, FOLDER)
    return ensure_cache(directory, find_source(imdb_source), lambda: _found(lra_dir), lambda: ("hf", None),
                        expected_manifest, lambda kind, path, tmp: _convert(kind, path, tmp, directory), "LRA Text")


def manifest(lra_dir):
    """The manifest of ``lra_dir/imdb/`` (None if there is none)."""
    return data.read_manifest(os.path.join(lra_dir, FOLDER))


def read_cache(file):
    """The arrays of one cache file, checked.

    Returns:
        dict "data" uint8, "offsets" int64 (N + 1), "labels" int64 (N,).

    Raises:
        FileNotFoundError: no such file (``ensure`` writes it).
        data.DataFormatError: unreadable file, missing keys, inconsistent offsets or labels
            outside {0, 1} (naming the file).
    """
    if not os.path.exists(file):
        raise FileNotFoundError(f"{file} not found; data.lra.text.ensure(lra_dir) converts IMDB into it")
    try:
        with np.load(file) as z:
            arrays = {k: z[k] for k in ("data", "offsets", "labels")}
    except KeyError as e:
        raise data.DataFormatError(file, f"malformed IMDB cache, missing {e} (expected data, offsets, labels); "
                                   f"delete it to convert again") from None
    except Exception as e:
        raise data.DataFormatError(file, f"unreadable IMDB cache ({type(e).__name__}: {data.quote(str(e))}); "
                                   f"delete it to convert again") from None
    off, labels = arrays["offsets"], arrays["labels"]
    if (off.ndim != 1 or len(off) != len(labels) + 1 or off[0] != 0 or off[-1] != len(arrays["data"])
            or (np.diff(off) <= 0).any()):
        raise data.DataFormatError(file, "malformed IMDB cache (offsets must rise from 0 to len(data), one more "
                                   "than labels); delete it to convert again")
    if len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise data.DataFormatError(file, f"labels outside [0, {NUM_CLASSES}); delete it to convert again")
    return arrays


def holdout_mask(labels):
    """(N,) bool: the fixed, class-balanced VAL_FRACTION of ``labels`` held out for validation."""
    labels = np.asarray(labels)
    out = np.zeros(len(labels), dtype=bool)
    for c in range(NUM_CLASSES):
        rows = np.flatnonzero(labels == c)
        pick = np.random.default_rng([VAL_SEED, c]).permutation(len(rows))[:int(round(VAL_FRACTION * len(rows)))]
        out[rows[pick]] = True
    return out


def load(lra_dir, split, max_len=MAX_LEN, val="holdout"):
    """One split as byte ids.

    Args:
        split: "train", "val" or "test".
        max_len (int): reviews truncated to / right-padded (PAD 0) to this many bytes.
        val: "holdout" (val = a fixed 10% of the training reviews) or "test" (LRA: val = test).

    Returns:
        dict ``tokens`` uint16 (N, max_len) (byte + 1), ``lengths`` int64 (N,) (min(bytes, max_len)),
        ``labels`` int64 (N,) in {0, 1}.

    Raises:
        ValueError: bad split / val mode.
        FileNotFoundError: the cache file is missing.
        data.DataFormatError: malformed cache (see ``read_cache``).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; available: {', '.join(SPLITS)}")
    if val not in VAL_MODES:
        raise ValueError(f"unknown val mode {val!r}; available: {', '.join(VAL_MODES)}")
    source = "test" if split == "test" or (split == "val" and val == "test") else "train"
    z = read_cache(cache_path(lra_dir, source))
    rows = np.arange(len(z["labels"]))
    if source == "train" and val == "holdout":
        held = holdout_mask(z["labels"])
        rows = rows[held] if split == "val" else rows[~held]
    off = z["offsets"]
    lengths = np.minimum(off[rows + 1] - off[rows], max_len).astype(np.int64)
    tokens = np.zeros((len(rows), max_len), dtype=token_dtype(VOCAB_SIZE))
    for i, r in enumerate(rows):
        row = tokens[i, :lengths[i]]
        row[:] = z["data"][off[r]:off[r] + lengths[i]]
        row += 1
    return {"tokens": tokens, "lengths": lengths, "labels": z["labels"][rows].astype(np.int64)}
