"""Task "lm": causal language modelling (next-token prediction) with ``model.GPT`` on one of
``DATASETS``:

- ``dataset = "wikitext2"``: WikiText-2 tokenized with GPT-2 BPE (``data/wikitext2/prepare.py``;
  variant from ``dataset_config``, local copy from ``data_source_dir``); vocabulary 50257 padded
  to 50304.
- ``dataset = "shakespeare_char"``: Tiny Shakespeare at the character level
  (``data/shakespeare_char/prepare.py``; 90/5/5 train/val/test; local copy from
  ``data_source_file``); vocabulary = the characters of the text (65), read from the prepared
  meta.json, not padded. The corpus of the FAST paper's Figure 4.

Batches are ``block_size + 1``-token windows at random starts (``data.sample_windows``):
inputs = the first ``block_size`` tokens, targets = the window shifted by one. The loss is the
mean cross-entropy over all B x T positions (nats per token); evaluation reports it on
``eval_iters`` fixed random batches of the train and validation splits and the validation
perplexity exp(val_loss). The checkpoint with the lowest ``val_loss`` is the best; after
training, ``final_evaluate`` repeats the validation estimate on its weights, so that train.py
writes ``final_metrics.json`` (iterations, training time, the run's config) as for every task.
Full-split perplexity with a proper protocol is ``eval_ppl.py``'s job.

The interface is described in ``tasks/__init__.py``.
"""
import math
import sys

import torch

import data as data_lib
from configurator import ConfigError
from data.shakespeare_char import prepare as shakespeare
from data.wikitext2 import prepare as wt2
from model import GPT
from tasks import common

DEFAULTS = dict(
    **wt2.CONFIG_DEFAULTS,  # dataset_config, data_source_dir
    data_source_file="",
)
HELP = dict(
    **wt2.CONFIG_HELP,
    data_source_file="shakespeare_char: the Tiny Shakespeare text ('' = env TINYSHAKESPEARE_FILE, else a copy "
                     "downloaded earlier, else download from char-rnn's GitHub)",
)
DATASETS = ("wikitext2", "shakespeare_char")
MODEL = GPT  # the model class this task builds, and loads from its checkpoints (checkpoint.load)
MODEL_KEYS = ("block_size",)  # beside model.RUN_KEYS
DATA_KEYS = ("dataset", "dataset_config")  # the tokens trained on; source paths may move (manifests check them)
RUN_ONLY_ENTRIES = {}
BEST_METRIC = ("val_loss", "min")
CAUSAL = True  # a GPT: training.check_trainable refuses attentions that are not exactly causal
VOCAB_SIZE = 50304  # GPT-2's 50257 padded to a multiple of 64 (faster matmuls); extra rows never targeted
SPLITS = ("train", "val")


def _check_dataset(cfg):
    """The keys ``load_data`` reads: ``dataset``, and ``dataset_config`` for WikiText-2 (a caller
    that only reads prepared tokens, such as scripts/analysis/alignments.py, passes just these)."""
    if cfg["dataset"] not in DATASETS:
        raise ConfigError(f"task 'lm' has no dataset {cfg['dataset']!r}; available: {', '.join(DATASETS)}")
    if cfg["dataset"] == "wikitext2" and cfg["dataset_config"] not in wt2.CONFIGS:
        raise ConfigError(f"unknown dataset_config {cfg['dataset_config']!r}; allowed: {', '.join(wt2.CONFIGS)}")


def _check_sources(cfg):
    """A key of the other data set would be silently ignored: reject it (a whole run config)."""
    if cfg["dataset"] == "shakespeare_char":
        for key in ("dataset_config", "data_source_dir"):
            if cfg[key] != DEFAULTS[key]:
                raise ConfigError(f"{key} applies to dataset 'wikitext2' only, not to 'shakespeare_char' "
                                  f"(its source file is data_source_file)")
    elif cfg["data_source_file"]:
        raise ConfigError("data_source_file applies to dataset 'shakespeare_char' only; WikiText-2's local "
                          "copy is data_source_dir")


def prepare_data(cfg):
    """Tokenize WikiText-2 into ``data/wikitext2/<dataset_config>/`` unless its manifest shows the
    same text (``wt2.prepare``: a named local copy is hashed and compared; another copy is
    tokenized again); for shakespeare_char, ``shakespeare.prepare`` (a no-op when the manifest
    holds the source's sha256, so a changed source is re-prepared).

    Raises:
        ConfigError: unknown dataset or dataset_config, or a key of the other data set.
        data.DataUnavailable: no local copy and no Hugging Face access / download (message says
            how to supply it).
        data.DataFormatError: a source file that is not UTF-8 (names the file and line), an empty text.
    """
    _check_dataset(cfg)
    _check_sources(cfg)
    if cfg["dataset"] == "shakespeare_char":
        shakespeare.prepare(cfg["data_source_file"] or None)
        return
    wt2.prepare(cfg["dataset_config"], cfg["data_source_dir"] or None, min_tokens=cfg["block_size"] + 1,
                source_key="--data_source_dir")


