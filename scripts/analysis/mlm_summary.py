"""The MLM table of issue 25 (part 1): trained task="mlm" runs on the test split at L = 128 and 512,
against the best context-free predictor on the same positions.

    python -m scripts.analysis.mlm_summary --runs out/mlm_wikitext2/bert_mini_seed{0,1,2} \\
        out/mlm_wikitext2/danet_mini_seed{0,1,2} --num_threads=2

Every run directory (``ckpt.pt`` as train.py writes it, loaded with ``checkpoint.load`` through
``eval_mlm.load_model``) is evaluated like ``eval_mlm.py``: the split's token stream cut into
non-overlapping windows of L - 2 tokens, framed [CLS] ... [SEP], masked with BERT's 80/10/10 rule by
a generator seeded by (``--seed``, L), so every model sees the same inputs and predicts the same
positions; a DANet model in each regime of ``--regimes``. A length beyond a model's learned
position embeddings (``pos_emb="learned"``, L > block_size) is left out and listed under
"skipped" in the JSON: those rows of the table were never trained.

Two sets of positions: those whose INPUT token is [MASK] (80% of the selected ones; the [MASK]
columns) and all selected positions (the 10% kept unchanged are nearly free for any model and blur
the margin). The context-free loss is that of the best prediction that ignores every other token
(``tasks.mlm.context_free_terms``: the add-one unigram of the TRAIN split for [MASK], the Bayes
posterior of the 80/10/10 rule for a kept or random input), on exactly the same positions;
margin = context_free_loss - model loss (nats; > 0: the model uses context).

Model name: the run directory's name without a trailing ``_seed<N>`` (``bert_mini_seed1`` ->
``bert_mini``); seed: the run's ``seed``. Outputs in ``--out_dir`` (default results/mlm_wikitext2):

- ``summary.csv``: model, seed, eval_len, regime, masked_loss, context_free_loss, margin on the
  [MASK]-input positions (regime "none" for a model without DenseAttention regimes);
- ``summary_all_selected.csv``: the same keys, then loss, context_free_loss, margin, accuracy,
  context_free_accuracy over all selected positions, the [MASK]-input accuracies, the position
  counts, the checkpoint's iteration and the run's training wall time (``log.jsonl``);
- ``summary_mean.csv``: per model, eval_len, regime and position set, the mean, sample standard
  deviation, minimum and maximum over seeds;
- ``summary.json``: all of it with the settings and the skipped lengths; each file gets its
  entry in the folder's ``manifest.json`` (``provenance.record``: command, commit, machine), the
  ``summary`` entry listing every run (directory, iteration, its training commit).
"""
import argparse
import csv
import os
import re
import sys

import numpy as np
import torch

import eval_mlm
import provenance
from data import mlm as mlm_data
from data import write_json
from scripts.analysis.runs import RunNotFound, open_run

SUMMARY_COLUMNS = ("model", "seed", "eval_len", "regime", "masked_loss", "context_free_loss", "margin")
ALL_SELECTED_COLUMNS = ("model", "seed", "eval_len", "regime", "loss", "context_free_loss", "margin", "accuracy",
                        "context_free_accuracy", "mask_input_accuracy", "mask_input_context_free_accuracy",
                        "selected_positions", "mask_input_positions", "sequences", "iter_num", "train_seconds")
MEAN_COLUMNS = ("model", "eval_len", "regime", "positions", "seeds", "loss_mean", "loss_std", "context_free_loss",
                "margin_mean", "margin_std", "margin_min", "margin_max", "accuracy_mean", "accuracy_std",
                "context_free_accuracy", "train_seconds_mean")


def model_name(run_dir):
    """The run directory's name without a trailing ``_seed<N>``."""
    return re.sub(r"_seed\d+$", "", os.path.basename(os.path.normpath(run_dir)))


def train_seconds(run_dir):
    """Wall time of the training (evaluations included): the last ``elapsed_s`` of each (re)start
    in the run's ``log.jsonl`` (its folder or packed file: ``scripts/analysis/runs.py``), summed; None
    without a log."""
    try:
        records = open_run(run_dir).log
    except RunNotFound:
        return None
    if records is None:
        return None
    total, last = 0.0, 0.0
    for record in records:
        if "start" in record:
            total, last = total + last, 0.0
        elif "elapsed_s" in record:
            last = record["elapsed_s"]
    return total + last


def train_commit(run_dir):
    """The commit train.py recorded in the run's ``manifest.json`` (the last train entry), or None."""
    try:
        manifest = open_run(run_dir).manifest or {}
    except (OSError, ValueError):
        return None
    entries = [v for k, v in sorted(manifest.items()) if k.startswith("train")]
    return entries[-1].get("commit") if entries else None


