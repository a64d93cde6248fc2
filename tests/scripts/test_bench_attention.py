"""scripts/bench/attention.py: the method syntax, the FLOP formulas against counted operations, the
stopping rules, the break-even rule, and an end-to-end run of every default method at tiny sizes."""
import csv
import json
import os

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import attention
from attention.registry import allowed_keys
from attention.testing import in_repository


def _bench_module():
    from scripts.bench import attention as bench
    return bench


# ---------------------------------------------------------------------------------------------
# method syntax


def test_method_syntax_name_parameters_aliases():
    bench = _bench_module()
    m = bench.parse_method("fastmax:p=2")
    assert (m.kind, m.name, m.params, m.label) == ("registry", "fastmax", {"p": 2}, "fastmax:p=2")
    m = bench.parse_method("tree:E=0.5,sampler=alignment,P=None")
    assert m.params == {"E": 0.5, "sampler": "alignment", "P": None}  # literals; bare words stay strings
    assert m.spec == "tree:E=0.5,sampler=alignment,P=None" and not m.trainable()
    assert bench.parse_method("linformer").causal_support() == "unsupported"
    assert bench.parse_method("reformer").causal_support() == "leaky"
    assert bench.parse_method("sdpa").kind == "sdpa"
    assert bench.parse_method("authors:p=1").full_params()["p"] == 1
    old = bench.parse_method("fastmax2_pytorch")  # the old names still work, labelled as typed
    assert (old.label, old.name, old.params) == ("fastmax2_pytorch", "fastmax", {"p": 2, "implementation": "pytorch"})
    assert bench.parse_method("authors1").params == {"p": 1}
    # a comma list: an item with "=" and no ":" continues the previous method
    assert bench.split_methods("sdpa,fastmax:p=2,a2=0.4,linear,tree:E=0.3,sampler=alignment,fastmax1_pytorch") == [
        "sdpa", "fastmax:p=2,a2=0.4", "linear", "tree:E=0.3,sampler=alignment", "fastmax1_pytorch"]


def test_method_syntax_config_files(tmp_path):
    bench = _bench_module()
    m = bench.parse_method("@configs/attention/fastmax2.py")
    assert (m.label, m.name, m.params) == ("fastmax2", "fastmax", {"p": 2})
    m = bench.parse_method("@configs/attention/dense.py")
    assert m.params == {"regime": "auto"} and m.ignored == {"block": "danet", "pos_emb": "cosine_relpe", "mlp": True}
    m = bench.parse_method("@configs/attention/tree.py:E=0.3,sampler=alignment")
    assert (m.label, m.params) == ("tree:E=0.3,sampler=alignment", {"E": 0.3, "sampler": "alignment"})
    path = tmp_path / "mine.py"
    path.write_text('attention = "longformer"\nattention_params = {"window": 32, "num_global": 0}\n')
    m = bench.parse_method(f"@{path}")
    assert (m.label, m.name, m.params) == ("mine", "longformer", {"window": 32, "num_global": 0})
    # the default list: every attention config file, then sdpa and the authors' formulation
    stems = sorted(os.path.splitext(f)[0] for f in os.listdir(bench.CONFIG_DIR) if f.endswith(".py"))
    labels = [m.label for m in bench.resolve_methods(None, ["tree:E=0.3"], "cpu")]
    assert labels == stems + ["sdpa", "authors:p=1", "authors:p=2", "tree:E=0.3"]


