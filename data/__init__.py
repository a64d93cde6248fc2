"""Data sets: one sub-package per corpus (``data/wikitext2/``), each with a ``prepare.py`` that
writes token files once, plus the helpers the tasks share.

- ``DataUnavailable``: a data set can be found neither locally nor online; the message says how
  to supply it. Every data module raises it (or a subclass), so train.py reports it the same way.
- ``sample_windows``: random fixed-length windows of a 1-D token array, a pure function of a seed.
- ``atomic_write`` / ``write_json``: files that readers never see half-written.
"""
import json
import os

import numpy as np


class DataUnavailable(RuntimeError):
    """A data set is missing and cannot be prepared here; the message says how to supply it."""


def sample_windows(tokens, n, length, seed, name="split"):
    """``n`` windows of ``length`` consecutive tokens at uniformly random starts.

    Every start in [0, len(tokens) - length] is possible, so the last window (ending at the
    last token) can be drawn. The draw uses ``numpy.random.default_rng(seed)``: the same seed
    gives the same windows on every machine.

    Args:
        tokens: 1-D array of token ids (e.g. a uint16 memmap), N tokens.
        n (int): number of windows.
        length (int): tokens per window (a language-model batch of block size T needs T + 1).
        seed: anything ``numpy.random.default_rng`` accepts (an int or a list of ints).
        name (str): what ``tokens`` is, for the error message (e.g. "val").

    Returns:
        np.ndarray of shape (n, length), dtype int64.

    Raises:
        ValueError: N < length (no window fits); the message gives both lengths.
    """
    if len(tokens) < length:
        raise ValueError(f"{name} has {len(tokens):,} tokens, fewer than the {length:,} a window needs "
                         f"(block_size + 1 for language modelling); use a smaller block_size or more data")
    starts = np.random.default_rng(seed).integers(0, len(tokens) - length + 1, size=n)
    return np.stack([np.asarray(tokens[s:s + length], dtype=np.int64) for s in starts])


def atomic_write(path, write):
    """Call ``write(tmp)`` on a temporary path, then rename it to ``path``: readers never see a
    half-written file, and a crash leaves the previous file (if any) untouched. The temporary name
    is unique per process, so concurrent writers never share it."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path, obj, indent=1, **dump_kwargs):
    """Write ``obj`` as JSON to ``path`` through ``atomic_write``, creating its directory.

    ``indent`` and ``dump_kwargs`` (e.g. ``default=str``) go to ``json.dump``. Returns ``path``.
    Raises TypeError (from ``json``) for an object it cannot serialize; ``path`` is then untouched.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=indent, **dump_kwargs)

    atomic_write(path, write)
    return path
