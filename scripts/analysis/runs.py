"""Training runs as the table tools read them, in either of their two forms, and the command that
packs them for ``results/``.

A library of ``scripts/analysis`` (like ``capture.py``): every tool that reads a run (``recall_table``,
``recall_ablation_table``, ``gpt_mini_table``, ``lra_table``, ``loss_curves``, ``published``, ...)
goes through ``open_run`` / ``find_runs``; it is also a command (below).

The two forms of a run
----------------------
- a run folder, as train.py leaves it in ``out/<run>/``: ``manifest.json`` (provenance.py's
  entries ``train``, ``train_resumed_at_<iter>``, ``train_stopped_at_<iter>``), ``final_metrics.json``
  (written at the end of a run), ``log.jsonl`` (one JSON object per line: the start record, the
  training steps, the evaluations), ``train.log`` (the printed output: it also holds lines
  log.jsonl does not, e.g. the parameter count and "saved checkpoint"), and whatever else the
  sweep wrote beside them (eval_ppl.py's ``eval_test.json`` and ``eval.log``), checkpoints too;
- a packed run, as ``results/`` keeps it: ``<run>.tar.xz`` (``RUN_SUFFIX``), one file holding the
  run folder's files (never checkpoints) byte for byte under ``<run>/``: a tar archive (members
  sorted by name, mode 644, owner 0, time 0) compressed with xz (LZMA2, preset 9e), so packing the
  same files again gives the same bytes. ``tar -xJf <run>.tar.xz`` gives the folder back, as does
  ``python -m scripts.analysis.runs unpack``.

A run is named by its run path: the folder, or the packed file without ``RUN_SUFFIX``. Either
form is opened by that path (``open_run("results/recall/sweep_64_4/softmax_T64_N4_d64_lr0.01_s0")``
finds ``softmax_T64_N4_d64_lr0.01_s0.tar.xz`` there), so commands written for a folder work on
its packed form, and the tables, which print run paths, do not change when a folder is packed.

    from scripts.analysis.runs import open_run
    run = open_run("results/recall/sweep_64_4/softmax_T64_N4_d64_lr0.01_s0")
    run.final_metrics["test_accuracy"], run.log[-1], run.manifest["train"]["commit"], run.read_text("train.log")

Evaluation sweeps (``scripts/sweeps/tree_ppl.sh``) write one eval_ppl.py JSON per evaluation;
``results/`` keeps them merged into one table, ``evals.jsonl`` (``EVALS``): one line per JSON
file, sorted by file name, ``{"file": "<name>.json", ...the file's fields in their order}``;
``read_evals`` reads a folder in either form, ``unpack`` writes the JSON files back byte for byte
(``json.dumps(fields, indent=2)``, as eval_ppl.py writes them; ``merge`` checks that before it
removes a file, and records the entry ``evals`` in the folder's manifest.json).

Command
-------
    python -m scripts.analysis.runs pack results/recall [more folders]   # every run folder under them -> <run>.tar.xz
    python -m scripts.analysis.runs unpack results/recall/sweep_64_4/softmax_T64_N4_d64_lr0.01_s0.tar.xz [--to DIR]
    python -m scripts.analysis.runs merge results/tree_sweep             # its eval JSONs -> evals.jsonl
    python -m scripts.analysis.runs unpack results/tree_sweep/evals.jsonl --to DIR    # the JSON files again
    python -m scripts.analysis.runs cat RUN FILE                         # one file of a run, e.g. train.log

``pack`` packs each run folder (a folder with ``final_metrics.json`` or ``log.jsonl`` and no
sub-folder) under the paths, reads the packed file back, checks every member against its file,
then removes the folder (``--keep``: leaves it). Checkpoints (``*.pt``) are refused: archive runs
from ``out/`` with ``archive_runs``, which leaves them out. ``unpack`` writes ``DIR/<run>/`` (default:
beside the packed file) and leaves the packed file; it never overwrites a file. Errors (a missing
or malformed run, a folder that cannot be packed) are one ``error:`` line, exit status 2.
"""
import argparse
import glob
import io
import json
import lzma
import os
import shutil
import sys
import tarfile

