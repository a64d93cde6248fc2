"""The LRA config layers give every (task, attention, size) the settings of the tables below, and
the GPU settings are LRA's own (google-research/long-range-arena, lra_benchmarks/*/configs/
base_*_config.py and each task's train.py).

A run is ``configs/lra/<task><size>.py configs/attention/<attention>.py`` plus, where it exists,
the override of that task and attention, ``configs/lra/<attention>/<task><size>.py`` (size "" =
the papers' setting for a GPU, "_cpu" = this machine; scripts/sweeps/lra.sh follows the same rule).
"""
import math
import os

import pytest

import attention as attention_lib
import configurator
import train
import training
from attention import reformer
from data import lra
from tasks import classify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")
ATTENTIONS = ("softmax", "fastmax1", "fastmax2", "dense", "longformer", "bigbird", "reformer")
SIZES = ("", "_cpu")


def layers(task, attention, size=""):
    """The config files of one LRA run, in order."""
    files = [os.path.join(CONFIGS, "lra", f"{task}{size}.py"), os.path.join(CONFIGS, "attention", f"{attention}.py")]
    override = os.path.join(CONFIGS, "lra", attention, f"{task}{size}.py")
    return files + [override] if os.path.exists(override) else files


# ------------------------------------------------------------------ what each run is
ATTENTION = {"softmax": dict(attention="softmax"),
             "fastmax1": dict(attention="fastmax", attention_params={"p": 1}),
             "fastmax2": dict(attention="fastmax", attention_params={"p": 2}),
             "dense": dict(block="danet", attention="dense", attention_params={"regime": "auto"}, pos_emb="cosine_relpe",
                           layer_scheme="LSG")}

# GPU, softmax / fastmax: LRA's TransformerEncoder and Adam for every task, then the keys that differ
GPU_COMMON = dict(dropout=0.1, pos_emb="sinusoidal", embedding_init_std=1.0, beta1=0.9, beta2=0.98, adam_eps=1e-9,
                  grad_clip=0.0, eval_max_batches=0, log_interval=50, device="cuda")
GPU_KEYS = ("max_len", "pooling", "n_layer", "n_head", "n_embd", "batch_size", "max_iters", "warmup_iters",
            "learning_rate", "weight_decay", "eval_interval")
GPU = {"listops": (2000, "cls", 4, 8, 512, 32, 5000, 1000, 0.0015811, 0.1, 500),
       "text": (1000, "cls", 4, 4, 256, 32, 20000, 8000, 0.000559, 0.1, 1000),
       "retrieval": (4000, "cls", 4, 4, 128, 32, 5000, 8000, 0.000559, 0.1, 500),
       "image": (1024, "cls", 1, 1, 32, 256, 35000, 175, 5e-4, 0.0, 175),
       "pathfinder": (1024, "mean", 1, 2, 32, 512, 62400, 312, 1e-3, 0.0, 312)}
GPU_TASK = {"listops": dict(lr_schedule="rsqrt"), "text": dict(lr_schedule="rsqrt"), "retrieval": dict(lr_schedule="rsqrt"),
            "image": dict(lr_decay_iters=35175, min_lr=0.0, dropout=0.3, pos_emb="learned"),
            "pathfinder": dict(lr_decay_iters=62712, min_lr=0.0, lra_options={"resolution": 32, "num": 200000,
                                                                            "difficulty": "curv_contour_length_14"})}

# GPU, dense: the DenseAttention authors' configs over LRA's (Adam: train.py's defaults, not LRA's)
DENSE_COMMON = dict(lr_schedule="cosine", min_lr=0.0, beta2=0.99, adam_eps=1e-8, grad_clip=1.0, embedding_init_std=0.02)
DENSE_KEYS = ("n_layer", "n_head", "n_embd", "window", "ffn_linf_norm", "dropout", "pooling", "batch_size", "max_iters",
              "warmup_iters", "lr_decay_iters", "learning_rate", "weight_decay", "eval_interval")
DENSE = {"listops": (9, 8, 512, 20, 0.01562, 0.05, "cls", 128, 75000, 7500, 75000, 1e-3, 0.1, 750),
         "text": (9, 8, 512, 10, 0.01562, 0.1, "mean", 100, 16250, 1280, 12800, 2e-3, 0.1, 250),
         "retrieval": (6, 4, 128, 10, 0.03125, 0.05, "cls", 32, 150000, 7500, 150000, 1e-3, 0.0, 4600),
         "image": (9, 4, 256, 64, 0.0221, 0.05, "mean", 256, 45000, 2250, 45000, 1e-2, 0.1, 175),
         "pathfinder": (6, 8, 128, 256, 0.03125, 0.0, "cls", 100, 320000, 32000, 320000, 1e-3, 0.1, 1600)}
