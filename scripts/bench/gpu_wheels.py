"""Bring the Python packages the GPU check needs onto a bare machine (docs/gpu.md), from the wheels
in wheels/ that scripts/bench/fetch_gpu_wheels.sh downloads: for every module of NEEDED that does
not import, its wheel is unpacked into a folder (default .gpu_site/, git-ignored) that
scripts/bench/gpu_check.sh puts on PYTHONPATH after the repository. Pure-Python wheels fit any
Python; numpy's must match this Python (cpXY) and machine. No pip, no network, nothing installed
into the machine's Python; a module that imports already is left alone (never shadowed).

Standard library only: it runs before numpy exists.

    python -m scripts.bench.gpu_wheels [--wheels wheels] [--site .gpu_site]

Exit status 0 when the REQUIRED modules import afterwards (a warning names any other module still
missing); otherwise 1, with one ``error:`` line naming them and the wheels that would bring them.
"""
import argparse
import importlib
import importlib.machinery
import importlib.util
import os
import platform
import sys
import zipfile

# (module, wheel distribution name as in the file name, only below this Python (major, minor) or None):
# the repo's imports beyond torch and triton (numpy, tqdm: REQUIRED), pytest and its dependencies (the
# tests command), fla-core and its (the benchmark's FLA rows, which say "skipped: fla not installed"
# without it).
REQUIRED = ("numpy", "tqdm")
NEEDED = [
    ("numpy", "numpy", None),
    ("tqdm", "tqdm", None),
    ("pytest", "pytest", None),
    ("iniconfig", "iniconfig", None),
    ("pluggy", "pluggy", None),
    ("packaging", "packaging", None),
    ("pygments", "pygments", None),
    ("exceptiongroup", "exceptiongroup", (3, 11)),
    ("tomli", "tomli", (3, 11)),
    ("einops", "einops", None),
    ("fla", "fla_core", None),
]


def compatible(filename, python=None, machine=None):
    """Whether the wheel ``filename`` installs on this Python (``python`` (major, minor)) and
    machine (``platform.machine()``): pure (py3-none-any) or CPython cpXY for this version, abi cpXY
    or abi3 / none, platform any or a manylinux tag for this machine."""
    python = python or sys.version_info[:2]
    machine = machine or platform.machine()
    parts = filename[:-len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        return False
    py_tags, abi_tags, plat_tags = (set(t.split(".")) for t in parts[-3:])
    cp = f"cp{python[0]}{python[1]}"
    python_ok = bool(py_tags & {"py3", f"py{python[0]}{python[1]}", cp})
    abi_ok = bool(abi_tags & {"none", "abi3", cp})
    plat_ok = "any" in plat_tags or any(t.startswith(("manylinux", "musllinux")) and t.endswith(machine)
                                        for t in plat_tags)
    return python_ok and abi_ok and plat_ok


def find_wheel(distribution, wheels, python=None, machine=None):
    """The newest-named compatible wheel of ``distribution`` in the folder ``wheels``, or None."""
    if not os.path.isdir(wheels):
        return None
    prefix = distribution.lower().replace("-", "_") + "-"
    found = sorted(f for f in os.listdir(wheels) if f.lower().startswith(prefix) and compatible(f, python, machine))
    return os.path.join(wheels, found[-1]) if found else None


def importable(module, site=None):
    """Whether Python finds the top-level ``module`` on its path or in the folder ``site`` (which the
    check's later commands get on PYTHONPATH); not imported: importing fla would start CUDA here."""
    if importlib.util.find_spec(module) is not None:
        return True
    return site is not None and importlib.machinery.PathFinder.find_spec(module, [site]) is not None


def bring(needed=NEEDED, wheels="wheels", site=".gpu_site"):
    """Unpack the wheel of every module of ``needed`` that does not import into ``site`` (created;
    gpu_check.sh puts it on PYTHONPATH). Returns (brought: [(module, wheel)], missing: [(module,
    distribution)] that still do not import)."""
    os.makedirs(site, exist_ok=True)
    site = os.path.abspath(site)
    importlib.invalidate_caches()
    brought, missing = [], []
    for module, distribution, below in needed:
        if below is not None and sys.version_info[:2] >= below:
            continue
        if importable(module, site):
            continue
        wheel = find_wheel(distribution, wheels)
        if wheel is not None:
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(site)
            importlib.invalidate_caches()
            brought.append((module, os.path.basename(wheel)))
        if not importable(module, site):
            missing.append((module, distribution))
    return brought, missing


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheels", default="wheels", help="folder of wheels (scripts/bench/fetch_gpu_wheels.sh)")
    ap.add_argument("--site", default=".gpu_site", help="where missing packages are unpacked (on PYTHONPATH)")
    args = ap.parse_args(argv)
    brought, missing = bring(NEEDED, args.wheels, args.site)
    for module, wheel in brought:
        print(f"gpu_wheels: {module} from {wheel} -> {args.site}")
    where = (f"no usable wheel in {args.wheels}/ (bash scripts/bench/fetch_gpu_wheels.sh on a connected machine; "
             f"NUMPY_PYTHONS for other Pythons than {platform.python_version()})")
    optional = [m for m, _ in missing if m not in REQUIRED]
    if optional:
        print(f"gpu_wheels: warning: {', '.join(optional)} not importable and {where}: without pytest the tests "
              f"command cannot run, without fla the benchmark's FLA rows are skipped", file=sys.stderr)
    required = [f"{m} ({d} wheel for cp{sys.version_info[0]}{sys.version_info[1]}, {platform.machine()})"
                for m, d in missing if m in REQUIRED]
    if required:
        print(f"error: missing {', '.join(required)}: not importable and {where}", file=sys.stderr)
        return 1
    if not missing:
        print(f"gpu_wheels: every module of the check imports (Python {platform.python_version()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
