"""Fixtures of the GPU tests (docs/gpu.md). Every module here carries the ``gpu`` marker
(``pytestmark``): pyproject.toml's addopts deselect it from the default run, ``pytest -m gpu``
selects it. The fixture ``device`` skips a test without CUDA, with a reason that says so.

GPU_TESTS_ON_CPU=1 (development only; docs/gpu.md) runs the tests that make sense on a CPU there
(float32 and bfloat16 comparisons, tree attention, float32 training runs), so that their logic can
be checked without a GPU; the tests that need real CUDA (compiled Triton kernels, shared memory,
bfloat16 training, torch.compile) still skip.
"""
import os

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
    """The Fastmax Triton kernels module, compiled for the GPU; skips when Triton interprets
    (TRITON_INTERPRET set before the kernels were imported: they would run on the CPU through the
    interpreter, which is not what these tests check; gpu_check.sh unsets it)."""
    from attention.fastmax import triton_kernels
    interpreted = type(triton_kernels._fwd_kernel).__name__ == "InterpretedFunction"
    if interpreted or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("TRITON_INTERPRET is set, so the Triton kernels are interpreted, not compiled: unset it "
                    "(`env -u TRITON_INTERPRET python -m pytest -m gpu`; scripts/bench/gpu_check.sh does)")
    return triton_kernels


def pytest_collection_finish(session):
    """Start the training runs of test_train_cuda.py in the background once the tests are
    collected (``start_early``: a real GPU only), so that they overlap with the other modules."""
    for module in {getattr(item, "module", None) for item in session.items} - {None}:
        if module.__name__.rsplit(".", 1)[-1] == "test_train_cuda":
            module.start_early(session, module)
