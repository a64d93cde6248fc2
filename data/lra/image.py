"""LRA "Image": CIFAR-10 (Krizhevsky, 2009) as grayscale pixel sequences of length 1024 (Tay et
al., 2021, section 3.4), 10 classes.

LRA (google-research/long-range-arena ``lra_benchmarks/image/input_pipeline.py``) reads TFDS
cifar10, converts with ``tf.image.rgb_to_grayscale`` and uses the 32 x 32 gray bytes in
row-major order; train = the first 90% of the training set, val = the last 10%, test = the test
set. Grayscale as TensorFlow computes it for uint8 images (float32 arithmetic):

    gray = trunc(255.5 * (0.2989 R + 0.5870 G + 0.1140 B) / 255)        (R, G, B in 0..255)

Token = gray + 1 (0 = PAD, as in every LRA module here), VOCAB_SIZE 257.

Source, first found of: the ``cifar10_source`` option; env ``CIFAR10_DIR``; else the cache
already in ``lra_dir/cifar10/`` (whatever it was made from); else the python version of CIFAR-10
downloaded with the standard library (``CIFAR10_URL``, md5 checked against ``CIFAR10_MD5``, the
value the CIFAR page publishes) into ``lra_dir/cifar10/download/`` and unpacked there. A source
directory holds either the python-pickle batches (``data_batch_1`` ... ``data_batch_5``,
``test_batch``, directly or in ``cifar-10-batches-py/``) or ``cifar10_subset.npz`` (a 1,000 +
1,000 image subset: ``train_data_batch_1_first1000``, ``test_batch_first1000`` (N, 3, 32, 32)
uint8 and the labels of the full batches, ``data_batch_1_labels`` / ``test_batch_labels``, of
which the first 1,000 are used). Full set: 45,000 / 5,000 / 10,000; the subset: 900 / 100 / 1,000.

``ensure`` converts once into ``lra_dir/cifar10/{train,test}.npz`` (``gray`` uint8 (N, 1024),
``labels`` int64, ``source`` str; atomic writes) and ``manifest.json``: ``source`` ("CIFAR-10
python batches" or "CIFAR-10 subset (cifar10_subset.npz)"), ``source_sha256`` (of the batch
files' / npz's contents), ``converter`` "data.lra.image" and ``converter_version``; ``sizes``
{"train", "val", "test"} and ``source_path`` are recorded, not compared. A given source whose
digest differs from the manifest's (e.g. the full batches after the subset) is converted again.
A cache without a manifest (written before manifests existed) is converted again when a source
is given, else used as found in place.

Checks: each batch a dict with ``data`` (N, 3072) uint8 and N labels in 0..9; every class present
(counts printed); errors (``data.DataFormatError``) name the file.
"""
import hashlib
import http.client
import os
import pickle
import shutil
import tarfile
import urllib.request

import numpy as np

import data
from data.lra import FOUND_IN_PLACE, ensure_cache, source_digest, token_dtype

NUM_CLASSES = 10
VOCAB_SIZE = 257  # gray value g -> id g + 1; 0 = PAD
MAX_LEN = 1024
TWO_TOWER = False
FOLDER = "cifar10"
ENV = "CIFAR10_DIR"
SUBSET_FILE = "cifar10_subset.npz"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
SPLITS = ("train", "val", "test")
TRAIN_FRACTION = 0.9  # LRA: train[:90%] / train[90%:]
RGB_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"  # published on https://www.cs.toronto.edu/~kriz/cifar.html
TAR_FOLDER = "cifar-10-batches-py"
CONVERTER_VERSION = 1  # raise when a change of the conversion changes the cache
SOURCE_KINDS = {"batches": "CIFAR-10 python batches", "subset": f"CIFAR-10 subset ({SUBSET_FILE})"}


def cache_path(lra_dir, part):
    """``lra_dir/cifar10/{part}.npz``, part "train" (train + val) or "test"."""
    return os.path.join(lra_dir, FOLDER, f"{part}.npz")


def to_gray(images):
    """(N, 3, 32, 32) or (N, 3072) uint8 RGB (CIFAR's channel-major order) -> (N, 1024) uint8
    gray, as ``tf.image.rgb_to_grayscale`` on uint8 (see the module docstring)."""
    rgb = np.asarray(images, dtype=np.uint8).reshape(len(images), 3, 1024).astype(np.float32) / np.float32(255)
    gray = np.einsum("c,ncp->np", RGB_WEIGHTS, rgb).astype(np.float32)
    return (gray * np.float32(255.5)).astype(np.uint8)


