"""Training tasks. train.py runs one loop for every task; what differs between tasks (the model
class, the data, the batches, the loss, the evaluation) lives in one module per task with the
same few names. ``tasks/lm.py`` (causal language modelling) is the example to copy.

A task module defines:

    DEFAULTS: dict          the task's own config keys and their defaults
    HELP: dict              one-line meaning of each key of DEFAULTS (shown by --help)
    MODEL_KEYS: tuple       the task's config keys that shape the model besides the model's own
                            (``model.RUN_KEYS``, e.g. ``block_size``, ``recall_vocab``); a resumed run
                            takes both from the checkpoint (an explicit different value is an error)
    DATA_KEYS: tuple        config keys that decide the examples trained on (data set, its options);
                            restored on resume like MODEL_KEYS (training.resume_config). Keys that only
                            say where files are (source paths, ``lra_dir``) are not data keys: the
                            prepared data's manifest checks what they hold
    MODEL: class            the model class the task trains (``model.GPT``, ``model.BertEncoder``, ...):
                            built as ``MODEL(ModelConfig)``; ``checkpoint.load`` builds a checkpoint
                            of this task with it
    BEST_METRIC: (name, "min" | "max")
                            the key of evaluate()'s result that decides which checkpoint is best
    prepare_data(cfg) -> None
                            download / tokenize / write whatever load_data reads; called on rank
                            0 only while the other DDP ranks wait; idempotent
    load_data(cfg) -> data  open the prepared data read-only (every rank); ``data`` is any
                            object, usually a dict split name -> array, plus "manifest": a small
                            dict saying what was prepared (``source``, ``train_size``,
                            ``train_size_unit``, ...) that train.py writes to the run log and
                            final_metrics.json. Data problems raise ``data.DataError`` subclasses
    build_model(cfg, data) -> torch.nn.Module
                            a new model from cfg (``model_config`` below gives its ModelConfig;
                            a resumed run's model comes from its checkpoint, ``checkpoint.build_model``)
    get_batch(data, split, cfg, seed, device) -> batch
                            a batch (dict of tensors) that depends only on ``seed``
    loss(model, batch) -> (loss, metrics)
                            scalar loss tensor to minimise and a dict name -> float or 0-dim tensor
                            (logged, averaged over micro-steps)
    evaluate(model, data, cfg, device) -> dict name -> float
                            metrics on the evaluation splits; includes BEST_METRIC[0]; train.py
                            calls it on the unwrapped model, in eval mode, under torch.no_grad
    batch_tokens(cfg) -> int
                            tokens in one batch (for tokens/s)

and may define (optional):

    CAUSAL: bool            True for a task whose model is causal (lm, recall): train.py then refuses
                            an attention whose causal outputs depend on later tokens
                            (``attention.causal_support``)

    IGNORED_KEYS: dict      train.py key -> why this task does not read it (``block_size`` for a task
                            whose length comes from its data); setting one is an error

    RUN_ONLY_ENTRIES: dict  key of MODEL_KEYS / DATA_KEYS whose value is a dict -> the entries that may
                            change on resume because they never change the examples (e.g.
                            ``{"lra_options": ("workers",)}``)

    final_evaluate(model, data, cfg, device) -> dict name -> float
                            metrics reported once after training (e.g. test accuracy). train.py
                            calls it on rank 0 after the loop, on the unwrapped model with the
                            weights of the best BEST_METRIC (``out_dir/best.pt``, written whenever
                            the metric improves; the final weights if there is none), in eval mode,
                            under torch.no_grad, and writes the result with the run's summary to
                            ``out_dir/final_metrics.json`` (see train.py)

Config keys. train.py's DEFAULTS = its own keys + the DEFAULTS of every registered task
(``merge_defaults``), so ``python train.py --help`` lists all of them, each task key's meaning
prefixed with the tasks that use it. Two tasks may declare the same key (e.g. WikiText-2's
``dataset_config`` for lm and mlm) only with the same default; a task key may not shadow a
train.py key. Setting a key that only other tasks use, or a train.py key that the task lists in
its ``IGNORED_KEYS``, is an error (``check_task_keys``). The model's keys (sizes, attention,
architecture options) are ``ModelConfig``'s (``model.RUN_KEYS``), common to every task.

Registering a task: add ``name: "tasks.<module>"`` to ``REGISTRY``, or, from a file outside the
repository, call ``register(name, __name__)`` in it and pass ``--import=FILE`` to train.py. What several tasks share
(the batch seeds, the model config, evaluation over fixed batches) is in ``tasks/common.py``;
task modules import it, never this package.
"""
import importlib

from configurator import ConfigError
from tasks.common import batch_seed, mean_over_batches, model_config, to_float  # noqa: F401  (re-exported)

