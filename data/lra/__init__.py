"""Long Range Arena (Tay et al., 2021) data: one module per task.

Every task module ``data/lra/<task>.py`` provides the same few names, so that ``tasks/classify.py``
treats the five tasks alike:

    NUM_CLASSES: int
    VOCAB_SIZE: int         token ids are in [0, VOCAB_SIZE); id 0 is padding (PAD) everywhere
    MAX_LEN: int            the LRA sequence length of the task (ListOps 2000, Text 1000 or 4000,
                            Retrieval 4000 per document, Image 1024, Pathfinder 32x32 = 1024)
    TWO_TOWER: bool         True for Retrieval (a pair of documents per example)
    ensure(lra_dir, **options) -> dict
                            make the task's files under ``lra_dir`` exist in the release layout
                            and match ``options`` (see "Manifests" below): generate or convert
                            them when needed, or raise FileNotFoundError naming the missing file
                            and how to get it; returns the data's manifest
    manifest(lra_dir, **options) -> dict or None
                            the manifest of the data ``ensure`` prepared (None: not prepared)
    load(lra_dir, split, max_len, **options) -> dict of numpy arrays
                            split in ("train", "val", "test"); ``tokens`` (N, max_len) of dtype
                            ``token_dtype(VOCAB_SIZE)`` (uint8 for at most 256 ids, else uint16),
                            right-padded with 0 and truncated to max_len; ``lengths`` int64 (N,);
                            ``labels`` int64 (N,) in [0, NUM_CLASSES). Two-tower tasks give
                            ``tokens``/``lengths`` for the first document and
                            ``tokens2``/``lengths2`` for the second.

Errors: a malformed file raises ``data.DataFormatError`` (names the file, the line and what is
allowed, quoting at most 80 characters); prepared data that differs from what the options ask and
cannot be rebuilt here raises ``data.DataMismatch`` naming both values; a missing file raises
FileNotFoundError (``tasks/classify.py`` reports it as ``data.DataUnavailable``); a bad argument
(unknown split, option value) raises ValueError.

Manifests: every prepared data folder (``listops-1000/``, ``pathfinder<R>/<difficulty>/``,
``cifar10/``, ``imdb/``, ``tsv_data/``) holds a ``manifest.json`` (``data.write_manifest``)
saying what it holds: ``dataset``, ``source`` and ``sizes`` always, then per kind of data

- generated (ListOps, Pathfinder): source "generated", ``generator`` (module) and
  ``generator_version``, ``seed``, the options that change the examples (Pathfinder
  ``resolution``, ``difficulty``) and the asked sizes. ``ensure`` with other values regenerates
  the folder (``data.ensure_manifest``); options that change no example (``workers``,
  ``batch_size``) are not recorded.
- converted (Image from CIFAR-10, Text from IMDB): source = the kind of source (e.g. "CIFAR-10
  python batches"), ``source_sha256`` (a digest of the source files' contents, so another path to
  the same files changes nothing), ``converter`` / ``converter_version``; ``source_path`` and the
  sizes are recorded but not compared. A source given by option or environment variable whose
  digest differs from the manifest's: converted again. No source given: the cache is used as it
  is, whatever it was made from (its manifest summary goes to the run log).
- found in place (``FOUND_IN_PLACE``): files a user put there without a manifest, e.g. the LRA
  release (``lra_release.gz``) unpacked under ``lra_dir``, or data written before manifests
  existed. They are accepted, never overwritten: ``ensure`` writes a manifest with source
  "release (found in place)", the sizes counted from the files (examples; for Retrieval, whose
  files are large, the files' byte sizes) and nothing else, since seed and generator are unknown.
  Asking for other sizes (e.g. ListOps ``num_train``) then raises ``DataMismatch`` naming both
  (generate into another ``lra_dir`` or delete the folder). When the folder is read-only the
  manifest is only kept in memory.

A folder is built whole in a temporary folder beside it, manifest last, and renamed into place
(``data.build_folder``): an interrupted build leaves the previous folder as it was and never a
partial folder that could be taken for files found in place.

``lra_dir`` defaults to the ``LRA_DIR`` environment variable (``default_lra_dir``).
"""
import importlib
import os

import numpy as np

import data

TASKS = ("listops", "text", "retrieval", "image", "pathfinder")
SPLITS = ("train", "val", "test")
FOUND_IN_PLACE = "release (found in place)"


