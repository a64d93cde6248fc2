"""Training smoke tests on the GPU (issue 43 item 1; docs/gpu.md): train.py on the recall task
(multi-query associative recall, generated data: nothing is downloaded), 64 tokens, 4 pairs,
configs/recall/mqar.py's model (2 layers, width 64, one head, so head dim 64), 200 steps, for
softmax, fastmax p = 1 and p = 2 on the PyTorch and the Triton backend, linear and dense (DANet
blocks, configs/attention/dense.py, with --mlp=True: mqar.py's attention-only setting applies to
transformer blocks, and train.py refuses it for DANet's), in float32 and bfloat16 (autocast), and with
``--compile=True`` in float32 for softmax and fastmax (p = 1 and 2 on the PyTorch backend, p = 2
on the Triton backend).

Checks, stated: the run ends with status 0; every logged loss and the final test loss are finite;
the loss falls, the mean of the last 10 logged steps at least FALL = 0.3 nats below the mean of the
first 10 (on the CPU softmax goes from 9.12 to 8.17 in these 200 steps); a compiled run's first
AGREE_STEPS = 5 losses equal the eager float32 run's within rtol AGREE_RTOL = 1e-3 (same seed,
data and initialisation; only rounding differs).

The runs are separate processes run together (the GPU is nearly idle with one tiny model), each
with its own output and data folders; the Triton kernels they need are compiled meanwhile, in
parallel processes (``scripts.bench.gpu.compile_kernels``: head dim 64, causal, float32 and
bfloat16, the kernels "auto" picks at 64 tokens). On a GPU they start as soon as the session's
tests are collected (conftest.py), so they overlap with the other modules.
"""
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import tempfile

import pytest
import torch

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FALL = 0.3
AGREE_STEPS, AGREE_RTOL = 5, 1e-3
STEPS = 200
RUN_TIMEOUT = 240  # seconds per training process (a run takes about 10 s on an H100, compiled ones about a minute)
METHODS = {  # name -> config layers and overrides after configs/recall/mqar.py
    "softmax": ["configs/attention/softmax.py"],
    "fastmax1_pytorch": ["configs/attention/fastmax1.py", "--attention.implementation=pytorch"],
    "fastmax1_triton": ["configs/attention/fastmax1.py", "--attention.implementation=triton"],
    "fastmax2_pytorch": ["configs/attention/fastmax2.py", "--attention.implementation=pytorch"],
    "fastmax2_triton": ["configs/attention/fastmax2.py", "--attention.implementation=triton"],
    "linear": ["configs/attention/linear.py"],
    "dense": ["configs/attention/dense.py", "--mlp=True"],  # mqar.py's mlp=False applies to transformer blocks only
}
TRITON_P = {"fastmax1_triton": 1, "fastmax2_triton": 2}
COMPILED = ("softmax", "fastmax1_pytorch", "fastmax2_pytorch", "fastmax2_triton")
RUNS = [f"{m}-{dtype}" for m in METHODS for dtype in ("float32", "bfloat16")] + [f"{m}-compile" for m in COMPILED]


def needs_cuda(run):
    """Why ``run`` cannot run on a CPU (GPU_TESTS_ON_CPU), or None."""
    if "triton" in run:
        return "the Triton kernels interpreted on a CPU are far too slow for 200 steps"
    if run.startswith("fastmax2_pytorch"):
        return "the chunked p = 2 path takes about a second per layer call on a CPU at these sizes"
    if run.endswith("bfloat16"):
        return "train.py refuses bfloat16 on a CPU"
    if run.endswith("compile"):
        return "torch.compile is checked on the GPU only"
    return None


def command(run, device, tmp):
    """train.py's argument list of ``run`` ("<method>-<float32 | bfloat16 | compile>")."""
    method, kind = run.rsplit("-", 1)
    folder = os.path.join(tmp, run)
    return [sys.executable, "train.py", "configs/recall/mqar.py", *METHODS[method], "--block_size=64",
            "--recall_pairs=4", f"--max_iters={STEPS}", f"--eval_interval={STEPS}", "--log_interval=1",
            f"--device={device}", f"--dtype={'bfloat16' if kind == 'bfloat16' else 'float32'}",
            f"--compile={kind == 'compile'}", "--always_save_checkpoint=False", f"--out_dir={folder}/out",
            f"--recall_dir={folder}/data"]


