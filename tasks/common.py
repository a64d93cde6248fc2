"""What the task modules share: the seeding convention of batches, the model config of a run,
the mean of a task's metrics over fixed evaluation batches, metrics as floats."""
import time

import torch

from configurator import ConfigError


def model_config(cfg, **sizes):
    """``model.config_from_run(cfg, **sizes)`` (the one builder of a model's config from a run's)
    with its ValueError as a ConfigError naming what is wrong.

    Raises:
        ConfigError: unknown attention or parameter, or an invalid architecture combination.
    """
    import model

    try:
        return model.config_from_run(cfg, **sizes)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def batch_seed(cfg, rank, it, micro_step, stream=0):
    """Seed of one batch: distinct and reproducible per (seed, stream, rank, iteration,
    micro-step). Stream 0 = training batches, 1 = evaluation batches."""
    return [cfg["seed"], stream, rank, it, micro_step]


def mean_over_batches(task, model, data, split, cfg, device, n_batches):
    """Mean of each metric of ``task.loss`` over ``n_batches`` fixed batches of ``split``
    (evaluation stream; the same batches at every call), with a tqdm bar (tokens/s) on stderr.

    Returns:
        dict metric name -> float (the "loss" metric is the mean loss).
    """
    from tqdm import tqdm

    sums, t0 = {}, time.perf_counter()
    tokens = task.batch_tokens(cfg)
    with tqdm(range(n_batches), desc=f"eval {split}", unit="batch", disable=None, leave=False) as bar:
        for k in bar:
            batch = task.get_batch(data, split, cfg, batch_seed(cfg, 0, k, 0, stream=1), device)
            loss, metrics = task.loss(model, batch)
            for name, value in {"loss": loss, **metrics}.items():
                sums[name] = sums.get(name, 0.0) + float(value)
            bar.set_postfix(tok_per_s=f"{(k + 1) * tokens / max(time.perf_counter() - t0, 1e-9):,.0f}")
    return {name: total / n_batches for name, total in sums.items()}


def to_float(metrics):
    """A metrics dict with every value (float or 0-dim tensor) as a Python float."""
    return {k: float(v.item() if isinstance(v, torch.Tensor) else v) for k, v in metrics.items()}
