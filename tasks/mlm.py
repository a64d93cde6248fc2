"""Task "mlm": BERT-style masked language modelling (Devlin et al. 2019, section 3.1) with
``model.BertEncoder``, transformer or DANet blocks (``block``), on fixed-length sequences of a
tokenized corpus (``data/mlm.py``: WikiText-2 or a Hugging Face corpus; BERT WordPiece or GPT-2 BPE).

A batch is ``batch_size`` windows of ``block_size - 2`` consecutive tokens at random starts of a
split, each framed as [CLS] window [SEP], then masked (``data.mlm.mask_tokens``): 15% of the
ordinary tokens chosen, of those 80% -> [MASK], 10% -> a random token, 10% unchanged; special
tokens never chosen. The loss is the mean cross-entropy over the chosen positions only (nats per
chosen token), and the model projects to the vocabulary only there; the accuracy is the fraction
of chosen positions whose most likely token is the original one. Beside them, on the chosen positions
whose input is [MASK] (80% of them): ``mask_loss``, ``mask_accuracy`` and ``mask_margin``, the
loss of the best context-free predictor on the same positions minus the model's (the unigram of the
train split; > 0 = the model uses context; see ``context_free_terms``). Evaluation: the means of
these over ``eval_iters`` fixed batches of train and val. Full-split evaluation at several
sequence lengths (and for DANet in both regimes) is ``eval_mlm.py``'s job.

``mlm_bias_init`` = "log_unigram" starts the MLM head's output bias at the log unigram of the
train split (``log_unigram_bias``), so the model starts at the context-free [MASK] prediction
instead of a uniform one ("zero", the default, as BERT).

The interface is described in ``tasks/__init__.py``.
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F

import data as data_lib
from configurator import ConfigError
from data import mlm as mlm_data
from data.wikitext2 import prepare as wt2
from model import BertEncoder
from tasks import common

DEFAULTS = dict(
    **wt2.CONFIG_DEFAULTS,  # dataset_config, data_source_dir
    tokenizer="bert-wordpiece",
    bert_vocab="",
    mask_prob=0.15,
    mask_frac=0.8,
    random_frac=0.1,
    mlm_bias_init="zero",
)
MLM_BIAS_INITS = ("zero", "log_unigram")
HELP = dict(
    **wt2.CONFIG_HELP,
    tokenizer="bert-wordpiece (BERT uncased WordPiece, `tokenizers`) | gpt2 (GPT-2 BPE, tiktoken)",
    bert_vocab="BERT vocab.txt ('' = env BERT_VOCAB_FILE, else bert-base-uncased from the Hugging Face hub)",
    mask_prob="probability that an ordinary token is chosen for prediction (BERT: 0.15)",
    mask_frac="fraction of the chosen tokens replaced by [MASK] (BERT: 0.8)",
    random_frac="fraction of the chosen tokens replaced by a random token (BERT: 0.1; the rest stay)",
    mlm_bias_init="MLM head output bias at the start: zero (BERT) | log_unigram (log of the train split's "
                  "add-one smoothed unigram)",
)
MODEL = BertEncoder  # the model class this task builds, and loads from its checkpoints (checkpoint.load)
MODEL_KEYS = ("block_size", "tokenizer", "mlm_bias_init")  # beside model.RUN_KEYS
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
    if cfg["mlm_bias_init"] not in MLM_BIAS_INITS:
        raise ConfigError(f"mlm_bias_init must be one of {', '.join(MLM_BIAS_INITS)}; got {cfg['mlm_bias_init']!r}")
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
    "unigram_counts" -> the train split's add-one counts (``unigram_counts``; the bias
    initialisation and the context-free predictor of the metrics use them); "manifest" -> the
    prepared tokens' summary (``data.mlm.summary``: source, train_size, train_size_unit "tokens",
    val_size, test_size, tokenizer identity) for the run log.

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
    out["unigram_counts"] = unigram_counts(out["train"], out["vocab"].random_ids, out["vocab"].model_vocab_size)
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
    ``cfg``; with ``mlm_bias_init`` = "log_unigram" its output bias is ``log_unigram_bias`` of the
    train split (``data["unigram_counts"]``, or counted from ``data["train"]``).

    Raises:
        ConfigError: see ``model_config``.
    """
    model = MODEL(model_config(cfg, data["vocab"]))
    if cfg["mlm_bias_init"] == "log_unigram":
        counts = data.get("unigram_counts")
        if counts is None:
            counts = unigram_counts(data["train"], data["vocab"].random_ids, data["vocab"].model_vocab_size)
        with torch.no_grad():
            model.mlm_bias.copy_(torch.from_numpy(log_unigram_bias(counts)))
    return model