REGISTRY = {
    "lm": "tasks.lm",
    "mlm": "tasks.mlm",
    "classify": "tasks.classify",
    "recall": "tasks.recall",
}

REQUIRED = ("DEFAULTS", "HELP", "MODEL", "MODEL_KEYS", "DATA_KEYS", "BEST_METRIC", "prepare_data", "load_data", "build_model",
            "get_batch", "loss", "evaluate", "batch_tokens")


def register(name, module):
    """Register task ``name``, implemented by ``module`` (a module object, or its dotted name), so
    that ``--task=name`` trains it and its checkpoints load. A task in this repository is a line
    of ``REGISTRY``; a task in a user's file registers itself when the file is imported
    (``--import=FILE``, ``configurator.import_files``): ``tasks.register("toy", __name__)``.
    train.py's keys include the task's ``DEFAULTS`` from the next ``training.config_keys()`` on
    (train.py calls it after its imports).

    Raises:
        ValueError: ``name`` is registered already.
    """
    if name in REGISTRY:
        raise ValueError(f"task {name!r} is registered twice ({REGISTRY[name]} and "
                         f"{module if isinstance(module, str) else module.__name__})")
    REGISTRY[name] = module if isinstance(module, str) else module.__name__


def available():
    """Names of the registered tasks, in registration order."""
    return list(REGISTRY)


def get(name):
    """The module of task ``name``.

    Raises:
        ConfigError: ``name`` is not registered (the message lists the available tasks).
        TypeError: the module lacks a name of the task interface (a programming error).
    """
    if name not in REGISTRY:
        raise ConfigError(f"unknown task {name!r}; available tasks: {', '.join(available())}")
    module = importlib.import_module(REGISTRY[name])
    missing = [attr for attr in REQUIRED if not hasattr(module, attr)]
    if missing:
        raise TypeError(f"task module {module.__name__} lacks {', '.join(missing)} (see tasks/__init__.py)")
    name_, mode = module.BEST_METRIC
    if mode not in ("min", "max"):
        raise TypeError(f"{module.__name__}.BEST_METRIC mode must be 'min' or 'max', got {mode!r}")
    return module


def owners(name):
    """Registered task names that declare config key ``name``."""
    return [task for task in available() if name in get(task).DEFAULTS]


def merge_defaults(common_defaults, common_help):
    """train.py's config: its own keys followed by every registered task's keys.

    Returns:
        (defaults, help): two new dicts; a task key's help reads "[lm, mlm] meaning", a common key
        that some tasks list in ``IGNORED_KEYS`` "meaning [not read by classify, recall]".

    Raises:
        ValueError: a task key shadows a train.py key, two tasks give one key different
            defaults, or a task key has no help line.
    """
    defaults, help = dict(common_defaults), dict(common_help)
    users = {}
    for task in available():
        module = get(task)
        for key, value in module.DEFAULTS.items():
            if key in common_defaults:
                raise ValueError(f"task {task!r} declares config key {key!r}, which train.py already defines")
            if key not in module.HELP:
                raise ValueError(f"task {task!r} has no HELP line for its config key {key!r}")
            if key in defaults and defaults[key] != value:
                raise ValueError(f"config key {key!r} has default {defaults[key]!r} in task(s) "
                                 f"{', '.join(users[key])} but {value!r} in task {task!r}")
            defaults[key] = value
            users.setdefault(key, []).append(task)
            help[key] = module.HELP[key]  # the first task's wording wins; prefixed below
    for key, names in users.items():
        help[key] = f"[{', '.join(names)}] {help[key]}"
    skipped = {}
    for task in available():
        for key in getattr(get(task), "IGNORED_KEYS", {}):
            skipped.setdefault(key, []).append(task)
    for key, names in skipped.items():
        help[key] += f" [not read by {', '.join(names)}]"
    return defaults, help


def check_task_keys(explicit, task):
    """Reject a key set explicitly (in a config file or as --key=value) that task ``task`` does not
    read: another task's key, or a train.py key in the task's ``IGNORED_KEYS``; it would be
    silently ignored.

    Args:
        explicit (dict): the keys set, as ``configurator.parse_explicit`` returns them.

    Raises:
        ConfigError: names the key, the task and what reads the key instead.
    """
    ignored = getattr(get(task), "IGNORED_KEYS", {})
    for key in explicit:
        if key in ignored:
            raise ConfigError(f"config key {key!r} is not read by task {task!r} ({ignored[key]}); remove it")
        users = owners(key)
        if users and task not in users:
            raise ConfigError(f"config key {key!r} belongs to task(s) {', '.join(users)}, not to task {task!r}; "
                              f"remove it or set --task")
