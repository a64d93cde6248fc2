"""Zoology's own MQAR model trained on our MQAR data: the check that the 1 / N plateau of
docs/recall.md is not a property of our GPT (Arora et al. 2023, "Zoology: Measuring and Improving
Recall in Efficient Language Models"; their code: github.com/HazyResearch/zoology).

Theirs, loaded at run time from --zoology_dir (a checkout or ``git archive`` of the repository;
nothing of theirs is copied here): ``zoology/model.py`` (``LanguageModel``: token + learned
position embeddings, their ``TransformerBlock`` with ``state_mixer`` = Identity, i.e. no MLP, tied
LM head) with ``zoology/mixers/attention.py`` (``MHA``, one head, attention dropout 0.1 as in their
Figure 2 configs), as their ``experiments/paper_configs/iclr24_zoology_figure2/configs.py`` builds it.
Their optimizer: AdamW, weight decay 0.1 on every parameter. What differs from their training: a
constant learning rate, batches of ``--batch`` drawn with replacement (theirs: epochs of shuffled
batches of 64-512, cosine over epochs), and the loss computed at the query positions only (the
same cross-entropy as theirs over non-ignored labels).

``--token_shift`` adds our ``token_shift`` (``model.ModelConfig``: e_t + W_s e_(t-1) on the
embedding output, W_s ~ N(0, 0.02)) to their model, to show the same model leaving the plateau.

Needs their dependencies besides ours: ``pip install einops pydantic pyyaml``; ``torchvision`` is
not needed (their blocks use ``StochasticDepth`` with probability 0, replaced by the identity).

    mkdir -p /tmp/zoology && git --git-dir=<mirror of HazyResearch/zoology> archive HEAD | tar -x -C /tmp/zoology
    python -m data.recall --seq_len=64 --num_pairs=4 --sizes=100000,1000,1000
    python -m scripts.analysis.zoology_mqar --zoology_dir=/tmp/zoology \\
        --data=data/mqar/T64_N4_V8192_a0.01_zero_s0_100000-1000-1000 [--token_shift] \\
        [--steps=1000 --batch=64 --lr=3e-3 --d_model=64 --threads=1 --seed=0] [--out=results/recall/zoology_model]

Writes ``<out>.csv`` (step, train_loss, train_accuracy of the step's batch, val_loss,
val_accuracy over the whole val split, seconds) and its manifest entry (their commit when
--zoology_dir is a git checkout).
"""
import argparse
import csv
import importlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import time
import types

import numpy as np
import torch
import torch.nn.functional as F

import data
import provenance
from data import recall as recall_data


def load_zoology(zoology_dir):
    """Their ``zoology.model`` and ``zoology.config`` modules, imported from ``zoology_dir`` through
    the package's ``__path__`` (no sys.path edit).

    Raises:
        FileNotFoundError: no ``zoology/model.py`` under ``zoology_dir``.
        ImportError: their dependencies (einops, pydantic, yaml) are missing; the message says so.
    """
    root = os.path.join(zoology_dir, "zoology")
    if not os.path.exists(os.path.join(root, "model.py")):
        raise FileNotFoundError(f"no zoology/model.py under {zoology_dir} (a checkout of HazyResearch/zoology)")
    stand_ins = {}
    try:  # their blocks import torchvision's StochasticDepth, used with p = 0 only
        importlib.import_module("torchvision.ops")
    except ImportError:
        ops = types.ModuleType("torchvision.ops")
        ops.StochasticDepth = _Identity
        vision = types.ModuleType("torchvision")
        vision.ops = ops
        stand_ins = {"torchvision": vision, "torchvision.ops": ops}
    for name in [m for m in sys.modules if m == "zoology" or m.startswith("zoology.")]:
        del sys.modules[name]  # another checkout loaded before
    package = importlib.util.module_from_spec(importlib.machinery.ModuleSpec("zoology", None, is_package=True))
    package.__path__ = [root]
    sys.modules["zoology"] = package
    sys.modules.update(stand_ins)
    try:
        config = importlib.import_module("zoology.config")
        zmodel = importlib.import_module("zoology.model")
        importlib.import_module("zoology.mixers.attention")
    except ModuleNotFoundError as e:
        raise ImportError(f"Zoology's code needs {e.name}: pip install einops pydantic pyyaml") from None
    finally:  # the stand-in only for their import: other code (transformers) probes torchvision
        for name in stand_ins:
            sys.modules.pop(name, None)
    return zmodel, config


class _Identity(torch.nn.Module):
    def __init__(self, p, mode):
        super().__init__()
        if p:
            raise ValueError(f"this stand-in for torchvision's StochasticDepth supports p = 0 only, got {p}")

    def forward(self, x):
        return x


