"""Tests of what issue 25 adds to the MLM task (tasks/mlm.py, eval_mlm.py): the unigram of the
train split, the MLM head's output bias at the log unigram (``mlm_bias_init``), the best
context-free predictor position by position, and the [MASK]-input metrics and margins."""
import math

import numpy as np
import pytest
import torch

import attention.dense  # noqa: F401  (registers "dense")
import eval_mlm
import train
from configurator import ConfigError
from data import mlm as mlm_data
from tasks import mlm

# 0 [PAD], 1 [CLS], 2 [SEP], 3 [MASK], 4 [UNK], 5..47 ordinary, 48..63 padding rows of the embedding
TOY = mlm_data.Vocab("toy", 64, pad_id=0, cls_id=1, sep_id=2, mask_id=3, special_ids=(0, 1, 2, 3, 4),
                     random_ids=np.arange(5, 48))


def cfg_for(**kw):
    return {**train.DEFAULTS, "task": "mlm", **kw}


def test_unigram_counts_by_hand():
    counts = mlm.unigram_counts(np.array([5, 5, 6, 7, 7, 7, 0, 4], dtype=np.uint16), [5, 6, 7, 8], 10)
    assert counts.tolist() == [0, 0, 0, 0, 0, 3, 2, 4, 1, 0]  # add-one on the ordinary ids only
    with pytest.raises(ValueError, match="token id 12 >= vocab_size 10"):
        mlm.unigram_counts(np.array([12]), [5], 10)


def test_log_unigram_bias_by_hand():
    counts = np.array([0, 0, 0, 0, 0, 3, 2, 4, 1, 0], dtype=float)  # N = 10
    bias = mlm.log_unigram_bias(counts)
    expected = np.log([1, 1, 1, 1, 1, 3, 2, 4, 1, 1]) - math.log(10)  # rows never a target: log(1 / N)
    np.testing.assert_allclose(bias, expected, rtol=1e-6)
    assert bias.dtype == np.float32
    # on the ordinary rows exp(bias) is the unigram itself
    np.testing.assert_allclose(np.exp(bias[5:9]), counts[5:9] / 10, rtol=1e-6)


def toy_data(seed=0, n=4000):
    rng = np.random.default_rng(seed)
    train_tokens = rng.choice(np.arange(5, 48), size=n, p=np.r_[np.full(10, 0.06), np.full(33, 0.4 / 33)])
    return {"train": train_tokens.astype(np.uint16), "val": train_tokens[:800].astype(np.uint16), "vocab": TOY}


def build(data, **kw):
    cfg = cfg_for(block_size=24, n_layer=1, n_head=2, n_embd=16, batch_size=4, **kw)
    torch.manual_seed(0)
    return mlm.build_model(cfg, data), cfg


def test_mlm_bias_init_zero_by_default_and_log_unigram_on_request():
    data = toy_data()
    model, cfg = build(data)
    assert mlm.DEFAULTS["mlm_bias_init"] == "zero" and "mlm_bias_init" in mlm.MODEL_KEYS
    assert torch.count_nonzero(model.mlm_bias) == 0
    model, _ = build(data, mlm_bias_init="log_unigram")
    counts = mlm.unigram_counts(data["train"], TOY.random_ids, 64)
    torch.testing.assert_close(model.mlm_bias, torch.from_numpy(mlm.log_unigram_bias(counts)))
    # load_data's precomputed counts give the same bias
    model2, _ = build({**data, "unigram_counts": counts}, mlm_bias_init="log_unigram")
    assert torch.equal(model.mlm_bias, model2.mlm_bias)
    # the other weights are drawn exactly as with the zero bias
    zero, _ = build(data)
    for (name, a), (_, b) in zip(model.named_parameters(), zero.named_parameters()):
        if name != "mlm_bias":
            assert torch.equal(a, b), name