# ---------------------------------------------------------------------------------------------
# the unigram of the train split: output bias and the best context-free predictor


def unigram_counts(train_ids, ordinary_ids, vocab_size):
    """Add-one smoothed counts of the ordinary tokens in ``train_ids``: c_v = 1 + (occurrences of
    v) for v in ``ordinary_ids`` (the ids that can be chosen and drawn as random tokens,
    ``Vocab.random_ids``), 0 for every other row; a (vocab_size,) float64 array. The unigram of
    the context-free predictor is c / c.sum().

    Raises:
        ValueError: a token id >= vocab_size.
    """
    ids = np.asarray(train_ids)
    full = np.bincount(ids.ravel(), minlength=vocab_size) if ids.size else np.zeros(vocab_size, dtype=np.int64)
    if full.size > vocab_size:
        raise ValueError(f"token id {full.size - 1} >= vocab_size {vocab_size}")
    ordinary_ids = np.asarray(ordinary_ids)
    counts = np.zeros(vocab_size)
    counts[ordinary_ids] = 1.0 + full[ordinary_ids]
    return counts


def log_unigram_bias(counts):
    """The MLM output bias of ``mlm_bias_init="log_unigram"``: log(c_v / N) with the add-one
    counts c of ``unigram_counts`` and N = their sum, and log(1 / N) (an ordinary token never
    seen) for the rows that are never a target (special tokens, unused ids, padding rows). A
    (V,) float32 array; exp(bias) is the context-free unigram on the ordinary rows, so with a
    zero head the [MASK] loss is the context-free one plus log(1 + n_other / N) (n_other rows
    that are never a target; 5e-4 nats for BERT's vocabulary on WikiText-2's train split)."""
    counts = np.asarray(counts, dtype=np.float64)
    return (np.log(np.maximum(counts, 1.0)) - np.log(counts.sum())).astype(np.float32)


def context_free_terms(counts, inputs, labels, vocab, mask_frac, random_frac):
    """The best prediction that ignores every other token, at each chosen position: the Bayes
    posterior of BERT's masking rule (``data.mlm.mask_tokens``) given only the input token x,
    with the unigram p = counts / counts.sum() of ``unigram_counts``:

        x = [MASK]:  P(y) = p(y)
        x ordinary:  P(y | x) = (k p(y) [y = x] + r p(y) / R) / (k p(x) + r / R)

    k = 1 - mask_frac - random_frac (kept), r = random_frac, R = the number of ordinary ids
    (``vocab.random_ids``, the ids a random replacement is drawn from). Its guess is the unigram
    mode for [MASK], and x for an input x unless r p_mode / R beats k p(x) + r p(x) / R.

    Args:
        counts: (V,) add-one counts; inputs, labels: (n, L) int arrays (labels -1 = not chosen).

    Returns:
        (nll, correct): (n, L) float64 -log P(label | input) and bool (guess == label); 0 and
        False at the positions that are not chosen.

    Raises:
        ValueError: a chosen label outside the ordinary ids (p = 0).
    """
    counts = np.asarray(counts, dtype=np.float64)
    p = counts / counts.sum()
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    chosen = labels >= 0
    x, y = inputs[chosen], labels[chosen]
    if np.any(p[y] <= 0):
        bad = sorted(set(y[p[y] <= 0].tolist()))[:5]
        raise ValueError(f"chosen labels {bad} are not ordinary ids (no unigram probability)")
    k, r, R = 1.0 - mask_frac - random_frac, random_frac, len(vocab.random_ids)
    top = int(p.argmax())
    is_mask = x == vocab.mask_id
    px = np.where(is_mask, 0.0, p[x])
    with np.errstate(divide="ignore", invalid="ignore"):
        given_x = (k * p[y] * (x == y) + r * p[y] / R) / (k * px + r / R)
    prob = np.where(is_mask, p[y], given_x)
    guess = np.where(is_mask | ~(k * px + r * px / R > r * p[top] / R), top, x)
    nll, correct = np.zeros(labels.shape), np.zeros(labels.shape, dtype=bool)
    nll[chosen], correct[chosen] = -np.log(prob), guess == y
    return nll, correct


# ---------------------------------------------------------------------------------------------
# batches and the loss


