"""The memory of a training step, estimated before the first one, so that train.py refuses in one
line a run that cannot fit (``check``) instead of failing to allocate after minutes of work.

The estimate is a lower bound of what every step from the second on holds when its backward pass
begins (``estimate``):

    weights + AdamW's two moments + the micro-batch + the activations saved for the backward pass

- weights: every parameter and buffer of the model, as allocated;
- AdamW: ``exp_avg`` and ``exp_avg_sq``, each the size of the trainable parameters (from the first
  optimizer step on);
- the micro-batch: the tensors of the task's ``get_batch`` (the first step's batch, built here);
- activations: every tensor that autograd saves for the backward pass during the forward pass and
  loss of one micro-batch, each storage counted once, parameters and the batch left out. They are
  counted by running the task's ``build_model`` and ``loss`` on fake tensors
  (``torch._subclasses.fake_tensor.FakeTensorMode``: shapes, dtypes and devices, no memory, no
  arithmetic), so that the count follows the code that will run: the attention's (T, T) weights
  where it forms them (``softmax_reference``), not where it does not (``softmax``'s fused kernel),
  the log-softmax of the (B, T, vocabulary) logits, autocast's half-precision copies. With
  ``compile=True`` only the largest saved tensor is counted (the compiled graph may save fewer).
  A size that depends on the batch's values (the positions an MLM batch masks) is symbolic on fake
  tensors and counts 0; code that cannot run on fake tensors at all (a branch on a value, a Triton
  kernel) stops the count where it stands. Either way the check is weaker, never wrong. The count
  costs the Python part of one forward pass (no arithmetic): a tenth of a second for the configs'
  models, about 30 s for Fastmax's chunked loop at T = 100,000.

Gradients, the backward pass's own temporaries and the allocator's overhead come on top, so a run
that passes the check can still run out of memory; one that fails it cannot fit.

What is available (``available``): on a CUDA device its free memory (``torch.cuda.mem_get_info``);
on the CPU ``MemAvailable + SwapFree`` of /proc/meminfo (or ``os.sysconf``'s available pages where
there is no /proc), lowered to the cgroup's limit minus its usage when the process runs in a
container with one; the processes of a DDP run on one machine share it (``LOCAL_WORLD_SIZE``).
"""
import math
import os
import random

import numpy as np
import torch

from configurator import ConfigError


def _nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def _size(n):
    """``n`` bytes as ``12.3 GB`` / ``45.6 MB`` / ``7 kB``."""
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{math.ceil(n / 1e3)} kB"


def _batch_tensors(batch):
    """The tensors of a batch (a dict, tuple or list of tensors, possibly nested)."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        return [t for item in batch for t in _batch_tensors(item)]
    return []


def saved_activations(task, cfg, data, batch, autocast):
    """What autograd saves in the forward pass and loss of ``batch`` through a model built by
    ``task.build_model(cfg, data)`` on fake tensors: a dict with "bytes" (storages counted once;
    parameters, buffers and the batch's own tensors left out), "largest" ((bytes, shape, dtype) of
    the largest, or None), "partial" (None, or the exception that stopped the count: what was
    counted until then is still a lower bound). Sizes that depend on the batch's values (the tokens
    an MLM batch masks: symbolic on fake tensors) count 0. The generators' states are as before."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, has_free_symbols

    device = cfg["device"]
    np_state, py_state = np.random.get_state(), random.getstate()
    cuda = [torch.device(device).index or 0] if device.startswith("cuda") else []
    saved, skip, partial = {}, set(), None

    def pack(t):
        storage = t.untyped_storage()
        nbytes, key = storage.nbytes(), storage._cdata
        if key not in skip and not has_free_symbols(nbytes) and int(nbytes) > saved.get(key, (0,))[0]:
            saved[key] = (int(nbytes), tuple(int(n) if not has_free_symbols(n) else -1 for n in t.shape), t.dtype)
        return t

    try:
        with torch.random.fork_rng(devices=cuda), \
                FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()) as mode:
            with torch.device(device):  # parameters made there (a fake model cannot move)
                model = task.build_model(cfg, data)
            model.train()
            fake_batch = _to_fake(batch, mode, device)
            skip.update(t.untyped_storage()._cdata for t in [*model.parameters(), *model.buffers(),
                                                             *_batch_tensors(fake_batch)])
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
                task.loss(model, fake_batch)
    except Exception as e:  # code that needs real values (.item(), a branch on them, a Triton kernel)
        partial = e
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    largest = max(saved.values(), key=lambda v: v[0]) if saved else None
    return {"bytes": sum(v[0] for v in saved.values()), "largest": largest, "partial": partial}


