"""Where the CLS token of a trained LRA classifier attends: the attention weight of the CLS query on
each key position, averaged over examples, per layer and head, beside a freshly initialised model of
the same configuration. Made for the ListOps question of docs/lra.md (do global attentions move
weight onto the outermost operator, the first token after CLS?), usable on any CLS-pooled run.

    python -m scripts.analysis.cls_attention out/lra/listops_softmax_cpu out/lra/listops_dense_cpu \\
        [--split=val] [--num=64] [--position=1] [--out=results/lra/listops_cls_attention.json]

Each out_dir's ``ckpt.pt`` (task "classify", ``pooling="cls"``) becomes an ``LRAClassifier`` with the
checkpoint's ``model_args`` and weights, in eval mode; the "init" model is the same configuration
initialised with ``torch.manual_seed(seed)`` (the run's seed). Both read the first ``--num``
examples of ``--split`` (LRA layout under the run's ``lra_dir``), whole, padding masked.

Weights: ``scripts.analysis.capture.attention_weights`` (the module's own rule, checked against its
output); the statistics below assume a distribution over the keys, so an attention whose rows do
not sum to one (dense: A = q.k; linformer: weights over projected positions) is refused. For query 0 (CLS), layer l, head h:

- ``weight_at_position``: mean over examples of A[0, position] (position 1 = the first data token);
- ``uniform``: mean over examples of 1 / (real tokens + 1), the weight of an even spread;
- ``ratio``: weight_at_position / uniform;
- ``max_weight``: mean over examples of max_j A[0, j], and ``argmax_is_position``: the fraction of
  examples whose largest CLS weight sits at ``position``.

Output: a table on stdout and, with ``--out``, JSON {run: {"trained": {...}, "init": {...}}}, each
a dict of lists indexed [layer][head].
"""
import argparse
import os

import numpy as np
import torch

import checkpoint
import data.lra as lra
from data import write_json
import provenance
from scripts.analysis.capture import attention_weights, capture
from tasks import classify

METRICS = ("weight_at_position", "uniform", "ratio", "max_weight", "argmax_is_position")


def _cls_row(record):
    """(B, H, T) weights of query 0 in one captured layer; ValueError unless they sum to one."""
    row = attention_weights(record["mechanism"], record["q"], record["k"], record["causal"],
                            record["attention_mask"])[:, :, 0, :]
    if (row.sum(-1) - 1.0).abs().max() > 1e-6:
        name = getattr(record["mechanism"], "registry_name", type(record["mechanism"]).__name__)
        raise ValueError(f"attention {name!r}: the CLS row's weights do not sum to one (max deviation "
                         f"{(row.sum(-1) - 1.0).abs().max():.3g}); these statistics need a distribution over keys")
    return row


def load_run(out_dir, weights="ckpt.pt"):
    """(trained model, init model, config, iter_num) of a run: the config of ``out_dir/ckpt.pt``
    and the weights of ``out_dir/<weights>`` ("ckpt.pt": the last checkpoint; "best.pt": the best
    validation accuracy, the weights train.py tests), both models in eval mode; iter_num = the
    training step of those weights.

    Raises:
        FileNotFoundError: no checkpoint. ValueError: not a CLS-pooled classification run.
    """
    trained, config, meta = checkpoint.load(out_dir, weights)
    if meta["task"] != "classify" or config.get("pooling") != "cls":
        raise ValueError(f"{out_dir}: needs a task='classify', pooling='cls' run; got task={meta['task']!r}, "
                         f"pooling={config.get('pooling')!r}")
    torch.manual_seed(config.get("seed", 1337))
    init = type(trained)(trained.config)
    return trained, init.eval(), config, meta["iter_num"]


def examples(config, split, num):
    """(idx (N, T) int64, attention_mask (N, T) bool) of the first ``num`` examples of ``split``,
    made by the run's own ``classify.make_batch`` (CLS prepended)."""
    module = lra.get(config["lra_task"])
    if module.TWO_TOWER:
        raise ValueError(f"{config['lra_task']} is two-tower; this script reads one-sequence tasks")
    d = classify.load_split(config, split)
    batch = classify.make_batch(d, np.arange(min(num, len(d["labels"]))), config, module, "cpu")
    return batch["idx"], batch["attention_mask"]


def cls_statistics(model, idx, attention_mask, position=1, batch_size=8):
    """The METRICS of the CLS query's attention, per layer and head.

    Args:
        model: an ``LRAClassifier`` with CLS pooling (softmax or fastmax attention).
        idx: (N, T) int64 with CLS at column 0; attention_mask: (N, T) bool, True = real token.
        position: the key position reported (1 = the first data token).

    Returns:
        dict metric -> (L, H) float64 array.

    Raises:
        ValueError: an attention whose CLS weights are not a distribution over the keys.
    """
    rows = []  # per batch: (L, B, H, T) CLS-row weights
    for start in range(0, len(idx), batch_size):
        records = capture(model, idx[start:start + batch_size])  # padding: the model's pad_token_id
        rows.append(torch.stack([_cls_row(r) for r in records]))
    cls_rows = torch.cat(rows, dim=1)  # (L, N, H, T)
    uniform = 1.0 / attention_mask.sum(1).double()  # (N,)
    at = cls_rows[..., position]  # (L, N, H)
    stats = {
        "weight_at_position": at.mean(1),
        "uniform": uniform.mean().expand(at.shape[0], at.shape[2]),
        "ratio": (at / uniform[None, :, None]).mean(1),
        "max_weight": cls_rows.max(-1).values.mean(1),
        "argmax_is_position": (cls_rows.argmax(-1) == position).double().mean(1),
    }
    return {k: v.numpy() for k, v in stats.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dirs", nargs="+")
    ap.add_argument("--split", default="val", choices=classify.SPLITS)
    ap.add_argument("--num", type=int, default=64, help="examples (the first ones of the split)")
    ap.add_argument("--position", type=int, default=1, help="key position reported (1 = first data token)")
    ap.add_argument("--out", default="", help="write the result as JSON here")
    args = ap.parse_args(argv)
    torch.set_flush_denormal(True)
    result = {}
    for out_dir in args.out_dirs:
        trained, init, config, _ = load_run(out_dir)
        idx, mask = examples(config, args.split, args.num)
        run = {}
        for name, model in (("trained", trained), ("init", init)):
            stats = cls_statistics(model, idx, mask, args.position)
            run[name] = {k: v.tolist() for k, v in stats.items()}
            for layer in range(stats["ratio"].shape[0]):
                for head in range(stats["ratio"].shape[1]):
                    print(f"{out_dir} {name:7s} layer {layer} head {head}: weight on position {args.position} "
                          f"{stats['weight_at_position'][layer, head]:.4f} (uniform {stats['uniform'][layer, head]:.4f}, "
                          f"ratio {stats['ratio'][layer, head]:.2f}), max weight {stats['max_weight'][layer, head]:.4f}, "
                          f"argmax there {stats['argmax_is_position'][layer, head]:.2f}")
        run.update(attention=config["attention"], split=args.split, examples=int(len(idx)), position=args.position)
        result[out_dir] = run
    if args.out:
        write_json(args.out, result)
        provenance.record(os.path.splitext(args.out)[0])


if __name__ == "__main__":
    main()
