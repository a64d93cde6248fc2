"""What a trained ListOps classifier reads: its test predictions split by the outermost operator
(the first token after CLS), beside the first-token rule of ``scripts/listops_rule_baseline.py``
(predict the most frequent training label of that operator). Made for the ListOps question of
docs/lra.md: is a model above the majority rate there because it reads the first operator, and
for which operators?

    python scripts/listops_by_operator.py out/lra/listops_dense_cpu \\
        out/lra_extra/listops_fastmax1_cpu_b32_5000_lraemb [--split=test] [--weights=best.pt] \\
        [--out=results/lra/listops_by_operator.json]

Each run: config of ``out_dir/ckpt.pt``, weights of ``out_dir/<weights>`` (default ``best.pt``, the
weights train.py tests), all examples of ``--split`` in batches of the run's ``batch_size``.
Reported per run, overall and per outermost operator (``[MIN``, ``[MAX``, ``[MED``, ``[SM``):

- ``examples``, ``accuracy`` (fraction of the model's predictions that are right);
- ``rule_accuracy``: the first-token rule's accuracy on the same examples;
- ``agreement``: fraction of examples where the model predicts what the rule predicts;
- ``prediction_counts``: how often the model predicts each class 0-9.

Output: a table on stdout and, with ``--out``, JSON {"rule": {operator: label}, "runs": {out_dir:
{"overall": {...}, "by_operator": {operator: {...}}, "weights", "iter_num"}}}.
"""
import argparse
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from data import write_json  # noqa: E402
from data.lra import listops  # noqa: E402
from scripts.listops_rule_baseline import fit_first_token_rule  # noqa: E402
from scripts.lra_cls_attention import load_run  # noqa: E402
from tasks import classify  # noqa: E402


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dirs", nargs="+")
    ap.add_argument("--split", default="test", choices=classify.SPLITS)
    ap.add_argument("--weights", default="best.pt", help="checkpoint file in each out_dir whose weights are read")
    ap.add_argument("--out", default="", help="write the result as JSON here")
    args = ap.parse_args(argv)
    torch.set_flush_denormal(True)
    result, rule = {"runs": {}}, None
    for out_dir in args.out_dirs:
        model, _, config, iter_num = load_run(out_dir, args.weights)
        if config["lra_task"] != "listops":
            raise ValueError(f"{out_dir}: a ListOps run is needed, got lra_task={config['lra_task']!r}")
        if rule is None:  # fitted on the train split of the first run's lra_dir
            train = classify.load_split(config, "train")
            rule, _ = fit_first_token_rule(train["tokens"][:, 0], train["labels"], listops.VOCAB_SIZE)
            result["rule"] = {t: int(rule[listops.VOCAB[t]]) for t in listops.OPERATORS}
        data = {"module": listops, args.split: classify.load_split(config, args.split)}
        with torch.no_grad():
            logits, labels, rows = classify.split_logits(model, data, args.split, config, "cpu")
        table = operator_table(logits.argmax(-1).numpy(), labels.numpy(),
                               data[args.split]["tokens"][rows, 0].astype(np.int64), rule)
        result["runs"][out_dir] = {**table, "weights": args.weights, "iter_num": iter_num,
                                   "attention": config["attention"], "split": args.split}
        for name, s in [("all", table["overall"])] + list(table["by_operator"].items()):
            print(f"{out_dir} {name:5s} n={s['examples']:5d} accuracy {s['accuracy']:.3f} "
                  f"(rule {s['rule_accuracy']:.3f}) agreement with rule {s['agreement']:.3f} "
                  f"predictions {s['prediction_counts']}")
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