def _to_fake(batch, mode, device):
    if isinstance(batch, torch.Tensor):
        return mode.from_tensor(batch, static_shapes=True).to(device)
    if isinstance(batch, dict):
        return {k: _to_fake(v, mode, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_fake(v, mode, device) for v in batch)
    return batch


def estimate(task, cfg, data, model, batch, autocast):
    """The lower bound of the module docstring for ``model`` (the run's model, built) and ``batch``
    (its first micro-batch): a dict of bytes ("weights", "optimizer", "batch", "activations",
    "total") with "largest" (bytes, shape, dtype of the largest saved tensor; None when unknown)
    and "note" (why the activations are not counted, or None)."""
    weights = _nbytes([*model.parameters(), *model.buffers()])
    optimizer = 2 * _nbytes([p for p in model.parameters() if p.requires_grad])
    batch_bytes = _nbytes(_batch_tensors(batch))
    saved = saved_activations(task, cfg, data, batch, autocast)
    largest = saved["largest"]
    activations = (largest[0] if largest else 0) if cfg["compile"] else saved["bytes"]
    note = None
    if saved["partial"] is not None:
        note = f"activations counted until the model's code needed real values ({type(saved['partial']).__name__})"
    return {"weights": weights, "optimizer": optimizer, "batch": batch_bytes, "activations": activations,
            "total": weights + optimizer + batch_bytes + activations, "largest": largest, "note": note}


def _meminfo():
    """/proc/meminfo as a dict name -> bytes, or {} where there is none."""
    try:
        with open("/proc/meminfo") as f:
            rows = [line.split() for line in f]
    except OSError:
        return {}
    return {row[0].rstrip(":"): int(row[1]) * (1024 if row[2:] == ["kB"] else 1) for row in rows if len(row) >= 2}


def _cgroup_room():
    """Bytes the process's cgroup (v2) may still allocate, or None without a limit."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            current = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - current, 0)


def available(device):
    """(bytes, where) that a training process on ``device`` can have now, or (None, None) where it
    is unknown (mps): see the module docstring."""
    if device.startswith("cuda"):
        free, total = torch.cuda.mem_get_info(torch.device(device))
        return free, f"{device} has {_size(free)} free of {_size(total)}"
    if device != "cpu":
        return None, None
    info = _meminfo()
    if "MemAvailable" in info:
        room, where = info["MemAvailable"] + info.get("SwapFree", 0), "available (MemAvailable + SwapFree)"
    else:
        try:
            room, where = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "available"
        except (ValueError, OSError, AttributeError):
            return None, None
    cgroup = _cgroup_room()
    if cgroup is not None and cgroup < room:
        room, where = cgroup, "left under its cgroup's memory limit"
    return room, f"this machine has {_size(room)} {where}"


def check(task, cfg, data, model, batch, autocast):
    """Raise ConfigError (one line: the estimate, its parts, what is available, what to lower) when
    ``estimate`` exceeds ``available`` memory; return the estimate otherwise (None where what is
    available is unknown)."""
    room, where = available(cfg["device"])
    if room is None:
        return None
    need = estimate(task, cfg, data, model, batch, autocast)
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if cfg["device"] == "cpu" else 1
    if need["total"] * processes <= room:
        return need
    sizes = f"batch_size={cfg['batch_size']}"
    if "block_size" not in getattr(task, "IGNORED_KEYS", {}):
        sizes += f", block_size={cfg['block_size']}"
    parts = [f"weights {_size(need['weights'])}", f"AdamW state {_size(need['optimizer'])}",
             f"batch {_size(need['batch'])}", f"activations {_size(need['activations'])}"]
    if need["largest"] is not None:
        nbytes, shape, dtype = need["largest"]
        parts[-1] += f", the largest a {tuple(shape)} {str(dtype).replace('torch.', '')} tensor of {_size(nbytes)}"
    if need["note"]:
        parts.append(need["note"])
    each = f" for each of {processes} processes" if processes > 1 else ""
    raise ConfigError(f"a training step with {sizes} needs at least {_size(need['total'])}{each} ({'; '.join(parts)}) "
                      f"but {where}; lower batch_size, block_size or the model's size (gradient_accumulation_steps "
                      f"keeps the tokens per step)")
