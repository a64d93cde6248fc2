"""Train a model on a task, nanoGPT style: one loop for every task.

    python train.py configs/wikitext2_gpt_mini.py --max_iters=200 --attention=softmax
    python train.py --help                                   # every key, its default and meaning
    torchrun --standalone --nproc_per_node=2 train.py configs/wikitext2_gpt_mini.py   # DDP

The task (``--task``, "lm" by default) decides the model class, the data, the batches, the loss
and the evaluation metrics; it lives in ``tasks/<name>.py`` (interface in ``tasks/__init__.py``).
This file holds only what every task shares: the optimizer and learning-rate schedule, gradient
accumulation, clipping, mixed precision, ``torch.compile``, DDP, evaluation and checkpoints.

Every key of DEFAULTS (train.py's own keys plus every task's keys) can be set in a config file
or with --key=value; attention parameters with --attention.<param>=value.

Checkpoints go to ``out_dir/ckpt.pt`` (written to a temporary file, then renamed). They hold
``model``, ``optimizer``, ``model_args``, ``iter_num``, ``best_val_loss``, ``best_metric``,
``config``, ``task``, ``rng_state`` (rank 0's CPU generator) and ``rng_states`` (every rank's
torch, CUDA, NumPy and Python generators). ``--init_from=resume`` continues exactly where the
checkpoint stopped: the batch of iteration i depends only on (seed, rank, i), each rank gets its
own generator states back, and evaluation runs on a forked generator so it never shifts the
training stream. ``python train.py --init_from=resume --out_dir=DIR`` is all a resume needs: the
checkpoint's configuration is read before any data, so the run trains the same model on the same
data; an explicit setting of a task, model or data key that differs from the checkpoint's is an
error, other keys (``max_iters``, ``eval_interval``, ``lra_dir``, logging) may change
(``resume_config``).

``out_dir/log.jsonl`` gets one JSON record per start (what is trained, the data's manifest
summary), per logged step, per evaluation and the final metrics. A scratch run into a used
``out_dir`` keeps the earlier run's log as ``log.<n>.jsonl`` (``start_log``); a resumed run appends.
Data errors (missing, malformed, prepared with other options) end the run with one ``error:`` line
and exit status 2, as configuration errors do.

Tasks with a ``final_evaluate`` (e.g. "classify") also keep ``out_dir/best.pt`` (``model``,
``model_args``, ``iter_num``, ``best_metric``), written whenever the task's BEST_METRIC improves.
After the loop, rank 0 loads its weights (the final weights if there is none), calls
``final_evaluate`` (e.g. test accuracy), prints the result and writes ``out_dir/final_metrics.json``
(atomically): the metrics, ``best_iter``, ``best_metric``, ``iters``, ``train_time_s`` and
``steps_per_s`` (optimizer steps of this process per second of training, evaluation excluded),
``data`` (the manifest summary of the data) and the run's ``config``.

Per optimizer step: the micro-batch losses are summed, all-reduced over DDP ranks (so every rank
sees the same value and a non-finite loss on any rank stops all of them), gradients clipped,
the optimizer steps, then the model's ``after_optimizer_step()`` runs if it defines one (e.g.
DANet's rescaling of the FFN weights).
"""
import json
import math
import os
import random
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch

import attention
import configurator
import data as data_lib
import tasks
from configurator import ConfigError
from model import config_dict
from tasks import batch_seed  # noqa: F401  (re-exported: the seeding convention of batches)

