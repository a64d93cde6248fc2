"""Reference lines for ListOps that need no model: the majority class, the rule "predict the most
frequent label of the outermost operator", and the loss of predicting the training set's class
frequencies for every input (where a model that has learned nothing from its input ends up), and
two linear probes: one on the bag of tokens (what attention spread evenly over the sequence can
see), one on the bag of tokens plus the first token.

In LRA's tokenization the first token of every ListOps sequence is the outermost operator
(``[MIN``, ``[MAX``, ``[MED`` or ``[SM``; data/lra/listops.py). Its value is strongly tied to the
label (MIN of many arguments is usually 0, MAX usually 9), so a classifier that reads only that
one token, from a table counted on the train split, reaches an accuracy well above the majority
rate. The published transformer results on ListOps (36-38%: the LRA paper's Table 1 and FAST's Table 1)
lie at this rule's level; a model at it has learned to find the first token, not to evaluate the
expression. The bag-of-tokens probe measures how much of the label the token counts alone carry:
a model whose attention is still uniform over the sequence sees little more than that.

Given the out_dirs of trained ListOps runs, the tool instead says what those classifiers read: their
predictions split by the outermost operator, beside the same rule (is a model above the majority
rate because it reads the first operator, and for which operators?). Per run, overall and per
operator: ``examples``, ``accuracy``, ``rule_accuracy`` (the rule on the same examples),
``agreement`` (fraction where the model predicts what the rule predicts), ``prediction_counts``
(classes 0-9). Each run: config of ``out_dir/ckpt.pt``, weights of ``out_dir/<weights>`` (default
``best.pt``, the weights train.py tests), through ``checkpoint.load``; the rule is fitted on the train
split of the first run's ``lra_dir``.

Usage: python -m scripts.analysis.listops [--lra_dir data/lra/files] [--split test|val]
           [--out results/lra/listops_rule_baseline.json]
       python -m scripts.analysis.listops out/lra/listops_dense_cpu [more out_dirs] [--split=test]
           [--weights=best.pt] [--out results/lra/listops_by_operator.json]

Output (runs given): a table on stdout and JSON {"rule": {operator: label}, "runs": {out_dir:
{"overall": {...}, "by_operator": {operator: {...}}, "weights", "iter_num", "attention", "split"}}}.
"""
import argparse
import os
import json

import numpy as np
import torch
import torch.nn.functional as F

import checkpoint
from data import write_json
from data.lra import default_lra_dir, listops
import provenance
from tasks import classify


def fit_first_token_rule(first_tokens, labels, num_tokens, num_classes=listops.NUM_CLASSES):
    """The first-token rule fitted on (first token, label) pairs.

    Args:
        first_tokens, labels: int arrays (N,): the first token id of each sequence (< num_tokens)
            and its label in [0, num_classes).

    Returns:
        (rule, seen): rule (num_tokens,) int64, the most frequent label of each first token (ties:
        the smallest label) and the majority label for a token never seen; seen, the sorted ids
        of the tokens seen.
    """
    counts = np.zeros((num_tokens, num_classes), np.int64)
    np.add.at(counts, (first_tokens, labels), 1)
    seen = np.flatnonzero(counts.sum(1))
    rule = np.full(num_tokens, int(counts.sum(0).argmax()), np.int64)
    rule[seen] = counts[seen].argmax(1)
    return rule, seen


