"""Plugging in from outside the repository (``--import=FILE``, ``configurator.import_files``): a toy
attention and a toy task written to a temporary folder, each one file that registers itself, with
no edit of the repository. The attention passes the contract test (run by pytest with
``--import``), trains for 5 steps and is benchmarked; a toy with a decode path passes the decode
test; the task trains, resumes and its checkpoint
loads. These two files are what docs/architecture.md's rows "a new attention" / "a new task" say a
user needs outside the repository."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import configurator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOY_ATTENTION = textwrap.dedent('''
    """Softmax attention with its scores scaled by temperature / sqrt(D) (a toy for the tests)."""
    import math

    import torch

    import attention


    @attention.register("toy_tempered_softmax")
    class TemperedSoftmax(attention.Attention):
        causal = "exact"
        example_params = {"temperature": 0.5}

        def __init__(self, temperature=1.0):
            super().__init__()
            if not temperature > 0:
                raise ValueError(f"temperature must be > 0; got {temperature}")
            self.temperature = temperature

        def forward(self, q, k, v, causal, attention_mask=None):
            T = q.shape[-2]
            scores = (q @ k.transpose(-2, -1)) * (self.temperature / math.sqrt(q.shape[-1]))
            allowed = torch.ones(T, T, dtype=torch.bool, device=q.device)
            if causal:
                allowed = allowed.tril()
            if attention_mask is not None:
                allowed = allowed & attention_mask[:, None, None, :]
            allowed = allowed.expand(scores.shape)
            empty = ~allowed.any(-1, keepdim=True)  # a row without a real key attends to nothing
            scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(empty, 0.0)
            return (torch.softmax(scores, dim=-1).masked_fill(~allowed, 0.0) @ v).to(v.dtype)
''')

TOY_DECODER = textwrap.dedent('''
    """The mean of the values of the real tokens up to each position (a toy with a decode state)."""
    import torch

    import attention


    @attention.register("toy_running_mean")
    class RunningMean(attention.Attention):
        causal = "exact"
        decode = "state"

        def forward(self, q, k, v, causal, attention_mask=None):
            w = torch.ones(v.shape[0], 1, v.shape[2], 1, dtype=v.dtype, device=v.device)
            if attention_mask is not None:
                w = attention_mask[:, None, :, None].to(v.dtype)
            if causal:
                return (v * w).cumsum(2) / w.cumsum(2).clamp_min(1)
            return ((v * w).sum(2, keepdim=True) / w.sum(2, keepdim=True).clamp_min(1)).expand_as(v)

        def prefill(self, q, k, v, attention_mask=None):
            w = torch.ones(v.shape[0], 1, v.shape[2], 1, dtype=v.dtype, device=v.device)
            if attention_mask is not None:
                w = attention_mask[:, None, :, None].to(v.dtype)
            state = {"total": (v * w).sum(2, keepdim=True), "count": w.sum(2, keepdim=True)}
            return self.forward(q, k, v, True, attention_mask), state

        def step(self, q_t, k_t, v_t, state):
            state["total"] += v_t
            state["count"] += 1
            return state["total"] / state["count"], state
''')

TOY_TASK = textwrap.dedent('''
    """Copy the previous token of a random sequence (a toy task for the tests)."""
    import sys

    import numpy as np
    import torch

    import tasks
    from model import GPT
    from tasks import common

    DEFAULTS = dict(toy_vocab=16)
    HELP = dict(toy_vocab="tokens of the toy copy task")
    MODEL = GPT
    MODEL_KEYS = ("block_size", "toy_vocab")
    DATA_KEYS = ()
    BEST_METRIC = ("val_loss", "min")
    CAUSAL = True
    IGNORED_KEYS = {"dataset": "the sequences are random"}


    def prepare_data(cfg):
        pass


    def load_data(cfg):
        return {"manifest": {"source": "generated", "train_size": None, "train_size_unit": "sequences"}}


    def build_model(cfg, data):
        return MODEL(common.model_config(cfg, block_size=cfg["block_size"], vocab_size=cfg["toy_vocab"]))


    def get_batch(data, split, cfg, seed, device):
        rng = np.random.default_rng(seed + [0 if split == "train" else 1])
        x = torch.from_numpy(rng.integers(0, cfg["toy_vocab"], (cfg["batch_size"], cfg["block_size"]))).to(device)
        return {"idx": x, "targets": torch.cat([torch.full_like(x[:, :1], -1), x[:, :-1]], dim=1)}


    def loss(model, batch):
        return model(batch["idx"], batch["targets"])[1], {}


    def evaluate(model, data, cfg, device):
        return {"val_loss": common.mean_over_batches(sys.modules[__name__], model, data, "val", cfg, device, 2)["loss"]}


    def batch_tokens(cfg):
        return cfg["batch_size"] * cfg["block_size"]


    tasks.register("toy_copy", __name__)
''')

TINY = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=4", "--eval_interval=5",
        "--eval_iters=2", "--log_interval=1", "--warmup_iters=0", "--num_threads=1"]


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "toy_attention.py").write_text(TOY_ATTENTION)
    (folder / "toy_decoder.py").write_text(TOY_DECODER)
    (folder / "toy_task.py").write_text(TOY_TASK)
    return folder


def run(args, timeout=600):
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_contract_test_checks_an_imported_attention(plugins):
    out = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/attention/test_contract.py",
               f"--import={plugins / 'toy_attention.py'}", "-k", "toy_tempered_softmax"])
    passed = int(out.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 15 and "failed" not in out.splitlines()[-1]


def test_the_decode_test_checks_an_imported_decoder(plugins):
    out = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/attention/test_decode.py",
               f"--import={plugins / 'toy_decoder.py'}", "-k", "toy_running_mean"])
    passed = int(out.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed == 3 and "failed" not in out.splitlines()[-1]  # steps with and without padding, float32


def test_an_imported_task_and_attention_train_resume_and_load(plugins, tmp_path):
    out_dir = tmp_path / "run"
    imports = [f"--import={plugins / 'toy_attention.py'}", "--import", str(plugins / "toy_task.py")]
    log = run(["train.py", *imports, "--task=toy_copy", "--toy_vocab=12", "--attention=toy_tempered_softmax",
               "--attention.temperature=0.5", "--max_iters=5", f"--out_dir={out_dir}", *TINY])
    assert "step 5: " in log and (out_dir / "ckpt.pt").exists()
    log = run(["train.py", *imports, "--init_from=resume", f"--out_dir={out_dir}", "--max_iters=7"])
    assert "step 7: " in log
    records = [json.loads(line) for line in (out_dir / "log.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in records if "eval" in r] == [5, 7]  # resumed at 5, not restarted
    loaded = run(["-c", "import configurator, checkpoint; "
                  f"configurator.import_files({imports!r}); "
                  f"m, cfg, meta = checkpoint.load({str(out_dir)!r}); "
                  "print(type(m).__name__, meta['task'], meta['iter_num'], m.config.attention, m.config.vocab_size)"])
    assert loaded.split() == ["GPT", "toy_copy", "7", "toy_tempered_softmax", "12"]


def test_the_benchmark_measures_an_imported_attention(plugins, tmp_path):
    run(["-m", "scripts.bench.attention", f"--import={plugins / 'toy_attention.py'}", "--methods",
         "toy_tempered_softmax", "--T=32", "--D=8", "--heads=2", "--threads=1", "--repeats=1", "--memory=none",
         "--modes=fwd", "--causal=True", f"--out={tmp_path / 'bench'}"])
    rows = (tmp_path / "bench.csv").read_text().splitlines()
    assert len(rows) == 2 and "toy_tempered_softmax" in rows[1]


def test_import_errors_are_one_line(tmp_path):
    with pytest.raises(configurator.ConfigError, match="not a Python file"):
        configurator.import_files([f"--import={tmp_path / 'missing.py'}"])
    with pytest.raises(configurator.ConfigError, match="needs a Python file"):
        configurator.import_files(["--import"])
    (tmp_path / "json.py").write_text("x = 1\n")
    with pytest.raises(configurator.ConfigError, match="'json' is already imported"):
        configurator.import_files([f"--import={tmp_path / 'json.py'}"])
    (tmp_path / "harmless_probe_module.py").write_text("VALUE = 42\n")
    rest, paths = configurator.import_files(["a.py", f"--import={tmp_path / 'harmless_probe_module.py'}", "--x=1"])
    assert rest == ["a.py", "--x=1"] and sys.modules["harmless_probe_module"].VALUE == 42
    assert paths == [str(tmp_path / "harmless_probe_module.py")]
    del sys.modules["harmless_probe_module"]