def launch(run, device, tmp):
    """Run one training; (returncode, the last lines of its output, the logged losses, the final metrics)."""
    env = dict(os.environ, OMP_NUM_THREADS="2", TORCHINDUCTOR_COMPILE_THREADS="4", WANDB_MODE="offline",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    try:
        proc = subprocess.run(command(run, device, tmp), cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)
        returncode, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, output = f"killed after {RUN_TIMEOUT} s", _text(exc.stdout) + _text(exc.stderr)
    out_dir = os.path.join(tmp, run, "out")
    losses, final = [], {}
    if os.path.exists(os.path.join(out_dir, "log.jsonl")):
        with open(os.path.join(out_dir, "log.jsonl")) as f:
            losses = [r["loss"] for r in map(json.loads, f) if "loss" in r and "iter" in r]
    if os.path.exists(os.path.join(out_dir, "final_metrics.json")):
        with open(os.path.join(out_dir, "final_metrics.json")) as f:
            final = json.load(f)
    tail = "\n".join(output.strip().splitlines()[-15:])
    return returncode, tail, losses, final


def _text(data):
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def selected_runs(session, module, device):
    """The runs of this module's selected tests (and the eager float32 runs the compiled ones
    compare with) that can run on ``device``."""
    selected = set()
    for item in session.items:
        if item.module is module and hasattr(item, "callspec"):
            run = item.callspec.params.get("run")
            selected.add(run)
            if run and run.endswith("compile"):
                selected.add(run.replace("compile", "float32"))
    return sorted(r for r in selected if r and (device == "cuda" or not needs_cuda(r)))


def train_all(selected, device, tmp):
    """Run ``selected`` a few at a time (half the CPU count on a GPU); the Triton runs wait for their
    kernels, compiled meanwhile in 4 processes (head dim 64, causal). run -> ``launch``'s result."""
    triton = sorted({TRITON_P[r.split("-")[0]] for r in selected if r.split("-")[0] in TRITON_P})
    jobs = max(1, min(len(selected), (os.cpu_count() or 2) // 2)) if device == "cuda" else 1
    ordered = sorted(selected, key=lambda r: r.split("-")[0] in TRITON_P)  # the others first
    with concurrent.futures.ThreadPoolExecutor(jobs + 1) as pool:
        warm = None
        if triton and device == "cuda":
            from attention.fastmax.kernels import kernel_for
            from scripts.bench.gpu import compile_kernels, kernel_configs
            families = [(p, kernel_for("auto", p, 64, 64)) for p in triton]  # T = --block_size, D = mqar.py's width
            warm = pool.submit(compile_kernels, kernel_configs([64], ["float32", "bfloat16"], families, (True,)), 4)

        def run(r):
            if warm is not None and r.split("-")[0] in TRITON_P:
                warm.result()
            return launch(r, device, tmp)

        return dict(zip(ordered, pool.map(run, ordered)))


EARLY = {}  # "future": the runs started when the session's tests were collected (conftest.py)


def start_early(session, module):
    """Start the runs of ``module`` (this one, as pytest imported it) in a background thread as
    soon as the tests are collected (``pytest_collection_finish`` in conftest.py), on a real GPU
    only: they take a minute or two, mostly waiting, and so overlap with the other GPU test modules."""
    if not torch.cuda.is_available() or "future" in EARLY:
        return
    selected = selected_runs(session, module, "cuda")
    if selected:
        tmp = tempfile.mkdtemp(prefix="gpu_train_")
        EARLY["future"] = concurrent.futures.ThreadPoolExecutor(1).submit(train_all, selected, "cuda", tmp)


@pytest.fixture(scope="module")
def runs(device, request, tmp_path_factory):
    """Every selected run's result: those started at collection, else all at once now."""
    if "future" in EARLY:
        return EARLY["future"].result()
    selected = selected_runs(request.session, request.module, device)
    return train_all(selected, device, str(tmp_path_factory.mktemp("train")))


def result(runs, run, device):
    if device != "cuda" and needs_cuda(run):
        pytest.skip(f"{run}: {needs_cuda(run)}")
    returncode, tail, losses, final = runs[run]
    assert returncode == 0, f"{run} failed (status {returncode}):\n{tail}"
    return losses, final


@pytest.mark.parametrize("run", RUNS)
def test_training_run_learns_without_nans(runs, device, run):
    losses, final = result(runs, run, device)
    assert len(losses) == STEPS, f"{run}: {len(losses)} logged steps"
    assert all(math.isfinite(x) for x in losses), f"{run}: non-finite loss"
    assert math.isfinite(final["test_loss"]), f"{run}: test loss {final['test_loss']}"
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last <= first - FALL, f"{run}: loss {first:.3f} -> {last:.3f} (needs a fall of {FALL})"


@pytest.mark.parametrize("run", [f"{m}-compile" for m in COMPILED])
def test_compiled_and_eager_losses_agree(runs, device, run):
    compiled, _ = result(runs, run, device)
    eager, _ = result(runs, run.replace("compile", "float32"), device)
    assert compiled[:AGREE_STEPS] == pytest.approx(eager[:AGREE_STEPS], rel=AGREE_RTOL), (
        f"{run}: compiled {compiled[:AGREE_STEPS]} vs eager {eager[:AGREE_STEPS]}")

