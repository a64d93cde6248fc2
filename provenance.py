"""Where a result came from: the ``manifest.json`` of every folder under ``results/``.

Every script that writes results calls ``record(out)`` with its output path (``results/<experiment>/<name>``
without extension): the folder's ``manifest.json`` gets (or replaces) the entry ``<name>`` with

- ``command``: the command line that made it (``python -m scripts.bench.attention --T 256,...``);
- ``commit``: the repository's HEAD when the run started, "+dirty" if tracked code differed;
- ``machine``: CPU model, logical cores, memory (GiB), OS, GPU name if any;
- ``date``: UTC, ISO 8601, when the entry was written;
- ``versions``: Python and the packages the numbers depend on;
- whatever ``extra`` the script adds (e.g. the torch threads it used).

One folder holds one experiment; its entries are the runs (or files) that make it up. Results
made before this module existed carry entries written from their logs and the git history, with
"unknown" where those do not say (``"reconstructed": true``).
"""
import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys

import torch

from data import MANIFEST, read_manifest, write_json

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGES = ("torch", "numpy", "triton", "transformers", "tiktoken", "datasets")


def git_commit():
    """The repository's HEAD commit, "+dirty" when tracked code differs from it (changes under
    results/ and docs/ and in README.md, whose tables are rendered from results/, do not count),
    or "unknown" (no git, not a checkout). Call it when a run
    starts: code edited during a long run is not what made the result."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":!results", ":!docs", ":!README.md"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def machine():
    """This machine as a dict: ``cpu`` (model name), ``cores`` (logical), ``memory_gib``, ``os``,
    ``gpu`` (CUDA device name or None)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1)
    except (ValueError, OSError, AttributeError):
        memory = None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory, "os": platform.platform(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def versions():
    """``{"python": "3.11.7", "torch": ..., ...}`` for Python and PACKAGES ("not installed" if absent)."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def command_line(argv=None):
    """The command line of this process as a user would type it from the repository root: a
    module run with ``python -m`` is named by its module (``python -m scripts.bench.tree ...``)."""
    argv = list(sys.argv if argv is None else argv)
    script = os.path.abspath(argv[0]) if argv else ""
    if script.startswith(ROOT + os.sep) and script.endswith(".py"):
        rel = os.path.relpath(script, ROOT)[:-3]
        head = ["python", "-m", rel.replace(os.sep, ".")] if os.sep in rel else ["python", rel + ".py"]
    else:
        head = ["python", *argv[:1]]
    return shlex.join(head + argv[1:])


def record(out, commit=None, extra=None, argv=None, command=None):
    """Add the entry of one output to its folder's manifest (created if absent; an entry of the
    same name is replaced). Write it after the outputs: an entry means they are complete.

    Args:
        out (str): the output path without extension, ``results/<experiment>/<name>``; the entry
            is ``<name>`` in ``results/<experiment>/manifest.json``.
        commit (str | None): ``git_commit()`` taken when the run started (default: now).
        extra (dict | None): more fields for the entry (JSON-serialisable).
        argv (list | None): the command line (default ``sys.argv``), unless ``command`` gives it as a string.

    Returns:
        The manifest's path.

    Raises:
        data.DataFormatError: the existing manifest is not valid JSON (it is left untouched).
    """
    folder, name = os.path.split(os.path.abspath(out))
    path = os.path.join(folder, MANIFEST)
    manifest = read_manifest(folder) or {}
    manifest[name] = {"command": command or command_line(argv), "commit": commit or git_commit(), "machine": machine(),
                      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      "versions": versions(), **(extra or {})}
    return write_json(path, dict(sorted(manifest.items())))
