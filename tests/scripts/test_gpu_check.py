"""The GPU check (scripts/bench/gpu_check.sh, scripts/bench/gpu.py, docs/gpu.md) kept from rotting
between GPU runs: its dry run on this CPU end to end (tiny sizes, the Triton kernels through the
interpreter, no FLA) writes the folder the GPU run writes, G0 and the batch scan included; the
aims of issue 56 and the p = 2 crossover computed from rows; the plan of curves; the features
under which FLA's linear attention computes fastmax p = 1 (the identity, without FLA); what each
compiling process runs (``warm_config``, through the interpreter); the unpacking of missing
packages from wheels/; the pins of fetch_gpu_wheels.sh; the merge of the folders two device runs
bring back; and the GPU tests' marker, which keeps them out of the default run."""
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
import torch

import attention
from attention.testing import in_repository
from scripts.bench import fla_baselines, gpu, gpu_wheels

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
    assert profile.count("\n== fastmax") == len(gpu.PROFILED) and "failed:" not in profile, profile[:2000]
    with open(out / "bench.json") as f:
        data = json.load(f)
    with open(out / "bench.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(data["rows"])
    rows = data["rows"]
    settings = data["settings"]
    assert settings["T"] == [32, 64] and settings["device"] == "cpu" and settings["batch"] == 2
    assert {group: entry["status"] for group, entry in data["groups"].items()} == {g: "ok" for g in gpu.GROUP_SHARES}
    # every attention of the repository has measured rows (the registry's, no list here; the dry run's process
    # does not import a file that pytest's --import registered)
    measured = {gpu.parse_method(r["spec"]).name for r in rows if r["kind"] == "registry" and r["seconds"]}
    assert {name for name in attention.registered() if in_repository(name)} <= measured
    # every Triton kernel family ran (interpreted), forward and backward, at B = 1 and in the batch scan
    for label, spec in gpu.OURS.items():
        assert {r["mode"] for r in rows if r["method"] == label and r["seconds"]} == set(gpu.MODES)
        assert {r["spec"] for r in rows if r["method"] == label} == {spec}
    scan = {(r["method"], r["mode"]) for r in rows if r["batch"] == 2 and r["T"] == settings["batch_T"] and r["seconds"]}
    assert scan == {(label, mode) for label in gpu.BATCH_SCAN for mode in gpu.MODES}
    assert {r["sdpa_backend"] for r in rows if r["method"] == "sdpa" and r["seconds"]} == {"flash (forced)"}
    # G0: each family against the float64 PyTorch path, within C1's bfloat16 bounds
    accuracy = data["accuracy"]
    assert accuracy["passed"] == {label: True for label in gpu.ACCURACY_FAMILIES}
    assert [(c["method"], c["T"]) for c in accuracy["cases"]] == [(label, 64) for label in gpu.ACCURACY_FAMILIES]
    assert all(max(c["errors"].values()) <= 0.05 for c in accuracy["cases"])
    # the crossover of the two forced p = 2 kernels, the aims of issue 56 (the batch scan's measured here)
    assert [(c["T"], c["mode"]) for c in data["crossover"]["cells"]] == [(T, m) for m in gpu.MODES for T in (32, 64)]
    assert all(c["faster"] in ("parallel", "chunk") for c in data["crossover"]["cells"])
    scan_aims = [a for a in data["aims"] if a["aim"].startswith("batch scan")]
    assert len(scan_aims) == 2 * len(gpu.BATCH_SCAN) and all(a["ratio"] > 0 for a in scan_aims)
    assert data["triton_compile"] == {"skipped": "not on a CPU: the interpreter runs the kernels from source"}
    fla = [r for r in rows if r["kind"] == "fla"]
    assert fla and all(r["seconds"] is None for r in fla)
    if importlib.util.find_spec("fla") is None:
        assert {r["note"] for r in fla if r["causal"]} == {"skipped: fla not installed"}
        assert data["comparisons"] == [{"skipped": "skipped: fla not installed"}]
    assert "f(s) = 1 + s + s^2 / 2" in data["based_vs_fastmax"] and "sqrt(c1) k_hat_j" in data["linear_vs_fla"]
    with open(out / "manifest.json") as f:
        entry = json.load(f)["bench"]
    assert all(key in entry for key in ("command", "commit", "machine", "date", "versions"))
    with open(out / "bench.md") as f:
        text = f.read()
    assert all(heading in text for heading in ("## Aims of issue 56", "## G0: accuracy", "## p = 2: the parallel kernel"))


def _rows(cells, D=64):
    """bench.csv rows (the fields ``aims`` and ``crossover`` read) of {(method, mode, T, batch): seconds}."""
    return [dict(method=m, D=D, causal=True, mode=mode, T=T, batch=batch, seconds=s) for (m, mode, T, batch), s
            in cells.items()]


SETTINGS = dict(D=64, D_based=16, batch=8, batch_T=16384, crossover_T=[2048, 4096, 8192, 16384])


def test_aims_are_their_time_over_ours_and_the_batch_scan_ratio():
    rows = _rows({("fastmax2_triton", "forward", 16384, 1): 0.010, ("sdpa", "forward", 16384, 1): 0.020,
                  ("fastmax1_triton", "forward", 65536, 1): 0.010, ("sdpa", "forward", 65536, 1): 0.050,
                  ("fastmax2_triton", "forward", 65536, 1): 0.010, ("fla_parallel_based", "forward", 65536, 1): 0.010,
                  ("fastmax2_triton_chunk", "forward", 16384, 1): 0.002,
                  ("fastmax2_triton_chunk", "forward", 16384, 8): 0.012})
    found = {(a["ours"], a["theirs"], a["T"], a["mode"]): a for a in gpu.aims(rows, SETTINGS)}
    p2 = found[("fastmax2_triton", "sdpa", 16384, "forward")]
    assert p2["ratio"] == pytest.approx(2.0) and p2["need"] == 1.5 and p2["met"] is True
    p1 = found[("fastmax1_triton", "sdpa", 65536, "forward")]
    assert p1["ratio"] == pytest.approx(5.0) and p1["need"] == 8 and p1["met"] is False
    based = found[("fastmax2_triton", "fla_parallel_based", 65536, "forward")]  # "above 1": equal times miss it
    assert based["ratio"] == pytest.approx(1.0) and based["strict"] and based["met"] is False
    scan = found[("fastmax2_triton_chunk", "fastmax2_triton_chunk", 16384, "forward")]
    assert scan["ratio"] == pytest.approx(6.0) and scan["need"] == 4 and scan["met"] is True
    assert found[("fastmax1_triton", "fla_chunk_linear_attn_fastmax1", 16384, "forward")]["met"] is None  # not measured
    assert found[(None, None, None, None)]["aim"] == gpu.AIM_AUTO


def test_crossover_compares_the_forced_kernels():
    parallel, chunk = gpu.CROSSOVER
    rows = _rows({(parallel, "forward", 4096, 1): 0.004, (chunk, "forward", 4096, 1): 0.006,
                  (parallel, "forward", 16384, 1): 0.050, (chunk, "forward", 16384, 1): 0.020})
    cells = {(c["T"], c["mode"]): c for c in gpu.crossover(rows, SETTINGS)["cells"]}
    assert len(cells) == 8 and cells[(2048, "forward")]["faster"] is None
    assert cells[(4096, "forward")]["faster"] == "parallel" and cells[(4096, "forward")]["chunk_over_parallel"] == 1.5
    assert cells[(16384, "forward")]["faster"] == "chunk"


def test_curves_plan_the_crossover_and_the_batch_scan():
    settings = dict(SETTINGS, T=[1024, 4096, 16384, 65536])
    planned = gpu.curves(settings)
    triton = [c for c in planned if c["group"] == "triton"]
    assert {c["label"] for c in triton} == set(gpu.OURS)
    for c in triton:
        if c["batch"] == 8:
            assert c["label"] in gpu.BATCH_SCAN and c["T"] == [16384] and c["causal"]
        elif c["label"] in gpu.CROSSOVER:
            assert c["T"] == [1024, 2048, 4096, 8192, 16384, 65536] and c["D"] == 64
    assert [c["label"] for c in planned if c["group"] == "triton"][:2] == ["fastmax1_triton"] * 2  # the aims first
    baselines = {(c["label"], c["D"]) for c in planned if c["group"] == "baselines"}
    assert {("fla_chunk_linear_attn_fastmax1", 64), ("fla_chunk_linear_attn", 64), ("fla_parallel_based", 64),
            ("fla_fused_chunk_based", 16), ("sdpa", 64), ("sdpa", 16), ("fastmax1", 64), ("fastmax2", 64)} <= baselines
    pytorch_path = gpu.parse_method("@configs/attention/fastmax2.py")
    assert gpu.slow_path(pytorch_path) == "Fastmax's PyTorch path"
    assert gpu.slow_path(gpu.parse_method(gpu.OURS["fastmax2_triton"])) is None


def test_fastmax1_features_make_normalized_linear_attention_compute_fastmax_p1():
    """The identity of ``fla_baselines.LINEAR_VS_FLA``, checked without FLA: FLA's normalized causal
    linear attention (o_t = phi_q(t) . sum_{j<=t} phi_k(j) v_j / (phi_q(t) . sum_{j<=t} phi_k(j) + 1e-10),
    written out here) on ``fastmax1_features`` equals fastmax p = 1 (its PyTorch path), float64."""
    B, T, H, D = 2, 37, 3, 16
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, T, H, D, generator=g, dtype=torch.float64) for _ in range(3))  # FLA's layout
    phi_q, phi_k = fla_baselines.fastmax1_features(q, k)
    assert phi_q.shape[-1] == 32 and phi_q.shape[-1] % fla_baselines.FEATURE_MULTIPLE == 0
    states = torch.einsum("bthf,bthe->bthfe", phi_k, v).cumsum(1)
    numerator = torch.einsum("bthf,bthfe->bthe", phi_q, states)
    denominator = (phi_q * phi_k.cumsum(1)).sum(-1, keepdim=True) + 1e-10
    got = (numerator / denominator).transpose(1, 2)
    context = {"head_dim": D, "n_head": H, "block_size": T, "layer_idx": 0}
    expected = attention.build("fastmax", context, p=1, implementation="pytorch").double()(
        *(x.transpose(1, 2) for x in (q, k, v)), True)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="c0, c1 >= 0"):
        fla_baselines.fastmax1_features(q, k, c1=-1.0)


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


def test_warm_config_runs_each_kernel_family_in_the_interpreter():
    """``warm_config``, what each compiling process runs on a GPU, runs every kernel family's forward
    and backward through the interpreter here (the arguments it hands to the kernels package are
    the ones a GPU compiles)."""
    from attention.fastmax.kernels import chunk
    if type(chunk._output_kernel).__name__ != "InterpretedFunction":
        pytest.skip("needs TRITON_INTERPRET=1 before the kernels are imported (.ci/run sets it)")
    configs = gpu.kernel_configs([16], ["bfloat16", "float32"], causal=(True,))
    assert {(c["p"], c["kernel"], c["dtype"]) for c in configs} == {
        (p, kernel, dtype) for p, kernel in gpu.FAMILIES for dtype in ("bfloat16", "float32")}
    for config in configs:
        row = gpu.warm_config(config, device="cpu")
        assert row["error"] is None and row["seconds"] >= 0 and row["D"] == 16, row
