"""MLM loss and accuracy of a task="mlm" checkpoint on a whole split, at several sequence lengths,
and for a DANet model in both regimes of DenseAttention.

    python eval_mlm.py --out_dir=out/wikitext2_danet_mini --split=test --seq_lens=128,512
    python eval_mlm.py --out_dir=out/wikitext2_bert_mini --seq_lens=128,512 --max_sequences=200
    python eval_mlm.py --help

For each sequence length L the split's token stream is cut into non-overlapping windows of L - 2
tokens (the remainder is dropped; at most ``max_sequences`` windows), each framed as
[CLS] window [SEP] and masked as in training (15% chosen, 80/10/10) with a generator seeded by
(seed, L): every model evaluated with the same tokenizer, seed and L predicts exactly the same
positions. Reported per (L, regime): ``mlm_loss`` (mean cross-entropy over all chosen positions
of the split, nats), ``mlm_accuracy`` (fraction of chosen positions whose most likely token is
the original), the counts, the wall time and tokens/s (all L tokens of a sequence counted); the
same loss and accuracy on the chosen positions whose input is [MASK] (``mask_input_*``, 80% of
them: the kept 10% are nearly free for any model); and beside each, the best context-free
predictor on the same positions (``context_free_*``: the unigram of the train split and the
80/10/10 rule, ``tasks.mlm.context_free_terms``) and the margin = context-free loss - model loss
(> 0: the model uses context).

DANet models (block="danet") are evaluated with every regime of ``regimes`` (default linear and
quadratic; the paper's claim, Sec. 4.2, is that both give the same metrics); their FFN scales are
folded into the weights first (the export of appendix G; the outputs do not change). A model with
learned position embeddings cannot run beyond its block_size: such lengths are reported as
skipped. Results go to ``out`` (default <out_dir>/eval_mlm_<split>.json) and a table on stdout.
"""
import os
import sys
import time

import numpy as np
import torch

import configurator
from configurator import ConfigError
from data import write_json
import provenance
import training as T

# Keys that mean here what they mean in train.py take its declaration (default and help); the
# others are this script's own, with the reason a same-named train.py key does not fit.
SHARED_KEYS = ("device", "num_threads")
OWN_KEYS = {  # train.py key -> why this script declares its own
    "out_dir": "the MLM run read (its ckpt.pt), not written",
    "batch_size": "sequences per forward pass of the evaluation",
    "seed": "the masking of the evaluation",
    "data_source_dir": "'' = the run's own source",
    "bert_vocab": "'' = the run's own vocabulary",
}
DEFAULTS = dict(
    out_dir="out/wikitext2_bert_mini",
    split="test",
    seq_lens="128,512",
    regimes="",
    max_sequences=0,
    batch_size=8,
    seed=1234,
    data_source_dir="",
    bert_vocab="",
    out="",
    **{key: T.COMMON_DEFAULTS[key] for key in SHARED_KEYS},
)
HELP = dict(
    out_dir="directory of the task='mlm' checkpoint ckpt.pt",
    split="train | val | test",
    seq_lens="comma-separated sequence lengths L (tokens per sequence, [CLS] and [SEP] included)",
    regimes="DANet only: comma-separated DenseAttention regimes ('' = linear,quadratic)",
    max_sequences="at most this many sequences per length (0 = every window of the split)",
    batch_size="sequences per forward pass",
    seed="seed of the masking (combined with L)",
    data_source_dir="directory with wiki.{train,valid,test}.tokens if the split must be prepared ('' = as trained)",
    bert_vocab="BERT vocab.txt ('' = as trained, else env BERT_VOCAB_FILE, else the Hugging Face hub)",
    out="JSON file of the results ('' = <out_dir>/eval_mlm_<split>.json)",
    **{key: T.COMMON_HELP[key] for key in SHARED_KEYS},
)
REGIMES = ("linear", "quadratic", "auto")


def _int_list(text, key):
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{key} must be comma-separated integers; got {text!r}") from None
    if not values or min(values) < 3:
        raise ConfigError(f"{key} needs at least one length >= 3 ([CLS], a token, [SEP]); got {text!r}")
    return values


