"""What train.py's loop calls: the configuration keys, the learning-rate schedule, the optimizer,
DDP, data preparation, the checks before a run starts (its out_dir, its step's memory:
``step_memory.py``), checkpoints and resume, the run log, the ETA and the final evaluation. train.py
keeps only ``main`` and the loop, so the loop reads on one screen (as nanoGPT's does).

Checkpoints go to ``out_dir/ckpt.pt`` and, for tasks with a ``final_evaluate``, ``out_dir/best.pt``
(written whenever the task's BEST_METRIC improves); ``checkpoint.py`` writes and reads them and
says what they hold.

Resume (``resume_config``, ``restore``): ``python train.py --init_from=resume --out_dir=DIR`` is
all it needs. The checkpoint's configuration is read before any data, so the run trains the same
model on the same data; an explicit setting of a task, model or data key that differs from the
checkpoint's is an error; other keys (``max_iters``, ``eval_interval``, ``lra_dir``, logging) may
change. The batch of iteration i depends only on (seed, rank, i), each rank gets its own
generator states back, and evaluation runs on a forked generator, so a resumed run continues
exactly where the checkpoint stopped.

The run log (``RunLog``): ``out_dir/log.jsonl`` gets one JSON record per start (what is trained,
the data's manifest summary), per logged step, per evaluation and the final metrics; the same go
to wandb when it is on. A new run refuses an ``out_dir`` that holds a run's checkpoint unless
``overwrite`` is set (``check_out_dir``); then, or in a used folder without checkpoints, it keeps
the earlier run's log as ``log.<n>.jsonl`` (``start_log``) and replaces the earlier checkpoints
only by writing its own; a resumed run appends.

The final evaluation (``final_evaluation``): after the loop, rank 0 loads best.pt's weights (the
final weights if there is none), calls the task's ``final_evaluate`` (e.g. test accuracy) and
writes ``out_dir/final_metrics.json`` (atomically): the metrics, ``best_iter``, ``best_metric``,
``iters``, ``train_time_s``, ``steps_per_s`` (optimizer steps of this process per second of
training, evaluation excluded), ``data`` (the data's manifest summary) and the run's ``config``.
"""

import json
import math
import os
import random
import time

import numpy as np
import torch

import checkpoint
import configurator
import data as data_lib
import model as model_lib
import step_memory
import tasks
from configurator import ConfigError

