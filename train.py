"""Train a GPT on WikiText-2 (language modelling), nanoGPT style.

    python train.py configs/wikitext2_gpt_mini.py --max_iters=200 --attention=softmax
    torchrun --standalone --nproc_per_node=2 train.py configs/wikitext2_gpt_mini.py   # DDP

Every key of DEFAULTS below can be set in a config file or with --key=value; attention
parameters with --attention.<param>=value. Checkpoints go to ``out_dir/ckpt.pt`` (written to a
temporary file, then renamed). ``--init_from=resume`` continues exactly where the last checkpoint
stopped: the batch of iteration i depends only on (seed, rank, i), and RNG states are saved.
"""
import json
import math
import os
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch

import configurator
from data.wikitext2 import prepare as wt2
from model import GPT, ModelConfig, config_dict

DEFAULTS = dict(
    # I/O
    out_dir="out/wikitext2_gpt_mini",
    init_from="scratch",  # "scratch" | "resume"
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
    dataset_config="wikitext-2-v1",
    data_source_dir="",  # local wiki.*.tokens; env WIKITEXT2_DIR works too
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
    # optimizer: AdamW, warmup + cosine decay
    learning_rate=1e-3,
    max_iters=2000,
    weight_decay=0.1,
    beta1=0.9,
    beta2=0.99,
    grad_clip=1.0,
    decay_lr=True,
    warmup_iters=100,
    lr_decay_iters=2000,
    min_lr=1e-4,
    # system
    device="cpu",
    dtype="float32",  # float32 | bfloat16 | float16 (autocast, GPU only)
    compile=False,
    seed=1337,
    num_threads=0,  # torch CPU threads, 0 = torch's default
)

TASKS = ("lm",)