def load_model(out_dir, device, with_meta=False):
    """The BertEncoder of ``out_dir/ckpt.pt`` in eval mode (FFN scales folded) and the training
    config (and ``checkpoint.load``'s meta: iter_num, path, ... with ``with_meta``).

    Raises:
        ConfigError: no checkpoint, or one of another task.
    """
    import checkpoint

    path = os.path.join(out_dir, "ckpt.pt")
    if not os.path.exists(path):
        raise ConfigError(f"no checkpoint at {path}; train an MLM model there (python train.py "
                          f"configs/mlm/wikitext2_bert_mini.py --out_dir={out_dir}) or point --out_dir at one")
    try:
        model, config, meta = checkpoint.load(out_dir)
    except (FileNotFoundError, ValueError) as e:  # a damaged checkpoint
        raise ConfigError(str(e)) from None
    if meta["task"] != "mlm":
        raise ConfigError(f"{path} was trained on task {meta['task']!r}; eval_mlm.py evaluates task 'mlm' checkpoints")
    model.fold_ffn_scales()  # the inference export (appendix G); same outputs
    if with_meta:
        return model.to(device).eval(), config, meta
    return model.to(device).eval(), config


def masked_sequences(tokens, vocab, cfg, L, max_sequences, seed, counts=None):
    """The split's masked sequences of length L (module docstring), all masking drawn up front
    with the generator seeded by (seed, L): ``tasks.mlm.make_batch``'s dict on the CPU, with the
    context-free terms when ``counts`` (the train split's ``tasks.mlm.unigram_counts``) is given."""
    from data import mlm as mlm_data
    from tasks import mlm as mlm_task

    windows = mlm_data.consecutive_windows(tokens, L - 2, max_sequences)
    return mlm_task.make_batch(windows, vocab, cfg, np.random.default_rng([seed, L]), "cpu", counts)


def evaluate_sequences(model, batch, batch_size, device):
    """The model's loss and accuracy on ``batch`` (``masked_sequences``), over all chosen positions
    and over those whose input is [MASK], and the context-free predictor's if the batch has its terms.

    Returns:
        dict: mlm_loss, mlm_accuracy, masked_tokens (all chosen positions); mask_input_loss,
        mask_input_accuracy, mask_input_tokens; with context-free terms also context_free_loss,
        context_free_accuracy, margin, mask_input_context_free_loss,
        mask_input_context_free_accuracy, mask_input_margin (margin = context-free loss - model
        loss, nats); sequences, tokens, seconds, tokens_per_s.
    """
    from tasks import mlm as mlm_task

    sums = dict(loss=0.0, correct=0, n=0, mask_loss=0.0, mask_correct=0, mask_n=0)
    n_seq, L = batch["idx"].shape
    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(0, n_seq, batch_size):
            part = {k: v[start:start + batch_size].to(device) for k, v in batch.items()}
            nll, hit, chosen = mlm_task.masked_lm_terms(model, part)
            m = part["mask_input"][chosen]
            sums["loss"] += float(nll.double().sum())
            sums["correct"] += int(hit.sum())
            sums["n"] += int(nll.numel())
            sums["mask_loss"] += float(nll[m].double().sum())
            sums["mask_correct"] += int(hit[m].sum())
            sums["mask_n"] += int(m.sum())
    seconds = time.perf_counter() - t0
    n, n_mask = max(sums["n"], 1), max(sums["mask_n"], 1)
    out = {"mlm_loss": sums["loss"] / n, "mlm_accuracy": sums["correct"] / n, "masked_tokens": sums["n"],
           "mask_input_loss": sums["mask_loss"] / n_mask, "mask_input_accuracy": sums["mask_correct"] / n_mask,
           "mask_input_tokens": sums["mask_n"]}
    if "context_free_nll" in batch:
        chosen = batch["labels"] >= 0
        m = batch["mask_input"] & chosen
        nll, correct = batch["context_free_nll"].double(), batch["context_free_correct"]
        out.update(context_free_loss=float(nll[chosen].sum()) / n, context_free_accuracy=int(correct[chosen].sum()) / n,
                   mask_input_context_free_loss=float(nll[m].sum()) / n_mask,
                   mask_input_context_free_accuracy=int(correct[m].sum()) / n_mask)
        out["margin"] = out["context_free_loss"] - out["mlm_loss"]
        out["mask_input_margin"] = out["mask_input_context_free_loss"] - out["mask_input_loss"]
    out.update(sequences=int(n_seq), tokens=int(n_seq * L), seconds=seconds,
               tokens_per_s=n_seq * L / max(seconds, 1e-9))
    return out


def evaluate_length(model, tokens, vocab, cfg, L, max_sequences, batch_size, seed, device, counts=None):
    """``evaluate_sequences`` on ``masked_sequences`` of length L of ``tokens`` (module docstring)."""
    batch = masked_sequences(tokens, vocab, cfg, L, max_sequences, seed, counts)
    return evaluate_sequences(model, batch, batch_size, device)