COMMON_DEFAULTS = dict(
    # I/O
    out_dir="out/wikitext2_gpt_mini",
    init_from="scratch",
    overwrite=False,
    eval_interval=200,
    log_interval=10,
    eval_iters=20,
    eval_only=False,
    always_save_checkpoint=True,
    stop_at=0.0,
    # wandb (off by default; wandb_mode="offline" writes locally)
    wandb_log=False,
    wandb_project="efficient-attention",
    wandb_run_name="run",
    wandb_mode="online",
    # task and data
    task="lm",
    dataset="wikitext2",
    batch_size=16,
    block_size=256,
    gradient_accumulation_steps=1,
    # optimizer: AdamW, linear warmup, then the schedule
    learning_rate=1e-3,
    max_iters=2000,
    weight_decay=0.1,
    beta1=0.9,
    beta2=0.99,
    adam_eps=1e-8,
    grad_clip=1.0,
    lr_schedule="cosine",
    warmup_iters=100,
    lr_decay_iters=2000,
    min_lr=1e-4,
    # system
    device="cpu",
    dtype="float32",
    compile=False,
    seed=1337,
    num_threads=0,
)
COMMON_HELP = dict(
    out_dir="directory of the run's files: ckpt.pt (the latest state: weights, optimizer, generators; written at "
            "evaluations, see always_save_checkpoint; what init_from=resume continues from), best.pt (the weights "
            "at the best value of the task's best metric, e.g. val_loss or val_accuracy, which the final "
            "evaluation uses; written only by tasks with a final evaluation), log.jsonl, final_metrics.json; "
            "unset: out/ + the config files' names (configs/lra/text.py "
            "configs/attention/fastmax1.py -> out/lra/text_fastmax1). A new run refuses an out_dir that holds a "
            "checkpoint (see overwrite); one into a used out_dir renames its log.jsonl and final_metrics.json to "
            "log.<n>.jsonl / final_metrics.<n>.json (n = 1, 2, ...)",
    init_from="'scratch' (a new model) or 'resume' (continue from out_dir/ckpt.pt, the latest state, not best.pt, "
              "with its task, model and data keys; only --init_from=resume --out_dir=DIR is needed)",
    overwrite="a new run (init_from=scratch) into an out_dir that holds a run's ckpt.pt or best.pt: False refuses "
              "(continue that run with --init_from=resume), True trains over it: its checkpoints are replaced as "
              "the new run writes its own (nothing is deleted before), its log kept as log.<n>.jsonl",
    eval_interval="evaluate (and checkpoint) every this many optimizer steps, and at max_iters",
    log_interval="log the training loss every this many optimizer steps",
    eval_iters="batches per split in each evaluation",
    eval_only="evaluate the model once (e.g. with init_from=resume) and stop; writes no checkpoint",
    always_save_checkpoint="write ckpt.pt at every evaluation (False: only when the task's best metric improves)",
    stop_at="stop training at the first evaluation whose best metric (the task's, e.g. val_accuracy) reaches this "
            "value in its direction (>= for accuracies, <= for losses); the final evaluation then uses that "
            "evaluation's weights. 0 = never (train to max_iters)",
    wandb_log="log to Weights & Biases",
    wandb_project="wandb project name",
    wandb_run_name="wandb run name",
    wandb_mode="wandb mode: online | offline | disabled",
    task="what to train: a registered task (tasks.available(), modules in tasks/)",
    dataset="data set name; allowed values depend on the task (lm: wikitext2 | shakespeare_char; "
            "mlm: wikitext2 | hf:<path>[:<config>])",
    batch_size="sequences per micro-batch per process",
    block_size="tokens per training sequence = the model's maximum sequence length",
    gradient_accumulation_steps="micro-batches per optimizer step, summed over all DDP processes",
    learning_rate="peak learning rate (AdamW)",
    max_iters="optimizer steps in total (a new run's command line that sets it without lr_decay_iters moves "
              "lr_decay_iters to it)",
    weight_decay="AdamW weight decay on matrices (none on biases and norms)",
    beta1="AdamW beta1",
    beta2="AdamW beta2",
    adam_eps="AdamW epsilon (LRA: 1e-9)",
    grad_clip="clip the global gradient norm to this (0 = no clipping)",
    lr_schedule="after warmup: 'cosine' (to min_lr at lr_decay_iters), 'constant', or 'rsqrt' "
                "(learning_rate * sqrt(warmup_iters / step), LRA's rsqrt_decay)",
    warmup_iters="linear warmup steps",
    lr_decay_iters="step at which the cosine schedule reaches min_lr; follows --max_iters when a new run's "
                   "command line sets that and not this (the first line says so)",
    min_lr="final learning rate of the cosine schedule",
    device="torch device: cpu | cuda | cuda:N (a DDP run of train.py uses cuda:LOCAL_RANK)",
    dtype="float32 | bfloat16 | float16 (autocast; the last two need a GPU)",
    compile="torch.compile the model for training (evaluation runs uncompiled)",
    seed="seed of initialization, dropout and batches",
    num_threads="torch CPU threads per process, 0 = torch's default",
)


def config_keys():
    """train.py's keys: (DEFAULTS, HELP), the loop's keys (``COMMON_DEFAULTS``), the model's
    (``model.RUN_KEYS``: ModelConfig's fields with their defaults and help) and every registered
    task's (tasks/__init__.py), so that --help lists them and they are checked. The module's
    ``DEFAULTS`` and ``HELP`` are these dicts, updated in place by each call (a task registered by
    ``--import`` adds its keys; train.py calls it after the imports)."""
    model_defaults, model_help = model_lib.run_key_defaults()
    common_help = dict(COMMON_HELP, task=f"what to train: {' | '.join(tasks.available())} (modules in tasks/)")
    defaults, help = tasks.merge_defaults({**COMMON_DEFAULTS, **model_defaults}, {**common_help, **model_help})
    for mine, new in ((DEFAULTS, defaults), (HELP, help)):
        mine.clear()
        mine.update(new)
    return DEFAULTS, HELP


DEFAULTS, HELP = {}, {}
config_keys()