class Sequences:
    """The masked evaluation sequences, shared by every run with the same data and masking."""

    def __init__(self, split, seed, max_sequences, bert_vocab):
        self.split, self.seed, self.max_sequences, self.bert_vocab = split, seed, max_sequences, bert_vocab
        self._data, self._batches = {}, {}

    def data(self, cfg):
        key = (cfg["dataset"], cfg["dataset_config"], cfg["tokenizer"])
        if key not in self._data:
            # every task="mlm" checkpoint saves both keys (since the task's first commit, 28a393c, 2026-11-22)
            bert_vocab = self.bert_vocab or cfg["bert_vocab"]
            mlm_data.prepare(*key, cfg["data_source_dir"], bert_vocab, verbose=False)
            vocab = mlm_data.vocab_info(cfg["tokenizer"], bert_vocab)
            tokens = mlm_data.open_split(self.split, *key)
            self._data[key] = (tokens, vocab, eval_mlm.train_unigram_counts(cfg, vocab))
        return self._data[key]

    def batch(self, cfg, L):
        key = (cfg["dataset"], cfg["dataset_config"], cfg["tokenizer"], cfg["mask_prob"], cfg["mask_frac"],
               cfg["random_frac"], L)
        if key not in self._batches:
            tokens, vocab, counts = self.data(cfg)
            self._batches[key] = eval_mlm.masked_sequences(tokens, vocab, cfg, L, self.max_sequences, self.seed,
                                                           counts)
        return self._batches[key]


def evaluate_runs(runs, seq_lens, sequences, regimes=("linear", "quadratic"), batch_size=8, device="cpu"):
    """Rows (one per run, length and regime) and the skipped (run, length) pairs.

    Raises:
        ValueError: two runs with the same model name and seed.
    """
    rows, skipped, seen, run_info = [], [], {}, []
    for run in runs:
        model, cfg, meta = eval_mlm.load_model(run, device, with_meta=True)
        name, seed = model_name(run), int(cfg["seed"])
        if (name, seed) in seen:
            raise ValueError(f"runs {seen[(name, seed)]} and {run} are both model {name!r} seed {seed}")
        seen[(name, seed)] = run
        info = {"run": run, "model": name, "seed": seed, "iter_num": meta["iter_num"],
                "train_seconds": train_seconds(run), "train_commit": train_commit(run)}
        run_info.append(info)
        danet = model.config.block == "danet"
        base_params = dict(model.config.attention_params)
        for L in seq_lens:
            if model.config.pos_emb == "learned" and L > model.config.block_size:
                skipped.append({"model": name, "seed": seed, "eval_len": L,
                                "why": f"learned position embeddings cover {model.config.block_size} positions"})
                continue
            batch = sequences.batch(cfg, L)
            for regime in (regimes if danet else [None]):
                if regime is not None:
                    model.set_attention("dense", {**base_params, "regime": regime})
                r = eval_mlm.evaluate_sequences(model, batch, batch_size, device)
                rows.append({"model": name, "seed": seed, "eval_len": L, "regime": regime or "none",
                             **{k: info[k] for k in ("iter_num", "train_seconds")}, **r})
                print(f"{name} seed {seed} L={L} regime={regime or 'none'}: [MASK] inputs loss "
                      f"{r['mask_input_loss']:.4f} vs context-free {r['mask_input_context_free_loss']:.4f} "
                      f"(margin {r['mask_input_margin']:+.4f}); all selected {r['mlm_loss']:.4f} vs "
                      f"{r['context_free_loss']:.4f} (margin {r['margin']:+.4f})", flush=True)
    return rows, skipped, run_info


def summary_rows(rows):
    """The rows of summary.csv ([MASK]-input positions)."""
    return [{"model": r["model"], "seed": r["seed"], "eval_len": r["eval_len"], "regime": r["regime"],
             "masked_loss": r["mask_input_loss"], "context_free_loss": r["mask_input_context_free_loss"],
             "margin": r["mask_input_margin"]} for r in rows]


def all_selected_rows(rows):
    """The rows of summary_all_selected.csv (all selected positions, accuracies, counts, wall time)."""
    return [{"model": r["model"], "seed": r["seed"], "eval_len": r["eval_len"], "regime": r["regime"],
             "loss": r["mlm_loss"], "context_free_loss": r["context_free_loss"], "margin": r["margin"],
             "accuracy": r["mlm_accuracy"], "context_free_accuracy": r["context_free_accuracy"],
             "mask_input_accuracy": r["mask_input_accuracy"],
             "mask_input_context_free_accuracy": r["mask_input_context_free_accuracy"],
             "selected_positions": r["masked_tokens"], "mask_input_positions": r["mask_input_tokens"],
             "sequences": r["sequences"], "iter_num": r["iter_num"], "train_seconds": r["train_seconds"]}
            for r in rows]


def _stats(values):
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), (float(a.std(ddof=1)) if len(a) > 1 else None), float(a.min()), float(a.max())