COMMON_DEFAULTS = dict(
    # I/O
    out_dir="out/wikitext2_gpt_mini",
    init_from="scratch",
    eval_interval=200,
    log_interval=10,
    eval_iters=20,
    eval_only=False,
    always_save_checkpoint=True,
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
    # model
    n_layer=4,
    n_head=4,
    n_embd=128,
    dropout=0.0,
    bias=True,
    attention="softmax",
    attention_params={},
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
    out_dir="directory of ckpt.pt and log.jsonl; a scratch run into a used out_dir renames its log.jsonl "
            "and final_metrics.json to log.<n>.jsonl / final_metrics.<n>.json (n = 1, 2, ...)",
    init_from="'scratch' (new model) or 'resume' (continue from out_dir/ckpt.pt with its task, model and data "
              "keys; only --init_from=resume --out_dir=DIR is needed)",
    eval_interval="evaluate (and checkpoint) every this many optimizer steps, and at max_iters",
    log_interval="log the training loss every this many optimizer steps",
    eval_iters="batches per split in each evaluation",
    eval_only="evaluate the model once (e.g. with init_from=resume) and stop; writes no checkpoint",
    always_save_checkpoint="write ckpt.pt at every evaluation (False: only when the task's best metric improves)",
    wandb_log="log to Weights & Biases",
    wandb_project="wandb project name",
    wandb_run_name="wandb run name",
    wandb_mode="wandb mode: online | offline | disabled",
    task=f"what to train: {' | '.join(tasks.available())} (modules in tasks/)",
    dataset="data set name; allowed values depend on the task (lm: wikitext2 | shakespeare_char; "
            "mlm: wikitext2 | hf:<path>[:<config>]; classify: see lra_task)",
    batch_size="sequences per micro-batch per process",
    block_size="tokens per training sequence = the model's maximum sequence length",
    gradient_accumulation_steps="micro-batches per optimizer step, summed over all DDP processes",
    n_layer="transformer blocks",
    n_head="attention heads per block",
    n_embd="model width (embedding size)",
    dropout="dropout probability (training only)",
    bias="biases in Linear layers and LayerNorms",
    attention="attention mechanism, a registered name (attention/); parameters with --attention.<param>=value",
    attention_params="parameters of the attention mechanism (dict)",
    learning_rate="peak learning rate (AdamW)",
    max_iters="optimizer steps in total",
    weight_decay="AdamW weight decay on matrices (none on biases and norms)",
    beta1="AdamW beta1",
    beta2="AdamW beta2",
    adam_eps="AdamW epsilon (LRA: 1e-9)",
    grad_clip="clip the global gradient norm to this (0 = no clipping)",
    lr_schedule="after warmup: 'cosine' (to min_lr at lr_decay_iters), 'constant', or 'rsqrt' "
                "(learning_rate * sqrt(warmup_iters / step), LRA's rsqrt_decay)",
    warmup_iters="linear warmup steps",
    lr_decay_iters="step at which the cosine schedule reaches min_lr",
    min_lr="final learning rate of the cosine schedule",
    device="cpu | cuda | cuda:N (DDP uses cuda:LOCAL_RANK)",
    dtype="float32 | bfloat16 | float16 (autocast; the last two need a GPU)",
    compile="torch.compile the model for training (evaluation runs uncompiled)",
    seed="seed of initialization, dropout and batches",
    num_threads="torch CPU threads per process, 0 = torch's default",
)
# Task keys are merged in (see tasks/__init__.py) so that --help lists them and they are checked.
DEFAULTS, HELP = tasks.merge_defaults(COMMON_DEFAULTS, COMMON_HELP)

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


def atomic_save(obj, path):
    """torch.save to ``path`` through a temporary file and a rename, so a crash never leaves a
    half-written checkpoint behind."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


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
    if cfg["dtype"] not in DTYPES:
        raise ConfigError(f"unknown dtype {cfg['dtype']!r}; allowed: {', '.join(DTYPES)}")
    if cfg["dtype"] != "float32" and "cuda" not in cfg["device"]:
        raise ConfigError(f"dtype={cfg['dtype']} needs a GPU; use dtype=float32 on the CPU")
    for key in ("batch_size", "block_size", "eval_interval", "log_interval", "eval_iters",
                "gradient_accumulation_steps"):
        if cfg[key] < 1:
            raise ConfigError(f"{key} must be at least 1, got {cfg[key]}")
    for key in ("max_iters", "warmup_iters", "num_threads"):
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


def data_summary(data):
    """The prepared data's manifest summary (source, sizes, ...) that ``load_data`` returns under
    "manifest", or None for a task that gives none."""
    return data.get("manifest") if isinstance(data, dict) else None


def read_checkpoint(path):
    """The checkpoint at ``path``, loaded on the CPU.

    Raises:
        ConfigError: there is no file at ``path``.
    """
    if not os.path.exists(path):
        raise ConfigError(f"init_from=resume but there is no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=False)


def resume_config(cfg, explicit, ckpt, path="ckpt.pt"):
    """The configuration of a resumed run: the checkpoint's own configuration (a key added to
    train.py since then takes its default), with the keys set explicitly (config files, --key=value)
    on top.

    Keys that decide what is trained, ``task`` and the task's ``MODEL_KEYS`` and ``DATA_KEYS``
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
    saved_task = ckpt.get("task", saved.get("task", "lm"))  # checkpoints before tasks were all "lm"
    if explicit.get("task") and cfg["task"] != saved_task:
        raise ConfigError(f"the checkpoint {path} was trained on task {saved_task!r}, not {cfg['task']!r}; "
                          f"resume it with --task={saved_task} (or without --task)")
    task = tasks.get(saved_task)
    fixed = {"task", *task.MODEL_KEYS, *task.DATA_KEYS}
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