def test_a_zero_head_with_the_log_unigram_bias_starts_at_the_context_free_mask_loss():
    data = toy_data()
    model, cfg = build(data, mlm_bias_init="log_unigram")
    with torch.no_grad():
        model.mlm_dense.weight.zero_()
        model.mlm_dense.bias.zero_()
        model.mlm_ln.bias.zero_()  # LN(0) = its bias: the head adds nothing to the bias
    counts = mlm.unigram_counts(data["train"], TOY.random_ids, 64)
    batch = mlm.get_batch({**data, "unigram_counts": counts}, "val", cfg, [0, 1, 0, 0, 0], "cpu")
    with torch.no_grad():
        _, metrics = mlm.loss(model, batch)
    n_other = 64 - len(TOY.random_ids)
    gap = math.log(1 + n_other / counts.sum())
    assert metrics["mask_margin"].item() == pytest.approx(-gap, abs=1e-5)


def test_bad_mlm_bias_init_is_a_config_error():
    with pytest.raises(ConfigError, match="mlm_bias_init must be one of zero, log_unigram; got 'ones'"):
        mlm._check(cfg_for(dataset="wikitext2", mlm_bias_init="ones", block_size=8))


def brute_force_posterior(p, R, k, r, mask_frac):
    """P(original | input) from the joint of (original, input) under the masking rule, by
    enumeration: inputs [MASK] (column 0) and every ordinary id (columns 1..)."""
    n = len(p)
    joint = np.zeros((n, n + 1))
    for i in range(n):
        joint[i, 0] += mask_frac * p[i]
        joint[i, 1 + i] += k * p[i]
        joint[i, 1:] += r * p[i] / R
    return joint / joint.sum(0, keepdims=True)


def test_context_free_terms_are_the_bayes_posterior_position_by_position():
    vocab = mlm_data.Vocab("six", 12, pad_id=0, cls_id=1, sep_id=2, mask_id=3, special_ids=(0, 1, 2, 3),
                           random_ids=np.arange(4, 10))
    counts = np.zeros(12)
    counts[4:10] = [40, 25, 15, 10, 7, 3]
    p_ord = counts[4:10] / counts.sum()
    m, r = 0.8, 0.1
    post = brute_force_posterior(p_ord, 6, 1 - m - r, r, m)
    # inputs / labels: [MASK] over 4, kept 5, random 9 over 6, random 4 over 4 (drew itself), not chosen
    inputs = np.array([[1, 3, 5, 9, 4, 7, 2]])
    labels = np.array([[-1, 4, 5, 6, 4, -1, -1]])
    nll, correct = mlm.context_free_terms(counts, inputs, labels, vocab, m, r)
    col = {3: 0, 4: 1, 5: 2, 6: 3, 7: 4, 8: 5, 9: 6}
    for j in (1, 2, 3, 4):
        x, y = inputs[0, j], labels[0, j]
        assert nll[0, j] == pytest.approx(-math.log(post[y - 4, col[x]]), rel=1e-12)
        assert correct[0, j] == (post[:, col[x]].argmax() == y - 4)
    assert nll[0, [0, 5, 6]].tolist() == [0, 0, 0] and not correct[0, [0, 5, 6]].any()
    assert correct[0, 1] and correct[0, 2] and not correct[0, 3]  # [MASK] -> the mode (4); kept 5 -> 5
    with pytest.raises(ValueError, match=r"chosen labels \[10\] are not ordinary ids"):
        mlm.context_free_terms(counts, np.array([[3]]), np.array([[10]]), vocab, m, r)


def test_context_free_terms_average_to_the_exact_expectation():
    """Over many masked sequences the per-position terms average to context_free_baseline's exact
    expectation (scripts/analysis/mlm_context_free.py)."""
    import importlib
    baseline = importlib.import_module("scripts.analysis.mlm_context_free").context_free_baseline
    data = toy_data(seed=1, n=20000)
    counts = mlm.unigram_counts(data["train"], TOY.random_ids, 64)
    evals = toy_data(seed=2, n=60000)["train"]
    cfg = cfg_for(block_size=102)
    batch = eval_mlm.masked_sequences(evals, TOY, cfg, 102, 0, 7, counts)
    chosen = batch["labels"] >= 0
    exact = baseline(data["train"].astype(np.int64), evals.astype(np.int64), TOY.random_ids)
    n = int(chosen.sum())
    assert batch["context_free_nll"][chosen].double().mean().item() == pytest.approx(exact["loss"], abs=4 / n ** 0.5)
    m = chosen & batch["mask_input"]
    assert batch["context_free_nll"][m].double().mean().item() == pytest.approx(exact["parts"]["mask"]["loss"],
                                                                                 abs=4 / n ** 0.5)


