"""Train a model on a task, nanoGPT style: one loop for every task.

    python train.py configs/wikitext2_gpt_mini.py --max_iters=200 --attention=softmax
    python train.py --init_from=resume --out_dir=out/wikitext2_gpt_mini_softmax   # continue that run exactly
    python train.py --help                                   # every key, its default and meaning
    torchrun --standalone --nproc_per_node=2 train.py configs/wikitext2_gpt_mini.py   # DDP

The task (``--task``, "lm" by default) decides the model class, the data, the batches, the loss
and the evaluation metrics; it lives in ``tasks/<name>.py`` (interface in ``tasks/__init__.py``).
This file holds the loop every task shares: learning-rate schedule, gradient accumulation,
clipping, mixed precision, ``torch.compile``, DDP, evaluation and checkpoints. What the loop calls
(the config keys, checkpoints and resume, the run log, the final evaluation) is in
``training.py``, whose docstring describes the files a run writes.

Every key of ``training.DEFAULTS`` (train.py's own keys plus every task's keys) can be set in a
config file or with --key=value; attention parameters with --attention.<param>=value.

Per optimizer step: the micro-batch losses are summed, all-reduced over DDP ranks (so every rank
sees the same value and a non-finite loss on any rank stops all of them), gradients clipped,
the optimizer steps, then the model's ``after_optimizer_step()`` runs if it defines one (e.g.
DANet's rescaling of the FFN weights). Configuration and data errors end the run with one
``error:`` line and exit status 2, among them a new run into a folder that holds a run (resume it
with --init_from=resume, or --overwrite=True) and a step that cannot fit in memory (estimated
before the first, ``step_memory.py``); a non-finite loss with status 1 and the last checkpoint
untouched. A run that stops early for any reason but its configuration (non-finite loss, Ctrl-C,
out of memory, an exception) leaves an entry ``train_stopped_at_<iter>`` (command, commit, the
reason) in out_dir/manifest.json.
"""
import math
import os
import sys
import time
from contextlib import nullcontext

import torch

import attention
import checkpoint
import configurator
import provenance
import tasks
import training as T
from configurator import ConfigError
from training import DEFAULTS, HELP  # noqa: F401  (train.py's config keys, for scripts and tests)


def main(argv):
    """Parse ``argv`` (config files and --key=value), train, return the last evaluation's metrics
    (None if there was none on this rank).

    Raises:
        SystemExit: --help (status 0); a non-finite loss (status 1, message on stderr).
        ConfigError: bad configuration or data (``configurator.run_cli`` turns it into status 2).
    """
    torch.set_flush_denormal(True)  # subnormal floats make CPU backward passes much slower
    command = provenance.command_line([os.path.abspath(__file__), *argv])
    argv, _ = configurator.import_files(argv)  # a user's attention or task (--import=FILE)
    T.config_keys()
    cfg, explicit = configurator.parse_explicit(T.DEFAULTS, argv, help=T.HELP)
    cfg["out_dir"] = T.resolve_out_dir(cfg, explicit, argv)  # unset: configs/lra/text.py + attention/fastmax1.py
    if cfg["init_from"] not in T.INIT_FROM:
        raise ConfigError(f"init_from must be one of {', '.join(T.INIT_FROM)}, got {cfg['init_from']!r}")
    T.check_out_dir(cfg)  # a file, or a new run over an old one without --overwrite=True
    schedule = T.follow_max_iters(cfg, argv)  # --max_iters alone: lr_decay_iters follows it
    if schedule and int(os.environ.get("RANK", 0)) == 0:
        print(schedule, flush=True)
    ckpt = None
    if cfg["init_from"] == "resume":  # the checkpoint's task, model and data keys before any data is read
        ckpt_path = os.path.join(cfg["out_dir"], "ckpt.pt")
        ckpt = T.read_checkpoint(ckpt_path)
        cfg = T.resume_config(cfg, explicit, ckpt, ckpt_path)
    task = tasks.get(cfg["task"])
    tasks.check_task_keys(explicit, cfg["task"])
    T.check_config(cfg)
    T.check_trainable(cfg)
    configurator.check_attention_params(cfg["attention"], cfg["attention_params"], T.attention_context(cfg))
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    dist = T.Dist(cfg)
    try:
        return train(cfg, task, dist, ckpt, command=command)
    finally:
        dist.close()


