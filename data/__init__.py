"""Data sets: one sub-package per corpus (``data/wikitext2/``), each with a ``prepare.py`` that
writes token files once, plus the helpers the tasks share.

- ``DataError``: the base of every data error train.py reports as one ``error:`` line (exit 2):
  ``DataUnavailable`` (a data set can be found neither locally nor online; the message says how
  to supply it), ``DataFormatError`` (a malformed file: names the file, the line and what is
  allowed, quoting at most ``QUOTE_LIMIT`` characters of it) and ``DataMismatch`` (prepared data
  whose manifest differs from what the run asks for).
- Manifests: every prepared data set has a ``manifest.json`` saying what made it (source, sizes,
  seed, generator / tokenizer identity and hashes). ``ensure_manifest`` checks it before the data
  is reused: ``write_manifest``, ``read_manifest``, ``manifest_differences``, ``file_sha256``.
- Folders built whole (``build_folder``, used by ``ensure_manifest``): a prepared folder is written
  as ``<folder>.partial.<pid>`` beside its final place, its manifest last, and renamed into place
  only when complete. A killed build leaves a ``.partial`` folder that nothing reads (the next
  build removes it); a failed build (a bad source) leaves the previous folder as it was.
- ``sample_windows``: random fixed-length windows of a 1-D token array, a pure function of a seed.
- ``atomic_write`` / ``write_json``: files that readers never see half-written.
- ``ArgumentParser`` / ``command_errors``: the data commands (``python -m data.<...>``) report a bad
  argument or a data problem as one ``error:`` line and exit status 2, as train.py does.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np


class DataError(RuntimeError):
    """A data problem the user must fix (not a bug): train.py prints ``error: <message>`` and
    exits with status 2, without a traceback."""


class DataUnavailable(DataError):
    """A data set is missing and cannot be prepared here; the message says how to supply it."""


QUOTE_LIMIT = 80


def quote(text, limit=QUOTE_LIMIT):
    """``repr`` of ``text`` (str or bytes) cut to ``limit`` characters, with the length when cut,
    for error messages that must not print a 5 KB row."""
    shown = repr(text)
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]}... ({len(text):,} characters)"


class DataFormatError(DataError, ValueError):
    """A malformed data file.

    Args:
        path (str): the file.
        problem (str): what is wrong and what is allowed (e.g. "expected 2 tab-separated columns").
        line (int or None): 1-based line (or record) number, None when it is the whole file.
        content (str, bytes or None): the offending content, quoted through ``quote``.
    """

    def __init__(self, path, problem, line=None, content=None):
        where = f"{path}, line {line}" if line is not None else str(path)
        shown = f"; got {quote(content)}" if content is not None else ""
        super().__init__(f"{where}: {problem}{shown}")
        self.path, self.line = path, line


class DataMismatch(DataError):
    """Prepared data whose manifest differs from what the run asks for (and that cannot be
    rebuilt here); the message names each differing field with both values. ``stored`` (the
    prepared data's manifest, or None) and ``differences`` (``manifest_differences``) let a caller
    say which options would use the data as they are (``tasks/classify.py``)."""

    def __init__(self, message, stored=None, differences=None):
        super().__init__(message)
        self.stored, self.differences = stored, differences


MANIFEST = "manifest.json"


def file_sha256(path, chunk=1 << 20):
    """Hex SHA-256 of the file at ``path`` (read in 1 MiB chunks)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(directory):
    """The manifest dict of a prepared data directory, or None if it has none.

    Raises:
        DataFormatError: the manifest is not a JSON object (names the file and the line).
    """
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFormatError(path, f"not valid JSON ({e.msg}); remove it to prepare the data again",
                              line=e.lineno, content=text.splitlines()[e.lineno - 1] if text else "") from None
    if not isinstance(manifest, dict):
        raise DataFormatError(path, "expected a JSON object of the fields that made the data", content=text)
    return manifest


def write_manifest(directory, manifest):
    """Write ``manifest`` (a JSON-serialisable dict) as ``directory/manifest.json``, atomically.
    Write it last, after the data files: a directory with a manifest is complete."""
    return write_json(os.path.join(directory, MANIFEST), manifest)


def manifest_differences(stored, expected):
    """Fields of ``expected`` whose value differs in ``stored`` (a missing field counts as
    differing), as ``[(key, stored_value, expected_value)]``; JSON round-trips compare equal
    (a tuple and the list it was saved as)."""
    stored = stored or {}
    normal = lambda v: json.loads(json.dumps(v))  # noqa: E731
    return [(k, stored.get(k, "(absent)"), v) for k, v in expected.items()
            if k not in stored or normal(stored[k]) != normal(v)]


def describe_differences(differences):
    """One line: ``key: prepared A, asked B; ...`` for ``manifest_differences``'s result."""
    return "; ".join(f"{k}: prepared {quote(a)}, asked {quote(b)}" for k, a, b in differences)


PARTIAL, OLD = ".partial.", ".old."  # name parts of a folder being built / being replaced


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # another user's live process, or a platform without signals: keep its folder
    return True


def _siblings(directory, marker):
    """(path, pid) of the folders ``<directory><marker><pid>`` beside ``directory``."""
    parent, name = os.path.split(os.path.abspath(directory))
    if not os.path.isdir(parent):
        return []
    out = []
    for entry in os.listdir(parent):
        if entry.startswith(name + marker) and entry[len(name + marker):].isdigit():
            out.append((os.path.join(parent, entry), int(entry[len(name + marker):])))
    return out


def recover_folder(directory):
    """Finish or undo what a build killed half-way left beside ``directory``: ``.partial.<pid>``
    folders of processes that are gone are removed; a ``.old.<pid>`` folder (the previous copy,
    of a process that is gone) is put back when ``directory`` is missing (killed between the two
    renames of ``_swap_in``), else its sub-folders are carried into ``directory`` and it is removed.
    Returns nothing."""
    for path, pid in _siblings(directory, PARTIAL):
        if not _pid_alive(pid):
            shutil.rmtree(path, ignore_errors=True)
    for path, pid in _siblings(directory, OLD):
        if _pid_alive(pid):
            continue
        if not os.path.exists(directory):
            os.replace(path, directory)
            print(f"{directory}: restored the previous copy left by an interrupted build ({path})", flush=True)
        else:
            _carry_subfolders(path, directory)
            shutil.rmtree(path, ignore_errors=True)


def build_folder(directory, build, finish=None):
    """Write a prepared-data folder whole: ``build`` writes into an empty ``<directory>.partial.<pid>``,
    the manifest is written there last, and the folder then replaces ``directory``.

    Sub-folders of the previous ``directory`` that the build did not write (caches made from
    these data that check their own manifest, such as the MLM tokens inside a WikiText-2 folder,
    and downloads) are moved into the new folder; its files are not kept.

    Args:
        directory (str): the folder's final path.
        build (callable): ``build(tmp)`` writes the data files into the empty folder ``tmp``;
            it may raise (a bad source), and then ``directory`` is left as it was.
        finish (callable or None): ``finish(result_of_build)`` -> the manifest dict to write;
            None: ``build`` returns the manifest itself.

    Returns:
        dict: the manifest written.

    Raises:
        whatever ``build`` raises; ``directory`` and its manifest are then untouched.
    """
    directory = os.path.abspath(directory)
    recover_folder(directory)
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    tmp = f"{directory}{PARTIAL}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        result = build(tmp)
        manifest = finish(result) if finish is not None else result
        write_manifest(tmp, manifest)
        _swap_in(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _swap_in(new, directory):
    """Rename the complete folder ``new`` to ``directory``; the previous folder's sub-folders that
    ``new`` lacks are then moved into it and the rest of the previous folder deleted. Killed at
    any point, ``recover_folder`` finishes or undoes it."""
    if not os.path.exists(directory):
        os.replace(new, directory)
        return
    old = f"{directory}{OLD}{os.getpid()}"
    shutil.rmtree(old, ignore_errors=True)
    os.replace(directory, old)
    os.replace(new, directory)
    _carry_subfolders(old, directory)
    shutil.rmtree(old, ignore_errors=True)


def _carry_subfolders(old, new):
    """Move the sub-folders of ``old`` that ``new`` lacks into ``new`` (caches built from the data,
    downloads); a folder being built (``.partial.``) is not carried."""
    for entry in os.listdir(old):
        source = os.path.join(old, entry)
        if os.path.isdir(source) and not os.path.exists(os.path.join(new, entry)) and PARTIAL not in entry:
            os.replace(source, os.path.join(new, entry))


def ensure_manifest(directory, expected, build, what="data", rebuild=True, stale=False):
    """Reuse the prepared data in ``directory`` only if its manifest matches ``expected``;
    otherwise build them whole (``build_folder``).

    Args:
        directory (str): the prepared data's folder.
        expected (dict): the fields that identify the data (source, sizes, seed, generator or
            tokenizer identity and hashes); ``build`` must reproduce exactly these.
        build (callable): ``build(tmp)`` writes the data files into the empty folder ``tmp``
            (never into ``directory``); it runs when there is no manifest or it differs (and
            ``rebuild``). The manifest is written after it, then ``tmp`` replaces ``directory``.
        what (str): the data set's name for messages.
        rebuild (bool): False: a differing manifest raises ``DataMismatch`` instead of rebuilding
            (for data that is expensive or impossible to rebuild here; the folder is kept).
        stale (bool): True: build even when the manifest matches (the caller found its files
            changed since, e.g. a truncated token file).

    Returns:
        The manifest now in ``directory`` (``expected`` plus what ``build`` returned, if a dict).

    Raises:
        DataMismatch: the manifest differs and ``rebuild`` is False (names both values).
        whatever ``build`` raises (``directory`` is then untouched).
    """
    recover_folder(directory)
    stored = read_manifest(directory)
    differences = manifest_differences(stored, expected) if stored is not None else None
    if stored is not None and not differences and not stale:
        return stored
    if differences and not rebuild:
        raise DataMismatch(f"{what} in {directory} were prepared with other options ({describe_differences(differences)}); "
                           f"they are kept. To prepare the asked data, point the run at another folder or delete "
                           f"{directory} (rm -r) and run again", stored, differences)
    if differences:
        print(f"{what}: rebuilding {directory} ({describe_differences(differences)})", flush=True)
    return build_folder(directory, build,
                        lambda extra: {**expected, **(extra if isinstance(extra, dict) else {})})


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


def write_text(path, text):
    """Write the string ``text`` to ``path`` through ``atomic_write``, creating its directory.
    Returns ``path``."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)

    atomic_write(path, write)
    return path


def write_json(path, obj, indent=1, **dump_kwargs):
    """Write ``obj`` as JSON to ``path`` through ``write_text`` (atomic), creating its directory.

    ``indent`` and ``dump_kwargs`` (e.g. ``default=str``) go to ``json.dumps``. Returns ``path``.
    Raises TypeError (from ``json``) for an object it cannot serialize; ``path`` is then untouched.
    """
    return write_text(path, json.dumps(obj, indent=indent, **dump_kwargs))


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one line, ``error: <message>`` on stderr,
    and exit status 2 (argparse's own prints the usage first); ``--help`` is unchanged."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


class command_errors:
    """``with data.command_errors(): ...`` in a data command's ``main``: a ``DataError``, a
    ``ValueError`` (a rejected option value) or a ``FileNotFoundError`` ends the command with one
    ``error: <message>`` line on stderr and exit status 2, without a traceback."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if kind is not None and issubclass(kind, (DataError, ValueError, FileNotFoundError)):
            print(f"error: {error}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        return False