def train_unigram_counts(cfg, vocab):
    """The add-one unigram counts of the run's train split (``tasks.mlm.unigram_counts``), from
    which the context-free predictor is fitted; the split must be prepared."""
    from data import mlm as mlm_data
    from tasks import mlm as mlm_task

    train = mlm_data.open_split("train", cfg["dataset"], cfg["dataset_config"], cfg["tokenizer"])
    return mlm_task.unigram_counts(train, vocab.random_ids, vocab.model_vocab_size)


def main(argv):
    """Evaluate and write the JSON; return the result dict.

    Raises:
        SystemExit: --help (status 0).
        ConfigError: bad settings or data (missing, malformed, prepared with other options);
            ``configurator.run_cli`` turns it into one ``error:`` line and status 2.
    """
    from data import mlm as mlm_data
    from data import DataError

    args = configurator.parse(DEFAULTS, argv, help=HELP)
    seq_lens = _int_list(args["seq_lens"], "seq_lens")
    if args["num_threads"]:
        torch.set_num_threads(args["num_threads"])
    if args["batch_size"] < 1 or args["max_sequences"] < 0:
        raise ConfigError(f"batch_size must be >= 1 and max_sequences >= 0; got batch_size={args['batch_size']}, "
                          f"max_sequences={args['max_sequences']}")
    configurator.check_device(args["device"])
    model, cfg = load_model(args["out_dir"], args["device"])
    danet = model.config.block == "danet"
    regimes = [r.strip() for r in args["regimes"].split(",") if r.strip()] or (["linear", "quadratic"] if danet else [])
    if regimes and not danet:
        raise ConfigError("regimes apply to DANet models only (this checkpoint has transformer blocks)")
    bad = sorted(set(regimes) - set(REGIMES))
    if bad:
        raise ConfigError(f"unknown regime(s) {bad}; allowed: {', '.join(REGIMES)}")
    # every task="mlm" checkpoint saves both keys (since the task's first commit, 28a393c, 2026-11-22)
    bert_vocab = args["bert_vocab"] or cfg["bert_vocab"]
    try:
        mlm_data.prepare(cfg["dataset"], cfg["dataset_config"], cfg["tokenizer"],
                         args["data_source_dir"] or cfg["data_source_dir"], bert_vocab, verbose=False)
        tokens = mlm_data.open_split(args["split"], cfg["dataset"], cfg["dataset_config"], cfg["tokenizer"])
        vocab = mlm_data.vocab_info(cfg["tokenizer"], bert_vocab)
        counts = train_unigram_counts(cfg, vocab)
    except (DataError, ValueError) as e:
        raise ConfigError(str(e)) from None

    base_params = dict(model.config.attention_params)
    rows = []
    for L in seq_lens:
        if model.config.pos_emb == "learned" and L > model.config.block_size:
            rows.append({"seq_len": L, "skipped": f"learned position embeddings cover {model.config.block_size}"})
            continue
        for regime in regimes or [None]:
            if regime is not None:
                model.set_attention("dense", {**base_params, "regime": regime})
            result = evaluate_length(model, tokens, vocab, cfg, L, args["max_sequences"], args["batch_size"],
                                     args["seed"], args["device"], counts)
            rows.append({"seq_len": L, "regime": regime, "attention": model.config.attention, **result})
            print(f"L={L:>6} {('regime=' + regime) if regime else model.config.attention:>18}: "
                  f"mlm_loss {result['mlm_loss']:.4f}, mlm_accuracy {result['mlm_accuracy']:.4f} "
                  f"({result['masked_tokens']:,} masked tokens in {result['sequences']:,} sequences); "
                  f"[MASK] inputs: loss {result['mask_input_loss']:.4f}, context-free "
                  f"{result['mask_input_context_free_loss']:.4f}, margin {result['mask_input_margin']:+.4f}; "
                  f"{result['tokens_per_s']:,.0f} tok/s", flush=True)
    summary = {}
    for L in seq_lens:
        losses = [r["mlm_loss"] for r in rows if r["seq_len"] == L and "mlm_loss" in r]
        if len(losses) > 1:
            summary[str(L)] = {"max_loss_difference_between_regimes": max(losses) - min(losses)}
    result = {"out_dir": args["out_dir"], "split": args["split"], "block": model.config.block,
              "attention": model.config.attention, "attention_params": base_params,
              "n_params": model.num_params(), "tokenizer": cfg["tokenizer"], "seed": args["seed"], "rows": rows,
              "regime_agreement": summary, "args": args}
    out = args["out"] or os.path.join(args["out_dir"], f"eval_mlm_{args['split']}.json")
    write_json(out, result, indent=2, default=str)
    provenance.record(os.path.splitext(out)[0])
    print(f"wrote {out}", file=sys.stderr)
    return result


if __name__ == "__main__":
    configurator.run_cli(main)