def test_loss_metrics_on_mask_input_positions_by_hand():
    data = toy_data()
    model, cfg = build(data)
    model.eval()
    counts = mlm.unigram_counts(data["train"], TOY.random_ids, 64)
    batch = mlm.get_batch({**data, "unigram_counts": counts}, "train", cfg, [0, 0, 0, 5, 0], "cpu")
    assert set(batch) == {"idx", "labels", "mask_input", "context_free_nll", "context_free_correct"}
    with torch.no_grad():
        value, metrics = mlm.loss(model, batch)
        logits = model.mlm_logits(model(batch["idx"]))
    chosen = batch["labels"] >= 0
    m = chosen & (batch["idx"] == TOY.mask_id)
    assert 0 < int(m.sum()) < int(chosen.sum())
    nll = torch.nn.functional.cross_entropy(logits[m], batch["labels"][m], reduction="none")
    assert metrics["mask_loss"].item() == pytest.approx(nll.mean().item(), rel=1e-5)
    assert metrics["mask_accuracy"].item() == pytest.approx(
        (logits[m].argmax(-1) == batch["labels"][m]).float().mean().item())
    p = counts / counts.sum()
    context_free = -np.log(p[batch["labels"][m].numpy()]).mean()  # [MASK]: the unigram
    assert metrics["mask_margin"].item() == pytest.approx(context_free - nll.mean().item(), rel=1e-4)
    # without the counts (synthetic data) there is no margin, the rest stays
    _, metrics = mlm.loss(model, mlm.get_batch(data, "train", cfg, [0, 0, 0, 5, 0], "cpu"))
    assert set(metrics) == {"loss", "accuracy", "mask_loss", "mask_accuracy"}


def test_eval_mlm_reports_mask_input_numbers_and_margins():
    data = toy_data()
    model, cfg = build(data)
    model.eval()
    counts = mlm.unigram_counts(data["train"], TOY.random_ids, 64)
    tokens = toy_data(seed=3, n=3000)["train"]
    r = eval_mlm.evaluate_length(model, tokens, TOY, cfg, 24, 0, 16, 5, "cpu", counts)
    batch = eval_mlm.masked_sequences(tokens, TOY, cfg, 24, 0, 5, counts)
    with torch.no_grad():
        logits = model.mlm_logits(model(batch["idx"]))
    chosen = batch["labels"] >= 0
    m = chosen & batch["mask_input"]
    nll = torch.nn.functional.cross_entropy(logits.double()[chosen], batch["labels"][chosen], reduction="none")
    nll_m = torch.nn.functional.cross_entropy(logits.double()[m], batch["labels"][m], reduction="none")
    assert r["masked_tokens"] == int(chosen.sum()) and r["mask_input_tokens"] == int(m.sum())
    assert r["mlm_loss"] == pytest.approx(nll.mean().item(), rel=1e-5)
    assert r["mask_input_loss"] == pytest.approx(nll_m.mean().item(), rel=1e-5)
    p = counts / counts.sum()
    cf_mask = -np.log(p[batch["labels"][m].numpy()]).mean()
    assert r["mask_input_context_free_loss"] == pytest.approx(cf_mask, rel=1e-6)
    assert r["mask_input_context_free_accuracy"] == pytest.approx(
        float((batch["labels"][m].numpy() == p.argmax()).mean()))
    assert r["mask_input_margin"] == pytest.approx(r["mask_input_context_free_loss"] - r["mask_input_loss"])
    assert r["margin"] == pytest.approx(r["context_free_loss"] - r["mlm_loss"])
    # without counts: the model's numbers only, the same values
    plain = eval_mlm.evaluate_length(model, tokens, TOY, cfg, 24, 0, 16, 5, "cpu")
    assert "margin" not in plain and plain["mask_input_loss"] == pytest.approx(r["mask_input_loss"], rel=1e-12)
