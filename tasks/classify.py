"""Task "classify": sequence classification on the Long Range Arena tasks (Tay et al., 2021,
"Long Range Arena: A Benchmark for Efficient Transformers", section 3) with the bidirectional
encoder of ``model.py`` (``Classifier``, a ``BertEncoder``; transformer or DANet blocks, any registered attention).

Data: ``data/lra/<lra_task>.py`` (interface in ``data/lra/__init__.py``), read from ``lra_dir``
(default: env ``LRA_DIR``, else ``data/lra/files``). ``prepare_data`` calls the module's
``ensure(lra_dir, **options)``; ``load_data`` its ``load(lra_dir, split, max_len, **options)``
for train, val and test. ``lra_options`` (a dict) holds the module's own options (e.g. ListOps
``{"num_train": 96000, "workers": 1}``, Pathfinder ``{"resolution": 32, "difficulty":
"curv_contour_length_14"}``, Text ``{"imdb_source": "...", "val": "holdout"}``); each key goes to
``ensure`` and / or ``load``, whichever accepts it by name, and a key neither accepts is a
ConfigError.

Model: ``model.Classifier``, the encoder without the MLM head whose ``forward`` returns class
logits (head Linear(F, C) - GELU - Linear(C, n_classes), F = C, or 4C in the two-tower mode of
Retrieval, LRA section 3.3). ``n_classes`` = the module's ``NUM_CLASSES``.

Pooling (``pooling``):
- "cls": a CLS token is prepended to every sequence (to each document in the two-tower mode) and
  its final hidden state is the sequence's feature. The vocabulary is extended by one id: CLS =
  the module's ``VOCAB_SIZE`` (data ids stay in [0, VOCAB_SIZE), PAD = 0), so the model has
  ``VOCAB_SIZE + 1`` embeddings and sequences of ``max_len + 1`` positions.
- "mean": the mean of the final hidden states over the real tokens (``attention_mask``); no extra
  token, vocabulary ``VOCAB_SIZE``, ``max_len`` positions.

Batches: ``idx`` (B, T) int64, ``attention_mask`` (B, T) bool (True = real token, passed to every
attention layer), ``labels`` (B,) int64; two-tower batches add ``idx2``, ``attention_mask2``.
T = max_len (+ 1 with CLS); with ``trim_padding`` the batch is cut after its longest sequence
(exact for every attention that honours the mask; LRA pads to the full length, so the default is
off and steps per second are those of full-length batches). Training batches are ``batch_size``
examples drawn uniformly with replacement, a pure function of the batch seed.

Loss: mean cross-entropy (nats per example); metrics loss and accuracy. ``evaluate`` runs on the
whole val split (or a fixed random subset of ``eval_max_batches`` batches); ``final_evaluate`` on
the whole test split (or ``test_max_batches`` batches); train.py calls it after training with
the best-val-accuracy weights and writes ``out_dir/final_metrics.json``. BEST_METRIC =
("val_accuracy", "max").

``block_size`` and ``dataset`` (train.py keys) are not read (``IGNORED_KEYS``; setting one is an error):
the length comes from ``max_len``, the data from ``lra_task``.
The interface is described in ``tasks/__init__.py``.
"""
import inspect
import math

import numpy as np
import torch
import torch.nn.functional as F

import data as data_lib
import data.lra as lra
from configurator import ConfigError
from model import Classifier
from tasks import common