def accumulate_gradients(model, task, data, cfg, dist, scaler, autocast, grad_accum, iter_num):
    """Forward and backward of the ``grad_accum`` micro-batches of optimizer step ``iter_num``; the
    gradients accumulate in the parameters. Returns (mean loss over the micro-batches and DDP ranks,
    a Python float that may be non-finite; the task's step metrics averaged over the micro-batches).
    Raises ConfigError when the attention is inference-only (attention.InferenceOnlyError)."""
    loss_sum, metric_sums = torch.zeros((), device=cfg["device"]), {}
    for micro_step in range(grad_accum):
        seed = tasks.batch_seed(cfg, dist.rank, iter_num, micro_step)
        batch = task.get_batch(data, "train", cfg, seed, cfg["device"])
        sync = nullcontext()
        if dist.ddp and micro_step < grad_accum - 1:
            sync = model.no_sync()  # all-reduce gradients only on the last micro-step
        with sync:
            try:
                with autocast:
                    loss, step_metrics = task.loss(model, batch)
            except attention.InferenceOnlyError as e:  # only methods that say so; all else propagates
                raise ConfigError(T.inference_only_message(cfg["attention"], e)) from e
            scaler.scale(loss / grad_accum).backward()
        loss_sum += loss.detach().float() / grad_accum
        for name, value in step_metrics.items():
            metric_sums[name] = metric_sums.get(name, 0.0) + value / grad_accum
    if dist.ddp:  # every rank gets the mean loss, so a non-finite loss anywhere stops every rank
        torch.distributed.all_reduce(loss_sum)
        loss_sum /= dist.world
    return loss_sum.item(), metric_sums


def apply_gradients(model, optimizer, scaler, grad_clip, after_step=None):
    """The update from the accumulated gradients: clip their global norm to ``grad_clip`` (0 = no
    clipping), step the optimizer (through the fp16 GradScaler), clear them, then the model's
    ``after_optimizer_step`` (``after_step``, under no_grad) if it has one."""
    if grad_clip > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if after_step is not None:
        with torch.no_grad():
            after_step()


