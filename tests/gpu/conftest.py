"""Fixtures of the GPU tests (docs/gpu.md). Every module here carries the ``gpu`` marker
(``pytestmark``): pyproject.toml's addopts deselect it from the default run, ``pytest -m gpu``
selects it. The fixture ``device`` skips a test without CUDA, with a reason that says so.

GPU_TESTS_ON_CPU=1 (development only; docs/gpu.md) runs the tests that make sense on a CPU there
(float32 and bfloat16 comparisons, tree attention, float32 training runs), so that their logic can
be checked without a GPU; the tests that need real CUDA (compiled Triton kernels, shared memory,
bfloat16 training, torch.compile) still skip.

GPU_TESTS_PROGRESS=FILE appends one JSON line per test phase that ran a test or failed, as it
happens: seconds since the session started, the test's id, the phase, the outcome, its duration
and, for a failure, the end of its report. A run stopped by a time limit (pytest's own summary and
junit XML never written) still says which tests passed, which failed and why, and where the time
went (scripts/bench/gpu_check.sh sets it; ``scripts.bench.gpu record_tests`` counts it).
"""
import json
import os
import time

import pytest
import torch

NO_CUDA = ("needs a CUDA GPU (torch.cuda.is_available() is False): run `python -m pytest -m gpu` on a GPU machine "
           "(docs/gpu.md)")


def on_cpu_for_development():
    return os.environ.get("GPU_TESTS_ON_CPU") == "1"


@pytest.fixture(scope="session")
def device():
    """"cuda", or "cpu" under GPU_TESTS_ON_CPU=1; skips otherwise."""
    if torch.cuda.is_available():
        return "cuda"
    if on_cpu_for_development():
        return "cpu"
    pytest.skip(NO_CUDA)


@pytest.fixture(scope="session")
def cuda():
    """"cuda" for the tests that need a real GPU (compiled kernels, bfloat16 training); skips otherwise."""
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)
    return "cuda"


@pytest.fixture(scope="session")
def compiled_triton(cuda):
    """The Fastmax Triton kernels package (``attention.fastmax.kernels``), compiled for the GPU;
    skips when Triton interprets (TRITON_INTERPRET set before the kernels were imported: they would
    run on the CPU through the interpreter, which is not what these tests check; gpu_check.sh
    unsets it)."""
    from attention.fastmax import kernels
    interpreted = type(kernels.chunk._output_kernel).__name__ == "InterpretedFunction"
    if interpreted or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("TRITON_INTERPRET is set, so the Triton kernels are interpreted, not compiled: unset it "
                    "(`env -u TRITON_INTERPRET python -m pytest -m gpu`; scripts/bench/gpu_check.sh does)")
    return kernels


SESSION_START = time.time()
FAILURE_CHARS = 3000  # of a failed test's report, its end (the assertion and the line that raised)


def pytest_runtest_logreport(report):
    """One JSON line per phase to GPU_TESTS_PROGRESS (module docstring): every test's call, any
    phase that did not pass (a setup error, a skip)."""
    path = os.environ.get("GPU_TESTS_PROGRESS")
    if not path or (report.when != "call" and report.passed):
        return
    row = {"elapsed_s": round(time.time() - SESSION_START, 1), "test": report.nodeid, "when": report.when,
           "outcome": report.outcome, "duration_s": round(report.duration, 2)}
    if report.failed:
        row["message"] = report.longreprtext[-FAILURE_CHARS:]
    elif report.skipped and isinstance(report.longrepr, tuple):
        row["message"] = str(report.longrepr[2])
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def pytest_collection_finish(session):
    """Start the training runs of test_train_cuda.py in the background once the tests are
    collected (``start_early``: a real GPU only), so that they overlap with the other modules."""
    for module in {getattr(item, "module", None) for item in session.items} - {None}:
        if module.__name__.rsplit(".", 1)[-1] == "test_train_cuda":
            module.start_early(session, module)
