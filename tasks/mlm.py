"""Task "mlm": BERT-style masked language modelling (Devlin et al. 2019, section 3.1) with
``model.BertEncoder``, transformer or DANet blocks (``block``), on fixed-length sequences of a
tokenized corpus (``data/mlm.py``: WikiText-2 or a Hugging Face corpus; BERT WordPiece or GPT-2 BPE).

A batch is ``batch_size`` windows of ``block_size - 2`` consecutive tokens at random starts of a
split, each framed as [CLS] window [SEP], then masked (``data.mlm.mask_tokens``): 15% of the
ordinary tokens chosen, of those 80% -> [MASK], 10% -> a random token, 10% unchanged; special
tokens never chosen. The loss is the mean cross-entropy over the chosen positions only (nats per
chosen token), and the model projects to the vocabulary only there; the accuracy is the fraction
of chosen positions whose most likely token is the original one. Evaluation: mean loss and
accuracy over ``eval_iters`` fixed batches of train and val. Full-split evaluation at several
sequence lengths (and for DANet in both regimes) is ``eval_mlm.py``'s job.

The interface is described in ``tasks/__init__.py``.
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F

import data as data_lib
from configurator import ConfigError
from data import mlm as mlm_data
from model import ARCHITECTURE_DEFAULTS, ARCHITECTURE_HELP, BertEncoder
from tasks import common

DEFAULTS = dict(
    dataset_config="wikitext-2-v1",
    data_source_dir="",
    tokenizer="bert-wordpiece",
    bert_vocab="",
    mask_prob=0.15,
    mask_frac=0.8,
    random_frac=0.1,
    **ARCHITECTURE_DEFAULTS,
)
HELP = dict(
    dataset_config="WikiText-2 variant: wikitext-2-v1 (<unk>-processed) or wikitext-2-raw-v1",
    data_source_dir="directory with wiki.{train,valid,test}.tokens ('' = env WIKITEXT2_DIR, else Hugging Face)",
    tokenizer="bert-wordpiece (BERT uncased WordPiece, `tokenizers`) | gpt2 (GPT-2 BPE, tiktoken)",
    bert_vocab="BERT vocab.txt ('' = env BERT_VOCAB_FILE, else bert-base-uncased from the Hugging Face hub)",
    mask_prob="probability that an ordinary token is chosen for prediction (BERT: 0.15)",
    mask_frac="fraction of the chosen tokens replaced by [MASK] (BERT: 0.8)",
    random_frac="fraction of the chosen tokens replaced by a random token (BERT: 0.1; the rest stay)",
    **ARCHITECTURE_HELP,
)
MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "attention", "attention_params", "tokenizer",
              *ARCHITECTURE_DEFAULTS)
DATA_KEYS = ("dataset", "dataset_config", "mask_prob", "mask_frac", "random_frac")  # + tokenizer (MODEL_KEYS)
RUN_ONLY_ENTRIES = {}
BEST_METRIC = ("val_loss", "min")
SPLITS = ("train", "val")


def _check(cfg):
    try:
        mlm_data._parse_dataset(cfg["dataset"])
        mlm_data.check_masking(cfg["mask_prob"], cfg["mask_frac"], cfg["random_frac"])
    except ValueError as e:
        raise ConfigError(f"task 'mlm': {e}") from None
    if cfg["tokenizer"] not in mlm_data.TOKENIZERS:
        raise ConfigError(f"unknown tokenizer {cfg['tokenizer']!r}; allowed: {', '.join(mlm_data.TOKENIZERS)}")
    if cfg["block_size"] < 3:
        raise ConfigError(f"block_size must be at least 3 ([CLS], one token, [SEP]); got {cfg['block_size']}")


def prepare_data(cfg):
    """Tokenize the corpus into ``data_dir`` unless it already holds the same text and
    vocabulary (``data.mlm.prepare``; its manifest decides, e.g. a changed vocab.txt re-tokenizes).

    Raises:
        ConfigError: unknown dataset, dataset_config, tokenizer or masking probabilities.
        data.DataUnavailable: the corpus or the BERT vocabulary is missing (message says how to supply it).
        data.DataFormatError: a malformed vocab.txt or corpus file, or a split without tokens.
        data.DataMismatch: prepared tokens differ from what is asked and cannot be prepared again.
    """
    _check(cfg)
    try:
        mlm_data.prepare(cfg["dataset"], cfg["dataset_config"], cfg["tokenizer"], cfg["data_source_dir"],
                         cfg["bert_vocab"])
    except data_lib.DataError:
        raise  # a data-file problem (DataFormatError is also a ValueError): not a config mistake
    except ValueError as e:
        raise ConfigError(str(e)) from None


def load_data(cfg):
    """dict: "train", "val" -> read-only uint16 memmaps of token ids; "vocab" -> ``data.mlm.Vocab``;
    "manifest" -> the prepared tokens' summary (``data.mlm.summary``: source, train_size,
    train_size_unit "tokens", val_size, test_size, tokenizer identity) for the run log.

    Raises:
        ConfigError: a split holds fewer than block_size - 2 tokens (one MLM sequence).
        data.DataUnavailable: a split file, the manifest or the BERT vocabulary is missing.
        data.DataFormatError: an empty or malformed token file or vocab.txt.
        data.DataMismatch: a token file's size differs from its manifest.
    """
    _check(cfg)
    out = {split: mlm_data.open_split(split, cfg["dataset"], cfg["dataset_config"], cfg["tokenizer"])
           for split in SPLITS}
    for split in SPLITS:
        try:
            mlm_data.check_window_fits(out[split], cfg["block_size"], name=f"split {split!r}")
        except ValueError as e:
            raise ConfigError(str(e)) from None
    out["vocab"] = mlm_data.vocab_info(cfg["tokenizer"], cfg["bert_vocab"])
    out["manifest"] = mlm_data.summary(mlm_data.manifest(cfg["dataset"], cfg["dataset_config"], cfg["tokenizer"]))
    return out


def model_config(cfg, vocab):
    """The ``ModelConfig`` of ``cfg``'s architecture keys for tokenizer vocabulary ``vocab``.

    Raises:
        ConfigError: unknown attention or parameter, or an invalid architecture combination.
    """
    return common.model_config(cfg, block_size=cfg["block_size"], vocab_size=vocab.model_vocab_size,
                              pad_token_id=vocab.pad_id)


def build_model(cfg, data):
    """A ``BertEncoder`` (MLM head tied to the token embedding; PAD = the tokenizer's [PAD]) from
    ``cfg``.

    Raises:
        ConfigError: see ``model_config``.
    """
    return BertEncoder(model_config(cfg, data["vocab"]))


def make_batch(windows, vocab, cfg, rng, device):
    """Frame (n, L - 2) token windows as [CLS] ... [SEP] and mask them with ``rng``.

    Returns:
        dict "idx" (n, L) int64 masked inputs, "labels" (n, L) int64 (original id where chosen,
        -1 elsewhere), on ``device``.
    """
    ids = mlm_data.add_special_tokens(windows, vocab)
    inputs, labels = mlm_data.mask_tokens(ids, vocab, rng, cfg["mask_prob"], cfg["mask_frac"], cfg["random_frac"])
    return {"idx": torch.from_numpy(inputs).to(device), "labels": torch.from_numpy(labels).to(device)}


def _seed_list(seed):
    return [int(s) for s in seed] if isinstance(seed, (list, tuple)) else [int(seed)]


def get_batch(data, split, cfg, seed, device):
    """``batch_size`` masked sequences of ``block_size`` tokens from ``split``, a pure function of
    ``seed`` (windows drawn with ``seed``, masking with ``seed`` + [1]).

    Returns:
        dict "idx", "labels": (batch_size, block_size) int64 on ``device`` (see ``make_batch``).

    Raises:
        ValueError: the split has fewer than block_size - 2 tokens (the message speaks of MLM).
    """
    mlm_data.check_window_fits(data[split], cfg["block_size"], name=f"split {split!r}")
    windows = data_lib.sample_windows(data[split], cfg["batch_size"], cfg["block_size"] - 2, seed,
                                      name=f"split {split!r}")
    rng = np.random.default_rng(_seed_list(seed) + [1])
    return make_batch(windows, data["vocab"], cfg, rng, device)


def masked_lm_sums(model, batch):
    """Summed cross-entropy (nats), number of correct predictions and number of chosen
    positions of a batch; the model projects to the vocabulary at the chosen positions only.

    Returns:
        (loss_sum, correct, n_chosen): 0-dim tensors (loss_sum differentiable).
    """
    chosen = batch["labels"] >= 0
    logits = model(batch["idx"], batch.get("attention_mask"), mlm_mask=chosen)  # (N, V)
    targets = batch["labels"][chosen]
    if targets.numel() == 0:  # no token chosen (possible in a tiny batch): nothing to learn from
        zero = logits.sum() * 0.0
        return zero, zero.detach(), zero.detach()
    loss_sum = F.cross_entropy(logits.float(), targets, reduction="sum")
    correct = (logits.argmax(-1) == targets).sum()
    return loss_sum, correct, torch.tensor(float(targets.numel()), device=logits.device)


def loss(model, batch):
    """Mean cross-entropy over the chosen positions (nats per chosen token); metrics {"loss",
    "accuracy"} (0 for both when nothing was chosen)."""
    loss_sum, correct, n = masked_lm_sums(model, batch)
    n_safe = n.clamp_min(1.0)
    value = loss_sum / n_safe
    return value, {"loss": value.detach(), "accuracy": (correct / n_safe).detach()}


def evaluate(model, data, cfg, device):
    """Mean loss and accuracy over ``eval_iters`` fixed batches of train and val.

    Returns:
        {"train_loss", "train_accuracy", "val_loss", "val_accuracy"} as floats.
    """
    out = {}
    this_task = sys.modules[__name__]
    for split in SPLITS:
        metrics = common.mean_over_batches(this_task, model, data, split, cfg, device, cfg["eval_iters"])
        out[f"{split}_loss"], out[f"{split}_accuracy"] = metrics["loss"], metrics["accuracy"]
    return out


def batch_tokens(cfg):
    """Input tokens in one batch: batch_size x block_size."""
    return cfg["batch_size"] * cfg["block_size"]