def train(cfg, task, dist, ckpt=None, command=None):
    """The training loop of ``cfg`` on ``task`` (a module of tasks/), from scratch or from ``ckpt``;
    ``command`` (the command line) goes to out_dir/manifest.json."""
    if cfg["gradient_accumulation_steps"] % dist.world:
        raise ConfigError(f"gradient_accumulation_steps={cfg['gradient_accumulation_steps']} must be divisible "
                          f"by the number of processes {dist.world}")
    grad_accum = cfg["gradient_accumulation_steps"] // dist.world
    device, device_type = cfg["device"], ("cuda" if "cuda" in cfg["device"] else "cpu")
    ptdtype = T.DTYPES[cfg["dtype"]]
    autocast = nullcontext() if ptdtype == torch.float32 else torch.autocast(device_type, dtype=ptdtype)
    torch.manual_seed(cfg["seed"] + dist.rank)

    data = T.prepare_and_load_data(task, cfg, dist)
    ckpt_path, best_path = os.path.join(cfg["out_dir"], "ckpt.pt"), os.path.join(cfg["out_dir"], "best.pt")
    best_name, best_mode = task.BEST_METRIC
    final_evaluate = getattr(task, "final_evaluate", None)
    raw_model = checkpoint.build_model(ckpt, cfg["task"]) if ckpt else task.build_model(cfg, data)
    iter_num, best = (ckpt["iter_num"] if ckpt else 0), T.best_metric_value(ckpt, best_mode)
    if not cfg["eval_only"]:  # refuse, in one line, a step that cannot fit in memory (step_memory.py)
        T.check_step_memory(task, cfg, data, raw_model, dist, autocast, iter_num)
    raw_model.to(device)
    optimizer = T.configure_optimizer(raw_model, cfg, device_type)
    scaler = torch.amp.GradScaler(device_type, enabled=(ptdtype == torch.float16))
    if ckpt is not None:
        T.restore(ckpt, optimizer, scaler, dist, device_type)
        ckpt = None  # free the CPU copy
    model = torch.compile(raw_model) if cfg["compile"] else raw_model
    if dist.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    after_step = getattr(raw_model, "after_optimizer_step", None)

    run_log = None
    best_written = False  # whether best.pt is this run's (an earlier run's is replaced, never deleted first)
    if dist.master:
        os.makedirs(cfg["out_dir"], exist_ok=True)
        run_log, commit, summary = T.RunLog(cfg, iter_num, data), provenance.git_commit(), T.data_summary(data)
        if cfg["init_from"] == "resume":
            print(T.resume_message(cfg, iter_num, summary), flush=True)  # where, from where, how far, on what
        elif summary is not None:
            print("data: " + ", ".join(f"{k} {v}" for k, v in summary.items()))
        print(f"task {cfg['task']}: {type(raw_model).__name__} with {raw_model.num_params() / 1e6:.2f}M parameters "
              f"(non-embedding), attention={cfg['attention']} {cfg['attention_params']}")
    tokens_per_iter = grad_accum * dist.world * task.batch_tokens(cfg)
    if dist.master:
        print(f"tokens per iteration: {tokens_per_iter:,}")
    start_iter, metrics = iter_num, None
    t_start = t_last = time.time()
    tokens_since, eval_time, evals_done = 0, 0.0, 0
    stop_reason = None  # why the loop ended early, for the manifest (else the exception itself)
    try:
        while True:
            lr = T.get_lr(iter_num, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr

            # Evaluate at every eval_interval and at the end, but not again at the step a run resumes from.
            at_end = iter_num >= cfg["max_iters"]
            if cfg["eval_only"] or (iter_num > start_iter and (iter_num % cfg["eval_interval"] == 0 or at_end)):
                t_eval = time.time()
                rng_states = dist.gather(T.get_rng_state(device_type))  # every rank, before any more draws
                if dist.master:
                    metrics = T.evaluate(task, raw_model, data, cfg, device, autocast)
                    run_log.eval(iter_num, metrics, time.time() - t_start)
                    improved = metrics[best_name] < best if best_mode == "min" else metrics[best_name] > best
                    best = metrics[best_name] if improved else best
                    if not cfg["eval_only"] and (improved or cfg["always_save_checkpoint"]):
                        checkpoint.save(ckpt_path, raw_model, optimizer, scaler, cfg, iter_num,
                                        (best_name, best_mode, best), rng_states, dist.world)
                        print(f"saved checkpoint to {ckpt_path}")
                    if not cfg["eval_only"] and improved and final_evaluate is not None:
                        checkpoint.save_best(best_path, raw_model, iter_num, best_name, best)
                        best_written = True
                t_last += time.time() - t_eval  # tokens/s counts training time only
                eval_time += time.time() - t_eval
                evals_done += 1
                if cfg["stop_at"] and not cfg["eval_only"] and not at_end and dist.broadcast(
                        dist.master and T.reached(metrics[best_name], cfg["stop_at"], best_mode)):
                    if dist.master:
                        print(f"stopping early: {best_name} {metrics[best_name]:.4f} reached stop_at={cfg['stop_at']:g} "
                              f"at iteration {iter_num}", flush=True)
                        run_log.write({"stopped_early": {"iter": iter_num, "metric": best_name,
                                                         "value": metrics[best_name], "stop_at": cfg["stop_at"]}})
                    break
            if cfg["eval_only"] or at_end:
                break

            loss_value, metric_sums = accumulate_gradients(model, task, data, cfg, dist, scaler, autocast,
                                                           grad_accum, iter_num)
            if not math.isfinite(loss_value):
                optimizer.zero_grad(set_to_none=True)
                where = f" (mean over {dist.world} processes; rank {dist.rank} stops)" if dist.ddp else ""
                # printed at once (every rank): torchrun may end the other ranks as soon as one exits
                message = (f"non-finite loss ({loss_value}) at iteration {iter_num}{where}. The last good "
                           f"checkpoint ({ckpt_path}) is untouched; try a lower learning_rate.")
                print(f"error: {message}", file=sys.stderr, flush=True)
                stop_reason = message
                raise SystemExit(1)
            apply_gradients(model, optimizer, scaler, cfg["grad_clip"], after_step)

            iter_num += 1
            tokens_since += tokens_per_iter
            if iter_num % cfg["log_interval"] == 0 and dist.master:
                now = time.time()
                eta, untimed = T.eta(iter_num, start_iter, cfg["max_iters"], cfg["eval_interval"],
                                     now - t_start - eval_time, eval_time, evals_done, final_evaluate is not None)
                run_log.step(iter_num, loss_value, lr, tokens_since / max(now - t_last, 1e-9), now - t_start, eta,
                             cfg["max_iters"], tasks.to_float(metric_sums), untimed)
                t_last, tokens_since = now, 0
    except ConfigError:
        raise  # a configuration error: nothing was trained
    except BaseException as e:  # non-finite loss, Ctrl-C, out of memory, a bug: the run keeps a manifest
        if dist.master:
            run_log.close()
            reason = stop_reason or f"{type(e).__name__}: {e}".rstrip(": ")
            provenance.record(os.path.join(cfg["out_dir"], f"train_stopped_at_{iter_num}"), commit=commit,
                              command=command, extra={"stopped": reason})
        raise

    if dist.master:
        new_run = cfg["init_from"] == "scratch" and not cfg["eval_only"]
        if final_evaluate is not None:  # on best.pt's weights if it is this run's
            T.final_evaluation(task, raw_model, data, cfg, device, autocast, run_log, iter_num, start_iter,
                               time.time() - t_start - eval_time, use_best=best_written or cfg["init_from"] == "resume")
        if new_run and not best_written and os.path.exists(best_path):
            os.remove(best_path)  # an earlier run's, once this run has written its own files
        run_log.close()
        # out_dir/manifest.json: how this run was made ("train", or one entry per resumption)
        entry = "train" if start_iter == 0 else f"train_resumed_at_{start_iter}"
        provenance.record(os.path.join(cfg["out_dir"], entry), commit=commit, command=command)
        if not cfg["eval_only"]:
            print(f"done: {iter_num - start_iter} iterations ({start_iter} -> {iter_num}) in "
                  f"{T.format_duration(time.time() - t_start)} wall time", flush=True)
    return metrics


if __name__ == "__main__":
    configurator.run_cli(main)