DENSE_TASK = {"text": dict(max_len=4000, lra_options={"val": "test"})}

# this machine: one small model and train.py's optimizer for every task and attention (the values
# of the defaults the files rely on are pinned here), then the keys that differ
CPU_COMMON = dict(n_layer=2, n_head=2, n_embd=64, dropout=0.0, learning_rate=1e-3, min_lr=1e-4, warmup_iters=100,
                  weight_decay=0.1, lr_schedule="cosine", log_interval=10)
CPU_KEYS = ("max_len", "pooling", "batch_size", "max_iters", "eval_interval", "eval_max_batches", "test_max_batches",
            "lra_options")
CPU = {"listops": (2000, "cls", 8, 1200, 200, 32, 0, {"workers": 1}),
       "text": (1000, "mean", 16, 4000, 500, 20, 250, {}),
       "retrieval": (4000, "cls", 4, 300, 100, 25, 100, {}),
       "image": (1024, "cls", 16, 600, 100, 0, 0, {}),
       "pathfinder": (1024, "mean", 16, 1500, 250, 32, 0, {"resolution": 32, "difficulty": "curv_contour_length_14",
                                                          "num": 20000, "workers": 1})}
CPU_DENSE = dict(n_layer=3, ffn_linf_norm=0.04419)  # the window: the authors', as in DENSE

# the sparse methods: the task's model with configs/attention/<name>.py and LRA's own attention
# settings (configs/lra/<name>/<task>[_cpu].py; the same at both sizes, the CPU configs keep LRA's
# lengths). Reformer: 1 hash, 10 buckets and 10 chunks of LRA's chunk length per task (REFORMER_CHUNK).
SPARSE = {"longformer": dict(window=256, num_global=0),
          "bigbird": dict(block_size_sparse=64, num_random_blocks=3, num_window_blocks=3, num_global_blocks=2, seed=0),
          "reformer": dict(n_hashes=1, seed=0)}
REFORMER_CHUNK = {"listops": 201, "text": 101, "retrieval": 401, "image": 103, "pathfinder": 103}


def sparse(attention, task):
    """The attention keys of a sparse method's LRA run on ``task``."""
    params = dict(SPARSE[attention])
    if attention == "reformer":
        params.update(bucket_size=REFORMER_CHUNK[task], chunk_size=REFORMER_CHUNK[task])
    return dict(attention=attention, attention_params=params)


def expected(task, attention, size):
    """train.py's defaults, then the tables' entries for this run, later ones winning."""
    dense = dict(zip(DENSE_KEYS, DENSE[task]))
    method = sparse(attention, task) if attention in SPARSE else ATTENTION[attention]
    if size == "_cpu":
        row = dict(zip(CPU_KEYS, CPU[task]))
        parts = [CPU_COMMON, row, {"lr_decay_iters": row["max_iters"]}, method]
        parts += [CPU_DENSE, {"window": dense["window"]}] if attention == "dense" else []
    else:
        parts = [GPU_COMMON, dict(zip(GPU_KEYS, GPU[task])), GPU_TASK[task], method]
        parts += [DENSE_COMMON, dense, DENSE_TASK.get(task, {})] if attention == "dense" else []
    cfg = dict(training.DEFAULTS, task="classify", lra_task=task)
    for part in parts:
        cfg.update(part)
    return cfg


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("task", lra.TASKS)
def test_layers_give_each_run_its_settings(task, attention, size):
    cfg = configurator.parse(train.DEFAULTS, layers(task, attention, size))
    want = expected(task, attention, size)
    assert {k: v for k, v in cfg.items() if k != "out_dir"} == {k: v for k, v in want.items() if k != "out_dir"}


# LRA's positions per sequence: max_len + CLS with CLS pooling, except in the two-tower (Retrieval)
# encoders, which prepend none (lra_benchmarks/models/*/: classifier=False per tower)
LRA_POSITIONS = {"listops": 2001, "text": 1001, "retrieval": 4000, "image": 1025, "pathfinder": 1024}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("task", lra.TASKS)
def test_sparse_lra_settings_fit_the_run_length(task, size):
    """At the run's length: Longformer's window and BigBird's blocks cover part of the sequence
    (not softmax); Reformer has LRA's 10 buckets and 10 chunks, a chunk being LRA's (its length
    padded by 10 - T % 10 positions, then cut into n_hashes * n_buckets = 10 chunks)."""
    for attention in SPARSE:
        cfg = configurator.parse(train.DEFAULTS, layers(task, attention, size))
        T, p = classify.seq_len(cfg), cfg["attention_params"]
        if attention == "longformer":
            assert 2 * p["window"] + 1 < T
        elif attention == "bigbird":
            assert p["num_window_blocks"] + p["num_random_blocks"] + p["num_global_blocks"] < math.ceil(
                T / p["block_size_sparse"])
        else:
            lra_T = LRA_POSITIONS[task]
            assert p["chunk_size"] == p["bucket_size"] == (lra_T + 10 - lra_T % 10) // 10
            assert reformer.bucket_count(T, p["bucket_size"]) == 10 and math.ceil(T / p["chunk_size"]) == 10