DEFAULTS = dict(
    lra_task="text",
    lra_dir="",
    max_len=0,
    pooling="cls",
    lra_options={},
    trim_padding=False,
    eval_max_batches=0,
    test_max_batches=0,
)
HELP = dict(
    lra_task=f"LRA task: {' | '.join(lra.TASKS)} (data/lra/<task>.py)",
    lra_dir="root of the LRA files, the folder holding listops-1000/, pathfinder32/, imdb/, cifar10/ (as the "
            "generators' --lra_dir; '' = env LRA_DIR, else data/lra/files)",
    max_len="tokens per sequence (per document for retrieval); 0 = the task's LRA length (MAX_LEN)",
    pooling="cls (prepend a CLS token, its final state) | mean (mean over real tokens)",
    lra_options="options of the task module's ensure()/load() as a dict, e.g. {'workers': 1}",
    trim_padding="cut each batch after its longest sequence (exact with masking; LRA pads to max_len)",
    eval_max_batches="batches of the val split per evaluation (a fixed random subset); 0 = the whole split",
    test_max_batches="batches of the test split in the final evaluation (a fixed random subset); 0 = all",
)
MODEL = Classifier  # the model class this task builds, and loads from its checkpoints (checkpoint.load)
MODEL_KEYS = ("lra_task", "max_len", "pooling")  # beside model.RUN_KEYS
# train.py keys this task does not read (setting one is an error naming the task)
IGNORED_KEYS = {"block_size": "the length is max_len", "dataset": "the data set is lra_task"}
DATA_KEYS = ("lra_options",)  # lra_task, max_len, pooling are MODEL_KEYS
# lra_options entries that only say where the source is or how fast to build it (they never
# change the examples; the data's manifest checks what was built)
RUN_ONLY_ENTRIES = {"lra_options": ("workers", "batch_size", "imdb_source", "cifar10_source")}
BEST_METRIC = ("val_accuracy", "max")
SPLITS = ("train", "val", "test")
POOLINGS = ("cls", "mean")


def _module(cfg):
    try:
        return lra.get(cfg["lra_task"])
    except ValueError as e:
        raise ConfigError(str(e)) from None


def lra_dir(cfg):
    """``cfg["lra_dir"]`` or, when empty, ``data.lra.default_lra_dir()``."""
    return cfg["lra_dir"] or lra.default_lra_dir()


def max_len(cfg, module=None):
    """The sequence length of the data (per document): ``cfg["max_len"]`` or the module's MAX_LEN."""
    module = module or _module(cfg)
    return cfg["max_len"] or module.MAX_LEN


def seq_len(cfg, module=None):
    """Model positions per sequence: max_len, plus one for the CLS token with pooling="cls"."""
    return max_len(cfg, module) + (1 if cfg["pooling"] == "cls" else 0)


NOT_OPTIONS = ("lra_dir", "split", "max_len", "replace")  # parameters of ensure / load that lra_options never set


def split_options(module, options):
    """Split ``options`` into the keyword arguments of ``module.ensure`` and ``module.load``
    (a key goes to each function that has a parameter of that name).

    Returns:
        (ensure_kwargs, load_kwargs): two dicts.

    Raises:
        ConfigError: a key neither function accepts (the message lists the accepted ones).
    """
    names = {}
    for fn in ("ensure", "load"):
        params = inspect.signature(getattr(module, fn)).parameters
        names[fn] = [p for p in params if p not in NOT_OPTIONS]
    unknown = [k for k in options if k not in names["ensure"] and k not in names["load"]]
    if unknown:
        accepted = sorted(set(names["ensure"]) | set(names["load"]))
        raise ConfigError(f"lra_options {unknown} not accepted by {module.__name__}.ensure/load; "
                          f"accepted: {', '.join(accepted) or '(none)'}")
    return ({k: v for k, v in options.items() if k in names["ensure"]},
            {k: v for k, v in options.items() if k in names["load"]})


def _check(cfg):
    module = _module(cfg)
    if cfg["pooling"] not in POOLINGS:
        raise ConfigError(f"pooling must be one of {', '.join(POOLINGS)}; got {cfg['pooling']!r}")
    if cfg["max_len"] < 0:
        raise ConfigError(f"max_len must be >= 0 (0 = the task's {module.MAX_LEN}); got {cfg['max_len']}")
    for key in ("eval_max_batches", "test_max_batches"):
        if cfg[key] < 0:
            raise ConfigError(f"{key} must be >= 0 (0 = whole split); got {cfg[key]}")
    if not isinstance(cfg["lra_options"], dict):
        raise ConfigError(f"lra_options must be a dict; got {cfg['lra_options']!r}")
    split_options(module, cfg["lra_options"])
    return module