def test_method_syntax_errors(tmp_path, capsys):
    bench = _bench_module()
    with pytest.raises(ValueError) as e:
        bench.parse_method("softmx")
    for name in attention.registered() + ["sdpa", "authors"]:
        assert name in str(e.value)  # a bad name lists the registered ones and the benchmark's own
    for bad, words in [("fastmax:q=2", "accepted parameters"), ("fastmax:p=two", "expects int"),
                       ("tree:E", "key=value"), ("authors:p=3", "p must be 1 or 2"), ("sdpa:x=1", "no parameters"),
                       ("authors:z=1", "unknown parameter"), ("@configs/attention/nope.py", "cannot read")]:
        with pytest.raises(ValueError, match=words):
            bench.parse_method(bad)
    (tmp_path / "empty.py").write_text("attention_params = {}\n")
    with pytest.raises(ValueError, match="sets no 'attention'"):
        bench.parse_method(f"@{tmp_path / 'empty.py'}")
    (tmp_path / "typo.py").write_text("attention = 'linear'\nattenton_params = {}\n")
    with pytest.raises(ValueError, match="unknown config key 'attenton_params'"):  # read as train.py reads it
        bench.parse_method(f"@{tmp_path / 'typo.py'}")
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--methods", "softmx", "--T", "32", "--out", str(tmp_path / "x")])
    assert exit_.value.code == 2 and "registered:" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# FLOP formulas against counted operations

def _baddbmm_inplace(self_shape, batch1, batch2, *args, out_shape=None, **kwargs):
    b, n, k = batch1
    return 2 * b * n * k * batch2[-1]


def _addmm_inplace(self_shape, a, b, *args, out_shape=None, **kwargs):
    return 2 * a[0] * a[1] * b[1]


# FlopCounterMode counts matmul-like ops (mm, bmm, baddbmm, einsum -> bmm, ...) but not their
# in-place forms, which the fastmax path uses; these two count them the same way
IN_PLACE = {torch.ops.aten.baddbmm_: _baddbmm_inplace, torch.ops.aten.addmm_: _addmm_inplace}


def counted_flops(bench, method, T, D, H, causal, backward=False):
    """FLOPs of the matrix products one call performs (FlopCounterMode), forward or forward + backward."""
    call, _ = bench.make_call(method, causal, T, D, H, "cpu", "forward_backward" if backward else "forward")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, T, D, generator=g).requires_grad_(backward) for _ in range(3))
    with FlopCounterMode(display=False, custom_mapping=IN_PLACE) as counter:
        if backward:
            call(q, k, v).sum().backward()
        else:
            with torch.no_grad():
                call(q, k, v)
    return counter.get_total_flops()


# the explicit softmax reference (the (T, T) form), every fast path of the registry with its
# chunking / block parameters made small, and the authors' formulation (non-causal: causal, half
# of its work is outer products and cumulative sums, which the counter does not see)
FLOP_CASES = [
    ("softmax_reference", (False, True)), ("fastmax:p=1", (False, True)), ("fastmax:p=2", (False, True)),
    ("fastmax:p=1,chunk_size=32", (True,)), ("linear", (False, True)), ("linear:chunk_size=48", (True,)),
    ("performer:num_features=32", (False, True)), ("dense", (False, True)), ("dense:regime=quadratic", (False, True)),
    ("dense:window=32", (False, True)), ("linformer:proj_len=32", (False,)),
    ("longformer:window=16,num_global=1", (False, True)), ("longformer:window=40,num_global=3", (False, True)),
    ("bigbird:block_size_sparse=16", (False, True)), ("reformer:bucket_size=16,n_hashes=2", (False, True)),
    ("informer", (False, True)), ("authors:p=1", (False,)), ("authors:p=2", (False,)),
]
FLOP_TOLERANCE = 0.01  # relative; only dense's causal prefix sum over chunks (not a product) differs, by 0.2%


@pytest.mark.parametrize("spec,causals", FLOP_CASES)
@pytest.mark.parametrize("T", [100, 256])
def test_flop_formula_matches_counted_products(spec, causals, T):
    bench = _bench_module()
    method = bench.parse_method(spec)
    D, H = 16, 2
    for causal in causals:
        counted = counted_flops(bench, method, T, D, H, causal)
        formula = bench.flop_count(method, T, D, H, causal)
        assert formula == pytest.approx(counted, rel=FLOP_TOLERANCE), (spec, causal)