def _batch_dir(path):
    for d in (path, os.path.join(path, "cifar-10-batches-py")):
        if os.path.exists(os.path.join(d, TEST_BATCH)) or os.path.exists(os.path.join(d, TRAIN_BATCHES[0])):
            return d
    return None


def find_source(cifar10_source=""):
    """("batches", dir) or ("subset", npz file) of the first given location (``cifar10_source``,
    ``$CIFAR10_DIR``) holding CIFAR-10, or None when neither is given.

    Raises:
        FileNotFoundError: ``cifar10_source`` or ``$CIFAR10_DIR`` is set but holds neither.
    """
    for path in [p for p in (cifar10_source, os.environ.get(ENV, "")) if p]:
        if os.path.isfile(path) and path.endswith(".npz"):
            return ("subset", path)
        if os.path.isdir(path):
            d = _batch_dir(path)
            if d:
                return ("batches", d)
            if os.path.exists(os.path.join(path, SUBSET_FILE)):
                return ("subset", os.path.join(path, SUBSET_FILE))
        raise FileNotFoundError(f"{path} holds no CIFAR-10: expected the python batches (data_batch_1..5, "
                                f"test_batch) or {SUBSET_FILE}")
    return None


def _md5(file):
    digest = hashlib.md5(usedforsecurity=False)
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(root, url=None, md5=None):
    """Download the python version of CIFAR-10 into ``root`` and unpack its batches.

    The tarball is fetched with ``urllib.request`` (``url`` may be any URL it opens, e.g. file://)
    into ``root/cifar-10-python.tar.gz`` unless a copy with the right md5 is there, checked
    against ``md5``, and the batch files of its ``cifar-10-batches-py/`` are extracted (nothing
    else is written).

    Args:
        url, md5 (str or None): None = ``CIFAR10_URL`` / ``CIFAR10_MD5`` (read at call time).

    Returns:
        str: ``root/cifar-10-batches-py``.

    Raises:
        data.DataUnavailable: the download failed (the message gives the exception's type and
            message) or its md5 differs from the published one (both values).
        data.DataFormatError: the tarball is unreadable or lacks a batch file.
    """
    url, md5 = url or CIFAR10_URL, md5 or CIFAR10_MD5
    os.makedirs(root, exist_ok=True)
    tar_path = os.path.join(root, "cifar-10-python.tar.gz")
    how = (f"download it on a connected machine ({CIFAR10_URL}), unpack it and set {ENV} to its "
           f"{TAR_FOLDER}/ folder")
    if not (os.path.exists(tar_path) and _md5(tar_path) == md5):
        print(f"downloading CIFAR-10 from {url} to {tar_path}", flush=True)
        tmp = f"{tar_path}.part.{os.getpid()}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as f:
                shutil.copyfileobj(response, f, 1 << 20)
            got = _md5(tmp)
            if got != md5:
                raise data.DataUnavailable(f"CIFAR-10 download from {url}: md5 {got}, expected the published "
                                           f"{md5} (a truncated or altered file); {how}")
            os.replace(tmp, tar_path)
        except (OSError, ValueError, http.client.HTTPException) as e:
            raise data.DataUnavailable(f"CIFAR-10 download from {url} failed ({type(e).__name__}: {e}); "
                                       f"{how}") from None
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    out = os.path.join(root, TAR_FOLDER)
    os.makedirs(out, exist_ok=True)
    wanted = {f"{TAR_FOLDER}/{name}" for name in TRAIN_BATCHES + (TEST_BATCH,)}
    try:
        with tarfile.open(tar_path, "r:gz") as tar:
            for member in tar:
                if member.isfile() and member.name in wanted:  # exact names: nothing lands outside ``out``
                    body = tar.extractfile(member).read()

                    def write(tmp, body=body):
                        with open(tmp, "wb") as f:
                            f.write(body)
                    data.atomic_write(os.path.join(out, os.path.basename(member.name)), write)
                    wanted.discard(member.name)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise data.DataFormatError(tar_path, f"not a readable gzip tarball ({type(e).__name__}: {e}); delete it "
                                   f"to download again") from None
    if wanted:
        raise data.DataFormatError(tar_path, f"missing {', '.join(sorted(wanted))} (the python version of "
                                   f"CIFAR-10 has {TAR_FOLDER}/data_batch_1..5 and test_batch)")
    return out