def get_lr(it, cfg):
    """Learning rate at iteration ``it``: linear warmup, cosine decay to ``min_lr``, then constant."""
    if not cfg["decay_lr"]:
        return cfg["learning_rate"]
    if it < cfg["warmup_iters"]:
        return cfg["learning_rate"] * (it + 1) / (cfg["warmup_iters"] + 1)
    if it > cfg["lr_decay_iters"]:
        return cfg["min_lr"]
    ratio = (it - cfg["warmup_iters"]) / max(1, cfg["lr_decay_iters"] - cfg["warmup_iters"])
    return cfg["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg["learning_rate"] - cfg["min_lr"])


def load_split(cfg, split):
    """Memory-map the uint16 token file of ``split``, preparing the dataset first if needed."""
    if cfg["dataset"] != "wikitext2":
        raise ValueError(f"unknown dataset {cfg['dataset']!r}; available: wikitext2")
    try:
        return wt2.load_split(split, cfg["dataset_config"], cfg["data_source_dir"] or None)
    except wt2.DataUnavailable as e:
        sys.exit(f"error: {e}")


def get_batch(data, batch_size, block_size, seed, device):
    """Random (x, y) windows of ``block_size`` tokens drawn with a generator seeded by ``seed``,
    so a batch is a pure function of its seed. Returns two (B, T) int64 tensors."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(data) - block_size - 1, size=batch_size)
    x = torch.from_numpy(np.stack([data[i:i + block_size].astype(np.int64) for i in starts]))
    y = torch.from_numpy(np.stack([data[i + 1:i + 1 + block_size].astype(np.int64) for i in starts]))
    return x.to(device), y.to(device)


def batch_seed(cfg, rank, it, micro_step, stream=0):
    """Distinct, reproducible seed per (seed, stream, rank, iteration, micro-step)."""
    return [cfg["seed"], stream, rank, it, micro_step]


def atomic_save(obj, path):
    """torch.save to ``path`` through a temporary file and a rename, so a crash never leaves a
    half-written checkpoint behind."""
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def build_model(cfg, vocab_size):
    configurator.check_attention_params(cfg["attention"], cfg["attention_params"])
    mc = ModelConfig(block_size=cfg["block_size"], vocab_size=vocab_size, n_layer=cfg["n_layer"],
                     n_head=cfg["n_head"], n_embd=cfg["n_embd"], dropout=cfg["dropout"], bias=cfg["bias"],
                     attention=cfg["attention"], attention_params=dict(cfg["attention_params"]))
    return GPT(mc)


def configure_optimizer(model, cfg, device_type):
    """AdamW with weight decay on matrices (dim >= 2) and none on biases, LayerNorms."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    fused = device_type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg["learning_rate"], betas=(cfg["beta1"], cfg["beta2"]), fused=fused)


def main(argv):
    torch.set_flush_denormal(True)  # subnormal floats make CPU backward passes much slower
    cfg = configurator.parse(DEFAULTS, argv)
    if cfg["task"] not in TASKS:
        raise configurator.ConfigError(f"unknown task {cfg['task']!r}; available: {', '.join(TASKS)}")
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])

    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        backend = "nccl" if cfg["device"].startswith("cuda") else "gloo"
        torch.distributed.init_process_group(backend=backend)
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        if cfg["device"].startswith("cuda"):
            cfg["device"] = f"cuda:{int(os.environ['LOCAL_RANK'])}"
            torch.cuda.set_device(cfg["device"])
        if cfg["gradient_accumulation_steps"] % world:
            raise configurator.ConfigError(f"gradient_accumulation_steps={cfg['gradient_accumulation_steps']} "
                                           f"must be divisible by the number of processes {world}")
        grad_accum = cfg["gradient_accumulation_steps"] // world
    else:
        rank, world, grad_accum = 0, 1, cfg["gradient_accumulation_steps"]
    master = rank == 0
    device, device_type = cfg["device"], ("cuda" if "cuda" in cfg["device"] else "cpu")
    if cfg["dtype"] != "float32" and device_type == "cpu":
        raise configurator.ConfigError(f"dtype={cfg['dtype']} needs a GPU; use dtype=float32 on the CPU")
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[cfg["dtype"]]
    autocast = nullcontext() if ptdtype == torch.float32 else torch.autocast(device_type, dtype=ptdtype)
    torch.manual_seed(cfg["seed"] + rank)

    train_data, val_data = load_split(cfg, "train"), load_split(cfg, "val")
    ckpt_path = os.path.join(cfg["out_dir"], "ckpt.pt")
    if cfg["init_from"] == "scratch":
        model, iter_num, best_val = build_model(cfg, vocab_size=50304), 0, float("inf")  # 50257 padded to x64
    elif cfg["init_from"] == "resume":
        if not os.path.exists(ckpt_path):
            sys.exit(f"error: --init_from=resume but no checkpoint at {ckpt_path}")
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=False)
        for key in ("n_layer", "n_head", "n_embd", "block_size", "bias", "attention", "attention_params"):
            cfg[key] = ckpt["config"][key]
        model = build_model(cfg, vocab_size=ckpt["model_args"]["vocab_size"])
        model.load_state_dict(ckpt["model"])
        iter_num, best_val = ckpt["iter_num"], ckpt["best_val_loss"]
    else:
        raise configurator.ConfigError(f"init_from must be 'scratch' or 'resume', got {cfg['init_from']!r}")
    model.to(device)
    optimizer = configure_optimizer(model, cfg, device_type)
    scaler = torch.amp.GradScaler(device_type, enabled=(ptdtype == torch.float16))
    if cfg["init_from"] == "resume":
        optimizer.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["rng_state"])
        del ckpt
    raw_model = model
    if cfg["compile"]:
        model = torch.compile(model)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)

    if master:
        os.makedirs(cfg["out_dir"], exist_ok=True)
        print(f"model: {raw_model.num_params() / 1e6:.2f}M parameters (non-embedding counted with tied wte), "
              f"attention={cfg['attention']} {cfg['attention_params']}")
    wandb_run = None
    if cfg["wandb_log"] and master:
        import wandb
        wandb_run = wandb.init(project=cfg["wandb_project"], name=cfg["wandb_run_name"], config=cfg,
                               mode=cfg["wandb_mode"], dir=cfg["out_dir"])

    @torch.no_grad()
    def estimate_loss():
        """Mean loss over ``eval_iters`` fixed batches per split (same batches at every eval)."""
        model.eval()
        out = {}
        for split, data in (("train", train_data), ("val", val_data)):
            losses = [model(*get_batch(data, cfg["batch_size"], cfg["block_size"],
                                       batch_seed(cfg, rank, k, 0, stream=1), device))[1].item()
                      for k in range(cfg["eval_iters"])]
            out[split] = float(np.mean(losses))
        model.train()
        return out

    def save_checkpoint():
        atomic_save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                     "model_args": config_dict(raw_model.config), "iter_num": iter_num,
                     "best_val_loss": best_val, "config": cfg, "rng_state": torch.get_rng_state()},
                    ckpt_path)

    log_path = os.path.join(cfg["out_dir"], "log.jsonl")

    def evaluate_and_log(lr):
        """estimate_loss, printed and appended to log.jsonl (and wandb)."""
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
              f"val ppl {math.exp(losses['val']):.2f}")
        with open(log_path, "a") as f:
            f.write(json.dumps({"iter": iter_num, "eval": losses, "elapsed_s": time.time() - t_start}) + "\n")
        if wandb_run:
            wandb_run.log({"iter": iter_num, "train/loss": losses["train"], "val/loss": losses["val"], "lr": lr})
        return losses

    tokens_per_iter = grad_accum * world * cfg["batch_size"] * cfg["block_size"]
    if master:
        print(f"tokens per iteration: {tokens_per_iter:,}")
    t_start = t_last = time.time()
    tokens_since = 0
    while True:
        lr = get_lr(iter_num, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr

        if iter_num % cfg["eval_interval"] == 0 and master and (iter_num > 0 or cfg["eval_only"]):
            losses = evaluate_and_log(lr)
            if losses["val"] < best_val or cfg["always_save_checkpoint"]:
                best_val = min(best_val, losses["val"])
                save_checkpoint()
                print(f"saved checkpoint to {ckpt_path}")
        if cfg["eval_only"] or iter_num >= cfg["max_iters"]:
            break

        loss_sum = 0.0
        for micro_step in range(grad_accum):
            x, y = get_batch(train_data, cfg["batch_size"], cfg["block_size"],
                             batch_seed(cfg, rank, iter_num, micro_step), device)
            sync = nullcontext()
            if ddp and micro_step < grad_accum - 1:
                sync = model.no_sync()  # all-reduce only on the last micro-step
            with sync, autocast:
                _, loss = model(x, y)
                loss = loss / grad_accum
            scaler.scale(loss).backward()
            loss_sum += loss.item()
        if not math.isfinite(loss_sum):
            optimizer.zero_grad(set_to_none=True)
            msg = (f"error: non-finite loss ({loss_sum}) at iteration {iter_num}; stopping. "
                   f"The last good checkpoint ({ckpt_path}) is untouched; try a lower learning_rate.")
            if ddp:
                torch.distributed.destroy_process_group()
            sys.exit(msg)
        if cfg["grad_clip"] > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

        iter_num += 1
        tokens_since += tokens_per_iter
        if iter_num % cfg["log_interval"] == 0 and master:
            now = time.time()
            print(f"iter {iter_num}: loss {loss_sum:.4f}, lr {lr:.2e}, {tokens_since / (now - t_last):,.0f} tok/s, "
                  f"elapsed {now - t_start:.0f}s")
            with open(log_path, "a") as f:
                f.write(json.dumps({"iter": iter_num, "loss": loss_sum, "lr": lr,
                                    "tok_per_s": tokens_since / (now - t_last), "elapsed_s": now - t_start}) + "\n")
            if wandb_run:
                wandb_run.log({"iter": iter_num, "train/loss_step": loss_sum, "lr": lr})
            t_last, tokens_since = now, 0

    if iter_num >= cfg["max_iters"] and master and not cfg["eval_only"] and iter_num % cfg["eval_interval"]:
        best_val = min(best_val, evaluate_and_log(lr)["val"])
        save_checkpoint()  # the final state, whatever the eval schedule
        print(f"saved final checkpoint to {ckpt_path}")
    if wandb_run:
        wandb_run.finish()
    if ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