def load_data(cfg):
    """dict split -> read-only uint16 memmap of token ids (GPT-2 BPE or characters), for "train"
    and "val"; "manifest" -> the prepared data's summary for the run log (source, train_size,
    train_size_unit "tokens", val_size, test_size, tokenizer; ``wt2.summary`` /
    ``shakespeare.summary``); for shakespeare_char also "meta" -> the prepared meta dict
    (vocabulary).

    Raises:
        data.DataUnavailable: a split file or the manifest is missing (prepare_data not run).
        data.DataFormatError: an empty or odd-sized token file.
        data.DataMismatch: a token file's size differs from its manifest.
    """
    _check_dataset(cfg)
    if cfg["dataset"] == "shakespeare_char":
        return {**{split: shakespeare.open_split(split) for split in SPLITS}, "meta": shakespeare.load_meta(),
                "manifest": shakespeare.summary()}
    manifest = data_lib.read_manifest(wt2.data_dir(cfg["dataset_config"]))
    if manifest is None:
        raise data_lib.DataUnavailable(f"{wt2.data_dir(cfg['dataset_config'])} has no {data_lib.MANIFEST}; prepare it "
                                       f"with python -m data.wikitext2.prepare --config={cfg['dataset_config']}")
    return {**{split: wt2.open_split(split, cfg["dataset_config"]) for split in SPLITS},
            "manifest": wt2.summary(manifest)}


def vocab_size(cfg, data=None):
    """The model's vocabulary size: 50304 for wikitext2; for shakespeare_char the prepared
    meta's ``vocab_size`` (from ``data["meta"]`` when given, else from meta.json).

    Raises:
        data.DataUnavailable: shakespeare_char not prepared and no meta in ``data``.
    """
    if cfg["dataset"] == "shakespeare_char":
        meta = data.get("meta") if isinstance(data, dict) else None
        return int((meta or shakespeare.load_meta())["vocab_size"])
    return VOCAB_SIZE


def build_model(cfg, data):
    """A ``GPT`` with the model keys of ``cfg`` (vocabulary: ``vocab_size``, i.e. 50304 for
    WikiText-2).

    Raises:
        ConfigError: unknown attention name or parameter, or an invalid architecture.
    """
    return MODEL(common.model_config(cfg, block_size=cfg["block_size"], vocab_size=vocab_size(cfg, data)))


def get_batch(data, split, cfg, seed, device):
    """``batch_size`` windows of ``split``, a pure function of ``seed``.

    Returns:
        dict with "idx" (inputs) and "targets" (inputs shifted by one token), both (B, T)
        int64 on ``device``, B = batch_size, T = block_size.

    Raises:
        ValueError: the split has fewer than block_size + 1 tokens (both lengths in the message).
    """
    windows = torch.from_numpy(data_lib.sample_windows(data[split], cfg["batch_size"], cfg["block_size"] + 1,
                                                       seed, name=f"split {split!r}"))
    return {"idx": windows[:, :-1].contiguous().to(device), "targets": windows[:, 1:].contiguous().to(device)}


def loss(model, batch):
    """Mean next-token cross-entropy (nats per token) over the batch; metrics {"loss"}."""
    _, value = model(batch["idx"], batch["targets"])
    return value, {"loss": value.detach()}


def _split_metrics(model, data, cfg, device, splits):
    """Mean loss (nats per token) over ``eval_iters`` fixed batches of each split, and the
    validation perplexity exp(val_loss) when "val" is among ``splits``."""
    this_task = sys.modules[__name__]
    out = {f"{split}_loss": common.mean_over_batches(this_task, model, data, split, cfg, device,
                                                     cfg["eval_iters"])["loss"]
           for split in splits}
    if "val_loss" in out:
        out["val_ppl"] = math.exp(min(out["val_loss"], 700.0))  # exp overflows a float beyond ~709
    return out


def evaluate(model, data, cfg, device):
    """Mean loss over ``eval_iters`` fixed batches of train and val, and exp(val_loss).

    Returns:
        {"train_loss", "val_loss", "val_ppl"} as floats.
    """
    return _split_metrics(model, data, cfg, device, SPLITS)


def final_evaluate(model, data, cfg, device):
    """The selected (best validation loss) weights on the same ``eval_iters`` fixed validation
    batches as ``evaluate``: {"val_loss" (nats per token), "val_ppl"} as floats. Cheap on purpose:
    the test perplexity of a run is eval_ppl.py's (its protocols cover the whole split)."""
    return _split_metrics(model, data, cfg, device, ("val",))


def batch_tokens(cfg):
    """Input tokens in one batch: batch_size x block_size."""
    return cfg["batch_size"] * cfg["block_size"]
