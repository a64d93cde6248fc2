"""The GPU check (scripts/bench/gpu_check.sh, scripts/bench/gpu.py, docs/gpu.md) kept from rotting
between GPU runs: its dry run on this CPU end to end (tiny sizes, the Triton kernels through the
interpreter, no FLA) writes the folder the GPU run writes; the unpacking of missing packages from
wheels/; the pins of fetch_gpu_wheels.sh; the merge of the folders two device runs bring back;
and the GPU tests' marker, which keeps them out of the default run."""
import ast
import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest

import attention
from scripts.bench import gpu, gpu_wheels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER_FILES = {"bench.csv", "bench.json", "bench.md", "bench.png", "manifest.json", "tests.log",
                "tests_progress.jsonl", "bench_profile.txt"}


def test_dry_run_writes_the_gpu_folder(tmp_path):
    out = tmp_path / "2026-01-01_cpu"
    env = dict(os.environ, GPU_CHECK_OUT=str(out), PYTHON=sys.executable, OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", "scripts/bench/gpu_check.sh", "dry_run"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = set(os.listdir(out))
    assert files <= FOLDER_FILES and len(files) <= 8 and all(os.path.isfile(out / f) for f in files)
    assert {"bench.csv", "bench.json", "bench.md", "bench.png", "manifest.json", "bench_profile.txt"} <= files
    with open(out / "bench_profile.txt") as f:
        profile = f.read()
    assert profile.count("\n== fastmax") == 3 and "failed:" not in profile, profile[:2000]
    scan = profile.split("== BLOCK_V", 1)[1].splitlines()  # the Triton path at 64, 32, 16 value columns
    assert [line.split(":")[0] for line in scan[1:3]] == ["fastmax1_triton", "fastmax2_triton"]
    assert all(line.count("ms") == 0 and line.count(": ") == 4 for line in scan[1:3]), scan
    with open(out / "bench.json") as f:
        data = json.load(f)
    with open(out / "bench.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(data["rows"])
    rows = data["rows"]
    assert data["settings"]["T"] == [32, 64] and data["settings"]["device"] == "cpu"
    # every registered attention has measured rows (the registry's, no list here)
    measured = {gpu.parse_method(r["spec"]).name for r in rows if r["kind"] == "registry" and r["seconds"]}
    assert set(attention.registered()) <= measured
    # the Triton kernels ran (interpreted), forward and backward; SDPA forced to flash
    for label in gpu.TRITON_METHODS:
        assert {r["mode"] for r in rows if r["method"] == label and r["seconds"]} == set(gpu.MODES)
    assert {r["sdpa_backend"] for r in rows if r["method"] == "sdpa" and r["seconds"]} == {"flash (forced)"}
    fla = [r for r in rows if r["kind"] == "fla"]
    assert fla and all(r["seconds"] is None for r in fla)
    if importlib.util.find_spec("fla") is None:
        assert {r["note"] for r in fla if r["causal"]} == {"skipped: fla not installed"}
        assert data["comparisons"] == [{"skipped": "skipped: fla not installed"}]
    assert "f(s) = 1 + s + s^2 / 2" in data["based_vs_fastmax"] and data["aims"]
    with open(out / "manifest.json") as f:
        entry = json.load(f)["bench"]
    assert all(key in entry for key in ("command", "commit", "machine", "date", "versions"))
    with open(out / "bench.md") as f:
        assert "## Aims of issue 43" in f.read()


def make_wheel(folder, name, version="1.0"):
    """A pure-Python wheel of a package ``name`` with an empty __init__.py."""
    path = os.path.join(folder, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "VALUE = 1\n")
        zf.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\nVersion: {version}\n")
    return path


def test_wheels_unpack_only_what_does_not_import(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    make_wheel(wheels, "ea_gpu_probe")
    make_wheel(wheels, "pytest", "0.0")  # importable here: must stay unused
    needed = [("ea_gpu_probe", "ea_gpu_probe", None), ("pytest", "pytest", None), ("ea_absent", "ea_absent", None),
              ("ea_old_only", "ea_old_only", (3, 0))]
    brought, missing = gpu_wheels.bring(needed, str(wheels), str(site))
    assert brought == [("ea_gpu_probe", "ea_gpu_probe-1.0-py3-none-any.whl")]
    assert missing == [("ea_absent", "ea_absent")]
    assert sorted(os.listdir(site)) == ["ea_gpu_probe", "ea_gpu_probe-1.0.dist-info"]
    numpy311 = "numpy-2.2.6-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert gpu_wheels.compatible(numpy311, (3, 11), "x86_64")
    assert not gpu_wheels.compatible(numpy311, (3, 12), "x86_64") and not gpu_wheels.compatible(numpy311, (3, 11), "aarch64")
    assert gpu_wheels.compatible("fla_core-0.6.0-py3-none-any.whl", (3, 13), "aarch64")


def test_fetch_script_pins_every_wheel_the_check_unpacks():
    with open(os.path.join(ROOT, "scripts", "bench", "fetch_gpu_wheels.sh")) as f:
        text = f.read()
    pinned = {name.lower().replace("-", "_") for name in re.findall(r"([A-Za-z][\w.-]*)==\d", text)}
    assert {distribution for _, distribution, _ in gpu_wheels.NEEDED} <= pinned


def test_collect_merges_the_folders_of_two_device_runs(tmp_path):
    tests_run, bench_run, into = tmp_path / "a", tmp_path / "b", tmp_path / "results" / "gpu" / "x"
    for folder, name, entry in ((tests_run, "tests.log", "tests"), (bench_run, "bench.csv", "bench")):
        folder.mkdir()
        (folder / name).write_text("x\n")
        (folder / "manifest.json").write_text(json.dumps({entry: {"command": entry}}))
    assert gpu.collect([str(tests_run), str(bench_run)], str(into)) == ["bench.csv", "manifest.json", "tests.log"]
    with open(into / "manifest.json") as f:
        assert sorted(json.load(f)) == ["bench", "tests"]
    with pytest.raises(ValueError, match="not a folder"):
        gpu.collect([str(tmp_path / "missing")], str(into))


PROGRESS_TESTS = """
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

def test_passes():
    pass

def test_fails():
    assert 1 == 2, "one is not two"

def test_skips():
    pytest.skip("needs a CUDA GPU")

def test_errors(broken):
    pass
"""


def test_progress_file_counts_each_outcome_as_it_happens(tmp_path):
    """tests/gpu/conftest.py's progress hook, loaded into a pytest run of four tests (pass, fail,
    skip, setup error): one JSON line each, the failure's message kept, counted by record_tests."""
    conftest = os.path.join(ROOT, "tests", "gpu", "conftest.py")
    (tmp_path / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('gpu_conftest', {conftest!r})\n"
        "gpu_conftest = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(gpu_conftest)\n"
        "pytest_runtest_logreport = gpu_conftest.pytest_runtest_logreport\n")
    (tmp_path / "test_outcomes.py").write_text(PROGRESS_TESTS)
    progress = tmp_path / "progress.jsonl"
    env = dict(os.environ, GPU_TESTS_PROGRESS=str(progress), PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_outcomes.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:]
    with open(progress) as f:
        rows = {r["test"].split("::")[-1]: r for r in map(json.loads, f)}
    assert set(rows) == {"test_passes", "test_fails", "test_skips", "test_errors"}
    assert rows["test_passes"]["outcome"] == "passed" and rows["test_errors"]["when"] == "setup"
    assert "one is not two" in rows["test_fails"]["message"] and "needs a CUDA GPU" in rows["test_skips"]["message"]
    counts = gpu.test_counts(str(progress))
    assert {k: counts[k] for k in ("tests", "passed", "failed", "errors", "skipped")} == dict(
        tests=3, passed=1, failed=1, errors=1, skipped=1)  # tests: the calls, the skip inside one too
    assert sorted(t.split("::")[-1] for t in counts["failed_tests"]) == ["test_errors", "test_fails"]
    assert gpu.test_counts(str(tmp_path / "missing.jsonl")) == {}


def test_gpu_tests_carry_the_marker_and_stay_out_of_the_default_run():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    addopts = re.search(r'^addopts = "(.*)"$', text, flags=re.M).group(1)
    assert "-m 'not slow and not gpu'" in addopts and re.search(r'^\s*"gpu: ', text, flags=re.M)
    folder = os.path.join(ROOT, "tests", "gpu")
    modules = sorted(f for f in os.listdir(folder) if f.startswith("test_") and f.endswith(".py"))
    assert modules
    for name in modules:
        with open(os.path.join(folder, name)) as f:
            tree = ast.parse(f.read())
        marks = [ast.unparse(node.value) for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)]
        assert marks and "pytest.mark.gpu" in marks[0], f"tests/gpu/{name} lacks pytestmark = pytest.mark.gpu"


def test_compile_kernels_arguments_launch_in_the_interpreter():
    """The arguments ``compile_kernels`` hands to Triton's ``warmup`` on a GPU (it needs CUDA) are
    the kernels' own: each kernel launches with them through the interpreter."""
    from attention.fastmax import triton_kernels as tk
    if type(tk._fwd_kernel).__name__ != "InterpretedFunction":
        pytest.skip("needs TRITON_INTERPRET=1 before the kernels are imported (.ci/run sets it)")
    for p in (1, 2):
        for separate in (False, True):
            args, meta, nv = tk.warmup_arguments(16, 16, 16, p, "cpu", separate)
            assert (meta["QUAD"], meta["SEPARATE"]) == (p == 2, separate)
            for causal in (False, True):
                for name, kernel in tk.KERNELS.items():
                    kernel[(1, nv)](*args[name], CAUSAL=causal, **meta)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        tk.compile_kernels(16, 16, 16, True, 1, "cpu")