LR_SCHEDULES = ("cosine", "constant", "rsqrt")
INIT_FROM = ("scratch", "resume")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def get_lr(it, cfg):
    """Learning rate at iteration ``it`` (0-based): linear warmup over ``warmup_iters`` steps to
    ``learning_rate``, then by ``lr_schedule``:

    - "constant": ``learning_rate``;
    - "cosine": a cosine decay to ``min_lr`` at ``lr_decay_iters``, ``min_lr`` after it;
    - "rsqrt": ``learning_rate * sqrt(warmup_iters / it)``, the inverse square-root decay of
      LRA's ``constant * linear_warmup * rsqrt_decay`` (google-research/long-range-arena,
      ``lra_benchmarks/utils/train_utils.py``), whose peak base_lr / sqrt(warmup) is our
      ``learning_rate``.

    Raises:
        ValueError: unknown ``lr_schedule`` (the allowed ones are listed).
    """
    schedule = cfg["lr_schedule"]
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"unknown lr_schedule {schedule!r}; allowed: {', '.join(LR_SCHEDULES)}")
    if it < cfg["warmup_iters"]:
        return cfg["learning_rate"] * (it + 1) / (cfg["warmup_iters"] + 1)
    if schedule == "constant":
        return cfg["learning_rate"]
    if schedule == "rsqrt":
        return cfg["learning_rate"] * math.sqrt(max(cfg["warmup_iters"], 1) / max(it, cfg["warmup_iters"], 1))
    if it > cfg["lr_decay_iters"]:
        return cfg["min_lr"]
    ratio = (it - cfg["warmup_iters"]) / max(1, cfg["lr_decay_iters"] - cfg["warmup_iters"])
    return cfg["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg["learning_rate"] - cfg["min_lr"])


def configure_optimizer(model, cfg, device_type):
    """AdamW with weight decay on matrices (dim >= 2) and none on biases, LayerNorms."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device_type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg["learning_rate"], betas=(cfg["beta1"], cfg["beta2"]),
                             eps=cfg["adam_eps"], fused=fused)


def get_rng_state(device_type):
    """This process's generator states: torch CPU, CUDA (current device), NumPy, Python."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if device_type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state, device_type):
    """Restore what ``get_rng_state`` returned (the CUDA state only on a GPU)."""
    torch.set_rng_state(state["torch"].cpu())
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if device_type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu())


