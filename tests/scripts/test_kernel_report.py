"""Tests of scripts/bench/kernel_report.py (issue 56, C3): the cuobjdump parser, the limits, the
table and exit status, the launches recorded through ``common.record_only`` (a stand-in kernels
API here; the real one when it exists), and one real offline compilation for sm_90 of a small
bfloat16 product kernel defined below (no GPU needed)."""
import json
import os

import pytest
import torch
import triton
import triton.language as tl

from attention.fastmax.kernels import common
from attention.fastmax.kernels.common import mm
from scripts.bench import kernel_report as kr

# cuobjdump --dump-resource-usage of a 64 x 64 bf16 tl.dot kernel compiled for sm_90 (Triton 3.9),
# followed by a made-up second function that spills
CUOBJDUMP_OUTPUT = """
Resource usage:
 Common:
  GLOBAL:0
 Function dot_kernel:
  REG:64 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:576 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function spilling_kernel:
  REG:255 STACK:48 SHARED:0 LOCAL:8 CONSTANT[0]:400 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


@triton.jit
def bf16_product(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr, DOT: tl.constexpr):
    """c = a @ b for BLOCK x BLOCK tiles through the kernels' ``mm``."""
    r = tl.arange(0, BLOCK)
    tile = r[:, None] * BLOCK + r[None, :]
    tl.store(c_ptr + tile, mm(tl.load(a_ptr + tile), tl.load(b_ptr + tile), DOT))


class FakeKernels:
    """A stand-in for ``attention.fastmax.kernels``: one launch per pass of ``bf16_product``, the
    block set by the pass (so the two passes are two distinct compilations)."""

    @staticmethod
    def _launch(x, block):
        out = torch.empty(block, block, dtype=torch.float32)
        common.launch(bf16_product, (1,), x, x, out, BLOCK=block, DOT=common.dot_mode(), num_warps=4)

    @staticmethod
    def forward(q, k, v, kl, ka, kb, rho, has_key, causal, coeffs, chunk, kernel="auto"):
        FakeKernels._launch(q, 16)
        return torch.empty_like(v), torch.empty_like(rho)

    @staticmethod
    def backward(g, delta, q, k, v, kl, ka, kb, rho, causal, coeffs, chunk, kernel="auto"):
        FakeKernels._launch(q, 32)
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None, None, None


def _row(**changes):
    row = dict(D=64, Dv=64, dtype="bfloat16", registers=128, stack_bytes=0, shared_bytes=65_536,
               static_shared_bytes=0, tensor_cores=True, has_dot=True, error=None)
    return dict(row, **changes)


def test_parse_resource_usage():
    usage = kr.parse_resource_usage(CUOBJDUMP_OUTPUT)
    assert set(usage) == {"dot_kernel", "spilling_kernel"}
    assert usage["dot_kernel"]["REG"] == 64 and usage["dot_kernel"]["STACK"] == 0
    assert usage["dot_kernel"]["SHARED"] == 1024 and usage["dot_kernel"]["CONSTANT[0]"] == 576
    assert (usage["spilling_kernel"]["STACK"], usage["spilling_kernel"]["LOCAL"]) == (48, 8)


def test_tensor_core_and_product_detection():
    assert kr.uses_tensor_cores("  wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%r1}")
    assert kr.uses_tensor_cores("\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1}")
    assert not kr.uses_tensor_cores("\tfma.rn.f32 %f3, %f1, %f2, %f3;\n\twgmma.fence.sync.aligned;")
    assert kr.has_product("%5 = tt.dot %3, %4, %cst : tensor<16x16xbf16>")
    assert not kr.has_product("%5 = arith.addf %3, %4")


def test_limits():
    assert kr.check_limits(_row()) == []
    assert kr.check_limits(_row(stack_bytes=16)) == ["stack 16 B (spills)"]
    assert kr.check_limits(_row(registers=256)) == ["256 registers > 255"]
    assert kr.check_limits(_row(registers=255)) == []
    # shared memory: the H100's limit always, sm_86 / sm_89's at D, Dv <= 64 (static shared included)
    assert "sm_86/89" in kr.check_limits(_row(shared_bytes=120_000))[0]
    assert kr.check_limits(_row(shared_bytes=101_376)) == []
    assert "sm_86/89" in kr.check_limits(_row(shared_bytes=101_376, static_shared_bytes=1024))[0]
    assert kr.check_limits(_row(D=128, Dv=128, shared_bytes=120_000)) == []
    assert kr.check_limits(_row(D="64/128", Dv="64/128", shared_bytes=120_000)) == []  # rows merged over D
    assert "(sm_90)" in kr.check_limits(_row(D=128, Dv=128, shared_bytes=240_000))[0]
    # tensor cores: required of bf16 kernels with a product only
    assert kr.check_limits(_row(tensor_cores=False)) == ["bf16 products without mma/wgmma"]
    assert kr.check_limits(_row(dtype="float32", tensor_cores=False)) == []
    assert kr.check_limits(_row(tensor_cores=False, has_dot=False)) == []
    assert len(kr.check_limits(_row(stack_bytes=8, registers=300, tensor_cores=False))) == 3
    assert kr.check_limits(_row(error="CompilationError: x", registers=None))[0].startswith("compile failed")


def test_largest_head_dim_of_merged_rows():
    assert kr.largest_head_dim(_row(D="16/64", Dv=16)) == 64
    assert kr.largest_head_dim(_row(D=16, Dv=16)) == 16


