"""LRA "Image": CIFAR-10 (Krizhevsky, 2009) as grayscale pixel sequences of length 1024 (Tay et
al., 2021, section 3.4), 10 classes.

LRA (``../shared/data/lra-spec/SPEC.md``, "Image"; upstream ``image/input_pipeline.py``) reads
TFDS cifar10, converts with ``tf.image.rgb_to_grayscale`` and uses the 32 x 32 gray bytes in
row-major order; train = the first 90% of the training set, val = the last 10%, test = the test
set. Grayscale as TensorFlow computes it for uint8 images (float32 arithmetic):

    gray = trunc(255.5 * (0.2989 R + 0.5870 G + 0.1140 B) / 255)        (R, G, B in 0..255)

Token = gray + 1 (0 = PAD, as in every LRA module here), VOCAB_SIZE 257.

Source, first found of: the ``cifar10_source`` option; env ``CIFAR10_DIR``;
``../shared/data/cifar10-subset`` beside the repository; else torchvision's CIFAR10 download
(online) into ``lra_dir/cifar10/download``. A source directory holds either the python-pickle
batches (``data_batch_1`` ... ``data_batch_5``, ``test_batch``, directly or in
``cifar-10-batches-py/``) or ``cifar10_subset.npz`` (this project's 1,000 + 1,000 image subset:
``train_data_batch_1_first1000``, ``test_batch_first1000`` (N, 3, 32, 32) uint8 and the labels of
the full batches, of which the first 1,000 are used). Full set: 45,000 / 5,000 / 10,000; the
subset: 900 / 100 / 1,000.

``ensure`` converts once into ``lra_dir/cifar10/{train,test}.npz`` (``gray`` uint8 (N, 1024),
``labels`` int64, ``source`` str; atomic writes). Checks: each batch a dict with ``data``
(N, 3072) uint8 and N labels in 0..9; every class present (counts printed); errors name the file.
"""
import os
import pickle
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import data  # noqa: E402

NUM_CLASSES = 10
VOCAB_SIZE = 257  # gray value g -> id g + 1; 0 = PAD
MAX_LEN = 1024
TWO_TOWER = False
FOLDER = "cifar10"
ENV = "CIFAR10_DIR"
SHARED_DEFAULT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "..", "shared", "data", "cifar10-subset")
SUBSET_FILE = "cifar10_subset.npz"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
SPLITS = ("train", "val", "test")
TRAIN_FRACTION = 0.9  # LRA: train[:90%] / train[90%:]
RGB_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)


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
    """("batches", dir) or ("subset", npz file) of the first candidate (``cifar10_source``,
    ``$CIFAR10_DIR``, ``SHARED_DEFAULT``) holding CIFAR-10, or None.

    Raises:
        FileNotFoundError: ``cifar10_source`` or ``$CIFAR10_DIR`` is set but holds neither.
    """
    explicit = [p for p in (cifar10_source, os.environ.get(ENV, "")) if p]
    for path in explicit + [SHARED_DEFAULT]:
        if os.path.isfile(path) and path.endswith(".npz"):
            return ("subset", path)
        if os.path.isdir(path):
            d = _batch_dir(path)
            if d:
                return ("batches", d)
            if os.path.exists(os.path.join(path, SUBSET_FILE)):
                return ("subset", os.path.join(path, SUBSET_FILE))
        if path in explicit:
            raise FileNotFoundError(f"{path} holds no CIFAR-10: expected the python batches (data_batch_1..5, "
                                    f"test_batch) or {SUBSET_FILE}")
    return None


def read_batch(file):
    """One python-pickle batch.

    Returns:
        (images (N, 3072) uint8, labels (N,) int64).

    Raises:
        FileNotFoundError: missing file. ValueError: not a CIFAR-10 batch (naming the file).
    """
    if not os.path.exists(file):
        raise FileNotFoundError(f"{file} missing (CIFAR-10 python version: data_batch_1..5 and test_batch)")
    try:
        with open(file, "rb") as f:
            d = pickle.load(f, encoding="bytes")
    except Exception as e:
        raise ValueError(f"{file}: not a readable CIFAR-10 pickle batch ({type(e).__name__}: {e})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{file}: expected a dict, got {type(d).__name__}")
    d = {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}
    if "data" not in d or "labels" not in d:
        raise ValueError(f"{file}: missing 'data' or 'labels' (keys: {sorted(d)})")
    images, labels = np.asarray(d["data"]), np.asarray(d["labels"], dtype=np.int64)
    if images.dtype != np.uint8 or images.ndim != 2 or images.shape[1] != 3072 or len(images) != len(labels):
        raise ValueError(f"{file}: 'data' must be (N, 3072) uint8 with N = {len(labels)} labels, "
                         f"got {images.shape} {images.dtype}")
    return images, labels