def test_flop_formula_softmax_and_sdpa():
    """SDPA's CPU kernel is not seen by FlopCounterMode: its formula is 4 D H per allowed pair,
    non-causal the same count as the explicit reference (checked above), causal the pairs of the
    causal mask (the fused kernels skip the blocks above the diagonal)."""
    bench = _bench_module()
    D, H = 16, 2
    for T in (1, 7, 64):
        for causal in (False, True):
            pairs = T * T if not causal else int(allowed_keys(T, True).sum())
            for spec in ("sdpa", "softmax"):
                assert bench.flop_count(bench.parse_method(spec), T, D, H, causal) == 4 * D * H * pairs
    # with a window (a dense mask) SDPA computes every pair
    assert bench.flop_count(bench.parse_method("softmax:window=4"), 64, D, H, True) == 4 * D * H * 64 * 64


@pytest.mark.parametrize("spec", ["softmax_reference", "linear", "dense", "longformer:window=16", "authors:p=2"])
def test_forward_backward_is_three_forwards(spec):
    """The rule forward + backward = 3 x forward holds exactly where every product's inputs get
    gradients (elsewhere the counted backward differs: fastmax's custom backward recomputes its
    states, about 3.5x; performer's fixed projection gets none, 2.5-2.7x; informer's measurement
    is not differentiated, 1.6-1.7x)."""
    bench = _bench_module()
    method = bench.parse_method(spec)
    forward = counted_flops(bench, method, 128, 16, 2, False)
    both = counted_flops(bench, method, 128, 16, 2, False, backward=True)
    assert both == pytest.approx(3 * forward, rel=FLOP_TOLERANCE)


def test_tree_flops_reported_and_estimated():
    """Tree attention: FLOPs from its reported counters after a call; the formula's estimate (one
    inner product and one value term per bud) is close to them."""
    bench = _bench_module()
    for spec in ("tree", "tree:E=0.3,sampler=alignment", "tree:sampler=positive_alignment"):
        method = bench.parse_method(spec)
        for causal in (False, True):
            T, D, H = 256, 16, 2
            call, module = bench.make_call(method, causal, T, D, H, "cpu")
            q = torch.randn(1, H, T, D, generator=torch.Generator().manual_seed(0))
            assert module.reported_flops(T, D, H) is None  # nothing counted before a call
            with torch.no_grad():
                call(q, q, q)
                call(q, q, q)  # two calls: the per-call count is the same
            reported = module.reported_flops(T, D, H)
            stats = module.stats()
            assert reported >= 2 * D * (stats["alignment_inner_products"] + stats["terms"]) / 2
            assert bench.flop_count(method, T, D, H, causal) == pytest.approx(reported, rel=0.15)


def test_every_registered_attention_has_a_flop_formula():
    """Every attention of the repository declares ``flops`` and ``flop_formula`` (required:
    docs/architecture.md's row "a new attention"); one registered from outside (``--import``) may
    declare none, and the benchmark then counts None and says "no formula"."""
    bench = _bench_module()
    for name in attention.registered():
        flops, formula = bench.flop_count(bench.parse_method(name), 256, 16, 2, False), \
            bench.flop_formula(bench.parse_method(name))
        if in_repository(name) or flops is not None:
            assert flops is not None and flops > 0 and formula != "no formula", \
                f"{name}: an attention of the repository declares flops and flop_formula (docs/architecture.md)"
        else:
            assert formula == "no formula", name
    # implementation="reference" is the (T, T) form, except tree's (the same buds, one query at a time)
    reference = bench.parse_method("linear:implementation=reference")
    assert bench.flop_count(reference, 256, 16, 2, True) == 4 * 16 * 2 * 256 ** 2
    assert bench.flop_count(bench.parse_method("tree:implementation=reference"), 256, 16, 2, True) == \
        bench.flop_count(bench.parse_method("tree"), 256, 16, 2, True)
    # the formulas are the classes' own; a module without counters reports nothing after a call
    assert bench.flop_formula(bench.parse_method("linear")) == attention.attention_class("linear").flop_formula
    assert attention.build("linear").reported_flops(256, 16, 2) is None


# ---------------------------------------------------------------------------------------------
# stopping rules and summaries


