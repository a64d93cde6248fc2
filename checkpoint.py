"""Saving and loading trained models: our checkpoints and Hugging Face GPT-2.

``load`` is the one way to get a trained model (a run of ours or a Hugging Face GPT-2); ``read`` is
the one reader of a checkpoint file; ``save`` and ``save_best`` the only writers. The model class of
a checkpoint is its task's (``tasks.<task>.MODEL``), so a new task's checkpoints load with no edit
here.

Files (written atomically by ``save`` / ``save_best``: a temporary file, then a rename, so a crash
never leaves a half-written checkpoint and the previous one stays until the new one is whole):

- ``out_dir/ckpt.pt``: ``model`` (state dict), ``optimizer``, ``model_args``
  (``model.config_dict``), ``iter_num``, ``best_val_loss``, ``best_metric`` ({name, mode,
  value}), ``config`` (the run's whole configuration), ``task``, ``scaler``, ``rng_state`` (rank
  0's CPU generator), ``rng_states`` (every rank's torch, CUDA, NumPy and Python generators) and
  ``world_size``.
- ``out_dir/best.pt`` (tasks with a ``final_evaluate``): ``model``, ``model_args``, ``iter_num``,
  ``best_metric`` of the best BEST_METRIC so far.

Hugging Face GPT-2 (``gpt2_from_hf``): our parameter names follow GPT-2's
(``transformer.wte``, ``transformer.h.N.attn.c_attn``, ...), so its weights load with a transpose of
the Conv1D matrices only.
"""
import os

import torch

import data as data_lib
import tasks
from model import GPT, ModelConfig, config_dict


class CheckpointError(ValueError):
    """A file that should be a checkpoint of ours and is not (``read``)."""