def build_model(zmodel, zconfig, d_model, seq_len, vocab_size, dropout):
    """Their Figure 2 attention model: 2 layers, MHA with one head, no MLP, learned positions."""
    cfg = zconfig.ModelConfig(
        d_model=d_model, n_layers=2, max_position_embeddings=seq_len, vocab_size=vocab_size,
        sequence_mixer=zconfig.ModuleConfig(name="zoology.mixers.attention.MHA",
                                            kwargs={"dropout": dropout, "num_heads": 1}),
        state_mixer=zconfig.ModuleConfig(name="torch.nn.Identity", kwargs={}))
    defaults = list(zmodel.TokenEmbeddings.__init__.__defaults__)  # their embeddings default to CUDA
    zmodel.TokenEmbeddings.__init__.__defaults__ = tuple("cpu" if d == "cuda" else d for d in defaults)
    try:
        return zmodel.LanguageModel(cfg)
    finally:
        zmodel.TokenEmbeddings.__init__.__defaults__ = tuple(defaults)


def add_token_shift(lm, d_model):
    """Our ``token_shift`` on their embedding output: e_t + W_s e_(t-1), W_s ~ N(0, 0.02^2)."""
    shift = torch.nn.Linear(d_model, d_model, bias=False)
    torch.nn.init.normal_(shift.weight, std=0.02)
    lm.token_shift = shift  # registered, so the optimizer sees it
    embeddings = lm.backbone.embeddings
    plain = embeddings.forward

    def shifted(input_ids, position_ids=None):
        e = plain(input_ids, position_ids=position_ids)
        return e + shift(F.pad(e[:, :-1], (0, 0, 1, 0)))
    embeddings.forward = shifted


def query_loss(lm, inputs, labels):
    """Cross-entropy and accuracy at the query positions (labels != -1) of (n, T) arrays."""
    x = torch.from_numpy(np.asarray(inputs, dtype=np.int64))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    hidden = lm(x, return_embeddings=True)
    scored = y != -1
    logits = lm.lm_head(hidden[scored])
    return F.cross_entropy(logits, y[scored]), (logits.argmax(-1) == y[scored]).float().mean()


def _write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _git_commit(path):
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoology_dir", required=True, help="a checkout (or git archive) of HazyResearch/zoology")
    ap.add_argument("--data", required=True, help="a prepared folder of data.recall (train and val splits)")
    ap.add_argument("--token_shift", action="store_true")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--d_model", type=int, default=64)
    ap.add_argument("--dropout", type=float, default=0.1, help="their Figure 2 MHA dropout")
    ap.add_argument("--eval_interval", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="results/recall/zoology_model")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)
    zmodel, zconfig = load_zoology(args.zoology_dir)
    train_x, train_y = recall_data.load(args.data, "train")
    val_x, val_y = recall_data.load(args.data, "val")
    manifest = data.read_manifest(args.data)
    if not manifest or manifest.get("generator") != "data.recall":
        sys.exit(f"{args.data} is not a folder prepared by data.recall (no manifest of it)")
    lm = build_model(zmodel, zconfig, args.d_model, train_x.shape[1], manifest["vocab_size"], args.dropout)
    if args.token_shift:
        add_token_shift(lm, args.d_model)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=args.lr, weight_decay=0.1)
    rng = np.random.default_rng(args.seed)
    rows, start = [], time.time()
    for step in range(1, args.steps + 1):
        lm.train()
        batch = np.sort(rng.integers(0, len(train_x), args.batch))
        loss, accuracy = query_loss(lm, train_x[batch], train_y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.eval_interval == 0 or step == args.steps:
            lm.eval()
            with torch.no_grad():
                parts = [query_loss(lm, val_x[i:i + 200], val_y[i:i + 200]) for i in range(0, len(val_x), 200)]
            sizes = [int((np.asarray(val_y[i:i + 200]) != -1).sum()) for i in range(0, len(val_x), 200)]
            val_loss = sum(float(l) * n for (l, _), n in zip(parts, sizes)) / sum(sizes)
            val_accuracy = sum(float(a) * n for (_, a), n in zip(parts, sizes)) / sum(sizes)
            rows.append({"step": step, "train_loss": loss.item(), "train_accuracy": accuracy.item(),
                         "val_loss": val_loss, "val_accuracy": val_accuracy, "seconds": time.time() - start})
            print(" ".join(f"{k} {v:.4g}" for k, v in rows[-1].items()), flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    data.atomic_write(f"{args.out}.csv", lambda tmp: _write_csv(tmp, rows))
    provenance.record(args.out, extra={"zoology_commit": _git_commit(args.zoology_dir), "data": args.data,
                                       "settings": vars(args)})
    print(f"wrote {args.out}.csv")


if __name__ == "__main__":
    main()