def mean_rows(rows):
    """Mean and spread over seeds per (model, eval_len, regime) and position set."""
    out = []
    for key in sorted({(r["model"], r["eval_len"], r["regime"]) for r in rows}):
        group = [r for r in rows if (r["model"], r["eval_len"], r["regime"]) == key]
        for positions, prefix in (("mask_input", "mask_input_"), ("all_selected", "")):
            loss = [r[f"{prefix}loss" if prefix else "mlm_loss"] for r in group]
            acc = [r[f"{prefix}accuracy" if prefix else "mlm_accuracy"] for r in group]
            margin = [r[f"{prefix}margin"] for r in group]
            cf_loss = [r[f"{prefix}context_free_loss"] for r in group]
            cf_acc = [r[f"{prefix}context_free_accuracy"] for r in group]
            seconds = [r["train_seconds"] for r in group if r["train_seconds"] is not None]
            loss_mean, loss_std, _, _ = _stats(loss)
            m_mean, m_std, m_min, m_max = _stats(margin)
            a_mean, a_std, _, _ = _stats(acc)
            out.append({"model": key[0], "eval_len": key[1], "regime": key[2], "positions": positions,
                        "seeds": len(group), "loss_mean": loss_mean, "loss_std": loss_std,
                        "context_free_loss": _stats(cf_loss)[0], "margin_mean": m_mean, "margin_std": m_std,
                        "margin_min": m_min, "margin_max": m_max, "accuracy_mean": a_mean, "accuracy_std": a_std,
                        "context_free_accuracy": _stats(cf_acc)[0],
                        "train_seconds_mean": _stats(seconds)[0] if seconds else None})
    return out


def _sort_key(row):
    return (row["model"], row["eval_len"], row["regime"], row.get("positions", ""), row.get("seed", 0))


def write_csv(path, columns, rows):
    """CSV of ``rows`` with exactly ``columns``; floats with 6 decimals, None as an empty field."""
    def cell(v):
        return "" if v is None else (f"{v:.6f}" if isinstance(v, float) else v)

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in sorted(rows, key=_sort_key):
            writer.writerow([cell(row[c]) for c in columns])
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, help="run directories (task='mlm' checkpoints)")
    ap.add_argument("--seq_lens", default="128,512", help="comma-separated evaluation lengths L")
    ap.add_argument("--split", default="test", choices=["train", "val", "test"])
    ap.add_argument("--regimes", default="linear,quadratic", help="DenseAttention regimes of DANet models")
    ap.add_argument("--seed", type=int, default=1234, help="masking seed (combined with L), as eval_mlm.py")
    ap.add_argument("--max_sequences", type=int, default=0, help="at most this many sequences per L (0 = all)")
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--num_threads", type=int, default=0, help="torch CPU threads, 0 = torch's default")
    ap.add_argument("--bert_vocab", default="", help="BERT vocab.txt ('' = as trained, else env BERT_VOCAB_FILE)")
    ap.add_argument("--out_dir", default="results/mlm_wikitext2")
    args = ap.parse_args(argv)
    seq_lens = eval_mlm._int_list(args.seq_lens, "seq_lens")
    regimes = [r.strip() for r in args.regimes.split(",") if r.strip()]
    bad = sorted(set(regimes) - set(eval_mlm.REGIMES))
    if bad or not regimes:
        ap.error(f"unknown regime(s) {bad}; allowed: {', '.join(eval_mlm.REGIMES)}")
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    commit = provenance.git_commit()
    sequences = Sequences(args.split, args.seed, args.max_sequences, args.bert_vocab)
    rows, skipped, runs = evaluate_runs(args.runs, seq_lens, sequences, regimes, args.batch_size)
    out = lambda name: os.path.join(args.out_dir, name)  # noqa: E731
    write_csv(out("summary.csv"), SUMMARY_COLUMNS, summary_rows(rows))
    write_csv(out("summary_all_selected.csv"), ALL_SELECTED_COLUMNS, all_selected_rows(rows))
    write_csv(out("summary_mean.csv"), MEAN_COLUMNS, mean_rows(rows))
    settings = {k: getattr(args, k) for k in ("split", "seq_lens", "regimes", "seed", "max_sequences", "batch_size")}
    write_json(out("summary.json"), {"settings": settings, "runs": runs, "skipped": skipped, "rows": rows,
                                     "mean": mean_rows(rows)}, indent=2, default=str)
    extra = {"settings": settings, "runs": runs, "skipped": skipped}
    provenance.record(out("summary"), commit=commit, extra=extra)
    for name in ("summary_all_selected", "summary_mean"):
        provenance.record(out(name), commit=commit, extra={"settings": settings})
    print(f"wrote {out('summary.csv')}, summary_all_selected.csv, summary_mean.csv, summary.json "
          f"({len(rows)} rows, {len(skipped)} lengths skipped)", file=sys.stderr)
    return rows, skipped


if __name__ == "__main__":
    main()
