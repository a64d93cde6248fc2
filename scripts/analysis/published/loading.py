"""Reading the files under ``results/`` for the renderers (and, for ``run_config``, the config files a
run's manifest names), and the two errors of the rendering package:
``SourceMissing`` (a file a block needs is absent) and ``RenderError`` (a block's marker names an
unknown renderer or arguments it does not take, or a malformed number or cell in them). Every reader
raises ``SourceMissing`` naming the file; the marker parsers raise ``RenderError`` naming the renderer.
A base module: it imports no renderer."""
import ast
import csv
import glob
import json
import os
import shlex

from scripts.analysis.runs import RUN_SUFFIX, RunNotFound, open_run


class SourceMissing(FileNotFoundError):
    """A results file a renderer needs does not exist (the message names it)."""


class RenderError(ValueError):
    """A block names an unknown renderer, or arguments the renderer does not take."""


def source(root, rel):
    """The absolute path of ``rel`` (relative to ``root``). Raises SourceMissing when it does not exist."""
    path = os.path.join(root, rel)
    if not os.path.exists(path):
        raise SourceMissing(f"a rendered block needs {rel}, which does not exist")
    return path


def load_json(root, rel):
    """The parsed JSON file ``root/rel``. Raises SourceMissing when it does not exist."""
    with open(source(root, rel)) as f:
        return json.load(f)


def load_jsonl(root, rel):
    """The records of the JSON-lines file ``root/rel`` (a training log), blank lines skipped. Raises
    SourceMissing when it does not exist."""
    with open(source(root, rel)) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_csv(root, rel):
    """The rows (dicts of strings) of the CSV file ``root/rel``. Raises SourceMissing when it does not exist."""
    with open(source(root, rel), newline="") as f:
        return list(csv.DictReader(f))


def sources(root, pattern):
    """The files matching the glob ``pattern`` (relative to ``root``), sorted, as paths relative to
    ``root``. Raises SourceMissing when none matches."""
    found = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, pattern)))
    if not found:
        raise SourceMissing(f"a rendered block needs {pattern}, which matches no file")
    return found


def run_sources(root, pattern):
    """The paths (relative to ``root``, sorted) matching the glob ``pattern``, and the run paths of the
    packed runs matching ``pattern`` + RUN_SUFFIX (``results/lra/*_cpu`` finds ``text_dense_cpu.tar.xz``
    as ``results/lra/text_dense_cpu``). Raises SourceMissing when none matches."""
    found = {os.path.relpath(p, root) for p in glob.glob(os.path.join(root, pattern))}
    found |= {os.path.relpath(p, root)[: -len(RUN_SUFFIX)] for p in glob.glob(os.path.join(root, pattern + RUN_SUFFIX))}
    if not found:
        raise SourceMissing(f"a rendered block needs {pattern}, which matches no file")
    return sorted(found)


def read_text(root, rel):
    """The text of the file ``root/rel``. Raises SourceMissing when it does not exist."""
    with open(source(root, rel)) as f:
        return f.read()


def load_run(root, run):
    """The run ``root/run`` (``runs.open_run``: its folder or packed file). Raises SourceMissing when
    there is neither."""
    try:
        return open_run(os.path.join(root, run))
    except RunNotFound:
        raise SourceMissing(f"a rendered block needs the run {run} (its folder or {run}{RUN_SUFFIX}), "
                            "which does not exist") from None


def run_text(root, run, name):
    """The text of the file ``name`` of the run ``root/run`` (its folder or packed file). Raises
    SourceMissing when the run or the file does not exist."""
    try:
        return open_run(os.path.join(root, run)).read_text(name)
    except RunNotFound:
        raise SourceMissing(f"a rendered block needs {run}/{name} (in the run folder or {run}{RUN_SUFFIX}), "
                            "which does not exist") from None


def marker_numbers(renderer, text, kind=int):
    """The numbers of a marker's comma list ``text`` ("1024" or "0.2,0.5") as ``kind``. Raises
    RenderError naming the renderer and the text when one is not a number."""
    try:
        return [kind(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise RenderError(f"{renderer}: {text!r} is not a comma list of {kind.__name__} numbers") from None


def marker_number(renderer, text, kind=int):
    """The one number of a marker's argument ``text``. Raises RenderError unless it is one number."""
    numbers = marker_numbers(renderer, text, kind)
    if len(numbers) != 1:
        raise RenderError(f"{renderer}: {text!r} is not one {kind.__name__} number")
    return numbers[0]


def marker_cells(renderer, cells, fields):
    """The ``cells`` argument of a marker ("a:b:c,a:b:c") as tuples of len(``fields``) strings.
    Raises RenderError naming the fields when an entry has another number of parts."""
    out = [tuple(cell.split(":")) for cell in cells.split(",") if cell]
    bad = [":".join(c) for c in out if len(c) != len(fields)]
    if bad or not out:
        raise RenderError(f"{renderer}: cells={cells!r}; each entry is {':'.join(fields)}")
    return out


def run_config(root, run):
    """The configuration the run ``root/run`` was started with, as its manifest's train command gives
    it: the keys that its config files assign (top-level assignments of literals, later files over
    earlier ones), then its ``--key=value`` overrides. Raises SourceMissing when the run, its
    command or a config file it names is absent."""
    command = json.loads(run_text(root, run, "manifest.json")).get("train", {}).get("command")
    if not command:
        raise SourceMissing(f"a rendered block needs the train command in {run}/manifest.json; it has none")
    config = {}
    for arg in shlex.split(command)[2:]:
        if arg.endswith(".py") and not arg.startswith("--"):
            for node in ast.parse(read_text(root, arg)).body:
                if isinstance(node, ast.Assign) and [type(t) for t in node.targets] == [ast.Name]:
                    config[node.targets[0].id] = ast.literal_eval(node.value)
        elif arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            try:
                config[key] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                config[key] = value
    return config