def test_configurations_are_the_gpu_benchmarks():
    configs = kr.configurations()
    assert len(configs) == 2 * 3 * 2 * 2  # D, (p, kernel), causal, dtype
    assert {(c["p"], c["kernel"]) for c in configs} == {(1, "chunk"), (2, "chunk"), (2, "parallel")}
    assert all(c["D"] == c["Dv"] and c["chunk"] == (128 if c["p"] == 2 else 64) for c in configs)
    assert {c["dtype"] for c in configs} == {"bfloat16", "float32"} and {c["D"] for c in configs} == {16, 64}


def test_launches_recorded_through_record_only_with_a_stand_in_api():
    configs = kr.configurations([16], ["bfloat16", "float32"])[:2]
    pairs = kr.collect_jobs(configs, api=FakeKernels)
    assert [c["pass"] for c, _ in pairs] == ["forward", "backward"] * 2
    config, job = pairs[0]
    assert job["name"] == "bf16_product" and job["qualname"] == "bf16_product"
    assert job["file"] == os.path.abspath(__file__)
    assert job["signature"] == {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32", "BLOCK": "constexpr",
                                "DOT": "constexpr"}
    assert job["constexprs"] == {"BLOCK": 16, "DOT": "tf32"}  # as on a GPU, whatever TRITON_INTERPRET says
    assert (job["num_warps"], job["num_stages"]) == (4, None)
    assert pairs[2][1]["signature"]["a_ptr"] == "*fp32"
    distinct = kr.distinct_jobs(pairs + pairs)
    assert len(distinct) == 4 and all(len(cs) == 2 for _, cs in distinct.values())
    assert not common._RECORD_ONLY[0]  # launching is on again


def test_launches_of_the_real_kernels_package():
    """Skipped until ``attention.fastmax.kernels`` exposes ``forward`` and ``backward``."""
    pytest.importorskip("attention.fastmax.kernels")
    if kr.kernels_api() is None:
        pytest.skip("attention.fastmax.kernels has no forward / backward yet")
    for config in kr.configurations([16], ["bfloat16"]):
        pairs = kr.collect_jobs([config])
        assert {c["pass"] for c, _ in pairs} == {"forward", "backward"}
        for _, job in pairs:
            assert job["constexprs"]["DOT"] == kr.GPU_DOT
            assert all(t == "constexpr" for name, t in job["signature"].items() if name in job["constexprs"])


def test_offline_compile_for_sm90_of_a_bf16_product():
    """A real compilation in a clean spawned worker: tensor cores, no stack; and the interpreter's
    emulation (DOT "emulate": float32 products) is caught by the tensor-core limit."""
    _, job = kr.collect_jobs(kr.configurations([16], ["bfloat16"])[:1], api=FakeKernels)[0]
    emulated = dict(job, constexprs=dict(job["constexprs"], DOT="emulate"))
    before = os.environ.get("TRITON_INTERPRET")
    real, emulation = kr.compile_all([job, emulated], workers=2)
    assert os.environ.get("TRITON_INTERPRET") == before
    assert real["error"] is None, real["error"]
    assert real["tensor_cores"] and real["has_dot"] and real["stack_bytes"] == 0
    assert 0 < real["registers"] <= 255 and real["shared_bytes"] >= 0 and real["compile_s"] > 0
    row = dict(D=16, Dv=16, dtype="bfloat16", **real)
    assert kr.check_limits(row) == []
    assert emulation["error"] is None and emulation["has_dot"] and not emulation["tensor_cores"]
    assert kr.check_limits(dict(row, **emulation)) == ["bf16 products without mma/wgmma"]


def test_main_prints_the_table_writes_json_and_fails_on_a_missed_limit(monkeypatch, tmp_path, capsys):
    job = dict(name="k", constexprs={"BT": 64, "QUAD": True, "DOT": "tf32"}, num_warps=4, num_stages=2)
    configs = [dict(D=64, Dv=64, dtype="bfloat16", p=2, kernel="chunk", causal=c, **{"pass": "forward"})
               for c in (True, False)]
    result = dict(registers=200, stack_bytes=0, local_bytes=0, shared_bytes=90_000, static_shared_bytes=0,
                  tensor_cores=True, has_dot=True, compile_s=3.25, error=None)
    good = kr.make_row(job, configs, result)
    assert good["causal"] == "True/False" and good["constexprs"] == {"BT": 64, "QUAD": True}
    bad = kr.make_row(job, configs[:1], dict(result, stack_bytes=32))
    monkeypatch.setattr(kr, "report", lambda configs, workers: [good, bad])
    assert kr.main([f"--out={tmp_path / 'kernels' / 'sm90'}"]) == 1
    path = tmp_path / "kernels" / "sm90.json"
    out = capsys.readouterr().out
    assert ("| k | 64 | 64 | bfloat16 | 2 | chunk | True/False | forward | BT=64 QUAD=1 | 4 | 200 | 0 | 90,000 | yes | 3.2 "
            "| ok |") in out
    assert "FAIL: stack 32 B (spills)" in out
    saved = json.loads(path.read_text())
    assert saved["target"]["arch"] == "sm_90" and saved["triton"] == triton.__version__ and not saved["ok"]
    assert [r["failures"] for r in saved["rows"]] == [[], ["stack 32 B (spills)"]]
    manifest = json.loads((tmp_path / "kernels" / "manifest.json").read_text())
    assert manifest["sm90"]["commit"] and "kernel_report" in manifest["sm90"]["command"]
    assert kr.main(["--no_fail"]) == 0
    monkeypatch.setattr(kr, "report", lambda configs, workers: None)
    assert kr.main([]) == 2