def check_config(cfg):
    """Reject values train.py cannot run with (ConfigError with what is allowed)."""
    if cfg["init_from"] not in INIT_FROM:
        raise ConfigError(f"init_from must be one of {', '.join(INIT_FROM)}, got {cfg['init_from']!r}")
    try:
        get_lr(0, cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg["adam_eps"] <= 0:
        raise ConfigError(f"adam_eps must be positive, got {cfg['adam_eps']}")
    configurator.check_device(cfg["device"])
    if cfg["dtype"] not in DTYPES:
        raise ConfigError(f"unknown dtype {cfg['dtype']!r}; allowed: {', '.join(DTYPES)}")
    if cfg["dtype"] != "float32" and "cuda" not in cfg["device"]:
        raise ConfigError(f"dtype={cfg['dtype']} needs a GPU; use dtype=float32 on the CPU")
    for key in ("batch_size", "block_size", "eval_interval", "log_interval", "eval_iters",
                "gradient_accumulation_steps"):
        if cfg[key] < 1:
            raise ConfigError(f"{key} must be at least 1, got {cfg[key]}")
    for key in ("max_iters", "warmup_iters", "num_threads", "stop_at"):
        if cfg[key] < 0:
            raise ConfigError(f"{key} must be non-negative, got {cfg[key]}")


class Dist:
    """The process's place in a DDP run (a single process: rank 0 of 1, ``ddp`` False)."""

    def __init__(self, cfg):
        self.ddp = int(os.environ.get("RANK", -1)) != -1
        self.rank, self.world = 0, 1
        if self.ddp:
            backend = "nccl" if cfg["device"].startswith("cuda") else "gloo"
            torch.distributed.init_process_group(backend=backend)
            self.rank, self.world = torch.distributed.get_rank(), torch.distributed.get_world_size()
            if cfg["device"].startswith("cuda"):
                cfg["device"] = f"cuda:{int(os.environ['LOCAL_RANK'])}"
                torch.cuda.set_device(cfg["device"])
        self.master = self.rank == 0

    def close(self):
        if self.ddp and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank (a barrier as well)."""
        if not self.ddp:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj):
        """List of every rank's ``obj`` on rank 0, None elsewhere."""
        if not self.ddp:
            return [obj]
        out = [None] * self.world if self.master else None
        torch.distributed.gather_object(obj, out, dst=0)
        return out


def prepare_and_load_data(task, cfg, dist):
    """The task's data: prepared by rank 0 alone while the other ranks wait, then opened
    read-only by every rank. A failure on rank 0 stops every rank with its message.

    Raises:
        ConfigError: a bad setting (exit 2). DataError (``data.DataUnavailable``, a malformed file,
            prepared data whose manifest differs): reported as a ConfigError, i.e. one
            ``error:`` line and exit status 2, on every rank.
    """
    failure = None
    if dist.master:
        try:
            task.prepare_data(cfg)
        except ConfigError as e:
            failure = ("config", str(e))
        except data_lib.DataError as e:
            failure = ("data", str(e))
        except Exception as e:  # a bug: the other ranks must not wait forever for rank 0
            failure = ("other", f"{type(e).__name__}: {e}")
            if not dist.ddp:
                raise
    failure = dist.broadcast(failure)
    if failure is not None:
        kind, message = failure
        if kind in ("config", "data"):
            raise ConfigError(message)
        raise RuntimeError(f"data preparation failed on rank 0: {message}")
    try:
        return task.load_data(cfg)
    except data_lib.DataError as e:
        raise ConfigError(str(e)) from None


def check_step_memory(task, cfg, data, model, dist, autocast, iter_num):
    """Refuse a run whose training step cannot fit in memory (``step_memory.check`` on rank 0, with
    the first step's batch; every rank gets its verdict), before the model moves to the device.

    Raises:
        ConfigError: the estimate, its parts and what is available, in one line.
    """
    batch = task.get_batch(data, "train", cfg, tasks.batch_seed(cfg, dist.rank, iter_num, 0), "cpu")
    failure = None
    if dist.master:
        try:
            step_memory.check(task, cfg, data, model, batch, autocast)
        except ConfigError as e:
            failure = str(e)
    failure = dist.broadcast(failure)
    if failure:
        raise ConfigError(failure)


def data_summary(data):
    """The prepared data's manifest summary (source, sizes, ...) that ``load_data`` returns under
    "manifest", or None for a task that gives none."""
    return data.get("manifest") if isinstance(data, dict) else None


def read_checkpoint(path):
    """The checkpoint dict at ``path`` (``checkpoint.read``) for a resumed run.

    Raises:
        ConfigError: there is no file at ``path``, or it is not a readable checkpoint.
    """
    try:
        return checkpoint.read(path)
    except FileNotFoundError:
        raise ConfigError(f"init_from=resume but there is no checkpoint at {path}; start the run with "
                          f"init_from=scratch, or point out_dir at the folder of an earlier run") from None
    except checkpoint.CheckpointError as e:
        raise ConfigError(str(e)) from None


def resume_config(cfg, explicit, ckpt, path="ckpt.pt"):
    """The configuration of a resumed run: the checkpoint's own configuration (a key added to
    train.py since then takes its default), with the keys set explicitly (config files, --key=value)
    on top.

    Keys that decide what is trained, ``task``, the model's keys (``model.fixed_on_resume()``: all
    of ``model.RUN_KEYS`` but dropout) and the task's ``MODEL_KEYS`` and ``DATA_KEYS``
    (tasks/__init__.py), always keep the checkpoint's values; an explicit value that differs is an
    error. Entries of a dict key listed in the task's ``RUN_ONLY_ENTRIES`` (e.g. ``lra_options``'
    ``workers``) may change. Every other key (``max_iters``, ``eval_interval``, ``lra_dir``,
    logging, ...) only changes how the run proceeds and takes the explicit value.

    Args:
        cfg (dict): the parsed configuration; explicit (dict): what ``configurator.parse_explicit``
        says was set; ckpt (dict): the checkpoint (``read_checkpoint``); path: its path, for messages.

    Returns:
        A new configuration dict (``init_from`` "resume", ``out_dir`` from ``cfg``).

    Raises:
        ConfigError: an explicit task, model or data key that differs from the checkpoint's, in one
            line naming both values.
    """
    saved = ckpt["config"]
    saved_task = checkpoint.task_of(ckpt)
    if explicit.get("task") and cfg["task"] != saved_task:
        raise ConfigError(f"the checkpoint {path} was trained on task {saved_task!r}, not {cfg['task']!r}; "
                          f"resume it with --task={saved_task} (or without --task)")
    task = tasks.get(saved_task)
    fixed = {"task", *model_lib.fixed_on_resume(), *task.MODEL_KEYS, *task.DATA_KEYS}
    run_only = getattr(task, "RUN_ONLY_ENTRIES", {})
    out = {k: _copy(saved.get(k, DEFAULTS[k])) for k in DEFAULTS}
    out["task"] = saved_task
    for key, entries in explicit.items():
        if key not in fixed:
            out[key] = _copy(cfg[key])
            continue
        if isinstance(entries, set):  # a dict key: compare the entries that were set
            for entry in sorted(entries):
                value, old = cfg[key].get(entry), out[key].get(entry, "(not set)")
                if entry in run_only.get(key, ()):
                    out[key][entry] = value
                elif value != old:
                    raise ConfigError(_conflict(f"{key}[{entry!r}]", value, old, path))
        elif cfg[key] != out[key]:
            raise ConfigError(_conflict(key, cfg[key], out[key], path))
    out["init_from"], out["out_dir"] = "resume", cfg["out_dir"]
    return out


def resume_message(cfg, iter_num, data_summary=None):
    """The one line a resumed run prints: its out_dir, the iteration it continues from, the
    iterations left to ``max_iters``, the data's manifest summary (``data_summary``, None: left
    out) and, when the cosine schedule ends (``lr_decay_iters``) before ``max_iters``, that the
    steps past it run at ``min_lr``."""
    left = max(cfg["max_iters"] - iter_num, 0)
    parts = [f"resuming {cfg['out_dir']} from iteration {iter_num}: "
             + ("eval_only, no training" if cfg["eval_only"] else
                f"{left} iterations left to max_iters={cfg['max_iters']}"
                + ("" if left else " (raise --max_iters to train further)"))]
    if data_summary is not None:
        parts.append("data: " + ", ".join(f"{k} {v}" for k, v in data_summary.items()))
    first = max(iter_num, cfg["lr_decay_iters"])  # get_lr is min_lr from lr_decay_iters on
    if cfg["lr_schedule"] == "cosine" and not cfg["eval_only"] and cfg["max_iters"] > first:
        parts.append(f"max_iters={cfg['max_iters']} goes past lr_decay_iters={cfg['lr_decay_iters']}: the "
                     f"{cfg['max_iters'] - first} steps from iteration {first} on run at min_lr={cfg['min_lr']:g} "
                     f"(the cosine schedule has ended)")
    return "; ".join(parts)


def _conflict(name, value, saved, path):
    return (f"{name}={value!r} differs from the checkpoint's {saved!r} ({path}); a resumed run keeps the "
            f"checkpoint's model and data: drop the setting, or start from scratch (init_from=scratch)")


def _copy(value):
    return dict(value) if isinstance(value, dict) else value


def start_log(out_dir, init_from, eval_only):
    """Path of ``out_dir/log.jsonl``. A scratch training run never appends to another run's
    log: an existing ``log.jsonl`` (and ``final_metrics.json``) is renamed to ``log.<n>.jsonl``
    (``final_metrics.<n>.json``), n = 1, 2, ... the first free number. Resumed and eval-only runs
    append."""
    path = os.path.join(out_dir, "log.jsonl")
    if init_from != "scratch" or eval_only or not os.path.exists(path):
        return path
    n = 1
    while os.path.exists(os.path.join(out_dir, f"log.{n}.jsonl")):
        n += 1
    os.replace(path, os.path.join(out_dir, f"log.{n}.jsonl"))
    moved = [f"log.jsonl -> log.{n}.jsonl"]
    metrics = os.path.join(out_dir, "final_metrics.json")
    if os.path.exists(metrics):
        os.replace(metrics, os.path.join(out_dir, f"final_metrics.{n}.json"))
        moved.append(f"final_metrics.json -> final_metrics.{n}.json")
    print(f"{out_dir} holds an earlier run: kept its files as {', '.join(moved)}")
    return path


def layered_out_dir(config_files, attention_name=None):
    """The output directory of a run whose ``out_dir`` is not set: ``out/`` + the first config
    file's path under ``configs/`` (without ``.py``) + ``_<stem>`` of every later file, e.g.
    ``configs/lra/text.py configs/attention/fastmax1.py`` -> ``out/lra/text_fastmax1``; a later
    file named like the first (an override such as ``configs/lra/dense/text.py``) adds nothing;
    an ``--attention=NAME`` given on the command line without an attention file adds ``_NAME``.
    None when no config file is given (the default ``out_dir`` applies).
    """
    if not config_files:
        return None
    parts = []
    for i, path in enumerate(config_files):
        rel = os.path.normpath(path)
        marker = f"configs{os.sep}"
        rel = rel[rel.rindex(marker) + len(marker):] if marker in rel else os.path.basename(rel)
        rel = rel[:-3] if rel.endswith(".py") else rel
        if i == 0 or os.path.basename(rel) != os.path.basename(parts[0]):
            parts.append(rel if i == 0 else os.path.basename(rel))
    if attention_name:
        parts.append(attention_name)
    return os.path.join("out", "_".join(parts))


def resolve_out_dir(cfg, explicit, argv):
    """The run's ``out_dir``: the one set (config file or --out_dir) if any, else the config layers'
    name (``layered_out_dir`` of the config files in ``argv``, plus ``--attention=NAME`` when the
    command line sets it without an attention file), else the default ``cfg["out_dir"]``.

    Args:
        cfg (dict), explicit (dict): what ``configurator.parse_explicit(DEFAULTS, argv)`` returned;
        argv: the command line's arguments (config files and --key=value).
    """
    if "out_dir" in explicit:
        return cfg["out_dir"]
    files = [a for a in argv if not a.startswith("--")]
    attention_file = any(os.path.basename(os.path.dirname(os.path.normpath(f))) == "attention" for f in files)
    on_command_line = any(a.startswith("--attention=") for a in argv)
    return layered_out_dir(files, cfg["attention"] if on_command_line and not attention_file else None) \
        or cfg["out_dir"]


def check_out_dir(cfg):
    """Refuse, before anything is read or written, an ``out_dir`` that cannot be a folder (it or a
    folder above it is a file) and a new training run (``init_from`` "scratch", not ``eval_only``)
    into a folder that holds a run's ckpt.pt or best.pt, unless ``overwrite`` is set.

    Raises:
        ConfigError: in one line, with what to do instead.
    """
    out_dir = cfg["out_dir"]
    existing = os.path.abspath(out_dir)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = "is a file" if existing == os.path.abspath(out_dir) else f"is inside {existing}, a file"
        raise ConfigError(f"out_dir={out_dir} {what}; point out_dir at a folder (it is made if it does not exist)")
    if cfg["init_from"] != "scratch" or cfg["eval_only"] or cfg["overwrite"]:
        return
    held = [name for name in ("ckpt.pt", "best.pt") if os.path.exists(os.path.join(out_dir, name))]
    if held:
        raise ConfigError(f"{out_dir} holds a run ({' and '.join(held)}): continue it with --init_from=resume, or "
                          f"start a new run over it with --overwrite=True (its checkpoints are replaced when the new "
                          f"run writes its own), or choose another --out_dir")


def follow_max_iters(cfg, argv):
    """A new run whose command line (``argv``'s --key=value, not its config files) sets
    ``max_iters`` and not ``lr_decay_iters`` gets ``lr_decay_iters = max_iters`` (cosine schedule),
    so that ``--max_iters=N`` alone shortens or lengthens the whole schedule rather than cutting
    the config's. ``cfg`` is changed in place; returns the line that says so, or None when nothing
    changed (another schedule, a resumed or eval-only run, the values already equal)."""
    typed = {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")}
    if ("max_iters" not in typed or "lr_decay_iters" in typed or cfg["lr_schedule"] != "cosine"
            or cfg["init_from"] != "scratch" or cfg["eval_only"] or cfg["lr_decay_iters"] == cfg["max_iters"]):
        return None
    before, cfg["lr_decay_iters"] = cfg["lr_decay_iters"], cfg["max_iters"]
    return (f"lr_decay_iters={cfg['max_iters']} follows --max_iters (it was {before}): the cosine schedule decays to "
            f"min_lr={cfg['min_lr']:g} over the whole run; give --lr_decay_iters to decay elsewhere")


def eta(iter_num, start_iter, max_iters, eval_interval, train_time, eval_time, evals_done, final=False):
    """Seconds left after logging step ``iter_num`` of a run that started at ``start_iter``: the
    steps to ``max_iters`` at this run's mean training time per step (``train_time`` over the steps
    done), plus the evaluations to come (every ``eval_interval`` steps from ``iter_num`` on and at
    ``max_iters``, one more for a task's final evaluation with ``final``) at the mean time of the
    ``evals_done`` so far (``eval_time`` in all).

    Returns:
        (seconds, untimed): ``untimed`` is the number of evaluations to come when none has been
        timed yet (``seconds`` then leaves them out), else 0.
    """
    steps = max(iter_num - start_iter, 1)
    seconds = train_time / steps * max(max_iters - iter_num, 0)
    evals = 0
    if iter_num <= max_iters:
        evals = max_iters // eval_interval - (iter_num - 1) // eval_interval + (max_iters % eval_interval != 0)
    evals += bool(final)
    if evals_done == 0:
        return seconds, evals
    return seconds + evals * eval_time / evals_done, 0


def format_duration(seconds):
    """``seconds`` as ``1h02m03s`` / ``2m03s`` / ``3s``."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def restore(ckpt, optimizer, scaler, dist, device_type):
    """Load a checkpoint's optimizer, gradient-scaler and generator states (each rank its own;
    a checkpoint of another world size restores rank 0's CPU generator everywhere and warns)."""
    optimizer.load_state_dict(ckpt["optimizer"])
    if "scaler" in ckpt:
        scaler.load_state_dict(ckpt["scaler"])
    states = ckpt.get("rng_states")
    if states is not None and len(states) == dist.world:
        set_rng_state(states[dist.rank], device_type)
        return
    if states is not None and dist.master:
        print(f"warning: the checkpoint was written by {len(states)} processes, this run has {dist.world}; "
              f"generator states are not restored per rank, so the resumed run is not exact")
    torch.set_rng_state(ckpt["rng_state"])


def reached(value, target, mode):
    """Whether a best-metric ``value`` reached ``target`` in the metric's direction (``mode`` "max":
    value >= target; "min": value <= target): ``stop_at``'s test."""
    return value >= target if mode == "max" else value <= target


def best_metric_value(ckpt, mode):
    """The best value of the task's BEST_METRIC so far: the checkpoint's, or the worst possible
    (``mode`` "min" / "max") for a new run. Checkpoints before tasks kept ``best_val_loss``."""
    if ckpt is None:
        return math.inf if mode == "min" else -math.inf
    return ckpt["best_metric"]["value"] if "best_metric" in ckpt else ckpt["best_val_loss"]


class RunLog:
    """The run's records: ``out_dir/log.jsonl`` (one JSON object per line) and wandb when
    ``cfg["wandb_log"]``. Only rank 0 makes one; the first record says what this (re)start trains
    on (``start``, ``data``: the data's manifest summary)."""

    def __init__(self, cfg, iter_num, data):
        self.path = start_log(cfg["out_dir"], cfg["init_from"], cfg["eval_only"])
        self.wandb = None
        if cfg["wandb_log"]:
            import wandb
            self.wandb = wandb.init(project=cfg["wandb_project"], name=cfg["wandb_run_name"], config=cfg,
                                    mode=cfg["wandb_mode"], dir=cfg["out_dir"])
        self.write({"start": {"init_from": cfg["init_from"], "iter": iter_num, "max_iters": cfg["max_iters"],
                              "task": cfg["task"], "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                    "data": data_summary(data)})

    def write(self, record, wandb_record=None):
        """Append ``record`` to log.jsonl; ``wandb_record`` (if any) goes to wandb."""
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.wandb and wandb_record:
            self.wandb.log(wandb_record)

    def step(self, iter_num, loss, lr, tok_per_s, elapsed, eta, max_iters, metrics, untimed=0):
        """Print and record one training step (``metrics``: the task's other training metrics; ``eta``
        and ``untimed``: what ``training.eta`` returned)."""
        extra = {f"train_{k}": v for k, v in metrics.items() if k != "loss"}
        left = f"ETA {format_duration(eta)}" + (f" + {untimed} evaluation{'s' * (untimed > 1)}" if untimed else "")
        print(f"iter {iter_num}/{max_iters}: loss {loss:.4f}, lr {lr:.2e}, {tok_per_s:,.0f} tok/s, elapsed "
              f"{format_duration(elapsed)}, {left}" + "".join(f", {k} {v:.4f}" for k, v in extra.items()),
              flush=True)
        self.write({"iter": iter_num, "loss": loss, "lr": lr, "tok_per_s": tok_per_s, "elapsed_s": elapsed, **extra},
                   {"iter": iter_num, "train/loss_step": loss, "lr": lr, **{f"train/{k}": v for k, v in extra.items()}})

    def eval(self, iter_num, metrics, elapsed):
        """Print and record one evaluation."""
        print(f"step {iter_num}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()), flush=True)
        self.write({"iter": iter_num, "eval": metrics, "elapsed_s": elapsed},
                   {"iter": iter_num, **{f"eval/{k}": v for k, v in metrics.items()}})

    def close(self):
        if self.wandb:
            self.wandb.finish()


def evaluate(task, model, data, cfg, device, autocast):
    """The task's metrics on the unwrapped ``model``, in eval mode, without gradients, on a forked
    generator (evaluation never shifts the training random stream); the model is back in training
    mode afterwards.

    Raises:
        KeyError: the task's ``evaluate`` did not return its BEST_METRIC.
    """
    model.eval()
    fork_devices = [torch.cuda.current_device()] if "cuda" in str(device) else []
    with torch.no_grad(), torch.random.fork_rng(devices=fork_devices), autocast:
        metrics = tasks.to_float(task.evaluate(model, data, cfg, device))
    model.train()
    if task.BEST_METRIC[0] not in metrics:
        raise KeyError(f"task {cfg['task']!r}: evaluate() returned {sorted(metrics)}, without its "
                       f"BEST_METRIC {task.BEST_METRIC[0]!r}")
    return metrics


def final_evaluation(task, model, data, cfg, device, autocast, run_log, iters, start_iter, train_time,
                     use_best=True):
    """Rank 0, after the loop: the task's ``final_evaluate`` on best.pt's weights (the final ones if
    there is none, or with ``use_best`` False: a best.pt that this run did not write), printed,
    recorded and written to ``out_dir/final_metrics.json``."""
    summary = {"iters": iters, "train_time_s": train_time,
               "steps_per_s": (iters - start_iter) / train_time if iters > start_iter else None}
    best_path = os.path.join(cfg["out_dir"], "best.pt")
    if use_best and os.path.exists(best_path):
        best_ckpt = checkpoint.read(best_path)
        model.load_state_dict(best_ckpt["model"])
        summary.update(best_iter=best_ckpt["iter_num"], best_metric=best_ckpt["best_metric"])
    else:
        summary.update(best_iter=iters, best_metric=None)
    model.eval()
    with torch.no_grad(), autocast:
        final = tasks.to_float(task.final_evaluate(model, data, cfg, device))
    print(f"final (weights of step {summary['best_iter']}): " + ", ".join(f"{k} {v:.4f}" for k, v in final.items()),
          flush=True)
    data_lib.write_json(os.path.join(cfg["out_dir"], "final_metrics.json"),
                        {**final, **summary, "data": data_summary(data), "config": cfg})
    run_log.write({"final": final, **summary}, {f"final/{k}": v for k, v in final.items()})
    return final


def inference_only_message(name, error=None):
    """The error for training an attention that declares itself inference-only."""
    return (f"attention={name!r} cannot be trained: it is an inference-only method (its forward pass has no "
            f"gradient). Train with a trainable attention such as softmax and swap {name!r} in at evaluation "
            f"(python eval_ppl.py --attention={name})" + (f". The error was: {error}" if error else ""))


def attention_context(cfg):
    """The model context (``attention.MODEL_CONTEXT``) a first layer's attention gets from ``cfg``,
    for checking the attention's parameter values before any data is read (the task may give the
    model another ``block_size``, e.g. an LRA sequence length; values are checked alike)."""
    head_dim = cfg["n_embd"] // cfg["n_head"] if cfg["n_head"] > 0 and cfg["n_embd"] % cfg["n_head"] == 0 else None
    context = {"layer_idx": 0, "block_size": cfg["block_size"], "n_head": cfg["n_head"]}
    return {**context, "head_dim": head_dim} if head_dim else context


def check_trainable(cfg):
    """Refuse, before any data is prepared, an inference-only attention (``attention.is_trainable``)
    and, for a causal task (``CAUSAL = True`` in its module), an attention that is not exactly
    causal (``attention.causal_refusal``).

    Raises:
        ConfigError: unknown attention (lists the registered ones), an inference-only one, or one
            whose causal outputs depend on later tokens or that has no causal form.
    """
    import attention

    try:
        trainable = attention.is_trainable(cfg["attention"])
        refusal = attention.causal_refusal(cfg["attention"])
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not trainable and not cfg["eval_only"]:
        raise ConfigError(inference_only_message(cfg["attention"]))
    if getattr(tasks.get(cfg["task"]), "CAUSAL", False) and refusal:
        raise ConfigError(f"the causal task {cfg['task']!r} cannot use it: {refusal}; use it in a non-causal task "
                          f"(mlm, classify)")
