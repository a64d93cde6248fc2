"""scripts/analysis/mlm_summary.py end to end: two tiny MLM runs trained with train.py (a DANet
with Cosine RelPE and a softmax BERT with learned positions), summarised on the test split at two
lengths; the CSVs' columns, the skipped length, the margins against an independent computation,
the regimes, the provenance."""
import csv
import json
import os

import numpy as np
import pytest
import torch

import eval_mlm
import train
from data import mlm as mlm_data
from checkpoint import load

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, wikitext2_dir):
    if not os.path.exists(os.environ.get("BERT_VOCAB_FILE", "")):
        pytest.skip("BERT vocabulary not found (BERT_VOCAB_FILE)")
    base = tmp_path_factory.mktemp("mlm_runs")
    common = ["--task=mlm", "--num_threads=1", "--n_layer=2", "--n_embd=32", "--batch_size=2", "--block_size=64",
              "--max_iters=5", "--eval_interval=5", "--eval_iters=1", "--log_interval=1", "--warmup_iters=0",
              "--mlm_bias_init=log_unigram"]
    dirs = {"danet_tiny_seed3": ["--block=danet", "--attention=dense", "--n_head=1", "--pos_emb=cosine_relpe",
                                 "--layer_scheme=LSG", "--window=8", "--seed=3"],
            "bert_tiny_seed4": ["--n_head=2", "--attention.window=9", "--seed=4"]}
    for name, args in dirs.items():
        train.main([*common, f"--out_dir={base / name}", *args])
    return base, [str(base / name) for name in dirs]


def read_csv(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


def test_summary_end_to_end(runs, tmp_path):
    from scripts.analysis import mlm_summary

    base, dirs = runs
    out = tmp_path / "results"
    rows, skipped = mlm_summary.main(["--runs", *dirs, "--seq_lens", "64,128", "--max_sequences", "6",
                                      "--num_threads", "1", "--out_dir", str(out)])
    header, summary = read_csv(out / "summary.csv")
    assert tuple(header) == ("model", "seed", "eval_len", "regime", "masked_loss", "context_free_loss", "margin")
    keys = [(r["model"], r["seed"], r["eval_len"], r["regime"]) for r in summary]
    assert keys == [("bert_tiny", "4", "64", "none"),
                    ("danet_tiny", "3", "64", "linear"), ("danet_tiny", "3", "64", "quadratic"),
                    ("danet_tiny", "3", "128", "linear"), ("danet_tiny", "3", "128", "quadratic")]
    assert skipped == [{"model": "bert_tiny", "seed": 4, "eval_len": 128,
                        "why": "learned position embeddings cover 64 positions"}]
    for r in summary:
        assert float(r["margin"]) == pytest.approx(float(r["context_free_loss"]) - float(r["masked_loss"]), abs=2e-6)
    # both regimes: the same model function
    d64 = [r for r in summary if r["model"] == "danet_tiny" and r["eval_len"] == "64"]
    assert float(d64[0]["masked_loss"]) == pytest.approx(float(d64[1]["masked_loss"]), rel=1e-5)

    # the context-free loss on [MASK] inputs, independently: -log of the train split's add-one unigram
    vocab = mlm_data.vocab_info("bert-wordpiece", os.environ["BERT_VOCAB_FILE"])
    train_ids = np.asarray(mlm_data.open_split("train"), dtype=np.int64)
    counts = np.bincount(train_ids, minlength=vocab.model_vocab_size).astype(float)
    p = np.zeros_like(counts)
    p[vocab.random_ids] = counts[vocab.random_ids] + 1
    p /= p.sum()
    cfg = load(dirs[0])[1]
    batch = eval_mlm.masked_sequences(mlm_data.open_split("test"), vocab, cfg, 64, 6, 1234)
    m = (batch["labels"] >= 0) & (batch["idx"] == vocab.mask_id)
    expected = -np.log(p[batch["labels"][m].numpy()]).mean()
    for r in summary:
        if r["eval_len"] == "64":
            assert float(r["context_free_loss"]) == pytest.approx(expected, abs=2e-6)
    # ... and the model's [MASK]-input loss is eval_mlm's for the same sequences
    model, _ = eval_mlm.load_model(dirs[1], "cpu")
    with torch.no_grad():
        again = eval_mlm.evaluate_sequences(model, batch, 8, "cpu")
    bert = [r for r in summary if r["model"] == "bert_tiny"][0]
    assert float(bert["masked_loss"]) == pytest.approx(again["mask_input_loss"], abs=2e-6)

    header, selected = read_csv(out / "summary_all_selected.csv")
    assert header[:7] == ["model", "seed", "eval_len", "regime", "loss", "context_free_loss", "margin"]
    for r in selected:
        assert int(r["mask_input_positions"]) < int(r["selected_positions"])
        assert float(r["train_seconds"]) > 0 and r["iter_num"] == "5"
    header, mean = read_csv(out / "summary_mean.csv")
    assert {(r["model"], r["positions"]) for r in mean} == {(m, pos) for m in ("bert_tiny", "danet_tiny")
                                                           for pos in ("mask_input", "all_selected")}
    assert all(r["seeds"] == "1" and r["margin_std"] == "" for r in mean)

    manifest = json.loads((out / "manifest.json").read_text())
    assert {"summary", "summary_all_selected", "summary_mean"} <= set(manifest)
    assert [r["run"] for r in manifest["summary"]["runs"]] == dirs
    assert manifest["summary"]["runs"][0]["train_commit"]
    assert json.loads((out / "summary.json").read_text())["skipped"] == skipped


def test_two_runs_of_one_model_and_seed_are_an_error(runs, tmp_path):
    from scripts.analysis import mlm_summary

    base, dirs = runs
    with pytest.raises(ValueError, match="are both model 'danet_tiny' seed 3"):
        mlm_summary.main(["--runs", dirs[0], dirs[0], "--seq_lens", "64", "--max_sequences", "2",
                          "--out_dir", str(tmp_path)])


def test_model_name_strips_the_seed():
    from scripts.analysis.mlm_summary import model_name
    assert model_name("out/mlm_wikitext2/bert_mini_seed12/") == "bert_mini"
    assert model_name("out/wikitext2_danet_mini") == "wikitext2_danet_mini"