def format_duration(seconds):
    """``seconds`` as ``1h02m03s`` / ``2m03s`` / ``3s``."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def main(argv):
    """Parse ``argv`` (config files and --key=value), train, return the last evaluation's metrics
    (None if there was none on this rank).

    Raises:
        SystemExit: --help (status 0); missing data or a non-finite loss (status 1, message on stderr).
        ConfigError: bad configuration (``configurator.run_cli`` turns it into status 2).
    """
    torch.set_flush_denormal(True)  # subnormal floats make CPU backward passes much slower
    cfg, explicit = configurator.parse_explicit(DEFAULTS, argv, help=HELP)
    if cfg["init_from"] not in INIT_FROM:
        raise ConfigError(f"init_from must be one of {', '.join(INIT_FROM)}, got {cfg['init_from']!r}")
    ckpt = None
    if cfg["init_from"] == "resume":  # the checkpoint's task, model and data keys before any data is read
        ckpt_path = os.path.join(cfg["out_dir"], "ckpt.pt")
        ckpt = read_checkpoint(ckpt_path)
        cfg = resume_config(cfg, explicit, ckpt, ckpt_path)
    task = tasks.get(cfg["task"])
    tasks.check_task_keys(cfg, DEFAULTS, cfg["task"])
    check_config(cfg)
    try:
        trainable = attention.is_trainable(cfg["attention"])
    except ValueError as e:  # unknown name: the message lists the registered ones
        raise ConfigError(str(e)) from None
    if not trainable and not cfg["eval_only"]:
        raise ConfigError(_inference_only_message(cfg["attention"]))
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    dist = Dist(cfg)
    try:
        return _train(cfg, task, dist, ckpt)
    finally:
        dist.close()


def _inference_only_message(name, error=None):
    return (f"attention={name!r} cannot be trained: it is an inference-only method (its forward pass has no "
            f"gradient). Train with a trainable attention such as softmax and swap {name!r} in at evaluation "
            f"(python eval_ppl.py --attention={name})" + (f". The error was: {error}" if error else ""))


def _train(cfg, task, dist, ckpt=None):
    if cfg["gradient_accumulation_steps"] % dist.world:
        raise ConfigError(f"gradient_accumulation_steps={cfg['gradient_accumulation_steps']} must be divisible "
                          f"by the number of processes {dist.world}")
    grad_accum = cfg["gradient_accumulation_steps"] // dist.world
    device, device_type = cfg["device"], ("cuda" if "cuda" in cfg["device"] else "cpu")
    ptdtype = DTYPES[cfg["dtype"]]
    autocast = nullcontext() if ptdtype == torch.float32 else torch.autocast(device_type, dtype=ptdtype)
    torch.manual_seed(cfg["seed"] + dist.rank)

    data = prepare_and_load_data(task, cfg, dist)
    ckpt_path = os.path.join(cfg["out_dir"], "ckpt.pt")
    best_path = os.path.join(cfg["out_dir"], "best.pt")
    final_evaluate = getattr(task, "final_evaluate", None)
    best_name, best_mode = task.BEST_METRIC
    if ckpt is not None:
        raw_model = task.build_model(cfg, data, model_args=ckpt["model_args"])
        raw_model.load_state_dict(ckpt["model"])
        iter_num = ckpt["iter_num"]
        best = ckpt["best_metric"]["value"] if "best_metric" in ckpt else ckpt["best_val_loss"]
    else:
        raw_model, iter_num = task.build_model(cfg, data), 0
        best = math.inf if best_mode == "min" else -math.inf
    raw_model.to(device)
    optimizer = configure_optimizer(raw_model, cfg, device_type)
    scaler = torch.amp.GradScaler(device_type, enabled=(ptdtype == torch.float16))
    if ckpt is not None:
        optimizer.load_state_dict(ckpt["optimizer"])
        if "scaler" in ckpt:
            scaler.load_state_dict(ckpt["scaler"])
        states = ckpt.get("rng_states")
        if states is not None and len(states) == dist.world:
            set_rng_state(states[dist.rank], device_type)  # each rank its own generators
        else:
            if states is not None and dist.master:
                print(f"warning: the checkpoint was written by {len(states)} processes, this run has {dist.world}; "
                      f"generator states are not restored per rank, so the resumed run is not exact")
            torch.set_rng_state(ckpt["rng_state"])
        ckpt = None  # free the CPU copy
    model = torch.compile(raw_model) if cfg["compile"] else raw_model
    if dist.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    after_step = getattr(raw_model, "after_optimizer_step", None)

    if dist.master:
        os.makedirs(cfg["out_dir"], exist_ok=True)
        if final_evaluate is not None and cfg["init_from"] == "scratch" and not cfg["eval_only"] \
                and os.path.exists(best_path):
            os.remove(best_path)  # a previous run's best weights must not be evaluated as this run's
        data_info = data_summary(data)
        if data_info is not None:
            print("data: " + ", ".join(f"{k} {v}" for k, v in data_info.items()))
        print(f"task {cfg['task']}: {type(raw_model).__name__} with {raw_model.num_params() / 1e6:.2f}M parameters "
              f"(non-embedding), attention={cfg['attention']} {cfg['attention_params']}")
    wandb_run = None
    if cfg["wandb_log"] and dist.master:
        import wandb
        wandb_run = wandb.init(project=cfg["wandb_project"], name=cfg["wandb_run_name"], config=cfg,
                               mode=cfg["wandb_mode"], dir=cfg["out_dir"])
    log_path = start_log(cfg["out_dir"], cfg["init_from"], cfg["eval_only"]) if dist.master else None

    def log(record):
        with open(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")

    if dist.master:  # the first record of each (re)start: what this run trains on
        log({"start": {"init_from": cfg["init_from"], "iter": iter_num, "max_iters": cfg["max_iters"],
                       "task": cfg["task"], "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
             "data": data_summary(data)})

    def evaluate():
        """The task's metrics on the unwrapped model, in eval mode, without gradients, on a forked
        generator (evaluation never shifts the training random stream)."""
        raw_model.eval()
        fork_devices = [torch.cuda.current_device()] if device_type == "cuda" else []
        with torch.no_grad(), torch.random.fork_rng(devices=fork_devices), autocast:
            metrics = tasks.to_float(task.evaluate(raw_model, data, cfg, device))
        raw_model.train()
        if best_name not in metrics:
            raise KeyError(f"task {cfg['task']!r}: evaluate() returned {sorted(metrics)}, without its "
                           f"BEST_METRIC {best_name!r}")
        print(f"step {iter_num}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()), flush=True)
        log({"iter": iter_num, "eval": metrics, "elapsed_s": time.time() - t_start})
        if wandb_run:
            wandb_run.log({"iter": iter_num, **{f"eval/{k}": v for k, v in metrics.items()}})
        return metrics

    def save_checkpoint(rng_states):
        atomic_save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                     "model_args": config_dict(raw_model.config), "iter_num": iter_num,
                     "best_val_loss": best if best_name == "val_loss" else None,
                     "best_metric": {"name": best_name, "mode": best_mode, "value": best},
                     "config": cfg, "task": cfg["task"], "scaler": scaler.state_dict(),
                     "rng_state": rng_states[0]["torch"], "rng_states": rng_states, "world_size": dist.world},
                    ckpt_path)

    def forward_loss(batch):
        try:
            with autocast:
                return task.loss(model, batch)
        except attention.InferenceOnlyError as e:  # only methods that say so; every other error propagates
            raise ConfigError(_inference_only_message(cfg["attention"], e)) from e

    tokens_per_iter = grad_accum * dist.world * task.batch_tokens(cfg)
    if dist.master:
        print(f"tokens per iteration: {tokens_per_iter:,}")
    start_iter, metrics = iter_num, None
    t_start = t_last = time.time()
    tokens_since, eval_time = 0, 0.0
    while True:
        lr = get_lr(iter_num, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr

        # Evaluate at every eval_interval and at the end, but not again at the step a run resumes from.
        at_end = iter_num >= cfg["max_iters"]
        if cfg["eval_only"] or (iter_num > start_iter and (iter_num % cfg["eval_interval"] == 0 or at_end)):
            t_eval = time.time()
            rng_states = dist.gather(get_rng_state(device_type))  # every rank, before any more draws
            if dist.master:
                metrics = evaluate()
                if not cfg["eval_only"]:
                    value = metrics[best_name]
                    improved = value < best if best_mode == "min" else value > best
                    best = value if improved else best
                    if improved or cfg["always_save_checkpoint"]:
                        save_checkpoint(rng_states)
                        print(f"saved checkpoint to {ckpt_path}")
                    if improved and final_evaluate is not None:
                        atomic_save({"model": raw_model.state_dict(), "model_args": config_dict(raw_model.config),
                                     "iter_num": iter_num, "best_metric": {"name": best_name, "value": best}},
                                    best_path)
            t_last += time.time() - t_eval  # tokens/s counts training time only
            eval_time += time.time() - t_eval
        if cfg["eval_only"] or at_end:
            break

        loss_sum = torch.zeros((), device=device)
        metric_sums = {}
        for micro_step in range(grad_accum):
            batch = task.get_batch(data, "train", cfg, tasks.batch_seed(cfg, dist.rank, iter_num, micro_step), device)
            sync = nullcontext()
            if dist.ddp and micro_step < grad_accum - 1:
                sync = model.no_sync()  # all-reduce gradients only on the last micro-step
            with sync:
                loss, step_metrics = forward_loss(batch)
                scaler.scale(loss / grad_accum).backward()
            loss_sum += loss.detach().float() / grad_accum
            for name, value in step_metrics.items():
                metric_sums[name] = metric_sums.get(name, 0.0) + value / grad_accum
        if dist.ddp:  # every rank gets the mean loss, so a non-finite loss anywhere stops every rank
            torch.distributed.all_reduce(loss_sum)
            loss_sum /= dist.world
        loss_value = loss_sum.item()
        if not math.isfinite(loss_value):
            optimizer.zero_grad(set_to_none=True)
            where = f" (mean over {dist.world} processes; rank {dist.rank} stops)" if dist.ddp else ""
            # printed at once (every rank): torchrun may end the other ranks as soon as one exits
            print(f"error: non-finite loss ({loss_value}) at iteration {iter_num}{where}. The last good "
                  f"checkpoint ({ckpt_path}) is untouched; try a lower learning_rate.", file=sys.stderr, flush=True)
            raise SystemExit(1)
        if cfg["grad_clip"] > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if after_step is not None:
            with torch.no_grad():
                after_step()

        iter_num += 1
        tokens_since += tokens_per_iter
        if iter_num % cfg["log_interval"] == 0 and dist.master:
            now = time.time()
            rate = tokens_since / max(now - t_last, 1e-9)
            extra = {f"train_{k}": v for k, v in tasks.to_float(metric_sums).items() if k != "loss"}
            done = iter_num - start_iter
            eta = (now - t_start) / done * (cfg["max_iters"] - iter_num)  # evaluations included
            print(f"iter {iter_num}/{cfg['max_iters']}: loss {loss_value:.4f}, lr {lr:.2e}, {rate:,.0f} tok/s, "
                  f"elapsed {format_duration(now - t_start)}, ETA {format_duration(eta)}" + "".join(f", {k} {v:.4f}" for k, v in extra.items()), flush=True)
            log({"iter": iter_num, "loss": loss_value, "lr": lr, "tok_per_s": rate, "elapsed_s": now - t_start,
                 **extra})
            if wandb_run:
                wandb_run.log({"iter": iter_num, "train/loss_step": loss_value, "lr": lr,
                               **{f"train/{k}": v for k, v in extra.items()}})
            t_last, tokens_since = now, 0

    if final_evaluate is not None and dist.master:
        train_time = time.time() - t_start - eval_time
        summary = {"iters": iter_num, "train_time_s": train_time,
                   "steps_per_s": (iter_num - start_iter) / train_time if iter_num > start_iter else None}
        if os.path.exists(best_path):
            best_ckpt = torch.load(best_path, map_location="cpu", weights_only=False)
            raw_model.load_state_dict(best_ckpt["model"])
            summary.update(best_iter=best_ckpt["iter_num"], best_metric=best_ckpt["best_metric"])
        else:
            summary.update(best_iter=iter_num, best_metric=None)
        raw_model.eval()
        with torch.no_grad(), autocast:
            final = tasks.to_float(final_evaluate(raw_model, data, cfg, device))
        print(f"final (weights of step {summary['best_iter']}): " + ", ".join(f"{k} {v:.4f}" for k, v in final.items()),
              flush=True)
        data_lib.write_json(os.path.join(cfg["out_dir"], "final_metrics.json"),
                            {**final, **summary, "data": data_summary(data), "config": cfg})
        log({"final": final, **summary})
        if wandb_run:
            wandb_run.log({f"final/{k}": v for k, v in final.items()})
    if wandb_run:
        wandb_run.finish()
    if dist.master and not cfg["eval_only"]:
        print(f"done: {iter_num - start_iter} iterations ({start_iter} -> {iter_num}) in "
              f"{format_duration(time.time() - t_start)} wall time", flush=True)
    return metrics


if __name__ == "__main__":
    configurator.run_cli(main)
