"""Long Range Arena (Tay et al., 2021) data: one module per task.

Every task module ``data/lra/<task>.py`` provides the same few names, so that ``tasks/classify.py``
treats the five tasks alike:

    NUM_CLASSES: int
    VOCAB_SIZE: int         token ids are in [0, VOCAB_SIZE); id 0 is padding (PAD) everywhere
    MAX_LEN: int            the LRA sequence length of the task (ListOps 2000, Text 1000 or 4000,
                            Retrieval 4000 per document, Image 1024, Pathfinder 32x32 = 1024)
    TWO_TOWER: bool         True for Retrieval (a pair of documents per example)
    ensure(lra_dir, **options) -> None
                            make the task's files under ``lra_dir`` exist in the release layout:
                            nothing to do when the release files are there, otherwise build them
                            from what this machine has (generate, convert) or raise FileNotFoundError
                            naming the missing file and how to get it
    load(lra_dir, split, max_len) -> dict of numpy arrays
                            split in ("train", "val", "test"); ``tokens`` int64 (N, max_len),
                            right-padded with 0 and truncated to max_len; ``lengths`` int64 (N,);
                            ``labels`` int64 (N,) in [0, NUM_CLASSES). Two-tower tasks give
                            ``tokens``/``lengths`` for the first document and
                            ``tokens2``/``lengths2`` for the second. Raises ValueError naming
                            the file and line for malformed input.

``lra_dir`` defaults to the ``LRA_DIR`` environment variable (``default_lra_dir``).
"""
import importlib
import os

TASKS = ("listops", "text", "retrieval", "image", "pathfinder")
SPLITS = ("train", "val", "test")


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
