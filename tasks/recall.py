"""Task "recall": multi-query associative recall (MQAR; Arora et al. 2023, "Zoology: Measuring and
Improving Recall in Efficient Language Models") with a causal ``model.GPT``.

The data (``data/recall.py``): sequences of ``block_size`` tokens, ``recall_pairs`` key-value
pairs followed by one query of every key at power-law gaps; the label of a query position is its
key's value. Every other position is ignored: the loss is the mean cross-entropy over the query
positions only, and the LM head runs only there (``GPT.forward(..., only_targets=True)``), as a
full-vocabulary head at every position would cost about T / N times more. Accuracy is the fraction
of query positions whose most likely next token is the value.

A query can only be answered by finding its key among the earlier tokens and reading the token
after it, so the task measures what attentions differ in: recall over a distance. Zoology's
Figure 2 setting is 2 layers, one head, no MLP, learned positions, vocabulary 8,192; our GPT keeps
its MLP. Evaluation covers the whole val split (fixed examples); ``final_evaluate`` the whole test
split, and with ``recall_test_pairs`` also test sets with other numbers of pairs at the same length.

The interface is described in ``tasks/__init__.py``.
"""
import numpy as np
import torch

from configurator import ConfigError
from data import recall as recall_data
from model import GPT
from tasks import common

DEFAULTS = dict(
    recall_pairs=16,
    recall_vocab=8192,
    recall_power_a=0.01,
    recall_filler="zero",
    recall_data_seed=0,
    recall_sizes={"train": 20000, "val": 1000, "test": 1000},
    recall_test_pairs=(),
    recall_dir="",
)
HELP = dict(
    recall_pairs="key-value pairs per training (and val / test) sequence; the sequence length is block_size",
    recall_vocab="vocabulary size (keys from the lower half, values from the upper half)",
    recall_power_a="exponent a of the query-gap distribution p(g) ~ (g + 1)^(a - 1) (Zoology: 0.01)",
    recall_filler="tokens between the queries: zero (token 0, Zoology's Figure 2) | random (their generator's default)",
    recall_data_seed="seed of the generated examples (the training seed is `seed`)",
    recall_sizes="examples per split {'train', 'val', 'test'}",
    recall_test_pairs="more numbers of pairs to test at the same length after training, e.g. (4, 8)",
    recall_dir="where the generated sets go ('' = data/mqar/)",
)
MODEL = GPT  # the model class this task builds, and loads from its checkpoints (checkpoint.load)
MODEL_KEYS = ("block_size", "recall_vocab")  # beside model.RUN_KEYS
# train.py keys this task does not read (setting one is an error naming the task)
IGNORED_KEYS = {"dataset": "the sequences are generated from the recall_* keys"}
DATA_KEYS = ("recall_pairs", "recall_power_a", "recall_filler", "recall_data_seed", "recall_sizes")
RUN_ONLY_ENTRIES = {}
BEST_METRIC = ("val_accuracy", "max")
CAUSAL = True  # a GPT: training.check_trainable refuses attentions that are not exactly causal


def _options(cfg, num_pairs=None, sizes=None):
    return dict(seq_len=cfg["block_size"], num_pairs=cfg["recall_pairs"] if num_pairs is None else num_pairs,
                vocab_size=cfg["recall_vocab"], power_a=cfg["recall_power_a"], seed=cfg["recall_data_seed"],
                sizes=cfg["recall_sizes"] if sizes is None else sizes, root=cfg["recall_dir"] or recall_data.DATA_ROOT,
                filler=cfg["recall_filler"])


def _test_sizes(cfg):
    return {"train": 1, "val": 1, "test": cfg["recall_sizes"]["test"]}  # test-only sets of other pair counts


def prepare_data(cfg):
    """Generate the train / val / test sets (and the ``recall_test_pairs`` test sets) unless a
    folder with the same options' manifest exists (``data.recall.prepare``).

    Raises:
        ConfigError: options the task cannot be built with (the message says what is allowed).
    """
    try:
        recall_data.prepare(**_options(cfg))
        for n in cfg["recall_test_pairs"]:
            recall_data.prepare(**_options(cfg, n, _test_sizes(cfg)))
    except ValueError as e:
        raise ConfigError(f"recall: {e}") from None