def test_unsupported_configurations_and_predictions():
    bench = _bench_module()
    assert bench.unsupported(bench.parse_method("linformer"), "forward", True).startswith("n/a")
    assert bench.unsupported(bench.parse_method("linformer"), "forward_backward", False) is None
    assert bench.unsupported(bench.parse_method("tree"), "forward_backward", False).startswith("n/a")
    assert bench.unsupported(bench.parse_method("tree"), "forward", True) is None
    assert bench.predicted_seconds([], 1024) is None
    assert bench.predicted_seconds([(512, 1.0)], 1024) == 2.0  # one point: linear growth
    assert bench.predicted_seconds([(256, 1.0), (512, 4.0)], 1024) == pytest.approx(16.0)  # slope 2
    assert bench.predicted_seconds([(256, 1.0), (512, 1.0)], 1024) == pytest.approx(2.0)  # slope clamped to 1
    assert bench.predicted_seconds([(256, 1.0), (512, 32.0)], 1024) == pytest.approx(256.0)  # clamped to 3


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


def test_summary_linearity_and_speedup_on_known_rows():
    bench = _bench_module()
    rows = [dict(method=m, mode="forward", causal=False, D=64, T=T, seconds=s)
            for m, T, s in [("lin", 1024, 0.01), ("lin", 16384, 0.2), ("sdpa", 1024, 0.01), ("sdpa", 16384, 4.0)]]
    summary = bench.summarize(rows, ["lin", "sdpa"])
    lin = [e for e in summary["linearity_16384_vs_16x1024"] if e["method"] == "lin"][0]
    assert lin["ratio"] == pytest.approx(1.25) and lin["ok"]
    sdpa = [e for e in summary["linearity_16384_vs_16x1024"] if e["method"] == "sdpa"][0]
    assert sdpa["ratio"] == pytest.approx(25.0) and not sdpa["ok"]
    speed = summary["speedup_vs_sdpa_at_16384"][0]
    assert speed["method"] == "lin" and speed["speedup"] == pytest.approx(20.0) and speed["faster"]


# ---------------------------------------------------------------------------------------------
# end to end