def default_lra_dir():
    """``$LRA_DIR`` if set, else ``data/lra/files`` inside the repository (gitignored)."""
    return os.environ.get("LRA_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "files")


def get(task):
    """The module of LRA task ``task``.

    Raises:
        ValueError: ``task`` is not one of TASKS (the message lists them).
    """
    if task not in TASKS:
        raise ValueError(f"unknown LRA task {task!r}; available: {', '.join(TASKS)}")
    return importlib.import_module(f"data.lra.{task}")


def token_dtype(vocab_size):
    """The smallest unsigned numpy dtype that holds ids in [0, vocab_size): uint8, uint16 or uint32."""
    return np.uint8 if vocab_size <= 256 else (np.uint16 if vocab_size <= 65536 else np.uint32)


def write_in_place_manifest(directory, manifest, what):
    """Write the manifest of files found in place; a read-only folder keeps it in memory only."""
    try:
        data.write_manifest(directory, manifest)
    except OSError as e:
        print(f"{what}: could not write {os.path.join(directory, data.MANIFEST)} ({type(e).__name__}: {e}); "
              f"using the files without it", flush=True)
    return manifest


def prepare(directory, expected, build, what, found=None, compared=("sizes",), rebuild=True):
    """The manifest of ``directory``, after building or rebuilding it when it does not match.

    Args:
        directory (str): the prepared data's folder.
        expected (dict): the fields that identify the data (see the module docstring).
        build (callable): ``build(directory)`` writes the data files (it may return a dict of
            extra manifest fields, not compared later); called when there is no manifest and
            nothing found in place, or when the manifest differs from ``expected``.
        what (str): the data set's name for messages.
        found (callable or None): ``found(directory)`` -> a manifest (without ``source``) of
            files present without a manifest, or None when there are none; may raise
            FileNotFoundError / DataFormatError for an incomplete folder. None (converted data):
            files found in place are not kept, a manifest saying so differs and is rebuilt.
        compared (tuple of str): the ``expected`` fields compared with files found in place.
        rebuild (bool): False: data prepared with other options are kept and refused
            (``data.ensure_manifest``'s ``DataMismatch``) instead of being generated again.

    The build writes into a temporary folder that replaces ``directory`` only when complete,
    manifest included (``data.build_folder``): a killed build never leaves files that could be
    mistaken for a release, and a failed one leaves the previous data as they were.

    Returns:
        dict: the manifest now describing ``directory``.

    Raises:
        data.DataMismatch: files found in place differ from ``expected`` in a compared field, or
            (``rebuild`` False) prepared data differ from ``expected``; the message names both
            values and how to generate the asked data; ``stored`` is the folder's manifest.
    """
    stored = data.read_manifest(directory)
    if stored is None and found is not None:
        in_place = found(directory)
        if in_place is not None:
            stored = write_in_place_manifest(directory, {**in_place, "source": FOUND_IN_PLACE}, what)
            print(f"{what}: using the files found in {directory} (no manifest: {FOUND_IN_PLACE})", flush=True)
    if found is not None and stored is not None and stored.get("source") == FOUND_IN_PLACE:
        differences = data.manifest_differences(stored, {k: expected[k] for k in compared if k in expected})
        if differences:
            raise data.DataMismatch(
                f"{what} in {directory} are files found in place without a manifest of this repo (e.g. the LRA "
                f"release), never overwritten, and they differ from what the run asks: "
                f"{data.describe_differences(differences)}. To use them, ask for what they hold; to generate "
                f"the asked data, point lra_dir at another folder or delete {directory} (rm -r) and run again",
                stored, differences)
        return stored
    return data.ensure_manifest(directory, expected, build, what=what, rebuild=rebuild)


def ensure_cache(directory, source, in_place, fallback, expected_manifest, convert, what):
    """The cache of a data set converted from a source (Text's IMDB, Image's CIFAR-10).

    Args:
        directory (str): the cache's folder.
        source ((kind, path) or None): the source the run names; None = none named.
        in_place (callable): ``in_place()`` -> the manifest (with ``source``) of cache files found
            without a manifest, or None.
        fallback (callable): ``fallback()`` -> (kind, path), the source to fetch when none is named
            and there is no cache (a download, ``datasets``).
        expected_manifest (callable): ``expected_manifest(kind, path)`` -> the fields identifying
            the conversion of that source.
        convert (callable): ``convert(kind, path, tmp)`` writes the cache files into the empty
            folder ``tmp`` (``prepare`` renames it into place).
        what (str): the data set's name for messages.

    With a source named, the cache is (re)converted unless its manifest matches that source;
    with none, the cache is used as it is (its manifest, or the files found in place), else the
    fallback source is converted.

    Returns:
        dict: the cache's manifest.
    """
    if source is None:
        stored = data.read_manifest(directory)
        if stored is not None:
            return stored
        found = in_place()
        if found is not None:
            print(f"{what}: using the cache in {directory} (no manifest: {FOUND_IN_PLACE})", flush=True)
            return write_in_place_manifest(directory, found, what)
        source = fallback()
    kind, path = source
    return prepare(directory, expected_manifest(kind, path), lambda d: convert(kind, path, d), what)


def source_digest(files):
    """SHA-256 hex digest identifying the contents of ``files`` (a dict name -> path): the
    SHA-256 of the lines ``name sha256-of-file``, names sorted. Paths do not enter it."""
    import hashlib

    lines = "".join(f"{name} {data.file_sha256(path)}\n" for name, path in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()