def _lra_call(cfg, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` of the task's module, its errors as data / config errors."""
    try:
        return fn(*args, **kwargs)
    except FileNotFoundError as e:
        raise data_lib.DataUnavailable(f"LRA {cfg['lra_task']}: {e}") from None
    except data_lib.DataError:
        raise
    except ValueError as e:  # the module rejects an argument (an option value, a split)
        raise ConfigError(f"LRA {cfg['lra_task']}: {e}") from None


def prepare_data(cfg):
    """``ensure(lra_dir, **options)`` of the task's module: the data are there and match the
    options (their manifest), or they are generated / converted now. Generated data made with
    other options are never replaced by a run: the error says which ``lra_options`` use them.

    Returns:
        dict: the data's manifest (see ``data/lra/__init__.py``), or whatever ``ensure`` returns.

    Raises:
        ConfigError: unknown lra_task, pooling or lra_options key, or an option value the module
            rejects.
        data.DataUnavailable: the module cannot find or build its files (its message, which
            names the missing file).
        data.DataFormatError: a malformed source file. data.DataMismatch: prepared data that
            differ from the options and cannot be rebuilt (both values in the message).
    """
    module = _check(cfg)
    ensure_kwargs, _ = split_options(module, cfg["lra_options"])
    if "replace" in inspect.signature(module.ensure).parameters:
        ensure_kwargs["replace"] = False  # a run never regenerates over data made with other options
    try:
        return _lra_call(cfg, module.ensure, lra_dir(cfg), **ensure_kwargs)
    except data_lib.DataMismatch as e:
        if e.stored is None:
            raise
        raise data_lib.DataMismatch(f"{e}{_use_as_is(cfg, module, e.stored)}") from None


def _use_as_is(cfg, module, stored):
    """The sentence saying which ``--lra_options`` use the prepared data ``stored`` describes."""
    options_of = getattr(module, "options_of", None)
    if options_of is None:
        return ""
    options = {**cfg["lra_options"], **options_of(stored)}
    if "seed" not in stored:
        options.pop("seed", None)  # files found in place: any seed is accepted
    return f'. To use them as they are, run with --lra_options="{options!r}"'


def load_split(cfg, split):
    """One split as the module's ``load`` dict (``tokens`` (N, max_len) ids, ``lengths``,
    ``labels``; ``tokens2``/``lengths2`` for two-tower), tokens stored as the smallest unsigned
    dtype that holds the vocabulary (no copy when the module returns that dtype already).

    Raises:
        ConfigError: see ``_check``; an option value the module rejects.
        data.DataUnavailable: a file is missing.
        data.DataFormatError: a malformed file (from the module) or an empty split.
    """
    module = _check(cfg)
    _, load_kwargs = split_options(module, cfg["lra_options"])
    d = _lra_call(cfg, module.load, lra_dir(cfg), split, max_len(cfg, module), **load_kwargs)
    dtype = lra.token_dtype(module.VOCAB_SIZE)
    for key in ("tokens", "tokens2"):
        if key in d:
            d[key] = d[key].astype(dtype, copy=False)
    if len(d["labels"]) == 0:
        raise data_lib.DataFormatError(f"LRA {cfg['lra_task']} data in {lra_dir(cfg)}",
                                       f"split {split!r} has no examples; every split needs at least one")
    return d


SUMMARY_FIELDS = ("seed", "generator", "generator_version", "converter", "converter_version", "source_sha256",
                  "resolution", "difficulty")


def data_summary(cfg, module, splits):
    """The short description of the data that train.py writes to the run log and
    ``final_metrics.json``: the manifest's ``source`` ("unknown" for a module without
    manifests), ``train_size``/``val_size``/``test_size`` (examples loaded) with
    ``train_size_unit`` "examples", ``task``, and the manifest's SUMMARY_FIELDS it has.
    """
    stored = None
    reader = getattr(module, "manifest", None)
    if reader is not None:
        params = inspect.signature(reader).parameters
        stored = reader(lra_dir(cfg), **{k: v for k, v in cfg["lra_options"].items() if k in params})
    stored = stored or {}
    summary = {"task": cfg["lra_task"], "source": str(stored.get("source", "unknown")),
               "train_size": int(len(splits["train"]["labels"])), "train_size_unit": "examples",
               "val_size": int(len(splits["val"]["labels"])), "test_size": int(len(splits["test"]["labels"]))}
    summary.update({k: stored[k] for k in SUMMARY_FIELDS if k in stored})
    return summary


def load_data(cfg):
    """dict: "train", "val", "test" -> ``load_split`` of each; "module" -> the data module;
    "manifest" -> ``data_summary`` (source, sizes, seed / generator or converter when known).

    Raises:
        ConfigError, data.DataUnavailable, data.DataFormatError: see ``load_split``.
    """
    module = _check(cfg)
    splits = {split: load_split(cfg, split) for split in SPLITS}
    return {"module": module, **splits, "manifest": data_summary(cfg, module, splits)}


def model_config(cfg, module):
    """The ``ModelConfig`` of ``cfg`` for data module ``module`` (vocabulary + 1 for CLS).

    Raises:
        ConfigError: unknown attention or parameter, or an invalid architecture combination.
    """
    vocab = module.VOCAB_SIZE + (1 if cfg["pooling"] == "cls" else 0)
    return common.model_config(cfg, block_size=seq_len(cfg, module), vocab_size=vocab, n_classes=module.NUM_CLASSES,
                              pooling=cfg["pooling"], two_tower=module.TWO_TOWER, pad_token_id=0)


def build_model(cfg, data):
    """A ``model.Classifier`` from ``cfg`` and the data module.

    Raises:
        ConfigError: see ``model_config``.
    """
    module = data["module"] if isinstance(data, dict) and "module" in data else _module(cfg)
    return MODEL(model_config(cfg, module))


def encode(tokens, lengths, cls_id, trim, device):
    """Rows of a split as model input.

    Args:
        tokens: (B, L) integer array, right-padded with 0; lengths: (B,) real tokens per row.
        cls_id (int or None): prepend this id to every row (CLS pooling), None = no CLS.
        trim (bool): cut the columns after the longest row.

    Returns:
        (idx (B, T) int64, attention_mask (B, T) bool) on ``device``; T = L or max(lengths),
        plus one with CLS; the mask is True on the CLS token and the first lengths[i] tokens.
    """
    tokens = np.asarray(tokens)
    lengths = np.asarray(lengths, dtype=np.int64)
    if trim:
        tokens = tokens[:, :max(int(lengths.max()), 1)]
    idx = torch.from_numpy(tokens.astype(np.int64))
    mask = torch.arange(idx.shape[1])[None, :] < torch.from_numpy(np.minimum(lengths, idx.shape[1]))[:, None]
    if cls_id is not None:
        idx = torch.cat([torch.full((idx.shape[0], 1), cls_id, dtype=torch.int64), idx], dim=1)
        mask = torch.cat([torch.ones(idx.shape[0], 1, dtype=torch.bool), mask], dim=1)
    return idx.to(device), mask.to(device)


def make_batch(split_data, rows, cfg, module, device):
    """The batch of example indices ``rows`` (array of ints) of one split (see the module
    docstring for the keys)."""
    cls_id = module.VOCAB_SIZE if cfg["pooling"] == "cls" else None
    idx, mask = encode(split_data["tokens"][rows], split_data["lengths"][rows], cls_id, cfg["trim_padding"], device)
    batch = {"idx": idx, "attention_mask": mask,
             "labels": torch.from_numpy(np.asarray(split_data["labels"][rows], dtype=np.int64)).to(device)}
    if module.TWO_TOWER:
        batch["idx2"], batch["attention_mask2"] = encode(split_data["tokens2"][rows], split_data["lengths2"][rows],
                                                         cls_id, cfg["trim_padding"], device)
    return batch


def get_batch(data, split, cfg, seed, device):
    """``batch_size`` examples of ``split`` drawn uniformly with replacement by
    ``numpy.random.default_rng(seed)``, a pure function of ``seed``."""
    n = len(data[split]["labels"])
    rows = np.random.default_rng(seed).integers(0, n, size=cfg["batch_size"])
    return make_batch(data[split], rows, cfg, data["module"], device)


def _logits(model, batch):
    return model(batch["idx"], batch["attention_mask"], batch.get("idx2"), batch.get("attention_mask2"))


def loss(model, batch):
    """Mean cross-entropy over the batch (nats per example); metrics {"loss", "accuracy"}."""
    logits = _logits(model, batch).float()
    value = F.cross_entropy(logits, batch["labels"])
    accuracy = (logits.argmax(-1) == batch["labels"]).float().mean()
    return value, {"loss": value.detach(), "accuracy": accuracy.detach()}


def eval_rows(n, batch_size, max_batches=0):
    """Example indices an evaluation covers: all n in order, or with ``max_batches`` > 0 a fixed
    random subset of max_batches x batch_size examples (``default_rng(0)``, sorted; a prefix would
    be one class in the class-sorted splits, e.g. IMDB)."""
    if not max_batches or max_batches * batch_size >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).permutation(n)[:max_batches * batch_size])


def split_logits(model, data, split, cfg, device, max_batches=0):
    """Class logits of ``split`` (``eval_rows``: the whole split, or a fixed random subset of
    ``max_batches`` batches), in batches of ``batch_size`` (the last one smaller).

    Returns:
        (logits (N, n_classes) float32 on the CPU, labels (N,) int64, rows (N,) example indices).
    """
    from tqdm import tqdm

    d, module = data[split], data["module"]
    order = eval_rows(len(d["labels"]), cfg["batch_size"], max_batches)
    batches = [order[i:i + cfg["batch_size"]] for i in range(0, len(order), cfg["batch_size"])]
    logits = []
    for rows in tqdm(batches, desc=f"eval {split}", unit="batch", disable=None, leave=False):
        logits.append(_logits(model, make_batch(d, rows, cfg, module, device)).float().cpu())
    labels = torch.from_numpy(np.asarray(d["labels"][order], dtype=np.int64))
    return torch.cat(logits) if logits else torch.zeros(0, module.NUM_CLASSES), labels, order


def split_metrics(model, data, split, cfg, device, max_batches=0):
    """Loss and accuracy over ``split`` (the examples of ``split_logits``).

    Returns:
        {"loss": mean cross-entropy per example, "accuracy": fraction correct, "n": examples}.
    """
    logits, labels, _ = split_logits(model, data, split, cfg, device, max_batches)
    count = len(labels)
    if count == 0:
        return {"loss": 0.0, "accuracy": 0.0, "n": 0}
    return {"loss": F.cross_entropy(logits.double(), labels).item(),
            "accuracy": int((logits.argmax(-1) == labels).sum()) / count, "n": count}


def evaluate(model, data, cfg, device):
    """Loss and accuracy on the val split (whole, or ``eval_max_batches`` batches).

    Returns:
        {"val_loss", "val_accuracy"} as floats.
    """
    m = split_metrics(model, data, "val", cfg, device, cfg["eval_max_batches"])
    return {"val_loss": m["loss"], "val_accuracy": m["accuracy"]}


def final_evaluate(model, data, cfg, device):
    """Loss and accuracy on the test split (whole, or ``test_max_batches`` batches) and on the
    val examples ``evaluate`` uses (train.py calls it once after training, with the weights of the
    best val accuracy, so val_accuracy repeats the best value).

    Returns:
        {"test_loss", "test_accuracy", "test_examples", "val_loss", "val_accuracy", "val_examples",
        "test_majority"} (the accuracy of always predicting the most frequent test label, a reference line).
    """
    out = {}
    for split, max_batches in (("test", cfg["test_max_batches"]), ("val", cfg["eval_max_batches"])):
        m = split_metrics(model, data, split, cfg, device, max_batches)
        out[f"{split}_loss"], out[f"{split}_accuracy"], out[f"{split}_examples"] = m["loss"], m["accuracy"], m["n"]
    rows = eval_rows(len(data["test"]["labels"]), cfg["batch_size"], cfg["test_max_batches"])
    out["test_majority"] = majority_rate(data["test"]["labels"][rows])
    return out


def batch_tokens(cfg):
    """Input positions in one full-length batch: batch_size x seq_len (x 2 documents for two-tower)."""
    module = _module(cfg)
    return cfg["batch_size"] * seq_len(cfg, module) * (2 if module.TWO_TOWER else 1)


def majority_rate(labels):
    """Accuracy of always predicting the most frequent label of ``labels`` (a reference line)."""
    labels = np.asarray(labels)
    return float(np.bincount(labels).max() / len(labels)) if len(labels) else math.nan