def read_batch(file):
    """One python-pickle batch.

    Returns:
        (images (N, 3072) uint8, labels (N,) int64).

    Raises:
        FileNotFoundError: missing file.
        data.DataFormatError: not a CIFAR-10 batch (naming the file and what a batch holds).
    """
    if not os.path.exists(file):
        raise FileNotFoundError(f"{file} missing (CIFAR-10 python version: data_batch_1..5 and test_batch)")
    try:
        with open(file, "rb") as f:
            d = pickle.load(f, encoding="bytes")
    except Exception as e:  # pickle raises many types on a file that is not a pickle
        raise data.DataFormatError(file, f"not a readable CIFAR-10 pickle batch ({type(e).__name__}: "
                                   f"{data.quote(str(e))})") from None
    if not isinstance(d, dict):
        raise data.DataFormatError(file, f"expected a dict with 'data' and 'labels', got {type(d).__name__}")
    d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}
    if "data" not in d or "labels" not in d:
        raise data.DataFormatError(file, f"expected the keys 'data' and 'labels', got {data.quote(str(sorted(d)))}")
    images, labels = np.asarray(d["data"]), np.asarray(d["labels"], dtype=np.int64)
    if images.dtype != np.uint8 or images.ndim != 2 or images.shape[1] != 3072 or len(images) != len(labels):
        raise data.DataFormatError(file, f"'data' must be (N, 3072) uint8 with N = {len(labels)} labels, got "
                                   f"{images.shape} {images.dtype}")
    return images, labels


def _read_subset(file):
    try:
        with np.load(file) as z:
            train, test = z["train_data_batch_1_first1000"], z["test_batch_first1000"]
            train_labels, test_labels = z["data_batch_1_labels"], z["test_batch_labels"]
    except KeyError as e:
        raise data.DataFormatError(file, f"not the CIFAR-10 subset, missing {e} (expected "
                                   f"train_data_batch_1_first1000, test_batch_first1000, data_batch_1_labels, "
                                   f"test_batch_labels)") from None
    except Exception as e:
        raise data.DataFormatError(file, f"unreadable npz ({type(e).__name__}: {data.quote(str(e))})") from None
    for name, images, labels in (("train", train, train_labels), ("test", test, test_labels)):
        if images.dtype != np.uint8 or images.shape[1:] != (3, 32, 32) or len(labels) < len(images):
            raise data.DataFormatError(file, f"{name} images must be (N, 3, 32, 32) uint8 with >= N labels, got "
                                       f"{images.shape} {images.dtype} and {len(labels)} labels")
    return {"train": (train.reshape(len(train), 3072), train_labels[:len(train)].astype(np.int64)),
            "test": (test.reshape(len(test), 3072), test_labels[:len(test)].astype(np.int64))}


def _source_files(kind, path):
    if kind == "subset":
        return {SUBSET_FILE: path}
    return {name: os.path.join(path, name) for name in TRAIN_BATCHES + (TEST_BATCH,)}


def expected_manifest(kind, path):
    """The manifest fields that identify a cache converted from source ``(kind, path)``.

    Raises:
        FileNotFoundError: a batch file is missing.
    """
    files = _source_files(kind, path)
    for file in files.values():
        if not os.path.exists(file):
            raise FileNotFoundError(f"{file} missing (CIFAR-10 python version: data_batch_1..5 and test_batch)")
    return {"dataset": "LRA Image (CIFAR-10 gray)", "source": SOURCE_KINDS[kind], "source_sha256": source_digest(files),
            "converter": "data.lra.image", "converter_version": CONVERTER_VERSION}


def _convert(kind, path, directory, final):
    """Write the two cache files from the source into the empty folder ``directory`` (renamed to
    ``final`` when complete); returns the manifest's extra fields."""
    files = {p: os.path.join(directory, os.path.basename(cache_path("", p))) for p in ("train", "test")}
    print(f"converting CIFAR-10 from {path} to {final}/", flush=True)
    if kind == "subset":
        parts = _read_subset(path)
    else:
        parts = {}
        train = [read_batch(os.path.join(path, b)) for b in TRAIN_BATCHES]
        parts["train"] = (np.concatenate([t[0] for t in train]), np.concatenate([t[1] for t in train]))
        parts["test"] = read_batch(os.path.join(path, TEST_BATCH))
    for part, (images, labels) in parts.items():  # check both parts before writing either
        if len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
            raise data.DataFormatError(path, f"{part} labels must be in [0, {NUM_CLASSES}), got "
                                       f"{int(labels.min())}..{int(labels.max())}")
        counts = np.bincount(labels, minlength=NUM_CLASSES)
        if (counts == 0).any():
            raise data.DataFormatError(path, f"{part} has no image of class(es) "
                                       f"{np.flatnonzero(counts == 0).tolist()}; every class is needed")
        print(f"CIFAR-10 {part}: {len(labels)} images, per class {counts.tolist()}", flush=True)
    for part, (images, labels) in parts.items():
        gray = to_gray(images)

        def write(tmp, gray=gray, labels=labels):
            with open(tmp, "wb") as f:
                np.savez(f, gray=gray, labels=labels, source=np.array(path))
        data.atomic_write(files[part], write)
    return {"source_path": os.path.abspath(path), "sizes": _sizes(len(parts["train"][1]), len(parts["test"][1]))}