def _read_outputs(out):
    with open(out + ".csv") as f:
        table = list(csv.DictReader(f))
    with open(out + ".json") as f:
        data = json.load(f)
    with open(out + ".md") as f:
        md = f.read()
    with open(out + ".png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    import matplotlib.pyplot as plt
    assert plt.imread(out + ".png").shape[0] > 100
    return table, data, md


def test_bench_attention_end_to_end_every_default_method(tmp_path, monkeypatch):
    from scripts.bench import common
    monkeypatch.setattr(common, "MIN_SAMPLE_SECONDS", 0.002)  # tiny calls: no 0.1 s loops
    bench = _bench_module()
    out = str(tmp_path / "bench")
    rows, summary = bench.main(["--T", "32,64", "--D", "16", "--heads", "2", "--threads", "1", "--repeats", "1",
                                "--memory", "none", "--probe_n", "64", "--out", out])
    labels = [m.label for m in bench.resolve_methods(None, None, "cpu")]
    assert len(labels) == len([f for f in os.listdir(bench.CONFIG_DIR) if f.endswith(".py")]) + 3
    assert len(rows) == 2 * 2 * 2 * len(labels)  # T x causal x modes x methods (CPU: no Triton rows)
    for r in rows:
        na = r["note"].startswith("n/a")
        assert (r["seconds"] is None) == na, r
        assert na == ((r["method"] == "linformer" and r["causal"])
                      or (r["method"] == "tree" and r["mode"] == "forward_backward")), r
        if not na:
            assert r["seconds"] > 0 and r["gflop"] > 0 and 0 < r["peak_fraction"], r
            assert r["flop_source"] == ("reported" if r["method"] == "tree" else "formula")
        if r["method"] in ("reformer", "informer") and r["causal"] and not na:
            assert "leaky" in r["note"]
    table, data, md = _read_outputs(out)
    assert list(table[0]) == bench.FIELDS and len(table) == len(rows)
    assert {r["method"] for r in table} == set(labels)
    assert set(data) == {"settings", "probe", "methods", "summary", "rows"}
    assert data["probe"]["gflops"] > 0 and data["probe"]["n"] == 64
    assert [m["label"] for m in data["methods"]] == labels
    assert all(m["flop_formula"] != "no formula" for m in data["methods"])
    assert {"linearity_16384_vs_16x1024", "speedup_vs_sdpa_at_16384", "break_even_T_vs_sdpa", "aims"} <= set(summary)
    # markdown: one table per (D, mode, causal), every row as wide as its header
    assert md.count("\n## D = 16, ") == 4
    for block in md.split("\n## ")[1:]:
        lines = [line for line in block.splitlines() if line.startswith("|")]
        assert len(lines) == 2 + len(labels)  # header, rule, SDPA's seconds and one row per other method
        assert len({line.count("|") for line in lines}) == 1
    assert "| linformer | n/a | n/a |" in md
    with open(os.path.join(tmp_path, "manifest.json")) as f:
        assert "bench" in json.load(f)


def test_bench_attention_stops_at_budget_and_memory_cap(tmp_path, monkeypatch):
    from scripts.bench import common
    monkeypatch.setattr(common, "MIN_SAMPLE_SECONDS", 0.002)
    bench = _bench_module()
    out = str(tmp_path / "stop")
    rows, _ = bench.main(["--T", "32,64,128", "--D", "16", "--heads", "2", "--threads", "1", "--repeats", "1",
                          "--memory", "none", "--probe_n", "64", "--methods", "sdpa", "dense:regime=quadratic",
                          "--modes", "forward", "--causal", "False", "--budget", "0", "--max_gb", "0.000075",
                          "--out", out])
    by = {(r["method"], r["T"]): r for r in rows}
    # budget 0: after the first T every prediction is over it
    assert by[("sdpa", 32)]["seconds"] > 0 and "--budget" in by[("sdpa", 64)]["note"]
    assert by[("sdpa", 128)]["seconds"] is None
    # the cap, 80 KB: SDPA's estimate at T = 64 is its inputs, 64 KB; the quadratic regime adds the
    # (T, T) scores, 32 KB
    assert by[("dense:regime=quadratic", 32)]["seconds"] > 0
    assert "--max_gb" in by[("dense:regime=quadratic", 64)]["note"]
    _read_outputs(out)


def test_median_seconds_never_reports_the_warm_up():
    """A first call with a one-time cost (a kernel's compilation) longer than ``long_call`` is not
    a sample (the 2026-11-26 CPU run timed tree attention's JIT build as its T = 128 forward)."""
    from scripts.bench.common import median_seconds
    durations = iter([30.0] + [0.2] * 100)  # fake clock: the warm-up is slow, the rest fast
    seconds, repeats = median_seconds(lambda: None, repeats=3, long_call=5.0, timer=lambda f: next(durations))
    assert (seconds, repeats) == (0.2, 3)
    durations = iter([30.0, 20.0, 1.0])  # a call that stays long is timed once, after the warm-up
    seconds, repeats = median_seconds(lambda: None, repeats=3, long_call=5.0, timer=lambda f: next(durations))
    assert (seconds, repeats) == (20.0, 1)


def test_median_seconds_takes_fewer_samples_than_its_cap_allows():
    """``max_total`` caps the samples' seconds (the GPU benchmark's --sample_s): 0.8 s calls under a
    2 s cap give 2 samples of the 5 asked, and a call longer than the cap still gives one."""
    from scripts.bench.common import median_seconds
    durations = iter([0.8] * 10)
    assert median_seconds(lambda: None, repeats=5, long_call=5.0, timer=lambda f: next(durations),
                          min_sample=0.0, max_total=2.0) == (0.8, 2)
    durations = iter([3.0] * 10)
    assert median_seconds(lambda: None, repeats=5, long_call=5.0, timer=lambda f: next(durations),
                          min_sample=0.0, max_total=2.0) == (3.0, 1)
