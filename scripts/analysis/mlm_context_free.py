"""The best MLM predictor that ignores context: a reference line for MLM loss and accuracy.

A model that sees only the input token at a chosen position (not its neighbours) can do no better
than the Bayes posterior built from the unigram distribution p (train split counts, add-one
smoothed over the ordinary tokens) and BERT's masking rule (data/mlm.py: of the chosen tokens,
``mask_frac`` -> [MASK], ``random_frac`` -> a uniform random ordinary token, the rest kept):

    input [MASK]:  P(y) = p(y)
    input x:       P(y | x) = (k p(y) [y = x] + r p(y) / R) / (k p(x) + r / R)

with k = 1 - mask_frac - random_frac, r = random_frac, R = the number of ordinary tokens. Its
expected loss (nats per chosen token) and accuracy over the chosen positions of a split are
computed exactly (expectation over the masking, every ordinary token of the split equally
likely to be chosen). An MLM model whose loss and accuracy do not beat these numbers has not yet
learned to use context. The unigram is ``tasks.mlm.unigram_counts`` (also the MLM head's
``mlm_bias_init="log_unigram"``); the same predictor position by position, on the masks a model
is evaluated on, is ``tasks.mlm.context_free_terms`` (``eval_mlm.py``, ``mlm_summary``).

Usage: python -m scripts.analysis.mlm_context_free [--split test] [--out results/mlm_wikitext2/context_free_baseline.json]
"""
import argparse
import os

import numpy as np

from data import mlm, write_json
import provenance
from tasks.mlm import unigram_counts


def context_free_baseline(train_ids, eval_ids, ordinary_ids, mask_frac=0.8, random_frac=0.1):
    """Expected MLM loss and accuracy of the best context-free predictor (module docstring).

    Args:
        train_ids, eval_ids: 1-D int arrays of token ids (the unigram comes from train_ids).
        ordinary_ids: 1-D int array of the ids that can be chosen and drawn as random tokens.
        mask_frac, random_frac: BERT's 80 / 10 / 10 rule (the rest are kept).

    Returns:
        dict with "loss" (nats per chosen token), "accuracy" and the per-input-kind parts.
    """
    ordinary_ids = np.asarray(ordinary_ids)
    V = int(max(train_ids.max(), eval_ids.max(), ordinary_ids.max())) + 1
    p = unigram_counts(train_ids, ordinary_ids, V)  # add-one smoothing over the ordinary tokens
    p = p / p.sum()
    y = eval_ids[np.isin(eval_ids, ordinary_ids)]
    k, r, R = 1.0 - mask_frac - random_frac, random_frac, len(ordinary_ids)
    p_top = p.max()
    top = int(p.argmax())

    # input [MASK]
    loss_mask, acc_mask = -np.log(p[y]).mean(), float((y == top).mean())
    # input x: the posterior of x itself and of any other y
    def post_same(x):
        return (k * p[x] + r * p[x] / R) / (k * p[x] + r / R)

    def log_norm(x):
        return np.log(k * p[x] + r / R)

    x_wins = (k * p + r * p / R) > r * p_top / R  # argmax of P(. | x) is x, else the unigram mode
    # kept: x = y
    loss_keep = -np.log(post_same(y)).mean()
    acc_keep = float(np.where(x_wins[y], 1.0, y == top).mean())
    # random: x uniform over the ordinary ids; exact mean over x
    xs = ordinary_ids
    mean_log_norm = log_norm(xs).mean()
    other = -np.log(r * p[y] / R) + mean_log_norm  # as if x != y for every x
    same_fix = (-np.log(post_same(y)) - (-np.log(r * p[y] / R) + log_norm(y))) / R
    loss_random = (other + same_fix).mean()
    frac_not_win = float((~x_wins[xs]).mean())
    acc_random = float(((x_wins[y] / R) + frac_not_win * (y == top)).mean())

    mask_part, keep_part, random_part = mask_frac, k, r
    return {
        "loss": float(mask_part * loss_mask + keep_part * loss_keep + random_part * loss_random),
        "accuracy": float(mask_part * acc_mask + keep_part * acc_keep + random_part * acc_random),
        "parts": {"mask": {"weight": mask_part, "loss": float(loss_mask), "accuracy": acc_mask},
                  "keep": {"weight": keep_part, "loss": float(loss_keep), "accuracy": acc_keep},
                  "random": {"weight": random_part, "loss": float(loss_random), "accuracy": acc_random}},
        "eval_tokens": int(len(y)), "vocab_ordinary": int(R),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="test", choices=["val", "test"])
    ap.add_argument("--dataset_config", default="wikitext-2-v1")
    ap.add_argument("--tokenizer", default="bert-wordpiece")
    ap.add_argument("--bert_vocab", default="")
    ap.add_argument("--out", default="results/mlm_wikitext2/context_free_baseline.json")
    args = ap.parse_args(argv)
    vocab = mlm.vocab_info(args.tokenizer, args.bert_vocab)
    train = np.asarray(mlm.open_split("train", "wikitext2", args.dataset_config, args.tokenizer), dtype=np.int64)
    evals = np.asarray(mlm.open_split(args.split, "wikitext2", args.dataset_config, args.tokenizer), dtype=np.int64)
    result = {"split": args.split, "tokenizer": args.tokenizer, "dataset_config": args.dataset_config,
              **context_free_baseline(train, evals, np.asarray(vocab.random_ids))}
    write_json(args.out, result)
    provenance.record(os.path.splitext(args.out)[0])
    print(f"context-free baseline on {args.split}: loss {result['loss']:.4f} nats, accuracy {result['accuracy']:.4f} "
          f"-> {args.out}")
    return result


if __name__ == "__main__":
    main()
