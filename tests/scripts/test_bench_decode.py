"""scripts/bench/decode.py: the quick run writes its JSON, CSV, figure and manifest with the expected
keys for every decode-capable attention of the registry (and docs/generation.md's renderers read
them), the state-bytes walker counts known states, the aims are computed from the rows, and bad
input is one line."""
import csv
import json
import math

import pytest
import torch

import attention
from attention.kv_cache import KVCache
from scripts.analysis.published import generation
from scripts.bench import decode
from scripts.bench.methods import Method


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("decode") / "results" / "decode" / "quick"
    payload = decode.main(["--quick", f"--out={out}", "--threads=1"])
    return out, payload


def test_quick_run_writes_every_file_with_the_expected_keys(quick):
    out, payload = quick
    data = json.loads((out / "decode.json").read_text())
    assert set(data) == {"settings", "methods", "aims", "rows"}
    decoders = [n for n in attention.registered() if attention.decode_kind(n)]
    labels = [m["label"] for m in data["methods"]]
    assert labels[0] == decode.BASELINE and {m["name"] for m in data["methods"]} == set(decoders)
    assert set(data["aims"]) == {"state_time_flat", "state_bytes_constant", "tree_inner_products", "tree_crossover"}
    assert all("met" in aim for aim in data["aims"].values())
    with open(out / "decode.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == decode.FIELDS and len(rows) == len(data["rows"])
    layer = [r for r in data["rows"] if r["suite"] == "layer"]
    assert {(r["method"], r["context"]) for r in layer} == {(label, L) for label in labels for L in (16, 64)}
    assert all(r["seconds_per_token"] > 0 and r["state_bytes"] > 0 and r["repeats"] == 2 for r in layer)
    assert all(r["ratio_to_baseline"] == 1.0 for r in layer if r["method"] == decode.BASELINE)
    gpt = [r for r in data["rows"] if r["suite"] == "gpt"]
    assert {r["method"] for r in gpt} == {*labels, decode.RECOMPUTE_LABEL}
    assert all(r["mode"] == "recompute" for r in gpt if r["method"] == decode.RECOMPUTE_LABEL)
    for r in layer:  # a "state" keeps its size whatever the context
        if r["decode"] == "state":
            assert r["state_bytes"] == next(x["state_bytes"] for x in layer if x["method"] == r["method"])
    assert (out / "decode.png").stat().st_size > 10_000
    assert not list(out.glob("*.tmp.*"))  # written atomically
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["decode"]["commit"] and manifest["decode"]["quick"] is True
    root = out.parents[2]  # the renderers read the run's own file
    rel = str((out / "decode.json").relative_to(root))
    assert "| softmax | kv_cache |" in generation.render_decode_table(str(root), rel)
    assert "quick run" in generation.render_decode_table(str(root), rel, suite="gpt")
    assert "| aim | measured | verdict |" in generation.render_decode_aims(str(root), rel)


def test_state_bytes_counts_each_storage_once():
    k, v = torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 5, 3, dtype=torch.float64)
    cache = KVCache(k, v)  # room for max(5, 16, 2 x 5) = 16 tokens
    assert decode.state_bytes(cache) == 2 * 16 * 4 * 4 + 2 * 16 * 3 * 8
    masked = KVCache(k, v, torch.tensor([[False, True, True, True, True]]))
    assert decode.state_bytes(masked) == decode.state_bytes(cache) + 16  # one bool per token of room
    a, b = torch.zeros(3, 5), torch.zeros(7, dtype=torch.int64)
    nested = {"a": a, "views": (a[0], a[1:], [b]), "length": 12, "none": None}
    assert decode.state_bytes(nested) == 3 * 5 * 4 + 7 * 8


def test_bad_input_is_one_line(capsys):
    for args in (["--methods", "linformer"], ["--contexts=0,16"], ["--contexts=x"], ["--suites=nope"]):
        with pytest.raises(SystemExit) as e:
            decode.main(["--quick", *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), (args, err)
    with pytest.raises(SystemExit):
        decode.main(["--quick", "--methods", "linformer"])
    assert "no decode path" in capsys.readouterr().err


def row(method, L, seconds, state=100, ips=None, suite="layer"):
    r = decode.empty_row(suite, method, None, L, 4)
    r.update(seconds_per_token=seconds, state_bytes=state, inner_products_per_token=ips)
    return r


def test_aims_are_computed_from_the_rows():
    softmax, linear = Method("softmax", "registry", "softmax", {}), Method("linear", "registry", "linear", {})
    tree = Method("tree", "registry", "tree", {"E": 0.5})
    contexts = (1024, 4096, 16384, 65536)
    rows = [row(softmax, L, 1e-4 * L / 1024) for L in contexts]
    rows += [row(linear, L, 1e-4 * (1.1 if L == 65536 else 1.0)) for L in contexts]
    rows += [row(tree, L, 2e-4 * math.sqrt(L / 1024), ips=3 * math.sqrt(L)) for L in contexts]
    aims = decode.aims(rows, [softmax, linear, tree])
    flat = aims["state_time_flat"]
    assert flat["met"] is True and flat["methods"][0]["ratio"] == pytest.approx(1.1)
    assert aims["state_bytes_constant"]["met"] is True
    assert aims["tree_inner_products"]["slope"] == pytest.approx(0.5) and aims["tree_inner_products"]["met"]
    crossing = aims["tree_crossover"]  # tree 2x slower at 1k, sqrt(L) against L: equal at 4,096
    assert crossing["met"] and crossing["context"] == 4096 and crossing["words"] == "above about 4,096 tokens"
    # a slower state, a growing one, a tree that counts L^0.8 and never catches up
    rows = [row(softmax, L, 1e-4) for L in contexts]
    rows += [row(linear, L, 1e-4 * L / 1024, state=L) for L in contexts]
    rows += [row(tree, L, 2e-4, ips=L ** 0.8) for L in contexts]
    aims = decode.aims(rows, [softmax, linear, tree])
    assert aims["state_time_flat"]["met"] is False and aims["state_bytes_constant"]["met"] is False
    assert aims["tree_inner_products"]["met"] is False
    assert aims["tree_crossover"]["met"] is False and aims["tree_crossover"]["words"] == "not reached in the range"
    none = decode.aims(rows[:4], [softmax])  # no tree among the methods: not measured
    assert none["tree_inner_products"]["met"] is None and none["tree_crossover"]["met"] is None


def test_methods_come_from_the_registry_with_the_tree_variant():
    methods = decode.decode_methods()
    assert methods[0].label == decode.BASELINE
    assert {m.name for m in methods} == {n for n in attention.registered() if attention.decode_kind(n)}
    tree = decode.tree_method(methods)
    assert (tree is None) == (attention.decode_kind("tree") is None)
    assert [m.label for m in decode.decode_methods(["linear,softmax:window=4"])] == ["linear", "softmax:window=4"]