def read(path):
    """The dict train.py saved at ``path`` (ckpt.pt or best.pt), on the CPU. ``load`` builds the
    model from it; train.py's resume reads the optimizer and generator states from it.

    Raises:
        FileNotFoundError: no file at ``path``.
        CheckpointError (a ValueError): the file is not a checkpoint train.py wrote (truncated,
            another format); the message names the file.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}; train one with train.py")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a truncated zip, a text file, a pickle of something else: all "not a checkpoint"
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(e).__name__}: {str(e)[:120]}); "
                              f"train.py writes them whole, so it is damaged or not one of ours") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or ("model_args" not in ckpt and "config" not in ckpt):
        raise CheckpointError(f"{path} is not a checkpoint written by train.py (expected a dict with 'model' and "
                              f"'model_args')")
    return ckpt


def task_of(ckpt):
    """The task a checkpoint dict was trained on."""
    # ckpt["task"] (and config["task"]) are saved since bbbf0fb (2026-11-22, one loop for every task);
    # the checkpoints written before it have neither and are all language models
    return ckpt.get("task", "lm")


def build_model(state, task):
    """The model of a checkpoint dict (in training mode): the task's ``MODEL`` class built from
    ``state["model_args"]`` (a ``ModelConfig`` as a dict), with ``state["model"]``'s weights.

    Raises:
        configurator.ConfigError (a ValueError): ``task`` is not a registered task.
        RuntimeError: the weights do not fit the model (``load_state_dict``).
    """
    model = tasks.get(task).MODEL(ModelConfig(**state["model_args"]))
    model.load_state_dict(state["model"])
    return model


def load(source, weights="ckpt.pt"):
    """The one way to load a trained model: a run of ours or a Hugging Face GPT-2.

    Args:
        source (str): a run directory (holding ``ckpt.pt``, as train.py writes it), a checkpoint
            file of ours (``*.pt``), or a Hugging Face GPT-2 (hub name such as "gpt2", or a
            local directory in HF format, i.e. with a ``config.json``).
        weights (str): for a run directory, the file whose weights are loaded: "ckpt.pt" (the
            last checkpoint) or "best.pt" (the best BEST_METRIC, which classify runs keep); the
            run's configuration always comes from ckpt.pt.

    Returns:
        (model, run_config, meta): the model (its task's ``MODEL``) on the CPU in eval mode;
        the training configuration dict (None for Hugging Face); meta: dict with "source"
        ("checkpoint" | "huggingface"), "path", "task", "iter_num" (step of the weights) and
        "checkpoint" (the whole ckpt.pt dict: optimizer, generator states, ... for train.py's
        resume; None for Hugging Face).

    Raises:
        FileNotFoundError: no checkpoint file where one was named or expected.
        ValueError: a checkpoint of an unknown task; a Hugging Face model that is not GPT-2.
        OSError: from transformers, when a hub model cannot be found or downloaded.
    """
    source = str(source)
    if not os.path.exists(source) and (os.path.isabs(source) or source.startswith((".", "~")) or source.endswith(".pt")):
        raise FileNotFoundError(f"no checkpoint at {source} (not a run directory, a checkpoint file or a Hugging Face "
                                f"model directory)")
    is_run = os.path.isdir(source) and not os.path.exists(os.path.join(source, "config.json"))
    if not is_run and not source.endswith(".pt"):
        model = gpt2_from_hf(source).eval()
        return model, None, {"source": "huggingface", "path": source, "task": "lm", "iter_num": None,
                             "checkpoint": None}
    ckpt_path = os.path.join(source, "ckpt.pt") if is_run else source
    weights_path = os.path.join(source, weights) if is_run else source
    ckpt = read(ckpt_path)
    task = task_of(ckpt)
    if task not in tasks.available():
        raise ValueError(f"{ckpt_path}: unknown task {task!r}; known: {', '.join(tasks.available())}")
    state = ckpt if weights_path == ckpt_path else read(weights_path)
    model = build_model(state, task)
    iter_num = state.get("iter_num")
    return model.eval(), ckpt.get("config"), {"source": "checkpoint", "path": weights_path, "task": task,
                                              "iter_num": None if iter_num is None else int(iter_num),
                                              "checkpoint": ckpt}


def _atomic_save(obj, path):
    """``torch.save(obj, path)`` through ``data.atomic_write`` (a temporary file, then a rename)."""
    data_lib.atomic_write(path, lambda tmp: torch.save(obj, tmp))


def save(path, model, optimizer, scaler, cfg, iter_num, best, rng_states, world_size):
    """Write a run's ``ckpt.pt`` (the fields in the module docstring) atomically.

    Args:
        model: the unwrapped model (a ``.config`` ModelConfig); optimizer, scaler: their state
        dicts are saved; cfg (dict): the run's configuration (``cfg["task"]`` is stored too);
        iter_num (int): the step; best: (name, mode, value) of the task's BEST_METRIC;
        rng_states (list of dict): every rank's generator states (``training.Dist.gather``);
        world_size (int): the number of DDP ranks.
    """
    name, mode, value = best
    _atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "model_args": config_dict(model.config), "iter_num": iter_num,
                  "best_val_loss": value if name == "val_loss" else None,
                  "best_metric": {"name": name, "mode": mode, "value": value},
                  "config": cfg, "task": cfg["task"], "scaler": scaler.state_dict(),
                  "rng_state": rng_states[0]["torch"], "rng_states": rng_states, "world_size": world_size}, path)


def save_best(path, model, iter_num, name, value):
    """Write ``best.pt`` (the weights of the best BEST_METRIC so far: ``name``, ``value``, at step
    ``iter_num``) atomically."""
    _atomic_save({"model": model.state_dict(), "model_args": config_dict(model.config), "iter_num": iter_num,
                  "best_metric": {"name": name, "value": value}}, path)


def gpt2_from_hf(name_or_path, attention_name="softmax", attention_params=None):
    """A ``GPT`` with a Hugging Face GPT-2's weights (hub name such as "gpt2", "gpt2-medium", or a
    local directory in HF format), read through ``transformers``; HF's Conv1D weights (in, out)
    are transposed, the LM head stays tied to the token embedding.

    Args:
        attention_name (str), attention_params (dict): the attention of every block (a registered
            name; GPT-2 was trained with "softmax", others are swapped in at inference).

    Raises:
        ValueError: the checkpoint is not a GPT-2 with the tanh-GELU ("gelu_new") MLP, or lacks
            GPT-2 parameters.
        OSError: from transformers if the model cannot be found or downloaded.
    """
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(name_or_path)
    c = hf.config
    if c.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"{name_or_path}: activation {c.activation_function!r} not supported; expected gelu_new")
    config = ModelConfig(block_size=c.n_positions, vocab_size=c.vocab_size, n_layer=c.n_layer,
                         n_head=c.n_head, n_embd=c.n_embd, bias=True,
                         layer_norm_epsilon=c.layer_norm_epsilon, attention=attention_name,
                         attention_params=dict(attention_params or {}))
    model = GPT(config)
    ours = model.state_dict()
    theirs = {k: v for k, v in hf.state_dict().items()
              if not k.endswith((".attn.bias", ".attn.masked_bias")) and k != "lm_head.weight"}
    transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    missing = set(ours) - set(theirs) - {"lm_head.weight"}
    if missing:
        raise ValueError(f"{name_or_path}: missing GPT-2 parameters {sorted(missing)[:5]}")
    with torch.no_grad():
        for k, v in theirs.items():
            ours[k].copy_(v.t() if k.endswith(transposed) else v)
    return model