def _read_subset(file):
    try:
        with np.load(file) as z:
            train, test = z["train_data_batch_1_first1000"], z["test_batch_first1000"]
            train_labels, test_labels = z["data_batch_1_labels"], z["test_batch_labels"]
    except KeyError as e:
        raise ValueError(f"{file}: not the CIFAR-10 subset, missing {e}") from None
    except Exception as e:
        raise ValueError(f"{file}: unreadable ({type(e).__name__}: {e})") from None
    for name, images, labels in (("train", train, train_labels), ("test", test, test_labels)):
        if images.dtype != np.uint8 or images.shape[1:] != (3, 32, 32) or len(labels) < len(images):
            raise ValueError(f"{file}: {name} images must be (N, 3, 32, 32) uint8 with >= N labels, "
                             f"got {images.shape} {images.dtype} and {len(labels)} labels")
    return {"train": (train.reshape(len(train), 3072), train_labels[:len(train)].astype(np.int64)),
            "test": (test.reshape(len(test), 3072), test_labels[:len(test)].astype(np.int64))}


def _read_torchvision(root):
    try:
        from torchvision.datasets import CIFAR10

        CIFAR10(root, train=True, download=True)
    except Exception:
        return None
    return _batch_dir(os.path.join(root, "cifar-10-batches-py"))


def ensure(lra_dir, cifar10_source=""):
    """Make ``lra_dir/cifar10/{train,test}.npz`` exist (nothing to do when both are there).

    Raises:
        FileNotFoundError: no source (the message lists where it looked) or a missing batch file.
        ValueError: a malformed batch or subset file, or a class without images (named).
    """
    files = {p: cache_path(lra_dir, p) for p in ("train", "test")}
    if all(os.path.exists(f) for f in files.values()):
        return
    found = find_source(cifar10_source)
    if found is None:
        d = _read_torchvision(os.path.join(lra_dir, FOLDER, "download"))
        if d is None:
            raise FileNotFoundError(
                f"no CIFAR-10: looked at cifar10_source, ${ENV} and {os.path.normpath(SHARED_DEFAULT)}, and the "
                f"torchvision download failed (offline?). Set {ENV} to the extracted cifar-10-batches-py/ "
                f"(https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz)")
        found = ("batches", d)
    kind, path = found
    print(f"converting CIFAR-10 from {path} to {os.path.join(lra_dir, FOLDER)}/", flush=True)
    if kind == "subset":
        parts = _read_subset(path)
    else:
        parts = {}
        train = [read_batch(os.path.join(path, b)) for b in TRAIN_BATCHES]
        parts["train"] = (np.concatenate([t[0] for t in train]), np.concatenate([t[1] for t in train]))
        parts["test"] = read_batch(os.path.join(path, TEST_BATCH))
    for part, (images, labels) in parts.items():  # check both parts before writing either
        if len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
            raise ValueError(f"{path}: {part} labels outside [0, {NUM_CLASSES})")
        counts = np.bincount(labels, minlength=NUM_CLASSES)
        if (counts == 0).any():
            raise ValueError(f"{path}: {part} has no image of class(es) {np.flatnonzero(counts == 0).tolist()}")
        print(f"CIFAR-10 {part}: {len(labels)} images, per class {counts.tolist()}", flush=True)
    os.makedirs(os.path.join(lra_dir, FOLDER), exist_ok=True)
    for part, (images, labels) in parts.items():
        gray = to_gray(images)

        def write(tmp, gray=gray, labels=labels):
            with open(tmp, "wb") as f:
                np.savez(f, gray=gray, labels=labels, source=np.array(path))
        data.atomic_write(files[part], write)


def load(lra_dir, split, max_len=MAX_LEN):
    """One split as pixel ids.

    Args:
        split: "train" (first 90% of the training images), "val" (last 10%) or "test".
        max_len (int): sequences truncated to / right-padded (PAD 0) to this length.

    Returns:
        dict ``tokens`` int64 (N, max_len) (gray + 1, row-major), ``lengths`` int64 (N,)
        (min(1024, max_len)), ``labels`` int64 (N,) in [0, 10).

    Raises:
        FileNotFoundError: the cache is missing (``ensure`` writes it).
        ValueError: bad split; a cache without ``gray`` (N, 1024) uint8 / ``labels`` (N,) in [0, 10)
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
        raise ValueError(f"{file}: malformed CIFAR-10 cache ({type(e).__name__}: {e}); delete it") from None
    if (gray.dtype != np.uint8 or gray.ndim != 2 or gray.shape[1] != 1024 or labels.shape != (len(gray),)
            or (len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES))):
        raise ValueError(f"{file}: malformed CIFAR-10 cache (gray {gray.shape} {gray.dtype}, labels "
                         f"{labels.shape}); delete it")
    if split != "test":
        cut = int(len(gray) * TRAIN_FRACTION)
        gray, labels = (gray[:cut], labels[:cut]) if split == "train" else (gray[cut:], labels[cut:])
    n = min(1024, max_len)
    tokens = np.zeros((len(gray), max_len), dtype=np.int64)
    tokens[:, :n] = gray[:, :n].astype(np.int64) + 1
    return {"tokens": tokens, "lengths": np.full(len(gray), n, dtype=np.int64), "labels": labels.astype(np.int64)}
