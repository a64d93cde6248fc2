"""Can an encoder learn to use context under MLM? A synthetic probe.

The token stream is made of random patterns of ``--period`` tokens, each repeated ``--repeats``
times, so every masked token equals the token ``period`` positions before or after it. A model
that uses context reaches high accuracy on [MASK] inputs; one that does not stays near chance
(1 / 43 ordinary tokens). Each configuration (``--runs``: block / pos_emb pairs) trains a small
``BertEncoder`` with the MLM task's own batches and loss (tasks/mlm.py) and records the accuracy
on [MASK] inputs of fixed held-out batches during training.

Writes <out>.json and <out>.csv (one row per configuration and checkpoint) and <out>.png.

Usage: python -m scripts.analysis.mlm_copy_probe [--steps 600] [--seeds 0,1] [--out results/mlm_copy_probe/mlm_copy_probe]
"""
import argparse
import csv
import os
import time

import numpy as np
import torch

import train
from data import mlm as mlm_data, write_json
from model import BertEncoder, ModelConfig
import provenance
from tasks import mlm

# 0 [PAD], 1 [CLS], 2 [SEP], 3 [MASK], 4 [UNK], 5..47 ordinary tokens (43)
VOCAB = mlm_data.Vocab("probe", 64, pad_id=0, cls_id=1, sep_id=2, mask_id=3, special_ids=(0, 1, 2, 3, 4),
                       random_ids=np.arange(5, 48))
RUNS = "transformer:learned,transformer:cosine_relpe,danet:learned,danet:cosine_relpe,danet:none"


def make_stream(period, repeats, n_patterns, seed):
    """(n_patterns * period * repeats,) uint16 stream of repeated random patterns."""
    rng = np.random.default_rng(seed)
    return np.concatenate([np.tile(rng.integers(5, 48, size=period), repeats)
                           for _ in range(n_patterns)]).astype(np.uint16)


def build(block, pos_emb, args):
    """A small BertEncoder; DANet: one head, FFN rescaling as in the MLM configs."""
    extra = dict(attention="dense", n_head=1, ffn_linf_norm=0.1) if block == "danet" else dict(n_head=2)
    return BertEncoder(ModelConfig(block_size=args.seq_len, vocab_size=VOCAB.model_vocab_size, n_layer=args.n_layer,
                                   n_embd=args.n_embd, pad_token_id=VOCAB.pad_id, block=block, pos_emb=pos_emb,
                                   **extra))


def mask_accuracy(model, data, cfg, n_batches=5):
    """Accuracy on chosen positions whose input is [MASK], over fixed held-out batches."""
    model.eval()
    hits = total = 0
    with torch.no_grad():
        for i in range(n_batches):
            batch = mlm.get_batch(data, "val", cfg, [99, 1, 0, i, 0], "cpu")
            chosen = (batch["labels"] >= 0) & (batch["idx"] == VOCAB.mask_id)
            logits = model(batch["idx"], mlm_mask=chosen)
            hits += int((logits.argmax(-1) == batch["labels"][chosen]).sum())
            total += int(chosen.sum())
    model.train()
    return hits / max(total, 1)


def run(block, pos_emb, seed, args):
    torch.manual_seed(seed)
    data = {"train": make_stream(args.period, args.repeats, 2000, seed),
            "val": make_stream(args.period, args.repeats, 200, seed + 10_000), "vocab": VOCAB}
    cfg = {**train.DEFAULTS, "task": "mlm", "batch_size": args.batch_size, "block_size": args.seq_len}
    model = build(block, pos_emb, args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    rows, start = [], time.perf_counter()
    for step in range(1, args.steps + 1):
        loss, _ = mlm.loss(model, mlm.get_batch(data, "train", cfg, [seed, 0, 0, step, 0], "cpu"))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        model.after_optimizer_step()
        if step % args.eval_every == 0:
            rows.append(dict(block=block, pos_emb=pos_emb, seed=seed, step=step, train_loss=loss.item(),
                             mask_accuracy=mask_accuracy(model, data, cfg), seconds=time.perf_counter() - start))
            print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in rows[-1].items()),
                  flush=True)
    return rows


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in sorted({(r["block"], r["pos_emb"]) for r in rows}):
        for seed in sorted({r["seed"] for r in rows}):
            pts = [(r["step"], r["mask_accuracy"]) for r in rows if (r["block"], r["pos_emb"]) == key and r["seed"] == seed]
            ax.plot(*zip(*pts), marker="o", ms=2, label=f"{key[0]} + {key[1]}" if seed == min(r["seed"] for r in rows)
                    else None, color=f"C{sorted({(r['block'], r['pos_emb']) for r in rows}).index(key)}")
    ax.axhline(1 / 43, color="gray", ls=":", label="chance (1/43)")
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy on [MASK] inputs")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default=RUNS, help="comma list of block:pos_emb")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--eval_every", type=int, default=50)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--period", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--seq_len", type=int, default=26)
    ap.add_argument("--batch_size", type=int, default=16)
    ap.add_argument("--n_layer", type=int, default=2)
    ap.add_argument("--n_embd", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="results/mlm_copy_probe/mlm_copy_probe")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    rows = []
    for spec in args.runs.split(","):
        block, pos_emb = spec.split(":")
        for seed in (int(s) for s in args.seeds.split(",")):
            rows += run(block, pos_emb, seed, args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    write_json(args.out + ".json", {"settings": vars(args), "torch": torch.__version__, "rows": rows})
    plot(rows, args.out + ".png")
    provenance.record(args.out)
    return rows


if __name__ == "__main__":
    main()