def make_batch(windows, vocab, cfg, rng, device, counts=None):
    """Frame (n, L - 2) token windows as [CLS] ... [SEP] and mask them with ``rng``.

    Args:
        counts: the train split's ``unigram_counts``, or None (then no context-free terms).

    Returns:
        dict on ``device``: "idx" (n, L) int64 masked inputs, "labels" (n, L) int64 (original id
        where chosen, -1 elsewhere), "mask_input" (n, L) bool (the input is [MASK]); with
        ``counts`` also "context_free_nll" (n, L) float32 and "context_free_correct" (n, L) bool
        (``context_free_terms``; 0 / False where not chosen).
    """
    ids = mlm_data.add_special_tokens(windows, vocab)
    inputs, labels = mlm_data.mask_tokens(ids, vocab, rng, cfg["mask_prob"], cfg["mask_frac"], cfg["random_frac"])
    batch = {"idx": torch.from_numpy(inputs), "labels": torch.from_numpy(labels),
             "mask_input": torch.from_numpy(inputs == vocab.mask_id)}
    if counts is not None:
        nll, correct = context_free_terms(counts, inputs, labels, vocab, cfg["mask_frac"], cfg["random_frac"])
        batch["context_free_nll"] = torch.from_numpy(nll.astype(np.float32))
        batch["context_free_correct"] = torch.from_numpy(correct)
    return {k: v.to(device) for k, v in batch.items()}


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
    return make_batch(windows, data["vocab"], cfg, rng, device, data.get("unigram_counts"))


def masked_lm_terms(model, batch):
    """Per chosen position (row-major order) the model's cross-entropy (nats) and whether its most
    likely token is the label; the model projects to the vocabulary at the chosen positions only.

    Returns:
        (nll (N,) float32, differentiable; hit (N,) bool; chosen (B, T) bool).
    """
    chosen = batch["labels"] >= 0
    logits = model(batch["idx"], batch.get("attention_mask"), mlm_mask=chosen)  # (N, V)
    targets = batch["labels"][chosen]
    nll = F.cross_entropy(logits.float(), targets, reduction="none")
    return nll, logits.argmax(-1) == targets, chosen


def masked_lm_sums(model, batch):
    """Summed cross-entropy (nats), number of correct predictions and number of chosen
    positions of a batch.

    Returns:
        (loss_sum, correct, n_chosen): 0-dim tensors (loss_sum differentiable; 0 with a gradient
        path when nothing was chosen).
    """
    nll, hit, chosen = masked_lm_terms(model, batch)
    return nll.sum(), hit.sum().float(), chosen.sum().float()


def loss(model, batch):
    """Mean cross-entropy over the chosen positions (nats per chosen token); metrics "loss",
    "accuracy", and over the chosen positions whose input is [MASK] (if the batch says which,
    "mask_input") "mask_loss", "mask_accuracy", and with the context-free terms "mask_margin"
    (context-free loss minus the model's on those positions). An empty set gives 0."""
    nll, hit, chosen = masked_lm_terms(model, batch)
    n = chosen.sum().float().clamp_min(1.0)
    value = nll.sum() / n
    metrics = {"loss": value.detach(), "accuracy": hit.sum().float() / n}
    if "mask_input" in batch:
        m = batch["mask_input"][chosen]
        n_mask = m.sum().float().clamp_min(1.0)
        mask_loss = (nll.detach() * m).sum() / n_mask
        metrics.update(mask_loss=mask_loss, mask_accuracy=(hit & m).sum().float() / n_mask)
        if "context_free_nll" in batch:
            context_free = (batch["context_free_nll"][chosen] * m).sum() / n_mask
            metrics["mask_margin"] = context_free - mask_loss
    return value, metrics


def evaluate(model, data, cfg, device):
    """Mean loss and accuracy over ``eval_iters`` fixed batches of train and val.

    Returns:
        {"<split>_<metric>"} as floats for split train, val and every metric of ``loss``
        ("train_loss", "train_accuracy", "train_mask_loss", ..., "val_mask_margin").
    """
    out = {}
    this_task = sys.modules[__name__]
    for split in SPLITS:
        metrics = common.mean_over_batches(this_task, model, data, split, cfg, device, cfg["eval_iters"])
        out.update({f"{split}_{name}": value for name, value in metrics.items()})
    return out


def batch_tokens(cfg):
    """Input tokens in one batch: batch_size x block_size."""
    return cfg["batch_size"] * cfg["block_size"]
