"""The LRA GPU configs carry the settings of LRA's own files (google-research/long-range-arena,
lra_benchmarks/*/configs/base_*_config.py and each task's train.py), and the committed files are
exactly what scripts/make_lra_configs.py writes."""
import importlib
import math
import os

import pytest

import configurator
import train
import training

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs", "lra")

# task: (schedule, peak learning rate, warmup, steps, weight decay) from LRA's base configs
LRA = {"listops": ("rsqrt", 0.05 / 1000 ** 0.5, 1000, 5000, 0.1),
       "text": ("rsqrt", 0.05 / 8000 ** 0.5, 8000, 20000, 0.1),
       "retrieval": ("rsqrt", 0.05 / 8000 ** 0.5, 8000, 5000, 0.1),
       "image": ("cosine", 5e-4, 175, 35000, 0.0),
       "pathfinder": ("cosine", 1e-3, 312, 62400, 0.0)}


@pytest.mark.parametrize("task", sorted(LRA))
@pytest.mark.parametrize("attention", ["softmax", "fastmax1", "fastmax2"])
def test_gpu_configs_take_lras_settings(task, attention):
    cfg = configurator.parse(train.DEFAULTS, [os.path.join(CONFIGS, f"{task}_{attention}.py")])
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


def test_committed_configs_are_what_the_generator_writes(tmp_path, monkeypatch):
    make = importlib.import_module("scripts.make_lra_configs")
    monkeypatch.setattr(make, "OUT", str(tmp_path))
    make.main()
    for name in sorted(os.listdir(tmp_path)):
        with open(tmp_path / name) as a, open(os.path.join(CONFIGS, name)) as b:
            assert a.read() == b.read(), f"configs/lra/{name} differs from scripts/make_lra_configs.py's output"