def _sizes(n_train, n_test):
    cut = int(n_train * TRAIN_FRACTION)
    return {"train": cut, "val": n_train - cut, "test": int(n_test)}


def _found(lra_dir):
    """Manifest of a cache written without one, or None."""
    files = [cache_path(lra_dir, p) for p in ("train", "test")]
    if not all(os.path.exists(f) for f in files):
        return None
    n, source = [], ""
    for f in files:
        try:
            with np.load(f) as z:
                n.append(len(z["labels"]))
                source = str(z["source"]) if "source" in z.files else source
        except Exception as e:
            raise data.DataFormatError(f, f"malformed CIFAR-10 cache ({type(e).__name__}: {data.quote(str(e))}); "
                                       f"delete it") from None
    return {"dataset": "LRA Image (CIFAR-10 gray)", "source": FOUND_IN_PLACE, "source_path": source,
            "sizes": _sizes(*n)}


def ensure(lra_dir, cifar10_source=""):
    """Make ``lra_dir/cifar10/{train,test}.npz`` hold CIFAR-10 converted from the given source
    (see the module docstring for the order and the manifest).

    Returns:
        dict: the cache's manifest.

    Raises:
        FileNotFoundError: a given source holds no CIFAR-10, or a batch file is missing.
        data.DataUnavailable: nothing given, no cache, and the download failed (its real error).
        data.DataFormatError: a malformed batch, subset or tarball, or a class without images (named).
    """
    directory = os.path.join(lra_dir, FOLDER)
    return ensure_cache(directory, find_source(cifar10_source), lambda: _found(lra_dir),
                        lambda: ("batches", download(os.path.join(directory, "download"))), expected_manifest,
                        lambda kind, path, tmp: _convert(kind, path, tmp, directory), "LRA Image")


def manifest(lra_dir):
    """The manifest of ``lra_dir/cifar10/`` (None if there is none)."""
    return data.read_manifest(os.path.join(lra_dir, FOLDER))


def load(lra_dir, split, max_len=MAX_LEN):
    """One split as pixel ids.

    Args:
        split: "train" (first 90% of the training images), "val" (last 10%) or "test".
        max_len (int): sequences truncated to / right-padded (PAD 0) to this length.

    Returns:
        dict ``tokens`` uint16 (N, max_len) (gray + 1, row-major), ``lengths`` int64 (N,)
        (min(1024, max_len)), ``labels`` int64 (N,) in [0, 10).

    Raises:
        ValueError: bad split.
        FileNotFoundError: the cache is missing (``ensure`` writes it).
        data.DataFormatError: a cache without ``gray`` (N, 1024) uint8 / ``labels`` (N,) in [0, 10)
            (naming the file).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; available: {', '.join(SPLITS)}")
    file = cache_path(lra_dir, "test" if split == "test" else "train")
    if not os.path.exists(file):
        raise FileNotFoundError(f"{file} not found; data.lra.image.ensure(lra_dir) converts CIFAR-10 into it")
    try:
        with np.load(file) as z:
            gray, labels = z["gray"], z["labels"]
    except Exception as e:
        raise data.DataFormatError(file, f"malformed CIFAR-10 cache ({type(e).__name__}: {data.quote(str(e))}); "
                                   f"delete it") from None
    if (gray.dtype != np.uint8 or gray.ndim != 2 or gray.shape[1] != 1024 or labels.shape != (len(gray),)
            or (len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES))):
        raise data.DataFormatError(file, f"malformed CIFAR-10 cache (gray {gray.shape} {gray.dtype}, labels "
                                   f"{labels.shape}; expected gray (N, 1024) uint8 and N labels in [0, "
                                   f"{NUM_CLASSES})); delete it")
    if split != "test":
        cut = int(len(gray) * TRAIN_FRACTION)
        gray, labels = (gray[:cut], labels[:cut]) if split == "train" else (gray[cut:], labels[cut:])
    n = min(1024, max_len)
    tokens = np.zeros((len(gray), max_len), dtype=token_dtype(VOCAB_SIZE))
    tokens[:, :n] = gray[:, :n]
    tokens[:, :n] += 1
    return {"tokens": tokens, "lengths": np.full(len(gray), n, dtype=np.int64), "labels": labels.astype(np.int64)}
