import csv
import json
import math
import os

import numpy as np
import pytest
import torch

import data
from model import GPT, ModelConfig, config_dict
from scripts.analysis import alignments as al

L = 16  # block size of the hand-made checkpoint


def _model():
    torch.manual_seed(0)
    return GPT(ModelConfig(block_size=L, vocab_size=50304, n_layer=2, n_head=2, n_embd=8)).eval()


def test_pair_values_against_loops():
    torch.manual_seed(1)
    T, D = 5, 4
    q, k = torch.randn(T, D), torch.randn(T, D)
    queries = np.array([True, False, True, True, False])
    expect = {"dot": [], "score": [], "cosine": []}
    for i in range(T):
        if not queries[i]:
            continue
        for j in range(i + 1):
            d = float(sum(q[i, m] * k[j, m] for m in range(D)))
            expect["dot"].append(d)
            expect["score"].append(d / 2.0)  # sqrt(4)
            expect["cosine"].append(d / (float(q[i].norm()) * float(k[j].norm())))
    for quantity, values in expect.items():
        assert al.pair_values(q, k, quantity, queries).tolist() == pytest.approx(values, rel=1e-6)
    # non-causal: every key of every kept query
    assert al.pair_values(q, k, "dot", queries, causal=False).size == 3 * T
    with pytest.raises(ValueError, match="allowed"):
        al.pair_values(q, k, "angle", queries)


def test_cosine_leaves_out_zero_vectors():
    q = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    k = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    # pairs (0, 0): zero key -> left out; (1, 0), (1, 1): zero query -> left out
    assert al.pair_values(q, k, "cosine", np.array([True, True])).size == 0
    assert al.pair_values(q, k, "dot", np.array([True, True])).size == 3


def test_captured_q_k_are_the_models_and_histograms_count_every_pair():
    model = _model()
    rng = np.random.default_rng(0)
    windows = rng.integers(0, 50257, size=(2, L))
    queries = np.ones(windows.shape, dtype=bool)
    queries[1, ::2] = False
    layers = al.collect(model, windows, queries)
    assert len(layers) == 2 and layers[0][0].shape == (2, 2, L, 4) and layers[0][2] is True
    # layer 0's q and k computed by hand from the embeddings
    with torch.no_grad():
        idx = torch.as_tensor(windows[1:2])
        x = model.transformer.wte(idx) + model.transformer.wpe(torch.arange(L))
        q, k, _ = model.transformer.h[0].attn.c_attn(model.transformer.h[0].ln_1(x)).split(8, dim=2)
    assert torch.allclose(layers[0][0][1, 1], q[0, :, 4:], atol=1e-6)
    assert torch.allclose(layers[0][1][1, 1], k[0, :, 4:], atol=1e-6)
    edges, counts, summaries = al.histograms(layers, queries, "score", bins=7)
    pairs = L * (L + 1) // 2 + sum(i + 1 for i in range(1, L, 2))
    assert counts.shape == (2, 2, 7) and np.all(counts.sum(-1) == pairs)
    assert all(s["pairs"] == pairs for heads in summaries for s in heads)
    # one edge set per layer, spanning all of its heads' values
    values = [al.pair_values(layers[1][0][s, 0], layers[1][1][s, 0], "score", queries[s]) for s in range(2)]
    assert edges[1][0] <= min(v.min() for v in values) and edges[1][-1] >= max(v.max() for v in values)
    _, cos_counts, _ = al.histograms(layers, queries, "cosine", bins=4, value_range=None)
    assert np.all(cos_counts.sum(-1) == pairs)


def test_summary_shares():
    s = al.summarize(np.array([-3.0, -1.0, 2.0, 2.0]))
    assert s["frac_negative"] == 0.5 and s["negative_share"] == pytest.approx(0.5)
    assert s["mean"] == 0.0 and s["min"] == -3.0 and s["max"] == 2.0 and s["pairs"] == 4
    assert al.summarize(np.array([]))["pairs"] == 0


def test_cli_on_a_run_directory(tmp_path):
    model = _model()
    run = tmp_path / "tiny_run"
    os.makedirs(run)
    torch.save({"model": model.state_dict(), "model_args": config_dict(model.config)}, run / "ckpt.pt")
    try:
        al.read_windows({"dataset": "wikitext2", "dataset_config": "wikitext-2-v1"}, "val", 1, 8, 0)
    except data.DataUnavailable as e:
        pytest.skip(f"WikiText-2 not prepared: {e}")
    out = tmp_path / "res" / "al"
    al.main([str(run), "--sequences=2", f"--length={L}", "--bins=5", "--quantities=score,dot,cosine",
             f"--out={out}"])
    with open(f"{out}.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 * 2 * 2 * 5
    per_panel = {}
    for r in rows:
        per_panel[(r["quantity"], r["layer"], r["head"])] = per_panel.get((r["quantity"], r["layer"], r["head"]), 0) \
            + int(r["count"])
    assert set(per_panel.values()) == {2 * L * (L + 1) // 2}
    with open(f"{out}_summary.csv") as f:
        summary = list(csv.DictReader(f))
    by = {(r["quantity"], r["layer"], r["head"]): r for r in summary}
    # dot = score * sqrt(D): same shares, means scaled by sqrt(4)
    a, b = by[("score", "1", "0")], by[("dot", "1", "0")]
    assert float(b["mean"]) == pytest.approx(2 * float(a["mean"]), rel=1e-4)
    assert a["frac_negative"] == b["frac_negative"]
    for q in ("score", "dot", "cosine"):
        assert (tmp_path / "res" / f"al_{q}.png").stat().st_size > 0
    entry = json.loads((tmp_path / "res" / "manifest.json").read_text())["al"]
    assert entry["tokens"] == [0, 2 * L] and entry["attention"] == "softmax"
    # a query token that occurs: "." in WikiText-2; one that does not -> a clear error
    al.main([str(run), "--sequences=2", f"--length={L}", "--query_token=,", f"--out={out}_comma"])
    with pytest.raises(SystemExit):
        al.main([str(run), "--sequences=1", f"--length={L}", "--query_token=zzzqqq", f"--out={out}_none"])
    with pytest.raises(SystemExit):
        al.main([str(run), f"--length={L + 1}", f"--out={out}"])


def test_bad_windows_are_refused():
    with pytest.raises(ValueError, match="allowed"):
        al.read_windows({"dataset": "wikitext2", "dataset_config": "wikitext-2-v1"}, "test", 1, 8, 0)
    with pytest.raises(ValueError, match="sequences"):
        al.read_windows({"dataset": "wikitext2", "dataset_config": "wikitext-2-v1"}, "val", 0, 8, 0)


def test_default_out_names_the_model():
    assert al.default_out("/x/y/gpt2-tiny-hf/") == os.path.join("results", "alignments_gpt2-tiny-hf", "alignments")
    assert al.default_out("out/run/ckpt.pt") == os.path.join("results", "alignments_run", "alignments")
    assert al.default_out("out/run/best.pt") == os.path.join("results", "alignments_run_best", "alignments")
    assert not math.isnan(al.summarize(np.array([1.0]))["mean"])
