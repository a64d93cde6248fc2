"""Tests of the CPU kernel's speed paths (attention/tree/cpu_kernel.cpp): level tables whose leaves
are the inputs and whose internal nodes live in a workspace reused across calls, and the profile
build (cpu.load_kernel(profile=True)) with its operation counters. The outputs are compared with
the readable reference (attention/tree/reference.py), which shares no code with the kernel."""
import pytest
import torch

from attention.testing import random_qkv
from attention.tree.cpu import cpu_forward, read_profile
from attention.tree.reference import reference_forward

torch.set_flush_denormal(True)


def _both(q, k, v, causal=True, exclude_self=False, E=0.5, sampler="alignment", norm="bud_mean", seed=3,
          descent="authors", profile=False, stats_cpu=None, stats_ref=None):
    a = cpu_forward(q, k, v, causal, exclude_self, E, None, sampler, norm, 0.99, seed, stats=stats_cpu,
                    descent=descent, profile=profile)
    b = reference_forward(q, k, v, causal, exclude_self, E, None, sampler, norm, 0.99, seed, stats=stats_ref,
                          descent=descent)
    return a, b


def test_workspace_reused_across_shapes_gives_the_reference():
    """A large call fills the workspace; smaller calls of other shapes (T not a power of two, several
    batch elements, non-causal reads of nodes that end at T) then reuse it with stale numbers past
    their own tables, and the first shape again: each equals the reference."""
    shapes = [(1, 2, 200, 8), (2, 3, 37, 4), (3, 1, 64, 16), (1, 2, 5, 8), (1, 2, 200, 8)]
    for i, (B, H, T, D) in enumerate(shapes):
        q, k, v = random_qkv(B, H, T, D, seed=20 + i)
        for causal in (True, False):
            a, b = _both(q, k, v, causal=causal)
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("sampler", ["edh", "favor_plus"])
def test_leaves_read_from_the_inputs_with_feature_tables(sampler):
    """Feature samplers build a third table (float64 feature keys) from kf's leaves."""
    from attention.feature_maps import RandomFeatureMap
    q, k, v = random_qkv(2, 3, 45, 8, seed=31)
    fmap = RandomFeatureMap(sampler, 8, None, seed=2, input_scale=8 ** -0.25) if sampler == "favor_plus" else None
    qf, kf = (fmap(q), fmap(k)) if fmap is not None else (None, None)
    a = cpu_forward(q, k, v, True, True, 0.6, None, sampler, "paper", 0.99, 7, qf=qf, kf=kf)
    b = reference_forward(q, k, v, True, True, 0.6, None, sampler, "paper", 0.99, 7, qf=qf, kf=kf)
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.slow  # about 40 s, most of it compiling the profiling build of the kernel
def test_profile_build_same_output_and_counts_match_the_reference():
    """The profile build returns the plain build's output bit for bit; its inner-product and bud
    counts equal the reference's statistics, its query and round counts are consistent."""
    q, k, v = random_qkv(2, 3, 70, 8, seed=41)
    plain = cpu_forward(q, k, v, True, True, 0.5, None, "alignment", "paper", 0.99, 5, descent="authors")
    read_profile()  # reset whatever earlier calls summed
    s_ref = {key: 0 for key in ("queries", "alignment_inner_products", "feature_inner_products",
                                "full_attention_inner_products", "terms")}
    prof, ref = _both(q, k, v, exclude_self=True, norm="paper", seed=5, profile=True, stats_ref=s_ref)
    assert torch.equal(prof, plain)
    torch.testing.assert_close(prof, ref, rtol=1e-9, atol=1e-11)
    seconds, counts = read_profile()
    assert counts["queries"] == 2 * 70
    assert counts["inner_products"] == s_ref["alignment_inner_products"]
    assert counts["final_buds"] * 3 == s_ref["terms"]
    assert counts["rounds"] > 0 and counts["gumbel_draws"] >= counts["rounds"]
    assert set(seconds) >= {"build_levels", "sampling_keys", "expand", "value_sum", "queries_total"}
    assert all(s >= 0 for s in seconds.values()) and seconds["queries_total"] > 0
    assert read_profile()[1]["queries"] == 0  # reading resets
