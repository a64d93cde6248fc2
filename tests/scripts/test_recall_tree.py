"""scripts/analysis/recall_tree.py: tree attention swapped into a recall model, accuracy and the
record of the keys the recorded layer attended exactly, and the choice of that layer."""
import csv
import json

import numpy as np
import pytest
import torch

import checkpoint
import train
from scripts.analysis import recall_tree
from tasks import recall as recall_task


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny recall run (2 training steps: the weights barely matter, the pipeline does)."""
    tmp = tmp_path_factory.mktemp("recall_tree")
    out = tmp / "run"
    train.main(["configs/recall/mqar.py", f"--out_dir={out}", "--block_size=16", "--recall_pairs=2",
                "--recall_vocab=32", f"--recall_dir={tmp / 'data'}", "--n_embd=16", "--batch_size=8",
                "--max_iters=2", "--eval_interval=2", "--warmup_iters=1", "--lr_decay_iters=2", "--num_threads=1",
                "--recall_sizes={'train': 64, 'val': 16, 'test': 20}"])
    return out


def test_query_keys_hand_case():
    # context k1=5 v1=20 k2=7 v2=21, then queries of 7 at 6 and of 5 at 10
    inputs = np.array([[5, 20, 7, 21, 0, 0, 7, 0, 3, 0, 5, 0]])
    labels = np.full((1, 12), -1)
    labels[0, 6], labels[0, 10] = 21, 20
    assert recall_tree.query_keys(inputs, labels, 2).tolist() == [[0, 6, 2], [0, 10, 0]]
    labels[0, 6] = 20  # the label is not the value after the key
    with pytest.raises(ValueError, match="not MQAR data"):
        recall_tree.query_keys(inputs, labels, 2)


def _independent_fraction(run_dir, params, batch_size=8):
    """matched_key_fraction by another route: every layer records in its own forward at all
    positions (record_keys=True), the model runs on split_metrics' batches, and each query's
    value position is found by scanning the sequence for the earlier equal token."""
    model, cfg, _ = checkpoint.load(str(run_dir), weights="best.pt")
    model = model.double()
    model.set_attention("tree", {**params, "record_keys": True})
    _, (inputs, labels) = recall_tree.test_split(str(run_dir), cfg)
    found = []
    for start in range(0, len(inputs), batch_size):
        idx = torch.from_numpy(np.asarray(inputs[start:start + batch_size], dtype=np.int64))
        with torch.no_grad():
            model(idx)
        exact = model.attention_modules()[-1].recorded["exact_keys"]
        for b in range(idx.shape[0]):
            for t in np.nonzero(np.asarray(labels[start + b]) != -1)[0]:
                j = [p for p in range(t) if idx[b, p] == idx[b, t]]
                assert len(j) == 1 and labels[start + b, t] == idx[b, j[0] + 1]
                found.append(bool(exact[b, 0, t, j[0] + 1]))
    return float(np.mean(found))


def test_grid_csv_png_manifest_and_independent_check(run_dir, tmp_path):
    out = tmp_path / "res" / "tree_tiny"
    recall_tree.main([str(run_dir), "--E=0.7,1", "--samplers=edh,alignment", "--descents=all", "--seeds=0,1",
                      "--record_examples=20", "--record_layer=1", f"--out={out}"])
    with open(f"{out}.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:7] == ["sampler", "descent", "E", "seed", "test_accuracy", "matched_key_fraction",
                                 "exact_softmax_accuracy"]
    assert len(rows) == 2 * 2 * 2 * 2
    assert {(r["sampler"], r["descent"], float(r["E"]), int(r["seed"])) for r in rows} == {
        (s, d, E, seed) for s in ("edh", "alignment") for d in ("authors", "split") for E in (0.7, 1.0)
        for seed in (0, 1)}
    model, cfg, _ = checkpoint.load(str(run_dir), weights="best.pt")
    _, (inputs, labels) = recall_tree.test_split(str(run_dir), cfg)
    exact = recall_task.split_metrics(model.double(), inputs, labels, 8, "cpu")["accuracy"]
    for r in rows:
        assert float(r["exact_softmax_accuracy"]) == pytest.approx(exact)
        assert int(r["queries"]) == int(r["recorded_queries"]) == 40  # 20 examples x 2 queries
        if float(r["E"]) == 1.0:  # every key is a term of its own: exact attention
            assert float(r["test_accuracy"]) == pytest.approx(exact)
            assert float(r["matched_key_fraction"]) == float(r["key_position_fraction"]) == 1.0
            assert float(r["inner_product_fraction"]) == 1.0
        else:
            assert float(r["exact_keys_per_query"]) < float(r["history_per_query"])
            assert 0.0 <= float(r["matched_key_fraction"]) <= 1.0
    for sampler, descent, seed in (("alignment", "split", 1), ("edh", "authors", 0)):
        row = next(r for r in rows if (r["sampler"], r["descent"], r["E"], r["seed"]) == (sampler, descent, "0.7",
                                                                                            str(seed)))
        expected = _independent_fraction(run_dir, {"E": 0.7, "sampler": sampler, "descent": descent, "seed": seed})
        assert float(row["matched_key_fraction"]) == pytest.approx(expected)
        assert 0.0 < expected < 1.0  # a case that can tell positions apart
    # the key (even position j) and its value (j + 1) are sibling leaves of the tree: a bud holds
    # both or neither until their 2-leaf bud is split, which makes both exact
    assert all(r["matched_key_fraction"] == r["key_position_fraction"] for r in rows)
    assert (tmp_path / "res" / "tree_tiny.png").stat().st_size > 0
    entry = json.loads((tmp_path / "res" / "manifest.json").read_text())["tree_tiny"]
    assert entry["max_output_diff_reference_vs_fast"] < 1e-9
    assert entry["layer_recorded"] == 1 and entry["record_examples"] == 20
    assert len(entry["exact_attention_per_layer"]) == 2
    assert set(entry["exact_attention_per_layer"][1]) >= {"value_weight", "key_weight", "argmax_value"}


def test_record_layer_auto_takes_the_layer_with_most_weight_on_the_value(run_dir, tmp_path):
    model, cfg, _ = checkpoint.load(str(run_dir), weights="best.pt")
    model = model.double()
    _, (inputs, labels) = recall_tree.test_split(str(run_dir), cfg)
    keys = recall_tree.query_keys(inputs[:8], labels[:8], cfg["recall_pairs"])
    weights = [recall_tree.exact_attention_diagnostics(model, inputs, keys, 8, 8, layer)["value_weight"]
               for layer in (0, 1)]
    assert weights[0] != weights[1]
    out = tmp_path / "auto"
    recall_tree.main([str(run_dir), "--E=0.5", "--samplers=edh", "--descents=split", "--seeds=0",
                      "--num_examples=8", "--record_examples=8", "--batch_size=8", f"--out={out}"])
    entry = json.loads((tmp_path / "manifest.json").read_text())["auto"]
    assert entry["record_layer"] == "auto"
    assert entry["layer_recorded"] == int(np.argmax(weights))
    assert [d["value_weight"] for d in entry["exact_attention_per_layer"]] == pytest.approx(weights)
    with pytest.raises(SystemExit, match="the model has 2 attention layers"):
        recall_tree.main([str(run_dir), "--E=0.5", "--record_layer=2", "--num_examples=8", f"--out={out}"])
    with pytest.raises(SystemExit, match="must be auto or a layer index"):
        recall_tree.main([str(run_dir), "--E=0.5", "--record_layer=last", "--num_examples=8", f"--out={out}"])


def test_refuses_bad_arguments_and_models(run_dir, tmp_path):
    with pytest.raises(SystemExit, match="--samplers \\['edhx'\\] unknown"):
        recall_tree.main([str(run_dir), "--samplers=edhx", f"--out={tmp_path / 'x'}"])
    with pytest.raises(SystemExit, match="must lie in \\(0, 1\\]"):
        recall_tree.main([str(run_dir), "--E=0,0.5", f"--out={tmp_path / 'x'}"])
    ckpt = torch.load(run_dir / "ckpt.pt", weights_only=False)
    ckpt["model_args"]["attention"] = "linear"
    other = tmp_path / "linear_run"
    other.mkdir()
    torch.save(ckpt, other / "ckpt.pt")
    with pytest.raises(SystemExit, match="trained with attention 'linear'"):
        recall_tree.main([str(other), f"--out={tmp_path / 'x'}"])