from data import DataFormatError

RUN_SUFFIX = ".tar.xz"
FINAL_METRICS, LOG, MANIFEST = "final_metrics.json", "log.jsonl", "manifest.json"
RUN_MARKERS = (FINAL_METRICS, LOG)  # a folder holding one of these is a run folder
EVALS = "evals.jsonl"
XZ_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 8 << 20}]


class RunNotFound(FileNotFoundError):
    """No run at a path: neither a run folder nor a packed run (the message names both places)."""


class RunFormatError(DataFormatError):
    """A packed run that is not one (not xz, not tar, a member outside ``<run>/``), or a file of a run
    that is not what it should be (JSON that does not parse); the message names the file and the line."""


class Run:
    """One training run, a folder or a packed file (see the module's docstring).

    Attributes:
        path (str): the run path (the folder, or the packed file without RUN_SUFFIX), as given.
        source (str): the folder or the packed file.
        packed (bool): whether ``source`` is a packed file.
        name (str): the run's name, the last part of ``path``.
    """

    def __init__(self, path, source, packed):
        self.path, self.source, self.packed = path, source, packed
        self.name = os.path.basename(path)
        self._members = None

    def __repr__(self):
        return f"Run({self.source!r})"

    def _where(self, name):
        return f"{self.source}:{name}" if self.packed else os.path.join(self.source, name)

    def _read_packed(self):
        if self._members is None:
            try:
                with tarfile.open(self.source, "r:xz") as tar:
                    members = {}
                    for info in tar.getmembers():
                        if info.isdir():
                            continue
                        top, _, name = info.name.partition("/")
                        if not info.isfile() or top != self.name or name in ("", ".", "..") or "/" in name:
                            raise RunFormatError(self.source, f"holds {info.name!r}; a packed run holds only files "
                                                              f"{self.name}/<name>")
                        members[name] = tar.extractfile(info).read()
            except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as e:
                raise RunFormatError(self.source, f"not a packed run (a tar.xz archive of the folder {self.name}/): "
                                                  f"{e}") from None
            self._members = members
        return self._members

    def files(self):
        """The names of the run's files, sorted (a folder's files only: not its sub-folders)."""
        if self.packed:
            return sorted(self._read_packed())
        return sorted(n for n in os.listdir(self.source) if os.path.isfile(os.path.join(self.source, n)))

    def has(self, name):
        """Whether the run has the file ``name``."""
        if self.packed:
            return name in self._read_packed()
        return os.path.isfile(os.path.join(self.source, name))

    def read_bytes(self, name):
        """The bytes of the run's file ``name``. Raises RunNotFound when the run has no such file."""
        if not self.has(name):
            have = ", ".join(self.files()) or "no file"
            raise RunNotFound(f"{self._where(name)}: the run has no {name} (it has {have})")
        if self.packed:
            return self._read_packed()[name]
        with open(os.path.join(self.source, name), "rb") as f:
            return f.read()

    def read_text(self, name):
        """The text (UTF-8) of the run's file ``name``. Raises RunNotFound when the run has no such file."""
        return self.read_bytes(name).decode("utf-8")

    def read_json(self, name):
        """The parsed JSON file ``name`` of the run, None when the run has no such file.

        Raises:
            RunFormatError: the file is not valid JSON (names the file and the line).
        """
        if not self.has(name):
            return None
        text = self.read_text(name)
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise RunFormatError(self._where(name), f"not valid JSON ({e.msg})", line=e.lineno) from None

    def read_jsonl(self, name):
        """The records (one JSON object per non-empty line) of the run's file ``name``, None when the run
        has no such file.

        Raises:
            RunFormatError: a line is not JSON (names the file and the line).
        """
        if not self.has(name):
            return None
        records = []
        for number, line in enumerate(self.read_text(name).splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise RunFormatError(self._where(name), f"not JSON ({e.msg})", line=number, content=line) from None
        return records

    @property
    def manifest(self):
        """The run's manifest.json (a dict), None without one. Raises RunFormatError: not a JSON object."""
        manifest = self.read_json(MANIFEST)
        if manifest is not None and not isinstance(manifest, dict):
            raise RunFormatError(self._where(MANIFEST), "expected a JSON object of provenance entries")
        return manifest

    @property
    def final_metrics(self):
        """The run's final_metrics.json (a dict), None without one (a run that has not finished)."""
        return self.read_json(FINAL_METRICS)

    @property
    def log(self):
        """The records of the run's log.jsonl in order, None without one."""
        return self.read_jsonl(LOG)


def packed_path(path):
    """The packed file of the run path ``path``."""
    return os.path.dirname(os.path.join(path, "x")) + RUN_SUFFIX


def open_run(path):
    """The run at ``path``: a run folder, a packed run (``<run>.tar.xz``), a run path whose packed file
    exists (``<path>.tar.xz``), or a run folder's final_metrics.json.

    Raises:
        RunNotFound: none of these exists (the message names the folder and the packed file it looked for).
    """
    if isinstance(path, Run):
        return path
    path = os.fspath(path)
    if os.path.isdir(path):
        return Run(os.path.dirname(os.path.join(path, "x")), path, False)
    if os.path.isfile(path) and path.endswith(RUN_SUFFIX):
        return Run(path[: -len(RUN_SUFFIX)], path, True)
    if os.path.isfile(path) and os.path.basename(path) == FINAL_METRICS:
        folder = os.path.dirname(path)
        return Run(folder, folder or ".", False)
    if os.path.isfile(packed_path(path)):
        return Run(os.path.dirname(os.path.join(path, "x")), packed_path(path), True)
    raise RunNotFound(f"{path}: no run there (neither a run folder nor a packed run {packed_path(path)})")


def _sort_key(run):
    # the order of the final_metrics.json paths the tools sorted before packed runs existed
    return os.path.join(run.path, FINAL_METRICS)


def find_runs(paths, require=FINAL_METRICS):
    """Every run with the file ``require`` (default final_metrics.json: a finished run; None: every
    run) under ``paths``, as Run objects sorted by the path of their final_metrics.json. A path is a
    run (a folder holding one of RUN_MARKERS, a packed file, a run path or a final_metrics.json:
    ``open_run``) or a folder searched recursively for run folders and packed runs. A run found in
    both forms counts once, as its folder.

    Raises:
        RunFormatError: a packed run under the paths is malformed.
    """
    found = {}

    def add(run):
        if not run.packed or run.path not in found:
            found[run.path] = run

    for p in map(os.fspath, paths):
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                if any(m in names for m in RUN_MARKERS):
                    add(Run(os.path.dirname(os.path.join(root, "x")), root, False))
                for n in sorted(names):
                    if n.endswith(RUN_SUFFIX):
                        add(open_run(os.path.join(root, n)))
        elif os.path.isfile(p) or os.path.isfile(packed_path(p)):
            add(open_run(p))
    runs = [r for r in found.values() if require is None or r.has(require)]
    return sorted(runs, key=_sort_key)


def attention_label(cfg, params=()):
    """Row label of a run's config: softmax, fastmax<p>, dense, or the attention name, then
    ``name=value`` for each attention parameter in ``params`` that the config sets (a study of one
    method's options, e.g. ``fastmax1 normalization=paper temperature=128``; unset ones are left out:
    they are the module's defaults)."""
    name = cfg.get("attention", "softmax")
    attention_params = cfg.get("attention_params", {})
    label = f"fastmax{attention_params.get('p', 2)}" if name == "fastmax" else name
    extra = [f"{key}={attention_params[key]:g}" if isinstance(attention_params[key], float)
             else f"{key}={attention_params[key]}" for key in params if key in attention_params]
    return " ".join([label, *extra])


def run_manifest(run):
    """The manifest.json of a run (a Run or anything ``open_run`` takes) as a dict: {} when there is
    no run or no manifest.

    Raises:
        RunFormatError: the manifest is not a JSON object."""
    try:
        return open_run(run).manifest or {}
    except RunNotFound:
        return {}


def run_date(run):
    """When a run (a Run or anything ``open_run`` takes) started training: the ``date`` (ISO 8601
    str) of its manifest's ``train`` entry (written through provenance.py); None without a run, a
    manifest or that entry.

    Raises:
        RunFormatError: the manifest is not a JSON object."""
    return (run_manifest(run).get("train") or {}).get("date")


def run_cpu(run):
    """The CPU model a run (a Run or anything ``open_run`` takes) was trained on, from the train.py
    entries of its manifest.json (``train``, ``train_resumed_at_<iter>``, ``train_stopped_at_<iter>``:
    one per training segment, written through provenance.py): the model name, or the distinct names
    joined by " + " when the segments ran on different CPUs; None when there is no run, it has no
    manifest or its entries name no CPU. Speeds (tokens/s, steps/s) of runs on different CPUs do not
    compare.

    Raises:
        RunFormatError: the manifest is not a JSON object."""
    manifest = run_manifest(run)
    cpus = [(manifest[key].get("machine") or {}).get("cpu") for key in sorted(manifest) if key.startswith("train")]
    return " + ".join(dict.fromkeys(cpu for cpu in cpus if cpu)) or None


# ----------------------------------------------------------------------------- packing


def pack_bytes(name, files):
    """The packed run (bytes of ``<name>.tar.xz``) of ``files`` ({file name: bytes}): a tar archive of
    ``<name>/<file>`` members in name order, mode 644, owner 0, time 0, xz-compressed (XZ_FILTERS)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for file in sorted(files):
            info = tarfile.TarInfo(f"{name}/{file}")
            info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = (
                len(files[file]), 0, 0o644, 0, 0, "", "")
            tar.addfile(info, io.BytesIO(files[file]))
    return lzma.compress(buffer.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, filters=XZ_FILTERS)


def write_packed(path, name, files):
    """Write the packed run of ``files`` to ``path`` (atomically), read it back and check every member.
    Returns ``path``. Raises RunFormatError when the file read back differs."""
    from data import atomic_write

    data = pack_bytes(name, files)

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write)
    back = Run(path[: -len(RUN_SUFFIX)], path, True)
    if back.name != name or {n: back.read_bytes(n) for n in back.files()} != files:
        raise RunFormatError(path, "reads back different files from those packed")
    return path


RUN_FILES = ("manifest.json", "final_metrics.json", "log.jsonl", "train.log", "eval_test.json", "eval.log")


def archive_run(run_dir, dest, extra=()):
    """Pack the ``RUN_FILES`` that the train.py run folder ``run_dir`` has (never checkpoints), and
    the files of it named in ``extra`` (e.g. eval_ppl.py's JSON results), into
    ``dest/<run name>.tar.xz`` (``write_packed``; an existing one is replaced).

    Returns:
        (name, [file, ...]): the run's name and the files packed.

    Raises:
        RunNotFound: ``run_dir`` has no manifest.json (not a finished or stopped train.py run).
        FileExistsError: ``dest/<run name>/`` is a run folder (an archive of the old form).
    """
    name = os.path.basename(os.path.normpath(run_dir))
    if not os.path.isfile(os.path.join(run_dir, MANIFEST)):
        raise RunNotFound(f"{run_dir} has no manifest.json (not a finished or stopped train.py run)")
    if os.path.isdir(os.path.join(dest, name)):
        raise FileExistsError(f"{os.path.join(dest, name)}/ is a run folder already; pack it "
                              f"(python -m scripts.analysis.runs pack {os.path.join(dest, name)}) or remove it")
    files = [f for f in (*RUN_FILES, *sorted(set(extra) - set(RUN_FILES))) if os.path.isfile(os.path.join(run_dir, f))]
    contents = {}
    for f in files:
        with open(os.path.join(run_dir, f), "rb") as fh:
            contents[f] = fh.read()
    os.makedirs(dest, exist_ok=True)
    write_packed(os.path.join(dest, name + RUN_SUFFIX), name, contents)
    return name, files


def run_folders(paths):
    """The run folders under ``paths`` (folders searched recursively): folders holding one of
    RUN_MARKERS, sorted."""
    folders = set()
    for p in paths:
        for root, _, names in os.walk(p):
            if any(m in names for m in RUN_MARKERS):
                folders.add(root.rstrip(os.sep))
    return sorted(folders)


def pack_folder(folder, keep=False):
    """Pack the run folder ``folder`` into ``<folder>.tar.xz`` (every file it holds) and remove the folder
    (``keep``: leave it). Returns the packed file's path.

    Raises:
        RunFormatError: the folder holds a sub-folder or a checkpoint (``*.pt``), or the packed file
            exists with other contents.
    """
    folder = folder.rstrip(os.sep)
    name = os.path.basename(folder)
    entries = sorted(os.listdir(folder))
    subfolders = [e for e in entries if not os.path.isfile(os.path.join(folder, e))]
    if subfolders:
        raise RunFormatError(folder, f"holds {', '.join(subfolders)}, not only files: not one run folder")
    checkpoints = [e for e in entries if e.endswith(".pt")]
    if checkpoints:
        raise RunFormatError(folder, f"holds checkpoints ({', '.join(checkpoints)}); archive the run with "
                                     "python -m scripts.analysis.archive_runs, which leaves them out")
    files = {}
    for e in entries:
        with open(os.path.join(folder, e), "rb") as f:
            files[e] = f.read()
    path = folder + RUN_SUFFIX
    if os.path.exists(path):
        existing = open_run(path)
        if {n: existing.read_bytes(n) for n in existing.files()} != files:
            raise RunFormatError(path, f"exists with other contents than {folder}/; remove one of them")
    write_packed(path, name, files)
    if not keep:
        shutil.rmtree(folder)
    return path


def unpack(path, to=None):
    """Write the files of the packed run (or merged ``evals.jsonl``) ``path`` back: ``<to>/<run>/`` for a
    run (default ``to``: the packed file's folder), ``<to>/<name>.json`` for each evaluation (default:
    the folder of evals.jsonl). Never overwrites a file. Returns the paths written.

    Raises:
        FileExistsError: a file to write exists.
        RunNotFound, RunFormatError: ``path`` is not a packed run or an evals.jsonl.
    """
    if os.path.basename(path) == EVALS:
        out = to or os.path.dirname(path)
        items = [(n, json.dumps(r, indent=2).encode()) for n, r in _read_jsonl_evals(path)]
    else:
        run = open_run(path)
        if not run.packed:
            raise RunFormatError(path, f"is a run folder already (unpack takes a packed run, <run>{RUN_SUFFIX})")
        out = os.path.join(to or os.path.dirname(run.source), run.name)
        items = [(n, run.read_bytes(n)) for n in run.files()]
    targets = [os.path.join(out, n) for n, _ in items]
    existing = [t for t in targets if os.path.exists(t)]
    if existing:
        raise FileExistsError(f"{existing[0]} exists; unpack into another folder (--to)")
    os.makedirs(out, exist_ok=True)
    for target, (_, data) in zip(targets, items):
        with open(target, "wb") as f:
            f.write(data)
    return targets


# ----------------------------------------------------------------------------- evaluation sweeps


def _read_jsonl_evals(path):
    evals = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise RunFormatError(path, f"not JSON ({e.msg})", line=number, content=line) from None
            if not isinstance(record, dict) or not isinstance(record.get("file"), str):
                raise RunFormatError(path, 'expected {"file": "<name>.json", ...the file\'s fields}', line=number,
                                     content=line)
            name = record.pop("file")
            evals.append((name, record))
    return evals


def read_evals(folder):
    """The evaluation results of a sweep folder: [(file name, parsed JSON)] of its ``*.json`` files
    (but manifest.json) and of the lines of its ``evals.jsonl``, sorted by file name. A file that does
    not parse is left out with a warning (a sweep killed while writing).

    Raises:
        RunFormatError: evals.jsonl is malformed, or names a file that is also in the folder.
    """
    evals = {}
    merged = os.path.join(folder, EVALS)
    if os.path.exists(merged):
        evals.update(_read_jsonl_evals(merged))
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        name = os.path.basename(path)
        if name == MANIFEST:
            continue
        if name in evals:
            raise RunFormatError(merged, f"holds {name}, which is also a file in {folder}; remove one of them")
        with open(path) as f:
            try:
                evals[name] = json.load(f)
            except json.JSONDecodeError:
                print(f"warning: {path} is not valid JSON, skipped", file=sys.stderr)
    return sorted(evals.items())


def merge(folder, keep=False):
    """Merge the eval JSON files of ``folder`` (every ``*.json`` but manifest.json) into its
    ``evals.jsonl`` (lines already there are kept; all sorted by file name) and remove them
    (``keep``: leave them). Each must be a JSON object written as ``json.dumps(fields, indent=2)``,
    so ``unpack`` gives its bytes back. Returns the number of files merged.

    Raises:
        RunFormatError: a file is not such an object (nothing is changed then).
    """
    paths = [p for p in sorted(glob.glob(os.path.join(folder, "*.json"))) if os.path.basename(p) != MANIFEST]
    merged = os.path.join(folder, EVALS)
    evals = dict(_read_jsonl_evals(merged)) if os.path.exists(merged) else {}
    for path in paths:
        with open(path) as f:
            text = f.read()
        try:
            record = json.loads(text)
        except json.JSONDecodeError as e:
            raise RunFormatError(path, f"not valid JSON ({e.msg})", line=e.lineno) from None
        if not isinstance(record, dict) or "file" in record or json.dumps(record, indent=2) != text:
            raise RunFormatError(path, "not a JSON object as eval_ppl.py writes it (json.dumps(fields, indent=2), "
                                       "no key 'file'): merging would not keep its bytes")
        if os.path.basename(path) in evals:
            raise RunFormatError(merged, f"holds {os.path.basename(path)} already")
        evals[os.path.basename(path)] = record
    from data import write_text

    write_text(merged, "".join(json.dumps({"file": name, **record}) + "\n" for name, record in sorted(evals.items())))
    if dict(_read_jsonl_evals(merged)) != evals:
        raise RunFormatError(merged, "reads back other results than those merged")
    if not keep:
        for path in paths:
            os.remove(path)
    return len(paths)


# ----------------------------------------------------------------------------- command


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="pack every run folder under the paths into <run>.tar.xz")
    p.add_argument("paths", nargs="+")
    p.add_argument("--keep", action="store_true", help="leave the folders")
    p = sub.add_parser("unpack", help="write a packed run's folder (or evals.jsonl's JSON files) back")
    p.add_argument("paths", nargs="+")
    p.add_argument("--to", default=None, help="folder to write into (default: beside the packed file)")
    p = sub.add_parser("merge", help="merge a sweep folder's eval JSON files into its evals.jsonl")
    p.add_argument("folders", nargs="+")
    p.add_argument("--keep", action="store_true", help="leave the JSON files")
    p = sub.add_parser("cat", help="print one file of a run")
    p.add_argument("run")
    p.add_argument("file")
    args = ap.parse_args(argv)
    try:
        if args.command == "pack":
            missing = [p for p in args.paths if not os.path.isdir(p)]
            if missing:
                raise RunNotFound(f"not a folder: {', '.join(missing)}")
            folders = run_folders(args.paths)
            if not folders:
                raise RunNotFound(f"no run folder (one holding {' or '.join(RUN_MARKERS)}) under "
                                  f"{', '.join(args.paths)}")
            before = after = 0
            for folder in folders:
                before += sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
                after += os.path.getsize(pack_folder(folder, args.keep))
            print(f"packed {len(folders)} run folder(s): {before:,} bytes -> {after:,} bytes")
        elif args.command == "unpack":
            for path in args.paths:
                written = unpack(path, args.to)
                print(f"{path}: wrote {len(written)} file(s) to {os.path.dirname(written[0]) if written else args.to}")
        elif args.command == "merge":
            import provenance

            for folder in args.folders:
                n = merge(folder, args.keep)
                provenance.record(os.path.join(folder, EVALS.split(".")[0]), extra={"merged_files": n})
                print(f"{folder}: merged {n} file(s) into {os.path.join(folder, EVALS)}")
        else:
            sys.stdout.write(open_run(args.run).read_text(args.file))
    except (RunNotFound, RunFormatError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