EVERY_ATTENTION = sorted(f[:-3] for f in os.listdir(os.path.join(CONFIGS, "attention")) if f.endswith(".py"))


def test_every_lra_config_file_is_a_layer_of_some_run():
    used = {os.path.relpath(f, CONFIGS) for t in lra.TASKS for a in EVERY_ATTENTION for s in SIZES
            for f in layers(t, a, s)}
    files = {os.path.relpath(os.path.join(d, f), CONFIGS) for d, _, names in os.walk(os.path.join(CONFIGS, "lra"))
             for f in names if f.endswith(".py")}
    assert files <= used, f"not a layer of any LRA run: {sorted(files - used)}"
    overrides = {os.path.dirname(f) for f in files} - {"lra"}
    # the task at two sizes, and an attention's override (all tasks, both sizes) where LRA's setting differs
    assert len(files) == 5 * 2 + len(overrides) * 5 * 2


@pytest.mark.parametrize("attention", [a for a in EVERY_ATTENTION if attention_lib.is_trainable(
    configurator.parse(train.DEFAULTS, [os.path.join(CONFIGS, "attention", f"{a}.py")])["attention"])])
def test_every_trainable_attention_layers_on_every_lra_task(attention):
    for task in lra.TASKS:
        for size in SIZES:
            cfg = configurator.parse(train.DEFAULTS, layers(task, attention, size))
            attention_lib.check_params(cfg["attention"], cfg["attention_params"])


def test_out_dir_is_named_from_the_layers():
    assert training.layered_out_dir(layers("text", "fastmax1")) == os.path.join("out", "lra", "text_fastmax1")
    assert training.layered_out_dir(layers("text", "fastmax1", "_cpu")) == os.path.join("out", "lra", "text_cpu_fastmax1")
    assert training.layered_out_dir(layers("text", "dense")) == os.path.join("out", "lra", "text_dense")
    assert training.layered_out_dir(layers("text", "dense", "_cpu")) == os.path.join("out", "lra", "text_cpu_dense")


# task: (schedule, peak learning rate, warmup, steps, weight decay) from LRA's base configs
LRA = {"listops": ("rsqrt", 0.05 / 1000 ** 0.5, 1000, 5000, 0.1),
       "text": ("rsqrt", 0.05 / 8000 ** 0.5, 8000, 20000, 0.1),
       "retrieval": ("rsqrt", 0.05 / 8000 ** 0.5, 8000, 5000, 0.1),
       "image": ("cosine", 5e-4, 175, 35000, 0.0),
       "pathfinder": ("cosine", 1e-3, 312, 62400, 0.0)}


@pytest.mark.parametrize("task", sorted(LRA))
@pytest.mark.parametrize("attention", ["softmax", "fastmax1", "fastmax2"])
def test_gpu_configs_take_lras_settings(task, attention):
    cfg = configurator.parse(train.DEFAULTS, layers(task, attention))
    schedule, peak, warmup, steps, decay = LRA[task]
    assert (cfg["beta1"], cfg["beta2"], cfg["adam_eps"], cfg["grad_clip"]) == (0.9, 0.98, 1e-9, 0.0)
    assert (cfg["lr_schedule"], cfg["warmup_iters"], cfg["max_iters"], cfg["weight_decay"]) == \
        (schedule, warmup, steps, decay)
    assert cfg["learning_rate"] == pytest.approx(peak, rel=1e-4)
    if schedule == "rsqrt":  # LRA: base * min(1, t / w) / sqrt(max(t, w))
        t = steps - 1
        expected = 0.05 / t ** 0.5 if t >= warmup else 0.05 * (t + 1) / (warmup + 1) / warmup ** 0.5
        assert training.get_lr(t, cfg) == pytest.approx(expected, rel=1e-4)  # Retrieval never leaves warmup
    else:  # cosine_decay over steps_per_cycle = all steps from the end of warmup, no floor
        assert cfg["min_lr"] == 0.0 and cfg["lr_decay_iters"] == warmup + steps
        mid = warmup + steps // 2
        progress = (mid - warmup) / steps
        assert training.get_lr(mid, cfg) == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * progress)), rel=1e-6)