def first_token_rule(train_tokens, train_labels, eval_tokens, eval_labels, num_classes=listops.NUM_CLASSES):
    """Accuracy of the majority class and of the first-token rule, both fitted on train, and the
    cross-entropy of the train class frequencies on the eval labels.

    Args:
        train_tokens, eval_tokens: int arrays (N, T) of token ids (column 0 = the first token).
        train_labels, eval_labels: int arrays (N,) in [0, num_classes).

    Returns:
        dict: "majority_accuracy", "first_token_accuracy" (fractions of the eval examples),
        "prior_loss" (nats per example; inf if an eval label never occurs in train),
        "rule" {first token id: predicted label}, "eval_examples". A first token never seen in
        train is predicted as the majority class.
    """
    num_tokens = int(max(train_tokens[:, 0].max(), eval_tokens[:, 0].max())) + 1
    rule, seen = fit_first_token_rule(train_tokens[:, 0], train_labels, num_tokens, num_classes)
    label_counts = np.bincount(train_labels, minlength=num_classes)
    majority = int(label_counts.argmax())
    with np.errstate(divide="ignore"):
        prior_loss = float(-np.log(label_counts[eval_labels] / len(train_labels)).mean())
    return {
        "prior_loss": prior_loss,
        "majority_accuracy": float(np.mean(eval_labels == majority)),
        "first_token_accuracy": float(np.mean(rule[eval_tokens[:, 0]] == eval_labels)),
        "rule": {int(t): int(rule[t]) for t in seen},
        "eval_examples": int(len(eval_labels)),
    }


def token_features(tokens, vocab_size=listops.VOCAB_SIZE, max_len=listops.MAX_LEN, first_token=False):
    """Per-sequence features for a linear probe: the frequency of every non-PAD token id
    (1 .. vocab_size - 1, counts divided by the sequence length), the length / max_len, and with
    ``first_token`` a one-hot of the first token (vocab_size columns).

    Args:
        tokens: int array (N, T), PAD (0) after the sequence.

    Returns:
        float64 tensor (N, vocab_size) or (N, 2 * vocab_size) with ``first_token``.
    """
    tokens = np.asarray(tokens)
    counts = np.stack([(tokens == t).sum(1) for t in range(1, vocab_size)], 1)  # one token id at a time: (N, T) memory
    lengths = np.maximum((tokens != listops.PAD).sum(1, keepdims=True), 1)
    x = torch.from_numpy(np.concatenate([counts / lengths, lengths / max_len], 1)).double()
    if first_token:
        x = torch.cat([x, F.one_hot(torch.from_numpy(tokens[:, 0]).long(), vocab_size).double()], 1)
    return x


