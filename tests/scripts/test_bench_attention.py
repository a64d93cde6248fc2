"""scripts/bench/attention.py: the break-even rule and an end-to-end run at tiny sizes."""
import os


def _bench_module():
    from scripts.bench import attention as bench
    return bench


def test_bench_break_even_interpolates_in_log_log():
    bench = _bench_module()
    rows = [dict(method=m, mode="forward", causal=True, D=32, T=T, seconds=s)
            for m, T, s in [("fm", 256, 4.0), ("sdpa", 256, 1.0), ("fm", 1024, 16.0), ("sdpa", 1024, 16.0),
                            ("fm", 4096, 64.0), ("sdpa", 4096, 256.0)]]
    assert bench.break_even(rows, "fm", "sdpa", "forward", True, 32) == 1024
    rows[2]["seconds"] = 32.0  # crossing between 1024 (2x slower) and 4096 (4x faster): 2^(10 + 2/3)
    assert bench.break_even(rows, "fm", "sdpa", "forward", True, 32) == round(2 ** (10 + 2 / 3))
    rows[4]["seconds"] = 512.0  # slower at the largest T: no break-even
    assert bench.break_even(rows, "fm", "sdpa", "forward", True, 32) is None


def test_bench_attention_smoke(tmp_path):
    bench = _bench_module()
    out = str(tmp_path / "bench")
    rows, summary = bench.main(["--T", "32,64", "--D", "16", "--heads", "2", "--threads", "1", "--repeats", "1",
                                "--memory", "none", "--out", out])
    assert len(rows) == 2 * 2 * 2 * 5  # T x causal x modes x methods (CPU: no Triton rows)
    assert all(r["seconds"] > 0 for r in rows)
    for ext in (".csv", ".json", ".png"):
        assert os.path.getsize(out + ext) > 0
    assert {"linearity_16384_vs_16x1024", "break_even_T_vs_sdpa", "causal_p1_D64_T16384_speedup_vs_sdpa",
            "causal_p2_D32_T4096_memory_authors_over_ours"} <= set(summary)