def load_data(cfg):
    """dict split -> (inputs uint16, labels int16) arrays (n, T), "test_pairs" -> {N: (inputs,
    labels)} of the extra test sets, "manifest" -> a summary for the run log.

    Raises:
        data.DataUnavailable: not prepared.
    """
    folder = recall_data.folder(**_options(cfg))
    loaded = {split: recall_data.load(folder, split) for split in recall_data.SPLITS}
    loaded["test_pairs"] = {n: recall_data.load(recall_data.folder(**_options(cfg, n, _test_sizes(cfg))), "test")
                            for n in cfg["recall_test_pairs"]}
    loaded["manifest"] = {"source": "generated (data.recall)", "folder": folder, "seq_len": cfg["block_size"],
                          "num_pairs": cfg["recall_pairs"], "train_size": cfg["recall_sizes"]["train"],
                          "train_size_unit": "sequences"}
    return loaded


def build_model(cfg, data):
    """A causal ``GPT`` with the model keys of ``cfg`` and ``recall_vocab`` tokens.

    Raises:
        ConfigError: unknown attention name or parameter, or an invalid architecture.
    """
    return MODEL(common.model_config(cfg, block_size=cfg["block_size"], vocab_size=cfg["recall_vocab"]))


def _batch(inputs, labels, rows, device):
    return {"idx": torch.from_numpy(np.asarray(inputs[rows], dtype=np.int64)).to(device),
            "targets": torch.from_numpy(np.asarray(labels[rows], dtype=np.int64)).to(device)}


def get_batch(data, split, cfg, seed, device):
    """``batch_size`` examples of ``split`` drawn with replacement, a pure function of ``seed``.

    Returns:
        dict with "idx" (B, T) int64 and "targets" (B, T) int64 (-1 except at query positions).
    """
    inputs, labels = data[split]
    rows = np.sort(np.random.default_rng(seed).integers(0, len(inputs), size=cfg["batch_size"]))
    return _batch(inputs, labels, rows, device)


def _correct(logits, targets):
    """Bool (M,): whether the most likely token at each scored position is its target (logits from
    ``GPT.forward(..., only_targets=True)``, in the order of ``targets != -1``)."""
    return logits.argmax(-1) == targets[targets != -1]


def loss(model, batch):
    """Mean cross-entropy over the query positions (nats per query); metrics {"loss", "accuracy"}."""
    logits, value = model(batch["idx"], batch["targets"], only_targets=True)
    return value, {"loss": value.detach(), "accuracy": _correct(logits, batch["targets"]).float().mean()}


@torch.no_grad()
def split_metrics(model, inputs, labels, batch_size, device):
    """Loss and accuracy over every query position of the examples ``inputs`` / ``labels``
    (in order, batches of ``batch_size``), each query weighted equally.

    Returns:
        {"loss", "accuracy", "queries"}.
    """
    total_loss, correct, queries = 0.0, 0, 0
    for start in range(0, len(inputs), batch_size):
        batch = _batch(inputs, labels, np.arange(start, min(start + batch_size, len(inputs))), device)
        logits, value = model(batch["idx"], batch["targets"], only_targets=True)
        n = logits.shape[0]
        total_loss += float(value) * n
        correct += int(_correct(logits, batch["targets"]).sum())
        queries += n
    return {"loss": total_loss / queries, "accuracy": correct / queries, "queries": queries}


def evaluate(model, data, cfg, device):
    """Loss and accuracy over every query of the val split.

    Returns:
        {"val_loss", "val_accuracy"} as floats.
    """
    m = split_metrics(model, *data["val"], cfg["batch_size"], device)
    return {"val_loss": m["loss"], "val_accuracy": m["accuracy"]}


def final_evaluate(model, data, cfg, device):
    """Loss and accuracy over every query of the test split, plus ``test_accuracy_pairs<N>`` for
    each extra test set of ``recall_test_pairs``.

    Returns:
        {"test_loss", "test_accuracy", "test_queries", "test_accuracy_pairs<N>", ...} as floats.
    """
    m = split_metrics(model, *data["test"], cfg["batch_size"], device)
    out = {"test_loss": m["loss"], "test_accuracy": m["accuracy"], "test_queries": m["queries"],
           f"test_accuracy_pairs{cfg['recall_pairs']}": m["accuracy"]}
    for n, (inputs, labels) in data["test_pairs"].items():
        out[f"test_accuracy_pairs{n}"] = split_metrics(model, inputs, labels, cfg["batch_size"], device)["accuracy"]
    return out


def batch_tokens(cfg):
    """Input tokens in one batch: batch_size x block_size."""
    return cfg["batch_size"] * cfg["block_size"]