def linear_probe(train_x, train_labels, eval_x, eval_labels, num_classes=listops.NUM_CLASSES, l2=1e-4):
    """Multinomial logistic regression fitted on train (features standardised with the train mean
    and std, L2 penalty ``l2`` on the weights, L-BFGS in float64), scored on eval.

    Args:
        train_x, eval_x: float64 tensors (N, F). train_labels, eval_labels: int arrays (N,).

    Returns:
        dict: "accuracy" (fraction of the eval examples), "loss" (cross-entropy, nats per example).
    """
    mean, std = train_x.mean(0), train_x.std(0).clamp(min=1e-12)
    a, b = (train_x - mean) / std, (eval_x - mean) / std
    y_train = torch.as_tensor(np.asarray(train_labels), dtype=torch.int64)
    y_eval = torch.as_tensor(np.asarray(eval_labels), dtype=torch.int64)
    weight = torch.zeros(a.shape[1], num_classes, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([weight, bias], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(a @ weight + bias, y_train) + l2 * weight.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        logits = b @ weight + bias
        return {"accuracy": float((logits.argmax(1) == y_eval).double().mean()),
                "loss": float(F.cross_entropy(logits, y_eval))}


def operator_table(predictions, labels, first_tokens, rule):
    """Accuracy, rule accuracy, agreement and prediction counts, overall and per first token.

    Args:
        predictions, labels, first_tokens: int arrays (N,): the model's class, the true class, the
            token id of the first data token (the outermost operator).
        rule: int array indexed by token id: the first-token rule's class.

    Returns:
        {"overall": stats, "by_operator": {operator name: stats}}, stats a dict of "examples",
        "accuracy", "rule_accuracy", "agreement" (fractions) and "prediction_counts" (list of
        listops.NUM_CLASSES ints). Operators with no example are left out.
    """
    predictions, labels, first_tokens = (np.asarray(a) for a in (predictions, labels, first_tokens))
    rule_predictions = np.asarray(rule)[first_tokens]

    def stats(sel):
        return {"examples": int(sel.sum()),
                "accuracy": float(np.mean(predictions[sel] == labels[sel])),
                "rule_accuracy": float(np.mean(rule_predictions[sel] == labels[sel])),
                "agreement": float(np.mean(predictions[sel] == rule_predictions[sel])),
                "prediction_counts": np.bincount(predictions[sel], minlength=listops.NUM_CLASSES).tolist()}

    by_operator = {op: stats(first_tokens == listops.VOCAB[op]) for op in listops.OPERATORS
                   if np.any(first_tokens == listops.VOCAB[op])}
    return {"overall": stats(np.ones(len(labels), bool)), "by_operator": by_operator}


def by_operator(out_dirs, split, weights):
    """The operator tables of trained ListOps runs (see the module docstring), printed and returned."""
    result, rule = {"runs": {}}, None
    for out_dir in out_dirs:
        model, config, meta = checkpoint.load(out_dir, weights)
        if meta["task"] != "classify" or config["lra_task"] != "listops":
            raise ValueError(f"{out_dir}: a ListOps run is needed, got task={meta['task']!r}, "
                             f"lra_task={config.get('lra_task')!r}")
        if rule is None:  # fitted on the train split of the first run's lra_dir
            train = classify.load_split(config, "train")
            rule, _ = fit_first_token_rule(train["tokens"][:, 0], train["labels"], listops.VOCAB_SIZE)
            result["rule"] = {t: int(rule[listops.VOCAB[t]]) for t in listops.OPERATORS}
        data = {"module": listops, split: classify.load_split(config, split)}
        with torch.no_grad():
            logits, labels, rows = classify.split_logits(model, data, split, config, "cpu")
        table = operator_table(logits.argmax(-1).numpy(), labels.numpy(),
                               data[split]["tokens"][rows, 0].astype(np.int64), rule)
        result["runs"][out_dir] = {**table, "weights": weights, "iter_num": meta["iter_num"],
                                   "attention": config["attention"], "split": split}
        for name, s in [("all", table["overall"])] + list(table["by_operator"].items()):
            print(f"{out_dir} {name:5s} n={s['examples']:5d} accuracy {s['accuracy']:.3f} "
                  f"(rule {s['rule_accuracy']:.3f}) agreement with rule {s['agreement']:.3f} "
                  f"predictions {s['prediction_counts']}")
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="out_dirs of trained ListOps runs (none: the reference lines only)")
    ap.add_argument("--lra_dir", default=default_lra_dir())
    ap.add_argument("--split", default="test", choices=("val", "test"))
    ap.add_argument("--weights", default="best.pt", help="checkpoint file in each run's out_dir whose weights are read")
    ap.add_argument("--out", default="", help="write the result as JSON here")
    args = ap.parse_args(argv)
    torch.set_flush_denormal(True)
    if args.runs:
        result = by_operator(args.runs, args.split, args.weights)
        if args.out:
            write_json(args.out, result)
        provenance.record(os.path.splitext(args.out)[0])
        return
    train = listops.load(args.lra_dir, "train")
    held = listops.load(args.lra_dir, args.split)
    result = first_token_rule(train["tokens"], train["labels"], held["tokens"], held["labels"])
    # the bag-of-tokens features are the first VOCAB_SIZE columns of the full ones: count once
    train_x = token_features(train["tokens"], first_token=True)
    held_x = token_features(held["tokens"], first_token=True)
    for name, columns in (("bag_of_tokens", listops.VOCAB_SIZE), ("bag_and_first_token", train_x.shape[1])):
        probe = linear_probe(train_x[:, :columns], train["labels"], held_x[:, :columns], held["labels"])
        result.update({f"{name}_accuracy": probe["accuracy"], f"{name}_loss": probe["loss"]})
    names = {i: t for t, i in listops.VOCAB.items()}
    result["rule"] = {names[t]: y for t, y in result["rule"].items()}
    result.update(split=args.split, lra_dir=args.lra_dir)
    print(json.dumps(result, indent=1))
    if args.out:
        write_json(args.out, result)
        provenance.record(os.path.splitext(args.out)[0])


if __name__ == "__main__":
    main()
